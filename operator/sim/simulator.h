// The simulated world: a discrete-event cluster that runs the engine's plans.
// True speed differs from profiled speed by a per-task factor, nodes are lost
// and join at given times, tasks arrive. The simulator observes (progress,
// measured throughput after a warm-up, live nodes), calls the engine on each
// trigger, and applies adopted plans: a running task whose configuration or
// GPUs change is checkpointed and restarted, paying the switching cost. Tasks
// start in each GPU's planned order as soon as their GPUs are free, so a plan
// made with wrong speeds still runs, just worse. Every interval a task actually
// ran is recorded so a schedule can be checked without the simulator.
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/engine/cluster_share.h"
#include "operator/engine/engine.h"
#include "operator/planner/workload_io.h"

namespace orrery::sim {

struct SimOptions {
  // engine.interleave offers interleaved gangs of spilled tasks (`orrery run`
  // offers them; `orrery simulate` by default, --no-interleave not).
  engine::EngineOptions engine;
  // The speedup gangs truly run at in this world (planner::GangShares of it,
  // the planner's own gang time), as true_speed is a task's: <= 0, the
  // engine's interleave_speedup. The engine plans with its own until a gang
  // has run measure_after_s; then, as `orrery run` does, the measured
  // speedup goes back to the engine where it drifted past its tolerance.
  double gang_speedup = 0;
  double measure_after_s = 600;         // running time before throughput is known
  double checkpoint_interval_s = 1800;  // progress since the last checkpoint is lost with a node
  double max_time_s = 1e8;              // safety stop
  // The cluster share between the workload and its otherJobs (the operator's
  // ClusterShares; its rescale cost is the engine's switch_cost_s, as the
  // operator's is). Unused without other jobs.
  engine::ClusterShareOptions cluster_share = {};
};

struct RunInterval {
  std::string task;
  double start = 0;
  double end = 0;
  std::string template_name;
  int gpus = 0;
  int batch_size = 0;
  std::vector<planner::GpuSlot> slots;  // node and GPU indices
  std::string ended_by;                 // finished, preempted, node-lost
  // The interleaved gang it ran in ("a+b": one process on its GPU shared
  // with the other members, local::ReportBar::gang); empty: alone.
  std::string gang = {};
};

// One solve of the engine, as its UpdateStatus action says it (when, why, the
// solver's seconds and gap, the tasks it planned, whether it was adopted,
// warm-started and kept running gangs fixed).
using Replan = engine::PlanStatusUpdate;

struct SimResult {
  std::string workload;
  std::string policy;
  double makespan = 0;
  double mean_completion = 0;  // completion minus arrival
  double p95_completion = 0;
  double gpu_utilisation = 0;  // GPU-seconds allocated over GPU-seconds alive until makespan
  double solver_seconds = 0;
  int replans = 0;                 // solves
  std::vector<Replan> replan_log;  // one per solve, in order
  int coalesced = 0;               // steps whose trigger waited for a later solve
  int adoptions = 0;
  int switches = 0;  // running tasks checkpointed and moved by an adopted plan
  int gangs = 0;     // interleaved gangs launched
  // Launches the engine made onto GPUs that were not free, which the world
  // refused (the task waits for the next step): 0 unless the engine miscounts.
  int launches_refused = 0;
  // Running tasks the cluster share stopped to give their GPUs to other jobs
  // (workload otherJobs), and the share's decisions.
  int share_stops = 0;
  int share_decisions = 0;
  // Each gang's measured speedup over its members one after the other, in
  // order of measurement (fed back to the engine as `orrery run` does).
  std::vector<double> gang_speedups;
  int tasks = 0;
  int node_events = 0;
  std::vector<RunInterval> intervals;
  std::vector<double> completion;  // per task, absolute
  int nodes_total = 0;             // nodes ever present (lanes in the chart)
  int gpus_per_node = 0;
  // The engine's actions in order, and any the simulator took without it
  // (engine/journal.h; none, or the simulator is wrong).
  std::vector<engine::JournalEntry> actions;
  std::vector<std::string> violations;
};

// Runs the workload to completion. `clock` measures solver time (may be null).
StatusOr<SimResult> Simulate(const planner::Workload& workload, const SimOptions& options,
                             const Clock* clock);

std::string ResultJson(const SimResult& result);
std::string ResultTable(const SimResult& result);
// One line per re-plan: time, trigger, solver seconds, gap, tasks, adopted.
std::string ReplanTable(const SimResult& result);
// One lane per GPU, one bar per interval, coloured per task.
std::string GanttSvg(const SimResult& result);

}  // namespace orrery::sim
