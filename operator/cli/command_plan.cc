// `orrery plan FILE --gpus NODESxGPUS [--device cuda|cpu] [--svg F] [--profile-cache F]`:
// the plan for a job on a cluster of that shape, without running anything.
// Throughput comes from the profile cache where it holds the configuration
// (measured), else from engine/estimate.h (labelled as estimated), which reads
// a pre-trained model's size from its config.json where this machine can.
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "operator/api/defaults.h"
#include "operator/cli/commands.h"
#include "operator/cli/job_file.h"
#include "operator/engine/estimate.h"
#include "operator/engine/job_options.h"
#include "operator/engine/profile_configs.h"
#include "operator/engine/worker_command.h"
#include "operator/local/pretrained_config.h"
#include "operator/local/profile_cache.h"
#include "operator/local/progress.h"
#include "operator/planner/interleave.h"
#include "operator/planner/planner.h"
#include "operator/sim/simulator.h"

namespace orrery::cli {
namespace {

constexpr const char* kUsage =
    "Usage: orrery plan FILE --gpus NODESxGPUS [--device cuda|cpu] [--gpu-memory-gib G]\n"
    "                        [--gpu-memory-reserve 1.5Gi+5%] [--svg FILE]\n"
    "                        [--profile-cache FILE] [--time-limit S]\n"
    "                        [--volume CLAIM=DIR]...\n";

std::optional<std::pair<int, int>> ParseShape(const std::string& s) {
  auto x = s.find('x');
  if (x == std::string::npos || x == 0 || x + 1 >= s.size()) return std::nullopt;
  std::string a = s.substr(0, x), b = s.substr(x + 1);
  if (a.find_first_not_of("0123456789") != std::string::npos ||
      b.find_first_not_of("0123456789") != std::string::npos || a.size() > 5 || b.size() > 4)
    return std::nullopt;
  int n = std::stoi(a), g = std::stoi(b);
  if (n < 1 || g < 1) return std::nullopt;
  return std::make_pair(n, g);
}

// A configuration not offered to the planner: its memory per GPU exceeds the device's.
struct Refused {
  std::string task;
  planner::Config config;
  std::string basis;  // engine::TaskConfigs::memory_basis
};

// The configurations refused for memory, those resting on a measured peak one
// a line (a profile said so: worth seeing), the modelled ones counted.
// `usable_gib` is what a GPU gives a configuration's peak, `reserve` what the
// device's `device_gib` keeps beside it (empty on the CPU: no reserve).
void PrintRefused(std::ostream& o, const std::vector<Refused>& refused, double usable_gib,
                  double device_gib, const std::string& reserve) {
  if (refused.empty()) return;
  int modelled = 0;
  std::ostringstream lines;
  for (const Refused& r : refused) {
    if (r.basis == "modelled" || r.basis == "as profiled") {
      ++modelled;
      continue;
    }
    const planner::Config& c = r.config;
    lines << "  " << r.task << ": " << c.template_name << " x" << c.gpus << ", batch "
          << c.batch_size << ", recompute " << c.recompute << ": " << std::fixed
          << std::setprecision(2) << c.memory_gib << " GiB (" << r.basis << ")\n";
  }
  o << "\nnot offered, over the " << std::fixed << std::setprecision(1) << usable_gib
    << " GiB per GPU a configuration may use";
  if (reserve.empty()) {
    o << " (--gpu-memory-gib):";
  } else {
    o << " (--gpu-memory-gib " << device_gib << " less --gpu-memory-reserve " << reserve << "):";
  }
  if (modelled > 0) {
    o << " " << modelled << " configuration" << (modelled == 1 ? "" : "s")
      << " by the memory model";
  }
  o << "\n" << lines.str();
}

int RunPlan(Invocation& in) {
  if (WantsHelp(in.args)) {
    in.out << kUsage
           << "\nPlans the job on NODES nodes of GPUS devices each (e.g. --gpus 2x8): which\n"
              "template, how many GPUs and when for every task, with the makespan, the lower\n"
              "bound and the gap, and the current-practice baseline (each task alone on all\n"
              "GPUs) for comparison. Writes the Gantt chart to --svg (default JOB-plan.svg).\n"
              "Throughput is taken from the profile cache when it holds a configuration and\n"
              "estimated otherwise (marked '~'); a pre-trained model's size comes from its\n"
              "config.json, read from DIR for a model on claim CLAIM (--volume), else where\n"
              "the workers would read it. A model whose config.json is unreadable needs a\n"
              "profile. Tasks that fit only spilled may share one GPU as an interleaved gang\n"
              "(Hydra; `orrery-worker gang`) where that shortens the plan: the table shows the\n"
              "gang as one row, \"a+b\", with template interleaved.\n";
    return kExitOk;
  }
  std::string file, shape, svg, cache_path, device = "cuda";
  local::ClaimFolders claims;
  double memory = -1, time_limit = -1;
  engine::GpuMemoryReserve reserve;
  for (size_t i = 0; i < in.args.size(); ++i) {
    const std::string& a = in.args[i];
    auto next = [&](std::string* into) {
      if (i + 1 >= in.args.size()) return false;
      *into = in.args[++i];
      return true;
    };
    std::string v;
    bool ok = true;
    if (a == "--gpus") {
      ok = next(&shape);
    } else if (a == "--svg") {
      ok = next(&svg);
    } else if (a == "--profile-cache") {
      ok = next(&cache_path);
    } else if (a == "--device") {
      ok = next(&device);
    } else if (a == "--volume") {
      ok = next(&v);
      const size_t eq = v.find('=');
      ok = ok && eq != std::string::npos && eq > 0 && eq + 1 < v.size();
      if (ok) claims[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (a == "--gpu-memory-reserve") {
      ok = next(&v);
      if (ok) {
        auto parsed = engine::ParseGpuMemoryReserve(v, a);
        if (!parsed.ok()) {
          in.err << "orrery plan: " << parsed.status().message() << "\n";
          return kExitUsage;
        }
        reserve = *parsed;
      }
    } else if (a == "--gpu-memory-gib" || a == "--time-limit") {
      ok = next(&v);
      try {
        (a == "--time-limit" ? time_limit : memory) = std::stod(v);
      } catch (const std::exception&) {
        ok = false;
      }
    } else if (a.rfind("--", 0) == 0 || !file.empty()) {
      ok = false;
    } else {
      file = a;
    }
    if (!ok) {
      in.err << "orrery plan: bad argument " << a << "\n" << kUsage;
      return kExitUsage;
    }
  }
  auto dims = ParseShape(shape);
  if (file.empty() || !dims) {
    in.err << "orrery plan: "
           << (file.empty() ? "missing FILE" : "--gpus wants NODESxGPUS, e.g. 2x8") << "\n"
           << kUsage;
    return kExitUsage;
  }
  if (device != "cuda" && device != "cpu") {
    in.err << "orrery plan: --device must be cuda or cpu\n";
    return kExitUsage;
  }
  auto docs = AnalyzeFile(file);
  if (!docs.ok()) {
    in.err << docs.status().message() << "\n";
    return kExitInvalid;
  }
  if (docs->size() != 1 || !(*docs)[0].analysis.ok()) {
    if (docs->size() == 1) {
      PrintErrors((*docs)[0], in.err);
    } else {
      in.err << "orrery plan: one ModelSelectionJob per file, please\n";
    }
    return kExitInvalid;
  }
  const api::Analysis& a = (*docs)[0].analysis;
  const api::ModelSelectionJobSpec& spec = a.job.spec;
  auto [nodes, per_node] = *dims;
  engine::DeviceModel dm = engine::DefaultDevice(device);
  if (memory > 0) dm.memory_gib = memory;
  // What a configuration's peak may fill: on a GPU, the device's memory less
  // what CUDA's context, NCCL and the caching allocator keep beside it.
  // The estimates size spill's working set to it too.
  const bool on_gpu = dm.kind != "cpu";
  const double device_gib = dm.memory_gib;
  const double usable_gib = on_gpu ? engine::UsableGpuMemoryGib(device_gib, reserve) : device_gib;
  const std::string reserve_text = on_gpu ? engine::GpuMemoryReserveText(reserve) : "";
  dm.memory_gib = usable_gib;
  auto cache = local::ProfileCache::Load(cache_path.empty() ? local::ProfileCache::DefaultPath()
                                                            : cache_path);
  if (!cache.ok()) {
    in.err << "orrery plan: " << cache.status().message() << "\n";
    return kExitInvalid;
  }

  // Pre-trained models: their config.json where it is readable (a model on a
  // volume usually is not: its tasks then plan from profiles alone).
  const std::string base_dir = JobBaseDir(file, a.tasks);
  if (auto errors = local::CheckPretrainedModels(a.tasks, base_dir, false, claims);
      !errors.empty()) {
    in.err << file << ": ModelSelectionJob \"" << a.job.metadata.name << "\" does not fit its "
           << "models: " << errors.size() << (errors.size() == 1 ? " error\n" : " errors\n");
    for (const api::FieldError& e : errors) in.err << api::FormatFieldError(e) << "\n";
    return kExitInvalid;
  }
  std::vector<std::optional<engine::PretrainedShape>> shapes(a.tasks.size());
  std::vector<std::string> unreadable(a.tasks.size());
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    if (!a.tasks[t].task.model.pretrained) continue;
    local::PretrainedConfig pc =
        local::ReadPretrainedConfig(*a.tasks[t].task.model.pretrained, base_dir, claims);
    shapes[t] = pc.shape;
    unreadable[t] = pc.unreadable;
  }

  planner::Problem problem;
  problem.objective = engine::PlanObjective(spec.scheduling.objective);
  for (int n = 0; n < nodes; ++n) {
    problem.nodes.push_back({"node-" + std::to_string(n), per_node, usable_gib});
  }
  // The configurations the operator and `orrery run` would offer the planner
  // (engine::BuildTaskConfigs: templates, profiled GPU counts, elastic batches,
  // interpolation), on one node each as gangs are: measured where the cache
  // holds the point, else estimated.
  const int max_gpus = std::min({spec.resources.gpu_quota, per_node, nodes * per_node});
  int measured = 0, estimated = 0;
  std::vector<std::set<size_t>> estimated_configs(a.tasks.size());
  std::vector<Refused> refused;
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    const api::ExpandedTask& e = a.tasks[t];
    planner::Task task;
    task.name = e.name;
    task.weight = e.task.weight;
    task.work = static_cast<double>(engine::SampleBudget(e.task));
    std::set<std::tuple<std::string, int, int64_t>> from_cache;
    auto lookup = [&](api::Template tmpl, int g, int64_t batch) {
      const std::string name(api::EnumName(tmpl));
      api::TaskSpec at_batch = e.task;
      at_batch.training.batch_size = batch;
      contract::ProfileEntry key;
      key.signature = engine::ModelSignature(e.task);  // as orrery run keys its cache
      key.template_name = contract::WorkerTemplate(name, g);
      key.gpus = g;
      key.batch_size = batch;
      key.device = device;
      engine::ProfilePoint p;
      if (const contract::ProfileEntry* hit = cache->Find(key)) {
        from_cache.insert({name, g, batch});
        return engine::PointFromProfile(*hit);
      }
      if (auto c =
              engine::EstimateConfig(at_batch, name, g, dm, shapes[t] ? &*shapes[t] : nullptr)) {
        p.state = engine::ProfilePoint::State::kMeasured;
        p.samples_per_s = c->throughput;
        p.memory_gib = c->memory_gib;
      } else {
        p.state = engine::ProfilePoint::State::kInfeasible;  // nothing to plan on
      }
      return p;
    };
    engine::TaskConfigs built =
        engine::BuildTaskConfigs(spec, e.task, lookup, max_gpus, /*recompute_modes=*/true);
    for (size_t k = 0; k < built.configs.size(); ++k) {
      const planner::Config& c = built.configs[k];
      if (c.memory_gib > usable_gib) {
        // Not offered: the planner must not pick what would run out of memory.
        refused.push_back({e.name, c, built.memory_basis[k]});
        continue;
      }
      if (from_cache.count({c.template_name, c.gpus, c.batch_size}) > 0) {
        ++measured;
      } else {
        estimated_configs[t].insert(task.configs.size());
        ++estimated;
      }
      task.configs.push_back(c);
    }
    if (task.configs.empty()) {
      const engine::ParameterCount size =
          engine::CountParameters(e.task, shapes[t] ? &*shapes[t] : nullptr, unreadable[t]);
      in.err << "orrery plan: task " << e.name;
      if (size.total <= 0) {
        in.err << " cannot be estimated (" << size.label
               << ") and the profile cache holds none of its configurations; profile it first "
                  "(orrery run, or the job on a cluster), or pass --volume CLAIM=DIR where this "
                  "machine holds the claim's files\n";
      } else {
        in.err << " has no configuration that fits (memory or devices); allow more templates "
                  "(spec.resources.templates), more GPUs per task, or profile it with orrery "
                  "run\n";
        PrintRefused(in.err, refused, usable_gib, device_gib, reserve_text);
      }
      return kExitInvalid;
    }
    problem.tasks.push_back(std::move(task));
  }
  planner::PlanOptions po;
  po.time_limit_s = time_limit > 0 ? time_limit : spec.scheduling.solver_time_limit_seconds;
  SystemClock clock;
  po.clock = &clock;
  // Spilled tasks may share a GPU as an interleaved gang where that is sooner
  // (operator/planner/interleave.h): the plan is then on the ganged problem.
  auto solved = planner::SolveInterleaved(*planner::MakeOrreryPlanner(), problem, po);
  if (!solved.ok()) {
    in.err << "orrery plan: " << solved.status() << "\n";
    return kExitInvalid;
  }
  const planner::Plan* plan = &solved->plan;
  const planner::Problem& planned = solved->ganged.problem;
  // A row's configuration is estimated where any of its tasks' is.
  auto estimated_row = [&](size_t row, int config) {
    const std::vector<int>& members = solved->ganged.members[row];
    if (members.size() == 1)
      return estimated_configs[static_cast<size_t>(members[0])].count(static_cast<size_t>(config)) >
             0;
    for (int m : members)
      if (!estimated_configs[static_cast<size_t>(m)].empty()) return true;
    return false;
  };
  auto baseline = planner::MakeCurrentPracticePlanner()->Solve(problem, po);

  std::ostream& o = in.out;
  o << "plan for " << a.job.metadata.name << " on " << nodes << "x" << per_node << " " << device
    << " (" << a.tasks.size() << " tasks; " << measured << " profiled configurations, " << estimated
    << " estimated '~')\n\n";
  size_t w = 4;
  for (const auto& t : planned.tasks) w = std::max(w, t.name.size());
  o << std::left << std::setw(static_cast<int>(w) + 2) << "task" << std::setw(12) << "template"
    << std::setw(11) << "recompute" << std::setw(6) << "gpus" << std::setw(7) << "nodes"
    << std::setw(7) << "batch" << std::setw(11) << "start" << std::setw(11) << "end"
    << "samples/s\n";
  for (size_t t = 0; t < planned.tasks.size(); ++t) {
    const planner::Assignment& as = plan->assignments[t];
    const planner::Config& c = planned.tasks[t].configs[static_cast<size_t>(as.config)];
    std::ostringstream rate;
    rate << (estimated_row(t, as.config) ? "~" : "") << std::fixed << std::setprecision(1)
         << c.throughput;
    o << std::setw(static_cast<int>(w) + 2) << planned.tasks[t].name << std::setw(12)
      << c.template_name << std::setw(11) << c.recompute << std::setw(6) << c.gpus << std::setw(7)
      << c.nodes << std::setw(7) << c.batch_size << std::setw(11) << local::FormatDuration(as.start)
      << std::setw(11) << local::FormatDuration(as.end) << rate.str() << "\n";
  }
  // What each spec task's estimates rest on (one line per model, not per variant).
  std::set<std::string> notes;
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    const api::ExpandedTask& e = a.tasks[t];
    const bool size_unknown = e.task.model.pretrained && !shapes[t];
    if (estimated_configs[t].empty() && !size_unknown) continue;
    notes.insert(
        e.source + ": " +
        engine::CountParameters(e.task, shapes[t] ? &*shapes[t] : nullptr, unreadable[t]).label);
  }
  if (!notes.empty()) {
    o << "\nestimated '~' from (profiles alone where the size is unknown):\n";
    for (const std::string& n : notes) o << "  " << n << "\n";
  }
  PrintRefused(o, refused, usable_gib, device_gib, reserve_text);
  o << std::right << "\nmakespan " << local::FormatDuration(plan->makespan);
  if (problem.objective == planner::Objective::kWeightedCompletion) {
    // The bound and gap are on the sum of weight x completion time: shown as
    // the weighted mean completion time, over the weights' sum.
    double weights = 0;
    for (const planner::Task& t : problem.tasks) weights += t.weight;
    weights = std::max(weights, 1e-12);
    o << "; weighted mean completion " << local::FormatDuration(plan->objective / weights)
      << ", its lower bound " << local::FormatDuration(plan->lower_bound / weights);
  } else {
    o << ", lower bound " << local::FormatDuration(plan->lower_bound);
  }
  o << ", gap " << std::fixed << std::setprecision(1) << 100 * plan->gap << "%, solved in "
    << std::setprecision(2) << plan->solve_seconds << " s (" << plan->planner << ")\n";
  if (solved->interleaved()) {
    o << "interleaved gangs (Hydra: the tasks' spilled models share one GPU in one worker, "
         "shard by shard; modelled at "
      << std::setprecision(2) << planner::kInterleaveSpeedup << "x over one after the other): ";
    bool first = true;
    for (const auto& members : solved->ganged.members) {
      if (members.size() < 2) continue;
      std::vector<std::string> names;
      names.reserve(members.size());
      for (int m : members) names.push_back(problem.tasks[static_cast<size_t>(m)].name);
      o << (first ? "" : ", ") << planner::GangName(names);
      first = false;
    }
    o << "; without them the makespan is " << local::FormatDuration(solved->without.makespan)
      << "\n";
  }
  if (baseline.ok() && baseline->makespan > 0) {
    o << "current practice (each task alone on all its GPUs, one after another): "
      << local::FormatDuration(baseline->makespan) << " (" << std::setprecision(1)
      << 100 * (1 - plan->makespan / baseline->makespan) << "% shorter with the plan)\n";
  }

  sim::SimResult r;
  r.workload = a.job.metadata.name;
  r.policy = "plan";
  r.makespan = plan->makespan;
  r.tasks = static_cast<int>(planned.tasks.size());
  r.nodes_total = nodes;
  r.gpus_per_node = per_node;
  for (size_t t = 0; t < planned.tasks.size(); ++t) {
    const planner::Assignment& as = plan->assignments[t];
    const planner::Config& c = planned.tasks[t].configs[static_cast<size_t>(as.config)];
    r.intervals.push_back({planned.tasks[t].name, as.start, as.end, c.template_name, c.gpus,
                           c.batch_size, as.gpus, "planned"});
  }
  if (svg.empty()) svg = a.job.metadata.name + "-plan.svg";
  std::ofstream out(svg);
  out << sim::GanttSvg(r);
  if (!out) {
    in.err << "orrery plan: cannot write " << svg << "\n";
    return kExitInvalid;
  }
  o << "Gantt chart: " << svg << "\n";
  return kExitOk;
}

}  // namespace
}  // namespace orrery::cli

ORRERY_CLI_COMMAND(plan, "plan FILE --gpus NODESxGPUS [--svg F]",
                   "Plan a job for a cluster shape and draw its Gantt chart, without running it",
                   orrery::cli::RunPlan);
