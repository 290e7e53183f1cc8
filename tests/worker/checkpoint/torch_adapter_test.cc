// LibTorch adapter: tensors saved under one layout load into another with the
// shapes FSDP and tensor parallelism keep, equal to torch's own slicing; the CPU
// RNG state round-trips.
#include "worker/checkpoint/torch_adapter.h"

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/temp_dir.h"

namespace orrery::checkpoint {
namespace {

// The rank's local tensor computed with torch ops only (the reference).
at::Tensor TorchSlice(const at::Tensor& global, const TensorSpec& spec, const Layout& l, int rank) {
  const RankCoords c = l.Coords(rank);
  at::Tensor t = global;
  if (spec.tp_dim >= 0) {
    const int64_t n = global.size(spec.tp_dim);
    t = t.narrow(spec.tp_dim, n * c.tp / l.tp, n * (c.tp + 1) / l.tp - n * c.tp / l.tp);
  }
  if (spec.fsdp_sharded && l.fsdp > 1) {
    at::Tensor flat = t.contiguous().view({-1});
    const int64_t per = (flat.numel() + l.fsdp - 1) / l.fsdp;
    flat = at::constant_pad_nd(flat, {0, per * l.fsdp - flat.numel()});
    return flat.narrow(0, per * c.fsdp, per).clone();
  }
  return t.contiguous();
}

TEST(TorchAdapterTest, SaveUnderTpLoadUnderFsdpMatchesTorchSlicing) {
  testing::TempDir tmp;
  at::manual_seed(3);
  const std::vector<TensorSpec> specs = {
      {"model/fc1.weight", {12, 10}, DType::kFloat32, 0, 0, true},  // column-parallel
      {"model/fc2.weight", {10, 12}, DType::kFloat32, 1, 1, true},  // row-parallel
      {"model/fc2.bias", {10}, DType::kFloat32, 1, -1, true},
      {"optim/fc1.weight.exp_avg", {12, 10}, DType::kFloat32, 0, 0, true},
      {"optim/step", {}, DType::kInt64, 0, -1, false},
  };
  std::vector<at::Tensor> global;
  for (const auto& s : specs) {
    global.push_back(s.dtype == DType::kInt64 ? at::full({}, 17, at::kLong) : at::randn(s.shape));
  }
  const Layout from{1, 2, 2, 1};
  const StageFn stages = BalancedStages(2);
  for (int r = 0; r < from.World(); ++r) {
    auto w = ShardWriter::Create(tmp.path(), from, r, stages);
    ASSERT_TRUE(w.ok());
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!LocalPieceOf(specs[i], from, r, stages)->present) continue;
      ASSERT_TRUE(AddTensor(**w, specs[i], TorchSlice(global[i], specs[i], from, r)).ok());
    }
    auto rng = CaptureCpuRngState();
    ASSERT_TRUE(rng.ok());
    ASSERT_TRUE((*w)->AddBlob("rng/cpu", *rng).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  CheckpointInfo info;
  info.layout = from;
  info.num_layers = 2;
  ASSERT_TRUE(CommitCheckpoint(tmp.path(), info).ok());
  auto reader = CheckpointReader::Open(tmp.path());
  ASSERT_TRUE(reader.ok());

  for (const Layout& to : {Layout{4, 1, 1, 4}, Layout{2, 1, 2, 2}, Layout{1, 3, 1, 1}}) {
    for (int r = 0; r < to.World(); ++r) {
      std::vector<at::Tensor> local(specs.size());
      std::vector<TensorSlot> slots;
      for (size_t i = 0; i < specs.size(); ++i) slots.push_back({specs[i], &local[i]});
      ASSERT_TRUE(LoadTensors(*reader, slots, to, r, stages, {}).ok());
      for (size_t i = 0; i < specs.size(); ++i) {
        if (!LocalPieceOf(specs[i], to, r, stages)->present) {
          EXPECT_FALSE(local[i].defined());
          continue;
        }
        const at::Tensor want = TorchSlice(global[i], specs[i], to, r);
        ASSERT_EQ(local[i].sizes(), want.sizes())
            << specs[i].name << " " << to.ToString() << " rank " << r;
        EXPECT_TRUE(at::equal(local[i], want))
            << specs[i].name << " " << to.ToString() << " rank " << r;
      }
    }
  }
  // In-place load into an existing (non-contiguous) parameter.
  at::Tensor param = at::zeros({10, 12}).t();  // 12x10, not contiguous: loaded through staging
  ASSERT_FALSE(param.is_contiguous());
  ASSERT_TRUE(LoadTensors(*reader, {{specs[0], &param}}, {1, 1, 1, 1}, 0, stages, {}).ok());
  EXPECT_TRUE(at::equal(param, global[0]));
  at::Tensor wrong = at::zeros({3});
  EXPECT_FALSE(LoadTensors(*reader, {{specs[0], &wrong}}, {1, 1, 1, 1}, 0, stages, {}).ok());
}

TEST(TorchAdapterTest, CpuRngStateRoundTrips) {
  at::manual_seed(11);
  auto state = CaptureCpuRngState();
  ASSERT_TRUE(state.ok());
  const at::Tensor a = at::randn({8});
  ASSERT_TRUE(RestoreCpuRngState(*state).ok());
  const at::Tensor b = at::randn({8});
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(RestoreCpuRngState("short").ok());
}

}  // namespace
}  // namespace orrery::checkpoint
