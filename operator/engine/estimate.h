// A first-principles estimate of a configuration's throughput and memory, used
// where no profile was measured (`orrery plan` before anything ran). Every
// figure it returns is an estimate and is labelled as one; profiles replace it.
//   compute: 6 FLOPs per parameter per token for a forward and backward pass
//            (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1);
//   device:  A100 dense BF16 peak 312 TFLOP/s (NVIDIA A100 datasheet) at 40% model
//            FLOPs utilisation (Chowdhery et al. 2022, "PaLM", Table 3 reports
//            46%); a CPU core ~50 GFLOP/s;
//   memory:  16 bytes per parameter with mixed-precision Adam (weights, gradients,
//            two moments, master copy; Rajbhandari et al. 2020, "ZeRO", §3.1),
//            divided by the degree that shards it.
#pragma once

#include <optional>
#include <string>

#include "operator/api/types.h"
#include "operator/planner/problem.h"

namespace orrery::engine {

struct DeviceModel {
  std::string kind = "cuda";     // cuda | cpu
  double flops = 312e12 * 0.40;  // sustained FLOP/s per device
  double memory_gib = 80;        // per device
};
DeviceModel DefaultDevice(const std::string& kind);

// Parameters of the task's model; 0 for TorchScript (unknown before loading).
double ModelParameters(const api::TaskSpec& task);
// Samples per second and per-device memory for `template_name` on `gpus`
// devices; nullopt when the template cannot run the model on that many devices.
std::optional<planner::Config> EstimateConfig(const api::TaskSpec& task,
                                              const std::string& template_name, int gpus,
                                              const DeviceModel& device);

}  // namespace orrery::engine
