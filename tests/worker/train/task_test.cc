// Task flags, the learning-rate schedule, and batch sources over synthetic
// data, token files and the shipped text corpus.
#include "worker/train/task.h"

#include <fstream>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"

namespace orrery::train {
namespace {

TEST(TaskFlagsTest, ParsesEveryKind) {
  auto t = ParseTaskFlags({"--model=gpt", "--layers", "3", "--template=hybrid",
                           "--layout=dp=2,pp=2", "--stage-starts=2", "--lr=0.01", "--optimizer",
                           "adamw", "--no-double-buffer", "--batch=16", "--decay=cosine",
                           "--warmup-steps=5", "--tune", "--lr-scaling=sqrt"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->model.gpt.layers, 3);
  EXPECT_EQ(t->strategy.name, "hybrid");
  EXPECT_EQ(t->strategy.layout, (dist::Layout{2, 1, 2}));
  EXPECT_EQ(t->strategy.stage_starts, std::vector<int>{2});
  EXPECT_DOUBLE_EQ(t->optimizer.lr, 0.01);
  EXPECT_EQ(t->optimizer.kind, "adamw");
  EXPECT_FALSE(t->strategy.spill_double_buffer);
  EXPECT_TRUE(t->tune);
  EXPECT_EQ(t->global_batch, 16);
  EXPECT_EQ(t->schedule.lr_scaling, "sqrt");
  auto plain = ParseTaskFlags({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->schedule.lr_scaling, "none");
}

TEST(TaskFlagsTest, RejectsBadInput) {
  EXPECT_NE(ParseTaskFlags({"--nope=1"}).status().message().find("--nope"), std::string::npos);
  EXPECT_FALSE(ParseTaskFlags({"--layers=x"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--layers"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--batch=0"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--tune=1"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--decay=step"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--lr-scaling=cubic"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--token-bytes=3"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"positional"}).ok());
  EXPECT_FALSE(ParseTaskFlags({"--layers=-2"}).ok());
}

TEST(TaskFlagsTest, MetricsFlagsWinOverTheEnvironment) {
  const std::map<std::string, std::string> env = {
      {"ORRERY_METRICS_ADDRESS", ":9400"}, {"ORRERY_MSJ", "ns/sweep"}, {"ORRERY_TASK", "from-env"}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto t = ParseTaskFlags({"--task=from-flag", "--metrics-address", "127.0.0.1:0"});
  ASSERT_TRUE(t.ok()) << t.status();
  MetricsDefaultsFromEnvironment(t->metrics, getenv);
  EXPECT_EQ(t->metrics.address, "127.0.0.1:0");
  EXPECT_EQ(t->metrics.msj, "ns/sweep");
  EXPECT_EQ(t->metrics.task, "from-flag");
  auto plain = ParseTaskFlags({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  MetricsDefaultsFromEnvironment(plain->metrics,
                                 [](const char*) -> const char* { return nullptr; });
  EXPECT_TRUE(plain->metrics.address.empty());  // no exporter
  EXPECT_TRUE(plain->metrics.task.empty());
}

TEST(ScheduleTest, WarmupThenDecay) {
  ScheduleConfig s;
  s.warmup_steps = 4;
  s.decay = "cosine";
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(1.0, s, 0, 104), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, s, 3, 104), 1.0);
  EXPECT_NEAR(LearningRate(1.0, s, 4, 104), 1.0, 1e-12);
  EXPECT_NEAR(LearningRate(1.0, s, 54, 104), 0.55, 1e-12);  // halfway: mean of 1 and 0.1
  EXPECT_NEAR(LearningRate(1.0, s, 104, 104), 0.1, 1e-12);
  s.decay = "linear";
  EXPECT_NEAR(LearningRate(1.0, s, 54, 104), 0.55, 1e-12);
  s.decay = "constant";
  EXPECT_DOUBLE_EQ(LearningRate(1.0, s, 90, 104), 1.0);
}

TEST(BatchSourceTest, TextCorpusIsByteTokens) {
  TaskConfig t;
  t.model.gpt.seq = 32;
  t.data.kind = "text";
  t.data.path = std::string(ORRERY_SOURCE_DIR) + "/data/corpus/quickstart.txt";
  t.global_batch = 4;
  auto src = MakeBatchSource(t);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(t.model.gpt.vocab, 256);
  auto b = (*src)->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->inputs.sizes().vec(), (std::vector<int64_t>{4, 32}));
  EXPECT_TRUE(b->inputs.narrow(1, 1, 31).equal(b->targets.narrow(1, 0, 31)));
  EXPECT_LT(b->inputs.max().item<int64_t>(), 256);
  EXPECT_EQ((*src)->cursor().Position(), 4);
}

TEST(BatchSourceTest, TokenFileUint32AndResumeFromCursor) {
  testing_worker::TempDir dir;
  std::string path = dir.path() + "/tokens.bin";
  {
    std::ofstream f(path, std::ios::binary);
    for (uint32_t i = 0; i < 1000; ++i) {
      uint32_t tok = (i * 7) % 100;
      f.write(reinterpret_cast<const char*>(&tok), 4);
    }
  }
  TaskConfig t;
  t.model.gpt = {1, 16, 2, 8, 128};
  t.data.kind = "tokens";
  t.data.path = path;
  t.data.token_bytes = 4;
  t.global_batch = 5;
  auto a = MakeBatchSource(t);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Next().ok());
  data::Cursor after_one = (*a)->cursor();
  auto second = (*a)->Next();
  ASSERT_TRUE(second.ok());
  auto b = MakeBatchSource(t);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Seek(after_one).ok());
  auto again = (*b)->Next();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->inputs.equal(second->inputs));
  // A vocabulary smaller than the file's tokens is refused.
  t.model.gpt.vocab = 50;
  EXPECT_EQ(MakeBatchSource(t).status().code(), StatusCode::kInvalidArgument);
}

TEST(BatchSourceTest, MlpRefusesTokenData) {
  TaskConfig t;
  t.model.kind = "mlp";
  t.data.kind = "tokens";
  EXPECT_FALSE(MakeBatchSource(t).ok());
  t.data.kind = "synthetic";
  auto s = MakeBatchSource(t);
  ASSERT_TRUE(s.ok());
  auto b = (*s)->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->inputs.size(1), t.model.mlp.input);
}

}  // namespace
}  // namespace orrery::train
