// Decomposition by pool (decompose.h): groups, the tasks' split between them,
// and the group plans joined.
#include "operator/planner/decompose.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace orrery::planner {
namespace {

// The problem of one group: its nodes (renumbered) and tasks, a running gang
// mapped to the group's node indices (dropped when it is not all there).
Problem GroupProblem(const Problem& problem, const std::vector<int>& nodes,
                     const std::vector<int>& tasks) {
  Problem sub;
  sub.objective = problem.objective;
  std::vector<int> local(problem.nodes.size(), -1);
  for (int n : nodes) {
    local[static_cast<size_t>(n)] = static_cast<int>(sub.nodes.size());
    sub.nodes.push_back(problem.nodes[static_cast<size_t>(n)]);
  }
  for (int t : tasks) {
    Task task = problem.tasks[static_cast<size_t>(t)];
    if (task.running) {
      bool inside = true;
      for (GpuSlot& g : task.running->gpus) {
        g.node = local[static_cast<size_t>(g.node)];
        inside = inside && g.node >= 0;
      }
      if (!inside) task.running.reset();
    }
    sub.tasks.push_back(std::move(task));
  }
  return sub;
}

// Per node: whether a running gang joins it to the node before it.
std::vector<bool> JoinedToPrevious(const Problem& problem) {
  std::vector<bool> joined(problem.nodes.size(), false);
  for (const Task& t : problem.tasks) {
    if (!t.running || t.running->gpus.empty()) continue;
    int lo = t.running->gpus.front().node, hi = lo;
    for (const GpuSlot& g : t.running->gpus) lo = std::min(lo, g.node), hi = std::max(hi, g.node);
    for (int n = lo + 1; n <= hi && n < static_cast<int>(joined.size()); ++n)
      joined[static_cast<size_t>(n)] = true;
  }
  return joined;
}

}  // namespace

PoolSplit SplitIntoPools(const Problem& problem, const Plan& plan, int max_nodes) {
  PoolSplit split;
  const std::vector<std::string> types = GpuTypes(problem);
  const std::vector<bool> joined = JoinedToPrevious(problem);
  split.node_pool.assign(problem.nodes.size(), -1);
  std::vector<std::string> pool_type;
  std::vector<double> pool_gpus;
  std::vector<std::vector<Node>> pool_nodes;
  for (const std::string& type : types) {
    std::vector<int> nodes;
    for (size_t n = 0; n < problem.nodes.size(); ++n)
      if (problem.nodes[n].gpu_type == type) nodes.push_back(static_cast<int>(n));
    const size_t groups = (nodes.size() + static_cast<size_t>(max_nodes) - 1) /
                          static_cast<size_t>(std::max(1, max_nodes));
    const size_t first = pool_type.size();
    size_t g = first;
    for (size_t i = 0; i < nodes.size(); ++i) {
      // Near-equal groups; a node a running gang joins to the one before stays with it.
      size_t want = first + i * groups / nodes.size();
      if (want > g && !joined[static_cast<size_t>(nodes[i])]) g = want;
      if (g >= pool_type.size()) {
        pool_type.push_back(type);
        pool_gpus.push_back(0);
        pool_nodes.emplace_back();
      }
      split.node_pool[static_cast<size_t>(nodes[i])] = static_cast<int>(g);
      pool_gpus[g] += problem.nodes[static_cast<size_t>(nodes[i])].gpus;
      pool_nodes[g].push_back(problem.nodes[static_cast<size_t>(nodes[i])]);
    }
  }
  split.pools = static_cast<int>(pool_type.size());
  // Tasks, largest GPU-time first, each to the least-loaded group of its planned
  // type where its planned configuration (else any of its configurations) fits.
  split.task_pool.assign(problem.tasks.size(), -1);
  std::vector<std::pair<double, size_t>> order;
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Assignment& a = plan.assignments[t];
    order.push_back({-(a.end - a.start) * static_cast<double>(a.gpus.size()), t});
  }
  std::sort(order.begin(), order.end());
  std::vector<double> load(pool_type.size(), 0);
  for (const auto& [neg, t] : order) {
    const Task& task = problem.tasks[t];
    const Assignment& a = plan.assignments[t];
    if (task.running && !task.running->gpus.empty()) {
      // Where it runs, when its configuration still fits there.
      const int p = split.node_pool[static_cast<size_t>(task.running->gpus.front().node)];
      Problem group;
      group.nodes = pool_nodes[static_cast<size_t>(p)];
      if (task.running->config >= 0 &&
          ConfigFits(group, task, task.configs[static_cast<size_t>(task.running->config)])) {
        split.task_pool[t] = p;
        load[static_cast<size_t>(p)] -= neg;
        continue;
      }
    }
    const std::string& type = a.gpus.empty()
                                  ? std::string()
                                  : problem.nodes[static_cast<size_t>(a.gpus[0].node)].gpu_type;
    int best = -1;
    for (size_t p = 0; p < pool_type.size(); ++p) {
      if (pool_type[p] != type) continue;
      Problem group;
      group.nodes = pool_nodes[p];
      bool fits =
          a.config >= 0 && ConfigFits(group, task, task.configs[static_cast<size_t>(a.config)]);
      for (size_t c = 0; c < task.configs.size() && !fits; ++c)
        fits = ConfigFits(group, task, task.configs[c]);
      if (!fits) continue;
      if (best < 0 || load[p] / pool_gpus[p] <
                          load[static_cast<size_t>(best)] / pool_gpus[static_cast<size_t>(best)])
        best = static_cast<int>(p);
    }
    split.task_pool[t] = best;
    if (best >= 0) load[static_cast<size_t>(best)] -= neg;
  }
  return split;
}

bool WorthSplitting(const Problem& problem, int max_nodes, double min_size) {
  if (problem.gpu_cap > 0 && problem.gpu_cap < problem.TotalGpus()) return false;
  if (static_cast<double>(problem.tasks.size()) * problem.TotalGpus() < min_size) return false;
  const std::vector<std::string> types = GpuTypes(problem);
  return types.size() > 1 || static_cast<int>(problem.nodes.size()) > max_nodes;
}

StatusOr<Plan> SolveByPools(const Problem& problem, const PoolSplit& split,
                            const PlanOptions& options) {
  std::vector<std::vector<int>> nodes(static_cast<size_t>(split.pools));
  std::vector<std::vector<int>> tasks(static_cast<size_t>(split.pools));
  for (size_t n = 0; n < split.node_pool.size(); ++n)
    nodes[static_cast<size_t>(split.node_pool[n])].push_back(static_cast<int>(n));
  for (size_t t = 0; t < split.task_pool.size(); ++t) {
    if (split.task_pool[t] < 0)
      return FailedPreconditionError("task " + problem.tasks[t].name +
                                     " fits no pool of the split");
    tasks[static_cast<size_t>(split.task_pool[t])].push_back(static_cast<int>(t));
  }
  std::vector<double> size(static_cast<size_t>(split.pools), 0);
  double size_left = 0;
  for (size_t p = 0; p < size.size(); ++p) {
    double gpus = 0;
    for (int n : nodes[p]) gpus += problem.nodes[static_cast<size_t>(n)].gpus;
    size[p] = static_cast<double>(tasks[p].size()) * gpus;
    size_left += size[p];
  }
  Plan joined;
  joined.planner = "orrery";
  joined.assignments.resize(problem.tasks.size());
  const TimePoint start = options.clock ? options.clock->Now() : TimePoint{};
  std::string note = "by pool:";
  for (size_t p = 0; p < size.size(); ++p) {
    if (tasks[p].empty()) continue;
    const double spent = options.clock ? ToSeconds(options.clock->Now() - start) : 0;
    PlanOptions sub_options = options;
    // What is left, shared by the groups still to plan in proportion to size.
    sub_options.time_limit_s =
        std::max(0.05, (options.time_limit_s - spent) * size[p] / std::max(1.0, size_left));
    size_left -= size[p];
    sub_options.hint.clear();  // the plan in force, for this group's tasks
    if (options.hint.size() == problem.tasks.size())
      for (int t : tasks[p]) sub_options.hint.push_back(options.hint[static_cast<size_t>(t)]);
    Problem sub = GroupProblem(problem, nodes[p], tasks[p]);
    ORRERY_ASSIGN_OR_RETURN(Plan plan, MakeOrreryPlanner()->Solve(sub, sub_options));
    for (size_t i = 0; i < tasks[p].size(); ++i) {
      Assignment a = plan.assignments[i];
      for (GpuSlot& g : a.gpus) g.node = nodes[p][static_cast<size_t>(g.node)];
      std::sort(a.gpus.begin(), a.gpus.end());
      joined.assignments[static_cast<size_t>(tasks[p][i])] = std::move(a);
    }
    joined.timed_out = joined.timed_out || plan.timed_out;
    note +=
        " " +
        (sub.nodes.front().gpu_type.empty() ? std::string("pool") : sub.nodes.front().gpu_type) +
        "[" + std::to_string(sub.nodes.size()) + "n/" + std::to_string(tasks[p].size()) +
        "t]=" + std::to_string(static_cast<long long>(plan.makespan)) + "(lb " +
        std::to_string(static_cast<long long>(plan.lower_bound)) + ")/" +
        std::to_string(plan.solve_seconds).substr(0, 4) + "s";
  }
  Summarize(problem, joined);
  joined.note = note;
  return joined;
}

}  // namespace orrery::planner
