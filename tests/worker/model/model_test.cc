// Model construction: shapes, names, seeded determinism, tensor-parallel
// slicing, batches and the comparison helper.
#include "worker/model/model.h"

#include <set>

#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>

namespace orrery::model {
namespace {

ModelConfig Gpt() {
  ModelConfig c;
  c.kind = "gpt";
  c.gpt = {2, 32, 4, 16, 64};
  return c;
}

TEST(ModelTest, GptHasEmbeddingBlocksAndHead) {
  auto m = BuildModel(Gpt());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->layers.size(), 4u);
  EXPECT_EQ(m->layers[0]->name(), "embed");
  EXPECT_EQ(m->layers[3]->name(), "head");
  // embed 64*32 + 16*32; per block 12*h*h + 13*h (ln 4h, qkv 3h*h+3h, proj h*h+h, fc1 4h*h+4h, fc2
  // 4h*h+h); head 2h + 64h
  int64_t h = 32;
  int64_t want = 64 * h + 16 * h + 2 * (12 * h * h + 13 * h) + 2 * h + 64 * h;
  EXPECT_EQ(m->NumParameters(), want);
  Batch b = SyntheticBatch(Gpt(), 3, 0);
  at::Tensor logits = m->Forward(b.inputs);
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{3, 16, 64}));
  double loss = Loss(logits, b.targets).item<double>();
  EXPECT_NEAR(loss, std::log(64.0), 0.5);  // near-uniform predictions at init
}

// MoveToDevice keeps the variables (the handles layers compute with) and moves
// their data, so a layer's forward runs on the device. Where no GPU is visible a
// CUDA device is refused as a Status, not a throw; the in-place move itself runs
// with a GPU (the CUDA build on a GPU machine).
TEST(ModelTest, MoveToDeviceMovesEveryParameterInPlaceOrSaysWhy) {
  const c10::Device gpu(c10::kCUDA, 0);
  for (const char* kind : {"gpt", "mlp"}) {
    ModelConfig c = Gpt();
    c.kind = kind;
    auto m = BuildModel(c);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(MoveToDevice(*m, c10::kCPU).ok());  // already there: a no-op
    if (!torch::cuda::is_available()) {
      Status s = MoveToDevice(*m, gpu);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s;
      continue;
    }
    std::vector<const c10::TensorImpl*> before;
    for (const auto& [name, p] : m->NamedParameters()) before.push_back(p.unsafeGetTensorImpl());
    ASSERT_TRUE(MoveToDevice(*m, gpu).ok());
    size_t i = 0;
    for (const auto& [name, p] : m->NamedParameters()) {
      EXPECT_EQ(p.device(), gpu) << kind << " " << name;
      EXPECT_TRUE(p.requires_grad()) << kind << " " << name;
      EXPECT_EQ(p.unsafeGetTensorImpl(), before[i++]) << kind << " " << name << " was replaced";
    }
    Batch b = BatchOn(SyntheticBatch(c, 2, 0), gpu);
    EXPECT_EQ(b.inputs.device(), gpu);
    EXPECT_EQ(m->Forward(b.inputs).device(), gpu);
  }
}

TEST(ModelTest, GptIsCausal) {
  auto m = BuildModel(Gpt());
  ASSERT_TRUE(m.ok());
  torch::NoGradGuard no_grad;
  Batch b = SyntheticBatch(Gpt(), 1, 0);
  at::Tensor changed = b.inputs.clone();
  changed[0][10] = (changed[0][10].item<int64_t>() + 1) % 64;
  at::Tensor a = m->Forward(b.inputs), c = m->Forward(changed);
  EXPECT_TRUE(at::allclose(a.narrow(1, 0, 10), c.narrow(1, 0, 10)));
  EXPECT_FALSE(at::allclose(a.narrow(1, 10, 6), c.narrow(1, 10, 6)));
}

TEST(ModelTest, SameSeedSameWeightsOtherSeedOther) {
  auto a = BuildModel(Gpt()), b = BuildModel(Gpt());
  ModelConfig other = Gpt();
  other.seed = 99;
  auto c = BuildModel(other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*MaxRelativeDifference(a->NamedParameters(), b->NamedParameters()), 0.0);
  EXPECT_GT(*MaxRelativeDifference(a->NamedParameters(), c->NamedParameters()), 0.1);
}

TEST(ModelTest, NamesAreUnique) {
  auto m = BuildModel(Gpt());
  ASSERT_TRUE(m.ok());
  std::set<std::string> names;
  for (const auto& [n, t] : m->NamedParameters()) EXPECT_TRUE(names.insert(n).second) << n;
  EXPECT_TRUE(names.count("blocks.1.attn.q.weight"));
}

TEST(ModelTest, MlpShapes) {
  ModelConfig c;
  c.kind = "mlp";
  c.mlp = {5, 7, 3, 4};
  auto m = BuildModel(c);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->layers.size(), 4u);
  EXPECT_EQ(m->NumParameters(), (5 * 7 + 7) + 2 * (7 * 7 + 7) + (7 * 4 + 4));
  Batch b = SyntheticBatch(c, 6, 2);
  EXPECT_EQ(m->Forward(b.inputs).sizes().vec(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(b.targets.max().item<int64_t>() < 4, true);
}

TEST(ModelTest, InvalidConfigsAreRejected) {
  ModelConfig c = Gpt();
  c.gpt.heads = 5;  // does not divide 32
  EXPECT_EQ(BuildModel(c).status().code(), StatusCode::kInvalidArgument);
  c = Gpt();
  c.kind = "resnet";
  EXPECT_EQ(BuildModel(c).status().code(), StatusCode::kInvalidArgument);
  c.kind = "mlp";
  c.mlp.classes = 1;
  EXPECT_FALSE(BuildModel(c).ok());
}

TEST(ModelTest, TensorParallelSlicesAndDims) {
  EXPECT_EQ(GptTensorParallelDim("blocks.0.attn.q.weight"), 0);
  EXPECT_EQ(GptTensorParallelDim("blocks.0.mlp.fc1.bias"), 0);
  EXPECT_EQ(GptTensorParallelDim("blocks.3.attn.proj.weight"), 1);
  EXPECT_EQ(GptTensorParallelDim("blocks.3.attn.proj.bias"), -1);
  EXPECT_EQ(GptTensorParallelDim("embed.tokens"), -1);
  auto full = BuildModel(Gpt());
  ASSERT_TRUE(full.ok());
  // A one-way split needs no communicator and equals the full model.
  auto one = SliceGptForTensorParallel(Gpt().gpt, *full, 0, 1, nullptr);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*MaxRelativeDifference(one->NamedParameters(), full->NamedParameters()), 0.0);
  // A 3-way split of 4 heads is refused; a 2-way split needs a communicator.
  EXPECT_EQ(SliceGptForTensorParallel(Gpt().gpt, *full, 0, 3, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SliceGptForTensorParallel(Gpt().gpt, *full, 0, 2, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(BatchTest, SyntheticIsDeterministicAndSlices) {
  Batch a = SyntheticBatch(Gpt(), 4, 5), b = SyntheticBatch(Gpt(), 4, 5),
        c = SyntheticBatch(Gpt(), 4, 6);
  EXPECT_TRUE(a.inputs.equal(b.inputs));
  EXPECT_FALSE(a.inputs.equal(c.inputs));
  // Targets are the inputs shifted by one.
  EXPECT_TRUE(a.inputs.narrow(1, 1, 15).equal(a.targets.narrow(1, 0, 15)));
  auto half = SliceBatch(a, 1, 2);
  ASSERT_TRUE(half.ok());
  EXPECT_TRUE(half->inputs.equal(a.inputs.narrow(0, 2, 2)));
  EXPECT_FALSE(SliceBatch(a, 0, 3).ok());
}

TEST(CompareTest, ReportsTheWorstTensor) {
  NamedTensors a{{"x", at::ones({4})}, {"y", at::ones({4})}};
  NamedTensors b{{"x", at::ones({4})}, {"y", at::full({4}, 2.0f)}};
  std::string worst;
  auto d = MaxRelativeDifference(a, b, &worst);
  ASSERT_TRUE(d.ok());
  EXPECT_NEAR(*d, 0.5, 1e-9);
  EXPECT_EQ(worst, "y");
  NamedTensors missing{{"x", at::ones({4})}, {"z", at::ones({4})}};
  EXPECT_FALSE(MaxRelativeDifference(a, missing).ok());
}

}  // namespace
}  // namespace orrery::model
