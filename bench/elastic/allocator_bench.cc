// How fast is the exact elastic allocator at the target size (100 tasks on
// 512 GPUs), and what does exactness buy? Beside it, in the same run, a greedy
// allocator that hands out GPUs one option-upgrade at a time by marginal value per
// GPU (the usual heuristic) on the same tasks.
//
//   build/release/bench/bench_elastic_allocator [--tasks N] [--gpus G] [--reps R]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "operator/planner/elastic/allocator.h"

namespace {

using orrery::planner::elastic::Allocate;
using orrery::planner::elastic::BuildOptions;
using orrery::planner::elastic::ElasticTask;
using orrery::planner::elastic::OptionValue;

struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Unit() { return static_cast<double>(Next() >> 11) / 9007199254740992.0; }
};

std::vector<ElasticTask> MakeTasks(int n, uint64_t seed) {
  Rng rng{seed};
  std::vector<ElasticTask> tasks;
  for (int i = 0; i < n; ++i) {
    ElasticTask t;
    t.name = "t" + std::to_string(i);
    t.total_work = 1e5 * (1 + 20 * rng.Unit());
    t.remaining_work = t.total_work * (0.05 + 0.95 * rng.Unit());
    const double base = 20 + 300 * rng.Unit();
    // Amdahl-style scaling whose serial fraction shrinks as the per-GPU batch grows.
    const double serial = 0.02 + 0.3 * rng.Unit();
    t.options = BuildOptions({1, 2, 4, 8, 16, 32, 64}, 64, 4096, 256, 64, [&](int g, int b) {
      const double per_gpu = static_cast<double>(b) / g;
      const double s = serial * 64.0 / per_gpu;
      return base * (per_gpu / 64.0) * g / (1 + s * (g - 1));
    });
    tasks.push_back(std::move(t));
  }
  return tasks;
}

// Greedy: start everyone queued; repeatedly apply the single option change with the
// best value gain per extra GPU that fits.
double Greedy(const std::vector<ElasticTask>& tasks, int capacity) {
  std::vector<int> choice(tasks.size(), -1);
  int used = 0;
  double total = 0;
  for (;;) {
    double best_rate = 0;
    size_t best_task = 0;
    int best_opt = -1;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const int cur = choice[i];
      const int cur_g = cur < 0 ? 0 : tasks[i].options[static_cast<size_t>(cur)].gpus;
      const double cur_v =
          cur < 0 ? 0
                  : OptionValue(tasks[i], tasks[i].options[static_cast<size_t>(cur)],
                                orrery::planner::elastic::Value::kNormalizedThroughput);
      for (size_t j = 0; j < tasks[i].options.size(); ++j) {
        const auto& o = tasks[i].options[j];
        const int extra = o.gpus - cur_g;
        if (extra <= 0 || used + extra > capacity) continue;
        const double gain =
            OptionValue(tasks[i], o, orrery::planner::elastic::Value::kNormalizedThroughput) -
            cur_v;
        if (gain / extra > best_rate) {
          best_rate = gain / extra;
          best_task = i;
          best_opt = static_cast<int>(j);
        }
      }
    }
    if (best_opt < 0) break;
    const int cur = choice[best_task];
    const auto& o = tasks[best_task].options[static_cast<size_t>(best_opt)];
    used += o.gpus - (cur < 0 ? 0 : tasks[best_task].options[static_cast<size_t>(cur)].gpus);
    total +=
        OptionValue(tasks[best_task], o, orrery::planner::elastic::Value::kNormalizedThroughput) -
        (cur < 0 ? 0
                 : OptionValue(tasks[best_task], tasks[best_task].options[static_cast<size_t>(cur)],
                               orrery::planner::elastic::Value::kNormalizedThroughput));
    choice[best_task] = best_opt;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 100, gpus = 512, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tasks") == 0) n = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--gpus") == 0) gpus = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  const auto tasks = MakeTasks(n, 2026);
  size_t options = 0;
  for (const auto& t : tasks) options += t.options.size();
  using Clock = std::chrono::steady_clock;
  std::vector<double> dp_ms, greedy_ms;
  double dp_value = 0, greedy_value = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    auto a = Allocate(tasks, gpus);
    auto t1 = Clock::now();
    greedy_value = Greedy(tasks, gpus);
    auto t2 = Clock::now();
    if (!a.ok()) {
      std::fprintf(stderr, "allocate failed: %s\n", a.status().ToString().c_str());
      return 1;
    }
    dp_value = a->value;
    dp_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    greedy_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  std::sort(dp_ms.begin(), dp_ms.end());
  std::sort(greedy_ms.begin(), greedy_ms.end());
  std::printf("elastic allocator: %d tasks, %zu options, %d GPUs, %d repetitions\n", n, options,
              gpus, reps);
  std::printf("%-22s %12s %12s %14s\n", "allocator", "median ms", "max ms", "value");
  std::printf("%-22s %12.3f %12.3f %14.6f\n", "exact DP (orrery)", dp_ms[dp_ms.size() / 2],
              dp_ms.back(), dp_value);
  std::printf("%-22s %12.3f %12.3f %14.6f\n", "greedy marginal", greedy_ms[greedy_ms.size() / 2],
              greedy_ms.back(), greedy_value);
  std::printf("DP value over greedy: %.4f\n", greedy_value > 0 ? dp_value / greedy_value : 0.0);
  return 0;
}
