// The factory, the stage balancer, the single-process loop learning, and the
// TorchScript path (ddp and fsdp equal one process; tensor and pipeline refuse).
#include "worker/parallel/strategy.h"

#include <gtest/gtest.h>

#include <torch/script.h>
#include <torch/torch.h>

#include "tests/worker/parallel/equivalence.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::Reference;
using testing_worker::RunTemplate;
using testing_worker::TempDir;

TEST(BalanceStagesTest, MinimisesTheSlowestStage) {
  auto s = BalanceStages({1, 1, 1, 1, 4}, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, std::vector<int>{4});  // 4 | 4
  s = BalanceStages({3, 1, 1, 1, 3}, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int>{1, 4}));  // 3 | 3 | 3
  s = BalanceStages({1, 2, 3}, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int>{1, 2}));
  EXPECT_FALSE(BalanceStages({1, 2}, 3).ok());
  EXPECT_FALSE(BalanceStages({1, 2}, 0).ok());
}

TEST(SingleTest, LossFallsOnSyntheticData) {
  at::set_num_threads(1);
  model::ModelConfig mc = testing_worker::TinyGpt();
  StrategyConfig sc;
  OptimizerConfig oc;
  oc.kind = "adamw";
  oc.lr = 3e-3;
  auto s = MakeStrategy(mc, sc, oc, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto loss = (*s)->Step(model::SyntheticBatch(mc, 16, step));
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (step == 0) first = *loss;
    last = *loss;
  }
  EXPECT_LT(last, 0.7 * first) << first << " -> " << last;
}

TEST(FactoryTest, RejectsUnknownNames) {
  StrategyConfig sc;
  sc.name = "zero-bubble";
  EXPECT_EQ(MakeStrategy(testing_worker::TinyMlp(), sc, {}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  sc.name = "single";
  OptimizerConfig oc;
  oc.kind = "lion";
  EXPECT_EQ(MakeStrategy(testing_worker::TinyMlp(), sc, oc, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(FactoryTest, LoadFullParametersRoundTrips) {
  at::set_num_threads(1);
  model::ModelConfig mc = testing_worker::TinyMlp();
  StrategyConfig sc;
  auto a = MakeStrategy(mc, sc, {}, nullptr);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->Step(model::SyntheticBatch(mc, 8, 0)).ok());
  auto trained = (*a)->GatherFullParameters();
  ASSERT_TRUE(trained.ok());
  auto b = MakeStrategy(mc, sc, {}, nullptr);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->LoadFullParameters(*trained).ok());
  auto loaded = (*b)->GatherFullParameters();
  ASSERT_TRUE(loaded.ok());
  auto diff = model::MaxRelativeDifference(*loaded, *trained);
  ASSERT_TRUE(diff.ok());
  EXPECT_EQ(*diff, 0.0);
}

// A scripted two-layer classifier written from C++ (no Python needed).
std::string SaveScriptedMlp(const std::string& dir) {
  torch::jit::Module m("Classifier");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  m.register_parameter("w1", at::empty({16, 32}).normal_(0, 0.2, gen), false);
  m.register_parameter("b1", at::zeros({16}), false);
  m.register_parameter("w2", at::empty({10, 16}).normal_(0, 0.2, gen), false);
  m.define(R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    return torch.matmul(h, self.w2.t())
)");
  std::string path = dir + "/classifier.pt";
  m.save(path);
  return path;
}

TEST(TorchScriptTest, DdpAndFsdpEqualOneProcess) {
  TempDir dir;
  model::ModelConfig mc;
  mc.kind = "torchscript";
  mc.torchscript_path = SaveScriptedMlp(dir.path());
  mc.torchscript_like = "mlp";
  mc.mlp.input = 32;
  mc.mlp.classes = 10;
  for (const char* name : {"ddp", "fsdp"}) {
    SCOPED_TRACE(name);
    StrategyConfig sc;
    sc.name = name;
    ExpectEquivalent(Reference(mc), RunTemplate(2, mc, sc));
  }
}

TEST(TorchScriptTest, TensorAndPipelineRefuse) {
  TempDir dir;
  model::ModelConfig mc;
  mc.kind = "torchscript";
  mc.torchscript_path = SaveScriptedMlp(dir.path());
  for (const char* name : {"tensor", "pipeline"}) {
    StrategyConfig sc;
    sc.name = name;
    auto statuses = testing_worker::RunRanks(2, [&](int, dist::Rendezvous* rdv) -> Status {
      auto s = MakeStrategy(mc, sc, {}, rdv);
      return s.ok() ? InternalError("accepted") : s.status();
    });
    for (const auto& s : statuses) {
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << name << ": " << s;
      EXPECT_NE(s.message().find("TorchScript"), std::string::npos) << s;
    }
  }
}

TEST(TorchScriptTest, AMissingFileIsAnError) {
  model::ModelConfig mc;
  mc.kind = "torchscript";
  mc.torchscript_path = "/nonexistent/model.pt";
  EXPECT_EQ(MakeStrategy(mc, {}, {}, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace orrery::parallel
