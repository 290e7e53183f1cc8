// Planner configurations from profiles: a job that is not elastic gets exactly
// one batch (the task's own) with GPU counts interpolated between profiled ones;
// an elastic job gets up to three batches within its bounds that split over the
// GPUs, missing keys carry their batch, and a task's work is a fixed sample
// budget that a larger batch finishes in fewer steps.
#include "operator/engine/profile_configs.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "operator/api/load.h"
#include "operator/api/yaml.h"
#include "operator/engine/estimate.h"
#include "operator/planner/planner.h"

namespace orrery::engine {
namespace {

api::LoadedJob Load(const std::string& yaml) {
  auto json = api::YamlToJson(yaml);
  EXPECT_TRUE(json.ok()) << json.status();
  auto job = api::LoadJob(*json);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

const char* kJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: t}
spec:
  tasks:
  - name: mlp
    model: {mlp: {layers: 4, hidden: 64, inputs: 16, outputs: 10}}
    data: {synthetic: {seed: 7, samples: 1000000}}
    training: {epochs: 5, batchSize: 256, optimizer: sgd, learningRate: 0.1}
  resources:
    templates: [ddp, fsdp]
    gpusPerTask: {min: 1, max: 8}
    gpuQuota: 8
  profiling: {gpuCounts: [1, 4, 8]}
  elasticity: {enabled: false, minBatchSize: 64, maxBatchSize: 1024}
)";

using Key = std::tuple<api::Template, int, int64_t>;

// A store: measured points by (template, GPUs, batch), some infeasible.
struct Store {
  std::map<Key, ProfilePoint> points;
  void Measure(api::Template t, int g, int64_t b, double samples_per_s) {
    points[{t, g, b}] = {ProfilePoint::State::kMeasured, samples_per_s, 1.5};
  }
  ProfileLookup Lookup() const {
    return [this](api::Template t, int g, int64_t b) {
      auto it = points.find({t, g, b});
      return it == points.end() ? ProfilePoint{} : it->second;
    };
  }
};

TEST(CandidateBatches, OnlyTheTasksOwnWhenNotElastic) {
  api::LoadedJob job = Load(kJob);
  EXPECT_EQ(CandidateBatches(job.job.spec, 256), (std::vector<int64_t>{256}));
}

TEST(CandidateBatches, NearestPowersOfTwoWithinBoundsAtMostThreeOwnFirst) {
  api::LoadedJob job = Load(kJob);
  api::ModelSelectionJobSpec& spec = job.job.spec;
  spec.elasticity.enabled = true;
  EXPECT_EQ(CandidateBatches(spec, 256), (std::vector<int64_t>{256, 128, 512}));
  // At the upper bound only fractions remain; at the lower only multiples.
  EXPECT_EQ(CandidateBatches(spec, 1024), (std::vector<int64_t>{1024, 256, 512}));
  EXPECT_EQ(CandidateBatches(spec, 64), (std::vector<int64_t>{64, 128, 256}));
  // An odd batch has no whole half.
  EXPECT_EQ(CandidateBatches(spec, 96), (std::vector<int64_t>{96, 192, 384}));
  spec.elasticity.min_batch_size = 100;
  spec.elasticity.max_batch_size = 300;
  EXPECT_EQ(CandidateBatches(spec, 150), (std::vector<int64_t>{150, 300}));
  // The task's own stays even outside bounds set by hand.
  EXPECT_EQ(CandidateBatches(spec, 80), (std::vector<int64_t>{80, 160}));
}

TEST(BuildTaskConfigs, NotElasticIsOneBatchWithInterpolation) {
  api::LoadedJob job = Load(kJob);
  const api::ModelSelectionJobSpec& spec = job.job.spec;
  Store store;
  store.Measure(api::Template::kDdp, 1, 256, 100);
  store.Measure(api::Template::kDdp, 4, 256, 340);
  store.Measure(api::Template::kFsdp, 1, 256, 90);
  store.points[{api::Template::kFsdp, 4, 256}] = {ProfilePoint::State::kInfeasible, 0, 0};
  // An elastic-only batch in the store changes nothing.
  store.Measure(api::Template::kDdp, 4, 512, 999);

  TaskConfigs tc = BuildTaskConfigs(spec, job.tasks[0].task, store.Lookup(), 8);
  ASSERT_EQ(tc.configs.size(), 5u);  // ddp 1,2,3,4 and fsdp 1
  for (const planner::Config& c : tc.configs) EXPECT_EQ(c.batch_size, 256);
  EXPECT_EQ(tc.configs[1].gpus, 2);
  EXPECT_DOUBLE_EQ(tc.configs[1].throughput, 180);
  EXPECT_EQ(tc.configs[2].gpus, 3);
  EXPECT_DOUBLE_EQ(tc.configs[2].throughput, 260);
  EXPECT_DOUBLE_EQ(tc.configs[3].memory_gib, 1.5);
  EXPECT_EQ(tc.templates[4], api::Template::kFsdp);
  EXPECT_EQ(tc.configs[4].template_name, "fsdp");
  // Missing: ddp×8 and fsdp×8 at the task's batch; the infeasible one is known.
  ASSERT_EQ(tc.missing.size(), 2u);
  EXPECT_EQ(tc.missing[0], (ProfileKeyRef{api::Template::kDdp, 8, 256}));
  EXPECT_EQ(tc.missing[1], (ProfileKeyRef{api::Template::kFsdp, 8, 256}));

  // Fewer GPUs: larger counts are neither planned nor missing.
  TaskConfigs small = BuildTaskConfigs(spec, job.tasks[0].task, store.Lookup(), 2);
  EXPECT_EQ(small.configs.size(), 2u);
  EXPECT_TRUE(small.missing.empty());
}

TEST(BuildTaskConfigs, ElasticOffersBatchesWithinBoundsThatSplit) {
  api::LoadedJob job = Load(kJob);
  api::ModelSelectionJobSpec& spec = job.job.spec;
  spec.elasticity.enabled = true;
  spec.resources.templates = {api::Template::kDdp};
  spec.profiling.gpu_counts = {1, 3, 4};
  Store store;
  for (int64_t b : {128, 256, 512}) {
    store.Measure(api::Template::kDdp, 1, b, 100);
    store.Measure(api::Template::kDdp, 4, b, 300 + b / 4.0);
  }
  TaskConfigs tc = BuildTaskConfigs(spec, job.tasks[0].task, store.Lookup(), 8);
  // Per batch: 1, 2 (interpolated) and 4 GPUs; 3 GPUs split none of them, so it
  // is neither profiled nor interpolated.
  ASSERT_EQ(tc.configs.size(), 9u);
  std::map<int64_t, int> per_batch;
  for (const planner::Config& c : tc.configs) {
    ++per_batch[c.batch_size];
    EXPECT_GE(c.batch_size, *spec.elasticity.min_batch_size);
    EXPECT_LE(c.batch_size, *spec.elasticity.max_batch_size);
    EXPECT_EQ(c.batch_size % c.gpus, 0) << c.gpus << " GPUs, batch " << c.batch_size;
    EXPECT_NE(c.gpus, 3);
  }
  EXPECT_EQ(per_batch, (std::map<int64_t, int>{{128, 3}, {256, 3}, {512, 3}}));
  EXPECT_TRUE(tc.missing.empty());
  // Throughput comes from the profile at the configuration's own batch.
  EXPECT_DOUBLE_EQ(tc.configs[8].throughput, 300 + 512 / 4.0);
  EXPECT_EQ(tc.configs[8].gpus, 4);

  // Nothing cached: the missing keys carry their batch, 3 GPUs excluded.
  TaskConfigs empty = BuildTaskConfigs(spec, job.tasks[0].task, Store{}.Lookup(), 8);
  EXPECT_TRUE(empty.configs.empty());
  std::vector<ProfileKeyRef> want;
  for (int64_t b : {256, 128, 512}) {
    want.push_back({api::Template::kDdp, 1, b});
    want.push_back({api::Template::kDdp, 4, b});
  }
  EXPECT_EQ(empty.missing, want);
}

TEST(SampleBudget, ALargerBatchFinishesTheSameSamplesInFewerSteps) {
  api::LoadedJob job = Load(kJob);
  const api::TaskSpec& t = job.tasks[0].task;
  // 5 epochs of 1e6 samples at 256: 5 × 3906 steps, 4999680 samples.
  ASSERT_EQ(SampleBudget(t), 19530 * 256);
  EXPECT_EQ(StepsForBudget(SampleBudget(t), 0, 0, 256), 19530);
  EXPECT_EQ(StepsForBudget(SampleBudget(t), 0, 0, 512), 9765);
  EXPECT_EQ(StepsForBudget(SampleBudget(t), 0, 0, 1024), 4883);  // 4882.5, rounded up
  // A resume at 512 from step 1001 at 256: the worker's step count carries on,
  // 4743424 samples left are 9264.5 steps, rounded up.
  EXPECT_EQ(StepsForBudget(SampleBudget(t), 1001, 1001 * 256, 512), 1001 + 9265);
  // A resume at the same batch is the task's own total.
  EXPECT_EQ(StepsForBudget(SampleBudget(t), 1001, 1001 * 256, 256), 19530);
  // Budget already spent: no further step.
  EXPECT_EQ(StepsForBudget(100, 7, 200, 64), 7);
}

// A step-time model with a fixed synchronisation cost per step on more than one
// GPU (gradient all-reduce) and a compute cost per sample: a larger batch
// amortises the fixed cost, so throughput grows with the batch.
ProfileLookup SyncBoundModel(double sync_s, double per_sample_s) {
  return [=](api::Template, int g, int64_t b) {
    double step = static_cast<double>(b) * per_sample_s / g + (g > 1 ? sync_s : 0.0);
    return ProfilePoint{ProfilePoint::State::kMeasured, static_cast<double>(b) / step, 1};
  };
}

struct Planned {
  double makespan = 0;
  std::vector<int> batches;  // by task, of the configuration the plan names
};

Planned PlanTwoTasks(const api::ModelSelectionJobSpec& spec, const api::TaskSpec& task,
                     const ProfileLookup& lookup) {
  planner::Problem problem;
  problem.nodes.push_back({"n0", 4, 80});
  for (const char* name : {"a", "b"}) {
    planner::Task t;
    t.name = name;
    t.work = static_cast<double>(SampleBudget(task));
    t.configs = BuildTaskConfigs(spec, task, lookup, 4).configs;
    problem.tasks.push_back(t);
  }
  auto planner = planner::MakeOrreryPlanner();
  planner::PlanOptions options;
  options.max_nodes = 2000;
  auto plan = planner->Solve(problem, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  Planned out;
  if (!plan.ok()) return out;
  out.makespan = plan->makespan;
  for (size_t t = 0; t < plan->assignments.size(); ++t) {
    const planner::Task& task_t = problem.tasks[t];
    out.batches.push_back(
        task_t.configs[static_cast<size_t>(plan->assignments[t].config)].batch_size);
  }
  return out;
}

TEST(BuildTaskConfigs, ThePlannerPicksALargerBatchWhenThroughputScalesWithIt) {
  api::LoadedJob job = Load(kJob);
  api::ModelSelectionJobSpec spec = job.job.spec;
  spec.resources.templates = {api::Template::kDdp};
  spec.profiling.gpu_counts = {1, 2, 4};
  const api::TaskSpec& task = job.tasks[0].task;
  ProfileLookup model = SyncBoundModel(0.5, 0.01);

  Planned fixed = PlanTwoTasks(spec, task, model);
  spec.elasticity.enabled = true;
  Planned elastic = PlanTwoTasks(spec, task, model);
  // Fixed: both at 256. Elastic: both at the largest batch, 512 (the most
  // samples per second on every GPU count), sooner by the amortised sync.
  EXPECT_EQ(fixed.batches, (std::vector<int>{256, 256}));
  EXPECT_EQ(elastic.batches, (std::vector<int>{512, 512}));
  EXPECT_LT(elastic.makespan, 0.9 * fixed.makespan);

  // When a larger batch is slower (here: per-sample cost rising with the
  // batch, as under memory pressure), the planner stays at or below the task's own.
  ProfileLookup slower = [](api::Template, int g, int64_t b) {
    double step = static_cast<double>(b) * (0.01 + 1e-4 * static_cast<double>(b)) / g;
    return ProfilePoint{ProfilePoint::State::kMeasured, static_cast<double>(b) / step, 1};
  };
  Planned small = PlanTwoTasks(spec, task, slower);
  EXPECT_EQ(small.batches, (std::vector<int>{128, 128}));
}

const char* kGptJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: g}
spec:
  tasks:
  - name: gpt2
    model: {gpt: {layers: 12, hidden: 768, heads: 12, seqLen: 1024, vocab: 50257}}
    data: {synthetic: {seed: 7, samples: 100000}}
    training: {epochs: 1, batchSize: 8, optimizer: adamw, learningRate: 0.0003}
  resources:
    templates: [ddp]
    gpusPerTask: {min: 1, max: 1}
    gpuQuota: 1
  profiling: {gpuCounts: [1]}
)";

// The configuration the planner picks for the GPT-2-sized task on one GPU of
// `gpu_memory_gib`, its parameter state profiled at 2 GiB and 10 samples/s.
planner::Config PlanGpt(double gpu_memory_gib) {
  api::LoadedJob job = Load(kGptJob);
  const api::TaskSpec& task = job.tasks[0].task;
  ProfileLookup profiled = [](api::Template, int, int64_t) {
    return ProfilePoint{ProfilePoint::State::kMeasured, 10, 2};
  };
  planner::Problem problem;
  problem.nodes.push_back({"n0", 1, gpu_memory_gib});
  planner::Task t;
  t.name = "gpt2";
  t.work = static_cast<double>(SampleBudget(task));
  t.configs = BuildTaskConfigs(job.job.spec, task, profiled, 1, /*recompute_modes=*/true).configs;
  problem.tasks.push_back(t);
  auto plan = planner::MakeOrreryPlanner()->Solve(problem, {});
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  return t.configs[static_cast<size_t>(plan->assignments[0].config)];
}

TEST(RecomputeModes, EachPointIsOfferedWithAndWithoutRecomputation) {
  api::LoadedJob job = Load(kGptJob);
  ProfileLookup profiled = [](api::Template, int, int64_t) {
    return ProfilePoint{ProfilePoint::State::kMeasured, 10, 2};
  };
  TaskConfigs tc = BuildTaskConfigs(job.job.spec, job.tasks[0].task, profiled, 1, true);
  ASSERT_EQ(tc.configs.size(), 2u);
  const planner::Config& none = tc.configs[0];
  const planner::Config& unit = tc.configs[1];
  EXPECT_EQ(none.recompute, "none");
  EXPECT_EQ(unit.recompute, "unit");
  // Recomputing runs one more forward (6N -> 8N) and keeps a block's input
  // instead of its activations: about 13.6 GiB against about 4.3 GiB at batch
  // 8 beyond the step's peak (Korthikanti et al.'s count, float32, no dropout;
  // with the logits, less the gradients not yet there), each over the 2 GiB
  // of parameter state the profile measured.
  EXPECT_DOUBLE_EQ(unit.throughput, 7.5);
  EXPECT_NEAR(none.memory_gib, 2 + 13.6, 0.5);
  EXPECT_NEAR(unit.memory_gib, 2 + 4.3, 0.5);
  // Without the flag (the Kubernetes world): one configuration, as profiled.
  TaskConfigs plain = BuildTaskConfigs(job.job.spec, job.tasks[0].task, profiled, 1);
  ASSERT_EQ(plain.configs.size(), 1u);
  EXPECT_EQ(plain.configs[0].memory_gib, 2);
}

TEST(RecomputeModes, ThePlannerRecomputesOnlyWhenTheModelDoesNotFitWithout) {
  // 80 GiB: both fit, and not recomputing is faster.
  planner::Config roomy = PlanGpt(80);
  EXPECT_EQ(roomy.recompute, "none");
  EXPECT_DOUBLE_EQ(roomy.throughput, 10);
  // 12 GiB: the kept activations do not fit; recomputing does.
  planner::Config tight = PlanGpt(12);
  EXPECT_EQ(tight.recompute, "unit");
  EXPECT_LE(tight.memory_gib, 12);
}

TEST(RecomputeModes, SpillAlwaysRecomputes) {
  api::LoadedJob job = Load(kGptJob);
  api::ModelSelectionJobSpec spec = job.job.spec;
  spec.resources.templates = {api::Template::kSpill};
  ProfileLookup profiled = [](api::Template, int, int64_t) {
    return ProfilePoint{ProfilePoint::State::kMeasured, 5, 1};
  };
  TaskConfigs tc = BuildTaskConfigs(spec, job.tasks[0].task, profiled, 1, true);
  ASSERT_EQ(tc.configs.size(), 1u);
  EXPECT_EQ(tc.configs[0].recompute, "unit");
}

// Measured peaks (contract::ProfileEntry::device_allocated_bytes) replace the
// memory model where a profile has one.
constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

// The GPT-2-sized task's point: 10 samples/s, `parameters_gib` of parameter
// state (device_parameters), and a peak of `peak_gib` measured in `mode` (0: a
// profile from before peaks).
ProfileLookup PeakAt(double peak_gib, const std::string& mode = "", double parameters_gib = 2) {
  return [=](api::Template, int, int64_t) {
    ProfilePoint p{ProfilePoint::State::kMeasured, 10, parameters_gib};
    p.measured_peak_gib = peak_gib;
    p.measured_recompute = mode;
    return p;
  };
}

// The configuration the planner picks for the GPT-2-sized task on one GPU of
// `gpu_memory_gib` from `lookup`; nullopt when it finds none that fits.
std::optional<planner::Config> Pick(const ProfileLookup& lookup, double gpu_memory_gib) {
  api::LoadedJob job = Load(kGptJob);
  planner::Problem problem;
  problem.nodes.push_back({"n0", 1, gpu_memory_gib});
  planner::Task t;
  t.name = "gpt2";
  t.work = static_cast<double>(SampleBudget(job.tasks[0].task));
  t.configs = BuildTaskConfigs(job.job.spec, job.tasks[0].task, lookup, 1, true).configs;
  problem.tasks.push_back(t);
  auto plan = planner::MakeOrreryPlanner()->Solve(problem, {});
  if (!plan.ok()) return std::nullopt;
  return t.configs[static_cast<size_t>(plan->assignments[0].config)];
}

// Activations the model gives the task in `mode` (ddp on one GPU, batch 8), GiB.
double ActivationGib(const std::string& mode) {
  api::LoadedJob job = Load(kGptJob);
  auto bytes = ActivationBytes(job.tasks[0].task, "ddp", 1, 8, mode);
  EXPECT_TRUE(bytes.has_value());
  return bytes.value_or(0) / kGib;
}

TEST(MeasuredPeak, OverTheDeviceIsRefusedThoughTheEstimateFits) {
  // The model alone: 2 + 13.6 GiB without recomputation fits 24 GiB and is faster.
  std::optional<planner::Config> modelled = Pick(PeakAt(0), 24);
  ASSERT_TRUE(modelled.has_value());
  EXPECT_EQ(modelled->recompute, "none");
  // The profile measured 30 GiB without recomputation: that configuration
  // is not picked; recomputing (30 GiB less the activations it drops) is.
  std::optional<planner::Config> measured = Pick(PeakAt(30, "none"), 24);
  ASSERT_TRUE(measured.has_value());
  EXPECT_EQ(measured->recompute, "unit");
  EXPECT_LE(measured->memory_gib, 24);
  // Over the device in both modes: nothing is offered that fits.
  EXPECT_FALSE(Pick(PeakAt(40, "none"), 24).has_value());
}

TEST(MeasuredPeak, BelowTheEstimateLetsTheFasterModeRun) {
  // The model alone recomputes on 12 GiB (2 + 13.6 GiB does not fit) ...
  std::optional<planner::Config> modelled = Pick(PeakAt(0), 12);
  ASSERT_TRUE(modelled.has_value());
  EXPECT_EQ(modelled->recompute, "unit");
  // ... but the profile measured 10 GiB without recomputation: it runs so.
  std::optional<planner::Config> measured = Pick(PeakAt(10, "none"), 12);
  ASSERT_TRUE(measured.has_value());
  EXPECT_EQ(measured->recompute, "none");
  EXPECT_DOUBLE_EQ(measured->memory_gib, 10);
  EXPECT_DOUBLE_EQ(measured->throughput, 10);
}

TEST(MeasuredPeak, TheOtherModeIsTheMeasuredPeakPlusTheModelledDifference) {
  api::LoadedJob job = Load(kGptJob);
  const api::TaskSpec& task = job.tasks[0].task;
  const double none_act = ActivationGib("none"), unit_act = ActivationGib("unit");
  ASSERT_GT(none_act, unit_act + 8);  // about 13.6 against 4.3
  // Measured without recomputation (also what "" means for ddp, its default).
  for (const std::string& mode : {std::string("none"), std::string()}) {
    TaskConfigs tc = BuildTaskConfigs(job.job.spec, task, PeakAt(20, mode), 1, true);
    ASSERT_EQ(tc.configs.size(), 2u);
    ASSERT_EQ(tc.memory_basis.size(), 2u);
    EXPECT_DOUBLE_EQ(tc.configs[0].memory_gib, 20);
    EXPECT_EQ(tc.memory_basis[0], "measured");
    EXPECT_EQ(tc.configs[1].recompute, "unit");
    EXPECT_NEAR(tc.configs[1].memory_gib, 20 - (none_act - unit_act), 1e-9);
    EXPECT_EQ(tc.memory_basis[1], "from the measured none peak");
  }
  // Measured recomputing: the mode without it adds the activations back, and
  // runs faster than the speed measured (which is the recomputing mode's).
  TaskConfigs tc = BuildTaskConfigs(job.job.spec, task, PeakAt(7, "unit"), 1, true);
  ASSERT_EQ(tc.configs.size(), 2u);
  EXPECT_NEAR(tc.configs[1].throughput, 10, 1e-9);
  EXPECT_NEAR(tc.configs[0].throughput, 10 / kRecomputeThroughput, 1e-9);
  EXPECT_EQ(tc.configs[0].recompute, "none");
  EXPECT_NEAR(tc.configs[0].memory_gib, 7 + (none_act - unit_act), 1e-9);
  EXPECT_EQ(tc.memory_basis[0], "from the measured unit peak");
  EXPECT_DOUBLE_EQ(tc.configs[1].memory_gib, 7);
  EXPECT_EQ(tc.memory_basis[1], "measured");
  // Never below the parameter state, though a small measured peak less the
  // modelled activations would be: weights, gradients and AdamW's moments (16
  // bytes a parameter, about 2.43 GiB here: 163M parameters) ...
  const auto state = ParameterStateBytes(task, "ddp", 1);
  ASSERT_TRUE(state.has_value());
  EXPECT_NEAR(*state / kGib, 2.43, 0.01);
  TaskConfigs floor = BuildTaskConfigs(job.job.spec, task, PeakAt(5, "none", 1), 1, true);
  ASSERT_EQ(floor.configs.size(), 2u);
  EXPECT_DOUBLE_EQ(floor.configs[1].memory_gib, *state / kGib);
  // ... or the profile's device_parameters where that is larger.
  floor = BuildTaskConfigs(job.job.spec, task, PeakAt(5, "none", 2.5), 1, true);
  ASSERT_EQ(floor.configs.size(), 2u);
  EXPECT_DOUBLE_EQ(floor.configs[1].memory_gib, 2.5);
}

TEST(MeasuredPeak, AProfileWithoutOnePlansAsBefore) {
  api::LoadedJob job = Load(kGptJob);
  TaskConfigs tc = BuildTaskConfigs(job.job.spec, job.tasks[0].task, PeakAt(0), 1, true);
  ASSERT_EQ(tc.configs.size(), 2u);
  // The parameter state the profile measured plus the modelled activations.
  EXPECT_DOUBLE_EQ(tc.configs[0].memory_gib, 2 + ActivationGib("none"));
  EXPECT_DOUBLE_EQ(tc.configs[1].memory_gib, 2 + ActivationGib("unit"));
  EXPECT_EQ(tc.memory_basis, (std::vector<std::string>{"modelled", "modelled"}));
  std::optional<planner::Config> tight = Pick(PeakAt(0), 12);
  ASSERT_TRUE(tight.has_value());
  EXPECT_EQ(tight->recompute, "unit");
  // A contract::ProfileEntry of an older cache carries neither field.
  contract::ProfileEntry old;
  old.samples_per_s = 10;
  old.peak_memory_bytes = 2 * kGib;
  ProfilePoint p = PointFromProfile(old);
  EXPECT_EQ(p.state, ProfilePoint::State::kMeasured);
  EXPECT_DOUBLE_EQ(p.memory_gib, 2);
  EXPECT_EQ(p.measured_peak_gib, 0);
  // One that has them.
  old.device_allocated_bytes = 12 * kGib;
  old.recompute = "unit";
  p = PointFromProfile(old);
  EXPECT_DOUBLE_EQ(p.measured_peak_gib, 12);
  EXPECT_EQ(p.measured_recompute, "unit");
}

TEST(MeasuredPeak, AnInterpolatedGpuCountKeepsTheSmallerCountsPeak) {
  api::LoadedJob job = Load(kGptJob);
  api::ModelSelectionJobSpec spec = job.job.spec;
  spec.resources.gpus_per_task.max = 4;
  spec.resources.gpu_quota = 4;
  spec.profiling.gpu_counts = {1, 4};
  ProfileLookup lookup = [](api::Template, int g, int64_t) {
    ProfilePoint p{ProfilePoint::State::kMeasured, 10.0 * g, 2};
    p.measured_peak_gib = g == 1 ? 20 : 8;
    p.measured_recompute = "none";
    return p;
  };
  TaskConfigs tc = BuildTaskConfigs(spec, job.tasks[0].task, lookup, 4, true);
  bool saw_two = false;
  for (size_t k = 0; k < tc.configs.size(); ++k) {
    const planner::Config& c = tc.configs[k];
    if (c.gpus != 2 || c.recompute != "none") continue;
    saw_two = true;
    EXPECT_DOUBLE_EQ(c.memory_gib, 20);
    EXPECT_EQ(tc.memory_basis[k], "measured");
  }
  EXPECT_TRUE(saw_two);
}

}  // namespace
}  // namespace orrery::engine
