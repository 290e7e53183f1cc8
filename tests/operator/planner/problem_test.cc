#include "operator/planner/problem.h"

#include <gtest/gtest.h>

#include "tests/operator/planner/testing_problems.h"

namespace orrery::planner {
namespace {
using testing::Cfg;
using testing::Cluster;
using testing::MakeTask;

TEST(ProblemTest, RunSecondsChargesSwitchOnlyWhenConfigChanges) {
  Task t = MakeTask("a", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 2, 25)});
  EXPECT_DOUBLE_EQ(RunSeconds(t, 0), 10);
  EXPECT_DOUBLE_EQ(RunSeconds(t, 1), 4);
  t.running = RunningState{0, {{0, 0}}, 30};
  EXPECT_DOUBLE_EQ(RunSeconds(t, 0), 10);
  EXPECT_DOUBLE_EQ(RunSeconds(t, 1), 34);
}

TEST(ProblemTest, ConfigFitsNeedsGpusAndMemoryOnEnoughNodes) {
  Problem p = Cluster(2, 4, 40);
  EXPECT_TRUE(ConfigFits(p, Cfg("ddp", 4, 1, 40)));
  EXPECT_FALSE(ConfigFits(p, Cfg("ddp", 8, 1, 10)));       // one node has 4
  EXPECT_TRUE(ConfigFits(p, Cfg("fsdp", 8, 1, 10, 2)));    // spans two
  EXPECT_FALSE(ConfigFits(p, Cfg("fsdp", 12, 1, 10, 3)));  // only two nodes
  EXPECT_FALSE(ConfigFits(p, Cfg("ddp", 1, 1, 41)));
}

TEST(ProblemTest, ValidateReportsFieldPaths) {
  Problem p = Cluster(1, 8);
  p.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 10), Cfg("ddp", 2, 0)}));
  Status s = ValidateProblem(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tasks[1].profiles[1].throughput: must be positive"),
            std::string::npos)
      << s;
  p.tasks[1].configs[1].throughput = 5;
  p.tasks[0].work = 0;
  EXPECT_NE(ValidateProblem(p).message().find("tasks[0].work"), std::string::npos);
}

TEST(ProblemTest, TaskFittingNowhereIsFailedPrecondition) {
  Problem p = Cluster(2, 4, 40);
  p.tasks.push_back(MakeTask("ok", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("huge", 100, {Cfg("ddp", 8, 10), Cfg("spill", 1, 1, 80)}));
  Status s = ValidateProblem(p);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("huge"), std::string::npos);
}

TEST(ProblemTest, SummarizeComputesObjectivesAndGap) {
  Problem p = Cluster(1, 2);
  p.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 1, 10)}));
  p.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 10)}));
  p.tasks[1].weight = 3;
  Plan plan;
  plan.assignments = {{0, {{0, 0}}, 0, 10}, {0, {{0, 0}}, 10, 20}};
  plan.lower_bound = 15;
  Summarize(p, plan);
  EXPECT_DOUBLE_EQ(plan.makespan, 20);
  EXPECT_DOUBLE_EQ(plan.weighted_completion, 70);
  EXPECT_DOUBLE_EQ(plan.objective, 20);
  EXPECT_DOUBLE_EQ(plan.gap, 0.25);
  p.objective = Objective::kWeightedCompletion;
  Summarize(p, plan);
  EXPECT_DOUBLE_EQ(plan.objective, 70);
}

}  // namespace
}  // namespace orrery::planner
