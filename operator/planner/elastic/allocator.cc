// The exact dynamic program behind the elastic allocator.
//
// prefix[i][c] = the largest value reachable by tasks 0..i-1 using at most c GPUs:
// prefix[i+1][c] = max(prefix[i][c], max over options o of task i with gpus(o) <= c
//                  of prefix[i][c - gpus(o)] + value(o)).
// Keeping every row lets the choice be read back without storing decisions. The
// suffix table is the same recurrence from the last task; a prefix row and the
// next suffix row together give the best of every other task within any budget,
// which is what holding one task to one option leaves.
#include "operator/planner/elastic/allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace orrery::planner::elastic {

namespace {

// A value must beat the incumbent by more than this to replace it, so that
// floating-point noise cannot flip ties and results are reproducible.
constexpr double kEps = 1e-12;

Status Validate(const std::vector<ElasticTask>& tasks, int capacity) {
  if (capacity < 0) return InvalidArgumentError("capacity: must be at least 0");
  for (size_t i = 0; i < tasks.size(); ++i) {
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const Option& o = tasks[i].options[j];
      const std::string path =
          "tasks[" + std::to_string(i) + "].options[" + std::to_string(j) + "]";
      if (o.gpus <= 0) return InvalidArgumentError(path + ".gpus: must be at least 1");
      if (!(o.throughput >= 0) || std::isinf(o.throughput)) {
        return InvalidArgumentError(path + ".throughput: must be a finite number >= 0");
      }
    }
  }
  return OkStatus();
}

// One DP row: `next` from `prev` with the task's candidates (gpus, value).
void Relax(const double* prev, double* next, size_t width, const std::vector<int>& gpus,
           const std::vector<double>& values) {
  std::copy(prev, prev + width, next);
  for (size_t k = 0; k < gpus.size(); ++k) {
    const size_t g = static_cast<size_t>(gpus[k]);
    const double v = values[k];
    for (size_t c = g; c < width; ++c) {
      const double cand = prev[c - g] + v;
      if (cand > next[c] + kEps) next[c] = cand;
    }
  }
}

}  // namespace

double OptionValue(const ElasticTask& task, const Option& option, Value value) {
  switch (value) {
    case Value::kNormalizedThroughput:
      return task.total_work > 0 ? task.weight * option.throughput / task.total_work : 0;
    case Value::kRemainingFraction:
      return task.remaining_work > 0 ? task.weight * option.throughput / task.remaining_work : 0;
  }
  return 0;
}

double BestThroughput(const ElasticTask& task, int capacity) {
  double best = 0;
  for (const Option& o : task.options)
    if (o.gpus <= capacity) best = std::max(best, o.throughput);
  return best;
}

StatusOr<Knapsack> Knapsack::Solve(const std::vector<ElasticTask>& tasks,
                                   const std::vector<std::vector<double>>& values, int capacity,
                                   bool probes) {
  ORRERY_RETURN_IF_ERROR(Validate(tasks, capacity));
  if (values.size() != tasks.size())
    return InvalidArgumentError("values: one row per task expected");
  const size_t n = tasks.size();
  Knapsack k;
  k.width_ = static_cast<size_t>(capacity) + 1;
  k.gpus_.resize(n);
  k.values_.resize(n);
  // Only the best option per GPU count can be part of an optimum (an option's
  // value depends on nothing else), so the DP runs over those, fewest GPUs first,
  // lowest index among equals: a handful of GPU counts instead of a few hundred
  // (GPUs, batch) pairs per task.
  std::vector<std::vector<size_t>> candidates(n);
  for (size_t i = 0; i < n; ++i) {
    if (values[i].size() != tasks[i].options.size())
      return InvalidArgumentError("values[" + std::to_string(i) + "]: one entry per option");
    std::vector<std::pair<int, size_t>> by_gpus;  // (gpus, option), best first
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const Option& o = tasks[i].options[j];
      const double v = values[i][j];
      if (!(v > 0) || o.gpus > capacity) continue;
      auto it = std::find_if(by_gpus.begin(), by_gpus.end(),
                             [&](const auto& e) { return e.first == o.gpus; });
      if (it == by_gpus.end()) {
        by_gpus.emplace_back(o.gpus, j);
      } else if (v > values[i][it->second]) {
        it->second = j;
      }
    }
    std::sort(by_gpus.begin(), by_gpus.end());
    for (const auto& e : by_gpus) {
      candidates[i].push_back(e.second);
      k.gpus_[i].push_back(e.first);
      k.values_[i].push_back(values[i][e.second]);
    }
  }
  const size_t width = k.width_;
  k.prefix_.assign((n + 1) * width, 0.0);
  for (size_t i = 0; i < n; ++i)
    Relax(&k.prefix_[i * width], &k.prefix_[(i + 1) * width], width, k.gpus_[i], k.values_[i]);
  if (probes) {
    k.suffix_.assign((n + 1) * width, 0.0);
    for (size_t i = n; i-- > 0;)
      Relax(&k.suffix_[(i + 1) * width], &k.suffix_[i * width], width, k.gpus_[i], k.values_[i]);
  }

  Allocation& result = k.allocation_;
  result.choice.assign(n, -1);
  // Walk back from the last task. At each step keep the task queued when that is
  // as good; otherwise take the option (fewest GPUs first, then lowest index) that
  // reproduces the table entry.
  size_t c = static_cast<size_t>(capacity);
  for (size_t i = n; i-- > 0;) {
    const double* prev = &k.prefix_[i * width];
    const double target = k.prefix_[(i + 1) * width + c];
    if (target <= prev[c] + kEps) continue;
    size_t pick = candidates[i].size();
    for (size_t m = 0; m < candidates[i].size(); ++m) {  // ascending GPUs
      const size_t g = static_cast<size_t>(k.gpus_[i][m]);
      if (g > c) break;
      if (std::abs(prev[c - g] + k.values_[i][m] - target) <=
          1e-9 * std::max(1.0, std::abs(target))) {
        pick = m;
        break;
      }
    }
    if (pick == candidates[i].size()) continue;  // unreachable: the entry came from some option
    result.choice[i] = static_cast<int>(candidates[i][pick]);
    c -= static_cast<size_t>(k.gpus_[i][pick]);
    result.gpus_used += k.gpus_[i][pick];
    result.value += k.values_[i][pick];
  }
  // BestWith holds a task to any of its options, not only the candidates.
  if (!probes) return k;
  k.values_ = values;
  k.gpus_.assign(n, {});
  for (size_t i = 0; i < n; ++i)
    for (const Option& o : tasks[i].options) k.gpus_[i].push_back(o.gpus);
  return k;
}

double Knapsack::BestWith(size_t i, int j) const {
  const size_t capacity = width_ - 1;
  size_t g = 0;
  double v = 0;
  if (j >= 0) {
    g = static_cast<size_t>(gpus_[i][static_cast<size_t>(j)]);
    v = values_[i][static_cast<size_t>(j)];
  }
  if (g > capacity) return -std::numeric_limits<double>::infinity();
  const size_t budget = capacity - g;
  const double* before = &prefix_[i * width_];
  const double* after = &suffix_[(i + 1) * width_];
  double best = -std::numeric_limits<double>::infinity();
  for (size_t c = 0; c <= budget; ++c) best = std::max(best, before[c] + after[budget - c]);
  return v + best;
}

std::vector<int> Knapsack::PlanWith(size_t i, int j) const {
  const size_t capacity = width_ - 1;
  const size_t n = gpus_.size();
  const size_t g = j >= 0 ? static_cast<size_t>(gpus_[i][static_cast<size_t>(j)]) : 0;
  if (g > capacity) return {};
  const size_t budget = capacity - g;
  const double* before = &prefix_[i * width_];
  const double* after = &suffix_[(i + 1) * width_];
  size_t split = 0;  // GPUs of the tasks before i, as in BestWith's maximum
  for (size_t c = 1; c <= budget; ++c)
    if (before[c] + after[budget - c] > before[split] + after[budget - split]) split = c;
  std::vector<int> plan(n, -1);
  plan[i] = j;
  // Which option of task k turns row `from` (budget c) into the entry `target`.
  auto pick = [&](size_t k, const double* from, double target, size_t c) -> int {
    if (target <= from[c] + kEps) return -1;
    for (size_t m = 0; m < gpus_[k].size(); ++m) {
      const size_t gm = static_cast<size_t>(gpus_[k][m]);
      if (gm > c || !(values_[k][m] > 0)) continue;
      if (std::abs(from[c - gm] + values_[k][m] - target) <= 1e-9 * std::max(1.0, std::abs(target)))
        return static_cast<int>(m);
    }
    return -1;  // unreachable: the entry came from some option
  };
  size_t c = split;
  for (size_t k = i; k-- > 0;) {
    const int m = pick(k, &prefix_[k * width_], prefix_[(k + 1) * width_ + c], c);
    plan[k] = m;
    if (m >= 0) c -= static_cast<size_t>(gpus_[k][static_cast<size_t>(m)]);
  }
  c = budget - split;
  for (size_t k = i + 1; k < n; ++k) {
    const int m = pick(k, &suffix_[(k + 1) * width_], suffix_[k * width_ + c], c);
    plan[k] = m;
    if (m >= 0) c -= static_cast<size_t>(gpus_[k][static_cast<size_t>(m)]);
  }
  return plan;
}

StatusOr<Allocation> Allocate(const std::vector<ElasticTask>& tasks, int capacity, Value value) {
  ORRERY_RETURN_IF_ERROR(Validate(tasks, capacity));
  std::vector<std::vector<double>> values(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    for (const Option& o : tasks[i].options) values[i].push_back(OptionValue(tasks[i], o, value));
  }
  ORRERY_ASSIGN_OR_RETURN(Knapsack k, Knapsack::Solve(tasks, values, capacity, false));
  return k.allocation();
}

}  // namespace orrery::planner::elastic
