// See config.h. Field names and defaults follow transformers' configuration
// classes (configuration_gpt2.py, configuration_llama.py, configuration_qwen2.py,
// configuration_mistral.py) and, for rotary scaling, modeling_rope_utils.py.
#include "worker/hf/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace orrery::hf {
namespace {

using Json = nlohmann::json;

// Typed reads of config.json's fields, each error naming the file and field.
class Fields {
 public:
  Fields(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}
  bool Has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  StatusOr<int> Int(const char* key, std::optional<int> fallback = std::nullopt) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return InvalidArgumentError(where_ + ": field " + key + " is missing");
    }
    const Json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1LL << 30))
      return InvalidArgumentError(where_ + ": field " + key + " must be a non-negative integer");
    return v.get<int>();
  }
  StatusOr<double> Double(const char* key, double fallback) const {
    if (!Has(key)) return fallback;
    if (!j_.at(key).is_number())
      return InvalidArgumentError(where_ + ": field " + key + " must be a number");
    return j_.at(key).get<double>();
  }
  StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!j_.at(key).is_boolean())
      return InvalidArgumentError(where_ + ": field " + key + " must be true or false");
    return j_.at(key).get<bool>();
  }
  StatusOr<std::string> String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    if (!j_.at(key).is_string())
      return InvalidArgumentError(where_ + ": field " + key + " must be a string");
    return j_.at(key).get<std::string>();
  }

 private:
  const Json& j_;
  std::string where_;
};

std::string ModelType(const Json& j) {
  if (j.contains("model_type") && j["model_type"].is_string()) return j["model_type"];
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string a = j["architectures"][0];
    if (a.rfind("GPT2", 0) == 0) return "gpt2";
    if (a.rfind("Llama", 0) == 0) return "llama";
    if (a.rfind("Qwen2", 0) == 0) return "qwen2";
    if (a.rfind("Mistral", 0) == 0) return "mistral";
  }
  return "";
}

Status ParseRope(const Json& j, const std::string& where, ModelConfig& c) {
  // transformers 5 writes rope_parameters {rope_theta, rope_type, ...}; older
  // configs rope_theta and rope_scaling {type or rope_type, factor, ...}.
  Json params = Json::object();
  std::string field = "rope_parameters";
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    params = j["rope_parameters"];
  } else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    params = j["rope_scaling"];
    field = "rope_scaling";
  }
  Fields top(j, where), p(params, where + ": " + field);
  RopeParameters& r = c.rope;
  ORRERY_ASSIGN_OR_RETURN(r.theta, top.Double("rope_theta", 10000.0));
  ORRERY_ASSIGN_OR_RETURN(r.theta, p.Double("rope_theta", r.theta));
  ORRERY_ASSIGN_OR_RETURN(std::string type, p.String("type", "default"));
  ORRERY_ASSIGN_OR_RETURN(type, p.String("rope_type", type));
  if (type != "default" && type != "linear" && type != "llama3") {
    return InvalidArgumentError(where + ": " + field + ".rope_type '" + type +
                                "' is not supported (default, linear, llama3)");
  }
  r.type = type;
  ORRERY_ASSIGN_OR_RETURN(r.factor, p.Double("factor", 1.0));
  ORRERY_ASSIGN_OR_RETURN(r.low_freq_factor, p.Double("low_freq_factor", 1.0));
  ORRERY_ASSIGN_OR_RETURN(r.high_freq_factor, p.Double("high_freq_factor", 4.0));
  ORRERY_ASSIGN_OR_RETURN(r.original_max_positions,
                          p.Int("original_max_position_embeddings", c.max_positions));
  ORRERY_ASSIGN_OR_RETURN(double partial, p.Double("partial_rotary_factor", 1.0));
  ORRERY_ASSIGN_OR_RETURN(partial, top.Double("partial_rotary_factor", partial));
  if (partial != 1.0) {
    return InvalidArgumentError(where + ": partial_rotary_factor " + std::to_string(partial) +
                                " is not supported (rotary over the whole head only)");
  }
  if ((type == "linear" || type == "llama3") && r.factor <= 0)
    return InvalidArgumentError(where + ": " + field + ".factor must be > 0");
  if (type == "llama3" && r.high_freq_factor <= r.low_freq_factor) {
    return InvalidArgumentError(where + ": " + field +
                                ".high_freq_factor must exceed low_freq_factor");
  }
  return OkStatus();
}

Status ParseGpt2(const Fields& f, const std::string& where, ModelConfig& c) {
  ORRERY_ASSIGN_OR_RETURN(c.layers, f.Int("n_layer"));
  ORRERY_ASSIGN_OR_RETURN(c.hidden, f.Int("n_embd"));
  ORRERY_ASSIGN_OR_RETURN(c.heads, f.Int("n_head"));
  ORRERY_ASSIGN_OR_RETURN(c.vocab, f.Int("vocab_size"));
  ORRERY_ASSIGN_OR_RETURN(c.max_positions, f.Int("n_positions", 1024));
  ORRERY_ASSIGN_OR_RETURN(c.intermediate, f.Int("n_inner", 0));
  ORRERY_ASSIGN_OR_RETURN(c.norm_eps, f.Double("layer_norm_epsilon", 1e-5));
  ORRERY_ASSIGN_OR_RETURN(c.tie_embeddings, f.Bool("tie_word_embeddings", true));
  if (c.intermediate == 0) c.intermediate = 4 * c.hidden;
  c.kv_heads = c.heads;
  c.head_dim = c.heads > 0 ? c.hidden / c.heads : 0;
  c.qkv_bias = c.out_bias = c.mlp_bias = true;
  ORRERY_ASSIGN_OR_RETURN(std::string act, f.String("activation_function", "gelu_new"));
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") {
    c.activation = "gelu_tanh";
  } else if (act == "gelu") {
    c.activation = "gelu";
  } else {
    return InvalidArgumentError(where + ": activation_function '" + act +
                                "' is not supported (gelu_new, gelu_pytorch_tanh, gelu)");
  }
  ORRERY_ASSIGN_OR_RETURN(bool scaled, f.Bool("scale_attn_weights", true));
  ORRERY_ASSIGN_OR_RETURN(bool by_layer, f.Bool("scale_attn_by_inverse_layer_idx", false));
  ORRERY_ASSIGN_OR_RETURN(bool cross, f.Bool("add_cross_attention", false));
  if (!scaled || by_layer || cross) {
    return InvalidArgumentError(where +
                                ": scale_attn_weights must be true and "
                                "scale_attn_by_inverse_layer_idx and add_cross_attention false "
                                "(the GPT-2 Orrery computes)");
  }
  return OkStatus();
}

Status ParseLlama(const Json& j, const Fields& f, const std::string& where, ModelConfig& c) {
  c.activation = "silu";
  ORRERY_ASSIGN_OR_RETURN(c.layers, f.Int("num_hidden_layers"));
  ORRERY_ASSIGN_OR_RETURN(c.hidden, f.Int("hidden_size"));
  ORRERY_ASSIGN_OR_RETURN(c.heads, f.Int("num_attention_heads"));
  ORRERY_ASSIGN_OR_RETURN(c.kv_heads, f.Int("num_key_value_heads", c.heads));
  ORRERY_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", 0));
  ORRERY_ASSIGN_OR_RETURN(c.vocab, f.Int("vocab_size"));
  ORRERY_ASSIGN_OR_RETURN(c.intermediate, f.Int("intermediate_size"));
  ORRERY_ASSIGN_OR_RETURN(c.max_positions, f.Int("max_position_embeddings", 2048));
  ORRERY_ASSIGN_OR_RETURN(c.norm_eps, f.Double("rms_norm_eps", 1e-6));
  ORRERY_ASSIGN_OR_RETURN(c.tie_embeddings, f.Bool("tie_word_embeddings", false));
  if (c.head_dim == 0 && c.heads > 0) c.head_dim = c.hidden / c.heads;
  ORRERY_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") {
    return InvalidArgumentError(where + ": hidden_act '" + act +
                                "' is not supported (silu, the SwiGLU of Llama)");
  }
  if (c.model_type == "qwen2") {
    // Qwen2 has biases on q, k and v only (modeling_qwen2.py).
    c.qkv_bias = true;
    c.out_bias = c.mlp_bias = false;
    ORRERY_ASSIGN_OR_RETURN(bool sliding, f.Bool("use_sliding_window", false));
    if (sliding) {
      return InvalidArgumentError(where +
                                  ": use_sliding_window true is not supported; set it false");
    }
  } else {
    ORRERY_ASSIGN_OR_RETURN(c.qkv_bias, f.Bool("attention_bias", false));
    c.out_bias = c.qkv_bias;
    ORRERY_ASSIGN_OR_RETURN(c.mlp_bias, f.Bool("mlp_bias", false));
    if (c.model_type == "mistral" && f.Has("sliding_window")) {
      ORRERY_ASSIGN_OR_RETURN(int window, f.Int("sliding_window"));
      c.sliding_window = window;
    }
  }
  return ParseRope(j, where, c);
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& where) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgumentError(where + ": not a JSON object; is this a model's config.json?");
  ModelConfig c;
  c.model_type = ModelType(j);
  Fields f(j, where);
  if (c.Gpt2()) {
    ORRERY_RETURN_IF_ERROR(ParseGpt2(f, where, c));
  } else if (c.model_type == "llama" || c.model_type == "qwen2" || c.model_type == "mistral") {
    ORRERY_RETURN_IF_ERROR(ParseLlama(j, f, where, c));
  } else {
    return InvalidArgumentError(where + ": model_type '" + c.model_type +
                                "' is not supported (gpt2, llama, qwen2, mistral)");
  }
  for (const auto& [name, value] : {std::pair<const char*, int>{"layers", c.layers},
                                    {"hidden size", c.hidden},
                                    {"attention heads", c.heads},
                                    {"key/value heads", c.kv_heads},
                                    {"vocabulary", c.vocab},
                                    {"MLP width", c.intermediate}}) {
    if (value < 1) return InvalidArgumentError(where + ": the " + name + " must be at least 1");
  }
  return c;
}

StatusOr<ModelConfig> ReadModelConfig(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError("no config.json in " + dir +
                         ": a pre-trained model is a directory as save_pretrained writes it");
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), path);
}

Status CheckSequence(const ModelConfig& config, int seq, const std::string& where) {
  if (config.sliding_window && seq > *config.sliding_window) {
    return InvalidArgumentError(where + ": sliding_window " +
                                std::to_string(*config.sliding_window) +
                                " is shorter than the sequence (" + std::to_string(seq) +
                                "); Orrery attends over the whole window: use seq <= " +
                                std::to_string(*config.sliding_window));
  }
  if (config.LearnedPositions() && seq > config.max_positions) {
    return InvalidArgumentError(
        where + ": the model learned " + std::to_string(config.max_positions) +
        " positions (n_positions), fewer than the sequence (" + std::to_string(seq) +
        "); use seq <= " + std::to_string(config.max_positions));
  }
  return OkStatus();
}

}  // namespace orrery::hf
