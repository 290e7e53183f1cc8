// The simulator running the engine's interleaved gangs (engine::LaunchAction::
// interleaved) as `orrery run` does: a gang holds one GPU, its members share
// it by the planner's gang model (planner::GangShares), a member that
// finishes leaves the rest the device, and a gang's measured speedup goes
// back to the engine.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "operator/planner/interleave.h"
#include "operator/planner/workload_io.h"
#include "operator/sim/simulator.h"

namespace orrery::sim {
namespace {

// `tasks` tasks (a, b, c, ...) that fit only spilled on 40 GiB GPUs, each an
// hour alone, on one node of `gpus` GPUs.
planner::Workload Spilled(int gpus, int tasks) {
  std::string yaml = "name: spilled\ncluster: {nodes: 1, gpusPerNode: " + std::to_string(gpus) +
                     ", gpuMemoryGiB: 40}\ntasks:\n";
  for (int t = 0; t < tasks; ++t) {
    yaml += "  - {name: " + std::string(1, static_cast<char>('a' + t)) +
            ", work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, "
            "memoryGiB: 30}, {template: ddp, gpus: 1, batchSize: 8, throughput: 3, "
            "memoryGiB: 90}]}\n";
  }
  auto w = planner::ParseWorkload(yaml);
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

// The engine plans gangs at `planned`; they truly run at `truth`.
SimOptions Options(bool interleave, double planned, double truth) {
  SimOptions o;
  o.engine.solver_time_limit_s = 2;
  o.engine.switch_cost_s = 120;
  o.engine.interleave = interleave;
  o.engine.interleave_speedup = planned;
  o.gang_speedup = truth;
  o.measure_after_s = 300;
  return o;
}

SimResult Simulated(const planner::Workload& w, const SimOptions& o) {
  auto r = Simulate(w, o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_TRUE(r->violations.empty()) << r->violations.front();
  return *r;
}

// No GPU runs two things at once but the members of one gang.
void ExpectGpusSharedOnlyInGangs(const SimResult& r) {
  EXPECT_EQ(r.launches_refused, 0) << "the engine launched onto GPUs that were not free";
  for (size_t i = 0; i < r.intervals.size(); ++i) {
    EXPECT_EQ(r.intervals[i].slots.size(), static_cast<size_t>(r.intervals[i].gpus))
        << r.intervals[i].task << " ran on fewer GPUs than its configuration's";
    for (size_t j = i + 1; j < r.intervals.size(); ++j) {
      const RunInterval &a = r.intervals[i], &b = r.intervals[j];
      if (a.end <= b.start + 1e-9 || b.end <= a.start + 1e-9) continue;
      for (const planner::GpuSlot& g : a.slots) {
        if (std::find(b.slots.begin(), b.slots.end(), g) == b.slots.end()) continue;
        EXPECT_TRUE(!a.gang.empty() && a.gang == b.gang)
            << a.task << " and " << b.task << " share a GPU at " << b.start;
      }
    }
  }
}

TEST(SimulatorGangsTest, SpilledTasksShareGpusInGangsAndFinishSooner) {
  const planner::Workload w = Spilled(2, 4);
  const SimResult with = Simulated(w, Options(true, 1.5, 1.5));
  const SimResult without = Simulated(w, Options(false, 1.5, 1.5));
  // Without gangs: two tasks after two on two GPUs. With: two gangs of two,
  // each two hours of work at 1.5x, one per GPU.
  EXPECT_NEAR(without.makespan, 7200, 1e-6);
  EXPECT_EQ(without.gangs, 0);
  EXPECT_EQ(with.gangs, 2);
  EXPECT_NEAR(with.makespan, 7200 / 1.5, 1e-6);
  EXPECT_LT(with.makespan, without.makespan);
  ExpectGpusSharedOnlyInGangs(with);
  // Each gang's members on one GPU, together, to the end; every bar marked.
  std::map<std::string, std::set<planner::GpuSlot>> slots;
  ASSERT_EQ(with.intervals.size(), 4u);
  for (const RunInterval& iv : with.intervals) {
    EXPECT_FALSE(iv.gang.empty()) << iv.task;
    EXPECT_NE(iv.gang.find(iv.task), std::string::npos) << iv.gang;
    EXPECT_EQ(iv.ended_by, "finished");
    EXPECT_EQ(iv.start, 0);
    EXPECT_NEAR(iv.end, 4800, 1e-6);
    ASSERT_EQ(iv.slots.size(), 1u);
    slots[iv.gang].insert(iv.slots.begin(), iv.slots.end());
  }
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_NE(*slots.begin()->second.begin(), *slots.rbegin()->second.begin());
  for (const auto& [gang, s] : slots) EXPECT_EQ(s.size(), 1u) << gang;
  // A GPU counts once however many members share it.
  EXPECT_NEAR(with.gpu_utilisation, 1.0, 1e-9);
  // Measured as planned: nothing goes back to the engine.
  ASSERT_EQ(with.gang_speedups.size(), 2u);
  for (double s : with.gang_speedups) EXPECT_NEAR(s, 1.5, 1e-9);
  int interleaved_launches = 0;
  for (const engine::JournalEntry& e : with.actions) {
    if (e.kind == "launch" && e.detail.find(" interleaved ") != std::string::npos)
      ++interleaved_launches;
  }
  EXPECT_EQ(interleaved_launches, 4);
  EXPECT_NE(ResultJson(with).find("\"gang\": \"a+b\""), std::string::npos) << ResultJson(with);
  const std::string svg = GanttSvg(with);
  EXPECT_NE(svg.find("interleaved gang a+b"), std::string::npos);
  EXPECT_NE(svg.find("data-gang=\"c+d\""), std::string::npos);
  EXPECT_NE(ResultTable(with).find("interleaved gangs   2"), std::string::npos);
}

TEST(SimulatorGangsTest, NoGangsWhereTheSpeedupIsBelowOne) {
  const planner::Workload w = Spilled(2, 4);
  const SimResult slow = Simulated(w, Options(true, 0.8, 0.8));
  const SimResult without = Simulated(w, Options(false, 0.8, 0.8));
  EXPECT_EQ(slow.gangs, 0);
  for (const RunInterval& iv : slow.intervals) EXPECT_TRUE(iv.gang.empty()) << iv.task;
  EXPECT_NEAR(slow.makespan, without.makespan, 1e-6);
  EXPECT_NEAR(slow.makespan, 7200, 1e-6);
}

TEST(SimulatorGangsTest, AMemberThatFinishesLeavesTheOthersTheDevice) {
  planner::Workload w = Spilled(1, 2);
  w.true_speed = {1.0, 2.0};  // b trains twice as fast as profiled
  SimOptions o = Options(true, 1.5, 1.5);
  o.engine.introspect = false;
  o.measure_after_s = 1e7;  // the gang is measured when b completes
  const SimResult r = Simulated(w, o);
  ASSERT_EQ(r.gangs, 1);
  // Each at 0.75 of its speed alone: b's 3600 samples at 1.5/s take 2400 s;
  // a has 1800 left, alone on the device from then.
  ASSERT_EQ(r.completion.size(), 2u);
  EXPECT_NEAR(r.completion[1], 2400, 1e-6);
  EXPECT_NEAR(r.completion[0], 2400 + 1800, 1e-6);
  for (const RunInterval& iv : r.intervals) EXPECT_EQ(iv.gang, "a+b") << iv.task;
  ASSERT_EQ(r.gang_speedups.size(), 1u);
  EXPECT_NEAR(r.gang_speedups[0], 0.75 * 1 + 0.75 * 2, 1e-9);
}

// As `orrery run` (tests/operator/local/runner_interleaved_test.cc): gangs
// planned at the default 1.22x run at 0.8x; the measurement goes back to the
// engine, which drops the gangs not yet started, and splits the one running:
// the member moved later stops alone, the other runs on in the gang's
// process and finishes there, and the rest run alone one after the other.
TEST(SimulatorGangsTest, AGangMeasuredSlowerThanPlannedEndsTheGangs) {
  const planner::Workload w = Spilled(1, 4);
  const SimResult r = Simulated(w, Options(true, planner::kInterleaveSpeedup, 0.8));
  EXPECT_EQ(r.gangs, 1);
  ASSERT_EQ(r.gang_speedups.size(), 1u);
  EXPECT_NEAR(r.gang_speedups[0], 0.8, 1e-9);
  std::set<std::string> in_gang, alone_finished;
  for (const RunInterval& iv : r.intervals) {
    if (!iv.gang.empty()) in_gang.insert(iv.task);
    if (iv.gang.empty() && iv.ended_by == "finished") alone_finished.insert(iv.task);
  }
  EXPECT_EQ(in_gang.size(), 2u);
  EXPECT_EQ(alone_finished.size(), 3u);
  int finished_in_gang = 0;
  for (const RunInterval& iv : r.intervals)
    finished_in_gang += !iv.gang.empty() && iv.ended_by == "finished" ? 1 : 0;
  EXPECT_EQ(finished_in_gang, 1);
  // Four hours of work one after the other, a gang's 300 s at 0.8x and the
  // restarts' switch cost at most.
  EXPECT_GT(r.makespan, 4 * 3600 - 1e-6);
  EXPECT_LT(r.makespan, 4 * 3600 + 300 + 2 * 120 + 1e-6);
  ExpectGpusSharedOnlyInGangs(r);
}

// A lost node takes its gang's members down together; they run again on
// what is left.
TEST(SimulatorGangsTest, ALostNodeStopsItsGangsMembersTogether) {
  planner::Workload w = Spilled(1, 4);
  w.problem.nodes.push_back({"extra", 1, 40});
  planner::ClusterEvent lost;
  lost.time = 1000;
  lost.kind = planner::ClusterEvent::Kind::kNodeLost;
  lost.node = 1;
  w.events.push_back(lost);
  const SimResult r = Simulated(w, Options(true, 1.5, 1.5));
  std::set<std::string> lost_members, finished;
  std::string lost_gang;
  for (const RunInterval& iv : r.intervals) {
    if (iv.ended_by == "finished") finished.insert(iv.task);
    if (iv.ended_by != "node-lost") continue;
    lost_members.insert(iv.task);
    EXPECT_FALSE(iv.gang.empty()) << iv.task;
    EXPECT_NEAR(iv.end, 1000, 1e-9);
    EXPECT_EQ(iv.slots, (std::vector<planner::GpuSlot>{{1, 0}}));
    lost_gang = iv.gang;
  }
  EXPECT_EQ(lost_members.size(), 2u) << lost_gang;
  EXPECT_EQ(finished.size(), 4u);
  ExpectGpusSharedOnlyInGangs(r);
  // Both gangs' work at 1.5x on the one GPU left, and the lost gang's first
  // 1000 s again: later than all of it at 1.5x.
  EXPECT_GT(r.makespan, 4 * 3600 / 1.5);
}

}  // namespace
}  // namespace orrery::sim
