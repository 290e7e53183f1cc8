#include "operator/engine/estimate.h"

#include <cmath>

namespace orrery::engine {

DeviceModel DefaultDevice(const std::string& kind) {
  DeviceModel d;
  d.kind = kind;
  if (kind == "cpu") {
    d.flops = 50e9;
    d.memory_gib = 16;
  }
  return d;
}

double ModelParameters(const api::TaskSpec& task) {
  const api::ModelSpec& m = task.model;
  if (m.gpt) {
    double h = m.gpt->hidden, l = m.gpt->layers;
    // Per block: attention 4h² and MLP 8h² (weights); embeddings and positions.
    return 12 * l * h * h + m.gpt->vocab * h + m.gpt->seq_len * h;
  }
  if (m.mlp) {
    double h = m.mlp->hidden;
    return m.mlp->inputs * h + std::max(0, m.mlp->layers - 1) * h * h + h * m.mlp->outputs;
  }
  return 0;
}

std::optional<planner::Config> EstimateConfig(const api::TaskSpec& task,
                                              const std::string& template_name, int gpus,
                                              const DeviceModel& device) {
  double params = ModelParameters(task);
  if (params <= 0 || gpus < 1) return std::nullopt;
  const api::ModelSpec& m = task.model;
  double tokens = m.gpt ? m.gpt->seq_len : 1;
  double flops_per_sample = 6 * params * tokens;
  // Parallel efficiency per doubling of devices: communication that overlaps
  // (ddp) costs least; sharding adds gathers (fsdp); tensor parallelism
  // communicates inside every layer; pipelines idle in their bubble. These are
  // rough planning figures, not measurements.
  double per_doubling = 0.95;
  double memory_divisor = 1;
  if (template_name == "fsdp") {
    per_doubling = 0.9;
    memory_divisor = gpus;
  } else if (template_name == "tensor") {
    if (!m.gpt || m.gpt->heads % gpus != 0) return std::nullopt;
    per_doubling = 0.85;
    memory_divisor = gpus;
  } else if (template_name == "pipeline") {
    if (!m.gpt || m.gpt->layers < gpus) return std::nullopt;
    per_doubling = 0.8;
    memory_divisor = gpus;
  } else if (template_name == "spill") {
    per_doubling = 0.9;
  } else if (template_name != "ddp") {
    return std::nullopt;
  }
  double efficiency = std::pow(per_doubling, std::log2(static_cast<double>(gpus)));
  double bytes = 16 * params / memory_divisor;
  double spill_penalty = 1;
  if (template_name == "spill") {
    // Spilling keeps parameters in host memory and streams shards in: a device
    // holds a working set, at roughly half speed (Hydra reports 1.5-2x).
    spill_penalty = 0.5;
    bytes = std::min(bytes, device.memory_gib * 0.5 * (1ull << 30));
  }
  planner::Config c;
  c.template_name = template_name;
  c.gpus = gpus;
  c.nodes = 1;
  c.batch_size = static_cast<int>(task.training.batch_size);
  c.throughput = device.flops * gpus * efficiency * spill_penalty / flops_per_sample;
  c.memory_gib = bytes / (1ull << 30);
  return c;
}

}  // namespace orrery::engine
