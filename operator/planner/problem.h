// The SPASE problem as pure data: tasks with remaining work and a table of
// feasible configurations (template, GPUs, nodes spanned, batch size, profiled
// throughput, memory), a cluster of nodes, and the plan a planner returns (per
// task: configuration, GPUs, start, end) with its objective, lower bound and gap.
// Everything here is plain values; planners, checker and bounds read it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::planner {

// One way to run a task: a parallelism template on `gpus` GPUs spread evenly over
// `nodes` nodes, with the throughput and per-GPU memory the profiler measured.
// `gpu_type` names the GPU type the throughput is for (a node pool's type);
// empty: any type, at this throughput (a cluster of one type, as before types).
struct Config {
  std::string template_name;  // ddp, fsdp, pipeline, tensor, spill
  int gpus = 1;
  int nodes = 1;  // nodes spanned; gpus % nodes == 0
  int batch_size = 0;
  double throughput = 0;  // samples per second
  double memory_gib = 0;  // peak per GPU
  int GpusPerNode() const { return gpus / nodes; }
  std::string gpu_type = {};  // empty: any type
  // Activation recomputation the configuration runs with: "none" or "unit"
  // (worker/contract/templates.h kRecomputeModes); its memory and throughput
  // are that mode's. Last, so that positional initialisers keep their meaning.
  std::string recompute = "none";
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
  // The GPU types the task may run on (the spec's restriction); empty: any.
  std::vector<std::string> gpu_types = {};
};

// A node of a pool: every GPU of a node is of the pool's `gpu_type` (empty: the
// one type of a cluster that names none). A gang never spans GPU types.
struct Node {
  std::string name;
  int gpus = 0;  // free GPUs
  double gpu_memory_gib = 0;
  std::string gpu_type = {};
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
// Whether `node` can host a share of task `task` under `config`: enough GPUs
// for its per-node share, enough GPU memory, the config's type (when it names
// one) and a type the task allows.
bool NodeServes(const Node& node, const Task& task, const Config& config);
// Whether GPU type `type` is among `allowed` (a task's gpu_types; empty: any).
bool AllowsGpuType(const std::vector<std::string>& allowed, const std::string& type);
// Whether `config` can be placed on this cluster at all: enough nodes of one
// GPU type that serve it (a gang never spans types), and no more GPUs than the cap.
bool ConfigFits(const Problem& problem, const Task& task, const Config& config);
// The same for a task that allows every GPU type.
bool ConfigFits(const Problem& problem, const Config& config);
// The distinct GPU types of the problem's nodes, sorted ("" for untyped nodes).
std::vector<std::string> GpuTypes(const Problem& problem);
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

// Profiling every GPU type is expensive, so a task profiled on one type gets
// estimates for the others, as Sia (SOSP'23) bootstraps its throughput models:
// a type's speed relative to another is one factor per pair of types,
// measured as the geometric mean of the throughput ratio over the
// configurations (same template, GPUs and batch) some tasks were profiled
// with on both; the engine's measured speed then corrects each task as it runs.
// 0 when no task was profiled on both types.
double MeasureTypeSpeed(const Problem& problem, const std::string& from, const std::string& to);
// Gives every task configurations for each GPU type of the cluster it has none
// for: its configurations of the first type it has, throughput scaled by
// speed[to] / speed[from] (a factor from `speed` when both are listed there,
// else MeasureTypeSpeed), kept where their per-node share fits that type's
// nodes. A type with no factor either way stays unprofiled for the task.
// Returns how many configurations it added. Typeless configurations (any
// type) need no estimate.
int EstimateMissingTypes(Problem& problem, const std::map<std::string, double>& speed);

// Fills makespan, weighted completion, objective and gap from the assignments.
void Summarize(const Problem& problem, Plan& plan);

}  // namespace orrery::planner
