// The simulate command: argument parsing and file I/O around Simulate().
#include "operator/sim/simulate_command.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "operator/planner/interleave.h"
#include "operator/sim/elastic_sim.h"
#include "operator/sim/simulator.h"

namespace orrery::sim {

namespace {

bool ReadText(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream s;
  s << in.rdbuf();
  *text = s.str();
  return true;
}

// `orrery simulate --elastic TRACE.yaml`: online arrivals under the elastic
// autoscaler and its baselines (elastic_sim.h).
int ElasticCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const char* usage =
      "usage: orrery simulate --elastic TRACE.yaml\n"
      "                       [--policy elastic|gpu-only|static|optimum|all]\n"
      "                       [--jobs-csv FILE] [--decisions FILE|-]\n";
  std::string path, policy = "all", csv_path, decisions_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= args.size()) return false;
      *v = args[++i];
      return true;
    };
    if (a == "--elastic") continue;
    if (a == "--policy" && value(&policy)) continue;
    if (a == "--jobs-csv" && value(&csv_path)) continue;
    if (a == "--decisions" && value(&decisions_path)) continue;
    if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
      continue;
    }
    err << usage;
    return 2;
  }
  if (path.empty()) {
    err << usage;
    return 2;
  }
  std::vector<ElasticPolicy> policies;
  if (policy == "all") {
    policies = {ElasticPolicy::kElastic, ElasticPolicy::kGpuOnly, ElasticPolicy::kStatic,
                ElasticPolicy::kOptimum};
  } else {
    auto p = ParseElasticPolicy(policy);
    if (!p.ok()) {
      err << p.status() << "\n" << usage;
      return 2;
    }
    policies = {*p};
  }
  std::string text;
  if (!ReadText(path, &text)) {
    err << "cannot read " << path << "\n";
    return 1;
  }
  auto trace = ParseElasticTrace(text);
  if (!trace.ok()) {
    err << path << ": " << trace.status() << "\n";
    return 1;
  }
  if (!csv_path.empty()) {
    if (!ReadText(csv_path, &text)) {
      err << "cannot read " << csv_path << "\n";
      return 1;
    }
    if (Status s = AppendJobsCsv(text, &*trace); !s.ok()) {
      err << csv_path << ": " << s << "\n";
      return 1;
    }
  }
  ElasticSimOptions options;
  options.keep_decisions = !decisions_path.empty();
  std::vector<ElasticResult> results;
  for (ElasticPolicy p : policies) {
    auto r = SimulateElastic(*trace, p, options);
    if (!r.ok()) {
      err << "simulation failed (" << ElasticPolicyName(p) << "): " << r.status() << "\n";
      return 1;
    }
    results.push_back(std::move(*r));
  }
  out << trace->name << ": " << trace->jobs.size() << " jobs, " << trace->cluster.gpus()
      << " GPUs, horizon " << trace->horizon_s << " s\n";
  const std::vector<GpuPool> pools = Pools(trace->cluster);
  if (!trace->cluster.pools.empty()) {
    out << "pools:";
    for (const GpuPool& p : pools)
      out << " " << p.type << " " << p.gpus() << " GPUs (speed " << p.speed << ", " << p.memory_gb
          << " GiB)";
    out << "\n";
  }
  out << ElasticTable(results);
  // A decision's shape: GPUs x batch, and the pool where the trace has pools.
  auto shape = [&](int gpus, int batch, int type) {
    std::string s = std::to_string(gpus) + "x" + std::to_string(batch);
    if (!trace->cluster.pools.empty() && gpus > 0) s += "@" + pools[static_cast<size_t>(type)].type;
    return s;
  };
  if (!decisions_path.empty()) {
    std::ostringstream log;
    for (const ElasticResult& r : results) {
      for (const engine::ScaleDecision& d : r.decisions) {
        log << r.policy << " t=" << d.time << " " << engine::ScaleTriggerName(d.trigger) << " "
            << d.task << " " << engine::ActionName(d.action) << " "
            << shape(d.from_gpus, d.from_batch, d.from_type) << " -> "
            << shape(d.to_gpus, d.to_batch, d.to_type) << ": " << d.reason << "\n";
      }
    }
    if (decisions_path == "-")
      out << log.str();
    else
      std::ofstream(decisions_path) << log.str();
  }
  return 0;
}

}  // namespace

namespace {

// Reads the workload, simulates it and prints the table, the --replans
// lines, --json and --svg.
int SimulateWorkload(const std::string& path, const SimOptions& options, bool replan_lines,
                     const std::string& json_path, const std::string& svg_path, std::ostream& out,
                     std::ostream& err) {
  std::string text;
  if (!ReadText(path, &text)) {
    err << "cannot read " << path << "\n";
    return 1;
  }
  auto workload = planner::ParseWorkload(text);
  if (!workload.ok()) {
    err << path << ": " << workload.status() << "\n";
    return 1;
  }
  auto result = Simulate(*workload, options, SystemClock::Get());
  if (!result.ok()) {
    err << "simulation failed: " << result.status() << "\n";
    return 1;
  }
  out << ResultTable(*result);
  if (replan_lines) out << ReplanTable(*result);
  if (json_path == "-")
    out << ResultJson(*result);
  else if (!json_path.empty())
    std::ofstream(json_path) << ResultJson(*result);
  if (!svg_path.empty()) std::ofstream(svg_path) << GanttSvg(*result);
  return 0;
}

}  // namespace

int SimulateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const std::string& a : args)
    if (a == "--elastic") return ElasticCommand(args, out, err);
  std::string path, policy = "orrery", json_path, svg_path;
  bool replan_lines = false;
  SimOptions options;
  engine::EngineOptions& eo = options.engine;
  // Interleaved gangs of spilled tasks, on as in `orrery run`, at the
  // speedup gangs run at in this world and the engine plans them with.
  eo.interleave = true;
  eo.interleave_speedup = planner::kInterleaveSpeedup;
  const char* usage =
      "usage: orrery simulate WORKLOAD.yaml [--policy "
      "orrery|saturn|greedy|current-practice[-static]] [--seed S]\n"
      "                       [--json FILE|-] [--svg FILE] [--replan-interval S] "
      "[--solver-time-limit S]\n"
      "                       [--adopt-gain FRACTION] [--switch-cost S]\n"
      "                       [--coalesce-window S] [--warm-start] [--replans]\n"
      "                       [--no-interleave] [--interleave-speedup X]\n"
      "       orrery simulate --elastic TRACE.yaml [--policy elastic|gpu-only|static|optimum|all] "
      "...\n";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= args.size()) return false;
      *v = args[++i];
      return true;
    };
    std::string v;
    double x = 0;
    if (a == "--policy" && value(&policy)) continue;
    if (a == "--json" && value(&json_path)) continue;
    if (a == "--svg" && value(&svg_path)) continue;
    if (a == "--seed" && value(&v)) {
      eo.seed = std::stoi(v);
      continue;
    }
    if (a == "--replan-interval" && value(&v)) {
      if ((x = std::stod(v)) > 0) eo.replan_interval_s = x;
      continue;
    }
    if (a == "--solver-time-limit" && value(&v)) {
      if ((x = std::stod(v)) > 0) eo.solver_time_limit_s = x;
      continue;
    }
    if (a == "--adopt-gain" && value(&v)) {
      if ((x = std::stod(v)) >= 0) eo.adopt_gain = x;
      continue;
    }
    if (a == "--switch-cost" && value(&v)) {
      if ((x = std::stod(v)) >= 0) eo.switch_cost_s = x;
      continue;
    }
    if (a == "--coalesce-window" && value(&v)) {
      eo.coalesce_window_s = std::stod(v);
      if (!(eo.coalesce_window_s >= 0)) {
        err << "--coalesce-window: must be seconds >= 0, got " << v << "\n";
        return 2;
      }
      continue;
    }
    if (a == "--interleave-speedup" && value(&v)) {
      char* end = nullptr;
      eo.interleave_speedup = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(eo.interleave_speedup > 0)) {
        err << "--interleave-speedup: must be a number > 0 (an interleaved gang's speed over "
               "its members one after the other, e.g. 1.22), got "
            << v << "\n";
        return 2;
      }
      continue;
    }
    if (a == "--no-interleave" || a == "--warm-start" || a == "--replans") {
      eo.interleave = eo.interleave && a != "--no-interleave";
      eo.warm_start = eo.warm_start || a == "--warm-start";
      replan_lines = replan_lines || a == "--replans";
      continue;
    }
    if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
      continue;
    }
    err << usage;
    return 2;
  }
  if (path.empty()) {
    err << usage;
    return 2;
  }
  options.gang_speedup = eo.interleave_speedup;
  const std::string kStatic = "-static";
  if (policy.size() > kStatic.size() &&
      policy.compare(policy.size() - kStatic.size(), kStatic.size(), kStatic) == 0) {
    eo.introspect = false;
    policy.resize(policy.size() - kStatic.size());
  }
  eo.policy = policy;
  auto planner = planner::MakePlanner(policy);
  if (!planner.ok()) {
    err << planner.status() << "\n";
    return 2;
  }
  return SimulateWorkload(path, options, replan_lines, json_path, svg_path, out, err);
}

}  // namespace orrery::sim
