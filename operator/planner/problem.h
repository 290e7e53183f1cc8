// The SPASE problem as pure data: tasks with remaining work and a table of
// feasible configurations (template, GPUs, nodes spanned, batch size, profiled
// throughput, memory), a cluster of nodes, and the plan a planner returns (per
// task: configuration, GPUs, start, end) with its objective, lower bound and gap.
// Everything here is plain values; planners, checker and bounds read it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::planner {

// One way to run a task: a parallelism template on `gpus` GPUs spread evenly over
// `nodes` nodes, with the throughput and per-GPU memory the profiler measured.
struct Config {
  std::string template_name;  // ddp, fsdp, pipeline, tensor, spill
  // Activation recomputation the configuration runs with: "none" or "unit"
  // (worker/contract/templates.h kRecomputeModes); its memory and throughput
  // are that mode's.
  std::string recompute = "none";
  int gpus = 1;
  int nodes = 1;  // nodes spanned; gpus % nodes == 0
  int batch_size = 0;
  double throughput = 0;  // samples per second
  double memory_gib = 0;  // peak per GPU
  int GpusPerNode() const { return gpus / nodes; }
};

struct GpuSlot {
  int node = 0;
  int gpu = 0;
  bool operator==(const GpuSlot&) const = default;
  // clang-tidy 14 misreads the defaulted <=> as a literal 0 compared with a pointer.
  auto operator<=>(const GpuSlot&) const = default;  // NOLINT(modernize-use-nullptr)
};

// A task already running when the plan is made. Keeping its configuration and
// GPUs is free; any change costs `switch_cost_s` (checkpoint plus restart).
struct RunningState {
  int config = -1;
  std::vector<GpuSlot> gpus;
  double switch_cost_s = 0;
};

struct Task {
  std::string name;
  double work = 0;     // remaining samples
  double arrival = 0;  // seconds from plan time 0; may not start before
  double weight = 1;
  std::vector<Config> configs;
  std::optional<RunningState> running;
};

struct Node {
  std::string name;
  int gpus = 0;  // free GPUs
  double gpu_memory_gib = 0;
};

enum class Objective { kMakespan, kWeightedCompletion };

struct Problem {
  std::vector<Node> nodes;
  std::vector<Task> tasks;
  Objective objective = Objective::kMakespan;
  // The most GPUs the tasks may hold at once, whatever the nodes offer: a job's
  // gpuQuota. 0: no cap beyond the nodes.
  int gpu_cap = 0;

  int TotalGpus() const;
  // GPUs the tasks can hold at once: the nodes' total, or the cap when lower.
  int UsableGpus() const;
};

// Seconds task `t` needs under config `c`, including the switch cost when it is
// running in another configuration (a move to other GPUs is charged by the
// scheduler, which knows the GPUs).
double RunSeconds(const Task& task, int config);
// Whether `config` can be placed on this cluster at all: enough nodes with
// enough free GPUs and GPU memory, and no more GPUs than the cap.
bool ConfigFits(const Problem& problem, const Config& config);
// InvalidArgument with a field path for malformed input; FailedPrecondition
// naming the first task with no configuration that fits the cluster.
Status ValidateProblem(const Problem& problem);

struct Assignment {
  int config = -1;
  std::vector<GpuSlot> gpus;  // sorted
  double start = 0;
  double end = 0;
};

struct Plan {
  std::string planner;
  std::vector<Assignment> assignments;  // indexed like Problem::tasks
  double makespan = 0;
  double weighted_completion = 0;  // sum of weight * end
  double objective = 0;            // the one Problem::objective names
  double lower_bound = 0;          // on the same objective
  double gap = 0;                  // (objective - lower_bound) / objective
  bool proven_optimal = false;
  bool timed_out = false;  // the solver stopped on its time limit
  std::string note;        // what happened (fallbacks, model size, ...)
  double solve_seconds = 0;
};

// Fills makespan, weighted completion, objective and gap from the assignments.
void Summarize(const Problem& problem, Plan& plan);

}  // namespace orrery::planner
