#include "operator/engine/profile_configs.h"

#include <algorithm>
#include <map>
#include <utility>

#include "operator/api/defaults.h"
#include "operator/engine/estimate.h"
#include "operator/engine/worker_command.h"
#include "worker/contract/templates.h"

namespace orrery::engine {

std::vector<int64_t> CandidateBatches(const api::ModelSelectionJobSpec& spec, int64_t task_batch) {
  std::vector<int64_t> out = {task_batch};
  if (!spec.elasticity.enabled || task_batch < 1) return out;
  int64_t lo = spec.elasticity.min_batch_size.value_or(1);
  int64_t hi = spec.elasticity.max_batch_size.value_or(INT64_MAX);
  auto add = [&](int64_t b) {
    if (static_cast<int>(out.size()) < kMaxBatchChoices && b >= lo && b <= hi) out.push_back(b);
  };
  // Powers of two up to 2^20 either way: far beyond any bound the API accepts.
  for (int k = 1; k <= 20 && static_cast<int>(out.size()) < kMaxBatchChoices; ++k) {
    int64_t factor = int64_t{1} << k;
    if (task_batch <= INT64_MAX / factor) add(task_batch * factor);
    if (task_batch % factor == 0) add(task_batch / factor);
  }
  // The task's own first, so that a planner that keeps the first of equally
  // good configurations does not move a task off the batch it was tuned at
  // for nothing; the others ascending.
  std::sort(out.begin() + 1, out.end());
  return out;
}

std::vector<int> ProfileGpuCounts(const api::ModelSelectionJobSpec& spec, int max_gpus) {
  if (max_gpus < 1) return {};
  int min_gpus = std::min(spec.resources.gpus_per_task.min, max_gpus);
  std::vector<int> counts = spec.profiling.gpu_counts.empty()
                                ? api::DefaultProfileGpuCounts(min_gpus, max_gpus)
                                : spec.profiling.gpu_counts;
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::erase_if(counts, [&](int g) { return g < 1 || g > max_gpus; });
  return counts;
}

namespace {

constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

// The memory per GPU of a configuration on `gpus` built from point `p`
// (profiled on `point_gpus`) in recomputation mode `mode`, and what it rests
// on (TaskConfigs::memory_basis); see BuildTaskConfigs. A measured peak is
// adjusted by activations on the GPUs it was measured on; without one the
// configuration's own activations are added, as before peaks were recorded.
std::pair<double, std::string> ModeMemory(const api::TaskSpec& task, const std::string& name,
                                          const ProfilePoint& p, int point_gpus, int gpus,
                                          int64_t batch, const std::string& mode) {
  if (p.measured_peak_gib > 0) {
    const auto activations = ActivationBytes(task, name, point_gpus, batch, mode);
    const std::string measured =
        p.measured_recompute.empty() ? DefaultRecompute(name) : p.measured_recompute;
    if (measured == mode) return {p.measured_peak_gib, "measured"};
    const auto at_measured = ActivationBytes(task, name, point_gpus, batch, measured);
    if (activations && at_measured) {
      double floor = p.memory_gib;
      if (auto state = ParameterStateBytes(task, name, point_gpus))
        floor = std::max(floor, *state / kGib);
      const double derived = p.measured_peak_gib + (*activations - *at_measured) / kGib;
      return {std::max(floor, derived), "from the measured " + measured + " peak"};
    }
  }
  const auto activations = ActivationBytes(task, name, gpus, batch, mode);
  return {p.memory_gib + activations.value_or(0) / kGib, "modelled"};
}

// `c` (a point's throughput, on c.gpus; `p` profiled on `point_gpus`) in each
// recomputation mode worth planning, with its memory in that mode
// (ModeMemory). A template that keeps activations by default is offered
// recomputing too (slower, smaller), so a model that fits without
// recomputation runs without it and one that does not still runs. Spill
// recomputes always: its point is the device's small memory. Without a known
// shape (not a spec GPT) only the default mode is offered, as measured.
void AddRecomputeModes(const api::TaskSpec& task, api::Template tmpl, planner::Config c,
                       const ProfilePoint& p, int point_gpus, TaskConfigs& out) {
  c.recompute = DefaultRecompute(c.template_name);
  // The profile's speed is the mode it was measured in: measured recomputing
  // on a template that keeps activations by default, the mode without
  // recomputation runs faster than measured (kRecomputeThroughput).
  const bool measured_recomputing = p.measured_recompute == "unit" && c.recompute == "none";
  if (measured_recomputing) c.throughput /= kRecomputeThroughput;
  auto add = [&](planner::Config x) {
    auto [gib, basis] =
        ModeMemory(task, x.template_name, p, point_gpus, x.gpus, x.batch_size, x.recompute);
    x.memory_gib = gib;
    out.configs.push_back(x);
    out.templates.push_back(tmpl);
    out.memory_basis.push_back(std::move(basis));
  };
  add(c);
  if (c.recompute != "none" ||
      !ActivationBytes(task, c.template_name, c.gpus, c.batch_size, "unit"))
    return;
  planner::Config unit = c;
  unit.recompute = "unit";
  unit.throughput = c.throughput * kRecomputeThroughput;
  add(unit);
}

}  // namespace

ProfilePoint PointFromProfile(const contract::ProfileEntry& entry) {
  ProfilePoint p;
  p.state = ProfilePoint::State::kMeasured;
  p.samples_per_s = entry.samples_per_s;
  p.memory_gib = entry.peak_memory_bytes / kGib;
  p.measured_peak_gib = entry.device_allocated_bytes / kGib;
  p.measured_recompute = entry.recompute;
  return p;
}

std::string DefaultRecompute(const std::string& template_name) {
  const contract::TemplateTraits* traits = contract::FindTemplate(template_name);
  return traits != nullptr ? std::string(traits->recompute) : "none";
}

TaskConfigs BuildTaskConfigs(const api::ModelSelectionJobSpec& spec, const api::TaskSpec& task,
                             const ProfileLookup& lookup, int max_gpus, bool recompute_modes) {
  TaskConfigs out;
  auto add = [&](api::Template tmpl, const planner::Config& c, const ProfilePoint& p,
                 int point_gpus) {
    if (recompute_modes) {
      AddRecomputeModes(task, tmpl, c, p, point_gpus, out);
    } else {
      planner::Config x = c;
      if (p.measured_peak_gib > 0) x.memory_gib = p.measured_peak_gib;
      out.configs.push_back(x);
      out.templates.push_back(tmpl);
      out.memory_basis.emplace_back(p.measured_peak_gib > 0 ? "measured" : "as profiled");
    }
  };
  max_gpus = std::min({max_gpus, spec.resources.gpus_per_task.max, spec.resources.gpu_quota});
  std::vector<int> counts = ProfileGpuCounts(spec, max_gpus);
  if (counts.empty()) return out;
  const bool elastic = spec.elasticity.enabled;
  std::vector<int64_t> batches = CandidateBatches(spec, task.training.batch_size);
  for (api::Template tmpl : spec.resources.templates) {
    const std::string name(api::EnumName(tmpl));
    for (int64_t batch : batches) {
      std::map<int, ProfilePoint> points;  // measured, feasible, by GPUs
      for (int g : counts) {
        if (elastic && !contract::BatchSplits(contract::WorkerTemplate(name, g), g, batch))
          continue;
        ProfilePoint p = lookup(tmpl, g, batch);
        if (p.state == ProfilePoint::State::kMissing) {
          out.missing.push_back({tmpl, g, batch});
        } else if (p.state == ProfilePoint::State::kMeasured && p.samples_per_s > 0) {
          points[g] = p;
        }
      }
      for (auto it = points.begin(); it != points.end(); ++it) {
        planner::Config c;
        c.template_name = name;
        c.gpus = it->first;
        c.batch_size = static_cast<int>(batch);
        c.throughput = it->second.samples_per_s;
        c.memory_gib = it->second.memory_gib;
        add(tmpl, c, it->second, it->first);
        auto next = std::next(it);
        if (next == points.end()) continue;
        // Linear interpolation of throughput between profiled GPU counts; no
        // extrapolation beyond them. Memory is the smaller count's (conservative
        // for sharding templates, equal for replicating ones).
        for (int g = it->first + 1; g < next->first; ++g) {
          if (g < spec.resources.gpus_per_task.min) continue;
          if (elastic && !contract::BatchSplits(contract::WorkerTemplate(name, g), g, batch))
            continue;
          double f = static_cast<double>(g - it->first) / (next->first - it->first);
          planner::Config fit = c;
          fit.gpus = g;
          fit.throughput = c.throughput + f * (next->second.samples_per_s - c.throughput);
          add(tmpl, fit, it->second, it->first);
        }
      }
    }
  }
  return out;
}

int64_t SampleBudget(const api::TaskSpec& task, int64_t dataset_samples) {
  return TotalSteps(task, dataset_samples) * task.training.batch_size;
}

int64_t StepsForBudget(int64_t budget, int64_t done_steps, int64_t done_samples, int64_t batch) {
  if (batch < 1) return done_steps;
  int64_t left = std::max<int64_t>(0, budget - done_samples);
  return done_steps + (left + batch - 1) / batch;
}

}  // namespace orrery::engine
