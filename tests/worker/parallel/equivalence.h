// Test helper for the equivalence tests: runs a template on N ranks (threads)
// and the single-process loop on the same model and global batches, and checks
// that losses and final parameters agree within a relative tolerance.
#pragma once

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"
#include "worker/dist/device.h"
#include "worker/parallel/strategy.h"

namespace orrery::testing_worker {

// Whether the GPU tests can run: the GPU path built and a CUDA device visible.
inline bool GpuVisible() { return dist::BuiltWithCuda() && torch::cuda::device_count() > 0; }
// What a GPU test that cannot run says as it skips.
inline std::string GpuSkipReason() {
  return "needs the GPU path and a visible CUDA device (" + dist::GpuPathSummary() + ")";
}

struct RunResult {
  std::vector<double> losses;
  model::NamedTensors params;
  parallel::StrategyInfo info;
  std::vector<parallel::PlacedTensor> placement;  // after the last step
};

// The fp32 bytes of the model's largest layer: what a spill budget must hold at
// least (the spill tests size their budgets in multiples of it).
inline int64_t LargestLayerBytes(const model::ModelConfig& mc) {
  auto m = model::BuildModel(mc);
  EXPECT_TRUE(m.ok());
  int64_t largest = 0;
  for (const auto& l : m->layers) {
    int64_t b = 0;
    for (const auto& [n, t] : l->NamedParameters()) b += t.numel() * 4;
    largest = std::max(largest, b);
  }
  return largest;
}

inline model::ModelConfig TinyGpt() {
  model::ModelConfig c;
  c.kind = "gpt";
  c.gpt = {2, 32, 4, 16, 64};
  c.seed = 7;
  return c;
}

inline model::ModelConfig TinyMlp() {
  model::ModelConfig c;
  c.kind = "mlp";
  c.mlp = {32, 64, 2, 10};
  c.seed = 11;
  return c;
}

constexpr int kSteps = 3;
constexpr int kBatch = 8;

inline StatusOr<RunResult> TrainOn(const model::ModelConfig& mc, const parallel::StrategyConfig& sc,
                                   const parallel::OptimizerConfig& oc, dist::Rendezvous* rdv) {
  ORRERY_ASSIGN_OR_RETURN(auto strategy, parallel::MakeStrategy(mc, sc, oc, rdv));
  RunResult r;
  for (int step = 0; step < kSteps; ++step) {
    ORRERY_ASSIGN_OR_RETURN(double loss, strategy->Step(model::SyntheticBatch(mc, kBatch, step)));
    r.losses.push_back(loss);
  }
  r.placement = strategy->Placement();
  ORRERY_ASSIGN_OR_RETURN(r.params, strategy->GatherFullParameters());
  r.info = strategy->Info();
  return r;
}

inline RunResult Reference(const model::ModelConfig& mc, const parallel::OptimizerConfig& oc = {},
                           c10::Device device = c10::kCPU) {
  at::set_num_threads(1);
  parallel::StrategyConfig sc;
  sc.name = "single";
  sc.device = device;
  auto r = TrainOn(mc, sc, oc, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

inline std::vector<RunResult> RunTemplate(int world, const model::ModelConfig& mc,
                                          const parallel::StrategyConfig& sc,
                                          const parallel::OptimizerConfig& oc = {}) {
  at::set_num_threads(1);
  std::vector<RunResult> out(static_cast<size_t>(world));
  auto statuses = RunRanks(world, [&](int rank, dist::Rendezvous* rdv) -> Status {
    ORRERY_ASSIGN_OR_RETURN(out[static_cast<size_t>(rank)],
                            TrainOn(mc, sc, oc, world == 1 ? nullptr : rdv));
    return OkStatus();
  });
  for (size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  return out;
}

// 1e-5 relative, in float32: per-step losses elementwise, parameters by norm
// of the difference over norm of the reference, tensor by tensor.
inline void ExpectEquivalent(const RunResult& ref, const std::vector<RunResult>& ranks,
                             double tol = 1e-5) {
  ASSERT_FALSE(ref.losses.empty());
  for (size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_EQ(ranks[r].losses.size(), ref.losses.size()) << "rank " << r;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
      EXPECT_LE(std::abs(ranks[r].losses[s] - ref.losses[s]), tol * std::abs(ref.losses[s]))
          << "rank " << r << " step " << s << ": " << ranks[r].losses[s] << " vs " << ref.losses[s];
    }
    std::string worst;
    auto diff = model::MaxRelativeDifference(ranks[r].params, ref.params, &worst);
    ASSERT_TRUE(diff.ok()) << diff.status();
    EXPECT_LE(*diff, tol) << "rank " << r << " parameter " << worst;
  }
  // Training did something: parameters moved away from the initial ones and
  // the loss changed, so equality is not vacuous.
  EXPECT_NE(ref.losses.front(), ref.losses.back());
}

}  // namespace orrery::testing_worker
