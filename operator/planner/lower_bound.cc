// Lower bounds by a sweep over configuration finishing times: as the candidate
// makespan grows past each (arrival + run time), more configurations become
// usable and the least GPU-time per task can only fall, so the first breakpoint
// interval where the area fits holds the least feasible C.
#include "operator/planner/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace orrery::planner {

namespace {

// Whether C passes the area test for every suffix of arrivals: the tasks that
// arrive at or after tau need their least GPU-time (among configurations
// finishing by C) inside [tau, C].
bool ArrivalAreaFits(const Problem& problem, double c) {
  double gpus = problem.UsableGpus();
  std::vector<std::pair<double, double>> need;  // arrival, least GPU-time
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    double best = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < task.configs.size(); ++k) {
      if (!ConfigFits(problem, task, task.configs[k])) continue;
      double run = RunSeconds(task, static_cast<int>(k));
      if (task.arrival + run <= c) best = std::min(best, run * task.configs[k].gpus);
    }
    if (best == std::numeric_limits<double>::infinity()) return false;
    need.push_back({task.arrival, best});
  }
  std::sort(need.begin(), need.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  double area = 0;
  for (const auto& [tau, gt] : need) {
    area += gt;
    if (area > (c - tau) * gpus * (1 + 1e-12)) return false;
  }
  return true;
}

double SweepBound(const Problem& problem);

// ---- GPU types -----------------------------------------------------------------
//
// With several GPU types the one-pool area test is weak: a task's GPU-time
// differs by type, and each type's GPUs are a pool of their own. The exact
// area test is the LP "assign each task fractionally to types so that every
// type's GPU-time fits in C x its GPUs": min Z s.t. sum_k y[t,k] = 1,
// sum_t w[t,k] y[t,k] <= Z G[k], y >= 0, where w[t,k] is the task's least
// GPU-time on type k among configurations finishing by C. Its dual is
//   max over lambda >= 0 with sum_k lambda[k] G[k] = 1 of sum_t min_k lambda[k] w[t,k],
// and by weak duality every such lambda gives a lower bound on Z: so we never
// need the LP's optimum for a valid bound, only a good lambda, found by a grid
// over the simplex of p[k] = lambda[k] G[k] and a local refinement. C is
// infeasible when the dual value exceeds C; as w only falls when C grows, a
// bisection over C between the one-pool bound and the dual value there gives
// the bound. With one type (lambda = 1/G) it is the one-pool test.

struct TypedItem {
  size_t task;
  size_t type;
  double finish;
  double gpu_time;
};

// The dual value for p over least GPU-times w (tasks x types; inf: none).
double DualValue(const std::vector<double>& w, size_t types, const std::vector<double>& p,
                 const std::vector<double>& gpus) {
  double sum = 0;
  for (size_t i = 0; i < w.size(); i += types) {
    double best = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < types; ++k)
      if (std::isfinite(w[i + k])) best = std::min(best, p[k] / gpus[k] * w[i + k]);
    sum += best;  // infinite when the task finishes by C nowhere
  }
  return sum;
}

// The best dual value found over the simplex of p (a lower bound on the LP).
double BestDual(const std::vector<double>& w, const std::vector<double>& gpus,
                std::vector<double>* prices = nullptr) {
  const size_t types = gpus.size();
  constexpr int kSteps = 12;
  std::vector<double> best_p(types, 1.0 / static_cast<double>(types)), p(types);
  double best = DualValue(w, types, best_p, gpus);
  // Grid: compositions of kSteps into `types` parts.
  std::vector<int> parts(types, 0);
  std::function<void(size_t, int)> grid = [&](size_t k, int left) {
    if (k + 1 == types) {
      parts[k] = left;
      for (size_t j = 0; j < types; ++j) p[j] = static_cast<double>(parts[j]) / kSteps;
      double v = DualValue(w, types, p, gpus);
      if (v > best) best = v, best_p = p;
      return;
    }
    for (int i = 0; i <= left; ++i) {
      parts[k] = i;
      grid(k + 1, left - i);
    }
  };
  grid(0, kSteps);
  // Refine: move mass between pairs of types in shrinking steps (a few moves
  // per step: any p is valid, so stopping early only loosens the bound).
  for (double step = 0.5 / kSteps; step > 1e-3; step *= 0.5) {
    bool moved = true;
    for (int round = 0; round < 8 && moved; ++round) {
      moved = false;
      for (size_t a = 0; a < types; ++a) {
        for (size_t b = 0; b < types; ++b) {
          if (a == b || best_p[b] < step) continue;
          p = best_p;
          p[a] += step;
          p[b] -= step;
          double v = DualValue(w, types, p, gpus);
          if (v > best * (1 + 1e-12)) best = v, best_p = p, moved = true;
        }
      }
    }
  }
  if (prices) *prices = best_p;
  return best;
}

// The typed area bound from `from` up; with `prices`, the dual's p at the bound.
double TypedAreaBound(const Problem& problem, double from, std::vector<double>* prices = nullptr) {
  std::vector<std::string> types = GpuTypes(problem);
  const size_t kt = types.size();
  if (kt < 2 || kt > 4 || !std::isfinite(from)) return 0;
  std::vector<double> gpus(kt, 0);
  std::vector<size_t> type_of(problem.nodes.size());
  for (size_t n = 0; n < problem.nodes.size(); ++n) {
    const Node& node = problem.nodes[n];
    type_of[n] = static_cast<size_t>(std::lower_bound(types.begin(), types.end(), node.gpu_type) -
                                     types.begin());
    gpus[type_of[n]] += node.gpus;
  }
  std::vector<TypedItem> items;
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    for (size_t c = 0; c < task.configs.size(); ++c) {
      const Config& cfg = task.configs[c];
      double run = RunSeconds(task, static_cast<int>(c));
      // The config runs on type k when enough of its nodes serve it.
      std::vector<int> hosts(kt, 0);
      for (size_t n = 0; n < problem.nodes.size(); ++n)
        if (NodeServes(problem.nodes[n], task, cfg)) ++hosts[type_of[n]];
      for (size_t k = 0; k < kt; ++k) {
        if (hosts[k] >= cfg.nodes && (problem.gpu_cap == 0 || cfg.gpus <= problem.gpu_cap))
          items.push_back({t, k, task.arrival + run, run * cfg.gpus});
      }
    }
  }
  const double kInf = std::numeric_limits<double>::infinity();
  auto dual_at = [&](double c, std::vector<double>* p) {
    std::vector<double> w(problem.tasks.size() * kt, kInf);
    for (const TypedItem& it : items)
      if (it.finish <= c)
        w[it.task * kt + it.type] = std::min(w[it.task * kt + it.type], it.gpu_time);
    return BestDual(w, gpus, p);
  };
  // Per GPU-second: p[k] is type k's share of the whole cluster's worth.
  auto per_gpu = [&] {
    if (prices)
      for (size_t k = 0; k < kt && k < prices->size(); ++k) (*prices)[k] /= gpus[k];
  };
  double lo = from, hi = dual_at(from, prices);
  if (!(hi > lo) || !std::isfinite(hi)) {
    per_gpu();
    return from;
  }
  for (int i = 0; i < 30 && hi - lo > 1e-6 * hi; ++i) {
    double mid = 0.5 * (lo + hi);
    (dual_at(mid, nullptr) > mid ? lo : hi) = mid;
  }
  if (prices) (void)dual_at(hi, prices);
  per_gpu();
  return lo;
}

}  // namespace

double MakespanLowerBound(const Problem& problem) {
  double c = SweepBound(problem);
  c = std::max(c, TypedAreaBound(problem, c));
  bool arrivals = false;
  for (const Task& t : problem.tasks) arrivals = arrivals || t.arrival > 0;
  if (!arrivals || !std::isfinite(c) || ArrivalAreaFits(problem, c)) return c;
  // Bisection on the monotone suffix test; the result is a valid bound to
  // within the bisection's relative tolerance, which we round down.
  double lo = c, hi = 2 * c + 1;
  while (!ArrivalAreaFits(problem, hi)) hi *= 2;
  for (int i = 0; i < 100 && hi - lo > 1e-9 * hi; ++i) {
    double mid = 0.5 * (lo + hi);
    (ArrivalAreaFits(problem, mid) ? hi : lo) = mid;
  }
  return lo;
}

namespace {

double SweepBound(const Problem& problem) {
  size_t n = problem.tasks.size();
  if (n == 0) return 0;
  double gpus = problem.UsableGpus();
  if (gpus <= 0) return std::numeric_limits<double>::infinity();
  struct Item {
    double finish;
    size_t task;
    double gpu_time;
  };
  std::vector<Item> items;
  for (size_t t = 0; t < n; ++t) {
    const Task& task = problem.tasks[t];
    for (size_t c = 0; c < task.configs.size(); ++c) {
      if (!ConfigFits(problem, task, task.configs[c])) continue;
      double run = RunSeconds(task, static_cast<int>(c));
      items.push_back({task.arrival + run, t, run * task.configs[c].gpus});
    }
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.finish < b.finish; });
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best(n, kInf);
  size_t covered = 0;
  double area = 0;  // sum of best over covered tasks
  for (size_t i = 0; i < items.size();) {
    double b = items[i].finish;
    for (; i < items.size() && items[i].finish == b; ++i) {
      const Item& it = items[i];
      if (best[it.task] == kInf) {
        ++covered;
        best[it.task] = it.gpu_time;
        area += it.gpu_time;
      } else if (it.gpu_time < best[it.task]) {
        area -= best[it.task] - it.gpu_time;
        best[it.task] = it.gpu_time;
      }
    }
    if (covered < n) continue;
    double c = std::max(b, area / gpus);
    double next = i < items.size() ? items[i].finish : kInf;
    if (c < next) return c;
  }
  return kInf;  // some task fits nowhere
}

}  // namespace

std::vector<double> TypePrices(const Problem& problem) {
  const size_t kt = GpuTypes(problem).size();
  if (kt < 2 || kt > 4) return {};
  const double from = SweepBound(problem);
  if (!std::isfinite(from)) return {};
  std::vector<double> prices;
  (void)TypedAreaBound(problem, from, &prices);
  if (prices.size() != kt) return {};
  // A type the dual prices at 0 is one the bound leaves idle; GPU-time there
  // is still not free (it would draw every task), so it costs at least a
  // twentieth of the dearest type's.
  const double top = *std::max_element(prices.begin(), prices.end());
  for (double& p : prices) p = std::max(p, 0.05 * top);
  // Scaled so that the cluster's average GPU-second costs 1.
  const std::vector<std::string> types = GpuTypes(problem);
  double paid = 0, gpus = 0;
  for (const Node& n : problem.nodes) {
    paid += n.gpus * prices[static_cast<size_t>(
                         std::lower_bound(types.begin(), types.end(), n.gpu_type) - types.begin())];
    gpus += n.gpus;
  }
  if (paid > 0)
    for (double& p : prices) p *= gpus / paid;
  return prices;
}

double WeightedCompletionLowerBound(const Problem& problem) {
  double sum = 0;
  for (const Task& task : problem.tasks) {
    double shortest = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < task.configs.size(); ++c) {
      if (ConfigFits(problem, task, task.configs[c]))
        shortest = std::min(shortest, RunSeconds(task, static_cast<int>(c)));
    }
    sum += task.weight * (task.arrival + shortest);
  }
  return sum;
}

double LowerBound(const Problem& problem) {
  return problem.objective == Objective::kMakespan ? MakespanLowerBound(problem)
                                                   : WeightedCompletionLowerBound(problem);
}

}  // namespace orrery::planner
