// ddp, tensor, pipeline and their dp × tp × pp compositions equal the
// single-process loop (losses and parameters within 1e-5 relative, float32).
#include <gtest/gtest.h>

#include "tests/worker/parallel/equivalence.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::Reference;
using testing_worker::RunTemplate;
using testing_worker::TinyGpt;
using testing_worker::TinyMlp;

StrategyConfig Named(const std::string& name) {
  StrategyConfig c;
  c.name = name;
  return c;
}

StrategyConfig Hybrid(int dp, int tp, int pp) {
  StrategyConfig c;
  c.name = "hybrid";
  c.layout = {dp, tp, pp};
  return c;
}

TEST(DdpTest, GptEqualsOneProcess) {
  ExpectEquivalent(Reference(TinyGpt()), RunTemplate(2, TinyGpt(), Named("ddp")));
}

TEST(DdpTest, MlpEqualsOneProcessWithSeveralBuckets) {
  StrategyConfig c = Named("ddp");
  c.bucket_bytes = 4096;  // several buckets, launched as backward reaches them
  auto ranks = RunTemplate(2, TinyMlp(), c);
  ExpectEquivalent(Reference(TinyMlp()), ranks);
  EXPECT_GT(ranks[0].info.buckets, 1);
}

TEST(DdpTest, AdamWEqualsOneProcess) {
  OptimizerConfig adam;
  adam.kind = "adamw";
  adam.lr = 1e-3;
  adam.weight_decay = 0.01;
  ExpectEquivalent(Reference(TinyMlp(), adam), RunTemplate(2, TinyMlp(), Named("ddp"), adam));
}

TEST(TensorTest, GptEqualsOneProcess) {
  ExpectEquivalent(Reference(TinyGpt()), RunTemplate(2, TinyGpt(), Named("tensor")));
}

TEST(TensorTest, MlpIsRejected) {
  auto statuses = testing_worker::RunRanks(2, [](int, dist::Rendezvous* rdv) -> Status {
    auto s = MakeStrategy(TinyMlp(), Named("tensor"), {}, rdv);
    return s.ok() ? InternalError("accepted") : s.status();
  });
  for (const auto& s : statuses) EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
}

TEST(PipelineTest, GptEqualsOneProcess) {
  auto ranks = RunTemplate(2, TinyGpt(), Named("pipeline"));
  ExpectEquivalent(Reference(TinyGpt()), ranks);
  ASSERT_EQ(ranks[0].info.stage_starts.size(), 1u);
  EXPECT_EQ(ranks[0].info.stage_starts, ranks[1].info.stage_starts);
  EXPECT_EQ(ranks[0].info.micro_batches, 4);
}

TEST(PipelineTest, MlpEqualsOneProcessWithExplicitStages) {
  StrategyConfig c = Named("pipeline");
  c.stage_starts = {1};
  c.micro_batches = 2;
  ExpectEquivalent(Reference(TinyMlp()), RunTemplate(2, TinyMlp(), c));
}

TEST(HybridTest, DataTimesTensorEqualsOneProcess) {
  ExpectEquivalent(Reference(TinyGpt()), RunTemplate(4, TinyGpt(), Hybrid(2, 2, 1)));
}

TEST(HybridTest, DataTimesPipelineEqualsOneProcess) {
  ExpectEquivalent(Reference(TinyGpt()), RunTemplate(4, TinyGpt(), Hybrid(2, 1, 2)));
  ExpectEquivalent(Reference(TinyMlp()), RunTemplate(4, TinyMlp(), Hybrid(2, 1, 2)));
}

TEST(HybridTest, TensorTimesPipelineEqualsOneProcess) {
  ExpectEquivalent(Reference(TinyGpt()), RunTemplate(4, TinyGpt(), Hybrid(1, 2, 2)));
}

TEST(HybridTest, LayoutMustMatchTheWorld) {
  auto s = MakeStrategy(TinyGpt(), Hybrid(2, 1, 1), {}, nullptr);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace orrery::parallel
