// Private to worker/model: the decoder-only transformer's layers, described
// one at a time so that a caller can build, slice or load each layer alone.
// Layer index 0 is the embedding, 1..layers the blocks, layers + 1 the head.
// Each layer's parameters are given by local name ("attn.q.weight") with its
// full shape; the global name is LayerName(index) + "." + local.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "common/status.h"
#include "worker/model/model.h"

namespace orrery::model::internal {

struct ParamSpec {
  std::string local;
  std::vector<int64_t> shape;
};

using LayerWeights = std::map<std::string, at::Tensor>;  // local name -> value

std::string LayerName(const GptConfig& config, size_t index);
// The layer's parameters in registration order, with their full shapes.
std::vector<ParamSpec> LayerSpecs(const GptConfig& config, size_t index);
// Seeded values of layer `index`, full size, drawn from `gen` in the order the
// layers are built (`seed` regenerates a tied head's copy of the embedding).
LayerWeights InitLayer(const GptConfig& config, size_t index, at::Generator& gen, uint64_t seed);
// The LoRA adapters of block `index` (none elsewhere or without LoRA), full
// shapes, named like the base ("attn.q.lora_a", "attn.q.lora_b"; GPT-2's fused
// c_attn: "attn.qkv.lora_a" shared and a lora_b per q, k, v).
std::vector<ParamSpec> LoraSpecs(const ModelConfig& config, size_t index);
// Their initial values (PEFT's: A Kaiming-uniform, B zero) from a generator of
// their own, so the base model's values do not depend on the adapters.
LayerWeights InitLora(const ModelConfig& config, size_t index);
// The layer from its (already tensor-parallel sliced) values, base and LoRA,
// with FineTuneConfig's frozen parameters marked requires_grad false.
std::shared_ptr<Layer> MakeLayer(const ModelConfig& config, size_t index, const LayerWeights& w,
                                 const TensorParallelSlice& tp);
// This tp rank's slice of full values (GptTensorParallelDim decides).
LayerWeights SliceWeights(const GptConfig& config, size_t index, const LayerWeights& full,
                          const TensorParallelSlice& tp);

Status ValidateGpt(const GptConfig& c);

}  // namespace orrery::model::internal
