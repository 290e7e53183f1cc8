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

int SimulateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const std::string& a : args)
    if (a == "--elastic") return ElasticCommand(args, out, err);
  std::string path, policy = "orrery", json_path, svg_path;
  int seed = 1;
  double interval = -1, limit = -1, gain = -1, switch_cost = -1, coalesce = -1;
  double interleave_speedup = planner::kInterleaveSpeedup;
  // Interleaved gangs of spilled tasks, on as in `orrery run`.
  bool warm_start = false, replan_lines = false, interleave = true;
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
    if (a == "--policy" && value(&policy)) continue;
    if (a == "--json" && value(&json_path)) continue;
    if (a == "--svg" && value(&svg_path)) continue;
    if (a == "--seed" && value(&v)) {
      seed = std::stoi(v);
      continue;
    }
    if (a == "--replan-interval" && value(&v)) {
      interval = std::stod(v);
      continue;
    }
    if (a == "--solver-time-limit" && value(&v)) {
      limit = std::stod(v);
      continue;
    }
    if (a == "--adopt-gain" && value(&v)) {
      gain = std::stod(v);
      continue;
    }
    if (a == "--switch-cost" && value(&v)) {
      switch_cost = std::stod(v);
      continue;
    }
    if (a == "--coalesce-window" && value(&v)) {
      coalesce = std::stod(v);
      if (!(coalesce >= 0)) {
        err << "--coalesce-window: must be seconds >= 0, got " << v << "\n";
        return 2;
      }
      continue;
    }
    if (a == "--interleave-speedup" && value(&v)) {
      char* end = nullptr;
      interleave_speedup = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(interleave_speedup > 0)) {
        err << "--interleave-speedup: must be a number > 0 (an interleaved gang's speed over "
               "its members one after the other, e.g. 1.22), got "
            << v << "\n";
        return 2;
      }
      continue;
    }
    if (a == "--no-interleave") {
      interleave = false;
      continue;
    }
    if (a == "--warm-start") {
      warm_start = true;
      continue;
    }
    if (a == "--replans") {
      replan_lines = true;
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
  std::ifstream in(path);
  if (!in) {
    err << "cannot read " << path << "\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto workload = planner::ParseWorkload(text.str());
  if (!workload.ok()) {
    err << path << ": " << workload.status() << "\n";
    return 1;
  }
  SimOptions options;
  const std::string kStatic = "-static";
  if (policy.size() > kStatic.size() &&
      policy.compare(policy.size() - kStatic.size(), kStatic.size(), kStatic) == 0) {
    options.engine.introspect = false;
    policy.resize(policy.size() - kStatic.size());
  }
  options.engine.policy = policy;
  options.engine.seed = seed;
  if (interval > 0) options.engine.replan_interval_s = interval;
  if (limit > 0) options.engine.solver_time_limit_s = limit;
  if (gain >= 0) options.engine.adopt_gain = gain;
  if (switch_cost >= 0) options.engine.switch_cost_s = switch_cost;
  if (coalesce >= 0) options.engine.coalesce_window_s = coalesce;
  options.engine.warm_start = warm_start;
  options.engine.interleave = interleave;
  // What gangs run at in this world and what the engine plans them with.
  options.engine.interleave_speedup = interleave_speedup;
  options.gang_speedup = interleave_speedup;
  auto planner = planner::MakePlanner(policy);
  if (!planner.ok()) {
    err << planner.status() << "\n";
    return 2;
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

}  // namespace orrery::sim
