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

Status Validate(const std::vector<ElasticTask>& tasks, const Capacity& capacity) {
  if (capacity.empty()) return InvalidArgumentError("capacity: at least one pool expected");
  for (size_t t = 0; t < capacity.size(); ++t)
    if (capacity[t] < 0)
      return InvalidArgumentError(capacity.size() == 1
                                      ? std::string("capacity: must be at least 0")
                                      : "capacity[" + std::to_string(t) + "]: must be at least 0");
  if (States(capacity) > kMaxStates)
    return InvalidArgumentError("capacity: " + std::to_string(States(capacity)) +
                                " states across pools exceed " + std::to_string(kMaxStates) +
                                "; plan fewer pools or smaller ones at once");
  for (size_t i = 0; i < tasks.size(); ++i) {
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const Option& o = tasks[i].options[j];
      const std::string path =
          "tasks[" + std::to_string(i) + "].options[" + std::to_string(j) + "]";
      if (o.gpus <= 0) return InvalidArgumentError(path + ".gpus: must be at least 1");
      if (!(o.throughput >= 0) || std::isinf(o.throughput)) {
        return InvalidArgumentError(path + ".throughput: must be a finite number >= 0");
      }
      if (o.type < 0 || static_cast<size_t>(o.type) >= capacity.size())
        return InvalidArgumentError(path + ".type: must name a pool, 0 to " +
                                    std::to_string(capacity.size() - 1));
    }
  }
  return OkStatus();
}

// One DP row: `next` from `prev` with the task's candidates (gpus, pool, value).
// A candidate of pool t with g GPUs reaches every state whose pool-t digit is at
// least g, from the state g GPUs of pool t below it.
void Relax(const double* prev, double* next, size_t width, const std::vector<int>& gpus,
           const std::vector<int>& types, const std::vector<double>& values,
           const Capacity& capacity, const std::vector<size_t>& stride) {
  std::copy(prev, prev + width, next);
  for (size_t k = 0; k < gpus.size(); ++k) {
    const size_t t = static_cast<size_t>(types[k]);
    const size_t g = static_cast<size_t>(gpus[k]);
    const size_t step = stride[t], radix = static_cast<size_t>(capacity[t]) + 1;
    const size_t block = step * radix, shift = g * step;
    const double v = values[k];
    for (size_t hi = 0; hi < width; hi += block)
      for (size_t c = hi + shift; c < hi + block; ++c) {
        const double cand = prev[c - shift] + v;
        if (cand > next[c] + kEps) next[c] = cand;
      }
  }
}

}  // namespace

Status CheckInput(const std::vector<ElasticTask>& tasks, const Capacity& capacity) {
  return Validate(tasks, capacity);
}

size_t States(const Capacity& capacity) {
  size_t states = 1;
  for (int c : capacity) {
    const size_t r = static_cast<size_t>(std::max(c, 0)) + 1;
    if (states > kMaxStates * 4 / r) return kMaxStates * 4;  // saturate
    states *= r;
  }
  return states;
}

bool Fits(const Option& option, const Capacity& capacity) {
  return option.type >= 0 && static_cast<size_t>(option.type) < capacity.size() &&
         option.gpus <= capacity[static_cast<size_t>(option.type)];
}

template <typename F>
void Knapsack::ForBox(size_t b, F f) const {
  const size_t pools = capacity_.size();
  std::vector<size_t> top(pools), digit(pools, 0);
  for (size_t t = 0; t < pools; ++t)
    top[t] = (b / stride_[t]) % (static_cast<size_t>(capacity_[t]) + 1);
  size_t c = 0;
  for (;;) {
    f(c, b - c);
    size_t t = 0;
    while (t < pools && digit[t] == top[t]) {
      c -= digit[t] * stride_[t];
      digit[t] = 0;
      ++t;
    }
    if (t == pools) return;
    ++digit[t];
    c += stride_[t];
  }
}

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
  if (capacity < 0) return InvalidArgumentError("capacity: must be at least 0");
  return Solve(tasks, values, Capacity{capacity}, probes);
}

StatusOr<Knapsack> Knapsack::Solve(const std::vector<ElasticTask>& tasks,
                                   const std::vector<std::vector<double>>& values,
                                   const Capacity& capacity, bool probes) {
  ORRERY_RETURN_IF_ERROR(Validate(tasks, capacity));
  if (values.size() != tasks.size())
    return InvalidArgumentError("values: one row per task expected");
  const size_t n = tasks.size();
  Knapsack k;
  k.capacity_ = capacity;
  k.stride_.resize(capacity.size());
  k.width_ = 1;
  for (size_t t = 0; t < capacity.size(); ++t) {
    k.stride_[t] = k.width_;
    k.width_ *= static_cast<size_t>(capacity[t]) + 1;
  }
  k.gpus_.resize(n);
  k.types_.resize(n);
  k.values_.resize(n);
  // Only the best option per pool and GPU count can be part of an optimum (an
  // option's value depends on nothing else), so the DP runs over those, fewest
  // GPUs first, then the lowest pool, lowest index among equals: a handful of
  // candidates instead of a few hundred (pool, GPUs, batch) triples per task.
  std::vector<std::vector<size_t>> candidates(n);
  for (size_t i = 0; i < n; ++i) {
    if (values[i].size() != tasks[i].options.size())
      return InvalidArgumentError("values[" + std::to_string(i) + "]: one entry per option");
    std::vector<std::pair<std::pair<int, int>, size_t>> by_shape;  // ((gpus, pool), option)
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const Option& o = tasks[i].options[j];
      const double v = values[i][j];
      if (!(v > 0) || !Fits(o, capacity)) continue;
      auto it = std::find_if(by_shape.begin(), by_shape.end(), [&](const auto& e) {
        return e.first == std::make_pair(o.gpus, o.type);
      });
      if (it == by_shape.end()) {
        by_shape.push_back({{o.gpus, o.type}, j});
      } else if (v > values[i][it->second]) {
        it->second = j;
      }
    }
    std::sort(by_shape.begin(), by_shape.end());
    for (const auto& e : by_shape) {
      candidates[i].push_back(e.second);
      k.gpus_[i].push_back(e.first.first);
      k.types_[i].push_back(e.first.second);
      k.values_[i].push_back(values[i][e.second]);
    }
  }
  const size_t width = k.width_;
  k.prefix_.assign((n + 1) * width, 0.0);
  for (size_t i = 0; i < n; ++i)
    Relax(&k.prefix_[i * width], &k.prefix_[(i + 1) * width], width, k.gpus_[i], k.types_[i],
          k.values_[i], capacity, k.stride_);
  if (probes) {
    k.suffix_.assign((n + 1) * width, 0.0);
    for (size_t i = n; i-- > 0;)
      Relax(&k.suffix_[(i + 1) * width], &k.suffix_[i * width], width, k.gpus_[i], k.types_[i],
            k.values_[i], capacity, k.stride_);
  }
  k.ReadBack(candidates);
  // BestWith holds a task to any of its options, not only the candidates.
  if (!probes) return k;
  k.values_ = values;
  k.gpus_.assign(n, {});
  k.types_.assign(n, {});
  for (size_t i = 0; i < n; ++i)
    for (const Option& o : tasks[i].options) {
      k.gpus_[i].push_back(o.gpus);
      k.types_[i].push_back(o.type);
    }
  return k;
}

int Knapsack::Pick(size_t k, const double* from, double target, size_t c) const {
  if (target <= from[c] + kEps) return -1;
  for (size_t m = 0; m < gpus_[k].size(); ++m) {  // fewest GPUs first, then pool
    const size_t t = static_cast<size_t>(types_[k][m]);
    const size_t gm = static_cast<size_t>(gpus_[k][m]);
    if (gm > Digit(c, t) || !(values_[k][m] > 0)) continue;
    const double reached = from[c - gm * stride_[t]] + values_[k][m];
    if (std::abs(reached - target) <= 1e-9 * std::max(1.0, std::abs(target)))
      return static_cast<int>(m);
  }
  return -1;  // unreachable: the entry came from some option
}

void Knapsack::ReadBack(const std::vector<std::vector<size_t>>& candidates) {
  const size_t n = gpus_.size();
  Allocation& result = allocation_;
  result.choice.assign(n, -1);
  // Walk back from the last task. At each step keep the task queued when that is
  // as good; otherwise take the candidate (fewest GPUs first, then the lowest
  // pool and index) that reproduces the table entry.
  size_t c = width_ - 1;  // every pool full
  for (size_t i = n; i-- > 0;) {
    const int m = Pick(i, &prefix_[i * width_], prefix_[(i + 1) * width_ + c], c);
    if (m < 0) continue;
    const size_t pick = static_cast<size_t>(m);
    result.choice[i] = static_cast<int>(candidates[i][pick]);
    c -= static_cast<size_t>(gpus_[i][pick]) * stride_[static_cast<size_t>(types_[i][pick])];
    result.gpus_used += gpus_[i][pick];
    result.value += values_[i][pick];
  }
}

double Knapsack::BestWith(size_t i, int j) const {
  size_t budget = width_ - 1;
  double v = 0;
  if (j >= 0) {
    const size_t t = static_cast<size_t>(types_[i][static_cast<size_t>(j)]);
    const size_t g = static_cast<size_t>(gpus_[i][static_cast<size_t>(j)]);
    if (g > Digit(budget, t)) return -std::numeric_limits<double>::infinity();
    budget -= g * stride_[t];
    v = values_[i][static_cast<size_t>(j)];
  }
  const double* before = &prefix_[i * width_];
  const double* after = &suffix_[(i + 1) * width_];
  double best = -std::numeric_limits<double>::infinity();
  ForBox(budget, [&](size_t c, size_t rest) { best = std::max(best, before[c] + after[rest]); });
  return v + best;
}

std::vector<int> Knapsack::PlanWith(size_t i, int j) const {
  const size_t n = gpus_.size();
  size_t budget = width_ - 1;
  if (j >= 0) {
    const size_t t = static_cast<size_t>(types_[i][static_cast<size_t>(j)]);
    const size_t g = static_cast<size_t>(gpus_[i][static_cast<size_t>(j)]);
    if (g > Digit(budget, t)) return {};
    budget -= g * stride_[t];
  }
  const double* before = &prefix_[i * width_];
  const double* after = &suffix_[(i + 1) * width_];
  // GPUs of the tasks before i, as in BestWith's maximum (the first best).
  size_t split = 0;
  double best = -std::numeric_limits<double>::infinity();
  ForBox(budget, [&](size_t c, size_t rest) {
    if (before[c] + after[rest] > best) {
      best = before[c] + after[rest];
      split = c;
    }
  });
  std::vector<int> plan(n, -1);
  plan[i] = j;
  auto take = [&](size_t k, int m, size_t& c) {
    plan[k] = m;
    if (m >= 0)
      c -= static_cast<size_t>(gpus_[k][static_cast<size_t>(m)]) *
           stride_[static_cast<size_t>(types_[k][static_cast<size_t>(m)])];
  };
  size_t c = split;
  for (size_t k = i; k-- > 0;)
    take(k, Pick(k, &prefix_[k * width_], prefix_[(k + 1) * width_ + c], c), c);
  c = budget - split;
  for (size_t k = i + 1; k < n; ++k)
    take(k, Pick(k, &suffix_[(k + 1) * width_], suffix_[k * width_ + c], c), c);
  return plan;
}

StatusOr<Allocation> Allocate(const std::vector<ElasticTask>& tasks, int capacity, Value value) {
  if (capacity < 0) return InvalidArgumentError("capacity: must be at least 0");
  return Allocate(tasks, Capacity{capacity}, value);
}

StatusOr<Allocation> Allocate(const std::vector<ElasticTask>& tasks, const Capacity& capacity,
                              Value value) {
  ORRERY_RETURN_IF_ERROR(Validate(tasks, capacity));
  std::vector<std::vector<double>> values(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    for (const Option& o : tasks[i].options) values[i].push_back(OptionValue(tasks[i], o, value));
  }
  ORRERY_ASSIGN_OR_RETURN(Knapsack k, Knapsack::Solve(tasks, values, capacity, false));
  return k.allocation();
}

StatusOr<Allocation> Exhaustive(const std::vector<ElasticTask>& tasks,
                                const std::vector<std::vector<double>>& values,
                                const Capacity& capacity, double max_combinations) {
  ORRERY_RETURN_IF_ERROR(Validate(tasks, capacity));
  if (values.size() != tasks.size())
    return InvalidArgumentError("values: one row per task expected");
  double combinations = 1;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (values[i].size() != tasks[i].options.size())
      return InvalidArgumentError("values[" + std::to_string(i) + "]: one entry per option");
    combinations *= static_cast<double>(tasks[i].options.size() + 1);
  }
  if (combinations > max_combinations)
    return ResourceExhaustedError("tasks: " + std::to_string(combinations) +
                                  " combinations of options exceed the exhaustive search's " +
                                  std::to_string(max_combinations));
  const size_t n = tasks.size();
  Allocation best;
  best.choice.assign(n, -1);
  std::vector<int> choice(n, -1);
  Capacity left = capacity;
  // Depth first: task i queued, then each of its options that fits what is left.
  auto go = [&](auto&& self, size_t i, double v) -> void {
    if (i == n) {
      if (v > best.value + kEps) {
        best.value = v;
        best.choice = choice;
      }
      return;
    }
    choice[i] = -1;
    self(self, i + 1, v);
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const Option& o = tasks[i].options[j];
      if (!Fits(o, left) || !(values[i][j] > 0)) continue;
      left[static_cast<size_t>(o.type)] -= o.gpus;
      choice[i] = static_cast<int>(j);
      self(self, i + 1, v + values[i][j]);
      left[static_cast<size_t>(o.type)] += o.gpus;
    }
    choice[i] = -1;
  };
  go(go, 0, 0.0);
  for (size_t i = 0; i < n; ++i)
    if (best.choice[i] >= 0)
      best.gpus_used += tasks[i].options[static_cast<size_t>(best.choice[i])].gpus;
  return best;
}

}  // namespace orrery::planner::elastic
