// Re-planning within a budget: a stream of tasks with seeded Poisson arrivals
// over the three-type cluster (bench/planner/typed_workloads.h) simulated
// under the orrery policy twice in the same run: with coalesced triggers and
// warm starts (EngineOptions::coalesce_window_s, warm_start) and with the old
// behaviour (every trigger solved at once, from scratch). Prints per run the
// number of re-plans, the total and largest solver seconds, the mean and
// worst gap of the fresh plans, the re-plans per trigger, makespan and mean
// completion. Solver seconds are wall seconds: say whether the machine was
// busy (the thread CPU seconds of the whole run are printed beside them).
// Default: 96 GPUs, 32 tasks, 2 s solver limit (CI-sized, both runs, ~15 s);
// ORRERY_BENCH_FULL=1: 2000 GPUs (250 nodes x 8), 1000 tasks, 5 s limit, the
// old behaviour only with --baseline (it solves on every event: 240 GPUs and
// 120 tasks already take it 200 s of solver time).
// Usage: replan_bench [--gpus N] [--tasks N] [--mean-gap S] [--window S]
//                     [--time-limit S] [--seed N] [--baseline] [--no-baseline]
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <string>

#include "bench/planner/typed_workloads.h"
#include "common/clock.h"
#include "operator/sim/simulator.h"

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int Run(const orrery::planner::Workload& w, const char* label, double window, bool warm,
        double limit, unsigned seed) {
  orrery::sim::SimOptions o;
  o.engine.policy = "orrery";
  o.engine.seed = static_cast<int>(seed);
  o.engine.solver_time_limit_s = limit;
  o.engine.coalesce_window_s = window;
  o.engine.warm_start = warm;
  const double cpu = ThreadCpuSeconds();
  auto r = orrery::sim::Simulate(w, o, orrery::SystemClock::Get());
  const double cpu_s = ThreadCpuSeconds() - cpu;
  if (!r.ok()) {
    std::cerr << label << ": " << r.status() << "\n";
    return 1;
  }
  double most = 0, gap = 0, worst = 0;
  std::map<std::string, int> by;
  for (const auto& p : r->replan_log) {
    most = std::max(most, p.solver_seconds);
    gap += p.solve_gap;
    worst = std::max(worst, p.solve_gap);
    ++by[p.trigger];
  }
  const double n = std::max<double>(1, static_cast<double>(r->replan_log.size()));
  std::printf("%-22s %7d %9.2f %8.2f %8.2f%% %7.2f%% %9.2f %9.2f %9.1f %8d | ", label, r->replans,
              r->solver_seconds, most, 100 * gap / n, 100 * worst, r->makespan / 3600,
              r->mean_completion / 3600, cpu_s, r->coalesced);
  for (const auto& [trigger, count] : by) std::printf("%s=%d ", trigger.c_str(), count);
  std::printf("\n");
  std::fflush(stdout);
  return r->violations.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* full_env = std::getenv("ORRERY_BENCH_FULL");
  const bool full = full_env != nullptr && std::string(full_env) == "1";
  int gpus = full ? 2000 : 96, tasks = full ? 1000 : 32;
  double window = 600, limit = full ? 5 : 2, mean_gap = -1;
  unsigned seed = 1;
  int baseline = full ? 0 : 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string("x"); };
    try {
      if (a == "--gpus")
        gpus = std::stoi(next());
      else if (a == "--tasks")
        tasks = std::stoi(next());
      else if (a == "--mean-gap")
        mean_gap = std::stod(next());
      else if (a == "--window")
        window = std::stod(next());
      else if (a == "--time-limit")
        limit = std::stod(next());
      else if (a == "--seed")
        seed = static_cast<unsigned>(std::stoul(next()));
      else if (a == "--baseline")
        baseline = 1;
      else if (a == "--no-baseline")
        baseline = 0;
      else
        throw std::invalid_argument(a);
    } catch (const std::exception&) {
      std::cerr << "usage: replan_bench [--gpus N] [--tasks N] [--mean-gap S] [--window S] "
                   "[--time-limit S] [--seed N] [--baseline|--no-baseline] "
                   "(ORRERY_BENCH_FULL=1: 2000 GPUs, 1000 tasks)\n";
      return 2;
    }
  }
  // About 90% load: the mix averages ~3.4 GPU-hours of an a100 per task and
  // the three types give ~1.15 a100s per GPU, so ~0.3 tasks per GPU-hour.
  if (mean_gap <= 0) mean_gap = 3600.0 / (0.3 * gpus);
  orrery::planner::Workload w = orrery::bench::PoissonStream(gpus, tasks, mean_gap, seed);
  std::printf(
      "Poisson stream: %d GPUs (3 types), %d tasks, mean gap %.1f s, solver limit %.0f s, "
      "coalescing window %.0f s\n",
      gpus, tasks, mean_gap, limit, window);
  std::printf("%-22s %7s %9s %8s %9s %8s %9s %9s %9s %8s | %s\n", "run", "replans", "solver_s",
              "max_s", "gap_mean", "gap_max", "makespan", "mean_jct", "cpu_s", "coalesc",
              "re-plans by trigger");
  int rc = Run(w, "coalesced+warm", window, true, limit, seed);
  if (baseline) rc |= Run(w, "old (every trigger)", 0, false, limit, seed);
  return rc;
}
