// fsdp and spill equal the single-process loop; spill keeps the device-resident
// parameter and gradient bytes within its budget (asserted through the
// accountant's peak) with and without double buffering.
#include <gtest/gtest.h>

#include "tests/worker/parallel/equivalence.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::LargestLayerBytes;
using testing_worker::Reference;
using testing_worker::RunTemplate;
using testing_worker::TinyGpt;
using testing_worker::TinyMlp;

int64_t ModelBytes(const model::ModelConfig& mc) {
  auto m = model::BuildModel(mc);
  EXPECT_TRUE(m.ok());
  return m->NumParameters() * 4;
}

StrategyConfig Spill(int64_t budget, bool double_buffer) {
  StrategyConfig c;
  c.name = "spill";
  c.spill_budget_bytes = budget;
  c.spill_double_buffer = double_buffer;
  return c;
}

TEST(FsdpTest, GptEqualsOneProcess) {
  StrategyConfig c;
  c.name = "fsdp";
  ExpectEquivalent(Reference(TinyGpt()), RunTemplate(2, TinyGpt(), c));
}

TEST(FsdpTest, MlpEqualsOneProcessWithAdamW) {
  StrategyConfig c;
  c.name = "fsdp";
  OptimizerConfig adam;
  adam.kind = "adamw";
  adam.lr = 1e-3;
  ExpectEquivalent(Reference(TinyMlp(), adam), RunTemplate(2, TinyMlp(), c, adam));
}

TEST(FsdpTest, OddSizedLayersArePadded) {
  model::ModelConfig mc = TinyMlp();
  mc.mlp = {6, 7, 2, 3};  // the first layer holds 7 × 7 = 49 parameters: odd
  StrategyConfig c;
  c.name = "fsdp";
  ExpectEquivalent(Reference(mc), RunTemplate(2, mc, c));
}

TEST(SpillTest, GptStaysWithinBudgetAndEqualsUnspilled) {
  model::ModelConfig mc = TinyGpt();
  int64_t total = ModelBytes(mc);
  // Double buffering gives a shard a third of the budget (its parameters, its
  // gradients, the next shard's parameters): just enough for the largest layer.
  int64_t budget = 3 * LargestLayerBytes(mc);
  auto ranks = RunTemplate(1, mc, Spill(budget, true));
  ExpectEquivalent(Reference(mc), ranks);
  EXPECT_GT(ranks[0].info.spill_shards, 2);
  EXPECT_GT(ranks[0].info.peak_device_parameter_bytes, 0);
  EXPECT_LE(ranks[0].info.peak_device_parameter_bytes, budget);
  // Unspilled, parameters and gradients together would take twice the model.
  EXPECT_LT(ranks[0].info.peak_device_parameter_bytes, 2 * total);
}

TEST(SpillTest, WithoutDoubleBufferingAlsoFits) {
  model::ModelConfig mc = TinyMlp();
  int64_t budget = 2 * LargestLayerBytes(mc);
  auto ranks = RunTemplate(1, mc, Spill(budget, false));
  ExpectEquivalent(Reference(mc), ranks);
  EXPECT_LE(ranks[0].info.peak_device_parameter_bytes, budget);
  EXPECT_LT(ranks[0].info.peak_device_parameter_bytes, 2 * ModelBytes(mc));
  EXPECT_GE(ranks[0].info.spill_shards, 2);
}

TEST(SpillTest, ComposesWithDataParallelism) {
  model::ModelConfig mc = TinyGpt();
  int64_t budget = 3 * LargestLayerBytes(mc);
  auto ranks = RunTemplate(2, mc, Spill(budget, true));
  ExpectEquivalent(Reference(mc), ranks);
  for (const auto& r : ranks) EXPECT_LE(r.info.peak_device_parameter_bytes, budget);
}

TEST(SpillTest, ALayerLargerThanTheBudgetIsRejected) {
  model::ModelConfig mc = TinyGpt();
  auto s = MakeStrategy(mc, Spill(1024, true), {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status();
}

}  // namespace
}  // namespace orrery::parallel
