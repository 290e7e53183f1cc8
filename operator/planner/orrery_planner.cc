// The orrery planner: a decomposition of SPASE that CBC solves in seconds.
//
// 1. Configuration selection + GPU-time packing as a MILP: x[t,c] picks one
//    configuration per task, C is the makespan, and
//      C >= arrival(t) + sum_c run(t,c) x[t,c]                 (each task)
//      sum_{t,c} gpus(c) run(t,c) x[t,c] <= G C                 (GPU-time area)
//      sum_{t,c} f(c) run(t,c) x[t,c] <= N C                    (node packing)
//    where f is a dual-feasible function of the GPUs a configuration takes per
//    node (1 above half a node, 1/2 at exactly half, per node spanned): no node
//    ever runs configurations whose f sums above 1, so the row is valid. The
//    model has tasks x configurations binaries and a handful of rows, so its LP
//    relaxation is tight and CBC proves small gaps fast; its bound is a valid
//    lower bound for the real problem.
// 2. Placement and sequencing: list scheduling of the chosen configurations
//    onto nodes and GPU indices, under several priority orders.
// 3. Iteration: when the concrete schedule is looser than the MILP's C, the
//    area row is tightened (beta < 1) so the MILP leaves room for fragmentation.
// Warm starts and alternatives come from heuristics: the greedy choice and a
// deadline sweep (for a target D, each task's least GPU-time configuration that
// finishes by D, the classic two-phase approach to malleable tasks), and a
// seeded local search over the tasks that end last.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "operator/planner/baselines.h"
#include "operator/planner/decompose.h"
#include "operator/planner/list_scheduler.h"
#include "operator/planner/lower_bound.h"
#include "operator/planner/milp.h"
#include "operator/planner/planner.h"

namespace orrery::planner {
namespace {

struct Candidate {
  int config;
  double run;
  double gpu_time;
  unsigned types;  // bit k: the configuration runs on GpuTypes(problem)[k]
};

// The GPU types (bits over `types`) with enough nodes serving `cfg` for a gang.
unsigned ServingTypes(const Problem& problem, const std::vector<std::string>& types,
                      const Task& task, const Config& cfg) {
  std::vector<int> hosts(types.size(), 0);
  for (const Node& n : problem.nodes) {
    if (!NodeServes(n, task, cfg)) continue;
    ++hosts[static_cast<size_t>(std::lower_bound(types.begin(), types.end(), n.gpu_type) -
                                types.begin())];
  }
  unsigned mask = 0;
  for (size_t k = 0; k < types.size() && k < 32; ++k)
    if (hosts[k] >= cfg.nodes) mask |= 1U << k;
  return mask;
}

// Fitting configurations not dominated by another with no more GPUs, nodes and
// run time that runs on every GPU type it runs on (a slower configuration on a
// cheaper type is not dominated: it leaves the faster type to others). A
// running task always keeps its current configuration available.
std::vector<std::vector<Candidate>> Candidates(const Problem& problem, bool keep_running) {
  std::vector<std::vector<Candidate>> out(problem.tasks.size());
  const std::vector<std::string> types = GpuTypes(problem);
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    std::vector<unsigned> mask(task.configs.size());
    // Re-planning only what waits: a running task has its own configuration
    // alone (when it still fits).
    const int only = keep_running && task.running ? task.running->config : -1;
    for (size_t c = 0; c < task.configs.size(); ++c)
      mask[c] =
          (only < 0 || static_cast<int>(c) == only) && ConfigFits(problem, task, task.configs[c])
              ? ServingTypes(problem, types, task, task.configs[c])
              : 0;
    if (only >= 0 && mask[static_cast<size_t>(only)] == 0) {  // it no longer fits: any
      for (size_t c = 0; c < task.configs.size(); ++c)
        mask[c] = ConfigFits(problem, task, task.configs[c])
                      ? ServingTypes(problem, types, task, task.configs[c])
                      : 0;
    }
    for (size_t c = 0; c < task.configs.size(); ++c) {
      const Config& cfg = task.configs[c];
      if (mask[c] == 0) continue;
      double run = RunSeconds(task, static_cast<int>(c));
      bool dominated = false;
      bool keep = task.running && task.running->config == static_cast<int>(c);
      for (size_t d = 0; d < task.configs.size() && !keep && !dominated; ++d) {
        if (d == c || mask[d] == 0 || (mask[c] & ~mask[d]) != 0) continue;
        const Config& o = task.configs[d];
        double orun = RunSeconds(task, static_cast<int>(d));
        bool no_worse = o.gpus <= cfg.gpus && o.nodes <= cfg.nodes && orun <= run;
        bool better = o.gpus < cfg.gpus || o.nodes < cfg.nodes || orun < run || d < c;
        dominated = no_worse && better;
      }
      if (!dominated) out[t].push_back({static_cast<int>(c), run, run * cfg.gpus, mask[c]});
    }
  }
  return out;
}

class Budget {
 public:
  explicit Budget(const PlanOptions& options)
      : clock_(options.clock), limit_(options.time_limit_s) {
    if (clock_) start_ = clock_->Now();
  }
  double Elapsed() const { return clock_ ? ToSeconds(clock_->Now() - start_) : 0; }
  double Left() const { return limit_ - Elapsed(); }
  bool Expired() const { return Left() <= 0; }

 private:
  const Clock* clock_;
  double limit_;
  TimePoint start_;
};

class OrreryPlanner final : public Planner {
 public:
  std::string Name() const override { return "orrery"; }
  StatusOr<Plan> Solve(const Problem& problem, const PlanOptions& options) override;

 private:
  // Full evaluation: every order rule and placement.
  void Consider(const Problem& problem, const std::vector<int>& choice) {
    OrderRule rule;
    Placement placement;
    Plan p = BestListSchedule(problem, choice, &rule, &placement);
    Offer(std::move(p), choice, rule, placement);
  }
  // Quick evaluation with the rule and placement that won so far.
  double QuickObjective(const Problem& problem, const std::vector<int>& choice,
                        Plan* out = nullptr) {
    Plan p = ListSchedule(problem, choice, OrderTasks(problem, choice, rule_), placement_);
    double objective = p.objective;
    if (out) *out = p;
    Offer(std::move(p), choice, rule_, placement_);
    return objective;
  }
  // `listed`: the plan is what ListSchedule makes of `choice` (the local
  // search can build on it); a deadline schedule's choice is not.
  void Offer(Plan p, const std::vector<int>& choice, OrderRule rule, Placement placement,
             bool listed = true) {
    // Ties on the objective go to the smaller sum of completion times, so the
    // local search can walk along plateaus of equal makespan.
    auto better = [&](const Plan& than, bool have) {
      double eps = 1e-9 * std::max(1.0, than.objective);
      return !have || p.objective < than.objective - eps ||
             (p.objective <= than.objective + eps &&
              p.weighted_completion < than.weighted_completion - eps);
    };
    if (listed && better(listed_, have_listed_)) {
      listed_ = p;
      listed_choice_ = choice;
      rule_ = rule;
      placement_ = placement;
      have_listed_ = true;
    }
    if (better(best_, have_)) {
      best_ = std::move(p);
      best_choice_ = choice;
      have_ = true;
    }
  }

  // Deadline-driven schedules (list_scheduler.h) for the least deadline they
  // meet, offered as they come; returns a note of what it won.
  // `large`: planned by pool too (no backfill placement at that size).
  std::string DeadlineSearch(const Problem& problem,
                             const std::vector<std::vector<Candidate>>& cands, double lb,
                             const Budget& budget, bool large);

  OrderRule rule_ = OrderRule::kLongestFirst;
  Placement placement_ = Placement::kAppend;

  // Plans the groups of a large cluster apart (decompose.h) from the best plan
  // so far; false (with a note) when the problem is not worth splitting.
  // `typing` says each task's GPU type (the type of the GPUs it plans them on).
  bool SolveSplit(const Problem& problem, const Plan& typing, const PlanOptions& options,
                  double limit, std::vector<std::string>& notes);

  Plan best_;
  std::vector<int> best_choice_;
  // The best plan that ListSchedule makes of its choice, where the local
  // search starts, and the order rule and placement that made it.
  Plan listed_;
  std::vector<int> listed_choice_;
  bool have_listed_ = false;
  bool have_ = false;
};

// For target D: each task's least GPU-time candidate finishing by D (ties:
// shorter), or its fastest when none does.
std::vector<int> DeadlineChoice(const Problem& problem,
                                const std::vector<std::vector<Candidate>>& cands, double d) {
  std::vector<int> choice(problem.tasks.size());
  for (size_t t = 0; t < cands.size(); ++t) {
    const Candidate* pick = nullptr;
    const Candidate* fastest = nullptr;
    for (const Candidate& c : cands[t]) {
      if (!fastest || c.run < fastest->run) fastest = &c;
      if (problem.tasks[t].arrival + c.run > d) continue;
      if (!pick || c.gpu_time < pick->gpu_time ||
          (c.gpu_time == pick->gpu_time && c.run < pick->run))
        pick = &c;
    }
    choice[t] = (pick ? pick : fastest)->config;
  }
  return choice;
}

// With several GPU types, least GPU-time overloads the fastest type: GPU-time
// on different types is not comparable. For target D, tasks (largest first)
// go to the type whose GPUs would be least loaded after taking them, each with
// its least GPU-time candidate on that type finishing by D (its fastest there
// when none does): a longest-processing-time greedy across pools, whose
// choices the list scheduler then places within each type.
std::vector<int> BalancedChoice(const Problem& problem,
                                const std::vector<std::vector<Candidate>>& cands, double d) {
  const std::vector<std::string> types = GpuTypes(problem);
  const size_t kt = std::min<size_t>(types.size(), 32);
  std::vector<double> gpus(kt, 0);
  for (const Node& n : problem.nodes) {
    size_t k = static_cast<size_t>(std::lower_bound(types.begin(), types.end(), n.gpu_type) -
                                   types.begin());
    if (k < kt) gpus[k] += n.gpus;
  }
  // Per task and type: the candidate to use there (-1: none).
  std::vector<std::vector<int>> pick(cands.size(), std::vector<int>(kt, -1));
  std::vector<std::pair<double, size_t>> order;
  for (size_t t = 0; t < cands.size(); ++t) {
    double size = 0;
    for (size_t k = 0; k < kt; ++k) {
      int best = -1;
      bool best_in_time = false;
      for (size_t i = 0; i < cands[t].size(); ++i) {
        const Candidate& c = cands[t][i];
        if ((c.types & (1U << k)) == 0) continue;
        bool in_time = problem.tasks[t].arrival + c.run <= d;
        const Candidate* b = best < 0 ? nullptr : &cands[t][static_cast<size_t>(best)];
        bool better =
            b == nullptr || (in_time && !best_in_time) ||
            (in_time == best_in_time && (in_time ? c.gpu_time < b->gpu_time : c.run < b->run));
        if (better) best = static_cast<int>(i), best_in_time = in_time;
      }
      pick[t][k] = best;
      if (best >= 0) size = std::max(size, cands[t][static_cast<size_t>(best)].gpu_time / gpus[k]);
    }
    order.push_back({-size, t});
  }
  std::sort(order.begin(), order.end());
  std::vector<double> load(kt, 0);
  std::vector<int> choice(cands.size());
  for (const auto& [neg, t] : order) {
    // A type where the task finishes by D comes before any where it cannot:
    // one task too long for its type sets the makespan of the whole plan.
    size_t best_k = kt;
    double best_load = std::numeric_limits<double>::infinity();
    bool best_in_time = false;
    for (size_t k = 0; k < kt; ++k) {
      if (pick[t][k] < 0) continue;
      const Candidate& c = cands[t][static_cast<size_t>(pick[t][k])];
      const bool in_time = problem.tasks[t].arrival + c.run <= d;
      double after = (load[k] + c.gpu_time) / gpus[k];
      if ((in_time && !best_in_time) || (in_time == best_in_time && after < best_load))
        best_load = after, best_k = k, best_in_time = in_time;
    }
    const Candidate& c = cands[t][static_cast<size_t>(pick[t][best_k])];
    load[best_k] += c.gpu_time;
    choice[t] = c.config;
  }
  return choice;
}

// The least makespan a plan by pool could reach with `choice`: per GPU type,
// the GPU-time of the tasks there over its GPUs, and the longest of them.
double TypedEstimate(const Problem& problem, const std::vector<std::vector<Candidate>>& cands,
                     const std::vector<int>& choice) {
  const std::vector<std::string> types = GpuTypes(problem);
  std::vector<double> gpus(types.size(), 0), load(types.size(), 0);
  for (const Node& n : problem.nodes)
    gpus[static_cast<size_t>(std::lower_bound(types.begin(), types.end(), n.gpu_type) -
                             types.begin())] += n.gpus;
  double longest = 0;
  for (size_t t = 0; t < cands.size(); ++t) {
    for (const Candidate& c : cands[t]) {
      if (c.config != choice[t]) continue;
      longest = std::max(longest, problem.tasks[t].arrival + c.run);
      // A configuration of several types (typeless) counts on its first.
      for (size_t k = 0; k < types.size() && k < 32; ++k) {
        if ((c.types & (1U << k)) == 0) continue;
        load[k] += c.gpu_time;
        break;
      }
    }
  }
  double estimate = longest;
  for (size_t k = 0; k < types.size(); ++k)
    if (gpus[k] > 0) estimate = std::max(estimate, load[k] / gpus[k]);
  return estimate;
}

struct PackingModel {
  MilpModel model;
  std::vector<std::vector<int>> column;  // [task][candidate] -> column
  int makespan_col = -1;
  std::vector<double> taus;  // arrival thresholds with a suffix-area row
  // GPU types: per proper subset S of the types (a mask), its GPUs; the
  // configurations that run only on S must fit their GPU-time in C x those.
  std::vector<std::pair<unsigned, double>> type_rows;
};

// The proper subsets of the GPU types with their GPUs (capped), for up to four
// types (15 rows): what runs only on S needs S's GPUs, which the one area row
// over all GPUs misses when a memory-bound task fits only the large type.
std::vector<std::pair<unsigned, double>> TypeSubsets(const Problem& problem) {
  std::vector<std::string> types = GpuTypes(problem);
  std::vector<std::pair<unsigned, double>> out;
  if (types.size() < 2 || types.size() > 4) return out;
  std::vector<double> gpus(types.size(), 0);
  for (const Node& n : problem.nodes)
    gpus[static_cast<size_t>(std::lower_bound(types.begin(), types.end(), n.gpu_type) -
                             types.begin())] += n.gpus;
  const unsigned all = (1U << types.size()) - 1;
  for (unsigned set = 1; set < all; ++set) {
    double g = 0;
    for (size_t k = 0; k < types.size(); ++k)
      if (set & (1U << k)) g += gpus[k];
    out.push_back({set, std::min(g, static_cast<double>(problem.UsableGpus()))});
  }
  return out;
}

PackingModel BuildPacking(const Problem& problem, const std::vector<std::vector<Candidate>>& cands,
                          double beta, double upper) {
  PackingModel pm;
  pm.makespan_col = pm.model.AddColumn(1.0, 0.0, upper, false);
  pm.column.resize(cands.size());
  double gpus = problem.UsableGpus();
  bool uniform = true;
  for (const Node& n : problem.nodes) uniform = uniform && n.gpus == problem.nodes.front().gpus;
  int per_node = problem.nodes.front().gpus;
  std::vector<int> area_cols, pack_cols;
  std::vector<double> area_vals, pack_vals;
  for (size_t t = 0; t < cands.size(); ++t) {
    std::vector<int> cols;
    std::vector<double> ones, runs;
    for (const Candidate& c : cands[t]) {
      int col = pm.model.AddColumn(0.0, 0.0, 1.0, true);
      pm.column[t].push_back(col);
      cols.push_back(col);
      ones.push_back(1.0);
      runs.push_back(c.run);
      area_cols.push_back(col);
      area_vals.push_back(c.gpu_time);
      const Config& cfg = problem.tasks[t].configs[static_cast<size_t>(c.config)];
      double f =
          2 * cfg.GpusPerNode() > per_node ? 1.0 : (2 * cfg.GpusPerNode() == per_node ? 0.5 : 0.0);
      if (f > 0) {
        pack_cols.push_back(col);
        pack_vals.push_back(f * cfg.nodes * c.run);
      }
    }
    pm.model.AddRow(cols, ones, 1.0, 1.0);
    // C - sum run x >= arrival
    cols.push_back(pm.makespan_col);
    for (double& r : runs) r = -r;
    runs.push_back(1.0);
    pm.model.AddRow(cols, runs, problem.tasks[t].arrival, std::numeric_limits<double>::infinity());
  }
  area_cols.push_back(pm.makespan_col);
  area_vals.push_back(-beta * gpus);
  pm.model.AddRow(area_cols, area_vals, -std::numeric_limits<double>::infinity(), 0.0);
  // Late arrivals: what arrives at or after tau fits in [tau, C].
  std::vector<double> taus;
  for (const Task& t : problem.tasks)
    if (t.arrival > 0) taus.push_back(t.arrival);
  std::sort(taus.begin(), taus.end());
  taus.erase(std::unique(taus.begin(), taus.end()), taus.end());
  constexpr size_t kMaxTaus = 24;
  if (taus.size() > kMaxTaus) {
    std::vector<double> picked;
    for (size_t i = 0; i < kMaxTaus; ++i) picked.push_back(taus[i * taus.size() / kMaxTaus]);
    taus = picked;
  }
  for (double tau : taus) {
    std::vector<int> cols;
    std::vector<double> vals;
    for (size_t t = 0; t < cands.size(); ++t) {
      if (problem.tasks[t].arrival < tau) continue;
      for (size_t k = 0; k < cands[t].size(); ++k) {
        cols.push_back(pm.column[t][k]);
        vals.push_back(cands[t][k].gpu_time);
      }
    }
    cols.push_back(pm.makespan_col);
    vals.push_back(-beta * gpus);
    pm.model.AddRow(cols, vals, -std::numeric_limits<double>::infinity(), -beta * gpus * tau);
    pm.taus.push_back(tau);
  }
  for (const auto& [set, set_gpus] : TypeSubsets(problem)) {
    std::vector<int> cols;
    std::vector<double> vals;
    for (size_t t = 0; t < cands.size(); ++t) {
      for (size_t k = 0; k < cands[t].size(); ++k) {
        if ((cands[t][k].types & ~set) != 0) continue;
        cols.push_back(pm.column[t][k]);
        vals.push_back(cands[t][k].gpu_time);
      }
    }
    if (cols.empty()) continue;
    cols.push_back(pm.makespan_col);
    vals.push_back(-beta * set_gpus);
    pm.model.AddRow(cols, vals, -std::numeric_limits<double>::infinity(), 0.0);
    pm.type_rows.push_back({set, set_gpus});
  }
  if (uniform && !pack_cols.empty()) {
    pack_cols.push_back(pm.makespan_col);
    pack_vals.push_back(-beta * static_cast<double>(problem.nodes.size()));
    pm.model.AddRow(pack_cols, pack_vals, -std::numeric_limits<double>::infinity(), 0.0);
  }
  return pm;
}

// The packing model's objective for a choice: the least C its rows allow.
std::vector<double> WarmStart(const Problem& problem, const PackingModel& pm,
                              const std::vector<std::vector<Candidate>>& cands,
                              const std::vector<int>& choice, double beta) {
  std::vector<double> x(static_cast<size_t>(pm.model.columns()), 0.0);
  double c = 0, area = 0, pack = 0;
  int per_node = problem.nodes.front().gpus;
  for (size_t t = 0; t < cands.size(); ++t) {
    for (size_t k = 0; k < cands[t].size(); ++k) {
      if (cands[t][k].config != choice[t]) continue;
      x[static_cast<size_t>(pm.column[t][k])] = 1.0;
      c = std::max(c, problem.tasks[t].arrival + cands[t][k].run);
      area += cands[t][k].gpu_time;
      const Config& cfg = problem.tasks[t].configs[static_cast<size_t>(choice[t])];
      double f =
          2 * cfg.GpusPerNode() > per_node ? 1.0 : (2 * cfg.GpusPerNode() == per_node ? 0.5 : 0.0);
      pack += f * cfg.nodes * cands[t][k].run;
    }
  }
  c = std::max(c, area / (beta * problem.UsableGpus()));
  for (double tau : pm.taus) {
    double late = 0;
    for (size_t t = 0; t < cands.size(); ++t) {
      if (problem.tasks[t].arrival < tau) continue;
      for (const Candidate& k : cands[t])
        if (k.config == choice[t]) late += k.gpu_time;
    }
    c = std::max(c, tau + late / (beta * problem.UsableGpus()));
  }
  c = std::max(c, pack / (beta * static_cast<double>(problem.nodes.size())));
  for (const auto& [set, set_gpus] : pm.type_rows) {
    double used = 0;
    for (size_t t = 0; t < cands.size(); ++t) {
      for (const Candidate& k : cands[t])
        if (k.config == choice[t] && (k.types & ~set) == 0) used += k.gpu_time;
    }
    c = std::max(c, used / (beta * set_gpus));
  }
  x[static_cast<size_t>(pm.makespan_col)] = c * (1 + 1e-9);
  return x;
}

std::string OrreryPlanner::DeadlineSearch(const Problem& problem,
                                          const std::vector<std::vector<Candidate>>& cands,
                                          double lb, const Budget& budget, bool large) {
  std::vector<std::vector<int>> configs(cands.size());
  for (size_t t = 0; t < cands.size(); ++t)
    for (const Candidate& c : cands[t]) configs[t].push_back(c.config);
  // GPU-time across types is weighed by the square root of the typed bound's
  // dual prices, then not at all. The dual prices themselves overload the
  // types they price low (the greedy placement has none of the LP's
  // fractional balance): on gpu_types_bench's three types they plan 1.14x the
  // bound at 512 and 2000 GPUs, their square root 1.09x, unweighed 1.09-1.10x.
  const std::vector<double> dual = TypePrices(problem);
  std::vector<double> exponents = {0.0};
  if (!dual.empty()) exponents = {0.5, 0.0};
  const double before = best_.makespan;
  const OrderRule rules[] = {OrderRule::kLongestFirst, OrderRule::kMostGpuTimeFirst};
  // Append placement cannot fill the holes that late arrivals leave; with
  // arrivals, backfill too (its cost per candidate is ListSchedule's backfill,
  // so only below the size planned by pool).
  std::vector<Placement> placements = {Placement::kAppend};
  if (!large && std::any_of(problem.tasks.begin(), problem.tasks.end(),
                            [](const Task& t) { return t.arrival > 0; }))
    placements.push_back(Placement::kBackfill);
  double won_at = -1, won_exponent = 0;
  for (double exponent : exponents) {
    std::vector<double> prices = dual;
    for (double& p : prices) p = std::pow(p, exponent);
    double lo = std::max(lb, 1e-9), hi = std::max(best_.makespan, lo);
    // Bisection on the deadline (12 steps: ~1e-4 of the bound-to-best range).
    for (int i = 0; i < 12 && hi > lo * (1 + 1e-4) && !budget.Expired(); ++i) {
      const double d = i == 0 ? lo : 0.5 * (lo + hi);
      // The order: by each task's least GPU-time configuration finishing by d.
      const std::vector<int> sized = DeadlineChoice(problem, cands, d);
      bool met = false;
      for (OrderRule rule : rules) {
        const std::vector<int> order = OrderTasks(problem, sized, rule);
        for (Placement placement : placements) {
          Plan p = DeadlineSchedule(problem, configs, order, d, prices, placement);
          met = met || p.makespan <= d * (1 + 1e-9);
          std::vector<int> choice(problem.tasks.size());
          for (size_t t = 0; t < choice.size(); ++t) choice[t] = p.assignments[t].config;
          const double objective = p.objective;
          Offer(std::move(p), choice, rule_, placement_, /*listed=*/false);
          if (best_.objective == objective && best_.makespan < before)
            won_at = d, won_exponent = exponent;
        }
      }
      if (met) {
        hi = d;
      } else if (i > 0) {
        lo = d;
      }
      hi = std::min(hi, best_.makespan);
    }
  }
  if (won_at < 0) return "deadline search: no better plan";
  std::string note = "deadline search: " + std::to_string(static_cast<long long>(best_.makespan)) +
                     " at D=" + std::to_string(static_cast<long long>(won_at));
  if (!dual.empty()) note += " prices^" + std::to_string(won_exponent).substr(0, 3);
  return note;
}

// Decomposition by pool: groups of at most kPoolNodes nodes (512 GPUs of 8,
// the size the whole MILP and local search plan within seconds), for problems
// of at least PlanOptions::split_min_size tasks x GPUs.
constexpr int kPoolNodes = 64;

bool OrreryPlanner::SolveSplit(const Problem& problem, const Plan& typing,
                               const PlanOptions& options, double limit,
                               std::vector<std::string>& notes) {
  if (!have_ || !WorthSplitting(problem, kPoolNodes, options.split_min_size)) return false;
  PoolSplit split = SplitIntoPools(problem, typing, kPoolNodes);
  PlanOptions sub = options;
  sub.time_limit_s = limit;
  StatusOr<Plan> joined = SolveByPools(problem, split, sub);
  if (!joined.ok()) {
    notes.push_back("no split: " + joined.status().ToString());
    return false;
  }
  std::vector<int> choice(problem.tasks.size());
  for (size_t t = 0; t < choice.size(); ++t) choice[t] = joined->assignments[t].config;
  notes.push_back("sweep " + std::to_string(options.time_limit_s - limit / 0.9).substr(0, 4) +
                  "s; " + joined->note +
                  " makespan=" + std::to_string(static_cast<long long>(joined->makespan)));
  joined->note.clear();
  Offer(std::move(joined).value(), choice, rule_, placement_);
  return true;
}

StatusOr<Plan> OrreryPlanner::Solve(const Problem& problem, const PlanOptions& options) {
  ORRERY_RETURN_IF_ERROR(ValidateProblem(problem));
  Budget budget(options);
  have_ = false;
  have_listed_ = false;
  std::vector<std::string> notes;
  const auto cands = Candidates(problem, options.keep_running);
  // The planner's choices must be candidates, so every choice is a Pareto one.
  auto candidate_choice = [&](std::vector<int> choice) {
    for (size_t t = 0; t < cands.size(); ++t) {
      bool found = false;
      for (const Candidate& c : cands[t]) found = found || c.config == choice[t];
      if (!found)
        choice[t] = DeadlineChoice(
            problem, cands, problem.tasks[t].arrival + RunSeconds(problem.tasks[t], choice[t]))[t];
    }
    return choice;
  };
  // Whether a plan's choices are all candidates (a baseline's plan may move a
  // running task that must keep its configuration).
  auto all_candidates = [&](const std::vector<int>& choice) {
    for (size_t t = 0; t < cands.size(); ++t) {
      bool found = false;
      for (const Candidate& c : cands[t]) found = found || c.config == choice[t];
      if (!found) return false;
    }
    return true;
  };
  double lb = LowerBound(problem);

  const bool large = WorthSplitting(problem, kPoolNodes, options.split_min_size);
  // Warm start: the plan in force, its configurations where they are still
  // candidates (a new task gets its fastest).
  if (options.hint.size() == problem.tasks.size()) {
    std::vector<int> hint = options.hint;
    const std::vector<int> fastest = FastestChoice(problem);
    for (size_t t = 0; t < hint.size(); ++t)
      if (hint[t] < 0 || hint[t] >= static_cast<int>(problem.tasks[t].configs.size()))
        hint[t] = fastest[t];
    Consider(problem, candidate_choice(hint));
    notes.push_back("warm start");
  }
  if (large) {
    // Greedy's own plan (one schedule, not every order rule): never worse than it.
    Plan greedy = GreedyPlan(problem, lb);
    std::vector<int> choice(problem.tasks.size());
    for (size_t t = 0; t < choice.size(); ++t) choice[t] = greedy.assignments[t].config;
    if (all_candidates(choice)) {
      rule_ = OrderRule::kLongestFirst;
      placement_ = Placement::kBackfill;
      Offer(std::move(greedy), choice, rule_, placement_);
    } else {
      Consider(problem, candidate_choice(choice));
    }
  } else {
    Consider(problem, candidate_choice(FastestChoice(problem)));
  }
  // Deadline sweep between the bound and the greedy makespan. A cluster that
  // is planned by pool needs from it only the tasks' GPU types: with one type
  // it is skipped, with several a coarse sweep of the balanced choice alone
  // (the groups choose configurations and order themselves).
  const bool typed = GpuTypes(problem).size() > 1;
  std::vector<int> typing_choice;  // large and typed: the types the groups get
  double typing_estimate = 0;
  if (!large || typed) {
    double lo = std::max(lb, 1e-9), hi = std::max(best_.makespan, lo);
    const int steps = large ? 48 : 24;
    std::vector<std::pair<double, std::vector<int>>> swept;
    OrderRule saved_rule = rule_;
    Placement saved_placement = placement_;
    double before = listed_.objective;
    for (int i = 0; i <= steps && !budget.Expired(); ++i) {
      double d = lo * std::pow(hi / lo, static_cast<double>(i) / steps);
      rule_ = problem.objective == Objective::kMakespan ? OrderRule::kLongestFirst
                                                        : OrderRule::kSmithRatio;
      placement_ = Placement::kAppend;
      std::vector<int> choice;
      if (!large) {
        choice = DeadlineChoice(problem, cands, d);
        swept.push_back({QuickObjective(problem, choice), choice});
      }
      if (typed && large) {
        // Only the types matter: judged by what the groups could reach.
        choice = BalancedChoice(problem, cands, d);
        const double estimate = TypedEstimate(problem, cands, choice);
        if (typing_choice.empty() || estimate < typing_estimate)
          typing_choice = choice, typing_estimate = estimate;
      } else if (typed) {
        choice = BalancedChoice(problem, cands, d);
        swept.push_back({QuickObjective(problem, choice), choice});
      }
    }
    if (listed_.objective >= before - 1e-9) {  // the sweep won nothing: restore the winner's rule
      rule_ = saved_rule;
      placement_ = saved_placement;
    }
    std::stable_sort(swept.begin(), swept.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < swept.size() && i < (large ? 0U : 3U) && !budget.Expired(); ++i)
      Consider(problem, swept[i].second);
  }

  // Deadline-driven schedules (list_scheduler.h): each task's configuration
  // chosen as it is placed, for the least deadline the schedule meets, by
  // bisection between the bound and the best makespan so far.
  if (problem.objective == Objective::kMakespan)
    notes.push_back(DeadlineSearch(problem, cands, lb, budget, large));

  // Current practice costs one pass: never plan worse than it.
  {
    Plan practice = CurrentPracticePlan(problem, lb);
    std::vector<int> choice(problem.tasks.size());
    for (size_t t = 0; t < choice.size(); ++t) choice[t] = practice.assignments[t].config;
    // (Not when it moves a gang that must keep running.)
    if (all_candidates(choice)) Offer(std::move(practice), choice, rule_, placement_);
  }

  bool timed_out = false;
  bool proven = false;
  std::optional<Plan> typing;
  if (!typing_choice.empty()) {  // one schedule of the chosen types (a fallback too)
    typing = ListSchedule(problem, typing_choice,
                          OrderTasks(problem, typing_choice, OrderRule::kLongestFirst));
    Offer(*typing, typing_choice, OrderRule::kLongestFirst, Placement::kBackfill);
    // The groups take their types from the best plan when it beats this one
    // (a deadline schedule's types, chosen against a real schedule, split
    // into groups that plan 6% nearer the bound on gpu_types_bench's three types).
    if (best_.makespan < typing->makespan) typing = best_;
  }
  const bool split =
      SolveSplit(problem, typing ? *typing : best_, options, 0.9 * budget.Left(), notes);
  if (split) {
    // The groups ran their own MILPs and local searches.
  } else if (problem.objective == Objective::kMakespan) {
    // The MILP gets about half of what is left; the rest goes to iterations
    // and local search.
    for (double beta : {1.0, 0.96, 0.92}) {
      double left = budget.Left();
      if (left <= 0.05) break;
      double limit = beta == 1.0 ? 0.5 * left : 0.25 * left;
      PackingModel pm = BuildPacking(problem, cands, beta, best_.makespan * 4 + 1);
      MilpOptions mo;
      mo.time_limit_s = limit;
      mo.seed = options.seed;
      mo.max_nodes = options.max_nodes;
      mo.warm_start = WarmStart(problem, pm, cands, best_choice_, beta);
      ORRERY_ASSIGN_OR_RETURN(MilpResult r, MilpSolver::Solve(pm.model, mo));
      if (beta == 1.0) {
        if (r.bound > lb) lb = r.bound;
        timed_out = r.stopped_on_limit && !r.optimal;
        if (r.optimal) proven = true;
      }
      if (!r.has_solution) continue;
      std::vector<int> choice(cands.size());
      for (size_t t = 0; t < cands.size(); ++t) {
        size_t pick = 0;
        for (size_t k = 0; k < cands[t].size(); ++k) {
          if (r.x[static_cast<size_t>(pm.column[t][k])] >
              r.x[static_cast<size_t>(pm.column[t][pick])])
            pick = k;
        }
        choice[t] = cands[t][pick].config;
      }
      Consider(problem, choice);
      notes.push_back("packing beta=" + std::to_string(beta).substr(0, 4) +
                      " C=" + std::to_string(static_cast<long long>(r.objective)) +
                      " bound=" + std::to_string(static_cast<long long>(r.bound)) +
                      " schedule=" + std::to_string(static_cast<long long>(best_.makespan)));
      // Stop tightening once the schedule is as good as the packing promises.
      if (best_.makespan <= r.objective * 1.005) break;
    }
  } else {
    notes.push_back("weighted completion: heuristic choice and Smith-order scheduling, no MILP");
  }

  // Seeded local search: move a late task to another candidate configuration.
  std::mt19937 rng(static_cast<unsigned>(options.seed));
  // Enough single-schedule evaluations to matter, scaled so large instances
  // stay within seconds; the count (not the clock) bounds it for determinism.
  double size = static_cast<double>(problem.tasks.size()) * problem.TotalGpus();
  int evaluations = static_cast<int>(std::clamp(2e7 / std::max(1.0, size), 400.0, 20000.0));
  for (int i = 0; i < evaluations && !split && !budget.Expired(); ++i) {
    std::vector<int> choice = listed_choice_;
    // Pick among the tasks ending in the last tenth of the schedule.
    std::vector<size_t> late;
    for (size_t t = 0; t < choice.size(); ++t) {
      if (listed_.assignments[t].end >= 0.9 * listed_.makespan) late.push_back(t);
    }
    if (late.empty()) break;
    size_t t = late[std::uniform_int_distribution<size_t>(0, late.size() - 1)(rng)];
    if (cands[t].size() < 2) continue;
    choice[t] = cands[t][std::uniform_int_distribution<size_t>(0, cands[t].size() - 1)(rng)].config;
    // And one random task anywhere, so GPU-time can shift between tasks.
    size_t u = std::uniform_int_distribution<size_t>(0, choice.size() - 1)(rng);
    if (i % 2 == 1 && cands[u].size() > 1)
      choice[u] =
          cands[u][std::uniform_int_distribution<size_t>(0, cands[u].size() - 1)(rng)].config;
    QuickObjective(problem, choice);
  }

  Plan plan = best_;
  plan.planner = "orrery";
  plan.lower_bound = lb;
  plan.timed_out = timed_out;
  Summarize(problem, plan);
  plan.proven_optimal = proven && plan.gap < 1e-6;
  for (size_t i = 0; i < notes.size(); ++i) plan.note += (i ? "; " : "") + notes[i];
  plan.solve_seconds = budget.Elapsed();
  return plan;
}

}  // namespace

std::unique_ptr<Planner> MakeOrreryPlanner() { return std::make_unique<OrreryPlanner>(); }

}  // namespace orrery::planner
