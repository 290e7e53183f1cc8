#include <random>

#include <gtest/gtest.h>

#include "operator/planner/baselines.h"
#include "operator/planner/checker.h"
#include "operator/planner/lower_bound.h"
#include "operator/planner/planner.h"
#include "tests/operator/planner/testing_problems.h"

namespace orrery::planner {
namespace {
using testing::Cfg;
using testing::Cluster;
using testing::MakeTask;

// A clock that moves 10 ms every time it is read: a deterministic stand-in for
// time passing while the planner works.
class TickingClock final : public Clock {
 public:
  TimePoint Now() const override {
    now_ += std::chrono::milliseconds(10);
    return now_;
  }
  void SleepUntil(TimePoint deadline) override { now_ = std::max(now_, deadline); }

 private:
  mutable TimePoint now_{};
};

Problem RandomTiny(std::mt19937& rng, int nodes, int gpus, int tasks) {
  std::uniform_real_distribution<double> work(20, 200), thr(0.5, 2), scale(1.1, 1.9);
  Problem p = Cluster(nodes, gpus);
  for (int t = 0; t < tasks; ++t) {
    double base = thr(rng);
    std::vector<Config> cfgs = {Cfg("ddp", 1, base)};
    double s = base;
    for (int g = 2; g <= gpus; g *= 2) cfgs.push_back(Cfg("fsdp", g, s *= scale(rng)));
    p.tasks.push_back(MakeTask("t" + std::to_string(t), work(rng), cfgs));
  }
  return p;
}

PlanOptions Deterministic() {
  PlanOptions o;
  o.time_limit_s = 5;
  o.max_nodes = 2000;
  return o;
}

TEST(OrreryPlannerTest, FindsEnumeratedOptimumOnTinyProblems) {
  std::mt19937 rng(11);
  int optimal = 0, trials = 12;
  for (int trial = 0; trial < trials; ++trial) {
    Problem p = RandomTiny(rng, 1 + trial % 2, 2, 3 + trial % 2);
    double opt = testing::OptimalMakespan(p);
    auto plan = MakeOrreryPlanner()->Solve(p, Deterministic());
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(CheckPlan(p, *plan).ok()) << CheckPlan(p, *plan);
    EXPECT_GE(plan->makespan, opt - 1e-6);
    EXPECT_LE(plan->lower_bound, opt + 1e-6) << "trial " << trial;
    EXPECT_LE(plan->makespan, 1.10 * opt) << "trial " << trial;
    if (plan->makespan <= opt * (1 + 1e-6)) ++optimal;
  }
  // List scheduling cannot reach every optimum, but should reach most.
  EXPECT_GE(optimal, trials * 3 / 4);
}

TEST(OrreryPlannerTest, NeverWorseThanGreedyAndBoundIsValid) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 5; ++trial) {
    Problem p = RandomTiny(rng, 2, 8, 20);
    auto plan = MakeOrreryPlanner()->Solve(p, Deterministic());
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(CheckPlan(p, *plan).ok());
    EXPECT_LE(plan->makespan, GreedyPlan(p).makespan + 1e-9);
    EXPECT_GE(plan->lower_bound, MakespanLowerBound(p) - 1e-9);
    EXPECT_LE(plan->lower_bound, plan->makespan + 1e-6);
    EXPECT_NEAR(plan->gap, (plan->makespan - plan->lower_bound) / plan->makespan, 1e-9);
  }
}

TEST(OrreryPlannerTest, UsesMultiNodeConfigsWhenTheyPay) {
  Problem p = Cluster(2, 4);
  // One huge task that scales perfectly across nodes.
  p.tasks.push_back(MakeTask("big", 800, {Cfg("fsdp", 4, 4), Cfg("fsdp", 8, 8, 10, 2)}));
  auto plan = MakeOrreryPlanner()->Solve(p, Deterministic());
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(CheckPlan(p, *plan).ok());
  EXPECT_EQ(plan->assignments[0].config, 1);
  EXPECT_DOUBLE_EQ(plan->makespan, 100);
  EXPECT_TRUE(plan->proven_optimal);
}

TEST(OrreryPlannerTest, ReportsTaskThatFitsNowhere) {
  Problem p = Cluster(1, 2, 16);
  p.tasks.push_back(MakeTask("ok", 10, {Cfg("ddp", 1, 1)}));
  p.tasks.push_back(MakeTask("too-big", 10, {Cfg("ddp", 1, 1, 32), Cfg("fsdp", 4, 3, 8)}));
  auto plan = MakeOrreryPlanner()->Solve(p, Deterministic());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("too-big"), std::string::npos);
}

TEST(OrreryPlannerTest, RespectsTimeLimitOnTheGivenClock) {
  std::mt19937 rng(3);
  Problem p = RandomTiny(rng, 4, 8, 60);
  TickingClock clock;
  PlanOptions o;
  o.clock = &clock;
  o.time_limit_s = 0.5;  // 50 clock reads
  auto plan = MakeOrreryPlanner()->Solve(p, o);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(CheckPlan(p, *plan).ok());
  // Every loop checks the deadline before starting another step; the MILP is
  // bounded by its own seconds limit, which is at most what is left.
  EXPECT_LE(plan->solve_seconds, 0.5 + 0.2);
}

TEST(OrreryPlannerTest, DeterministicForAGivenSeed) {
  std::mt19937 rng(9);
  Problem p = RandomTiny(rng, 2, 8, 30);
  PlanOptions o = Deterministic();
  o.seed = 42;
  auto a = MakeOrreryPlanner()->Solve(p, o);
  auto b = MakeOrreryPlanner()->Solve(p, o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->assignments.size(), b->assignments.size());
  for (size_t t = 0; t < a->assignments.size(); ++t) {
    EXPECT_EQ(a->assignments[t].config, b->assignments[t].config);
    EXPECT_EQ(a->assignments[t].gpus, b->assignments[t].gpus);
    EXPECT_DOUBLE_EQ(a->assignments[t].start, b->assignments[t].start);
  }
  EXPECT_DOUBLE_EQ(a->lower_bound, b->lower_bound);
}

TEST(OrreryPlannerTest, WeightedCompletionPutsHeavyShortTasksFirst) {
  Problem p = Cluster(1, 1);
  p.objective = Objective::kWeightedCompletion;
  p.tasks.push_back(MakeTask("long-light", 100, {Cfg("ddp", 1, 1)}));
  p.tasks.push_back(MakeTask("short-heavy", 10, {Cfg("ddp", 1, 1)}));
  p.tasks[1].weight = 5;
  auto plan = MakeOrreryPlanner()->Solve(p, Deterministic());
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(CheckPlan(p, *plan).ok());
  EXPECT_DOUBLE_EQ(plan->assignments[1].start, 0);
  EXPECT_DOUBLE_EQ(plan->objective, 5 * 10 + 110);
}

TEST(OrreryPlannerTest, KeepsRunningTaskWhenMovingCostsMore) {
  Problem p = Cluster(1, 2);
  p.tasks.push_back(MakeTask("running", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 2, 12)}));
  p.tasks[0].running = RunningState{0, {{0, 1}}, 100};
  auto plan = MakeOrreryPlanner()->Solve(p, Deterministic());
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(CheckPlan(p, *plan).ok()) << CheckPlan(p, *plan);
  EXPECT_EQ(plan->assignments[0].config, 0);
  EXPECT_EQ(plan->assignments[0].gpus, (std::vector<GpuSlot>{{0, 1}}));
  EXPECT_DOUBLE_EQ(plan->makespan, 10);
}

}  // namespace
}  // namespace orrery::planner
