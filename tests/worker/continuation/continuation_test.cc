// Continuation across layouts (issue #7) and across global-batch changes
// (issue #10, the worker's part): a run checkpointed under one parallel layout
// and resumed under another continues the uninterrupted run's loss curve, which
// needs the optimizer state (AdamW moments and step count) to survive the
// reshard; a resume with twice or half the global batch rescales the learning
// rate by the chosen rule and continues the dataset cursor without a gap or a
// repeat.
#include <cmath>
#include <sstream>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/continuation/run_under.h"
#include "worker/train/trainer.h"

namespace orrery::train {
namespace {

constexpr int64_t kFirstSteps = 4;  // N: steps under layout A before the checkpoint
constexpr int64_t kTotalSteps = 8;  // N + M
constexpr double kRelTolerance = 1e-5;

TaskConfig TinyGpt() { return testing::ContinuationGpt(kTotalSteps); }

// One layout: the template and the world size it runs with (1: no rendezvous).
using Layout = testing::RunLayout;

// Runs `task` under `layout`; returns rank 0's result (all ranks must agree).
using testing::RunUnder;

struct Case {
  std::string label;
  Layout a, b;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

class ContinuationTest : public ::testing::TestWithParam<Case> {};

TEST_P(ContinuationTest, ResumedUnderAnotherLayoutMatchesUninterruptedRun) {
  const Case& c = GetParam();
  TaskConfig base = TinyGpt();
  auto full = RunUnder(base, c.a);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->losses.size(), static_cast<size_t>(kTotalSteps));

  testing_worker::TempDir dir;
  TaskConfig first = base;
  first.steps = kFirstSteps;
  first.checkpoint_dir = dir.path();
  auto a = RunUnder(first, c.a);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->checkpoint.empty());

  TaskConfig second = base;
  second.checkpoint_dir = dir.path();
  auto b = RunUnder(second, c.b);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->resumed_from_step, kFirstSteps);
  ASSERT_EQ(b->losses.size(), static_cast<size_t>(kTotalSteps - kFirstSteps));
  for (size_t i = 0; i < b->losses.size(); ++i) {
    double want = full->losses[i + kFirstSteps];
    EXPECT_NEAR(b->losses[i], want, kRelTolerance * want) << c.label << " resumed step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContinuationTest,
    ::testing::Values(
        Case{"ddp_dp2_to_ddp_dp1", {"ddp", 2, {}}, {"ddp", 1, {}}},
        Case{"single_to_fsdp_dp2", {"single", 1, {}}, {"fsdp", 2, {}}},
        Case{"tensor_tp2_to_ddp_dp2", {"tensor", 2, {}}, {"ddp", 2, {}}},
        Case{"hybrid_dp2_pp1_to_pipeline_pp2", {"hybrid", 2, {2, 1, 1}}, {"pipeline", 2, {}}}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.label; });

// Issue #10: resuming with a different global batch. The schedule is constant,
// so every step's rate is the (rescaled) base rate.
struct BatchCase {
  std::string rule;
  int64_t new_batch;
  double factor;  // expected new base rate / old base rate
};

void PrintTo(const BatchCase& c, std::ostream* os) { *os << c.rule << " batch " << c.new_batch; }

class BatchChangeTest : public ::testing::TestWithParam<BatchCase> {};

TEST_P(BatchChangeTest, RateFollowsTheRuleAndTheCursorIsExact) {
  const BatchCase& c = GetParam();
  testing_worker::TempDir dir;
  TaskConfig first = TinyGpt();
  first.steps = kFirstSteps;
  first.checkpoint_dir = dir.path();
  std::ostringstream o1;
  auto a = Train(first, nullptr, o1, nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  for (size_t i = 0; i < a->positions.size(); ++i) {
    EXPECT_EQ(a->positions[i], static_cast<int64_t>(i) * first.global_batch);
  }

  TaskConfig second = TinyGpt();
  second.checkpoint_dir = dir.path();
  second.global_batch = c.new_batch;
  second.schedule.lr_scaling = c.rule;
  second.optimizer.lr =
      123.0;  // ignored unless the rule is none: the checkpoint's rate is the base
  if (c.rule == "none") second.optimizer.lr = first.optimizer.lr;
  std::ostringstream o2;
  auto b = Train(second, nullptr, o2, nullptr);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->resumed_from_step, kFirstSteps);
  EXPECT_NEAR(b->base_lr, first.optimizer.lr * c.factor, 1e-12);
  ASSERT_EQ(b->lrs.size(), static_cast<size_t>(kTotalSteps - kFirstSteps));
  for (double lr : b->lrs) EXPECT_NEAR(lr, first.optimizer.lr * c.factor, 1e-12);

  // The cursor continues exactly where the old batch size left it: the first
  // resumed step starts at N·B_old, each later one B_new further (no sample
  // skipped or repeated across the change).
  ASSERT_EQ(b->positions.size(), b->losses.size());
  for (size_t i = 0; i < b->positions.size(); ++i) {
    EXPECT_EQ(b->positions[i],
              kFirstSteps * first.global_batch + static_cast<int64_t>(i) * c.new_batch);
  }

  // Continuity bound: the loss right after the change stays within 10% of the
  // last loss before it, and no later step exceeds it by more than 10% (the
  // model is near the uniform loss log(64) ≈ 4.16, batch-to-batch noise is a few %).
  constexpr double kBound = 0.10;
  double before = a->losses.back();
  EXPECT_NEAR(b->losses.front(), before, kBound * before);
  for (double l : b->losses) EXPECT_LT(l, (1.0 + kBound) * before);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, BatchChangeTest,
    ::testing::Values(BatchCase{"linear", 16, 2.0}, BatchCase{"linear", 4, 0.5},
                      BatchCase{"sqrt", 16, std::sqrt(2.0)}, BatchCase{"sqrt", 4, std::sqrt(0.5)},
                      BatchCase{"none", 16, 1.0}),
    [](const ::testing::TestParamInfo<BatchCase>& param_info) {
      return param_info.param.rule + "_batch" + std::to_string(param_info.param.new_batch);
    });

}  // namespace
}  // namespace orrery::train
