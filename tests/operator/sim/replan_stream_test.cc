// A seeded Poisson stream over a three-type cluster (the benchmark's
// generator, bench/planner/typed_workloads.h, at a small size), simulated
// with coalescing and warm starts: every re-plan reports its trigger, solver
// seconds and gap; the log adds up to the result's solver time; coalescing
// solves fewer times than there were arrivals and finishes; and the run is
// deterministic. Solver time comes from a clock that advances a fixed step at
// every reading, so the test is hermetic and its figures are reproducible.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "bench/planner/typed_workloads.h"
#include "common/clock.h"
#include "operator/sim/simulator.h"

namespace orrery::sim {
namespace {

class SteppingClock final : public Clock {
 public:
  TimePoint Now() const override {
    now_ += std::chrono::microseconds(50);
    return now_;
  }
  void SleepUntil(TimePoint deadline) override { now_ = std::max(now_, deadline); }

 private:
  mutable TimePoint now_{};
};

SimOptions Options(double window, bool warm) {
  SimOptions o;
  o.engine.policy = "orrery";
  o.engine.solver_time_limit_s = 5;
  o.engine.coalesce_window_s = window;
  o.engine.warm_start = warm;
  return o;
}

TEST(ReplanStream, EveryReplanReportsTriggerSolverTimeAndGap) {
  const planner::Workload w = bench::PoissonStream(48, 24, 240, 3);
  SteppingClock clock;
  auto r = Simulate(w, Options(600, true), &clock);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->violations.empty());
  ASSERT_EQ(static_cast<int>(r->replan_log.size()), r->replans);
  const std::set<std::string> kinds = {"start",         "interval",         "task-finished",
                                       "task-arrived",  "capacity-changed", "throughput-drift",
                                       "quota-changed", "spec-changed",     "gang-speed-measured"};
  double total = 0;
  for (const Replan& p : r->replan_log) {
    EXPECT_EQ(kinds.count(p.trigger), 1U) << p.trigger;
    EXPECT_GT(p.solver_seconds, 0);
    EXPECT_GE(p.solve_gap, 0);
    EXPECT_LT(p.solve_gap, 1);
    EXPECT_GT(p.lower_bound, 0);
    EXPECT_GT(p.tasks_planned, 0);
    EXPECT_EQ(p.warm, p.trigger != "start");
    total += p.solver_seconds;
  }
  EXPECT_NEAR(total, r->solver_seconds, 1e-9);
  EXPECT_EQ(r->replan_log.front().trigger, "start");
  // 24 arrivals and 24 finishes, coalesced into far fewer solves.
  EXPECT_GT(r->coalesced, 0);
  EXPECT_LT(r->replans, 24);
  // The table and JSON carry the per-trigger summary and the log.
  EXPECT_NE(ResultTable(*r).find("re-plans by trigger"), std::string::npos);
  EXPECT_NE(ResultJson(*r).find("\"replanLog\""), std::string::npos);
  EXPECT_NE(ReplanTable(*r).find("task-arrived"), std::string::npos);

  SteppingClock again;
  auto b = Simulate(w, Options(600, true), &again);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->replans, r->replans);
  EXPECT_DOUBLE_EQ(b->makespan, r->makespan);
}

// The old behaviour (no window, no warm start) solves on every arrival.
TEST(ReplanStream, WithoutCoalescingEveryArrivalSolves) {
  const planner::Workload w = bench::PoissonStream(48, 12, 240, 5);
  auto r = Simulate(w, Options(0, false), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  int arrivals = 0;
  for (const Replan& p : r->replan_log) {
    arrivals += p.trigger == "task-arrived" ? 1 : 0;
    EXPECT_FALSE(p.warm);
  }
  EXPECT_EQ(r->coalesced, 0);
  EXPECT_GE(arrivals, 8);  // 11 tasks arrive after the start; a few may arrive together
}

}  // namespace
}  // namespace orrery::sim
