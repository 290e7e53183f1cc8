// The elastic allocator (Saxena et al., "Effective Elastic Scaling of Deep
// Learning Workloads", MASCOTS 2020): GPUs and global batch size chosen together
// for every active task, by how well each task turns GPUs into progress. A task's
// batch size may move within its bounds as its GPU count moves, so a task that
// scales poorly at a fixed batch can still use more GPUs well at a larger batch.
//
// The choice is a multiple-choice knapsack over the cluster's GPUs, solved exactly
// by dynamic programming in O(tasks x GPUs x GPU counts): for each task pick one
// option (GPUs, batch) or none (queued), total GPUs within capacity, maximising
// the summed value of the chosen options. Pure: no I/O, no clock.
//
// GPU types: a cluster may be several pools, one GPU type each (an A100 pool, a
// V100 pool...). An option then names its pool (Option::type) and the capacity
// is one GPU count per pool; a task's GPUs are all of one type (one option never
// spans pools), and the DP runs over every combination of GPUs used per pool, so
// type, count and batch are chosen together, exactly: O(tasks x options x
// states), states the product over pools of (pool GPUs + 1). One pool is the
// one-dimensional DP above.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::planner::elastic {

// One feasible way to run a task: `gpus` GPUs at global batch `batch_size`
// (per-GPU batch within GPU memory, global batch within the spec's bounds).
struct Option {
  int gpus = 0;
  int batch_size = 0;
  double throughput = 0;  // samples per second
  int type = 0;           // the pool (GPU type) its GPUs come from: index into the capacity
};

// GPUs free to the allocator, one count per pool (GPU type); one entry for a
// cluster of one type.
using Capacity = std::vector<int>;

// The DP's states for `capacity`: the product of (pool GPUs + 1). The allocator
// refuses a capacity whose tables would exceed kMaxStates x (tasks + 1) doubles.
inline constexpr size_t kMaxStates = size_t{1} << 22;
size_t States(const Capacity& capacity);

// Whether `option` fits `capacity`: its pool exists and holds its GPUs.
bool Fits(const Option& option, const Capacity& capacity);

struct ElasticTask {
  std::string name;
  double total_work = 0;      // samples in the whole task
  double remaining_work = 0;  // samples still to do
  double weight = 1;
  std::vector<Option> options;
  // The option it runs under now (index into options), or -1 when queued.
  int current = -1;
  // The task's own global batch, when it has one (0: none, every batch
  // movable). The autoscaler (operator/engine/autoscaler.h) chooses GPU counts
  // as it would with the batch pinned here, then the batch at each count; the
  // allocator itself ignores it.
  int base_batch = 0;
};

// The input checks of Allocate and Knapsack::Solve alone (no tables built).
Status CheckInput(const std::vector<ElasticTask>& tasks, const Capacity& capacity);

// What a task's progress is worth, the quantity the allocator maximises.
enum class Value {
  // weight x throughput / total work: the fraction of the task done per second.
  // Comparable across tasks of different sizes; the paper's aggregate throughput
  // with each job normalised by its size.
  kNormalizedThroughput,
  // weight x throughput / remaining work: favours tasks close to done
  // (shortest-remaining-time flavour), which lowers mean completion time.
  kRemainingFraction,
};

struct Allocation {
  std::vector<int> choice;  // per task: index into options, or -1 (queued)
  int gpus_used = 0;
  double value = 0;
};

// Chooses options maximising the summed value with at most `capacity` GPUs.
// Ties are broken deterministically: a task stays queued when that is as good,
// otherwise it takes the fewest GPUs, and at one GPU count the lowest option index. InvalidArgument
// for a negative capacity or an option with non-positive GPUs or negative throughput (naming
// tasks[i].options[j]).
StatusOr<Allocation> Allocate(const std::vector<ElasticTask>& tasks, int capacity,
                              Value value = Value::kNormalizedThroughput);
// The same over pools of GPU types: each option's GPUs from its own pool, at
// most capacity[t] GPUs used of pool t. Ties: queued first, then the fewest GPUs,
// then the lowest pool, then the lowest option index. InvalidArgument also for an
// option whose type names no pool (tasks[i].options[j].type) and a capacity
// whose DP would be too large (capacity: ... states).
StatusOr<Allocation> Allocate(const std::vector<ElasticTask>& tasks, const Capacity& capacity,
                              Value value = Value::kNormalizedThroughput);

// The exact per-event optimum by exhaustive search over every combination of
// options (queued included), independent of the DP: for tests and benchmarks
// on small instances. values[i][j] as in Knapsack::Solve. Ties: the first
// combination found best in the order queued, option 0, option 1, ... of task
// 0, then task 1, ... ResourceExhausted when the combinations exceed
// `max_combinations`.
StatusOr<Allocation> Exhaustive(const std::vector<ElasticTask>& tasks,
                                const std::vector<std::vector<double>>& values,
                                const Capacity& capacity, double max_combinations = 2e7);

// The value one option adds under `value`.
double OptionValue(const ElasticTask& task, const Option& option, Value value);

// The fastest option of `task` within `capacity` GPUs (0 when none fits).
double BestThroughput(const ElasticTask& task, int capacity);

// The exact multiple-choice knapsack behind Allocate, over explicit values:
// values[i][j] is what option j of tasks[i] is worth (values <= 0 are never
// chosen; queued is worth 0). Beside the optimum it answers, exactly and in
// O(capacity) each, what the best total is when one task is held to a given
// option and every other task is free: what a change of that task is worth to
// the whole cluster, without re-running the DP (tables of prefix and suffix
// optima, 2 x (tasks + 1) x (capacity + 1) doubles).
class Knapsack {
 public:
  // Same validation and tie-breaking as Allocate; values[i] must have one entry
  // per option of tasks[i]. Without `probes` the suffix table is not built (half
  // the work) and BestWith must not be called.
  static StatusOr<Knapsack> Solve(const std::vector<ElasticTask>& tasks,
                                  const std::vector<std::vector<double>>& values, int capacity,
                                  bool probes = true);
  // Over pools of GPU types (Allocate's typed overload).
  static StatusOr<Knapsack> Solve(const std::vector<ElasticTask>& tasks,
                                  const std::vector<std::vector<double>>& values,
                                  const Capacity& capacity, bool probes = true);

  const Allocation& allocation() const { return allocation_; }
  // The best total with task i held to option j (-1: queued), the others
  // chosen freely; -infinity when option j does not fit the capacity.
  double BestWith(size_t i, int j) const;
  // The plan behind BestWith(i, j): per task an option index or -1, task i at j,
  // within the capacity; empty when option j does not fit. O(tasks x options +
  // capacity). What a change is worth in another currency than the values the
  // DP weighed (the autoscaler's progress without its bonuses) is read off it.
  std::vector<int> PlanWith(size_t i, int j) const;

 private:
  // GPUs of pool t in flat state c (mixed radix over pools).
  size_t Digit(size_t c, size_t t) const {
    return (c / stride_[t]) % (static_cast<size_t>(capacity_[t]) + 1);
  }
  // Which candidate of task k turns row `from` (state c) into the entry
  // `target`: -1 when queued is as good.
  int Pick(size_t k, const double* from, double target, size_t c) const;
  // The allocation read back from the prefix table; candidates[i] maps task i's
  // DP candidates to its option indices.
  void ReadBack(const std::vector<std::vector<size_t>>& candidates);
  // Calls f(c, b - c) for every state c componentwise within state b.
  template <typename F>
  void ForBox(size_t b, F f) const;

  std::vector<std::vector<int>> gpus_;
  std::vector<std::vector<int>> types_;
  std::vector<std::vector<double>> values_;
  Capacity capacity_;
  std::vector<size_t> stride_;  // per pool: the flat index step of one GPU
  size_t width_ = 0;            // states
  std::vector<double> prefix_;  // row i: best of tasks [0, i) within c GPUs
  std::vector<double> suffix_;  // row i: best of tasks [i, n) within c GPUs
  Allocation allocation_;
};

// Builds a task's option table from per-GPU-count profiles. For each GPU count g
// in `gpu_counts` and each global batch B in [min_batch, max_batch] that is a
// multiple of g with B/g <= max_batch_per_gpu, the throughput comes from
// `throughput(g, B)`; entries with non-positive throughput are dropped.
template <typename ThroughputFn>
std::vector<Option> BuildOptions(const std::vector<int>& gpu_counts, int min_batch, int max_batch,
                                 int max_batch_per_gpu, int batch_step, ThroughputFn throughput) {
  std::vector<Option> options;
  for (int g : gpu_counts) {
    if (g <= 0) continue;
    for (int b = min_batch; b <= max_batch; b += batch_step) {
      if (b % g != 0 || b / g > max_batch_per_gpu) continue;
      const double t = throughput(g, b);
      if (t > 0) options.push_back({g, b, t});
    }
  }
  return options;
}

}  // namespace orrery::planner::elastic
