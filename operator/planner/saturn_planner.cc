// Saturn's own SPASE formulation (Nagrecha & Kumar, "Saturn: An Optimized Data
// System for Multi-Large-Model Deep Learning Workloads", VLDB 2024, arXiv
// 2309.01226, and its public solver), solved with CBC under the same time limit
// as orrery, as the baseline it is. Per task one strategy per GPU type and count (the best
// template at that count), single-node placement, and:
//   bss[t,s]   binary strategy selection, one per task
//   bna[t,n]   binary node selection, one per task
//   tga[t,n,g] binary GPU occupancy; per node the count equals the strategy's
//              GPUs when the node and strategy are selected, 0 off the node
//   st[n,g,t]  start time of task t on GPU g of node n, tied to the task's start
//              on the GPUs it occupies
//   boa[t,t']  binary before-or-after for every ordered pair of tasks
//   makespan >= st[n,g,t] + run(t,s) - M (1 - bss[t,s])   for every n, g, t, s
//   and for every GPU and ordered pair of tasks sharing it, big-M disjunctions
//   per strategy of either task ordering them.
// The model has O(nodes x GPUs x tasks^2 x strategies) rows and a weak LP
// relaxation; that is the point of the comparison. Deviations, all in Saturn's
// favour: M is a valid horizon instead of 10^7 (better numerics), start times
// are continuous instead of integer, and a task-level start variable links the
// per-GPU starts instead of Saturn's averaged start constraint. When the model
// would not even fit in memory, or CBC finds no incumbent in time, Saturn has no
// plan; as its fallback we run the greedy list schedule and say so in the note.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "operator/planner/baselines.h"
#include "operator/planner/checker.h"
#include "operator/planner/list_scheduler.h"
#include "operator/planner/lower_bound.h"
#include "operator/planner/milp.h"
#include "operator/planner/planner.h"

namespace orrery::planner {
namespace {

// Beyond this many nonzeros the model takes longer to build than any sensible
// time limit, and gigabytes of memory.
constexpr double kMaxNonzeros = 2.5e7;

class SaturnPlanner final : public Planner {
 public:
  std::string Name() const override { return "saturn"; }
  StatusOr<Plan> Solve(const Problem& problem, const PlanOptions& options) override;
};

Plan Fallback(const Problem& problem, const std::string& why) {
  Plan plan = GreedyPlan(problem);
  plan.planner = "saturn";
  plan.timed_out = true;
  plan.note = why + "; fell back to greedy list scheduling";
  return plan;
}

StatusOr<Plan> SaturnPlanner::Solve(const Problem& problem, const PlanOptions& options) {
  ORRERY_RETURN_IF_ERROR(ValidateProblem(problem));
  TimePoint t0 = options.clock ? options.clock->Now() : TimePoint();
  auto elapsed = [&] { return options.clock ? ToSeconds(options.clock->Now() - t0) : 0.0; };
  size_t tasks = problem.tasks.size();
  size_t nodes = problem.nodes.size();
  // Strategies: per GPU type and count, the fastest single-node configuration.
  std::vector<std::vector<int>> strat(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    std::map<std::pair<std::string, int>, int> by_count;  // (GPU type, count) -> config
    const Task& task = problem.tasks[t];
    for (size_t c = 0; c < task.configs.size(); ++c) {
      const Config& cfg = task.configs[c];
      if (cfg.nodes != 1 || !ConfigFits(problem, task, cfg)) continue;
      auto key = std::make_pair(cfg.gpu_type, cfg.gpus);
      auto it = by_count.find(key);
      if (it == by_count.end() ||
          RunSeconds(task, static_cast<int>(c)) < RunSeconds(task, it->second))
        by_count[key] = static_cast<int>(c);
    }
    for (const auto& [g, c] : by_count) strat[t].push_back(c);
    if (strat[t].empty()) {
      Plan p =
          Fallback(problem, "task " + task.name +
                                " has no single-node strategy (Saturn places tasks on one node)");
      p.solve_seconds = elapsed();
      return p;
    }
  }
  double total_gpus_slots = problem.TotalGpus();
  double avg_strats = 0;
  for (const auto& s : strat) avg_strats += static_cast<double>(s.size());
  avg_strats /= static_cast<double>(std::max<size_t>(1, tasks));
  double estimate = total_gpus_slots * static_cast<double>(tasks) * static_cast<double>(tasks) * 2 *
                    avg_strats * 6;
  if (estimate > kMaxNonzeros) {
    Plan p = Fallback(problem, "model too large to build (about " +
                                   std::to_string(static_cast<long long>(estimate)) + " nonzeros)");
    p.solve_seconds = elapsed();
    return p;
  }

  // Horizon: every task one after another with its slowest strategy.
  double horizon = 0;
  for (size_t t = 0; t < tasks; ++t) {
    double slow = 0;
    for (int c : strat[t]) slow = std::max(slow, RunSeconds(problem.tasks[t], c));
    horizon = std::max(horizon, problem.tasks[t].arrival) + slow;
  }
  const double m = horizon * 1.01 + 1;
  const double inf = std::numeric_limits<double>::infinity();

  MilpModel model;
  int makespan = model.AddColumn(1.0, 0.0, m, false);
  std::vector<std::vector<int>> bss(tasks), bna(tasks);
  std::vector<std::vector<std::vector<int>>> tga(tasks), st(tasks);
  std::vector<int> start(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    for (size_t s = 0; s < strat[t].size(); ++s) bss[t].push_back(model.AddColumn(0, 0, 1, true));
    for (size_t n = 0; n < nodes; ++n) {
      const Node& node = problem.nodes[n];
      bna[t].push_back(model.AddColumn(0, 0, 1, true));
      tga[t].emplace_back();
      st[t].emplace_back();
      for (int g = 0; g < node.gpus; ++g) {
        tga[t][n].push_back(model.AddColumn(0, 0, 1, true));
        st[t][n].push_back(model.AddColumn(0, 0, m, false));
      }
    }
    start[t] = model.AddColumn(0, problem.tasks[t].arrival, m, false);
    std::vector<double> ones(strat[t].size(), 1.0);
    model.AddRow(bss[t], ones, 1, 1);
    model.AddRow(bna[t], std::vector<double>(nodes, 1.0), 1, 1);
  }
  for (size_t t = 0; t < tasks; ++t) {
    const Task& task = problem.tasks[t];
    for (size_t n = 0; n < nodes; ++n) {
      const Node& node = problem.nodes[n];
      double mg = node.gpus + 1;  // big M for GPU counts
      // GPU count per node and strategy, switched by node and strategy selection.
      for (size_t s = 0; s < strat[t].size(); ++s) {
        const Config& cfg = task.configs[static_cast<size_t>(strat[t][s])];
        double need = cfg.gpus;
        bool fits_here = node.gpus >= cfg.gpus && NodeServes(node, task, cfg);
        std::vector<int> cols = tga[t][n];
        std::vector<double> vals(cols.size(), 1.0);
        cols.push_back(bss[t][s]);
        cols.push_back(bna[t][n]);
        if (!fits_here) {
          // Saturn's profiles only list counts that fit; here: never both.
          model.AddRow({bss[t][s], bna[t][n]}, {1, 1}, -inf, 1);
          continue;
        }
        // sum >= need - mg (1 - bss) - mg (1 - bna)
        std::vector<double> lo = vals;
        lo.push_back(-mg);
        lo.push_back(-mg);
        model.AddRow(cols, lo, need - 2 * mg, inf);
        std::vector<double> hi = vals;
        hi.push_back(mg);
        hi.push_back(mg);
        model.AddRow(cols, hi, -inf, need + 2 * mg);
      }
      std::vector<int> cols = tga[t][n];
      std::vector<double> vals(cols.size(), 1.0);
      cols.push_back(bna[t][n]);
      vals.push_back(-mg);
      model.AddRow(cols, vals, -inf, 0);  // off the node: no GPUs there
      for (int g = 0; g < node.gpus; ++g) {
        int sg = st[t][n][static_cast<size_t>(g)], og = tga[t][n][static_cast<size_t>(g)];
        // st == start on occupied GPUs.
        // |st - start| <= M (1 - tga)
        model.AddRow({sg, start[t], og}, {1, -1, m}, -inf, m);
        model.AddRow({sg, start[t], og}, {1, -1, -m}, -m, inf);
        for (size_t s = 0; s < strat[t].size(); ++s) {
          double run = RunSeconds(task, strat[t][s]);
          // makespan >= st + run - M (1 - bss)
          model.AddRow({makespan, sg, bss[t][s]}, {1, -1, -m}, run - m, inf);
        }
      }
    }
  }
  // Before-or-after for every ordered pair; boa[t][u] = 1: u runs after t.
  std::vector<std::vector<int>> boa(tasks, std::vector<int>(tasks, -1));
  for (size_t t = 0; t < tasks; ++t)
    for (size_t u = 0; u < tasks; ++u)
      if (t != u) boa[t][u] = model.AddColumn(0, 0, 1, true);
  for (size_t n = 0; n < nodes; ++n) {
    // Building counts against the time limit, as it would for Saturn.
    if (elapsed() > options.time_limit_s) {
      Plan p = Fallback(problem, "time limit reached while building the model");
      p.solve_seconds = elapsed();
      return p;
    }
    for (int g = 0; g < problem.nodes[n].gpus; ++g) {
      size_t gi = static_cast<size_t>(g);
      for (size_t t = 0; t < tasks; ++t) {
        for (size_t u = 0; u < tasks; ++u) {
          if (t == u) continue;
          int st_t = st[t][n][gi], st_u = st[u][n][gi];
          int on_t = tga[t][n][gi], on_u = tga[u][n][gi];
          int after = boa[u][t];  // t after u
          // t before u: st_t <= st_u - run(t,s) + M(1-on_u) + M(1-on_t) + M after + M(1-bss)
          for (size_t s = 0; s < strat[t].size(); ++s) {
            double run = RunSeconds(problem.tasks[t], strat[t][s]);
            model.AddRow({st_t, st_u, on_u, on_t, after, bss[t][s]}, {1, -1, m, m, -m, m}, -inf,
                         3 * m - run);
          }
          // t after u: st_t >= st_u + run(u,s) - M(1-on_t) - M(1-on_u) - M(1-after) - M(1-bss)
          for (size_t s = 0; s < strat[u].size(); ++s) {
            double run = RunSeconds(problem.tasks[u], strat[u][s]);
            model.AddRow({st_t, st_u, on_t, on_u, after, bss[u][s]}, {1, -1, -m, -m, -m, -m},
                         run - 4 * m, inf);
          }
        }
      }
    }
  }

  double left = options.time_limit_s - elapsed();
  if (left <= 0.05) {
    Plan p = Fallback(problem, "time limit reached while building the model");
    p.solve_seconds = elapsed();
    return p;
  }
  MilpOptions mo;
  mo.time_limit_s = left;
  mo.seed = options.seed;
  mo.max_nodes = options.max_nodes;
  ORRERY_ASSIGN_OR_RETURN(MilpResult r, MilpSolver::Solve(model, mo));
  if (!r.has_solution) {
    Plan p = Fallback(problem, "CBC found no incumbent within the time limit");
    p.solve_seconds = elapsed();
    return p;
  }
  // Decode: strategy, node and GPUs from the binaries; then the MILP's start
  // order, left-shifted so float tolerance in big-M rows cannot overlap tasks.
  std::vector<int> choice(tasks);
  std::vector<std::vector<GpuSlot>> gpus(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    size_t s_best = 0, n_best = 0;
    for (size_t s = 0; s < strat[t].size(); ++s)
      if (r.x[static_cast<size_t>(bss[t][s])] > r.x[static_cast<size_t>(bss[t][s_best])])
        s_best = s;
    for (size_t n = 0; n < nodes; ++n)
      if (r.x[static_cast<size_t>(bna[t][n])] > r.x[static_cast<size_t>(bna[t][n_best])])
        n_best = n;
    choice[t] = strat[t][s_best];
    std::vector<std::pair<double, int>> occ;
    for (size_t g = 0; g < tga[t][n_best].size(); ++g)
      occ.push_back({-r.x[static_cast<size_t>(tga[t][n_best][g])], static_cast<int>(g)});
    std::sort(occ.begin(), occ.end());
    int need = problem.tasks[t].configs[static_cast<size_t>(choice[t])].gpus;
    for (int i = 0; i < need; ++i)
      gpus[t].push_back({static_cast<int>(n_best), occ[static_cast<size_t>(i)].second});
    std::sort(gpus[t].begin(), gpus[t].end());
  }
  std::vector<int> order(tasks);
  for (size_t t = 0; t < tasks; ++t) order[t] = static_cast<int>(t);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return r.x[static_cast<size_t>(start[static_cast<size_t>(a)])] <
           r.x[static_cast<size_t>(start[static_cast<size_t>(b)])];
  });
  Plan plan;
  plan.planner = "saturn";
  plan.assignments.resize(tasks);
  std::map<GpuSlot, double> free_at;
  for (int ti : order) {
    size_t t = static_cast<size_t>(ti);
    Assignment& a = plan.assignments[t];
    a.config = choice[t];
    a.gpus = gpus[t];
    a.start = problem.tasks[t].arrival;
    for (const GpuSlot& g : a.gpus) a.start = std::max(a.start, free_at[g]);
    double run = RunSeconds(problem.tasks[t], choice[t]);
    const Task& task = problem.tasks[t];
    if (task.running && task.running->config == choice[t] && task.running->gpus != a.gpus)
      run += task.running->switch_cost_s;
    a.end = a.start + run;
    for (const GpuSlot& g : a.gpus) free_at[g] = a.end;
  }
  // Saturn knows no cap on GPUs held at once (a job's quota): when its timing
  // breaks one, the list scheduler re-times its choices in its order.
  if (problem.gpu_cap > 0 && !CheckPlan(problem, plan).ok()) {
    plan = ListSchedule(problem, choice, order);
    plan.planner = "saturn";
  }
  // CBC's bound holds only for Saturn's restricted strategy set, not for the
  // problem, so the plan reports the problem's own bound.
  plan.lower_bound = LowerBound(problem);
  plan.timed_out = r.stopped_on_limit && !r.optimal;
  plan.proven_optimal = r.optimal;
  plan.note = "milp makespan " + std::to_string(r.objective) +
              "; model: " + std::to_string(model.columns()) + " columns, " +
              std::to_string(model.rows()) + " rows" +
              (plan.timed_out ? "; timed out, incumbent returned" : "");
  Summarize(problem, plan);
  plan.solve_seconds = elapsed();
  return plan;
}

}  // namespace

std::unique_ptr<Planner> MakeSaturnPlanner() { return std::make_unique<SaturnPlanner>(); }

}  // namespace orrery::planner
