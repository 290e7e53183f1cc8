#include "operator/planner/list_scheduler.h"

#include <gtest/gtest.h>

#include "operator/planner/checker.h"
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

}  // namespace
}  // namespace orrery::planner
