// The elastic autoscaler (Saxena et al., MASCOTS 2020, the autoscaler around their
// DP optimiser): on a job arrival, a completion, a capacity change or an interval
// it re-runs the elastic allocator (operator/planner/elastic) over every active
// task and decides, task by task, which of the allocator's changes to apply.
//
// A change to a running task (other GPUs, another batch size, or queued) costs a
// rescale: the task checkpoints and restarts and makes no progress for
// `rescale_cost_s`. The autoscaler does not apply the allocator's optimum and
// then argue with it task by task: it solves one knapsack whose values already
// charge every change its rescale cost (times 1 + hysteresis), so the plan it
// applies is exactly the best trade of gains against pauses for the whole
// cluster, found by one DP. The gain of a change is counted over `horizon_s`,
// or until the task would finish where it is, if sooner (then its GPUs come free
// anyway); a preemption also costs the preempted task's progress over the
// horizon, since it waits in the queue, not only its restart. A second DP without the charges gives
// what the allocator alone would have done; a running task it would have changed and the plan keeps
// is recorded as kept, with the gain and cost that decided it. Every per-task gain is exact and
// costs O(capacity), read off the DP's prefix and suffix tables
// (planner::elastic::Knapsack::BestWith): the best plan for the cluster with that task held where
// it is. Capacity below what running tasks hold forces shrinks regardless. Tasks that are not
// running start without a rescale cost.
//
// Tasks with a base batch (ElasticTask::base_batch, the user's own) decide in
// three steps, because the knapsack over every batch's options fell into traps
// a fixed batch cannot enter (tests/operator/sim/elastic_sim_test.cc):
//  1. The GPU counts come from the decision above on each task's base-batch
//     options only (a shadow fixed-batch decision, its own dwell times), whose
//     deadline test asks whether a task is on course at the speed it really
//     runs at with that many GPUs, its fastest batch.
//  2. Each task runs its fastest option at the shadow's GPU count; a running
//     task changes batch at the same GPUs only when the time it saves beats
//     (1 + hysteresis) x the rescale cost.
//  3. A task may grow, greedily, the largest saving first, onto GPUs the shadow
//     leaves idle, at a batch other than its base (the shadow had the base
//     batch's wider options and left them), when the time it saves beats two
//     rescale costs (the growth and the shrink back) with hysteresis; it shrinks
//     back to the shadow's count once the shadow gives those GPUs to another.
// So batch moves with the GPUs but never decides them, and the traps stay shut:
// narrower options at a smaller batch made the joint knapsack run more jobs side
// by side than is best for mean completion time; a slightly faster wide option
// grew a lone job onto idle GPUs an arrival then had to wait for (its dwell) or
// take back (a rescale); and the deadline bonus, judging each option's own
// speed, shrank a job about to finish to start one that could have waited.
// A task with no base batch (0, or no option at it: every batch movable)
// offers the shadow its fastest option per GPU count, so it is treated as
// pinned to its best batch at each count. When no task has a base batch the
// joint knapsack decides alone, as above.
//
// GPU types: with more than one pool the joint knapsack decides alone unless
// AutoscalerOptions::shadow_across_types is set. With a capacity per pool
// (planner::elastic::Capacity) and options naming their pool, every step above is per pool: the DPs
// choose pool, count and batch together, the shadow's options are the base batch's per pool and GPU
// count, a task's batch follows within the pool the shadow chose, and guarded growth takes only
// idle GPUs of the pool the task runs on, so a task never spans types. A pool losing GPUs forces
// shrinks there alone.
//
// Pure: no I/O, time comes in. Every decision is returned with its reason, and
// kept in a log the world may read.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/planner/elastic/allocator.h"

namespace orrery::engine {

struct AutoscalerOptions {
  double rescale_cost_s = 60;  // checkpoint + restart of a running task
  // How far ahead a change's gain is counted, and the window of kTimeSaved.
  double horizon_s = 1800;
  // A change is applied when gain > (1 + hysteresis) x cost. Above 0 this keeps
  // two nearly equal allocations from alternating (flapping).
  double hysteresis = 0.25;
  // Each task's throughput over its remaining work: the fraction of what is left
  // done per second, a shortest-remaining-time flavour that finishes jobs sooner.
  // Throughput over total work (the paper's size-normalised throughput) shares
  // GPUs out more evenly and missed the target more often on random
  // traces (tests/operator/sim/elastic_sim_test.cc).
  planner::elastic::Value value = planner::elastic::Value::kRemainingFraction;
  // When completions count only until a time (a reservation's end, a
  // simulation's horizon): in the last `horizon_s` before it, a task that can
  // still finish by then under an option is worth more than anything else the
  // objective weighs, so the plan first maximises how many tasks are on course
  // to finish by the deadline, then the objective. Infinity: no deadline.
  double deadline_s = std::numeric_limits<double>::infinity();
  // A task started, rescaled or preempted less than dwell x rescale_cost_s ago
  // keeps its option unless the capacity forces a shrink: a change must run a
  // while before another may undo it. Without it, with rescales costing minutes,
  // an arrival shrank a job that the next completion grew back and the next
  // arrival shrank again, seconds apart, each change pausing it anew. 0: none.
  double dwell = 4;
  // With several pools (GPU types) the joint knapsack decides type, count and
  // batch at once even for tasks with a base batch; set, the base-batch shadow
  // decides type and count there too, as on one pool. On the seeded typed traces
  // of bench/elastic/types_bench.cc (15 seeds x 2 and 3 types, 2026-11-27) the
  // joint decision's mean completion time was 0.664 of gpu-only's on average
  // against the shadow's 0.703, and 0.993 of the per-event optimum's against
  // 1.054: the shadow picks the type at the base batch's speed, and the batch
  // that follows cannot move the job to the type it suits.
  bool shadow_across_types = false;
};

enum class ScaleTrigger { kArrival, kCompletion, kCapacityChanged, kInterval };
const char* ScaleTriggerName(ScaleTrigger trigger);

// One active (arrived, unfinished) task. `options` is its feasible (GPUs, batch)
// table with throughput; `current` indexes the option it runs under, -1 queued.
using ScaleTask = planner::elastic::ElasticTask;

struct ScaleDecision {
  enum class Action {
    kStart,    // queued -> running
    kRescale,  // running -> other GPUs or batch
    kPreempt,  // running -> queued
    kKeep,     // the allocator wanted a change that did not pay its rescale cost
    kQueue,    // queued and stays queued (no room)
  };
  double time = 0;
  ScaleTrigger trigger = ScaleTrigger::kInterval;
  std::string task;
  Action action = Action::kKeep;
  int from_gpus = 0, from_batch = 0;  // 0: queued
  int to_gpus = 0, to_batch = 0;
  int from_type = 0, to_type = 0;  // pools (option types) of from and to
  // Progress (the objective, no bonus) the cluster gains over the horizon by this
  // change, against the best plan that leaves the task where it is. The deadline
  // and dwell bonuses that may have outweighed it are stated in the reason.
  double gain = 0;
  double cost = 0;  // objective lost to the rescale pause (before hysteresis)
  std::string reason;
};
const char* ActionName(ScaleDecision::Action action);

struct ScalePlan {
  std::vector<int> choice;  // per task: option index, or -1 (queued)
  std::vector<ScaleDecision> decisions;
  int gpus_used = 0;
  int allocator_runs = 0;  // DP solves (2 when a task is running, else 1)
};

class Autoscaler {
 public:
  explicit Autoscaler(AutoscalerOptions options) : options_(options) {}

  // Decides the allocation of `capacity` GPUs to `tasks` at time `now`.
  // Decisions list every start, rescale, preemption, kept task and queued task
  // (unchanged running tasks are not listed). InvalidArgument for a negative
  // capacity, a bad option table (field path tasks[i].options[j]) or a `current`
  // out of range (tasks[i].current).
  StatusOr<ScalePlan> Decide(const std::vector<ScaleTask>& tasks, int capacity,
                             ScaleTrigger trigger, double now);
  // The same over pools of GPU types: capacity[t] GPUs in pool t, each option's
  // GPUs from its pool (Option::type). Also InvalidArgument for a pool index an
  // option names that the capacity lacks (tasks[i].options[j].type).
  StatusOr<ScalePlan> Decide(const std::vector<ScaleTask>& tasks,
                             const planner::elastic::Capacity& capacity, ScaleTrigger trigger,
                             double now);

  const std::vector<ScaleDecision>& log() const { return log_; }
  const AutoscalerOptions& options() const { return options_; }

 private:
  // The knapsack decision over every option of every task (not logged). With
  // `speeds` ([i][j]: the speed task i really runs at under its option j), the
  // deadline's on-course test uses those instead of the options' throughput.
  StatusOr<ScalePlan> DecideJoint(const std::vector<ScaleTask>& tasks,
                                  const planner::elastic::Capacity& capacity, ScaleTrigger trigger,
                                  double now, const std::vector<std::vector<double>>* speeds);
  // The fixed-batch (shadow) decision settles GPU counts, then each task's
  // batch at its count and guarded growth onto idle GPUs (not logged).
  StatusOr<ScalePlan> DecideShadow(const std::vector<ScaleTask>& tasks,
                                   const planner::elastic::Capacity& capacity, ScaleTrigger trigger,
                                   double now);
  // DecideShadow's parts (autoscaler.cc): the shadow problem, the options the
  // tasks run under given the shadow's GPU counts, and the decisions explained.
  struct Shadow;
  StatusOr<Shadow> MakeShadow(const std::vector<ScaleTask>& tasks,
                              const planner::elastic::Capacity& capacity);
  void ChooseUnderShadow(const std::vector<ScaleTask>& tasks,
                         const planner::elastic::Capacity& capacity, const ScalePlan& sp,
                         Shadow& sh) const;
  ScalePlan ExplainShadow(const std::vector<ScaleTask>& tasks, const ScalePlan& sp,
                          const Shadow& sh, ScaleTrigger trigger, double now) const;

  AutoscalerOptions options_;
  std::vector<ScaleDecision> log_;
  std::map<std::string, double> last_change_;  // task -> time of its last change
  std::map<std::string, int> entitled_;        // grown task -> the shadow's GPU count
};

}  // namespace orrery::engine
