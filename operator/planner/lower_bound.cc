// Lower bounds by a sweep over configuration finishing times: as the candidate
// makespan grows past each (arrival + run time), more configurations become
// usable and the least GPU-time per task can only fall, so the first breakpoint
// interval where the area fits holds the least feasible C.
#include "operator/planner/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
      if (!ConfigFits(problem, task.configs[k])) continue;
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

}  // namespace

double MakespanLowerBound(const Problem& problem) {
  double c = SweepBound(problem);
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
      if (!ConfigFits(problem, task.configs[c])) continue;
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

double WeightedCompletionLowerBound(const Problem& problem) {
  double sum = 0;
  for (const Task& task : problem.tasks) {
    double shortest = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < task.configs.size(); ++c) {
      if (ConfigFits(problem, task.configs[c]))
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
