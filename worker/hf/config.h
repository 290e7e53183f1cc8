// A Hugging Face model's config.json, read once for everyone: the worker builds
// the architecture from it (worker/model/pretrained.h) and the operator counts
// its parameters for the planner's estimates (operator/engine/estimate.h).
// Torch-free, so the operator and the CLI link it without LibTorch.
//
// Supported: GPT-2 (model_type gpt2) and the Llama family (llama, qwen2,
// mistral), the model_type also read from `architectures`. Every field a
// family defines that changes the computation is either read or refused with
// an INVALID_ARGUMENT naming the file, the field and what to set instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace orrery::hf {

// Rotary position embedding (Llama family): transformers 5's rope_parameters
// or the older rope_theta and rope_scaling.
struct RopeParameters {
  double theta = 10000.0;
  std::string type = "default";  // default | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_positions = 8192;
};

struct ModelConfig {
  std::string model_type;  // gpt2 | llama | qwen2 | mistral
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;      // = heads for GPT-2 and where config.json leaves it out
  int head_dim = 0;      // hidden / heads unless config.json says otherwise
  int intermediate = 0;  // the MLP's width (GPT-2's n_inner, else 4 x hidden)
  int vocab = 0;
  int max_positions = 0;  // GPT-2's learned position rows; the Llama family's context
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  bool qkv_bias = false;
  bool out_bias = false;
  bool mlp_bias = false;
  std::string activation;  // gelu_tanh (GPT-2's gelu_new) | gelu | silu (SwiGLU)
  RopeParameters rope;     // the Llama family
  // Mistral's attention window; Orrery attends over the whole sequence, so a
  // run's sequence may not exceed it (CheckSequence).
  std::optional<int> sliding_window;

  bool Gpt2() const { return model_type == "gpt2"; }
  // The worker's family: gpt2 | llama.
  std::string Family() const { return Gpt2() ? "gpt2" : "llama"; }
  // GPT-2 has learned positions, so its sequence may not exceed them; the
  // Llama family's rotary positions have no such bound.
  bool LearnedPositions() const { return Gpt2(); }
};

// config.json's text -> its architecture; `where` (the file) prefixes errors.
StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& where);

// Reads DIR/config.json: NOT_FOUND when there is none.
StatusOr<ModelConfig> ReadModelConfig(const std::string& dir);

// INVALID_ARGUMENT when a run over `seq` tokens cannot use this model: longer
// than GPT-2's learned positions or Mistral's attention window.
Status CheckSequence(const ModelConfig& config, int seq, const std::string& where);

}  // namespace orrery::hf
