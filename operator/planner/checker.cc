// Plan checker: re-derives every rule from the problem alone, sharing no code
// with the schedulers it checks beyond the data model.
#include "operator/planner/checker.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace orrery::planner {
namespace {
// Plans are in seconds; allow float rounding but nothing a user could notice.
constexpr double kEps = 1e-6;
}  // namespace

Status CheckPlan(const Problem& problem, const Plan& plan) {
  if (plan.assignments.size() != problem.tasks.size())
    return InvalidArgumentError("plan has " + std::to_string(plan.assignments.size()) +
                                " assignments for " + std::to_string(problem.tasks.size()) +
                                " tasks");
  std::map<GpuSlot, std::vector<std::pair<double, double>>> busy;
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    const Assignment& a = plan.assignments[t];
    std::string who = "task " + task.name + ": ";
    if (a.config < 0 || a.config >= static_cast<int>(task.configs.size()))
      return InvalidArgumentError(who + "configuration index out of range");
    const Config& c = task.configs[static_cast<size_t>(a.config)];
    if (static_cast<int>(a.gpus.size()) != c.gpus)
      return InvalidArgumentError(who + "runs on " + std::to_string(a.gpus.size()) +
                                  " GPUs, its configuration names " + std::to_string(c.gpus));
    std::set<GpuSlot> distinct(a.gpus.begin(), a.gpus.end());
    if (distinct.size() != a.gpus.size()) return InvalidArgumentError(who + "uses a GPU twice");
    std::map<int, int> per_node;
    for (const GpuSlot& g : a.gpus) {
      if (g.node < 0 || g.node >= static_cast<int>(problem.nodes.size()) || g.gpu < 0 ||
          g.gpu >= problem.nodes[static_cast<size_t>(g.node)].gpus)
        return InvalidArgumentError(who + "uses a GPU that does not exist");
      if (problem.nodes[static_cast<size_t>(g.node)].gpu_memory_gib + kEps < c.memory_gib)
        return InvalidArgumentError(who + "does not fit in the GPU memory of node " +
                                    problem.nodes[static_cast<size_t>(g.node)].name);
      ++per_node[g.node];
    }
    // GPU types: one type per gang, the configuration's (when it names one),
    // and one the task allows.
    std::set<std::string> types;
    for (const auto& [node, count] : per_node)
      types.insert(problem.nodes[static_cast<size_t>(node)].gpu_type);
    if (types.size() > 1) return InvalidArgumentError(who + "spans GPU types");
    const std::string type = types.empty() ? std::string() : *types.begin();
    std::string on_type = who;
    on_type.append("runs on GPU type '").append(type).append("'");
    if (!c.gpu_type.empty() && !types.empty() && type != c.gpu_type)
      return InvalidArgumentError(on_type + ", its configuration is for '" + c.gpu_type + "'");
    if (!task.gpu_types.empty() && !types.empty() &&
        std::find(task.gpu_types.begin(), task.gpu_types.end(), type) == task.gpu_types.end())
      return InvalidArgumentError(on_type + ", which it does not allow");
    if (static_cast<int>(per_node.size()) != c.nodes)
      return InvalidArgumentError(who + "spans " + std::to_string(per_node.size()) +
                                  " nodes, its configuration spans " + std::to_string(c.nodes));
    for (const auto& [node, count] : per_node) {
      if (count != c.GpusPerNode()) return InvalidArgumentError(who + "uneven split across nodes");
    }
    if (a.start + kEps < task.arrival)
      return InvalidArgumentError(who + "starts before it arrives");
    double need = task.work / c.throughput;
    bool moved = task.running &&
                 (task.running->config != a.config || task.running->gpus.size() != a.gpus.size() ||
                  !std::is_permutation(a.gpus.begin(), a.gpus.end(), task.running->gpus.begin()));
    if (moved) need += task.running->switch_cost_s;
    if (a.end + kEps * std::max(1.0, need) < a.start + need)
      return InvalidArgumentError(who + "ends before its work is done");
    for (const GpuSlot& g : a.gpus) busy[g].push_back({a.start, a.end});
  }
  for (auto& [slot, intervals] : busy) {
    std::sort(intervals.begin(), intervals.end());
    for (size_t i = 1; i < intervals.size(); ++i) {
      if (intervals[i].first + kEps * std::max(1.0, intervals[i].first) < intervals[i - 1].second)
        return InvalidArgumentError("GPU " + std::to_string(slot.gpu) + " of node " +
                                    problem.nodes[static_cast<size_t>(slot.node)].name +
                                    " is used by two tasks at once");
    }
  }
  if (problem.gpu_cap > 0) {
    // GPUs held at once never exceed the cap: a sweep over starts and ends,
    // ends first at a tie (a GPU handed over is not held twice).
    std::vector<std::pair<double, int>> events;
    for (size_t t = 0; t < problem.tasks.size(); ++t) {
      const Assignment& a = plan.assignments[t];
      int n = static_cast<int>(a.gpus.size());
      events.push_back({a.start + kEps * std::max(1.0, a.start), n});
      events.push_back({a.end, -n});
    }
    std::sort(events.begin(), events.end());
    int held = 0;
    for (const auto& [at, delta] : events) {
      held += delta;
      if (held > problem.gpu_cap)
        return InvalidArgumentError("the tasks hold " + std::to_string(held) + " GPUs at " +
                                    std::to_string(at) + " s, over the cap of " +
                                    std::to_string(problem.gpu_cap));
    }
  }
  return OkStatus();
}

}  // namespace orrery::planner
