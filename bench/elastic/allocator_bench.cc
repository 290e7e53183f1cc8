// How fast is the exact elastic allocator at the target size (100 tasks on
// 512 GPUs), and what does exactness buy? Beside it, in the same run, a greedy
// allocator that hands out GPUs one option-upgrade at a time by marginal value per
// GPU (the usual heuristic) on the same tasks.
//
// Then a whole autoscaler decision (engine::Autoscaler::Decide: one charged DP
// and one uncharged, per-task gains read off the DP tables) at 100 and ~1000
// tasks on 512 GPUs, half of them running, beside the previous method: the
// allocator's optimum, then each changed running task probed by re-running the
// allocator with it pinned, the worst non-paying change pinned, and again until
// every change pays (O(tasks^2) allocator runs). And the same decision with
// every task given a base batch (one of its options' batches), the method the
// simulator's elastic policy runs: the charged and uncharged DPs on the base
// batch's options, then batch choice and growth per task. Last, the
// operator's cluster shares at the size of its scale test.
//
//   build/<dir>/bench/bench_elastic_allocator [--tasks N] [--gpus G] [--reps R]
//       [--decision-tasks a,b,...] [--no-previous-above N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/random.h"
#include "operator/engine/autoscaler.h"
#include "operator/engine/cluster_share.h"
#include "operator/planner/elastic/allocator.h"

namespace {

using orrery::planner::elastic::Allocate;
using orrery::planner::elastic::BuildOptions;
using orrery::planner::elastic::ElasticTask;
using orrery::planner::elastic::OptionValue;

using Rng = orrery::SplitMix64;

std::vector<ElasticTask> MakeTasks(int n, uint64_t seed) {
  Rng rng{seed};
  std::vector<ElasticTask> tasks;
  for (int i = 0; i < n; ++i) {
    ElasticTask t;
    t.name = "t" + std::to_string(i);
    t.total_work = 1e5 * (1 + 20 * rng.Uniform01());
    t.remaining_work = t.total_work * (0.05 + 0.95 * rng.Uniform01());
    const double base = 20 + 300 * rng.Uniform01();
    // Amdahl-style scaling whose serial fraction shrinks as the per-GPU batch grows.
    const double serial = 0.02 + 0.3 * rng.Uniform01();
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

// The previous autoscaler decision, kept here as the baseline: the allocator's
// best allocation, then running tasks whose change does not pay for its rescale
// pinned to what they run, one at a time (the worst first), re-allocating the
// rest after each pin. Returns the allocator runs it made (-1 on error).
int PreviousDecide(const std::vector<ElasticTask>& tasks, int capacity,
                   const orrery::engine::AutoscalerOptions& o) {
  namespace el = orrery::planner::elastic;
  const size_t n = tasks.size();
  int runs = 0;
  struct Candidate {
    std::vector<int> choice;
    double value = 0, cost = 0;
    bool ok = false;
  };
  auto value_of = [&](size_t i, int j) {
    return OptionValue(tasks[i], tasks[i].options[static_cast<size_t>(j)], o.value);
  };
  auto changes = [&](size_t i, int c) { return tasks[i].current >= 0 && c != tasks[i].current; };
  auto solve = [&](const std::vector<bool>& pinned) {
    Candidate c;
    int free = capacity;
    std::vector<ElasticTask> rest;
    std::vector<size_t> index;
    for (size_t i = 0; i < n; ++i) {
      if (pinned[i]) {
        free -= tasks[i].options[static_cast<size_t>(tasks[i].current)].gpus;
      } else {
        rest.push_back(tasks[i]);
        index.push_back(i);
      }
    }
    if (free < 0) return c;
    ++runs;
    auto a = el::Allocate(rest, free, o.value);
    if (!a.ok()) return c;
    c.ok = true;
    c.choice.assign(n, -1);
    for (size_t i = 0; i < n; ++i)
      if (pinned[i]) c.choice[i] = tasks[i].current;
    for (size_t k = 0; k < index.size(); ++k) c.choice[index[k]] = a->choice[k];
    for (size_t i = 0; i < n; ++i) {
      if (c.choice[i] >= 0) c.value += value_of(i, c.choice[i]);
      if (changes(i, c.choice[i]))
        c.cost += o.rescale_cost_s * value_of(i, c.choice[i] >= 0 ? c.choice[i] : tasks[i].current);
    }
    return c;
  };
  std::vector<bool> pinned(n, false);
  Candidate plan = solve(pinned);
  if (!plan.ok) return -1;
  for (;;) {
    size_t worst = n;
    double worst_margin = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i) {
      if (pinned[i] || !changes(i, plan.choice[i])) continue;
      std::vector<bool> with = pinned;
      with[i] = true;
      Candidate alt = solve(with);
      if (!alt.ok) continue;
      const auto& now = tasks[i].options[static_cast<size_t>(tasks[i].current)];
      const double finish =
          now.throughput > 0 ? tasks[i].remaining_work / now.throughput : o.horizon_s;
      const double margin = (plan.value - alt.value) * std::min(o.horizon_s, finish) -
                            (1 + o.hysteresis) * (plan.cost - alt.cost);
      if (margin < worst_margin) {
        worst_margin = margin;
        worst = i;
      }
    }
    if (worst == n || worst_margin > 0) break;
    pinned[worst] = true;
    plan = solve(pinned);
    if (!plan.ok) return -1;
  }
  return runs;
}

// A decision's input: tasks placed by an earlier allocation (half of them
// running), then progress made, so that the allocator now wants changes.
std::vector<ElasticTask> DecisionTasks(int n, int gpus, uint64_t seed) {
  auto tasks = MakeTasks(n, seed);
  auto before = Allocate(tasks, gpus, orrery::planner::elastic::Value::kRemainingFraction);
  Rng rng{seed + 1};
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (before.ok()) tasks[i].current = before->choice[i];
    tasks[i].remaining_work *= 0.2 + 0.8 * rng.Uniform01();
  }
  return tasks;
}

// The operator's cluster shares (engine::ClusterShares) at the size of its
// scale test: 50 jobs of 20 tasks on 1,600 GPUs, quota 28 each, half the tasks
// running. The last job's arrival (a decision over all 1,000 tasks) beside the
// same tasks through Autoscaler::Decide directly, and an update without a
// trigger, which is what most reconciles pay.
int ClusterShareSection() {
  using Clock = std::chrono::steady_clock;
  constexpr int kJobs = 50, kPerJob = 20, kGpus = 1600, kQuota = 28;
  auto all = DecisionTasks(kJobs * kPerJob, kGpus, 7);
  std::vector<orrery::engine::JobDemand> demands(kJobs);
  std::vector<ElasticTask> direct;
  for (int j = 0; j < kJobs; ++j) {
    demands[j].job = "ns/job-" + std::to_string(j);
    demands[j].quota = kQuota;
    for (int k = 0; k < kPerJob; ++k) {
      ElasticTask t = all[static_cast<size_t>(j) * kPerJob + static_cast<size_t>(k)];
      t.base_batch = t.options[t.options.size() / 2].batch_size;
      ElasticTask d = t;
      d.name = demands[j].job + "/" + t.name;
      d.options.clear();
      d.current = -1;
      for (size_t o = 0; o < t.options.size(); ++o) {
        if (t.options[o].gpus > kQuota) continue;
        if (static_cast<int>(o) == t.current) d.current = static_cast<int>(d.options.size());
        d.options.push_back(t.options[o]);
      }
      if (d.options.empty()) continue;
      if (t.current >= 0 && d.current < 0) t.current = -1;  // ran wider than the quota allows
      if (t.current < 0) d.current = -1;
      demands[j].tasks.push_back(t);
      direct.push_back(d);
    }
  }
  orrery::engine::ClusterShares shares({});
  for (int j = 0; j + 1 < kJobs; ++j) {
    if (!shares.Update(demands[j], kGpus, 0).ok()) return 1;
  }
  auto t0 = Clock::now();
  auto arrival = shares.Update(demands[kJobs - 1], kGpus, 0);
  auto t1 = Clock::now();
  auto quiet = shares.Update(demands[0], kGpus, 1);
  auto t2 = Clock::now();
  orrery::engine::Autoscaler as({});
  auto t3 = Clock::now();
  auto plan = as.Decide(direct, kGpus, orrery::engine::ScaleTrigger::kArrival, 0);
  auto t4 = Clock::now();
  if (!arrival.ok() || !quiet.ok() || !plan.ok() || !arrival->decided || quiet->decided) {
    std::fprintf(stderr, "cluster share update failed\n");
    return 1;
  }
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  int capped = 0;
  for (const auto& [job, share] : arrival->shares) capped += share.cap < kQuota ? 1 : 0;
  std::printf("\ncluster shares, %d jobs x %d tasks on %d GPUs (quota %d), %zu tasks:\n", kJobs,
              kPerJob, kGpus, kQuota, direct.size());
  std::printf("  an arrival (one decision over every job):  %8.1f ms\n", ms(t0, t1));
  std::printf("  baseline, Autoscaler::Decide on the tasks: %8.1f ms\n", ms(t3, t4));
  std::printf("  an update without a trigger:               %8.3f ms\n", ms(t1, t2));
  std::printf("  jobs capped under their quota: %d of %d\n", capped, kJobs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 100, gpus = 512, reps = 20, previous_above = 100000;
  std::vector<int> decision_tasks = {100, 1000};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tasks") == 0) n = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--gpus") == 0) gpus = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--no-previous-above") == 0) previous_above = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--decision-tasks") == 0) {
      decision_tasks.clear();
      std::stringstream ss(argv[i + 1]);
      std::string item;
      while (std::getline(ss, item, ',')) decision_tasks.push_back(std::atoi(item.c_str()));
    }
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

  std::printf("\nautoscaler decision on %d GPUs (rescale cost 60 s, horizon 1800 s):\n", gpus);
  std::printf("%8s %8s | %-28s | %-16s | %-28s | %8s\n", "tasks", "running",
              "one charged DP (orrery)", "with base batch", "previous: pin loop", "speed-up");
  for (int tn : decision_tasks) {
    const auto dtasks = DecisionTasks(tn, gpus, 99);
    int running = 0;
    for (const auto& t : dtasks) running += t.current >= 0 ? 1 : 0;
    orrery::engine::AutoscalerOptions o;
    const int dreps = tn <= 200 ? 5 : 2;
    double new_ms = 1e300;
    int new_runs = 0;
    for (int r = 0; r < dreps; ++r) {
      orrery::engine::Autoscaler as(o);
      auto t0 = Clock::now();
      auto plan = as.Decide(dtasks, gpus, orrery::engine::ScaleTrigger::kInterval, 0);
      auto t1 = Clock::now();
      if (!plan.ok()) {
        std::fprintf(stderr, "decide failed: %s\n", plan.status().ToString().c_str());
        return 1;
      }
      new_runs = plan->allocator_runs;
      new_ms = std::min(new_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    auto based = dtasks;
    for (auto& t : based) t.base_batch = t.options[t.options.size() / 2].batch_size;
    double based_ms = 1e300;
    for (int r = 0; r < dreps; ++r) {
      orrery::engine::Autoscaler as(o);
      auto t0 = Clock::now();
      auto plan = as.Decide(based, gpus, orrery::engine::ScaleTrigger::kInterval, 0);
      auto t1 = Clock::now();
      if (!plan.ok()) {
        std::fprintf(stderr, "decide failed: %s\n", plan.status().ToString().c_str());
        return 1;
      }
      based_ms = std::min(based_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    char previous[64] = "not run (--no-previous-above)";
    char speedup[32] = "-";
    if (tn <= previous_above) {
      auto t0 = Clock::now();
      const int runs = PreviousDecide(dtasks, gpus, o);
      auto t1 = Clock::now();
      const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
      std::snprintf(previous, sizeof(previous), "%12.1f ms %6d DPs", ms, runs);
      std::snprintf(speedup, sizeof(speedup), "%7.0fx", ms / new_ms);
    }
    std::printf("%8d %8d | %12.1f ms %6d DPs | %13.1f ms | %-28s | %8s\n", tn, running, new_ms,
                new_runs, based_ms, previous, speedup);
  }
  return ClusterShareSection();
}
