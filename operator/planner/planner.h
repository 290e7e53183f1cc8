// The planner interface and the registry of planners by name: "orrery" (the
// CBC decomposition), "saturn" (Saturn's own MILP, the baseline), "greedy" and
// "current-practice". A planner is a pure function of the problem and options;
// time comes from the caller's clock and the solver's own seconds limit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/planner/problem.h"

namespace orrery::planner {

struct PlanOptions {
  double time_limit_s = 10;
  // Measures solve time and the time limit of the planner's own loops; without
  // one, loops are bounded by iteration counts only and solve_seconds is 0.
  const Clock* clock = nullptr;
  int seed = 1;
  // CBC branch-and-bound node limit (-1: none); tests use it for determinism.
  int64_t max_nodes = -1;
  // The orrery planner plans by pool (decompose.h) from this many tasks x GPUs
  // (2000 GPUs with 1000 tasks is 2e6; 512 GPUs with 250 tasks, 1.3e5, is
  // planned whole: its MILP and local search fit the time limit).
  double split_min_size = 5e5;
  // Warm start (re-planning): a configuration per task from the plan in force
  // (-1: none), tried first and offered to the MILP as its initial solution.
  std::vector<int> hint = {};
  // Re-plan only what waits: a running task keeps its configuration (and, in
  // the list scheduler, its GPUs from time 0), so the solver decides the
  // waiting tasks alone.
  bool keep_running = false;
};

// Solve(): FailedPrecondition when a task fits nowhere, InvalidArgument for
// malformed problems, Internal on a solver failure. Not thread-safe per object.
class Planner {
 public:
  virtual ~Planner() = default;
  virtual std::string Name() const = 0;
  virtual StatusOr<Plan> Solve(const Problem& problem, const PlanOptions& options) = 0;
};

std::unique_ptr<Planner> MakeGreedyPlanner();
std::unique_ptr<Planner> MakeCurrentPracticePlanner();
std::unique_ptr<Planner> MakeOrreryPlanner();
std::unique_ptr<Planner> MakeSaturnPlanner();

// NotFound for an unknown name.
StatusOr<std::unique_ptr<Planner>> MakePlanner(std::string_view name);
std::vector<std::string> PlannerNames();

}  // namespace orrery::planner
