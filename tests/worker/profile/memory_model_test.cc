// The planner's per-device memory estimate (engine::EstimateConfig plus
// engine::ActivationBytes, as the planner adds them) is within 10% of the peak
// `orrery-worker profile` measures, for a small GPT and an MLP under ddp,
// fsdp, tensor and pipeline on one and two ranks (the full table, and the
// cases still outside: bench/worker/memory_model_bench; docs/DESIGN.md, "The
// memory model"). A peak varies a few percent from run to run with how
// communication overlaps compute (a first CI run measured tensor x2 at 2.88 MB
// where the bench had 2.81 MB), so each case is measured three times and compared
// with the largest peak, the one a plan must fit (under load the overlaps, and
// so the peaks, are smaller: fsdp x2 measured 2.63 MB on a loaded machine
// where the bench had 2.70-2.84 MB).
#include "bench/worker/memory_model.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

namespace orrery::memory_model {

// GoogleTest names a failing case by this.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.template_name << " x" << c.ranks << " recompute=" << c.recompute;
}

namespace {

class MemoryModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(MemoryModelTest, EstimateWithinTenPercent) {
  const Case& c = GetParam();
  const std::string scratch = std::filesystem::temp_directory_path().string() +
                              "/orrery-memory-model-test-" + std::to_string(::getpid());
  std::optional<double> estimate = EstimateBytes(c);
  ASSERT_TRUE(estimate.has_value()) << "the planner offers no configuration for this case";
  double measured = 0;
  for (int run = 0; run < 3; ++run) {
    StatusOr<double> peak = MeasureBytes(ORRERY_WORKER_BINARY, c, scratch);
    std::filesystem::remove_all(scratch);
    ASSERT_TRUE(peak.ok()) << peak.status();
    measured = std::max(measured, *peak);
  }
  const double ratio = *estimate / measured;
  EXPECT_GE(ratio, 0.9) << "under by more than 10%: estimate " << *estimate << " B, measured "
                        << measured << " B";
  EXPECT_LE(ratio, 1.1) << "over by more than 10%: estimate " << *estimate << " B, measured "
                        << measured << " B";
}

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return (c.task.model.gpt ? std::string("gpt") : std::string("mlp")) + "_" + c.template_name +
         "_" + std::to_string(c.ranks) + "_" + c.recompute;
}

const api::TaskSpec kGpt = Gpt(2, 64, 4, 32, 128, 8);
const api::TaskSpec kMlp = Mlp(3, 256, 64, 10, 32);

INSTANTIATE_TEST_SUITE_P(Templates, MemoryModelTest,
                         ::testing::Values(Case{"gpt", kGpt, "ddp", 1, "unit"},
                                           Case{"gpt", kGpt, "ddp", 2, "unit"},
                                           Case{"gpt", kGpt, "fsdp", 2, "unit"},
                                           Case{"gpt", kGpt, "tensor", 2, "none"},
                                           Case{"gpt", kGpt, "tensor", 2, "unit"},
                                           Case{"gpt", kGpt, "pipeline", 2, "unit"},
                                           Case{"mlp", kMlp, "fsdp", 2, "none"}),
                         Name);

}  // namespace
}  // namespace orrery::memory_model
