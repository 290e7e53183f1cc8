// See interleave.h.
#include "operator/planner/interleave.h"

#include <algorithm>
#include <map>

namespace orrery::planner {
namespace {

// The task's best one-GPU spill configuration per GPU type that fits.
std::map<std::string, const Config*> SpillByType(const Problem& problem, const Task& task) {
  std::map<std::string, const Config*> out;
  for (const Config& c : task.configs) {
    if (c.template_name != "spill" || c.gpus != 1 || !ConfigFits(problem, task, c)) continue;
    const Config*& best = out[c.gpu_type];
    if (best == nullptr || c.throughput > best->throughput) best = &c;
  }
  return out;
}

// The gang of `members` as one task, or no configuration where the members
// share no GPU type.
Task GangTask(const Problem& problem, const std::vector<int>& members, double speedup) {
  Task gang;
  gang.weight = 0;
  std::vector<std::string> names;
  std::map<std::string, std::vector<const Config*>> by_type;
  for (int m : members) {
    const Task& t = problem.tasks[static_cast<size_t>(m)];
    names.push_back(t.name);
    gang.work += t.work;
    gang.weight += t.weight;
    gang.arrival = std::max(gang.arrival, t.arrival);
    for (const auto& [type, c] : SpillByType(problem, t)) by_type[type].push_back(c);
  }
  gang.name = GangName(names);
  gang.gpu_types = problem.tasks[static_cast<size_t>(members.front())].gpu_types;
  for (const auto& [type, configs] : by_type) {
    if (configs.size() != members.size()) continue;
    double memory = 0;
    std::vector<double> alone;
    for (size_t i = 0; i < members.size(); ++i) {
      alone.push_back(problem.tasks[static_cast<size_t>(members[i])].work / configs[i]->throughput);
      memory = std::max(memory, configs[i]->memory_gib);
    }
    const double seconds = GangSeconds(alone, speedup);
    Config c = *configs.front();
    c.template_name = kInterleavedTemplate;
    c.throughput = gang.work / seconds;
    c.memory_gib = memory;
    gang.configs.push_back(c);
  }
  return gang;
}

// Seconds alone on the task's fastest one-GPU spill configuration.
double AloneSeconds(const Problem& problem, int t) {
  double best = 0;
  for (const auto& [type, c] : SpillByType(problem, problem.tasks[static_cast<size_t>(t)]))
    best = std::max(best, c->throughput);
  return best > 0 ? problem.tasks[static_cast<size_t>(t)].work / best : 0;
}

}  // namespace

double GangSeconds(const std::vector<double>& alone_seconds, double speedup) {
  double sum = 0, longest = 0;
  for (double t : alone_seconds) {
    sum += t;
    longest = std::max(longest, t);
  }
  if (alone_seconds.size() <= 1 || speedup <= 0) return longest;
  return std::max(sum / speedup, longest);
}

std::vector<double> GangShares(const std::vector<double>& alone_seconds, double speedup) {
  const double g = GangSeconds(alone_seconds, speedup);
  std::vector<double> out;
  out.reserve(alone_seconds.size());
  for (double t : alone_seconds) out.push_back(g > 0 ? t / g : 1.0);
  return out;
}

std::string GangName(const std::vector<std::string>& tasks) {
  std::string out;
  for (const std::string& t : tasks) out += (out.empty() ? "" : "+") + t;
  return out;
}

std::vector<int> SpillOnlyTasks(const Problem& problem) {
  std::vector<int> out;
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    if (task.running) continue;
    const bool other = std::any_of(task.configs.begin(), task.configs.end(), [&](const Config& c) {
      return c.template_name != "spill" && ConfigFits(problem, task, c);
    });
    if (!other && !SpillByType(problem, task).empty()) out.push_back(static_cast<int>(t));
  }
  return out;
}

GangedProblem GroupInterleaved(const Problem& problem, const InterleaveOptions& options) {
  std::vector<std::vector<int>> gangs;
  if (options.speedup > 1 && options.gang_size >= 2) {
    // Tasks restricted to the same GPU types, by alone time.
    std::map<std::vector<std::string>, std::vector<int>> buckets;
    for (int t : SpillOnlyTasks(problem))
      buckets[problem.tasks[static_cast<size_t>(t)].gpu_types].push_back(t);
    for (auto& [types, tasks] : buckets) {
      std::stable_sort(tasks.begin(), tasks.end(), [&](int a, int b) {
        return AloneSeconds(problem, a) < AloneSeconds(problem, b);
      });
      const size_t k = static_cast<size_t>(options.gang_size);
      for (size_t i = 0; i + k <= tasks.size(); i += k)
        gangs.emplace_back(tasks.begin() + static_cast<std::ptrdiff_t>(i),
                           tasks.begin() + static_cast<std::ptrdiff_t>(i + k));
    }
  }
  return GroupAs(problem, gangs, options.speedup);
}

GangedProblem GroupAs(const Problem& problem, const std::vector<std::vector<int>>& gangs,
                      double speedup) {
  GangedProblem out;
  out.problem = problem;
  out.problem.tasks.clear();
  std::vector<bool> grouped(problem.tasks.size(), false);
  for (const std::vector<int>& members : gangs) {
    if (members.size() < 2) continue;
    Task gang = GangTask(problem, members, speedup);
    if (gang.configs.empty()) continue;  // no GPU type in common
    for (int m : members) grouped[static_cast<size_t>(m)] = true;
    out.problem.tasks.push_back(std::move(gang));
    out.members.push_back(members);
    ++out.gangs;
  }
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    if (grouped[t]) continue;
    out.problem.tasks.push_back(problem.tasks[t]);
    out.members.push_back({static_cast<int>(t)});
  }
  return out;
}

StatusOr<InterleavedPlan> SolveInterleaved(Planner& planner, const Problem& problem,
                                           const PlanOptions& options,
                                           const InterleaveOptions& interleave) {
  InterleavedPlan out;
  ORRERY_ASSIGN_OR_RETURN(out.without, planner.Solve(problem, options));
  out.plan = out.without;
  out.ganged.problem = problem;
  for (size_t t = 0; t < problem.tasks.size(); ++t)
    out.ganged.members.push_back({static_cast<int>(t)});
  GangedProblem ganged = GroupInterleaved(problem, interleave);
  if (ganged.gangs == 0) return out;
  // The ganged problem is an offer: where it cannot be solved, the plan without stands.
  StatusOr<Plan> solved = planner.Solve(ganged.problem, options);
  if (!solved.ok()) return out;
  Plan with = std::move(*solved);
  if (with.objective < out.without.objective * (1 - 1e-9)) {
    with.note += (with.note.empty() ? "" : "; ") + std::to_string(ganged.gangs) +
                 " interleaved gang(s) of spilled tasks (Hydra), objective " +
                 std::to_string(with.objective) + " against " +
                 std::to_string(out.without.objective) + " without";
    out.plan = std::move(with);
    out.ganged = std::move(ganged);
  }
  return out;
}

}  // namespace orrery::planner
