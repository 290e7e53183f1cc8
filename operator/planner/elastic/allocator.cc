// The exact dynamic program behind the elastic allocator.
//
// best[i][c] = the largest value reachable by tasks 0..i-1 using at most c GPUs.
// best[i+1][c] = max(best[i][c], max over options o of task i with gpus(o) <= c of
//                best[i][c - gpus(o)] + value(o)).
// Keeping every row lets the choice be read back without storing decisions; the
// table is (tasks + 1) x (capacity + 1) doubles: 101 x 513 for the target size.
#include "operator/planner/elastic/allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace orrery::planner::elastic {

double OptionValue(const ElasticTask& task, const Option& option, Value value) {
  switch (value) {
    case Value::kNormalizedThroughput:
      return task.total_work > 0 ? task.weight * option.throughput / task.total_work : 0;
    case Value::kRemainingFraction:
      return task.remaining_work > 0 ? task.weight * option.throughput / task.remaining_work : 0;
  }
  return 0;
}

StatusOr<Allocation> Allocate(const std::vector<ElasticTask>& tasks, int capacity, Value value) {
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
  const size_t n = tasks.size();
  const size_t width = static_cast<size_t>(capacity) + 1;
  // Only the best option per GPU count can be part of an optimum (an option's value
  // depends on nothing else), so the DP runs over those: 7 GPU counts instead of a
  // few hundred (GPUs, batch) pairs per task.
  std::vector<std::vector<size_t>> candidates(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<std::pair<int, size_t>> by_gpus;  // (gpus, option), best first
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const Option& o = tasks[i].options[j];
      const double v = OptionValue(tasks[i], o, value);
      if (v <= 0 || o.gpus > capacity) continue;
      auto it = std::find_if(by_gpus.begin(), by_gpus.end(),
                             [&](const auto& e) { return e.first == o.gpus; });
      if (it == by_gpus.end()) {
        by_gpus.emplace_back(o.gpus, j);
      } else if (v > OptionValue(tasks[i], tasks[i].options[it->second], value)) {
        it->second = j;
      }
    }
    std::sort(by_gpus.begin(), by_gpus.end());
    for (const auto& e : by_gpus) candidates[i].push_back(e.second);
  }
  // A value must beat the incumbent by more than this to replace it, so that
  // floating-point noise cannot flip ties and results are reproducible.
  constexpr double kEps = 1e-12;
  std::vector<double> best((n + 1) * width, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double* prev = &best[i * width];
    double* row = &best[(i + 1) * width];
    for (size_t c = 0; c < width; ++c) row[c] = prev[c];
    for (size_t j : candidates[i]) {
      const Option& o = tasks[i].options[j];
      const double v = OptionValue(tasks[i], o, value);
      const size_t g = static_cast<size_t>(o.gpus);
      for (size_t c = g; c < width; ++c) {
        const double cand = prev[c - g] + v;
        if (cand > row[c] + kEps) row[c] = cand;
      }
    }
  }
  Allocation result;
  result.choice.assign(n, -1);
  // Walk back from the last task. At each step keep the task queued when that is
  // as good; otherwise take the option (fewest GPUs first, then lowest index) that
  // reproduces the table entry.
  size_t c = static_cast<size_t>(capacity);
  for (size_t i = n; i-- > 0;) {
    const double* prev = &best[i * width];
    const double target = best[(i + 1) * width + c];
    if (target <= prev[c] + kEps) continue;
    int pick = -1;
    for (size_t j : candidates[i]) {  // ascending GPUs: the first match uses fewest
      const Option& o = tasks[i].options[j];
      const size_t g = static_cast<size_t>(o.gpus);
      if (g > c) break;
      const double v = OptionValue(tasks[i], o, value);
      if (std::abs(prev[c - g] + v - target) <= 1e-9 * std::max(1.0, std::abs(target))) {
        pick = static_cast<int>(j);
        break;
      }
    }
    if (pick < 0) continue;  // unreachable: the table entry came from some option
    result.choice[i] = pick;
    const Option& o = tasks[i].options[static_cast<size_t>(pick)];
    c -= static_cast<size_t>(o.gpus);
    result.gpus_used += o.gpus;
    result.value += OptionValue(tasks[i], o, value);
  }
  return result;
}

}  // namespace orrery::planner::elastic
