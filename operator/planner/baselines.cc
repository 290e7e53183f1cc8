// Greedy and current-practice baselines, and the planner registry.
#include "operator/planner/baselines.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "operator/planner/list_scheduler.h"
#include "operator/planner/lower_bound.h"
#include "operator/planner/planner.h"

namespace orrery::planner {

std::vector<int> FastestChoice(const Problem& problem) {
  std::vector<int> choice(problem.tasks.size(), -1);
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    double best = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < task.configs.size(); ++c) {
      if (!ConfigFits(problem, task, task.configs[c])) continue;
      double run = RunSeconds(task, static_cast<int>(c));
      if (run < best ||
          (run == best && choice[t] >= 0 &&
           task.configs[c].gpus < task.configs[static_cast<size_t>(choice[t])].gpus)) {
        best = run;
        choice[t] = static_cast<int>(c);
      }
    }
  }
  return choice;
}

Plan GreedyPlan(const Problem& problem, std::optional<double> lower_bound) {
  std::vector<int> choice = FastestChoice(problem);
  Plan plan = ListSchedule(problem, choice, OrderTasks(problem, choice, OrderRule::kLongestFirst));
  plan.planner = "greedy";
  plan.lower_bound = lower_bound ? *lower_bound : LowerBound(problem);
  Summarize(problem, plan);
  return plan;
}

Plan CurrentPracticePlan(const Problem& problem, std::optional<double> lower_bound) {
  Plan plan;
  plan.planner = "current-practice";
  plan.assignments.resize(problem.tasks.size());
  std::vector<double> node_free(problem.nodes.size(), 0.0);
  std::vector<int> order(problem.tasks.size());
  for (size_t t = 0; t < order.size(); ++t) order[t] = static_cast<int>(t);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return problem.tasks[static_cast<size_t>(a)].arrival <
           problem.tasks[static_cast<size_t>(b)].arrival;
  });
  int fallbacks = 0;
  CapTimeline held(problem.gpu_cap);
  for (int ti : order) {
    const Task& task = problem.tasks[static_cast<size_t>(ti)];
    // The default a user picks: fsdp if it fits, else spill, on as many GPUs of
    // one node as the profile has.
    int pick = -1;
    for (const char* tmpl : {"fsdp", "spill"}) {
      for (size_t c = 0; c < task.configs.size(); ++c) {
        const Config& cfg = task.configs[c];
        if (cfg.template_name != tmpl || cfg.nodes != 1 || !ConfigFits(problem, task, cfg))
          continue;
        if (pick < 0 || cfg.gpus > task.configs[static_cast<size_t>(pick)].gpus)
          pick = static_cast<int>(c);
      }
      if (pick >= 0) break;
    }
    if (pick < 0) {
      ++fallbacks;
      double best = std::numeric_limits<double>::infinity();
      for (size_t c = 0; c < task.configs.size(); ++c) {
        const Config& cfg = task.configs[c];
        if (cfg.nodes != 1 || !ConfigFits(problem, task, cfg)) continue;
        if (task.work / cfg.throughput < best) {
          best = task.work / cfg.throughput;
          pick = static_cast<int>(c);
        }
      }
    }
    if (pick < 0)
      pick = FastestChoice(problem)[static_cast<size_t>(ti)];  // only multi-node configs
    const Config& cfg = task.configs[static_cast<size_t>(pick)];
    // The task takes whole nodes: the `cfg.nodes` nodes that free up first.
    // Within one GPU type: the one whose cfg.nodes-th node frees up first.
    std::vector<int> nodes;
    for (size_t n = 0; n < problem.nodes.size(); ++n) {
      if (NodeServes(problem.nodes[n], task, cfg)) nodes.push_back(static_cast<int>(n));
    }
    std::stable_sort(nodes.begin(), nodes.end(), [&](int a, int b) {
      return node_free[static_cast<size_t>(a)] < node_free[static_cast<size_t>(b)];
    });
    std::map<std::string, int> per_type;
    std::string type;
    for (int n : nodes) {
      if (++per_type[problem.nodes[static_cast<size_t>(n)].gpu_type] == cfg.nodes) {
        type = problem.nodes[static_cast<size_t>(n)].gpu_type;
        break;
      }
    }
    std::erase_if(nodes,
                  [&](int n) { return problem.nodes[static_cast<size_t>(n)].gpu_type != type; });
    nodes.resize(static_cast<size_t>(cfg.nodes));
    double start = task.arrival;
    for (int n : nodes) start = std::max(start, node_free[static_cast<size_t>(n)]);
    Assignment& a = plan.assignments[static_cast<size_t>(ti)];
    a.config = pick;
    double run = task.work / cfg.throughput;
    if (task.running) run += task.running->switch_cost_s;  // always restarted on whole nodes
    // Whole nodes held, later if the job's quota says so (ConfigFits kept cfg under it).
    start = held.Earliest(start, run, cfg.gpus);
    a.start = start;
    a.end = start + run;
    held.Add(a.start, a.end, cfg.gpus);
    std::sort(nodes.begin(), nodes.end());
    for (int n : nodes) {
      for (int g = 0; g < cfg.GpusPerNode(); ++g) a.gpus.push_back({n, g});
      node_free[static_cast<size_t>(n)] = a.end;
    }
  }
  if (fallbacks > 0)
    plan.note =
        std::to_string(fallbacks) + " task(s) had neither fsdp nor spill; ran their fastest config";
  plan.lower_bound = lower_bound ? *lower_bound : LowerBound(problem);
  Summarize(problem, plan);
  return plan;
}

namespace {

double Elapsed(const PlanOptions& options, TimePoint start) {
  return options.clock ? ToSeconds(options.clock->Now() - start) : 0;
}

class GreedyPlanner final : public Planner {
 public:
  std::string Name() const override { return "greedy"; }
  StatusOr<Plan> Solve(const Problem& problem, const PlanOptions& options) override {
    ORRERY_RETURN_IF_ERROR(ValidateProblem(problem));
    TimePoint start = options.clock ? options.clock->Now() : TimePoint();
    Plan plan = GreedyPlan(problem);
    plan.solve_seconds = Elapsed(options, start);
    return plan;
  }
};

class CurrentPracticePlanner final : public Planner {
 public:
  std::string Name() const override { return "current-practice"; }
  StatusOr<Plan> Solve(const Problem& problem, const PlanOptions& options) override {
    ORRERY_RETURN_IF_ERROR(ValidateProblem(problem));
    TimePoint start = options.clock ? options.clock->Now() : TimePoint();
    Plan plan = CurrentPracticePlan(problem);
    plan.solve_seconds = Elapsed(options, start);
    return plan;
  }
};

}  // namespace

std::unique_ptr<Planner> MakeGreedyPlanner() { return std::make_unique<GreedyPlanner>(); }
std::unique_ptr<Planner> MakeCurrentPracticePlanner() {
  return std::make_unique<CurrentPracticePlanner>();
}

StatusOr<std::unique_ptr<Planner>> MakePlanner(std::string_view name) {
  if (name == "orrery") return MakeOrreryPlanner();
  if (name == "saturn") return MakeSaturnPlanner();
  if (name == "greedy") return MakeGreedyPlanner();
  if (name == "current-practice") return MakeCurrentPracticePlanner();
  return NotFoundError("unknown planner " + std::string(name) +
                       " (orrery, saturn, greedy, current-practice)");
}

std::vector<std::string> PlannerNames() {
  return {"orrery", "saturn", "greedy", "current-practice"};
}

}  // namespace orrery::planner
