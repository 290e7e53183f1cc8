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

// Strategy::Forward: every template's own forward (tensor slices, pipeline
// stages, gathered fsdp units, spilled shards) gives the one-process model's
// outputs on every rank, before and after a step.
struct ForwardLayout {
  std::string name;
  int world;
  dist::Layout layout{1, 1, 1};
};

void ExpectForwardEqualsOneProcess(const model::ModelConfig& mc,
                                   const std::vector<ForwardLayout>& layouts) {
  at::set_num_threads(1);
  const model::Batch batch = model::SyntheticBatch(mc, 4, 1);
  for (const ForwardLayout& l : layouts) {
    StrategyConfig sc;
    sc.name = l.name;
    sc.layout = l.layout;
    sc.spill_budget_bytes = 200 << 10;
    if (l.layout.pp > 1 || l.name == "pipeline") sc.micro_batches = 2;
    std::vector<double> before(static_cast<size_t>(l.world), 1), after(before);
    auto statuses =
        testing_worker::RunRanks(l.world, [&](int rank, dist::Rendezvous* rdv) -> Status {
          ORRERY_ASSIGN_OR_RETURN(auto s, MakeStrategy(mc, sc, {}, l.world == 1 ? nullptr : rdv));
          // The one-process model with the same parameters.
          auto expect = [&](double& diff) -> Status {
            ORRERY_ASSIGN_OR_RETURN(at::Tensor got, s->Forward(batch.inputs));
            ORRERY_ASSIGN_OR_RETURN(model::NamedTensors full, s->GatherFullParameters());
            ORRERY_ASSIGN_OR_RETURN(auto one, MakeStrategy(mc, {}, {}, nullptr));
            ORRERY_RETURN_IF_ERROR(one->LoadFullParameters(full));
            ORRERY_ASSIGN_OR_RETURN(at::Tensor want, one->Forward(batch.inputs));
            if (!got.sizes().equals(want.sizes()))
              return InternalError("outputs of the wrong shape");
            diff = ((got - want).abs().max() / want.abs().max()).item<double>();
            return OkStatus();
          };
          ORRERY_RETURN_IF_ERROR(expect(before[static_cast<size_t>(rank)]));
          ORRERY_RETURN_IF_ERROR(s->Step(model::SyntheticBatch(mc, 8, 0)).status());
          return expect(after[static_cast<size_t>(rank)]);
        });
    const std::string what = mc.kind + " " + l.name + " x" + std::to_string(l.world) + " " +
                             dist::LayoutToString(l.layout);
    for (int r = 0; r < l.world; ++r) {
      ASSERT_TRUE(statuses[static_cast<size_t>(r)].ok())
          << what << " rank " << r << ": " << statuses[static_cast<size_t>(r)];
      EXPECT_LE(before[static_cast<size_t>(r)], 1e-5) << what << " rank " << r;
      EXPECT_LE(after[static_cast<size_t>(r)], 1e-5) << what << " rank " << r << " after a step";
    }
  }
}

TEST(ForwardTest, EveryTemplateGivesTheOneProcessOutputs) {
  ExpectForwardEqualsOneProcess(testing_worker::TinyGpt(), {{"single", 1},
                                                            {"ddp", 2},
                                                            {"fsdp", 2},
                                                            {"fsdp", 4},
                                                            {"tensor", 2},
                                                            {"tensor", 4},
                                                            {"pipeline", 2},
                                                            {"pipeline", 4},
                                                            {"spill", 1},
                                                            {"spill", 2},
                                                            {"hybrid", 4, {2, 2, 1}},
                                                            {"hybrid", 4, {1, 2, 2}},
                                                            {"hybrid", 4, {2, 1, 2}}});
  ExpectForwardEqualsOneProcess(testing_worker::TinyMlp(),
                                {{"ddp", 2}, {"fsdp", 2}, {"pipeline", 2}, {"spill", 1}});
}

// Frozen parameters (LoRA's base weights, frozen blocks) have no optimizer
// state in any template: each rank's slots hold exactly the trained elements
// of its segments, and together the writers' hold every trained parameter once.
TEST(FrozenStateTest, FrozenParametersHaveNoOptimizerState) {
  at::set_num_threads(1);
  for (const char* what : {"lora", "frozen"}) {
    model::ModelConfig mc = testing_worker::TinyGpt();
    if (std::string(what) == "lora") {
      mc.finetune.lora_rank = 2;
      mc.finetune.lora_targets = {"c_attn", "c_fc"};
    } else {
      mc.finetune.freeze_embeddings = true;
      mc.finetune.freeze_blocks = 1;
    }
    auto whole = model::BuildModel(mc);
    ASSERT_TRUE(whole.ok()) << whole.status();
    int64_t trainable = 0, total = 0;
    for (const auto& [n, p] : whole->NamedParameters()) {
      total += p.numel();
      if (p.requires_grad()) trainable += p.numel();
    }
    ASSERT_GT(trainable, 0);
    ASSERT_LT(trainable, total / 2) << what;
    OptimizerConfig adam;
    adam.kind = "adamw";
    adam.lr = 1e-2;
    for (const ForwardLayout& l : std::vector<ForwardLayout>{
             {"single", 1}, {"ddp", 2}, {"fsdp", 2}, {"spill", 1}, {"hybrid", 4, {1, 2, 2}}}) {
      StrategyConfig sc;
      sc.name = l.name;
      sc.layout = l.layout;
      sc.spill_budget_bytes = 200 << 10;
      if (l.layout.pp > 1) sc.micro_batches = 2;
      std::vector<int64_t> slot_elements(static_cast<size_t>(l.world)),
          trained_in_segments(slot_elements), written_trained(slot_elements),
          frozen_segments(slot_elements), tensors(slot_elements);
      auto statuses =
          testing_worker::RunRanks(l.world, [&](int rank, dist::Rendezvous* rdv) -> Status {
            ORRERY_ASSIGN_OR_RETURN(auto s,
                                    MakeStrategy(mc, sc, adam, l.world == 1 ? nullptr : rdv));
            ORRERY_RETURN_IF_ERROR(s->Step(model::SyntheticBatch(mc, 8, 0)).status());
            ORRERY_ASSIGN_OR_RETURN(LocalState state, s->State());
            const auto r = static_cast<size_t>(rank);
            for (const auto& t : state.slots[0]) slot_elements[r] += t.numel();
            tensors[r] = static_cast<int64_t>(state.params.size());
            for (const StateSegment& seg : state.segments) {
              const int64_t n = seg.region.Numel();
              if (seg.slot_offset < 0) {
                ++frozen_segments[r];
                continue;
              }
              trained_in_segments[r] += n;
              if (seg.writer) written_trained[r] += n;
              if (seg.slot_offset + n > state.slots[0][seg.param].numel())
                return InternalError("segment " + seg.name + " outside its slot");
            }
            return OkStatus();
          });
      const std::string label = std::string(what) + " " + l.name + " x" + std::to_string(l.world);
      int64_t written = 0, frozen = 0;
      for (int r = 0; r < l.world; ++r) {
        const auto i = static_cast<size_t>(r);
        ASSERT_TRUE(statuses[i].ok()) << label << " rank " << r << ": " << statuses[i];
        // fsdp pads a unit all of whose parameters train to a multiple of the
        // ranks: fewer than `world` elements of padding per tensor.
        EXPECT_GE(slot_elements[i], trained_in_segments[i]) << label << " rank " << r;
        EXPECT_LT(slot_elements[i], trained_in_segments[i] + l.world * tensors[i] + 1)
            << label << " rank " << r;
        written += written_trained[i];
        frozen += frozen_segments[i];
      }
      EXPECT_EQ(written, trainable) << label;
      EXPECT_GT(frozen, 0) << label;
    }
  }
}

}  // namespace
}  // namespace orrery::parallel
