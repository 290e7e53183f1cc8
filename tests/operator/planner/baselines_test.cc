#include "operator/planner/baselines.h"

#include <gtest/gtest.h>

#include "operator/planner/checker.h"
#include "operator/planner/planner.h"
#include "tests/operator/planner/testing_problems.h"

namespace orrery::planner {
namespace {
using testing::Cfg;
using testing::Cluster;
using testing::MakeTask;

TEST(BaselinesTest, FastestChoiceSkipsConfigsThatDoNotFit) {
  Problem p = Cluster(1, 4, 40);
  p.tasks.push_back(
      MakeTask("a", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 4, 30), Cfg("fsdp", 8, 60)}));
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 10, 80), Cfg("spill", 1, 2)}));
  EXPECT_EQ(FastestChoice(p), (std::vector<int>{1, 1}));
}

TEST(BaselinesTest, GreedyIsLptWithFastestConfigs) {
  Problem p = Cluster(1, 2);
  p.tasks.push_back(MakeTask("a", 30, {Cfg("ddp", 1, 1)}));
  p.tasks.push_back(MakeTask("b", 20, {Cfg("ddp", 1, 1)}));
  p.tasks.push_back(MakeTask("c", 20, {Cfg("ddp", 1, 1)}));
  p.tasks.push_back(MakeTask("d", 10, {Cfg("ddp", 1, 1)}));
  Plan plan = GreedyPlan(p);
  ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
  EXPECT_DOUBLE_EQ(plan.makespan, 40);  // LPT: {30,10} {20,20}
  EXPECT_EQ(plan.planner, "greedy");
}

TEST(BaselinesTest, CurrentPracticeRunsOneTaskPerNodeWithFsdpOrSpill) {
  Problem p = Cluster(2, 4, 40);
  p.tasks.push_back(
      MakeTask("fits", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 2, 15), Cfg("fsdp", 4, 25)}));
  p.tasks.push_back(MakeTask("big", 100, {Cfg("fsdp", 4, 20, 60), Cfg("spill", 4, 5, 30)}));
  p.tasks.push_back(MakeTask("third", 100, {Cfg("fsdp", 4, 50)}, 1));
  Plan plan = CurrentPracticePlan(p);
  ASSERT_TRUE(CheckPlan(p, plan).ok()) << CheckPlan(p, plan);
  EXPECT_EQ(plan.assignments[0].config, 2);  // fsdp on the whole node
  EXPECT_EQ(plan.assignments[1].config, 1);  // fsdp does not fit: spill
  EXPECT_DOUBLE_EQ(plan.assignments[0].end, 4);
  // "third" waits for the first node to free up although it arrives at 1.
  EXPECT_DOUBLE_EQ(plan.assignments[2].start, 4);
  EXPECT_NE(plan.assignments[2].gpus.front().node, plan.assignments[1].gpus.front().node);
}

TEST(BaselinesTest, RegistryKnowsEveryPlannerAndRejectsUnknown) {
  for (const std::string& name : PlannerNames()) {
    auto planner = MakePlanner(name);
    ASSERT_TRUE(planner.ok()) << name;
    EXPECT_EQ((*planner)->Name(), name);
  }
  EXPECT_EQ(MakePlanner("gurobi").status().code(), StatusCode::kNotFound);
}

TEST(BaselinesTest, PlannersReportInfeasibleInput) {
  Problem p = Cluster(1, 2, 40);
  p.tasks.push_back(MakeTask("nowhere", 100, {Cfg("ddp", 4, 10)}));
  for (const std::string& name : PlannerNames()) {
    auto plan = (*MakePlanner(name))->Solve(p, PlanOptions{});
    EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition) << name;
  }
}

}  // namespace
}  // namespace orrery::planner
