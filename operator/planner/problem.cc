// Helpers over the SPASE problem data: run times, fit checks, validation with
// field paths, and plan summaries.
#include "operator/planner/problem.h"

#include <algorithm>

namespace orrery::planner {

int Problem::TotalGpus() const {
  int total = 0;
  for (const Node& n : nodes) total += n.gpus;
  return total;
}

int Problem::UsableGpus() const {
  int total = TotalGpus();
  return gpu_cap > 0 ? std::min(gpu_cap, total) : total;
}

double RunSeconds(const Task& task, int config) {
  const Config& c = task.configs[static_cast<size_t>(config)];
  double seconds = task.work / c.throughput;
  if (task.running && task.running->config != config) seconds += task.running->switch_cost_s;
  return seconds;
}

bool ConfigFits(const Problem& problem, const Config& config) {
  if (config.nodes < 1 || config.gpus < 1 || config.gpus % config.nodes != 0) return false;
  if (problem.gpu_cap > 0 && config.gpus > problem.gpu_cap) return false;
  int hosts = 0;
  for (const Node& n : problem.nodes) {
    if (n.gpus >= config.GpusPerNode() && n.gpu_memory_gib >= config.memory_gib) ++hosts;
  }
  return hosts >= config.nodes;
}

Status ValidateProblem(const Problem& problem) {
  if (problem.nodes.empty()) return InvalidArgumentError("nodes: must not be empty");
  if (problem.gpu_cap < 0)
    return InvalidArgumentError("gpuCap: must not be negative (0 means no cap)");
  for (size_t i = 0; i < problem.nodes.size(); ++i) {
    const Node& n = problem.nodes[i];
    std::string path = "nodes[" + std::to_string(i) + "]";
    if (n.gpus < 0) return InvalidArgumentError(path + ".gpus: must not be negative");
    if (n.gpu_memory_gib <= 0)
      return InvalidArgumentError(path + ".gpuMemoryGiB: must be positive");
  }
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    std::string path = "tasks[" + std::to_string(t) + "]";
    if (!(task.work > 0)) return InvalidArgumentError(path + ".work: must be positive");
    if (task.arrival < 0) return InvalidArgumentError(path + ".arrival: must not be negative");
    if (!(task.weight > 0)) return InvalidArgumentError(path + ".weight: must be positive");
    if (task.configs.empty()) return InvalidArgumentError(path + ".profiles: must not be empty");
    for (size_t c = 0; c < task.configs.size(); ++c) {
      const Config& cfg = task.configs[c];
      std::string cpath = path + ".profiles[" + std::to_string(c) + "]";
      if (cfg.gpus < 1) return InvalidArgumentError(cpath + ".gpus: must be positive");
      if (cfg.nodes < 1 || cfg.gpus % cfg.nodes != 0)
        return InvalidArgumentError(cpath + ".nodes: must divide gpus");
      if (!(cfg.throughput > 0))
        return InvalidArgumentError(cpath + ".throughput: must be positive");
      if (cfg.memory_gib < 0)
        return InvalidArgumentError(cpath + ".memoryGiB: must not be negative");
    }
    if (task.running) {
      if (task.running->config < 0 || task.running->config >= static_cast<int>(task.configs.size()))
        return InvalidArgumentError(path + ".running.config: out of range");
      if (task.running->switch_cost_s < 0)
        return InvalidArgumentError(path + ".running.switchCost: must not be negative");
    }
    bool fits = std::any_of(task.configs.begin(), task.configs.end(),
                            [&](const Config& c) { return ConfigFits(problem, c); });
    if (!fits)
      return FailedPreconditionError(
          "task " + task.name + " (" + path + ") has no configuration that fits the cluster" +
          (problem.gpu_cap > 0 ? " within the cap of " + std::to_string(problem.gpu_cap) + " GPUs"
                               : std::string()));
  }
  return OkStatus();
}

void Summarize(const Problem& problem, Plan& plan) {
  plan.makespan = 0;
  plan.weighted_completion = 0;
  for (size_t t = 0; t < plan.assignments.size() && t < problem.tasks.size(); ++t) {
    plan.makespan = std::max(plan.makespan, plan.assignments[t].end);
    plan.weighted_completion += problem.tasks[t].weight * plan.assignments[t].end;
  }
  plan.objective =
      problem.objective == Objective::kMakespan ? plan.makespan : plan.weighted_completion;
  plan.gap =
      plan.objective > 0 ? std::max(0.0, (plan.objective - plan.lower_bound) / plan.objective) : 0;
}

}  // namespace orrery::planner
