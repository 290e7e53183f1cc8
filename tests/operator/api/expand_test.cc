// Search-space expansion: names, substitution, determinism, the cap.
#include "operator/api/expand.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/validation.h"
#include "tests/operator/api/test_jobs.h"

namespace orrery::api {
namespace {

ModelSelectionJobSpec Base() { return JobFromYaml(testing::kMinimalYaml)->spec; }

TEST(ExpandTest, SplitMix64MatchesTheReferenceSequence) {
  // First outputs of the reference splitmix64.c seeded with 1234567.
  SplitMix64 rng(1234567);
  EXPECT_EQ(rng.Next(), 6457827717110365317ULL);
  EXPECT_EQ(rng.Next(), 3203168211198807973ULL);
  EXPECT_EQ(rng.Next(), 9817491932198370423ULL);
  EXPECT_EQ(rng.Next(), 4593380528125082431ULL);
  EXPECT_EQ(rng.Next(), 16408922859458223821ULL);
}

TEST(ExpandTest, BelowAndUniformStayInRange) {
  SplitMix64 rng(5);
  std::vector<int> hits(3, 0);
  for (int i = 0; i < 3000; ++i) {
    uint64_t x = rng.Below(3);
    ASSERT_LT(x, 3u);
    ++hits[x];
    double u = rng.Uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  for (int h : hits) EXPECT_GT(h, 850);  // ~1000 each
}

TEST(ExpandTest, NumberForName) {
  EXPECT_EQ(NumberForName(32), "32");
  EXPECT_EQ(NumberForName(0), "0");
  EXPECT_EQ(NumberForName(3e-4), "3e-4");
  EXPECT_EQ(NumberForName(2.5e-5), "2p5e-5");
  EXPECT_EQ(NumberForName(0.1), "1e-1");
  EXPECT_EQ(NumberForName(1e7), "1e7");
  EXPECT_EQ(NumberForName(-2), "m2");
  for (double v : {3e-4, 2.5e-5, 0.1, 1e7, 0.123456})
    EXPECT_TRUE(IsDns1123Label("x-" + NumberForName(v)));
}

TEST(ExpandTest, TaskWithoutSearchSpaceIsItself) {
  ModelSelectionJobSpec spec = Base();
  auto tasks = Expand(spec);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ((*tasks)[0].name, "mlp");
  EXPECT_EQ((*tasks)[0].task, spec.tasks[0]);
  EXPECT_TRUE((*tasks)[0].assignments.empty());
}

TEST(ExpandTest, GridIsTheCartesianProductWithReadableNames) {
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].search_space =
      SearchSpace{GridSpace{{3e-4, 1e-3}, {32, 64}, {}, {}, {Optimizer::kSgd}}, {}};
  auto tasks = Expand(spec);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  std::vector<std::string> names;
  for (const auto& t : *tasks) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mlp-lr-3e-4-bs-32-sgd", "mlp-lr-3e-4-bs-64-sgd",
                                             "mlp-lr-1e-3-bs-32-sgd", "mlp-lr-1e-3-bs-64-sgd"}));
  const ExpandedTask& t = (*tasks)[2];
  EXPECT_DOUBLE_EQ(t.task.training.learning_rate, 1e-3);
  EXPECT_EQ(t.task.training.batch_size, 32);
  EXPECT_EQ(t.task.training.optimizer, Optimizer::kSgd);
  EXPECT_EQ(t.task.name, t.name);
  EXPECT_FALSE(t.task.search_space.has_value());
  EXPECT_EQ(t.source, "mlp");
  EXPECT_EQ(t.variant, 2u);
  EXPECT_EQ(t.assignments[0], (std::pair<std::string, std::string>{"learningRate", "0.001"}));
  // Everything outside the search space is the spec task's.
  EXPECT_EQ(t.task.model, spec.tasks[0].model);
  EXPECT_EQ(*t.task.training.steps, 100);
}

// A LoRA fine-tune of a pre-trained model, swept over rank x learning rate,
// exporting each task into its own folder.
const char* kLoraSweep = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: lora}
spec:
  tasks:
  - name: llama
    model:
      pretrained: {path: llama-3.2-1b, seqLen: 512, volume: {claimName: models}}
    data: {text: {path: corpus.txt}}
    training: {steps: 100, batchSize: 8, learningRate: 1e-4}
    fineTuning: {lora: {alpha: 32, targets: [q_proj, v_proj]}}
    output: {path: "runs/{task}", dtype: bfloat16, volume: {claimName: results}}
    searchSpace:
      grid:
        loraRank: [4, 8, 16]
        learningRate: [1e-4, 3e-4]
  resources: {gpuQuota: 4}
)";

TEST(ExpandTest, LoraRankTimesLearningRateGrid) {
  auto job = JobFromYaml(kLoraSweep);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(ValidateJob(*job).empty());
  auto tasks = Expand(job->spec);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 6u);
  // Axes in the fixed order (learning rate, then the fine-tuning dimensions),
  // the last varying fastest.
  const std::vector<std::pair<std::string, std::pair<double, int>>> want = {
      {"llama-lr-1e-4-lora-4", {1e-4, 4}},   {"llama-lr-1e-4-lora-8", {1e-4, 8}},
      {"llama-lr-1e-4-lora-16", {1e-4, 16}}, {"llama-lr-3e-4-lora-4", {3e-4, 4}},
      {"llama-lr-3e-4-lora-8", {3e-4, 8}},   {"llama-lr-3e-4-lora-16", {3e-4, 16}}};
  for (size_t i = 0; i < want.size(); ++i) {
    const ExpandedTask& e = (*tasks)[i];
    EXPECT_EQ(e.name, want[i].first);
    EXPECT_DOUBLE_EQ(e.task.training.learning_rate, want[i].second.first);
    ASSERT_TRUE(e.task.fine_tuning && e.task.fine_tuning->lora) << e.name;
    EXPECT_EQ(e.task.fine_tuning->lora->rank, want[i].second.second);
    // What the spec's lora said is kept.
    EXPECT_DOUBLE_EQ(e.task.fine_tuning->lora->alpha, 32);
    EXPECT_EQ(e.task.fine_tuning->lora->targets, (std::vector<std::string>{"q_proj", "v_proj"}));
    // Each task writes its own folder: {task} is its name.
    ASSERT_TRUE(e.task.output);
    EXPECT_EQ(e.task.output->path, "runs/" + e.name);
    EXPECT_EQ(e.assignments.back().first, "loraRank");
    EXPECT_EQ(e.assignments.back().second, std::to_string(want[i].second.second));
    EXPECT_FALSE(e.task.search_space);
  }
}

TEST(ExpandTest, FineTuningDimensionsCreateTheirBlocks) {
  // A rank without a lora block gets one with PEFT's defaults; freezeBlocks
  // a fineTuning block with only that set.
  ModelSelectionJobSpec spec = Base();
  TaskSpec& t = spec.tasks[0];
  t.model = ModelSpec{};
  t.model.gpt = GptModel{4, 64, 4, 32, 256};
  GridSpace g;
  g.freeze_blocks = {0, 2};
  t.search_space = SearchSpace{g, {}};
  TaskSpec lora = t;
  lora.name = "lora";
  RandomSpace r;
  r.seed = 3;
  r.count = 4;
  Distribution d;
  d.min = 2;
  d.max = 64;
  d.log_scale = true;
  r.lora_rank = d;
  lora.search_space = SearchSpace{{}, r};
  spec.tasks.push_back(lora);
  auto tasks = Expand(spec);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 6u);
  EXPECT_EQ((*tasks)[0].name, "mlp-fb-0");
  EXPECT_EQ((*tasks)[1].name, "mlp-fb-2");
  ASSERT_TRUE((*tasks)[1].task.fine_tuning);
  EXPECT_EQ((*tasks)[1].task.fine_tuning->freeze_blocks, 2);
  EXPECT_FALSE((*tasks)[1].task.fine_tuning->lora);
  std::set<int> ranks;
  for (size_t i = 2; i < 6; ++i) {
    const ExpandedTask& e = (*tasks)[i];
    EXPECT_EQ(e.name, "lora-r" + std::to_string(i - 2));
    ASSERT_TRUE(e.task.fine_tuning && e.task.fine_tuning->lora && e.task.fine_tuning->lora->rank);
    const int rank = *e.task.fine_tuning->lora->rank;
    EXPECT_GE(rank, 2);
    EXPECT_LE(rank, 64);
    EXPECT_DOUBLE_EQ(e.task.fine_tuning->lora->alpha, kDefaultLoraAlpha);
    EXPECT_TRUE(e.task.fine_tuning->lora->targets.empty());
    ranks.insert(rank);
  }
  // The same seed samples the same ranks again.
  auto again = Expand(spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *tasks);
  EXPECT_GT(ranks.size(), 1u);
}

TEST(ExpandTest, OutputFolderOfATaskWithoutSearchSpace) {
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].model = ModelSpec{};
  spec.tasks[0].model.gpt = GptModel{4, 64, 4, 32, 256};
  spec.tasks[0].output = OutputSpec{"/out/{task}/model"};
  auto tasks = Expand(spec);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  EXPECT_EQ((*tasks)[0].task.output->path, "/out/mlp/model");
}

TEST(ExpandTest, LongGridNamesFallBackToIndices) {
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].name = std::string(30, 'a');
  spec.tasks[0].search_space =
      SearchSpace{GridSpace{{2.5e-4}, {32}, {0.125}, {1000}, {Optimizer::kAdamW}}, {}};
  auto tasks = Expand(spec);
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ((*tasks)[0].name, std::string(30, 'a') + "-g0");
  EXPECT_TRUE(IsDns1123Label((*tasks)[0].name));
}

RandomSpace Random(int64_t seed, int count) {
  RandomSpace r;
  r.seed = seed;
  r.count = count;
  Distribution lr;
  lr.min = 1e-5;
  lr.max = 1e-2;
  lr.log_scale = true;
  r.learning_rate = lr;
  Distribution bs;
  bs.values = {16, 32, 64};
  r.batch_size = bs;
  Distribution wu;
  wu.min = 0;
  wu.max = 50;
  r.warmup_steps = wu;
  return r;
}

TEST(ExpandTest, RandomIsDeterministicAndInRange) {
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].search_space = SearchSpace{{}, Random(42, 200)};
  auto a = Expand(spec);
  auto b = Expand(spec);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, *b);
  ASSERT_EQ(a->size(), 200u);
  std::set<int64_t> batch_sizes;
  int below_1e3 = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    const TrainingSpec& t = (*a)[i].task.training;
    EXPECT_EQ((*a)[i].name, "mlp-r" + std::to_string(i));
    EXPECT_GE(t.learning_rate, 1e-5);
    EXPECT_LE(t.learning_rate, 1e-2);
    // Rounded to 3 significant digits.
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2e", t.learning_rate);
    EXPECT_EQ(std::strtod(buf, nullptr), t.learning_rate);
    batch_sizes.insert(t.batch_size);
    EXPECT_GE(t.warmup_steps, 0);
    EXPECT_LE(t.warmup_steps, 50);
    if (t.learning_rate < 1e-3) ++below_1e3;
  }
  EXPECT_EQ(batch_sizes, (std::set<int64_t>{16, 32, 64}));
  // Log-uniform over 3 decades: about 2/3 of samples below 1e-3 (uniform would give ~10%).
  EXPECT_GT(below_1e3, 110);
  EXPECT_LT(below_1e3, 160);

  spec.tasks[0].search_space = SearchSpace{{}, Random(43, 200)};
  auto c = Expand(spec);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)[0].task.training.learning_rate, (*a)[0].task.training.learning_rate);
}

TEST(ExpandTest, PrefixOfALargerSampleIsTheSmallerSample) {
  // Growing count keeps the tasks already there, so raising count adds tasks.
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].search_space = SearchSpace{{}, Random(9, 5)};
  auto small = Expand(spec);
  spec.tasks[0].search_space = SearchSpace{{}, Random(9, 8)};
  auto large = Expand(spec);
  ASSERT_TRUE(small.ok() && large.ok());
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ((*small)[i], (*large)[i]);
}

TEST(ExpandTest, CapIsReportedPerTaskAndPerJob) {
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].search_space = SearchSpace{{}, Random(1, 20)};
  auto over = Expand(spec, 10);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find(
                "spec.tasks[0].searchSpace: expands to 20 tasks, more than the limit of 10"),
            std::string::npos)
      << over.status();

  spec.tasks[0].search_space = SearchSpace{{}, Random(1, 6)};
  TaskSpec second = spec.tasks[0];
  second.name = "other";
  spec.tasks.push_back(second);
  std::vector<ExpandedTask> out;
  auto errors = ExpandTasks(spec, &out, 10);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.tasks");
  EXPECT_NE(errors[0].message.find("12 tasks in all"), std::string::npos);
  EXPECT_TRUE(out.empty());
}

TEST(ExpandTest, HugeGridsSaturateInsteadOfOverflowing) {
  TaskSpec t = Base().tasks[0];
  GridSpace g;
  for (int i = 0; i < 64; ++i) {
    g.learning_rate.push_back(1e-4 * (i + 1));
    g.batch_size.push_back(i + 1);
    g.weight_decay.push_back(0.01 * i);
    g.warmup_steps.push_back(i);
  }
  t.search_space = SearchSpace{g, {}};
  EXPECT_EQ(CountVariants(t), 64u * 64u * 64u * 64u);
}

TEST(ExpandTest, NameClashesAreErrors) {
  ModelSelectionJobSpec spec = Base();
  spec.tasks[0].search_space = SearchSpace{{}, Random(1, 2)};
  TaskSpec clash = Base().tasks[0];
  clash.name = "mlp-r1";
  spec.tasks.push_back(clash);
  auto tasks = Expand(spec);
  ASSERT_FALSE(tasks.ok());
  EXPECT_NE(
      tasks.status().message().find("spec.tasks[1].name: expanded task name \"mlp-r1\" clashes"),
      std::string::npos)
      << tasks.status();
}

}  // namespace
}  // namespace orrery::api
