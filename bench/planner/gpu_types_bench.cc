// Mixed GPU types at scale: seeded synthetic clusters of 64, 512 and 2000 GPUs
// with one type (a100-80gb) or three (h100, a100-40gb, l4), each with a task
// mix of small models (as fast on any type), mid-size ones and memory-bound
// large ones (fit only the 80 GiB types unless sharded wide). Every plan of
// orrery, saturn (Saturn's MILP, same time limit), greedy and current practice
// goes through the independent checker; the table prints makespan over the
// heterogeneity-aware lower bound and solve seconds, all measured in the same
// run. The default run is 64 and 512 GPUs; ORRERY_BENCH_FULL=1 adds 2000 GPUs
// (250 nodes x 8, 1000 tasks).
// Usage: gpu_types_bench [--time-limit S] [--seed N] [--gpus 64|512|2000]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench/planner/typed_workloads.h"
#include "common/clock.h"
#include "operator/planner/checker.h"
#include "operator/planner/lower_bound.h"
#include "operator/planner/planner.h"

using namespace orrery::planner;
using orrery::bench::Make;

namespace {

// CPU seconds of this thread: the planners are single-threaded, so on a
// machine shared with other work this is the plan time an idle machine shows.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

const char* kPlanners[4] = {"orrery", "saturn", "greedy", "current-practice"};

}  // namespace

int main(int argc, char** argv) {
  double limit = 10;
  unsigned seed = 1;
  int only_gpus = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--time-limit" && i + 1 < argc) {
      limit = std::stod(argv[++i]);
    } else if (a == "--gpus" && i + 1 < argc) {
      only_gpus = std::stoi(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = static_cast<unsigned>(std::stoul(argv[++i]));
    } else {
      std::cerr << "usage: gpu_types_bench [--time-limit S] [--seed N] [--gpus 64|512|2000] "
                   "(ORRERY_BENCH_FULL=1: 2000 GPUs too)\n";
      return 2;
    }
  }
  const char* full_env = std::getenv("ORRERY_BENCH_FULL");
  bool full = full_env != nullptr && std::string(full_env) == "1";
  struct Size {
    int gpus, tasks;
  };
  std::vector<Size> sizes = {{64, 24}, {512, 250}};
  if (full || only_gpus == 2000) sizes.push_back({2000, 1000});
  if (only_gpus > 0) std::erase_if(sizes, [&](const Size& size) { return size.gpus != only_gpus; });
  orrery::SystemClock* clock = orrery::SystemClock::Get();
  std::printf(
      "GPU types benchmark (time limit %.0f s; makespan / heterogeneity-aware LB; solve s)\n",
      limit);
  std::printf("%6s %5s %5s %9s | %7s %7s %7s %7s | %7s %7s %7s %7s | %7s %7s | %s\n", "gpus",
              "types", "tasks", "LB[h]", "orrery", "saturn", "greedy", "curprac", "t_orr", "t_sat",
              "t_grd", "t_cur", "cpu_orr", "cpu_sat", "orrery note");
  int invalid = 0, worse = 0;
  for (const Size& size : sizes) {
    for (bool three : {false, true}) {
      Problem p = Make(size.gpus, three, size.tasks, seed);
      double lb = LowerBound(p);
      Plan plans[4];
      double cpu[4] = {0, 0, 0, 0};
      for (int k = 0; k < 4; ++k) {
        PlanOptions options;
        options.time_limit_s = limit;
        options.clock = clock;
        options.seed = static_cast<int>(seed);
        const double cpu_start = ThreadCpuSeconds();
        auto plan = (*MakePlanner(kPlanners[k]))->Solve(p, options);
        cpu[k] = ThreadCpuSeconds() - cpu_start;
        if (!plan.ok()) {
          std::cerr << kPlanners[k] << ": " << plan.status() << "\n";
          return 1;
        }
        plans[k] = *plan;
        orrery::Status check = CheckPlan(p, *plan);
        if (!check.ok()) {
          ++invalid;
          std::cerr << size.gpus << " " << kPlanners[k] << ": INVALID PLAN: " << check << "\n";
        }
        lb = std::max(lb, plan->lower_bound);
      }
      for (int k = 1; k < 4; ++k)
        if (plans[0].makespan > plans[k].makespan * (1 + 1e-9)) ++worse;
      std::printf(
          "%6d %5d %5d %9.2f | %7.3f %7.3f %7.3f %7.3f | %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f | "
          "%s\n",
          size.gpus, three ? 3 : 1, size.tasks, lb / 3600, plans[0].makespan / lb,
          plans[1].makespan / lb, plans[2].makespan / lb, plans[3].makespan / lb,
          plans[0].solve_seconds, plans[1].solve_seconds, plans[2].solve_seconds,
          plans[3].solve_seconds, cpu[0], cpu[1], plans[0].note.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("invalid plans: %d; cases where orrery is worse than a baseline: %d\n", invalid,
              worse);
  return invalid == 0 ? 0 : 1;
}
