// Introspection: the part of the engine that decides when to re-plan and
// whether to adopt a new plan. Worlds (Kubernetes, local, simulator) report what
// they observe (tasks' remaining work and measured throughput, live nodes) and a
// trigger; the engine re-solves the remaining problem and adopts the new plan
// only when it beats the current plan (re-timed with what is now known) by more
// than the threshold, with any change to a running task charged its switching
// cost (checkpoint plus restart). Pure: no I/O, time comes in the view.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/engine/journal.h"
#include "operator/planner/interleave.h"
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
  // Re-planning within a budget. Triggers that come within this many seconds
  // of the last solve wait for one solve at its end (arrivals and finishes of
  // a stream come in bursts; the plan in force keeps launching meanwhile);
  // the start, capacity, quota and spec edits never wait. 0: none wait.
  double coalesce_window_s = 0;
  // Warm starts: each re-plan starts from the plan in force (the planner's
  // hint and the MILP's initial solution), and an arrival or a finish
  // re-plans only what waits: running gangs keep their configuration and GPUs.
  bool warm_start = false;
  int seed = 1;
  // Offer interleaved gangs of spilled tasks (planner/interleave.h): tasks that
  // fit only spilled may share one GPU in one `orrery-worker gang` process,
  // where that lowers the objective. `interleave_speedup` is the gang's speed
  // over its members one after the other (measured by a world that ran one).
  bool interleave = false;
  double interleave_speedup = planner::kInterleaveSpeedup;
  // What a plan minimises (spec.scheduling.objective; a workload's objective in
  // the simulator): the makespan of what remains, or the weighted sum of its
  // tasks' completion times from now. Adoption compares plans on it too.
  planner::Objective objective = planner::Objective::kMakespan;
  bool operator==(const EngineOptions&) const = default;
};

enum class Trigger {
  kStart,
  kInterval,
  kTaskFinished,
  kTaskArrived,
  kCapacityChanged,
  kThroughputDrift,
  kQuotaChanged,  // the job's GPU cap (gpuQuota, or its cluster share) moved
  kSpecChanged,   // the job's scheduling settings were edited (UpdateOptions)
  // A running gang's measured speedup replaced the one gangs were planned
  // with (UpdateOptions from the world): solved as kSpecChanged, named apart.
  kGangSpeedMeasured,
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
  std::vector<planner::Config> profile;     // profiled configurations
  std::vector<std::string> gpu_types = {};  // the GPU types it may run on; empty: any
  bool arrived = true;
  bool done = false;
  std::optional<RunningView> running;
  // Measured throughput over profiled throughput of the configuration it runs
  // (or ran) in; 1 when nothing was measured. Applied to all its configurations.
  double speed_factor = 1;
  // Its running gang (placed in this view or not) was made under pod settings
  // since edited (image, node selector, tolerations): the step stops it
  // (StopReason::kSpec) and the plan runs it again under the new ones.
  bool outdated = false;
};

struct NodeView {
  std::string name;
  int gpus = 0;
  double gpu_memory_gib = 0;
  bool alive = true;
  std::string gpu_type = {};  // its pool's GPU type; empty: the cluster names none
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
  kShare,   // the cluster-wide share gives its GPUs to other jobs (cluster_share.h)
  kSpec,    // its gang was made under pod settings since edited (TaskView::outdated)
};
const char* StopReasonName(StopReason reason);  // "replan" | "quota" | "share" | "spec"

struct StopAction {
  size_t task = 0;  // index into WorldView::tasks
  StopReason reason = StopReason::kReplan;
};

struct Decision {
  bool solved = false;
  bool adopted = false;
  std::string reason;
  std::optional<Trigger> trigger;  // why it solved
  double solver_seconds = 0;
  // The fresh plan's gap over its lower bound (CBC's best bound where the
  // planner ran a MILP and it is above the combinatorial one), its bound,
  // the tasks it planned, and whether it was warm-started and kept running
  // gangs fixed.
  double gap = 0;
  double lower_bound = 0;
  int tasks_planned = 0;
  bool warm = false;
  bool kept_running = false;
  double current_objective = 0;  // the current plan re-timed, when there is one
  double new_objective = 0;
  planner::Plan plan;  // the adopted plan (absolute), when adopted
  // The adopted plan's interleaved gangs (world task indices): each member's
  // assignment is the gang's (same GPUs and times), its config its one-GPU
  // spill configuration; the world runs them in one gang process.
  std::vector<std::vector<size_t>> gangs;
  // The running tasks the adopted plan stops now: another configuration,
  // other GPUs, or a later start. Every world stops exactly these (and no
  // other running task) when it applies the plan.
  std::vector<StopAction> stops;
};

// The UpdateStatus action: what one solve says of the job, in world terms, for
// each world's status: the controller's status.plan and PlanAdopted event, the
// local runner's report and plan event, the simulator's re-plan log. Every
// world shows the same figures because they are worked out here, once.
struct PlanStatusUpdate {
  double at = 0;         // world time of the solve
  std::string trigger;   // TriggerName of what it solved on
  bool adopted = false;  // the fresh plan replaced the one in force
  // The plan in force's number after this solve (Engine::adoptions()): 1 for
  // the first adopted plan; unchanged when this one was not adopted.
  int revision = 0;
  std::string planner;  // the adopted plan's planner; "" when not adopted
  // When the adopted plan finishes, on the world's clock; 0 when not adopted.
  double ends_at = 0;
  // A bound on that finish, on the same clock, under the makespan objective.
  // Under weighted completion the plan's bound is on the sum of weight x
  // completion time, not a time: nullopt (the gaps are on that objective).
  std::optional<double> ends_at_bound;
  double plan_gap = 0;  // the adopted plan's gap over its bound (0 when not adopted)
  // The solve itself: the fresh plan's gap over its lower bound (CBC's best
  // bound where a MILP ran), that bound and its objective on the remaining
  // problem (from the solve, not on the world's clock), the tasks it planned,
  // and whether it was warm-started and kept running gangs fixed.
  double solve_gap = 0;
  double lower_bound = 0;
  double objective = 0;
  double solver_seconds = 0;
  int tasks_planned = 0;
  bool warm = false;
  bool kept_running = false;
};

// The status a solved decision gives at world time `now`, with `revision`
// the plan in force's number and `objective` what the plan minimised.
PlanStatusUpdate PlanStatusOf(const Decision& d, double now, int revision,
                              planner::Objective objective);

// ---- one step of a world ------------------------------------------------------
//
// Every world runs the same loop: observe, Engine::Step, apply. The step finds
// what changed since the engine last planned (the trigger), re-plans when that
// calls for it, and says which running tasks stop and which waiting tasks
// launch now, on which nodes. A world applies exactly these actions: it never
// launches or stops a task on its own judgement (a failed gang or a lost node
// ends by itself; the world reports that in the next view).

struct StepInput {
  WorldView world;
  // GPUs free for this job's launches now, by world node: net of every gang
  // that still holds GPUs there (the job's own running and stopping gangs
  // included). Empty: each alive node's GPUs less what its running tasks hold.
  std::vector<int> free_gpus;
  // GPUs the job may still take now (its quota or share less what it holds);
  // < 0: no limit beyond the plan's.
  int launch_budget = -1;
  // Tasks (world indices) that must not launch now although the view shows
  // them waiting: a gang of theirs is still going away, or was just created.
  std::set<size_t> blocked;
  // Whether a stopped task's GPUs are free at once (the simulator: the switch
  // is charged as lost progress) or only once its ranks are gone (processes
  // and pods, which checkpoint first).
  bool stops_free_at_once = false;
  // A change the view cannot show (a gang the cluster share stopped, a gang
  // whose placement failed): the step plans again on it.
  std::optional<Trigger> also;
};

struct LaunchAction {
  size_t task = 0;  // world index
  int config = -1;  // index into the task's profile
  // One slot per rank, nodes as world indices of this step's view (the plan's
  // GPU indices; a world may give a rank any free GPU of that node).
  std::vector<planner::GpuSlot> gpus;
  // An interleaved gang of the plan launching as one process: its other
  // waiting members, each at its own config, sharing `gpus`. Empty: `task`
  // runs alone.
  std::vector<LaunchAction> interleaved;
};

struct StepResult {
  std::optional<Trigger> trigger;  // what changed, when anything did
  // A trigger held back by coalescing (EngineOptions::coalesce_window_s):
  // next_step_at is the window's end, when it solves with whatever else came.
  std::optional<Trigger> deferred;
  std::optional<Decision> decision;  // when the step solved
  Status error;                      // a solve that failed (the old plan stays)
  std::vector<StopAction> stops;     // the adopted plan's stops
  std::vector<LaunchAction> launches;
  // UpdateStatus: set on every step that solved or adopted a plan; the world
  // writes it to its status, report or log as it is.
  std::optional<PlanStatusUpdate> status;
  // The world time at which the engine wants to be asked again even if nothing
  // changes (the next periodic re-plan); infinity when it does not.
  double next_step_at = std::numeric_limits<double>::infinity();
};

// The tasks of `plan` to launch now: those waiting (arrived, not done, not
// running or stopped with `stops_free_at_once`, not blocked) in planned start
// order, each when its planned nodes (`plan_nodes`: names of the nodes the
// plan's indices meant) have the GPUs free now. A task that cannot start still
// claims its GPUs, so a later task does not take what an earlier one waits
// for; the first task over the launch budget stops the launches, so later
// tasks never overtake it on the quota. A task planned on a node that is gone
// waits for the next plan.
// Members of one of `gangs` (the plan's interleaved gangs) launch together as
// one action on the first waiting member's GPUs; a gang with one member
// waiting launches it alone.
std::vector<LaunchAction> SelectLaunches(const StepInput& in, const planner::Plan& plan,
                                         const std::vector<std::string>& plan_nodes,
                                         const std::vector<StopAction>& stops,
                                         const std::vector<std::vector<size_t>>& gangs = {});

class Engine {
 public:
  // `clock` measures solver time and may be null.
  Engine(EngineOptions options, const Clock* clock);

  // Whether `trigger` calls for a solve under the options; kStart, kTaskArrived
  // and kCapacityChanged always do.
  bool ShouldSolve(Trigger trigger) const;

  // Solves the remaining problem if ShouldSolve, and adopts per the rules.
  StatusOr<Decision> Decide(const WorldView& world, Trigger trigger);

  // One step of a world (see StepInput): the trigger, a decision when it
  // calls for one, the stops and the launches.
  StepResult Step(const StepInput& in);

  // What changed since the last solve, most urgent first: no plan yet (start),
  // the nodes, the cap, a task that arrived (or waits outside the plan), a
  // task that finished, a measured speed that drifted past the tolerance from
  // the one planned with, or the re-plan interval passed; nullopt: nothing.
  std::optional<Trigger> DetectTrigger(const StepInput& in) const;

  // Drops the plan and what the job looked like when it was made: the next
  // step plans from scratch (kStart). Counters stay.
  void Forget();

  // New options for a running job (its spec.scheduling was edited): they
  // apply from now on, and the next step solves again under them (kSpecChanged,
  // adopted by the new rules) while the current plan stays in force until then.
  // `why` is kGangSpeedMeasured where the world, not the spec, changed them.
  // False when nothing changed.
  bool UpdateOptions(const EngineOptions& options, Trigger why = Trigger::kSpecChanged);

  const std::optional<planner::Plan>& current_plan() const { return current_; }
  // Names of the nodes the current plan's node indices refer to.
  const std::vector<std::string>& plan_nodes() const { return plan_nodes_; }
  // The current plan's interleaved gangs (Decision::gangs).
  const std::vector<std::vector<size_t>>& gangs() const { return gangs_; }
  int solves() const { return solves_; }
  int adoptions() const { return adoptions_; }
  const EngineOptions& options() const { return options_; }
  // Every step's actions and what the world did with them (journal.h): worlds
  // report their launches and stops here.
  ActionJournal& journal() { return journal_; }
  const ActionJournal& journal() const { return journal_; }

 private:
  EngineOptions options_;
  const Clock* clock_;
  std::unique_ptr<planner::Planner> planner_;
  // What the world looked like at the last solve: triggers are what differs.
  struct Snapshot {
    std::string nodes;  // name:gpus:alive of each node
    int cap = 0;
    std::set<std::string> arrived, done, unplanned;
    std::map<std::string, double> speed;  // speed factor by task
    double at = 0;
  };
  Snapshot Observe(const StepInput& in) const;
  // Whether the current plan has a gang not yet started that was timed with
  // another interleave_speedup than the options' now (a measured one): the
  // re-timed current plan cannot show that (it runs gangs one task per GPU),
  // so a solve adopts its plan.
  bool WaitingGangStale(const WorldView& world) const;

  std::optional<planner::Plan> current_;
  std::vector<std::string> plan_nodes_;
  std::vector<std::vector<size_t>> gangs_;
  double gangs_speedup_ = 0;  // the interleave_speedup gangs_ were timed with
  std::optional<Snapshot> solved_;
  std::optional<Trigger> pending_;  // a StepInput::also not yet solved on
  // The node text at which a stale plan (nothing runs, nothing can start) was
  // last re-solved, so one capacity gets one such re-solve.
  std::string stale_resolved_at_;
  int solves_ = 0;
  int adoptions_ = 0;
  ActionJournal journal_;
};

// `planner.Solve` and, where planner::SolveInterleaved finds it better, the
// plan with interleaved gangs of spilled tasks, each member given its gang's
// assignment at its own one-GPU spill configuration; `gangs`: the gangs'
// members (problem indices), empty when the plan has none.
StatusOr<planner::Plan> SolveWithGangs(planner::Planner& planner, const planner::Problem& problem,
                                       const planner::PlanOptions& options, double speedup,
                                       std::vector<std::vector<int>>* gangs);

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
