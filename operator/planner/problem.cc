// Helpers over the SPASE problem data: run times, fit checks, validation with
// field paths, and plan summaries.
#include "operator/planner/problem.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

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

bool NodeServes(const Node& node, const Task& task, const Config& config) {
  if (node.gpus < config.GpusPerNode() || node.gpu_memory_gib < config.memory_gib) return false;
  if (!config.gpu_type.empty() && config.gpu_type != node.gpu_type) return false;
  return AllowsGpuType(task.gpu_types, node.gpu_type);
}

bool AllowsGpuType(const std::vector<std::string>& allowed, const std::string& type) {
  return allowed.empty() || std::find(allowed.begin(), allowed.end(), type) != allowed.end();
}

bool ConfigFits(const Problem& problem, const Task& task, const Config& config) {
  if (config.nodes < 1 || config.gpus < 1 || config.gpus % config.nodes != 0) return false;
  if (problem.gpu_cap > 0 && config.gpus > problem.gpu_cap) return false;
  std::map<std::string, int> hosts;  // by GPU type: a gang stays within one
  for (const Node& n : problem.nodes) {
    if (NodeServes(n, task, config) && ++hosts[n.gpu_type] >= config.nodes) return true;
  }
  return false;
}

bool ConfigFits(const Problem& problem, const Config& config) {
  return ConfigFits(problem, Task{}, config);
}

std::vector<std::string> GpuTypes(const Problem& problem) {
  std::set<std::string> types;
  for (const Node& n : problem.nodes) types.insert(n.gpu_type);
  return {types.begin(), types.end()};
}

double MeasureTypeSpeed(const Problem& problem, const std::string& from, const std::string& to) {
  double log_sum = 0;
  int pairs = 0;
  for (const Task& task : problem.tasks) {
    for (const Config& a : task.configs) {
      if (a.gpu_type != from) continue;
      for (const Config& b : task.configs) {
        if (b.gpu_type != to || b.template_name != a.template_name || b.gpus != a.gpus ||
            b.batch_size != a.batch_size || !(a.throughput > 0) || !(b.throughput > 0))
          continue;
        log_sum += std::log(b.throughput / a.throughput);
        ++pairs;
      }
    }
  }
  return pairs > 0 ? std::exp(log_sum / pairs) : 0;
}

int EstimateMissingTypes(Problem& problem, const std::map<std::string, double>& speed) {
  std::vector<std::string> types = GpuTypes(problem);
  std::map<std::string, int> per_node;  // most GPUs on one node of a type
  for (const Node& n : problem.nodes) per_node[n.gpu_type] = std::max(per_node[n.gpu_type], n.gpus);
  std::map<std::pair<std::string, std::string>, double> factor;  // measured once per pair
  auto ratio = [&](const std::string& from, const std::string& to) {
    auto f = speed.find(from), t = speed.find(to);
    if (f != speed.end() && t != speed.end() && f->second > 0) return t->second / f->second;
    auto key = std::make_pair(from, to);
    auto it = factor.find(key);
    if (it == factor.end()) it = factor.emplace(key, MeasureTypeSpeed(problem, from, to)).first;
    return it->second;
  };
  int added = 0;
  for (Task& task : problem.tasks) {
    std::set<std::string> have;
    bool any_type = false;  // a typeless config runs anywhere: nothing to estimate
    for (const Config& c : task.configs) {
      any_type = any_type || c.gpu_type.empty();
      have.insert(c.gpu_type);
    }
    if (any_type || have.empty()) continue;
    const std::string from = task.configs.front().gpu_type;
    std::vector<Config> source;
    for (const Config& c : task.configs)
      if (c.gpu_type == from) source.push_back(c);
    for (const std::string& to : types) {
      if (to.empty() || have.count(to) > 0) continue;
      double r = ratio(from, to);
      if (!(r > 0)) continue;
      for (Config c : source) {
        if (c.GpusPerNode() > per_node[to]) continue;
        c.gpu_type = to;
        c.throughput *= r;
        task.configs.push_back(c);
        ++added;
      }
    }
  }
  return added;
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
    for (size_t k = 0; k < task.gpu_types.size(); ++k) {
      if (task.gpu_types[k].empty())
        return InvalidArgumentError(path + ".gpuTypes[" + std::to_string(k) +
                                    "]: must name a GPU type");
    }
    if (task.running) {
      if (task.running->config < 0 || task.running->config >= static_cast<int>(task.configs.size()))
        return InvalidArgumentError(path + ".running.config: out of range");
      if (task.running->switch_cost_s < 0)
        return InvalidArgumentError(path + ".running.switchCost: must not be negative");
    }
    bool fits = std::any_of(task.configs.begin(), task.configs.end(),
                            [&](const Config& c) { return ConfigFits(problem, task, c); });
    if (!fits)
      return FailedPreconditionError(
          "task " + task.name + " (" + path + ") has no configuration that fits the cluster" +
          (task.gpu_types.empty() ? std::string() : " on the GPU types it allows") +
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
