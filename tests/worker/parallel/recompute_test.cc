// Activation recomputation is a knob of every template (StrategyConfig::
// recompute): with it ("unit") and without it ("none") each template gives the
// plain loop's losses and parameters, reports the mode it ran and the fraction
// of its step it waited on communication or copies. fsdp's prefetch and
// overlapped reduce-scatter change nothing in the numbers either.
#include <gtest/gtest.h>

#include "tests/worker/parallel/equivalence.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::Reference;
using testing_worker::RunResult;
using testing_worker::RunTemplate;
using testing_worker::TinyGpt;

struct Case {
  std::string name;  // the test's
  std::string template_name;
  int world = 2;
  dist::Layout layout;  // hybrid
  std::string schedule = "gpipe";
  bool prefetch = true;
};

StrategyConfig ConfigOf(const Case& c, const std::string& recompute) {
  StrategyConfig s;
  s.name = c.template_name;
  s.layout = c.layout;
  s.pipeline_schedule = c.schedule;
  s.recompute = recompute;
  s.fsdp_prefetch = c.prefetch;
  // Spill: a third of the budget per shard, 64 KiB: one of TinyGpt's blocks
  // (50,816 parameter bytes) at a time, so the model is cut into shards.
  s.spill_budget_bytes = 3 * 64 * 1024;
  return s;
}

class RecomputeTest : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(RecomputeTest, EqualsOneProcess) {
  const auto& [c, recompute] = GetParam();
  const model::ModelConfig mc = TinyGpt();
  std::vector<RunResult> ranks = RunTemplate(c.world, mc, ConfigOf(c, recompute));
  ExpectEquivalent(Reference(mc), ranks);
  for (const RunResult& r : ranks) {
    EXPECT_EQ(r.info.recompute, recompute);
    if (c.template_name == "spill") {
      EXPECT_GE(r.info.spill_shards, 2);
    }
    EXPECT_GE(r.info.wait_fraction, 0.0);
    EXPECT_LE(r.info.wait_fraction, 1.0);
  }
}

const Case kCases[] = {
    {"single", "single", 1, {}},
    {"ddp", "ddp", 2, {}},
    {"fsdp", "fsdp", 2, {}},
    {"fsdp_without_prefetch", "fsdp", 2, {}, "gpipe", false},
    {"tensor", "tensor", 2, {}},
    {"pipeline_gpipe", "pipeline", 2, {}, "gpipe"},
    {"pipeline_1f1b", "pipeline", 2, {}, "1f1b"},
    {"hybrid_dp2_pp2", "hybrid", 4, {2, 1, 2}, "1f1b"},
    {"spill", "spill", 1, {}},
    {"spill_dp2", "spill", 2, {}},
};

INSTANTIATE_TEST_SUITE_P(Templates, RecomputeTest,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values("none", "unit")),
                         [](const auto& p) {
                           return std::get<0>(p.param).name + "_" + std::get<1>(p.param);
                         });

TEST(RecomputeDefaultTest, EachTemplateTakesItsTableDefault) {
  const model::ModelConfig mc = TinyGpt();
  StrategyConfig fsdp;
  fsdp.name = "fsdp";
  auto f = MakeStrategy(mc, fsdp, {}, nullptr);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->Info().recompute, "none");
  StrategyConfig spill;
  spill.name = "spill";
  spill.spill_budget_bytes = 1 << 20;
  auto s = MakeStrategy(mc, spill, {}, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Info().recompute, "unit");
}

TEST(RecomputeDefaultTest, AnUnknownModeIsRejected) {
  StrategyConfig c;
  c.name = "ddp";
  c.recompute = "layers";
  auto s = MakeStrategy(TinyGpt(), c, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("recompute"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace orrery::parallel
