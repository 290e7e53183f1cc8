// Tasks to worker command lines, profile signatures, step counts and the
// first-principles estimate used before anything is profiled.
#include "operator/engine/worker_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "operator/api/load.h"
#include "operator/api/yaml.h"
#include "operator/engine/estimate.h"
#include "worker/contract/worker_args.h"

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
  - name: gpt
    model: {gpt: {layers: 2, hidden: 64, heads: 4, seqLen: 32, vocab: 256}}
    data: {text: {path: data/corpus.txt}}
    training: {steps: 200, batchSize: 8, optimizer: sgd, learningRate: 0.1, momentum: 0.8,
               schedule: cosine, warmupSteps: 20}
    searchSpace: {grid: {learningRate: [0.1, 0.01]}}
  - name: mlp
    model: {mlp: {layers: 3, hidden: 32, inputs: 16, outputs: 4}}
    data: {synthetic: {seed: 7, samples: 1000}}
    training: {epochs: 2, batchSize: 10, learningRate: 1e-3}
  resources: {gpuQuota: 4}
)";

bool Has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

TEST(WorkerCommand, TrainFlagsCarryTheTaskAndItsConfiguration) {
  api::LoadedJob job = Load(kJob);
  ASSERT_EQ(job.tasks.size(), 3u);
  LaunchConfig c;
  c.template_name = "ddp";
  c.gpus = 2;
  c.checkpoint_dir = "/ckpt/gpt";
  c.checkpoint_every = 50;
  c.keep = 3;
  c.base_dir = "/repo";
  c.lr_scaling = api::LrScaling::kSqrt;
  auto f = TrainFlags(job.tasks[1], c);  // the lr=0.01 variant
  for (const char* want : {"--model=gpt",
                           "--layers=2",
                           "--hidden=64",
                           "--heads=4",
                           "--seq=32",
                           "--vocab=256",
                           "--data=text",
                           "--data-path=/repo/data/corpus.txt",
                           "--optimizer=sgd",
                           "--lr=0.01",
                           "--momentum=0.8",
                           "--warmup-steps=20",
                           "--decay=cosine",
                           "--batch=8",
                           "--template=ddp",
                           "--steps=200",
                           "--checkpoint-dir=/ckpt/gpt",
                           "--checkpoint-every=50",
                           "--keep=3",
                           "--lr-scaling=sqrt",
                           "--threads=1"}) {
    EXPECT_TRUE(Has(f, want)) << want;
  }
  // One rank runs the plain loop; spill stays spill.
  c.gpus = 1;
  EXPECT_TRUE(Has(TrainFlags(job.tasks[1], c), "--template=single"));
  c.template_name = "spill";
  EXPECT_TRUE(Has(TrainFlags(job.tasks[1], c), "--template=spill"));
  // The MLP on synthetic data, trained for epochs, with a batch override.
  c.template_name = "fsdp";
  c.gpus = 2;
  c.batch_size = 20;
  auto m = TrainFlags(job.tasks[2], c);
  for (const char* want : {"--model=mlp", "--mlp-layers=3", "--mlp-hidden=32", "--mlp-input=16",
                           "--classes=4", "--data=synthetic", "--data-samples=1000", "--seed=7",
                           "--epochs=2", "--batch=20", "--optimizer=adamw", "--template=fsdp"}) {
    EXPECT_TRUE(Has(m, want)) << want;
  }
}

double LearningRateFlag(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (f.rfind("--lr=", 0) == 0) return std::stod(f.substr(5));
  }
  return -1;
}

// An elastic launch at another global batch: the rate follows the rule from
// the rate the task was tuned at, and --steps (the sample budget over the new
// batch) replaces --epochs.
TEST(WorkerCommand, TrainFlagsAtAnotherBatchScaleTheRateAndCarryTheSteps) {
  api::LoadedJob job = Load(kJob);
  const api::ExpandedTask& mlp = job.tasks[2];  // epochs 2, batch 10, lr 1e-3
  LaunchConfig c;
  c.template_name = "ddp";
  c.gpus = 2;
  c.batch_size = 40;
  c.steps = 50;
  c.lr_scaling = api::LrScaling::kLinear;
  auto f = TrainFlags(mlp, c);
  for (const char* want : {"--batch=40", "--lr=0.004", "--steps=50", "--lr-scaling=linear"}) {
    EXPECT_TRUE(Has(f, want)) << want;
  }
  EXPECT_EQ(std::count_if(f.begin(), f.end(),
                          [](const std::string& s) { return s.rfind("--epochs", 0) == 0; }),
            0);
  c.lr_scaling = api::LrScaling::kSqrt;
  EXPECT_TRUE(Has(TrainFlags(mlp, c), "--lr=0.002"));
  c.batch_size = 5;
  EXPECT_NEAR(LearningRateFlag(TrainFlags(mlp, c)), 1e-3 * std::sqrt(0.5), 1e-15);
  c.lr_scaling = api::LrScaling::kNone;
  EXPECT_TRUE(Has(TrainFlags(mlp, c), "--lr=0.001"));
  // The task's own batch (explicit or 0) keeps its rate under any rule, and
  // steps 0 keeps the task's own budget.
  c.lr_scaling = api::LrScaling::kLinear;
  c.batch_size = 10;
  c.steps = 0;
  auto own = TrainFlags(mlp, c);
  EXPECT_TRUE(Has(own, "--lr=0.001"));
  EXPECT_TRUE(Has(own, "--epochs=2"));
  c.batch_size = 0;
  EXPECT_TRUE(Has(TrainFlags(mlp, c), "--batch=10"));

  // The gpt task warms up for 20 steps at batch 8: 160 samples, 5 steps at 32,
  // 7 at 24 (rounded up).
  c.batch_size = 32;
  EXPECT_TRUE(Has(TrainFlags(job.tasks[0], c), "--warmup-steps=5"));
  c.batch_size = 24;
  EXPECT_TRUE(Has(TrainFlags(job.tasks[0], c), "--warmup-steps=7"));
  c.batch_size = 0;
  EXPECT_TRUE(Has(TrainFlags(job.tasks[0], c), "--warmup-steps=20"));

  EXPECT_DOUBLE_EQ(ScaledLearningRate(0.1, api::LrScaling::kLinear, 512, 256), 0.2);
  EXPECT_DOUBLE_EQ(ScaledLearningRate(0.1, api::LrScaling::kSqrt, 1024, 256), 0.2);
  EXPECT_DOUBLE_EQ(ScaledLearningRate(0.1, api::LrScaling::kNone, 1024, 256), 0.1);
  EXPECT_DOUBLE_EQ(ScaledLearningRate(0.1, api::LrScaling::kLinear, 0, 256), 0.1);
}

TEST(WorkerCommand, ProfileFlagsTimeTheTrialSteps) {
  api::LoadedJob job = Load(kJob);
  LaunchConfig c;
  c.template_name = "ddp";
  c.gpus = 2;
  auto f = ProfileFlags(job.tasks[0], c, 9);
  EXPECT_TRUE(Has(f, "--profile-steps=9"));
  EXPECT_TRUE(Has(f, "--profile-warmup=3"));
  EXPECT_FALSE(std::any_of(f.begin(), f.end(),
                           [](const std::string& s) { return s.rfind("--checkpoint", 0) == 0; }));
}

TEST(WorkerCommand, DeviceIsPassedOnlyWhenChosen) {
  api::LoadedJob job = Load(kJob);
  LaunchConfig c;
  c.template_name = "ddp";
  c.gpus = 2;
  auto none = TrainFlags(job.tasks[0], c);
  EXPECT_FALSE(std::any_of(none.begin(), none.end(),
                           [](const std::string& s) { return s.rfind("--device", 0) == 0; }));
  c.device = "cuda";
  EXPECT_TRUE(Has(TrainFlags(job.tasks[0], c), "--device=cuda"));
  EXPECT_TRUE(Has(ProfileFlags(job.tasks[0], c, 9), "--device=cuda"));
  c.device = "cpu";
  EXPECT_TRUE(Has(TrainFlags(job.tasks[0], c), "--device=cpu"));
}

TEST(WorkerCommand, PipelinesRunOneForwardOneBackward) {
  api::LoadedJob job = Load(kJob);
  LaunchConfig c;
  c.template_name = "pipeline";
  c.gpus = 2;
  EXPECT_TRUE(Has(TrainFlags(job.tasks[0], c), "--pipeline-schedule=1f1b"));
  EXPECT_TRUE(Has(ProfileFlags(job.tasks[0], c, 9), "--pipeline-schedule=1f1b"));
  c.gpus = 1;  // one rank is the plain loop: no schedule
  auto single = TrainFlags(job.tasks[0], c);
  EXPECT_FALSE(std::any_of(single.begin(), single.end(), [](const std::string& s) {
    return s.rfind("--pipeline-schedule", 0) == 0;
  }));
}

TEST(WorkerCommand, SignatureIgnoresLearningRateButNotShapeOrBatch) {
  api::LoadedJob job = Load(kJob);
  EXPECT_EQ(ModelSignature(job.tasks[0].task), ModelSignature(job.tasks[1].task));
  EXPECT_EQ(ModelSignature(job.tasks[0].task), "gpt-l2-h64-a4-s32-v256/text/b8");
  api::TaskSpec wider = job.tasks[0].task;
  wider.model.gpt->hidden = 128;
  EXPECT_NE(ModelSignature(wider), ModelSignature(job.tasks[0].task));
  api::TaskSpec bigger = job.tasks[0].task;
  bigger.training.batch_size = 16;
  EXPECT_NE(ModelSignature(bigger), ModelSignature(job.tasks[0].task));
}

TEST(WorkerCommand, TotalSteps) {
  api::LoadedJob job = Load(kJob);
  EXPECT_EQ(TotalSteps(job.tasks[0].task), 200);
  EXPECT_EQ(TotalSteps(job.tasks[2].task), 2 * 1000 / 10);  // epochs of synthetic data
}

// Fine-tunes of pre-trained models (issue 19): a LoRA sweep of a Llama-family
// directory on a volume exporting per task, and a layer-wise fine-tune of a
// GPT-2 directory given relative to the repository.
const char* kFineTune = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: ft}
spec:
  tasks:
  - name: llama
    model:
      pretrained: {path: llama-3.2-1b, seqLen: 512, volume: {claimName: models}}
    data: {text: {path: /models/corpus.txt, tokenizer: /models/llama-3.2-1b}}
    training: {steps: 100, batchSize: 8, learningRate: 1e-4}
    fineTuning: {lora: {alpha: 32, targets: [q_proj, v_proj]}}
    output:
      path: "{task}"
      dtype: bfloat16
      mergeLora: true
      volume: {claimName: results}
    searchSpace: {grid: {loraRank: [4, 8]}}
  - name: gpt2
    model: {pretrained: {path: models/gpt2, seqLen: 1024}}
    data: {tokens: {path: data/train.u16}}
    training: {steps: 100, batchSize: 8, learningRate: 1e-4}
    fineTuning: {freezeEmbeddings: true, freezeBlocks: 4}
    output: {path: out/gpt2}
  resources: {gpuQuota: 4}
)";

size_t CountPrefix(const std::vector<std::string>& flags, const std::string& prefix) {
  return static_cast<size_t>(std::count_if(
      flags.begin(), flags.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }));
}

TEST(WorkerCommand, PretrainedLoraTaskFlags) {
  api::LoadedJob job = Load(kFineTune);
  ASSERT_EQ(job.tasks.size(), 3u);
  const api::ExpandedTask& lora = job.tasks[1];  // rank 8
  ASSERT_EQ(lora.name, "llama-lora-8");
  LaunchConfig c;
  c.template_name = "fsdp";
  c.gpus = 2;
  c.base_dir = "/repo";  // nothing of this task is relative to it: all on volumes
  auto f = TrainFlags(lora, c);
  for (const char* want :
       {"--model=gpt", "--pretrained=/models/llama-3.2-1b", "--seq=512", "--lora-rank=8",
        "--lora-alpha=32", "--lora-targets=q_proj,v_proj", "--data=text",
        "--data-path=/models/corpus.txt", "--tokenizer=/models/llama-3.2-1b",
        "--export-dir=/outputs/llama-lora-8", "--export-dtype=bfloat16", "--export-merged"}) {
    EXPECT_TRUE(Has(f, want)) << want;
  }
  // config.json sets the architecture: no sizes to disagree with.
  for (const char* absent : {"--layers", "--hidden", "--heads", "--vocab", "--freeze"})
    EXPECT_EQ(CountPrefix(f, absent), 0u) << absent;
  EXPECT_EQ(ExportDir(lora, "/repo"), "/outputs/llama-lora-8");
  // A profile loads and trains the same way but exports nothing.
  auto p = ProfileFlags(lora, c, 9);
  EXPECT_TRUE(Has(p, "--pretrained=/models/llama-3.2-1b"));
  EXPECT_TRUE(Has(p, "--lora-rank=8"));
  EXPECT_EQ(CountPrefix(p, "--export"), 0u);
}

TEST(WorkerCommand, LayerWiseFineTuneFlagsResolveRelativePaths) {
  api::LoadedJob job = Load(kFineTune);
  const api::ExpandedTask& gpt2 = job.tasks[2];
  LaunchConfig c;
  c.template_name = "ddp";
  c.gpus = 1;
  c.base_dir = "/repo";
  auto f = TrainFlags(gpt2, c);
  for (const char* want : {"--pretrained=/repo/models/gpt2", "--seq=1024", "--freeze-embeddings",
                           "--freeze-blocks=4", "--export-dir=/repo/out/gpt2",
                           "--export-dtype=float32", "--data-path=/repo/data/train.u16"}) {
    EXPECT_TRUE(Has(f, want)) << want;
  }
  EXPECT_EQ(CountPrefix(f, "--lora"), 0u);
  EXPECT_EQ(CountPrefix(f, "--export-merged"), 0u);
  EXPECT_EQ(CountPrefix(f, "--tokenizer"), 0u);
  // In a pod (no base folder) a relative path is the worker's own.
  c.base_dir = "";
  EXPECT_TRUE(Has(TrainFlags(gpt2, c), "--pretrained=models/gpt2"));
  // A task without output exports nothing.
  api::LoadedJob plain = Load(kJob);
  EXPECT_EQ(CountPrefix(TrainFlags(plain.tasks[0], c), "--export"), 0u);
  EXPECT_EQ(ExportDir(plain.tasks[0], "/repo"), "");
}

TEST(WorkerCommand, SignatureKeysWhatFineTuningTrains) {
  api::LoadedJob job = Load(kFineTune);
  const std::string r4 = ModelSignature(job.tasks[0].task), r8 = ModelSignature(job.tasks[1].task);
  EXPECT_EQ(r8, "hf-/models/llama-3.2-1b@models-s512-lora8-q_proj,v_proj/text/b8");
  EXPECT_NE(r4, r8);
  api::TaskSpec alpha = job.tasks[1].task;
  alpha.fine_tuning->lora->alpha = 64;  // scales the adapters, not the work
  alpha.training.learning_rate = 3e-4;
  EXPECT_EQ(ModelSignature(alpha), r8);
  api::TaskSpec targets = job.tasks[1].task;
  targets.fine_tuning->lora->targets.push_back("o_proj");
  EXPECT_NE(ModelSignature(targets), r8);
  EXPECT_EQ(ModelSignature(job.tasks[2].task), "hf-models/gpt2-s1024-fe-fb4/tokens/b8");
}

TEST(Estimate, ScalesWithDevicesAndRespectsTemplateLimits) {
  api::LoadedJob job = Load(kJob);
  const api::TaskSpec& gpt = job.tasks[0].task;
  DeviceModel gpu = DefaultDevice("cuda");
  // The embeddings, two blocks (12h² + 13h each: weights, biases, norms), the
  // final norm and the untied head.
  EXPECT_DOUBLE_EQ(ModelParameters(gpt),
                   256 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64 + 256 * 64);
  auto one = EstimateConfig(gpt, "ddp", 1, gpu);
  auto two = EstimateConfig(gpt, "ddp", 2, gpu);
  ASSERT_TRUE(one && two);
  EXPECT_GT(two->throughput, one->throughput);
  EXPECT_LT(two->throughput, 2 * one->throughput);
  // 6 FLOPs per parameter per token.
  EXPECT_NEAR(one->throughput, gpu.flops / (6 * ModelParameters(gpt) * 32), 1e-6 * one->throughput);
  auto fsdp = EstimateConfig(gpt, "fsdp", 2, gpu);
  ASSERT_TRUE(fsdp);
  // fsdp shards the state ddp replicates; its few gathered units and the
  // optimizer's temporaries stay whole (estimate.h), so it is over half.
  EXPECT_LT(fsdp->memory_gib, two->memory_gib);
  EXPECT_GT(fsdp->memory_gib, two->memory_gib / 2);
  EXPECT_FALSE(EstimateConfig(gpt, "tensor", 8, gpu));    // 4 heads do not split 8 ways
  EXPECT_FALSE(EstimateConfig(gpt, "pipeline", 4, gpu));  // 2 layers, 4 stages
  EXPECT_FALSE(EstimateConfig(gpt, "zero", 2, gpu));
  auto spill = EstimateConfig(gpt, "spill", 1, gpu);
  ASSERT_TRUE(spill);
  EXPECT_LT(spill->throughput, one->throughput);
}

}  // namespace
}  // namespace orrery::engine

namespace orrery::engine {
namespace {

// What the launchers write for every example job, trained or profiled, in any
// template on 1 and 4 ranks, is a command line the worker reads back whole
// (worker/contract/worker_args.h is the one parser).
TEST(WorkerCommand, EveryExampleJobsFlagsParseBack) {
  int parsed = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(ORRERY_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto job = api::LoadJobText(text.str());
    ASSERT_TRUE(job.ok()) << entry.path() << ": " << job.status();
    for (const api::ExpandedTask& task : job->tasks) {
      for (std::string_view tmpl : contract::kPlannableTemplates) {
        for (int gpus : {1, 4}) {
          LaunchConfig c;
          c.template_name = std::string(tmpl);
          c.gpus = gpus;
          c.checkpoint_dir = "/ckpt/" + task.name;
          c.device = "cpu";
          for (const auto& flags : {TrainFlags(task, c), ProfileFlags(task, c, 6)}) {
            auto args = contract::ParseWorkerArgs(flags);
            ASSERT_TRUE(args.ok()) << entry.path() << " " << task.name << ": " << args.status();
            EXPECT_EQ(contract::ToArgs(*args), flags);
            EXPECT_EQ(args->template_name, contract::WorkerTemplate(tmpl, gpus));
            ++parsed;
          }
        }
      }
    }
  }
  EXPECT_GT(parsed, 100);
}

}  // namespace
}  // namespace orrery::engine
