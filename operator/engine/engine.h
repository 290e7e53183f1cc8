// Introspection: the part of the engine that decides when to re-plan and
// whether to adopt a new plan. Worlds (Kubernetes, local, simulator) report what
// they observe (tasks' remaining work and measured throughput, live nodes) and a
// trigger; the engine re-solves the remaining problem and adopts the new plan
// only when it beats the current plan (re-timed with what is now known) by more
// than the threshold, with any change to a running task charged its switching
// cost (checkpoint plus restart). Pure: no I/O, time comes in the view.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/planner/planner.h"
#include "operator/planner/problem.h"

namespace orrery::engine {

struct EngineOptions {
  std::string policy = "orrery";    // a planner name
  bool introspect = true;           // false: plan only when forced (start, arrivals, capacity)
  double replan_interval_s = 3600;  // periodic re-plan
  double switch_cost_s = 300;       // checkpoint + restart of a running task
  double adopt_gain = 0.05;         // adopt when the objective improves by more than this fraction
  double drift_tolerance = 0.10;    // |measured / profiled - 1| above this is a trigger
  double solver_time_limit_s = 5;
  int seed = 1;
};

enum class Trigger {
  kStart,
  kInterval,
  kTaskFinished,
  kTaskArrived,
  kCapacityChanged,
  kThroughputDrift
};
const char* TriggerName(Trigger trigger);

struct RunningView {
  int config = -1;
  std::vector<planner::GpuSlot> gpus;  // world node indices
};

struct TaskView {
  std::string name;
  double remaining_work = 0;
  double arrival = 0;  // absolute
  double weight = 1;
  std::vector<planner::Config> profile;  // profiled configurations
  bool arrived = true;
  bool done = false;
  std::optional<RunningView> running;
  // Measured throughput over profiled throughput of the configuration it runs
  // (or ran) in; 1 when nothing was measured. Applied to all its configurations.
  double speed_factor = 1;
};

struct NodeView {
  std::string name;
  int gpus = 0;
  double gpu_memory_gib = 0;
  bool alive = true;
};

struct WorldView {
  double now = 0;
  std::vector<TaskView> tasks;
  std::vector<NodeView> nodes;
  int gpu_cap = 0;  // the job's gpuQuota: GPUs its tasks may hold at once (0: none)
};

// A plan in world terms: absolute times, world task and node indices; tasks not
// in the plan (done or not yet arrived) have config -1.
// Why the engine stops a running task (its ranks checkpoint first, and it runs
// again as the plan says).
enum class StopReason {
  kReplan,  // the adopted plan runs it in another configuration or on other GPUs
  kQuota,   // the job holds more GPUs than its cap (a lowered gpuQuota or share)
};
const char* StopReasonName(StopReason reason);  // "replan" | "quota"

struct StopAction {
  size_t task = 0;  // index into WorldView::tasks
  StopReason reason = StopReason::kReplan;
};

struct Decision {
  bool solved = false;
  bool adopted = false;
  std::string reason;
  double solver_seconds = 0;
  double current_objective = 0;  // the current plan re-timed, when there is one
  double new_objective = 0;
  planner::Plan plan;  // the adopted plan (absolute), when adopted
  // The running tasks the adopted plan stops now: another configuration,
  // other GPUs, or a later start. Every world stops exactly these (and no
  // other running task) when it applies the plan.
  std::vector<StopAction> stops;
};

class Engine {
 public:
  // `clock` measures solver time and may be null.
  Engine(EngineOptions options, const Clock* clock);

  // Whether `trigger` calls for a solve under the options; kStart, kTaskArrived
  // and kCapacityChanged always do.
  bool ShouldSolve(Trigger trigger) const;

  // Solves the remaining problem if ShouldSolve, and adopts per the rules.
  StatusOr<Decision> Decide(const WorldView& world, Trigger trigger);

  const std::optional<planner::Plan>& current_plan() const { return current_; }
  int solves() const { return solves_; }
  int adoptions() const { return adoptions_; }
  const EngineOptions& options() const { return options_; }

 private:
  EngineOptions options_;
  const Clock* clock_;
  std::unique_ptr<planner::Planner> planner_;
  std::optional<planner::Plan> current_;
  int solves_ = 0;
  int adoptions_ = 0;
};

// The planner's problem for what remains: live nodes only (renumbered), arrived
// unfinished tasks with their remaining work, speeds scaled by measured factors,
// running tasks marked with their switching cost. `task_index` and `node_index`
// map problem indices back to the world.
struct RemainingProblem {
  planner::Problem problem;
  std::vector<int> task_index;
  std::vector<int> node_index;
};
RemainingProblem BuildRemainingProblem(const WorldView& world, double switch_cost_s);

}  // namespace orrery::engine
