// Workload files for the simulator and the benchmark: a cluster, tasks with
// profile tables (and optionally a true-speed factor), and cluster events.
// Parsing works on YAML text (the caller reads the file), with field-path
// errors like "tasks[3].profiles[0].throughput: must be positive".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/planner/problem.h"

namespace orrery::planner {

struct ClusterEvent {
  // kQuota: the job's GPU cap (its gpuQuota) is edited to `gpus` (0: none).
  // kPoolLost: every node of GPU type `gpu_type` goes.
  enum class Kind { kNodeLost, kNodeJoined, kQuota, kPoolLost };
  Kind kind = Kind::kNodeLost;
  double time = 0;
  int node = -1;  // kNodeLost: the node index; kNodeJoined: -1 (a node like the others)
  int gpus = 0;   // kQuota: the new cap
  // kNodeJoined: the pool the node joins (empty: the first); kPoolLost: the pool.
  std::string gpu_type = {};
};

// A node pool: `nodes` nodes of `gpus_per_node` GPUs of one type. `speed`
// (optional, 0: not given) is the type's throughput relative to the other
// pools', used to estimate the profiles a task lacks for this type.
struct Pool {
  std::string gpu_type;
  int nodes = 0;
  int gpus_per_node = 0;
  double gpu_memory_gib = 0;
  double speed = 0;
};

// Another job on the same cluster. The operator's cluster share
// (engine/cluster_share.h) divides the GPUs between jobs; the simulator runs
// the workload's own tasks and, from `arrival` until `leave`, gives this job the
// share the division decides for its tasks (their configurations and work):
// those GPUs are not the workload's. Its own progress is not simulated.
struct OtherJob {
  std::string name;
  double arrival = 0;
  double leave = 0;  // <= arrival: it stays to the end
  int quota = 0;     // its gpuQuota (0: none)
  std::vector<Task> tasks;
};

struct Workload {
  std::string name;
  // The first pool's node shape (the only one without pools).
  int gpus_per_node = 0;
  double gpu_memory_gib = 0;
  // `cluster.pools`, when the file has them: nodes are laid out pool by pool.
  std::vector<Pool> pools;
  Problem problem;                 // arrival times as given; all nodes present at time 0
  std::vector<double> true_speed;  // per task: true throughput / profiled; 1 when absent
  std::vector<ClusterEvent> events;
  // `otherJobs`: when given, the simulator divides the GPUs between the
  // workload (as a job named `name`, quota problem.gpu_cap) and these.
  std::vector<OtherJob> other_jobs = {};
};

// Configurations larger than a node span ceil(gpus / gpusPerNode) nodes; only
// ddp, fsdp and pipeline may span nodes. With `cluster.pools` (GPU types), a
// profile's `gpuType` names the pool it was measured on (omitted: the first
// pool's), a task's `gpuTypes` restricts it to some pools, and profiles a task
// lacks for a pool are estimated (EstimateMissingTypes, pool speeds).
StatusOr<Workload> ParseWorkload(std::string_view yaml);
// The YAML ParseWorkload reads back to the same workload.
std::string FormatWorkload(const Workload& workload);

}  // namespace orrery::planner
