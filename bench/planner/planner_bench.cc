// The planner benchmark: every workload in bench/workloads/ planned by orrery,
// saturn (same time limit), greedy and current-practice; each makespan over the
// best lower bound any planner proved, solve times, and the makespan reduction
// against current practice beside Saturn's published 39-49%. Every plan goes
// through the independent checker first. Prints one table, then the targets.
// Usage: orrery_bench [--quick] [--time-limit S] [--only SUBSTRING] [--dir DIR]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "operator/planner/checker.h"
#include "operator/planner/planner.h"
#include "operator/planner/workload_io.h"
#include "operator/sim/simulator.h"

namespace fs = std::filesystem;
using namespace orrery::planner;

namespace {

struct Row {
  std::string name;
  size_t tasks = 0;
  int gpus = 0;
  double lb = 0;
  Plan plans[4];
  bool valid[4] = {true, true, true, true};
};

const char* kNames[4] = {"orrery", "saturn", "greedy", "current-practice"};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  double limit = 10;
  std::string only, dir = std::string(ORRERY_SOURCE_DIR) + "/bench/workloads";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--time-limit" && i + 1 < argc)
      limit = std::stod(argv[++i]);
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else {
      std::cerr
          << "usage: orrery_bench [--quick] [--time-limit S] [--only SUBSTRING] [--dir DIR]\n";
      return 2;
    }
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  orrery::SystemClock* clock = orrery::SystemClock::Get();
  std::vector<Row> rows;
  for (const fs::path& f : files) {
    if (!only.empty() && f.filename().string().find(only) == std::string::npos) continue;
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    auto w = ParseWorkload(text.str());
    if (!w.ok()) {
      std::cerr << f << ": " << w.status() << "\n";
      return 1;
    }
    if (quick && w->problem.tasks.size() > 12) continue;
    Row row;
    row.name = f.stem().string();
    row.tasks = w->problem.tasks.size();
    row.gpus = w->problem.TotalGpus();
    PlanOptions options;
    options.time_limit_s = limit;
    options.clock = clock;
    for (int p = 0; p < 4; ++p) {
      auto planner = MakePlanner(kNames[p]);
      auto plan = (*planner)->Solve(w->problem, options);
      if (!plan.ok()) {
        std::cerr << row.name << " " << kNames[p] << ": " << plan.status() << "\n";
        return 1;
      }
      row.plans[p] = *plan;
      orrery::Status check = CheckPlan(w->problem, *plan);
      if (!check.ok()) {
        row.valid[p] = false;
        std::cerr << row.name << " " << kNames[p] << ": INVALID PLAN: " << check << "\n";
      }
      row.lb = std::max(row.lb, plan->lower_bound);
      std::cerr << "  " << row.name << " " << kNames[p] << " " << plan->makespan << " s in "
                << plan->solve_seconds << " s"
                << (plan->note.empty() ? "" : " (" + plan->note + ")") << "\n";
    }
    rows.push_back(row);
  }

  std::printf(
      "\nPlanner benchmark (time limit %.0f s for orrery and saturn; makespan / lower bound)\n",
      limit);
  std::printf("%-22s %5s %5s %10s %7s %7s %7s %7s %8s %8s %9s %s\n", "workload", "tasks", "gpus",
              "LB[h]", "orrery", "saturn", "greedy", "curprac", "t_orr[s]", "t_sat[s]", "vs curpr",
              "saturn note");
  double sum_ratio = 0, max_ratio = 0, sum_red = 0;
  int worse_than_baseline = 0, big_not_10 = 0, invalid = 0;
  for (const Row& r : rows) {
    double ratio[4];
    for (int p = 0; p < 4; ++p) ratio[p] = r.lb > 0 ? r.plans[p].makespan / r.lb : 0;
    double red = 1 - r.plans[0].makespan / r.plans[3].makespan;
    std::printf("%-22s %5zu %5d %10.2f %7.3f %7.3f %7.3f %7.3f %8.2f %8.2f %8.1f%% %s%s\n",
                r.name.c_str(), r.tasks, r.gpus, r.lb / 3600, ratio[0], ratio[1], ratio[2],
                ratio[3], r.plans[0].solve_seconds, r.plans[1].solve_seconds, 100 * red,
                r.plans[1].timed_out ? "timed out: " : "", r.plans[1].note.c_str());
    sum_ratio += ratio[0];
    max_ratio = std::max(max_ratio, ratio[0]);
    sum_red += red;
    if (r.plans[0].makespan > r.plans[1].makespan * (1 + 1e-9) ||
        r.plans[0].makespan > r.plans[2].makespan * (1 + 1e-9))
      ++worse_than_baseline;
    if (r.tasks >= 50 && r.plans[0].makespan > 0.9 * r.plans[1].makespan) ++big_not_10;
    for (int p = 0; p < 4; ++p) invalid += r.valid[p] ? 0 : 1;
  }
  if (rows.empty()) return 0;
  double n = static_cast<double>(rows.size());
  std::printf("\norrery / LB: mean %.3f (target <= 1.10), max %.3f (target <= 1.20)\n",
              sum_ratio / n, max_ratio);
  std::printf("workloads where orrery is worse than saturn or greedy: %d (target 0)\n",
              worse_than_baseline);
  std::printf(
      "workloads with >= 50 tasks where orrery is not >= 10%% better than saturn: %d (target 0)\n",
      big_not_10);
  std::printf("makespan reduction vs current practice: mean %.1f%% (Saturn published 39-49%%)\n",
              100 * sum_red / n);
  std::printf("invalid plans: %d\n", invalid);

  // Introspection: the simulator runs the plans against true speeds that differ
  // from the profiles (and node loss/join), with and without re-planning.
  std::printf(
      "\nIntrospection (simulated; true speed off profile per task; solver limit %.1f s per "
      "re-plan)\n",
      quick ? 0.2 : 5.0);
  std::printf("%-22s %12s %12s %8s %8s %9s\n", "workload", "static[h]", "replan[h]", "gain",
              "replans", "switches");
  for (const fs::path& f : files) {
    if (f.filename().string().rfind("introspect", 0) != 0) continue;
    if (!only.empty() && f.filename().string().find(only) == std::string::npos) continue;
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    auto w = ParseWorkload(text.str());
    if (!w.ok()) return 1;
    orrery::sim::SimResult res[2];
    for (int k = 0; k < 2; ++k) {
      orrery::sim::SimOptions so;
      so.engine.introspect = k == 1;
      so.engine.solver_time_limit_s = quick ? 0.2 : 5.0;
      auto r = orrery::sim::Simulate(*w, so, clock);
      if (!r.ok()) {
        std::cerr << f << ": " << r.status() << "\n";
        return 1;
      }
      res[k] = *r;
    }
    std::printf("%-22s %12.2f %12.2f %7.1f%% %8d %9d\n", f.stem().string().c_str(),
                res[0].makespan / 3600, res[1].makespan / 3600,
                100 * (1 - res[1].makespan / res[0].makespan), res[1].replans, res[1].switches);
  }
  return invalid == 0 ? 0 : 1;
}
