// Task flags, the learning-rate schedule, and batch sources over synthetic
// data, token files and the shipped text corpus.
#include "worker/train/task.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numbers>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"

namespace orrery::train {
namespace {

TEST(TaskFlagsTest, ParsesEveryKind) {
  auto t = ParseTaskFlags({"--model=gpt", "--layers", "3", "--template=hybrid",
                           "--layout=dp=2,pp=2", "--stage-starts=2", "--lr=0.01", "--optimizer",
                           "adamw", "--no-double-buffer", "--batch=16", "--decay=cosine",
                           "--warmup-steps=5", "--tune", "--lr-scaling=sqrt", "--samples=96"});
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
  EXPECT_EQ(t->samples, 96);
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
  EXPECT_NE(ParseTaskFlags({"--samples=-1"}).status().message().find("--samples"),
            std::string::npos);
}

TEST(TaskFlagsTest, PipelineScheduleIsGpipeOr1f1b) {
  auto t = ParseTaskFlags({});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->strategy.pipeline_schedule, "gpipe");  // the default
  t = ParseTaskFlags({"--template=pipeline", "--pipeline-schedule", "1f1b"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->strategy.pipeline_schedule, "1f1b");
  t = ParseTaskFlags({"--pipeline-schedule=gpipe"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->strategy.pipeline_schedule, "gpipe");
  Status bad = ParseTaskFlags({"--pipeline-schedule=interleaved"}).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--pipeline-schedule"), std::string::npos) << bad;
  EXPECT_NE(bad.message().find("'interleaved'"), std::string::npos) << bad;
  EXPECT_NE(bad.message().find("gpipe or 1f1b"), std::string::npos) << bad;
  EXPECT_EQ(ParseTaskFlags({"--pipeline-schedule"}).status().code(),
            StatusCode::kInvalidArgument);  // no value
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

// The schedule as it was indexed by optimizer steps before issue #10 moved it to
// samples: a run that never changes batch must still get these very numbers.
double StepIndexedRate(double base, const ScheduleConfig& s, int64_t step, int64_t total) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) {
    return base * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (s.decay == "constant" || total <= s.warmup_steps) return base;
  double progress = static_cast<double>(step - s.warmup_steps) /
                    static_cast<double>(std::max<int64_t>(1, total - s.warmup_steps));
  progress = std::clamp(progress, 0.0, 1.0);
  double min_lr = base * s.min_lr_ratio;
  if (s.decay == "linear") return base - (base - min_lr) * progress;
  return min_lr + 0.5 * (base - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

ScheduleConfig WarmupCosine() {
  ScheduleConfig s;
  s.warmup_steps = 5;
  s.decay = "cosine";
  s.min_lr_ratio = 0.1;
  return s;
}

TEST(ScheduleClockTest, WithoutABatchChangeEveryStepIsBitIdenticalToTheStepSchedule) {
  for (const char* decay : {"cosine", "linear", "constant"}) {
    ScheduleConfig s = WarmupCosine();
    s.decay = decay;
    for (int64_t batch : {1, 3, 8, 24}) {
      const int64_t steps = 37;
      ScheduleClock fresh(s, batch, steps);
      // A resume at the same batch, from a checkpoint this trainer wrote at step
      // 11 and from one an older trainer wrote (no clock entries).
      std::map<std::string, double> saved = {{"global_batch", static_cast<double>(batch)},
                                             {"warmup_steps", 5}};
      ScheduleClock old_ckpt = ScheduleClock::Resume(s, batch, steps, 11, 11 * batch, saved);
      fresh.Save(11 * batch, saved);
      ScheduleClock resumed = ScheduleClock::Resume(s, batch, steps, 11, 11 * batch, saved);
      for (int64_t k = 0; k < steps; ++k) {
        const double want = StepIndexedRate(3e-4, s, k, steps);
        EXPECT_EQ(fresh.Rate(3e-4, s, k * batch), want)
            << decay << " batch " << batch << " step " << k;
        EXPECT_EQ(LearningRate(3e-4, s, k, steps), want) << decay << " step " << k;
        if (k < 11) continue;
        EXPECT_EQ(resumed.Rate(3e-4, s, k * batch), want) << decay << " step " << k;
        EXPECT_EQ(old_ckpt.Rate(3e-4, s, k * batch), want) << decay << " step " << k;
      }
      EXPECT_EQ(fresh.end_samples(), steps * batch);
      EXPECT_EQ(fresh.Position(steps * batch), fresh.total_samples());
    }
  }
}

TEST(ScheduleClockTest, SameBatchResumeKeepsTheFlagsAsGiven) {
  // As before samples: a resume at the same batch with a longer --steps lays the
  // schedule over the new budget.
  ScheduleConfig s = WarmupCosine();
  std::map<std::string, double> saved;
  ScheduleClock(s, 8, 20).Save(20 * 8, saved);
  saved["global_batch"] = 8;
  ScheduleClock longer = ScheduleClock::Resume(s, 8, 50, 20, 160, saved);
  for (int64_t k = 20; k < 50; ++k)
    EXPECT_EQ(longer.Rate(1.0, s, k * 8), StepIndexedRate(1.0, s, k, 50));
}

// A run of 40 steps at batch 8 (budget 320 samples) checkpointed at step 16 (128
// samples), resumed at `batch` with the --steps the operator gives it (the
// remaining samples over the new batch, rounded up).
struct Resumed {
  ScheduleClock before, after;
  int64_t steps;
};

Resumed ResumeAt(const ScheduleConfig& s, int64_t batch) {
  ScheduleClock before(s, 8, 40);
  std::map<std::string, double> saved = {{"global_batch", 8}, {"warmup_steps", 5}};
  before.Save(128, saved);
  const int64_t steps = 16 + (320 - 128 + batch - 1) / batch;
  ScheduleConfig flags = s;
  flags.warmup_steps = (5 * 8 + batch - 1) / batch;  // the operator's rounded warm-up
  return {before, ScheduleClock::Resume(flags, batch, steps, 16, 128, saved), steps};
}

TEST(ScheduleClockTest, BatchChangeIsContinuousAndEndsWithTheRun) {
  ScheduleConfig s = WarmupCosine();
  for (int64_t batch : {16, 4, 20, 28}) {
    Resumed r = ResumeAt(s, batch);
    // The first step at the new batch starts where the old schedule stood: the
    // same position, the same rate (decay reads the step's start).
    EXPECT_EQ(r.after.Position(128), r.before.Position(128)) << batch;
    EXPECT_NEAR(r.after.Rate(1.0, s, 128), r.before.Rate(1.0, s, 128), 1e-12) << batch;
    EXPECT_NEAR(r.after.Rate(1.0, s, 128), StepIndexedRate(1.0, s, 16, 40), 1e-12) << batch;
    // The warm-up keeps its samples, not the rounded flag.
    EXPECT_EQ(r.after.warmup_samples(), 40) << batch;
    // The run's last step ends exactly at the schedule's end, though the new
    // steps overshoot the budget when the batch does not divide what is left.
    const int64_t end = 128 + (r.steps - 16) * batch;
    EXPECT_EQ(r.after.end_samples(), end) << batch;
    EXPECT_EQ(r.after.Position(end), r.after.total_samples()) << batch;
    EXPECT_EQ(r.after.total_samples(), 320) << batch;
    // Decay only, never up, down to no lower than min_lr_ratio × base.
    double previous = r.before.Rate(1.0, s, 120);
    for (int64_t k = 16; k < r.steps; ++k) {
      const double lr = r.after.Rate(1.0, s, 128 + (k - 16) * batch);
      EXPECT_LE(lr, previous + 1e-15) << batch << " step " << k;
      EXPECT_GE(lr, 0.1 - 1e-12);
      previous = lr;
    }
    // Rounding the steps up squeezes what is left of the schedule a little: the
    // last step starts less than one step before the end.
    EXPECT_LE(r.after.total_samples() - r.after.Position(end - batch), static_cast<double>(batch));
  }
  // The step schedule the old trainer used would jump at the change: at 2x the
  // run has 28 steps, so step 16 is 16/28 of the way through, not 16/40.
  EXPECT_GT(std::abs(StepIndexedRate(1.0, s, 16, 28) - StepIndexedRate(1.0, s, 16, 40)), 0.1);
}

TEST(ScheduleClockTest, ChangeDuringWarmupKeepsTheWarmupLineInSamples) {
  ScheduleConfig s = WarmupCosine();  // 5 steps of 8 = 40 samples of warm-up
  ScheduleClock before(s, 8, 40);
  std::map<std::string, double> saved = {{"global_batch", 8}};
  before.Save(16, saved);  // after 2 steps
  ScheduleClock after = ScheduleClock::Resume(s, 16, 2 + (320 - 16 + 15) / 16, 2, 16, saved);
  // A step's warm-up rate is the samples at its end over the warm-up's.
  EXPECT_NEAR(after.Rate(1.0, s, 16), 32.0 / 40.0, 1e-12);
  // The step over the warm-up's end (samples 32 to 48) gets the base rate, no more.
  EXPECT_EQ(after.Rate(1.0, s, 32), 1.0);
  EXPECT_NEAR(before.Rate(1.0, s, 16), 24.0 / 40.0, 1e-12);
}

TEST(ScheduleClockTest, TwoChangesCarryThePositionThroughBoth) {
  ScheduleConfig s = WarmupCosine();
  s.decay = "linear";
  // 8 -> 20 at 128 samples: 10 steps of 20 end at 328, the schedule at 320.
  Resumed r = ResumeAt(s, 20);
  ASSERT_EQ(r.steps, 26);
  std::map<std::string, double> saved = {{"global_batch", 20}, {"warmup_steps", 2}};
  r.after.Save(188, saved);  // step 19
  const double at = r.after.Position(188);
  EXPECT_NEAR(at, 128 + 192.0 * 60 / 200, 1e-9);
  // 20 -> 8 at step 19: 17 steps of 8 end at 324.
  ScheduleClock back = ScheduleClock::Resume(s, 8, 36, 19, 188, saved);
  EXPECT_EQ(back.Position(188), at);
  EXPECT_NEAR(back.Rate(1.0, s, 188), r.after.Rate(1.0, s, 188), 1e-12);
  EXPECT_EQ(back.end_samples(), 324);
  EXPECT_EQ(back.Position(324), 320);
  // A resume at the same batch after the changes continues the same line.
  std::map<std::string, double> again = {{"global_batch", 8}};
  back.Save(212, again);  // step 22
  ScheduleClock same = ScheduleClock::Resume(s, 8, 36, 22, 212, again);
  for (int64_t x = 212; x <= 324; x += 8) EXPECT_NEAR(same.Position(x), back.Position(x), 1e-9);
  EXPECT_EQ(same.Position(324), 320);
}

TEST(ScheduleClockTest, ResumePastTheScheduleEndLaysANewOne) {
  // The previous run finished its 4-step schedule; this one extends the budget to
  // 8 steps at twice the batch: a schedule over what this run trains on.
  ScheduleConfig s = WarmupCosine();
  s.warmup_steps = 0;
  std::map<std::string, double> saved = {{"global_batch", 8}};
  ScheduleClock(s, 8, 4).Save(32, saved);
  ScheduleClock c = ScheduleClock::Resume(s, 16, 8, 4, 32, saved);
  EXPECT_EQ(c.Position(32), 32);
  EXPECT_EQ(c.total_samples(), 32 + 4 * 16);
  EXPECT_NEAR(c.Rate(1.0, s, 32), StepIndexedRate(1.0, s, 2, 6), 1e-12);
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
