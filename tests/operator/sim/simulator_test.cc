#include "operator/sim/simulator.h"

#include <map>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "operator/planner/checker.h"
#include "operator/planner/planner.h"
#include "tests/operator/sim/shared_cluster_workload.h"

namespace orrery::sim {
namespace {

planner::Workload Small() {
  auto w = planner::ParseWorkload(R"(
name: small
cluster: {nodes: 2, gpusPerNode: 2, gpuMemoryGiB: 40}
tasks:
  - {name: a, work: 3600, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10},
                                      {template: fsdp, gpus: 2, batchSize: 16, throughput: 1.8, memoryGiB: 6}]}
  - {name: b, work: 7200, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10},
                                      {template: fsdp, gpus: 2, batchSize: 16, throughput: 1.8, memoryGiB: 6}]}
  - {name: c, work: 1800, arrival: 600, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: d, work: 5400, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10},
                                      {template: fsdp, gpus: 4, batchSize: 32, throughput: 3.2, memoryGiB: 4}]}
)");
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

SimOptions Options(bool introspect) {
  SimOptions o;
  o.engine.introspect = introspect;
  o.engine.solver_time_limit_s = 2;
  o.engine.switch_cost_s = 120;
  o.measure_after_s = 300;
  return o;
}

// Independent check of the recorded intervals: no GPU used twice at once, no
// dead node used, and each task's useful time times its true speed covers its work.
void CheckIntervals(const planner::Workload& w, const SimResult& r, double switch_cost) {
  std::map<planner::GpuSlot, std::vector<std::pair<double, double>>> busy;
  std::map<std::string, double> done;
  std::map<std::string, int> runs;
  EXPECT_EQ(r.launches_refused, 0) << "the engine launched onto GPUs that were not free";
  for (const RunInterval& iv : r.intervals) {
    EXPECT_LT(iv.start, iv.end);
    EXPECT_EQ(static_cast<int>(iv.slots.size()), iv.gpus);
    for (const planner::GpuSlot& g : iv.slots) busy[g].push_back({iv.start, iv.end});
    size_t t = 0;
    while (w.problem.tasks[t].name != iv.task) ++t;
    double thr = 0;
    for (const planner::Config& c : w.problem.tasks[t].configs)
      if (c.template_name == iv.template_name && c.gpus == iv.gpus) thr = c.throughput;
    double delay = runs[iv.task]++ > 0 ? switch_cost : 0;
    if (iv.ended_by != "node-lost")
      done[iv.task] += std::max(0.0, iv.end - iv.start - delay) * thr * w.true_speed[t];
  }
  for (auto& [slot, ivs] : busy) {
    std::sort(ivs.begin(), ivs.end());
    for (size_t i = 1; i < ivs.size(); ++i) EXPECT_GE(ivs[i].first, ivs[i - 1].second - 1e-6);
  }
  for (const planner::Task& t : w.problem.tasks)
    EXPECT_NEAR(done[t.name], t.work, 1e-6 * t.work) << t.name;
}

TEST(SimulatorTest, ExactProfilesReproduceThePlan) {
  planner::Workload w = Small();
  w.problem.tasks[2].arrival = 0;  // one plan, no re-plans: the sim must match it
  auto r = Simulate(w, Options(false), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  auto plan =
      planner::MakeOrreryPlanner()->Solve(w.problem, planner::PlanOptions{2, nullptr, 1, -1});
  ASSERT_TRUE(plan.ok());
  EXPECT_NEAR(r->makespan, plan->makespan, 1e-6);
  EXPECT_EQ(r->switches, 0);
  EXPECT_EQ(r->replans, 1);
  CheckIntervals(w, *r, 120);
}

TEST(SimulatorTest, RunsArrivalsDriftAndNodeEvents) {
  planner::Workload w = Small();
  w.true_speed = {0.7, 1.3, 1.0, 0.75};
  w.events.push_back({planner::ClusterEvent::Kind::kNodeLost, 1000, 1});
  w.events.push_back({planner::ClusterEvent::Kind::kNodeJoined, 2000, -1});
  for (bool introspect : {false, true}) {
    auto r = Simulate(w, Options(introspect), nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tasks, 4);
    EXPECT_EQ(r->node_events, 2);
    EXPECT_EQ(r->nodes_total, 3);
    for (const RunInterval& iv : r->intervals) {
      for (const planner::GpuSlot& g : iv.slots) {
        // Node 1 is gone in [1000, end]; node 2 exists only from 2000.
        if (g.node == 1) {
          EXPECT_LE(iv.start, 1000);
          EXPECT_LE(iv.end, 1000 + 1e-9);
        }
        if (g.node == 2) {
          EXPECT_GE(iv.start, 2000);
        }
      }
    }
    EXPECT_GT(r->gpu_utilisation, 0);
    EXPECT_LE(r->gpu_utilisation, 1 + 1e-9);
    if (introspect) {
      EXPECT_GT(r->replans, 3);  // start, arrival, node events, drift and more
    }
  }
}

// A pool of GPU types goes mid-run: the engine re-plans its tasks onto the
// pool that is left, and every task still finishes.
TEST(SimulatorTest, LostPoolReplansOntoTheOthers) {
  auto w = planner::ParseWorkload(R"(
cluster:
  pools:
    - {gpuType: a100, nodes: 1, gpusPerNode: 4, gpuMemoryGiB: 80, speed: 1}
    - {gpuType: l4, nodes: 2, gpusPerNode: 4, gpuMemoryGiB: 24, speed: 0.8}
tasks:
  - {name: a, work: 3600, profiles: [{template: ddp, gpus: 2, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: b, work: 3600, profiles: [{template: ddp, gpus: 2, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: c, work: 3600, profiles: [{template: ddp, gpus: 2, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: d, work: 3600, profiles: [{template: ddp, gpus: 2, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: e, work: 3600, profiles: [{template: ddp, gpus: 2, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: f, work: 3600, profiles: [{template: ddp, gpus: 2, batchSize: 8, throughput: 1, memoryGiB: 10}]}
events:
  - {type: poolLost, time: 1000, gpuType: l4}
)");
  ASSERT_TRUE(w.ok()) << w.status();
  auto r = Simulate(*w, Options(true), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->violations.empty());
  EXPECT_EQ(r->node_events, 2);
  ASSERT_EQ(r->completion.size(), 6U);
  for (double c : r->completion) EXPECT_GT(c, 0);
  bool used_l4 = false;
  for (const RunInterval& iv : r->intervals) {
    for (const planner::GpuSlot& g : iv.slots) {
      if (g.node == 0) continue;  // the a100 node stays
      used_l4 = true;
      EXPECT_LE(iv.end, 1000 + 1e-9) << iv.task;
    }
  }
  EXPECT_TRUE(used_l4);  // the first plan used both pools
  EXPECT_GE(r->replans, 2);
  // 6 tasks x 3600 GPU-s... of 2 GPUs each on 4 a100 GPUs after the loss: the
  // last ones finish well after the pool went.
  EXPECT_GT(r->makespan, 1000 + 3600);
}

TEST(SimulatorTest, SwitchesPayTheirCostAndWorkIsConserved) {
  planner::Workload w = Small();
  w.true_speed = {0.5, 1.3, 1.0, 0.6};
  for (bool introspect : {false, true}) {
    auto r = Simulate(w, Options(introspect), nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    CheckIntervals(w, *r, 120);
  }
}

TEST(SimulatorTest, DeterministicForASeed) {
  planner::Workload w = Small();
  w.true_speed = {0.7, 1.3, 1.0, 0.75};
  SimOptions o = Options(true);
  o.engine.seed = 3;
  auto a = Simulate(w, o, nullptr);
  auto b = Simulate(w, o, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ResultJson(*a), ResultJson(*b));
}

TEST(SimulatorTest, OutputsCarryEveryInterval) {
  planner::Workload w = Small();
  auto r = Simulate(w, Options(true), nullptr);
  ASSERT_TRUE(r.ok());
  std::string json = ResultJson(*r);
  EXPECT_NE(json.find("\"makespanSeconds\""), std::string::npos);
  EXPECT_NE(json.find("\"batchSize\""), std::string::npos);
  std::string svg = GanttSvg(*r);
  size_t rects = 0;
  for (size_t at = svg.find("<rect class=\"bar\""); at != std::string::npos;
       at = svg.find("<rect class=\"bar\"", at + 1))
    ++rects;
  size_t slots = 0;
  for (const RunInterval& iv : r->intervals) slots += iv.slots.size();
  EXPECT_EQ(rects, slots);
  EXPECT_NE(ResultTable(*r).find("makespan"), std::string::npos);
}

// Another job arrives on the cluster (the operator's cluster share): a
// second GPU adds 20% to the workload's tasks, so the share gives the other
// job's task one of their GPUs; one task stops for it (journalled as the
// share's) and runs on what is left, and once the other job leaves the
// workload plans on the whole cluster again.
TEST(SimulatorTest, AnotherJobsArrivalShrinksTheShareAndItsLeavingGrowsIt) {
  auto w = planner::ParseWorkload(testing::kSharedClusterWorkload);
  ASSERT_TRUE(w.ok()) << w.status();
  SimOptions o = Options(true);
  o.engine.switch_cost_s = 5;
  auto r = Simulate(*w, o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->violations.empty()) << r->violations.front();
  EXPECT_EQ(r->share_stops, 1);
  EXPECT_GE(r->share_decisions, 3);  // arrivals, the other job's, its leaving
  CheckIntervals(*w, *r, 5);
  // While the other job is there, the workload holds at most the 3 GPUs of
  // its share; the share stop is in the journal as an engine action.
  for (double at : {120.0, 180.0}) {
    int held = 0;
    for (const RunInterval& iv : r->intervals) held += iv.start <= at && at < iv.end ? iv.gpus : 0;
    EXPECT_LE(held, 3) << "at " << at;
  }
  bool share_stop = false;
  for (const engine::JournalEntry& e : r->actions) {
    share_stop = share_stop || (e.kind == "stop" && e.detail == "share");
  }
  EXPECT_TRUE(share_stop);
  // After it leaves, both tasks run on two GPUs again.
  int wide_after = 0;
  for (const RunInterval& iv : r->intervals) wide_after += iv.start >= 200 && iv.gpus == 2 ? 1 : 0;
  EXPECT_GE(wide_after, 1);
  EXPECT_NE(ResultTable(*r).find("share stops"), std::string::npos);
}

}  // namespace
}  // namespace orrery::sim

namespace orrery::sim {
namespace {

// The workload's objective is the engine's: on one GPU a long and a short task
// have the same makespan in either order, and a weighted-completion workload
// runs the short one first, so its tasks finish sooner on average.
TEST(SimulatorTest, TheWorkloadsObjectiveIsWhatTheEnginePlansFor) {
  auto run = [](const std::string& objective) {
    auto w = planner::ParseWorkload(R"(
name: one-gpu
objective: )" + objective + R"(
cluster: {nodes: 1, gpusPerNode: 1, gpuMemoryGiB: 40}
tasks:
  - {name: long, work: 3600, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: short, work: 360, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10}]}
)");
    EXPECT_TRUE(w.ok()) << w.status();
    auto r = Simulate(*w, Options(true), nullptr);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : SimResult{};
  };
  const SimResult makespan = run("makespan");
  const SimResult weighted = run("weightedCompletion");
  EXPECT_DOUBLE_EQ(weighted.makespan, makespan.makespan);
  ASSERT_EQ(weighted.completion.size(), 2u);
  EXPECT_LT(weighted.completion[1], weighted.completion[0]) << "the short task first";
  EXPECT_DOUBLE_EQ(weighted.mean_completion, (360.0 + 3960.0) / 2);
  EXPECT_LE(weighted.mean_completion, makespan.mean_completion);
}

}  // namespace
}  // namespace orrery::sim
