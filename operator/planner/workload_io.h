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
  enum class Kind { kNodeLost, kNodeJoined, kQuota };
  Kind kind = Kind::kNodeLost;
  double time = 0;
  int node = -1;  // kNodeLost: the node index; kNodeJoined: -1 (a node like the others)
  int gpus = 0;   // kQuota: the new cap
};

struct Workload {
  std::string name;
  int gpus_per_node = 0;
  double gpu_memory_gib = 0;
  Problem problem;                 // arrival times as given; all nodes present at time 0
  std::vector<double> true_speed;  // per task: true throughput / profiled; 1 when absent
  std::vector<ClusterEvent> events;
};

// Configurations larger than a node span ceil(gpus / gpusPerNode) nodes; only
// ddp, fsdp and pipeline may span nodes.
StatusOr<Workload> ParseWorkload(std::string_view yaml);
// The YAML ParseWorkload reads back to the same workload.
std::string FormatWorkload(const Workload& workload);

}  // namespace orrery::planner
