#include "operator/planner/list_scheduler.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "operator/planner/checker.h"
#include "operator/planner/planner.h"
#include "tests/operator/planner/testing_problems.h"

namespace orrery::planner {
namespace {
using testing::Cfg;
using testing::Cluster;
using testing::MakeTask;

TEST(ListSchedulerTest, PacksSmallTasksSideBySide) {
  Problem p = Cluster(1, 4);
  for (int i = 0; i < 4; ++i)
    p.tasks.push_back(MakeTask("t" + std::to_string(i), 100, {Cfg("ddp", 1, 10)}));
  Plan plan = ListSchedule(p, {0, 0, 0, 0}, {0, 1, 2, 3});
  ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
  EXPECT_DOUBLE_EQ(plan.makespan, 10);
}

TEST(ListSchedulerTest, WideTaskWaitsForEnoughGpusOnOneNode) {
  Problem p = Cluster(2, 2);
  p.tasks.push_back(MakeTask("small", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("wide", 100, {Cfg("fsdp", 2, 20)}));
  p.tasks.push_back(MakeTask("wide2", 100, {Cfg("fsdp", 2, 20)}));
  Plan plan = ListSchedule(p, {0, 0, 0}, {0, 1, 2});
  ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
  // small on node 0; wide on node 1 at 0; wide2 needs both GPUs of a node: at 5 on node 1.
  EXPECT_DOUBLE_EQ(plan.assignments[1].start, 0);
  EXPECT_DOUBLE_EQ(plan.assignments[2].start, 5);
  EXPECT_DOUBLE_EQ(plan.makespan, 10);
}

TEST(ListSchedulerTest, RespectsArrivalsAndSpansNodes) {
  Problem p = Cluster(2, 2);
  p.tasks.push_back(MakeTask("late", 100, {Cfg("fsdp", 4, 50, 10, 2)}, 7));
  Plan plan = ListSchedule(p, {0}, {0});
  ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
  EXPECT_DOUBLE_EQ(plan.assignments[0].start, 7);
  EXPECT_EQ(plan.assignments[0].gpus.size(), 4u);
}

TEST(ListSchedulerTest, RunningTaskKeepingItsConfigStaysOnItsGpus) {
  Problem p = Cluster(1, 4);
  p.tasks.push_back(MakeTask("new", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("running", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 2, 18)}));
  p.tasks[1].running = RunningState{0, {{0, 3}}, 50};
  Plan stay = ListSchedule(p, {0, 0}, {0, 1});
  ASSERT_TRUE(CheckPlan(p, stay).ok()) << CheckPlan(p, stay);
  EXPECT_EQ(stay.assignments[1].gpus, (std::vector<GpuSlot>{{0, 3}}));
  EXPECT_DOUBLE_EQ(stay.assignments[1].end, 10);
  Plan move = ListSchedule(p, {0, 1}, {0, 1});
  ASSERT_TRUE(CheckPlan(p, move).ok()) << CheckPlan(p, move);
  EXPECT_NEAR(move.assignments[1].end - move.assignments[1].start, 100.0 / 18 + 50, 1e-9);
}

// Three GPUs: a runs alone on one for 20 s, b and c take the other two for
// 10 s. d, placed last, runs 16 s on one GPU or 9 s on two: with a deadline
// of 26 s one GPU from 10 s finishes in time and costs less GPU-time; with
// 20 s only two GPUs from 10 s do, and the deadline schedule widens d.
TEST(ListSchedulerTest, DeadlineScheduleWidensOnlyWhatStartsTooLate) {
  Problem p = Cluster(1, 3);
  p.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 1, 5)}));
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("c", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("d", 144, {Cfg("ddp", 1, 9), Cfg("ddp", 2, 16)}));
  const std::vector<std::vector<int>> configs = {{0}, {0}, {0}, {0, 1}};
  Plan loose = DeadlineSchedule(p, configs, {0, 1, 2, 3}, 26);
  ASSERT_TRUE(CheckPlan(p, loose).ok()) << CheckPlan(p, loose);
  EXPECT_EQ(loose.assignments[3].config, 0);
  EXPECT_DOUBLE_EQ(loose.assignments[3].start, 10);
  EXPECT_DOUBLE_EQ(loose.makespan, 26);
  Plan tight = DeadlineSchedule(p, configs, {0, 1, 2, 3}, 20);
  ASSERT_TRUE(CheckPlan(p, tight).ok()) << CheckPlan(p, tight);
  EXPECT_EQ(tight.assignments[3].config, 1);
  EXPECT_DOUBLE_EQ(tight.assignments[3].start, 10);
  EXPECT_DOUBLE_EQ(tight.makespan, 20);
  // When no configuration meets the deadline, the earliest finish wins.
  Plan missed = DeadlineSchedule(p, configs, {0, 1, 2, 3}, 5);
  ASSERT_TRUE(CheckPlan(p, missed).ok()) << CheckPlan(p, missed);
  EXPECT_EQ(missed.assignments[3].config, 1);
  EXPECT_DOUBLE_EQ(missed.makespan, 20);
}

// Backfill fills the hole a late arrival leaves: on one GPU, "late" arrives at
// 10 s and is placed first; append placement can only put "early" (5 s)
// after it, backfill puts it in [0, 5).
TEST(ListSchedulerTest, DeadlineBackfillFillsTheHoleALateArrivalLeaves) {
  Problem p = Cluster(1, 1);
  p.tasks.push_back(MakeTask("late", 100, {Cfg("ddp", 1, 10)}, 10));
  p.tasks.push_back(MakeTask("early", 100, {Cfg("ddp", 1, 20)}));
  const std::vector<std::vector<int>> configs = {{0}, {0}};
  Plan append = DeadlineSchedule(p, configs, {0, 1}, 20, {}, Placement::kAppend);
  ASSERT_TRUE(CheckPlan(p, append).ok()) << CheckPlan(p, append);
  EXPECT_DOUBLE_EQ(append.makespan, 25);
  Plan backfill = DeadlineSchedule(p, configs, {0, 1}, 20, {}, Placement::kBackfill);
  ASSERT_TRUE(CheckPlan(p, backfill).ok()) << CheckPlan(p, backfill);
  EXPECT_DOUBLE_EQ(backfill.assignments[1].start, 0);
  EXPECT_DOUBLE_EQ(backfill.makespan, 20);
}

// Across types, GPU-time is weighed by the types' prices: with l4 priced at a
// tenth of a100, a task that meets the deadline on both goes to l4 although
// it takes more GPU-seconds there; unpriced, it takes the a100.
TEST(ListSchedulerTest, DeadlineScheduleWeighsGpuTimeByTypePrice) {
  Problem p;
  p.nodes.push_back({"big", 2, 80, "a100"});
  p.nodes.push_back({"cheap", 2, 24, "l4"});
  Config fast = Cfg("ddp", 1, 10);
  fast.gpu_type = "a100";
  Config slow = Cfg("ddp", 1, 8);
  slow.gpu_type = "l4";
  p.tasks.push_back(MakeTask("t", 100, {fast, slow}));
  const std::vector<std::vector<int>> configs = {{0, 1}};
  Plan unpriced = DeadlineSchedule(p, configs, {0}, 20);
  EXPECT_EQ(unpriced.assignments[0].config, 0);
  Plan priced = DeadlineSchedule(p, configs, {0}, 20, {1.0, 0.1});  // GpuTypes order: a100, l4
  ASSERT_TRUE(CheckPlan(p, priced).ok()) << CheckPlan(p, priced);
  EXPECT_EQ(priced.assignments[0].config, 1);
  EXPECT_EQ(p.nodes[static_cast<size_t>(priced.assignments[0].gpus[0].node)].gpu_type, "l4");
  // A running task keeps its GPUs when its configuration is a candidate.
  p.tasks[0].running = RunningState{0, {{0, 1}}, 30};
  Plan kept = DeadlineSchedule(p, configs, {0}, 20, {1.0, 0.1});
  EXPECT_EQ(kept.assignments[0].gpus, (std::vector<GpuSlot>{{0, 1}}));
  EXPECT_DOUBLE_EQ(kept.assignments[0].start, 0);
}

// Seeded random shapes the benchmarks do not have: nodes of 2, 4 and 8 GPUs
// of two types, configurations typed and typeless, spanning up to two nodes,
// tasks restricted to a type, arrivals, running gangs and a GPU cap. Every
// deadline schedule, at every deadline and with either placement, passes the
// independent checker with every task placed.
TEST(ListSchedulerTest, DeadlineSchedulesOfRandomShapesAreValid) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int round = 0; round < 60; ++round) {
    Problem p;
    const int nodes = 2 + static_cast<int>(u(rng) * 5);
    for (int n = 0; n < nodes; ++n) {
      const int gpus = 2 << static_cast<int>(u(rng) * 3);  // 2, 4 or 8
      p.nodes.push_back(
          {"n" + std::to_string(n), gpus, u(rng) < 0.5 ? 24.0 : 80.0, u(rng) < 0.5 ? "a" : "b"});
    }
    const int tasks = 1 + static_cast<int>(u(rng) * 12);
    std::vector<std::vector<int>> configs;
    for (int t = 0; t < tasks; ++t) {
      std::vector<Config> cfgs;
      for (int g : {1, 2, 4, 8}) {
        for (int span : {1, 2}) {
          if (u(rng) < 0.4) continue;
          Config c =
              Cfg(span > 1 ? "fsdp" : "ddp", g * span,
                  10 * std::pow(g * span, 0.8) * (0.5 + u(rng)), u(rng) < 0.3 ? 40 : 10, span);
          if (u(rng) < 0.5) c.gpu_type = u(rng) < 0.5 ? "a" : "b";
          cfgs.push_back(c);
        }
      }
      cfgs.push_back(Cfg("ddp", 1, 5));  // every task fits somewhere
      Task task = MakeTask("t" + std::to_string(t), 100 + 900 * u(rng), cfgs,
                           u(rng) < 0.3 ? 50 * u(rng) : 0);
      if (u(rng) < 0.15) task.gpu_types = {p.nodes.front().gpu_type};
      p.tasks.push_back(std::move(task));
    }
    if (u(rng) < 0.3) p.gpu_cap = 2 + static_cast<int>(u(rng) * 8);
    // One running gang on the first node's first GPU, its config the last.
    if (u(rng) < 0.5) {
      Task& t = p.tasks.front();
      t.running = RunningState{static_cast<int>(t.configs.size()) - 1, {{0, 0}}, 20};
      t.gpu_types.clear();
      t.arrival = 0;  // it runs now
    }
    configs.assign(p.tasks.size(), {});
    for (size_t t = 0; t < p.tasks.size(); ++t)
      for (size_t c = 0; c < p.tasks[t].configs.size(); ++c)
        if (ConfigFits(p, p.tasks[t], p.tasks[t].configs[c]))
          configs[t].push_back(static_cast<int>(c));
    std::vector<int> order(p.tasks.size());
    for (size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(order.size() - 1 - t);
    for (double deadline : {1.0, 30.0, 200.0, 1e6}) {
      for (const std::vector<double>& prices :
           {std::vector<double>{}, std::vector<double>{1.0, 0.2}}) {
        for (Placement placement : {Placement::kAppend, Placement::kBackfill}) {
          Plan plan = DeadlineSchedule(p, configs, order, deadline, prices, placement);
          ASSERT_TRUE(CheckPlan(p, plan).ok()) << "round " << round << ": " << CheckPlan(p, plan);
          for (const Assignment& a : plan.assignments) ASSERT_GE(a.config, 0) << "round " << round;
        }
      }
    }
  }
}

TEST(ListSchedulerTest, OrderRulesSortAsNamed) {
  Problem p = Cluster(1, 8);
  p.tasks.push_back(MakeTask("short-wide", 100, {Cfg("ddp", 4, 100)}));
  p.tasks.push_back(MakeTask("long-narrow", 100, {Cfg("ddp", 1, 5)}, 3));
  p.tasks.push_back(MakeTask("mid", 100, {Cfg("ddp", 2, 20)}));
  EXPECT_EQ(OrderTasks(p, {0, 0, 0}, OrderRule::kLongestFirst), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(OrderTasks(p, {0, 0, 0}, OrderRule::kWidestFirst), (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(OrderTasks(p, {0, 0, 0}, OrderRule::kArrivalThenLongest), (std::vector<int>{2, 0, 1}));
}

TEST(ListSchedulerTest, BestListScheduleIsNoWorseThanAnyRule) {
  Problem p = Cluster(1, 4);
  p.tasks.push_back(MakeTask("a", 300, {Cfg("ddp", 3, 30)}));
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("c", 50, {Cfg("ddp", 2, 10)}));
  std::vector<int> choice = {0, 0, 0};
  Plan best = BestListSchedule(p, choice);
  for (OrderRule r : {OrderRule::kLongestFirst, OrderRule::kWidestFirst,
                      OrderRule::kMostGpuTimeFirst, OrderRule::kArrivalThenLongest}) {
    EXPECT_LE(best.makespan, ListSchedule(p, choice, OrderTasks(p, choice, r)).makespan);
  }
}

// A job's quota caps the GPUs its tasks hold at once, whatever the nodes offer.
TEST(ListSchedulerTest, CapHoldsTasksBackUntilGpusComeBack) {
  Problem p = Cluster(2, 4);
  p.gpu_cap = 3;
  p.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 2, 10)}));  // 10 s
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 20)}));  // 5 s
  p.tasks.push_back(MakeTask("c", 100, {Cfg("ddp", 2, 20)}));  // 5 s
  for (Placement pl : {Placement::kBackfill, Placement::kAppend}) {
    Plan plan = ListSchedule(p, {0, 0, 0}, {0, 1, 2}, pl);
    ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
    EXPECT_DOUBLE_EQ(plan.assignments[0].start, 0);
    EXPECT_DOUBLE_EQ(plan.assignments[1].start, 0);   // 2 + 1 = 3 GPUs: at the cap
    EXPECT_DOUBLE_EQ(plan.assignments[2].start, 10);  // b frees 1 at 5, a frees 2 at 10
    EXPECT_DOUBLE_EQ(plan.makespan, 15);
  }
  p.gpu_cap = 0;  // the same problem without a quota runs all three at once
  Plan free = ListSchedule(p, {0, 0, 0}, {0, 1, 2});
  EXPECT_DOUBLE_EQ(free.makespan, 10);
}

TEST(ListSchedulerTest, CapCountsRunningTasksPinnedOnTheirGpus) {
  Problem p = Cluster(1, 8);
  p.gpu_cap = 4;
  p.tasks.push_back(MakeTask("running", 100, {Cfg("ddp", 3, 10)}));  // 10 s
  p.tasks[0].running = RunningState{0, {{0, 0}, {0, 1}, {0, 2}}, 50};
  p.tasks.push_back(MakeTask("new", 100, {Cfg("ddp", 2, 50)}));
  for (Placement pl : {Placement::kBackfill, Placement::kAppend}) {
    Plan plan = ListSchedule(p, {0, 0}, {1, 0}, pl);
    ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
    EXPECT_DOUBLE_EQ(plan.assignments[0].start, 0);
    EXPECT_DOUBLE_EQ(plan.assignments[1].start, 10);
  }
}

TEST(ListSchedulerTest, CheckerRejectsAPlanOverTheCap) {
  Problem p = Cluster(1, 4);
  p.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 2, 10)}));
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 2, 10)}));
  Plan plan = ListSchedule(p, {0, 0}, {0, 1});
  ASSERT_TRUE(CheckPlan(p, plan).ok());
  p.gpu_cap = 3;
  Status s = CheckPlan(p, plan);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("over the cap of 3"), std::string::npos) << s;
  // Back to back is fine: a GPU handed over at 10 s is not held twice.
  plan.assignments[1].start = 10;
  plan.assignments[1].end = 20;
  EXPECT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
}

TEST(ListSchedulerTest, EveryPlannerKeepsToTheCap) {
  Problem p = Cluster(2, 4);
  p.gpu_cap = 4;
  for (int i = 0; i < 6; ++i) {
    p.tasks.push_back(MakeTask("t" + std::to_string(i), 100 * (i + 1),
                               {Cfg("ddp", 1, 10), Cfg("ddp", 2, 18), Cfg("fsdp", 4, 30)}));
  }
  // Over the cap, and it is rejected as such rather than planned.
  Problem wide = p;
  wide.tasks.push_back(MakeTask("wide", 100, {Cfg("fsdp", 8, 80, 10, 2)}));
  for (const std::string& name : PlannerNames()) {
    auto plan = (*MakePlanner(name))->Solve(p, PlanOptions{});
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    EXPECT_TRUE(CheckPlan(p, *plan).ok()) << name << ": " << CheckPlan(p, *plan);
    // 2100 samples of work at best 10 samples/s per GPU over 4 GPUs.
    EXPECT_GE(plan->lower_bound, 2100.0 / 40 - 1e-9) << name;
    auto over = (*MakePlanner(name))->Solve(wide, PlanOptions{});
    EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition) << name;
    EXPECT_NE(over.status().message().find("within the cap of 4 GPUs"), std::string::npos)
        << over.status();
  }
}

// Running tasks over the cap (a gpuQuota lowered under what runs) are pinned
// in the given order only while they fit; the rest are scheduled again after,
// under both placements, and the plan keeps the cap at every moment.
TEST(ListSchedulerTest, RunningTasksOverTheCapArePinnedOnlyWhileTheyFit) {
  for (Placement placement : {Placement::kAppend, Placement::kBackfill}) {
    Problem p = Cluster(1, 4);
    p.gpu_cap = 2;
    p.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 2, 10)}));  // 10 s
    p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 2, 10)}));
    p.tasks[0].running = RunningState{0, {{0, 0}, {0, 1}}, 5};
    p.tasks[1].running = RunningState{0, {{0, 2}, {0, 3}}, 5};
    Plan plan = ListSchedule(p, {0, 0}, {1, 0}, placement);
    ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
    // b comes first in the order, so b keeps running; a waits for b's GPUs'
    // worth of cap and pays its switch cost.
    EXPECT_DOUBLE_EQ(plan.assignments[1].start, 0);
    EXPECT_EQ(plan.assignments[1].gpus, (std::vector<GpuSlot>{{0, 2}, {0, 3}}));
    EXPECT_DOUBLE_EQ(plan.assignments[0].start, 10);
    EXPECT_DOUBLE_EQ(plan.assignments[0].end, 25);
  }
}

}  // namespace
}  // namespace orrery::planner
