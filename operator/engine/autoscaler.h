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

  const std::vector<ScaleDecision>& log() const { return log_; }
  const AutoscalerOptions& options() const { return options_; }

 private:
  AutoscalerOptions options_;
  std::vector<ScaleDecision> log_;
  std::map<std::string, double> last_change_;  // task -> time of its last change
};

}  // namespace orrery::engine
