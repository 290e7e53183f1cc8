// Where the templates compute (StrategyConfig::device). Every template, after a
// few steps, reports the device of every tensor it holds or used (Placement):
// each parameter, gradient, optimizer slot, communication bucket and batch row
// must be on the configured device, except spill's host masters, which must be
// in host memory. The report is checked for completeness too (every parameter
// has its gradient and its optimizer slots), so an empty report cannot pass.
// On this CPU build the configured device is the CPU; with the GPU path and a
// visible GPU the same checks run on cuda:0, and each template's losses and
// parameters on the GPU must equal one process on the GPU within 1e-5 (ranks are
// threads sharing the GPU, joined by gloo, which stages CUDA tensors through
// host memory: NCCL refuses two ranks on one device).
#include "worker/dist/device.h"

#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/worker/parallel/equivalence.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::GpuSkipReason;
using testing_worker::GpuVisible;
using testing_worker::Reference;
using testing_worker::RunResult;
using testing_worker::RunTemplate;
using testing_worker::TinyGpt;
using testing_worker::TinyMlp;

struct Case {
  std::string label;
  int world;
  StrategyConfig config;
  bool gpt;
};

std::vector<Case> Cases() {
  auto named = [](const std::string& name) {
    StrategyConfig c;
    c.name = name;
    return c;
  };
  auto hybrid = [](int dp, int tp, int pp) {
    StrategyConfig c;
    c.name = "hybrid";
    c.layout = {dp, tp, pp};
    return c;
  };
  StrategyConfig one_f_one_b = named("pipeline");
  one_f_one_b.pipeline_schedule = "1f1b";
  StrategyConfig ddp_buckets = named("ddp");
  ddp_buckets.bucket_bytes = 4096;
  StrategyConfig spill = named("spill");
  spill.spill_budget_bytes = 160 << 10;  // a third fits one TinyGpt block: 4 shards
  StrategyConfig spill_serial = spill;
  spill_serial.spill_double_buffer = false;
  // Recomputation the other way from each template's default (none; spill: unit).
  auto recomputing = [](StrategyConfig c, const std::string& mode) {
    c.recompute = mode;
    return c;
  };
  std::vector<Case> all = {
      {"single", 1, named("single"), true},
      {"ddp", 2, ddp_buckets, false},
      {"fsdp", 2, named("fsdp"), true},
      {"tensor", 2, named("tensor"), true},
      {"pipeline-gpipe", 2, named("pipeline"), true},
      {"pipeline-1f1b", 2, one_f_one_b, true},
      {"hybrid-dp2-tp2", 4, hybrid(2, 2, 1), true},
      {"hybrid-tp2-pp2", 4, hybrid(1, 2, 2), true},
      {"spill", 2, spill, true},
      {"spill-no-double-buffer", 1, spill_serial, true},
      {"single-recompute-unit", 1, recomputing(named("single"), "unit"), true},
      {"ddp-recompute-unit", 2, recomputing(ddp_buckets, "unit"), true},
      {"fsdp-recompute-unit", 2, recomputing(named("fsdp"), "unit"), true},
      {"pipeline-1f1b-recompute-unit", 2, recomputing(one_f_one_b, "unit"), true},
      {"spill-recompute-none", 2, recomputing(spill, "none"), true},
  };
  // ORRERY_DEVICE_TEST_CASES=ddp,fsdp runs only those labels (scripts/gpu-check
  // runs each case on its own, under its own time limit, to tell which one hangs).
  const char* only = std::getenv("ORRERY_DEVICE_TEST_CASES");
  if (only == nullptr || *only == '\0') return all;
  std::set<std::string> wanted;
  std::stringstream list(only);
  for (std::string one; std::getline(list, one, ',');) wanted.insert(one);
  std::vector<Case> picked;
  for (const Case& c : all)
    if (wanted.count(c.label) > 0) picked.push_back(c);
  return picked;
}

// Tensor parallelism all-reduces inside autograd's backward (Megatron's f and
// g, worker/model/transformer.cc). On a GPU, autograd runs every backward on
// its one thread per device, so with ranks as threads sharing cuda:0, rank 0's
// backward blocks in that all-reduce while rank 1's waits behind it on the same
// thread: a deadlock of this test's set-up, not of the template (seen on an
// H100: tensor and both hybrids with tp=2 hung; as processes, one per rank as
// in production, they match one process: scripts/gpu-check's gloo-* checks).
bool AllReducesInsideBackward(const Case& c) {
  return c.world > 1 && (c.config.name == "tensor" || c.config.layout.tp > 1);
}

// Every entry on `device` (host masters on the host), and the report complete.
void ExpectPlaced(const Case& c, int rank, const std::vector<PlacedTensor>& placement,
                  c10::Device device) {
  const std::string label = c.label + " rank " + std::to_string(rank);
  std::map<std::string, int> kinds;  // "param", "grad", "optim", "batch", ...
  std::set<std::string> params, grads;
  for (const auto& t : placement) {
    std::string kind = t.name.substr(0, t.name.find('/'));
    ++kinds[kind];
    std::string rest = t.name.substr(t.name.find('/') + 1);
    if (kind == "param") params.insert(rest);
    if (kind == "grad") grads.insert(rest);
    c10::Device want = t.host_by_design ? c10::Device(c10::kCPU) : device;
    EXPECT_EQ(t.device, want) << label << ": " << t.name << " is on " << t.device.str();
  }
  EXPECT_GT(kinds["param"], 0) << label;
  EXPECT_GT(kinds["optim"], 0) << label;
  EXPECT_EQ(kinds["batch"], 2) << label << ": inputs and targets";
  if (c.config.name == "spill") {
    EXPECT_GT(kinds["shard"], 0) << label << ": the shards' device buffers";
  } else if (c.config.name != "fsdp") {
    // fsdp's unit variables are unbound between steps; its shard gradients are
    // "grad/shard/...". Everyone else holds a gradient per parameter.
    EXPECT_EQ(params, grads) << label;
  }
  if (c.config.name == "ddp") {
    EXPECT_GT(kinds["comm"], 1) << label << ": the gradient buckets";
  }
}

void CheckPlacementOn(c10::Device device) {
  for (const Case& c : Cases()) {
    if (device.is_cuda() && AllReducesInsideBackward(c)) {
      std::cout << "[   NOTE   ] " << c.label
                << ": not run as threads on one GPU (all-reduce inside backward; see "
                   "AllReducesInsideBackward); scripts/gpu-check runs it as processes\n";
      continue;
    }
    StrategyConfig sc = c.config;
    sc.device = device;
    auto ranks = RunTemplate(c.world, c.gpt ? TinyGpt() : TinyMlp(), sc);
    for (size_t r = 0; r < ranks.size(); ++r)
      ExpectPlaced(c, static_cast<int>(r), ranks[r].placement, device);
  }
}

TEST(PlacementTest, EveryTemplateKeepsItsTensorsOnTheCpu) { CheckPlacementOn(c10::kCPU); }

TEST(PlacementTest, EveryTemplateKeepsItsTensorsOnTheGpu) {
  if (!GpuVisible()) GTEST_SKIP() << GpuSkipReason();
  CheckPlacementOn(c10::Device(c10::kCUDA, 0));
}

TEST(CudaEquivalenceTest, EveryTemplateOnTheGpuEqualsOneProcessOnTheGpu) {
  if (!GpuVisible()) GTEST_SKIP() << GpuSkipReason();
  const c10::Device gpu(c10::kCUDA, 0);
  std::map<bool, RunResult> reference = {{true, Reference(TinyGpt(), {}, gpu)},
                                         {false, Reference(TinyMlp(), {}, gpu)}};
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    if (AllReducesInsideBackward(c)) {
      std::cout << "[   NOTE   ] " << c.label
                << ": not run as threads on one GPU (see AllReducesInsideBackward)\n";
      continue;
    }
    StrategyConfig sc = c.config;
    sc.device = gpu;
    ExpectEquivalent(reference[c.gpt], RunTemplate(c.world, c.gpt ? TinyGpt() : TinyMlp(), sc));
  }
  // And the GPU's single process is the CPU's, to float32 rounding.
  RunResult cpu = Reference(TinyGpt());
  ExpectEquivalent(cpu, {reference[true]}, 1e-4);
}

}  // namespace
}  // namespace orrery::parallel
