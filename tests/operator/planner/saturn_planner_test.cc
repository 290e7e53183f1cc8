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

TEST(SaturnPlannerTest, SolvesTinyProblemsToTheEnumeratedOptimum) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<double> work(20, 200), thr(0.5, 2), scale(1.1, 1.9);
  for (int trial = 0; trial < 4; ++trial) {
    Problem p = Cluster(1 + trial % 2, 2);
    for (int t = 0; t < 3; ++t) {
      double base = thr(rng);
      p.tasks.push_back(MakeTask("t" + std::to_string(t), work(rng),
                                 {Cfg("ddp", 1, base), Cfg("fsdp", 2, base * scale(rng))}));
    }
    double opt = testing::OptimalMakespan(p);
    PlanOptions o;
    o.time_limit_s = 30;
    auto plan = MakeSaturnPlanner()->Solve(p, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(CheckPlan(p, *plan).ok()) << CheckPlan(p, *plan);
    EXPECT_TRUE(plan->proven_optimal) << plan->note;
    EXPECT_NEAR(plan->makespan, opt, 1e-4 * opt) << "trial " << trial << " " << plan->note;
  }
}

TEST(SaturnPlannerTest, FallsBackWhenTheModelIsTooLarge) {
  Problem p = Cluster(64, 8);
  for (int t = 0; t < 400; ++t)
    p.tasks.push_back(
        MakeTask("t" + std::to_string(t), 100, {Cfg("ddp", 1, 1), Cfg("fsdp", 8, 6)}));
  auto plan = MakeSaturnPlanner()->Solve(p, PlanOptions{});
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(CheckPlan(p, *plan).ok());
  EXPECT_TRUE(plan->timed_out);
  EXPECT_NE(plan->note.find("too large"), std::string::npos) << plan->note;
  EXPECT_NE(plan->note.find("fell back"), std::string::npos);
}

TEST(SaturnPlannerTest, PlacesOnlyOnOneNode) {
  Problem p = Cluster(2, 2);
  p.tasks.push_back(MakeTask("a", 100, {Cfg("fsdp", 4, 100, 10, 2), Cfg("ddp", 2, 10)}));
  PlanOptions o;
  o.time_limit_s = 10;
  auto plan = MakeSaturnPlanner()->Solve(p, o);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(CheckPlan(p, *plan).ok());
  EXPECT_EQ(plan->assignments[0].config, 1);
}

}  // namespace
}  // namespace orrery::planner
