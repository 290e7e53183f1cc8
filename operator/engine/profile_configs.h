// What the planner may choose for one task, built from profiles: for every
// template, global batch size and profiled GPU count, one configuration, with
// GPU counts between two profiled ones interpolated. Shared by the local runner
// (its profile cache) and the Kubernetes reconciler (the profile ConfigMap): each
// passes a lookup into its own store, and profiles what comes back `missing`.
//
// When the job is elastic (spec.elasticity.enabled) a task is offered several
// global batch sizes (CandidateBatches) and its work is a fixed number of
// samples (SampleBudget), so a configuration at a larger batch that processes
// more samples per second finishes sooner and the planner picks (template, GPUs,
// batch) jointly. Pure: no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "operator/api/types.h"
#include "operator/planner/problem.h"
#include "worker/contract/profile_record.h"

namespace orrery::engine {

// Batch sizes offered per task, its own included. Every batch costs one
// profiling trial per (template, GPU count), so this bounds profiling at 3x a
// job that is not elastic.
inline constexpr int kMaxBatchChoices = 3;

// The global batch sizes a task may run at: just its own when the job is not
// elastic; else its own and the powers-of-two multiples and fractions of it
// within [minBatchSize, maxBatchSize], nearest first (x2, /2, x4, /4, ...), at
// most kMaxBatchChoices. Nearest first because the
// learning-rate rule (linear, sqrt) is an approximation that degrades away
// from the batch the task was tuned for. The task's own comes first, the others
// ascending. Bounds not set count as open.
std::vector<int64_t> CandidateBatches(const api::ModelSelectionJobSpec& spec, int64_t task_batch);

// The GPU counts to profile: spec.profiling.gpuCounts or the defaults between
// gpusPerTask.min and `max_gpus` (already capped by gpusPerTask.max and the
// quota), ascending and unique, those above `max_gpus` dropped.
std::vector<int> ProfileGpuCounts(const api::ModelSelectionJobSpec& spec, int max_gpus);

// What a store holds for one (template, GPUs, global batch) of a task.
struct ProfilePoint {
  enum class State { kMissing, kInfeasible, kMeasured };
  State state = State::kMissing;
  double samples_per_s = 0;
  // Per GPU: the parameter (and gradient) state a profile measured, or an
  // estimate's state and buffers; activations are modelled over it.
  double memory_gib = 0;
  // The measured peak of all allocated bytes per GPU and the recomputation
  // mode it was measured in ("" = the template's default); 0 where nothing
  // was measured or the profile predates the field. With it, the planner's
  // memory is this peak (see BuildTaskConfigs).
  double measured_peak_gib = 0;
  std::string measured_recompute = {};
};
// A profile's point (kMeasured): its throughput, parameter state and measured peak.
ProfilePoint PointFromProfile(const contract::ProfileEntry& entry);
using ProfileLookup = std::function<ProfilePoint(api::Template, int gpus, int64_t batch)>;

struct ProfileKeyRef {
  api::Template template_ = api::Template::kDdp;
  int gpus = 1;
  int64_t batch_size = 0;  // global
  bool operator==(const ProfileKeyRef&) const = default;
};

struct TaskConfigs {
  std::vector<planner::Config> configs;
  std::vector<api::Template> templates;  // by config
  // Keys the store lacks, in the order configurations are built (template, then
  // batch, then GPUs); infeasible keys are not missing.
  std::vector<ProfileKeyRef> missing;
  // By config, what its memory_gib rests on: "measured" (the profile's peak),
  // "from the measured <mode> peak" (the other recomputation mode's peak
  // plus the modelled difference in activations), or "modelled" (the
  // parameter state plus modelled activations). Only BuildTaskConfigs fills
  // it; a caller that rewrites `configs` clears it.
  std::vector<std::string> memory_basis;
  // The controller's measured GPU type speeds (ConfigsFromProfiles): for each
  // other type the task may use whose speed is not measured yet, that type and
  // the key to measure there (the task's first profiled key).
  std::vector<std::pair<std::string, ProfileKeyRef>> type_probes;
};

// Configurations for `task` on at most `max_gpus` GPUs (capped further by
// gpusPerTask.max and the quota). Measured points with samples_per_s <= 0 give
// no configuration. When the job is elastic, keys whose batch does not split
// over the GPUs are neither offered nor missing; when it is not, every
// configuration carries the task's own batch and nothing else changes.
// With `recompute_modes`, each point is offered in every activation-
// recomputation mode worth planning (`orrery plan`, `orrery run` and the
// operator do). A configuration's memory is then, per GPU:
//  - in the mode a profile measured a peak in (ProfilePoint::measured_peak_gib),
//    that peak;
//  - in the other mode, that peak plus the difference in activations the
//    model gives the two modes (engine::ActivationBytes), never below the
//    parameter state (the point's memory_gib, engine::ParameterStateBytes);
//  - without a measured peak (an estimate, or a profile from before peaks
//    were recorded), the point's memory_gib plus the mode's activations.
// A GPU count interpolated between two profiled ones keeps the smaller
// count's memory.
TaskConfigs BuildTaskConfigs(const api::ModelSelectionJobSpec& spec, const api::TaskSpec& task,
                             const ProfileLookup& lookup, int max_gpus,
                             bool recompute_modes = false);

// The recomputation mode a worker runs `template_name` in when the plan says
// nothing (the template table's; "none" for a name it lacks).
std::string DefaultRecompute(const std::string& template_name);

// The task's work in samples: its optimizer steps at its own batch (TotalSteps)
// times that batch. An elastic task keeps this budget whatever batch it runs at.
int64_t SampleBudget(const api::TaskSpec& task, int64_t dataset_samples = 0);

// The --steps that finish `budget` samples at `batch` for a run resuming from a
// checkpoint at `done_steps` optimizer steps that had consumed `done_samples`
// (the worker keeps counting steps across a batch change): done_steps plus the
// remaining samples over the batch, rounded up. At least done_steps.
int64_t StepsForBudget(int64_t budget, int64_t done_steps, int64_t done_samples, int64_t batch);

}  // namespace orrery::engine
