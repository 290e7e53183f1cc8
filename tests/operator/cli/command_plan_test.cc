// `orrery plan` on the real binary: a plan for a cluster shape with its Gantt
// chart, measured profiles from the cache where they exist, estimates elsewhere.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/operator/cli/run_orrery.h"

namespace orrery::cli::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PlanCommandTest, PlansEveryTaskAndDrawsTheGantt) {
  TempFiles files("plan_gantt");
  std::string svg = files.Write("plan.svg", "");
  std::string cache = files.Write("empty-cache.json", "{\"entries\": []}");
  RunResult r = RunOrrery("plan " + Example("gpt-finetune-sweep.yaml") + " --gpus 2x8 --svg " +
                          svg + " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 2x8 cuda (12 tasks; 0 profiled configurations"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("makespan "), std::string::npos);
  EXPECT_NE(r.output.find("lower bound "), std::string::npos);
  EXPECT_NE(r.output.find("current practice"), std::string::npos);
  EXPECT_NE(r.output.find("~"), std::string::npos);  // estimates are marked
  std::string chart = ReadAll(svg);
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  // One bar per task, each labelled with its name in the tooltip or the bar.
  for (const char* task : {"gpt2-ft-lr-3e-5-bs-32-wu-100", "gpt2-ft-lr-3e-4-bs-64-wu-500"}) {
    EXPECT_NE(r.output.find(task), std::string::npos) << task;
    EXPECT_NE(chart.find(task), std::string::npos) << task;
  }
}

// Four GPT-2 774M-shaped tasks that fit a 16 GiB GPU only spilled: on two
// GPUs they share them in interleaved pairs (Hydra), on four each runs alone.
TEST(PlanCommandTest, SpilledTasksShareAGpuOnlyWhereGpusAreScarce) {
  TempFiles files("plan_interleaved");
  const std::string job = files.Write("spilled.yaml", R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: spilled}
spec:
  tasks:
  - name: large
    model: {gpt: {layers: 36, hidden: 1280, heads: 20, seqLen: 1024, vocab: 50257}}
    data: {synthetic: {seed: 1, samples: 100000}}
    training: {steps: 2000, batchSize: 8, learningRate: 2.5e-4}
    searchSpace: {grid: {learningRate: [1e-4, 2e-4, 3e-4, 4e-4]}}
  resources:
    templates: [ddp, spill]
    gpusPerTask: {min: 1, max: 1}
    gpuQuota: 8
  scheduling: {objective: makespan}
)");
  const std::string cache = files.Write("empty-cache.json", "{\"entries\": []}");
  const std::string svg = files.Write("plan.svg", "");
  auto plan = [&](const std::string& shape) {
    return RunOrrery("plan " + job + " --gpus " + shape + " --gpu-memory-gib 16 --svg " + svg +
                     " --profile-cache " + cache);
  };
  RunResult scarce = plan("1x2");
  ASSERT_EQ(scarce.exit_code, 0) << scarce.output;
  EXPECT_NE(scarce.output.find("interleaved gangs (Hydra"), std::string::npos) << scarce.output;
  EXPECT_NE(scarce.output.find("without them the makespan is"), std::string::npos);
  EXPECT_NE(scarce.output.find(" interleaved "), std::string::npos) << scarce.output;
  // The gang's row starts with its name, "a+b", and the chart has its bar.
  const size_t plus = scarce.output.find('+');
  ASSERT_NE(plus, std::string::npos);
  const size_t row = scarce.output.rfind('\n', plus) + 1;
  const std::string gang = scarce.output.substr(row, scarce.output.find(' ', row) - row);
  EXPECT_NE(ReadAll(svg).find(gang), std::string::npos) << gang;
  RunResult plenty = plan("1x4");
  ASSERT_EQ(plenty.exit_code, 0) << plenty.output;
  EXPECT_EQ(plenty.output.find("interleaved gangs"), std::string::npos) << plenty.output;
  EXPECT_EQ(plenty.output.find(" interleaved "), std::string::npos) << plenty.output;
  EXPECT_NE(plenty.output.find("spill"), std::string::npos) << plenty.output;
}

TEST(PlanCommandTest, MeasuredProfilesReplaceEstimates) {
  TempFiles files("plan_cache");
  std::string svg = files.Write("plan.svg", "");
  // The quickstart's model on one and two CPU devices, as orrery run records it.
  std::string cache = files.Write("profiles.json", R"({"version": 1, "entries": [
    {"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": "single", "gpus": 1,
     "batchSize": 8, "device": "cpu", "samplesPerSecond": 400},
    {"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": "ddp", "gpus": 2,
     "batchSize": 8, "device": "cpu", "samplesPerSecond": 700}]})");
  RunResult r = RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 1x2 --device cpu --svg " +
                          svg + " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each point with and without activation recomputation: 2 x 6.
  EXPECT_NE(r.output.find("12 profiled configurations, 0 estimated"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" 400.0\n"), std::string::npos) << r.output;  // measured, unmarked
  // The small model fits either way, and not recomputing is faster.
  EXPECT_NE(r.output.find("recompute"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("unit "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("~400"), std::string::npos) << r.output;
}

// A profile's measured peak is the configuration's memory: one over the
// device's is not offered, and the plan says so (the other recomputation
// mode too, derived from it); the estimate alone would have fitted.
TEST(PlanCommandTest, AMeasuredPeakOverTheDeviceIsNotOfferedAndSaysWhy) {
  TempFiles files("plan_peak");
  std::string svg = files.Write("plan.svg", "");
  const std::string one = R"({"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": )"
                          R"("single", "gpus": 1, "batchSize": 8, "device": "cpu", )"
                          R"("samplesPerSecond": 400, "peakMemoryBytes": 1048576)";
  const std::string two = R"({"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": )"
                          R"("ddp", "gpus": 2, "batchSize": 8, "device": "cpu", )"
                          R"("samplesPerSecond": 700, "peakMemoryBytes": 1048576})";
  const std::string args = " --gpus 1x2 --device cpu --gpu-memory-gib 1 --svg " + svg;
  // Without a measured peak (an older cache): one GPU's 1 MiB of state and
  // the tiny model's activations fit 1 GiB, and every configuration is offered.
  std::string old_cache =
      files.Write("old.json", R"({"version": 1, "entries": [)" + one + "}, " + two + "]}");
  RunResult r =
      RunOrrery("plan " + Example("quickstart.yaml") + args + " --profile-cache " + old_cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("12 profiled configurations"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not offered"), std::string::npos) << r.output;
  // One GPU measured at 1.5 GiB: over the device in both modes.
  std::string cache =
      files.Write("profiles.json", R"({"version": 1, "entries": [)" + one +
                                       R"(, "deviceAllocatedBytes": 1610612736, "recompute": )"
                                       R"("none"}, )" +
                                       two + "]}");
  r = RunOrrery("plan " + Example("quickstart.yaml") + args + " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("6 profiled configurations"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not offered, over the 1.0 GiB per GPU a configuration may use "
                          "(--gpu-memory-gib):"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ddp x1, batch 8, recompute none: 1.50 GiB (measured)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ddp x1, batch 8, recompute unit: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(from the measured none peak)"), std::string::npos) << r.output;
  // Every task runs on both GPUs then.
  EXPECT_EQ(r.output.find(" 400.0\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 700.0\n"), std::string::npos) << r.output;
}

// On a GPU a configuration may fill the device's memory less what CUDA's
// context, NCCL and the caching allocator keep beside its peak
// (--gpu-memory-reserve, 1.5Gi+5% by default): a 1.5 GiB peak fits a 2.5 GiB
// device's label but not the 0.95 GiB left, and is not offered; without a
// reserve it is. A reserve that does not parse is a usage error naming it.
TEST(PlanCommandTest, OnAGpuTheReserveBesideThePeakIsKeptFree) {
  TempFiles files("plan_reserve");
  std::string svg = files.Write("plan.svg", "");
  const std::string entry = R"({"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": )"
                            R"("single", "gpus": 1, "batchSize": 8, "device": "cuda", )"
                            R"("samplesPerSecond": 400, "peakMemoryBytes": 1048576, )"
                            R"("deviceAllocatedBytes": 1610612736, "recompute": "none"})";
  const std::string two = R"({"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": )"
                          R"("ddp", "gpus": 2, "batchSize": 8, "device": "cuda", )"
                          R"("samplesPerSecond": 700, "peakMemoryBytes": 1048576, )"
                          R"("deviceAllocatedBytes": 524288000, "recompute": "none"})";
  std::string cache =
      files.Write("profiles.json", R"({"version": 1, "entries": [)" + entry + ", " + two + "]}");
  const std::string args = "plan " + Example("quickstart.yaml") +
                           " --gpus 1x2 --device cuda --gpu-memory-gib 2.5 --svg " + svg +
                           " --profile-cache " + cache;
  RunResult r = RunOrrery(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not offered, over the 0.9 GiB per GPU a configuration may use "
                          "(--gpu-memory-gib 2.5 less --gpu-memory-reserve 1.5Gi+5%):"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ddp x1, batch 8, recompute none: 1.50 GiB (measured)"),
            std::string::npos)
      << r.output;
  r = RunOrrery(args + " --gpu-memory-reserve 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("ddp x1, batch 8, recompute none: 1.50 GiB (measured)"),
            std::string::npos)
      << r.output;
  r = RunOrrery(args + " --gpu-memory-reserve 2GB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--gpu-memory-reserve=2GB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("e.g. 1.5Gi+5%"), std::string::npos) << r.output;
}

// `orrery plan` offers the planner what the operator and `orrery run` would
// (engine::BuildTaskConfigs): gangs on one node, and an elastic job's other
// batch sizes, each keyed in the cache as orrery run keys it.
TEST(PlanCommandTest, OffersWhatTheOperatorWouldOfferElasticBatchesAndOneNodeGangs) {
  TempFiles files("plan_engine");
  std::string svg = files.Write("plan.svg", "");
  std::string quickstart = ReadAll(Example("quickstart.yaml"));
  // The example with its data path made absolute, elastic, and allowed 4 GPUs.
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = quickstart.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    quickstart.replace(at, from.size(), to);
  };
  replace("path: data/corpus/quickstart.txt",
          "path: " + std::string(ORRERY_SOURCE_DIR) + "/data/corpus/quickstart.txt");
  replace("gpusPerTask: {min: 1, max: 2}\n    gpuQuota: 2",
          "gpusPerTask: {min: 1, max: 4}\n    gpuQuota: 4");
  replace("  checkpoints:",
          "  elasticity: {enabled: true, minBatchSize: 8, maxBatchSize: 32}\n  checkpoints:");
  std::string job = files.Write("elastic.yaml", quickstart);
  // Measured: the task's own batch at 1 GPU; everything else is estimated.
  std::string cache = files.Write("profiles.json", R"({"version": 1, "entries": [
    {"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": "single", "gpus": 1,
     "batchSize": 8, "device": "cpu", "samplesPerSecond": 400}]})");
  RunResult r = RunOrrery("plan " + job + " --gpus 2x2 --device cpu --svg " + svg +
                          " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 3 tasks x (batches 8, 16, 32) x (1, 2 GPUs: a gang never spans the 2-GPU
  // nodes) x (with and without recomputation) = 36 configurations, 6 of them
  // measured.
  EXPECT_NE(r.output.find("6 profiled configurations, 30 estimated"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("batch"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" 4     "), std::string::npos) << "no 4-GPU gang on 2-GPU nodes\n"
                                                         << r.output;
}

// The example's claim "models" as this machine holds it: the two models'
// config.json (their public values), no weights.
const char* kLlama32_1b = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
  "tie_word_embeddings": true, "max_position_embeddings": 131072, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
  "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
const char* kGpt2 = R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
  "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})";

TEST(PlanCommandTest, PretrainedModelsAreSizedFromTheirConfig) {
  TempFiles files("plan_pretrained");
  std::string svg = files.Write("plan.svg", "");
  std::string cache = files.Write("empty-cache.json", "{\"entries\": []}");
  std::string claim = std::filesystem::path(svg).parent_path().string() + "/models";
  std::filesystem::create_directories(claim + "/Llama-3.2-1B");
  std::filesystem::create_directories(claim + "/gpt2");
  std::ofstream(claim + "/Llama-3.2-1B/config.json") << kLlama32_1b;
  std::ofstream(claim + "/gpt2/config.json") << kGpt2;
  const std::string plan = "plan " + Example("finetune-lora-sweep.yaml") + " --gpus 2x8 --svg " +
                           svg + " --profile-cache " + cache;

  // On the claim only the pods mount: no size, no profile, no plan.
  RunResult r = RunOrrery(plan);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot be estimated (size unknown: /models/Llama-3.2-1B/config.json "
                          "is not readable here (it is on claim models, which only the worker "
                          "pods mount)"),
            std::string::npos)
      << r.output;

  // With the claim's files here, config.json sizes each model.
  r = RunOrrery(plan + " --volume models=" + claim);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(7 tasks; 0 profiled configurations"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpt2-full: gpt2 config.json: 124.44M parameters, 42.53M trained "
                          "(embeddings and first 6 blocks frozen)"),
            std::string::npos)
      << r.output;
  // Llama 3.2 1B: 1,235,814,400 parameters; LoRA r=8 on q, k, v, o adds
  // 16 x 8 x ((2048 + 2048) x 2 + (2048 + 512) x 2) = 1,703,936.
  EXPECT_NE(r.output.find("llama-lora: llama config.json: 1.24B parameters, 1.70M trained "
                          "(LoRA r=8)"),
            std::string::npos)
      << r.output;

  // A config.json that contradicts the spec is an error naming the field.
  std::ofstream(claim + "/gpt2/config.json")
      << R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 4, "vocab_size": 100})";
  r = RunOrrery(plan + " --volume models=" + claim);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("spec.tasks[1].fineTuning.freezeBlocks: must be at most the model's 4 "
                          "blocks (/models/gpt2/config.json)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(RunOrrery(plan + " --volume models").exit_code, 2);
}

// Under weightedCompletionTime the bound and gap are on the weighted
// completion time: shown as its weighted mean, not as a makespan bound (a
// "lower bound" longer than the makespan read as nonsense).
TEST(PlanCommandTest, AWeightedCompletionPlanShowsItsBoundAsAMeanCompletion) {
  TempFiles files("plan_weighted");
  std::string svg = files.Write("plan.svg", "");
  std::string cache = files.Write("empty-cache.json", "{\"entries\": []}");
  RunResult r =
      RunOrrery("plan " + Example("mixed-sizes.yaml") + " --gpus 1x8 --gpu-memory-gib 24 --svg " +
                svg + " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("; weighted mean completion "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", its lower bound "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("makespan 0:00, lower bound"), std::string::npos);
  EXPECT_EQ(r.output.find(", lower bound "), std::string::npos) << r.output;
}

TEST(PlanCommandTest, BadArgumentsSayWhatToWrite) {
  RunResult r = RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("NODESxGPUS"), std::string::npos) << r.output;
  EXPECT_EQ(RunOrrery("plan --gpus 2x8").exit_code, 2);
  EXPECT_EQ(RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 2x8 --device tpu").exit_code,
            2);
  TempFiles files("plan_bad");
  std::string cache = files.Write("bad.json", "[1, 2]");
  r = RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 1x2 --profile-cache " + cache);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not a profile cache"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace orrery::cli::testing
