// The cluster-wide allocation across jobs: the operator's upper level of
// scheduling. Many ModelSelectionJobs share one cluster; each plans its own
// tasks (template, GPUs, batch, order) with its own engine (engine.h). Without
// an upper level, whichever job reconciled first took every free GPU and a job
// submitted later waited for whole plans to drain. ClusterShares runs the
// elastic autoscaler (autoscaler.h, after Saxena et al., MASCOTS 2020) over the
// arrived, unfinished tasks of every job at once: it gives GPUs (and batch
// sizes, for elastic jobs) to the tasks that turn them into the most progress,
// with every change charged its rescale cost, and re-decides on an arrival, a
// completion, a capacity change or an interval, as the paper's autoscaler does.
// A job's share is the GPUs its tasks get; its cap adds the GPUs the
// allocation leaves idle (they are anyone's, so the level above never idles a
// GPU a job could use). Each job then plans within its cap.
//
// A job over its share stops starting gangs until it is under. A running task
// is stopped only when the decision itself shrinks it (JobShare::shrinks): the
// autoscaler charges every such change its rescale cost, with hysteresis and a
// dwell time, so a share change pauses a task only when the cluster gains more
// than the pause costs. Growth of a running task is left to its job's engine,
// within the cap. Pure: no I/O, time comes in.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/engine/autoscaler.h"
#include "operator/engine/engine.h"

namespace orrery::engine {

// One job's part of the cluster: its arrived, unfinished tasks with their
// (GPUs, batch) option tables. Task names are unique within the job.
struct JobDemand {
  std::string job;  // the job's key (namespace/name)
  int quota = 0;    // most GPUs its tasks may hold at once; 0: none
  std::vector<ScaleTask> tasks;
  // The GPU types the options' `type` indexes (Option::type), by name; empty:
  // one pool, whatever its type (every option's type 0).
  std::vector<std::string> pools = {};
};

// The demand of a job from the view its planner gets (`tasks` in the view's
// order): every arrived unfinished task with remaining work and a profile; per
// (GPUs, batch) the fastest configuration's throughput, scaled by the task's
// measured speed; a configuration without a batch runs at the task's own, which
// is also its base batch; the configuration a live gang runs is its current
// option. Total work is the task's sample budget. With alive nodes of two or
// more GPU types, per (type, GPUs, batch): a typed configuration in its type's
// pool, a typeless one in each pool of a type the task may use (its running
// gang's option in the pool of the node it runs on).
JobDemand DemandFromWorld(const std::string& job, int quota, const WorldView& world,
                          const std::vector<api::ExpandedTask>& tasks);
// The same from each task's own batch size (`base_batch`, a configuration
// without one runs at it) and sample budget (`total_work`), by view index: for
// a world without the spec's tasks (the simulator's workload).
JobDemand DemandFromView(const std::string& job, int quota, const WorldView& world,
                         const std::vector<int>& base_batch, const std::vector<double>& total_work);

// A running task the allocation shrinks (to fewer GPUs, or queued) to give its
// GPUs to others: the autoscaler found the gain worth the rescale.
struct ShareShrink {
  std::string task;  // the job's own task name
  int from_gpus = 0;
  int to_gpus = 0;  // 0: queued
};

struct JobShare {
  int gpus = 0;        // what the allocation gives the job's tasks, within its quota
  int cap = 0;         // gpus plus the GPUs the allocation leaves idle, within its quota
  std::string reason;  // the allocation's decisions about the job's tasks
  int decision = 0;    // the decision that made it (1, 2, ...): a world applies it once
  std::vector<ShareShrink> shrinks;
};

struct ShareUpdate {
  bool decided = false;  // the autoscaler ran on this update
  ScaleTrigger trigger = ScaleTrigger::kInterval;
  std::map<std::string, JobShare> shares;  // every job with demand
  std::vector<std::string> changed;        // jobs whose cap this update changed
};

// The most DP work (the allocator's states, the product of each pool's GPUs +
// 1, times every task's options) at which the shares are decided per GPU type:
// e.g. 3 pools of 16 GPUs (4,913 states) for 100 tasks of 20 options each is
// 9.8M. Above it the DP's time grows past what a reconcile should spend (the
// knapsack visits every state for every option), and the pools are decided
// as one.
inline constexpr double kTypedShareWork = 2e7;

struct ClusterShareOptions {
  AutoscalerOptions autoscaler;
  double interval_s = 300;  // re-decide at least this often while jobs are active
};

// What a job's share means for its next step, the same in every world that
// runs the cluster share:
//   - launch_cap: the GPUs its tasks may hold once it launches: the share's
//     cap, within `quota` (< 0: none; 0 is no room at all, as a Kueue
//     admission its trials fill leaves);
//   - plan_cap: the cap its plan keeps within, never under what its tasks still
//     hold after `stops` nor under its narrowest task's least GPUs (a cap a task
//     cannot fit in makes no plan at all; such a task waits at launch instead);
//   - stops: the running tasks the share's decision shrinks, in its order, until
//     the job is within launch_cap (reason kShare; they checkpoint first, and
//     the job plans them again within its share). Only from a decision newer
//     than `applied_decision` (each decision stops once) and only a task still
//     running on the GPUs the decision saw.
struct ShareStep {
  int launch_cap = 0;
  int plan_cap = 0;
  int held = 0;  // GPUs its running tasks hold once `stops` are done
  std::vector<StopAction> stops;
};
ShareStep StepShare(const JobShare& share, int quota, const WorldView& world, int applied_decision);

class ClusterShares {
 public:
  explicit ClusterShares(ClusterShareOptions options)
      : options_(options), autoscaler_(options.autoscaler) {}

  // Records `demand` (a job without tasks leaves) and `capacity`, the GPUs all
  // jobs may use together, and re-decides when a task arrived or finished, the
  // capacity changed or interval_s passed since the last decision; otherwise the
  // shares stand. InvalidArgument for a negative capacity, an empty job key, a
  // negative quota or a bad option table (field path demand.tasks[i]...).
  StatusOr<ShareUpdate> Update(JobDemand demand, int capacity, double now);
  // The same with the GPUs by type (the nodes' GPU type labels, "" for
  // unlabelled): with two or more typed pools the autoscaler decides per pool
  // (each task's options in the pools its demand names; a task never spans
  // types) where the DP's work is small enough (kTypedShareWork),
  // else over their sum as one pool. Also InvalidArgument for a negative count.
  StatusOr<ShareUpdate> Update(JobDemand demand, const std::map<std::string, int>& capacity,
                               double now);
  // Forgets a deleted job; its GPUs go to the others at the next update.
  void Remove(const std::string& job);
  std::optional<JobShare> Share(const std::string& job) const;
  // Every decision of the autoscaler, task names as "job/task".
  const std::vector<ScaleDecision>& log() const { return autoscaler_.log(); }
  int decisions() const { return decisions_; }

 private:
  StatusOr<ShareUpdate> Decide(ScaleTrigger trigger, double now);
  bool QuotasMoved() const;  // a job's quota differs from the one last decided with

  ClusterShareOptions options_;
  Autoscaler autoscaler_;
  std::map<std::string, JobDemand> demands_;
  std::map<std::string, JobShare> shares_;
  std::set<std::string> decided_tasks_;          // "job/task" at the last decision
  std::map<std::string, int> capacity_;          // by GPU type, as last updated
  std::map<std::string, int> decided_capacity_;  // at the last decision
  std::map<std::string, int> decided_quotas_;    // each job's quota at the last decision
  double last_decision_ = 0;
  int decisions_ = 0;
};

}  // namespace orrery::engine
