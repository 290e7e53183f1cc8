#include "operator/planner/milp.h"

#include <limits>

#include <gtest/gtest.h>

namespace orrery::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max 5a + 4b + 3c s.t. 2a + 3b + c <= 5, 4a + b + 2c <= 11, 3a + 4b + 2c <= 8, binary.
MilpModel Knapsack() {
  MilpModel m;
  int a = m.AddColumn(-5, 0, 1, true), b = m.AddColumn(-4, 0, 1, true),
      c = m.AddColumn(-3, 0, 1, true);
  m.AddRow({a, b, c}, {2, 3, 1}, -kInf, 5);
  m.AddRow({a, b, c}, {4, 1, 2}, -kInf, 11);
  m.AddRow({a, b, c}, {3, 4, 2}, -kInf, 8);
  return m;
}

TEST(MilpTest, SolvesSmallIntegerProgramToOptimality) {
  MilpOptions o;
  auto r = MilpSolver::Solve(Knapsack(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_solution);
  EXPECT_TRUE(r->optimal);
  EXPECT_NEAR(r->objective, -9, 1e-6);  // a + b; a + b + c breaks the first row
  EXPECT_NEAR(r->x[0], 1, 1e-6);
  EXPECT_NEAR(r->x[1], 1, 1e-6);
  EXPECT_NEAR(r->x[2], 0, 1e-6);
  EXPECT_LE(r->bound, r->objective + 1e-6);
}

TEST(MilpTest, ReportsInfeasible) {
  MilpModel m;
  int x = m.AddColumn(1, 0, 1, true);
  m.AddRow({x}, {1}, 2, kInf);
  auto r = MilpSolver::Solve(m, MilpOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_solution);
  EXPECT_TRUE(r->infeasible);
}

TEST(MilpTest, AcceptsWarmStartAndKeepsOptimum) {
  MilpOptions o;
  o.warm_start = {0, 1, 0};  // feasible, objective -4
  auto r = MilpSolver::Solve(Knapsack(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->objective, -9, 1e-6);
}

TEST(MilpTest, NodeLimitZeroStillReturnsWarmStart) {
  MilpOptions o;
  o.warm_start = {0, 1, 0};
  o.max_nodes = 0;
  auto r = MilpSolver::Solve(Knapsack(), o);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_solution);
  EXPECT_LE(r->objective, -4 + 1e-6);
}

}  // namespace
}  // namespace orrery::planner
