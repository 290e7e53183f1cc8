// Hugging Face model directories in and out; see pretrained.h. Field names and
// defaults are those of transformers' GPT2Config, LlamaConfig, Qwen2Config and
// MistralConfig (v5.24; older configs' rope_theta/rope_scaling too).
#include "worker/model/pretrained.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "worker/checkpoint/layout.h"
#include "worker/hf/safetensors.h"
#include "worker/model/transformer.h"

namespace orrery::model {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Where one of Orrery's parameters lives in the Hugging Face files.
struct HfRef {
  std::string name;
  // GPT-2's Conv1D stores [in, out]: Orrery's [out, in] is its transpose.
  bool transpose = false;
  // Offset along the Hugging Face output dimension (the columns of a
  // transposed weight, the elements of a bias): q, k and v inside c_attn.
  int64_t offset = 0;
  std::vector<int64_t> hf_shape;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Splits "blocks.3.attn.q.weight" into 3 and "attn.q.weight".
bool SplitBlock(const std::string& name, int* index, std::string* rest) {
  if (name.rfind("blocks.", 0) != 0) return false;
  size_t dot = name.find('.', 7);
  if (dot == std::string::npos) return false;
  *index = std::stoi(name.substr(7, dot - 7));
  *rest = name.substr(dot + 1);
  return true;
}

// The reference for `name` (global shape `shape`); empty name when the
// parameter is a tied head the files do not store.
StatusOr<HfRef> MapName(const GptConfig& c, const std::string& prefix, const std::string& name,
                        const std::vector<int64_t>& shape, bool has_lm_head) {
  HfRef r;
  r.hf_shape = shape;
  int block = 0;
  std::string rest;
  if (c.Llama()) {
    if (name == "embed.tokens") {
      r.name = "model.embed_tokens.weight";
    } else if (name == "head.ln.weight") {
      r.name = "model.norm.weight";
    } else if (name == "head.proj.weight") {
      r.name = c.tie_embeddings && !has_lm_head ? "model.embed_tokens.weight" : "lm_head.weight";
    } else if (SplitBlock(name, &block, &rest)) {
      static const std::map<std::string, std::string> kBlock = {
          {"ln1.weight", "input_layernorm.weight"},
          {"ln2.weight", "post_attention_layernorm.weight"},
          {"attn.q.weight", "self_attn.q_proj.weight"},
          {"attn.q.bias", "self_attn.q_proj.bias"},
          {"attn.k.weight", "self_attn.k_proj.weight"},
          {"attn.k.bias", "self_attn.k_proj.bias"},
          {"attn.v.weight", "self_attn.v_proj.weight"},
          {"attn.v.bias", "self_attn.v_proj.bias"},
          {"attn.proj.weight", "self_attn.o_proj.weight"},
          {"attn.proj.bias", "self_attn.o_proj.bias"},
          {"mlp.gate.weight", "mlp.gate_proj.weight"},
          {"mlp.gate.bias", "mlp.gate_proj.bias"},
          {"mlp.up.weight", "mlp.up_proj.weight"},
          {"mlp.up.bias", "mlp.up_proj.bias"},
          {"mlp.down.weight", "mlp.down_proj.weight"},
          {"mlp.down.bias", "mlp.down_proj.bias"}};
      auto it = kBlock.find(rest);
      if (it == kBlock.end()) return InternalError("no Hugging Face name for " + name);
      r.name = "model.layers." + std::to_string(block) + "." + it->second;
    } else {
      return InternalError("no Hugging Face name for " + name);
    }
    return r;
  }
  // GPT-2 (and Orrery's own GPT, exported in GPT-2's layout).
  const std::string& p = prefix;
  if (name == "embed.tokens") {
    r.name = p + "wte.weight";
  } else if (name == "embed.positions") {
    r.name = p + "wpe.weight";
  } else if (name == "head.ln.weight" || name == "head.ln.bias") {
    r.name = p + "ln_f." + name.substr(8);
  } else if (name == "head.proj.weight") {
    r.name = c.tie_embeddings && !has_lm_head ? p + "wte.weight" : "lm_head.weight";
  } else if (SplitBlock(name, &block, &rest)) {
    const std::string h = p + "h." + std::to_string(block) + ".";
    const int64_t hidden = c.hidden;
    const bool weight = EndsWith(rest, ".weight");
    const std::string kind = weight ? "weight" : "bias";
    if (rest == "ln1.weight" || rest == "ln1.bias") {
      r.name = h + "ln_1." + kind;
    } else if (rest == "ln2.weight" || rest == "ln2.bias") {
      r.name = h + "ln_2." + kind;
    } else if (rest.rfind("attn.q.", 0) == 0 || rest.rfind("attn.k.", 0) == 0 ||
               rest.rfind("attn.v.", 0) == 0) {
      const int64_t part = rest[5] == 'q' ? 0 : rest[5] == 'k' ? 1 : 2;
      r.name = h + "attn.c_attn." + kind;
      r.offset = part * hidden;
      r.transpose = weight;
      r.hf_shape =
          weight ? std::vector<int64_t>{hidden, 3 * hidden} : std::vector<int64_t>{3 * hidden};
    } else if (rest == "attn.proj.weight" || rest == "attn.proj.bias") {
      r.name = h + "attn.c_proj." + kind;
      r.transpose = weight;
    } else if (rest == "mlp.fc1.weight" || rest == "mlp.fc1.bias") {
      r.name = h + "mlp.c_fc." + kind;
      r.transpose = weight;
    } else if (rest == "mlp.fc2.weight" || rest == "mlp.fc2.bias") {
      r.name = h + "mlp.c_proj." + kind;
      r.transpose = weight;
    } else {
      return InternalError("no Hugging Face name for " + name);
    }
    const bool fused = r.name.find(".c_attn.") != std::string::npos;
    if (r.transpose && !fused && shape.size() == 2) r.hf_shape = {shape[1], shape[0]};
  } else {
    return InternalError("no Hugging Face name for " + name);
  }
  return r;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// --- config.json -----------------------------------------------------------

class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  bool Has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  StatusOr<int> Int(const char* key, std::optional<int> fallback = std::nullopt) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return InvalidArgumentError(where_ + ": field " + key + " is missing");
    }
    const json& v = j_.at(key);
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
  const json& j_;
  std::string where_;
};

std::string ModelType(const json& j) {
  if (j.contains("model_type") && j["model_type"].is_string()) return j["model_type"];
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    std::string a = j["architectures"][0];
    if (a.rfind("GPT2", 0) == 0) return "gpt2";
    if (a.rfind("Llama", 0) == 0) return "llama";
    if (a.rfind("Qwen2", 0) == 0) return "qwen2";
    if (a.rfind("Mistral", 0) == 0) return "mistral";
  }
  return "";
}

Status ParseRope(const json& j, const std::string& where, GptConfig& c) {
  // transformers 5 writes rope_parameters {rope_theta, rope_type, ...}; older
  // configs rope_theta and rope_scaling {type or rope_type, factor, ...}.
  json params = json::object();
  std::string params_field = "rope_parameters";
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    params = j["rope_parameters"];
  } else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    params = j["rope_scaling"];
    params_field = "rope_scaling";
  }
  Fields top(j, where), p(params, where + ": " + params_field);
  ORRERY_ASSIGN_OR_RETURN(c.rope.theta, top.Double("rope_theta", 10000.0));
  ORRERY_ASSIGN_OR_RETURN(c.rope.theta, p.Double("rope_theta", c.rope.theta));
  ORRERY_ASSIGN_OR_RETURN(std::string type, p.String("type", "default"));
  ORRERY_ASSIGN_OR_RETURN(type, p.String("rope_type", type));
  if (type != "default" && type != "linear" && type != "llama3") {
    return InvalidArgumentError(where + ": " + params_field + ".rope_type '" + type +
                                "' is not supported (default, linear, llama3)");
  }
  c.rope.type = type;
  ORRERY_ASSIGN_OR_RETURN(c.rope.factor, p.Double("factor", 1.0));
  ORRERY_ASSIGN_OR_RETURN(c.rope.low_freq_factor, p.Double("low_freq_factor", 1.0));
  ORRERY_ASSIGN_OR_RETURN(c.rope.high_freq_factor, p.Double("high_freq_factor", 4.0));
  ORRERY_ASSIGN_OR_RETURN(int max_pos, top.Int("max_position_embeddings", 8192));
  ORRERY_ASSIGN_OR_RETURN(c.rope.original_max_positions,
                          p.Int("original_max_position_embeddings", max_pos));
  ORRERY_ASSIGN_OR_RETURN(double partial, p.Double("partial_rotary_factor", 1.0));
  ORRERY_ASSIGN_OR_RETURN(partial, top.Double("partial_rotary_factor", partial));
  if (partial != 1.0) {
    return InvalidArgumentError(where + ": partial_rotary_factor " + std::to_string(partial) +
                                " is not supported (rotary over the whole head only)");
  }
  if ((type == "linear" || type == "llama3") && c.rope.factor <= 0)
    return InvalidArgumentError(where + ": " + params_field + ".factor must be > 0");
  if (type == "llama3" && c.rope.high_freq_factor <= c.rope.low_freq_factor) {
    return InvalidArgumentError(where + ": " + params_field +
                                ".high_freq_factor must exceed low_freq_factor");
  }
  return OkStatus();
}

}  // namespace

StatusOr<GptConfig> ParseHuggingFaceConfig(const std::string& text, const std::string& where,
                                           int seq) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgumentError(where + ": not a JSON object; is this a model's config.json?");
  const std::string type = ModelType(j);
  Fields f(j, where);
  GptConfig c;
  c.seq = seq;
  c.hf_model_type = type;
  if (type == "gpt2") {
    c.family = "gpt2";
    ORRERY_ASSIGN_OR_RETURN(c.layers, f.Int("n_layer"));
    ORRERY_ASSIGN_OR_RETURN(c.hidden, f.Int("n_embd"));
    ORRERY_ASSIGN_OR_RETURN(c.heads, f.Int("n_head"));
    ORRERY_ASSIGN_OR_RETURN(c.vocab, f.Int("vocab_size"));
    ORRERY_ASSIGN_OR_RETURN(c.max_positions, f.Int("n_positions", 1024));
    ORRERY_ASSIGN_OR_RETURN(c.intermediate, f.Int("n_inner", 0));
    ORRERY_ASSIGN_OR_RETURN(c.norm_eps, f.Double("layer_norm_epsilon", 1e-5));
    ORRERY_ASSIGN_OR_RETURN(c.tie_embeddings, f.Bool("tie_word_embeddings", true));
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
      return InvalidArgumentError(
          where +
          ": scale_attn_weights must be true and scale_attn_by_inverse_layer_idx and "
          "add_cross_attention false (the GPT-2 Orrery computes)");
    }
  } else if (type == "llama" || type == "qwen2" || type == "mistral") {
    c.family = "llama";
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
    ORRERY_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
    if (act != "silu") {
      return InvalidArgumentError(where + ": hidden_act '" + act +
                                  "' is not supported (silu, the SwiGLU of Llama)");
    }
    if (type == "qwen2") {
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
      if (type == "mistral" && f.Has("sliding_window")) {
        ORRERY_ASSIGN_OR_RETURN(int window, f.Int("sliding_window"));
        if (seq > window) {
          return InvalidArgumentError(
              where + ": sliding_window " + std::to_string(window) +
              " is shorter than the sequence (" + std::to_string(seq) +
              "); Orrery attends over the whole window: use seq <= " + std::to_string(window));
        }
      }
    }
    ORRERY_RETURN_IF_ERROR(ParseRope(j, where, c));
  } else {
    return InvalidArgumentError(where + ": model_type '" + type +
                                "' is not supported (gpt2, llama, qwen2, mistral)");
  }
  Status valid = internal::ValidateGpt(c);
  if (!valid.ok()) return valid.WithContext(where);
  return c;
}

StatusOr<GptConfig> ConfigFromPretrained(const std::string& dir, int seq) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) {
    return NotFoundError("no config.json in " + dir +
                         ": a pre-trained model is a directory as save_pretrained writes it");
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseHuggingFaceConfig(text.str(), path, seq);
}

// --- weights in ----------------------------------------------------------------

PretrainedWeights::~PretrainedWeights() = default;

StatusOr<std::unique_ptr<PretrainedWeights>> PretrainedWeights::Open(const std::string& dir,
                                                                     const GptConfig& config) {
  auto w = std::unique_ptr<PretrainedWeights>(new PretrainedWeights());
  w->dir_ = dir;
  w->config_ = config;
  ORRERY_ASSIGN_OR_RETURN(w->reader_, hf::SafetensorsReader::Open(dir));
  if (!config.Llama()) {
    // Files saved from GPT2LMHeadModel prefix "transformer."; GPT2Model's do not.
    w->prefix_ = w->reader_->Find("transformer.wte.weight") != nullptr ? "transformer." : "";
  }
  return w;
}

uint64_t PretrainedWeights::bytes_read() const { return reader_->bytes_read(); }

StatusOr<std::map<std::string, at::Tensor>> PretrainedWeights::ReadLayer(
    size_t index, const TensorParallelSlice& tp) const {
  const bool has_lm_head = reader_->Find("lm_head.weight") != nullptr;
  const std::string layer = internal::LayerName(config_, index);
  std::map<std::string, at::Tensor> out;
  for (const internal::ParamSpec& spec : internal::LayerSpecs(config_, index)) {
    const std::string name = layer + "." + spec.local;
    ORRERY_ASSIGN_OR_RETURN(HfRef ref, MapName(config_, prefix_, name, spec.shape, has_lm_head));
    const hf::TensorInfo* info = reader_->Find(ref.name);
    if (info == nullptr) {
      return NotFoundError("tensor " + ref.name + " (for " + name + ") is not in " + dir_ +
                           "; the weights do not match config.json (" + config_.hf_model_type +
                           ")");
    }
    if (info->shape != ref.hf_shape) {
      return InvalidArgumentError("tensor " + ref.name + " in " + dir_ + " has shape " +
                                  ShapeString(info->shape) + ", config.json implies " +
                                  ShapeString(ref.hf_shape) +
                                  "; the weights do not match config.json");
    }
    // This rank's block in Orrery's [out, in] orientation.
    const int dim = tp.size > 1 ? GptTensorParallelDim(name) : -1;
    std::vector<int64_t> begin(spec.shape.size(), 0), end = spec.shape;
    if (dim >= 0) {
      const int64_t part = spec.shape[static_cast<size_t>(dim)] / tp.size;
      begin[static_cast<size_t>(dim)] = part * tp.rank;
      end[static_cast<size_t>(dim)] = part * (tp.rank + 1);
    }
    at::Tensor t;
    if (spec.shape.size() == 1) {
      t = at::empty({end[0] - begin[0]}, at::kFloat);
      ORRERY_RETURN_IF_ERROR(reader_->ReadFloat32(
          ref.name, hf::Block{ref.offset + begin[0], ref.offset + end[0], 0, -1},
          t.data_ptr<float>()));
    } else if (!ref.transpose) {
      t = at::empty({end[0] - begin[0], end[1] - begin[1]}, at::kFloat);
      ORRERY_RETURN_IF_ERROR(reader_->ReadFloat32(
          ref.name, hf::Block{begin[0], end[0], begin[1], end[1]}, t.data_ptr<float>()));
    } else {
      at::Tensor hf_block = at::empty({end[1] - begin[1], end[0] - begin[0]}, at::kFloat);
      ORRERY_RETURN_IF_ERROR(reader_->ReadFloat32(
          ref.name, hf::Block{begin[1], end[1], ref.offset + begin[0], ref.offset + end[0]},
          hf_block.data_ptr<float>()));
      t = hf_block.t().contiguous();
    }
    out[spec.local] = t;
  }
  return out;
}

StatusOr<at::Tensor> PretrainedWeights::ReadFlat(const std::string& name, int64_t begin,
                                                 int64_t end) const {
  std::vector<int64_t> shape;
  for (size_t index = 0; index < static_cast<size_t>(config_.layers) + 2 && shape.empty();
       ++index) {
    const std::string layer = internal::LayerName(config_, index) + ".";
    for (const auto& spec : internal::LayerSpecs(config_, index)) {
      if (layer + spec.local == name) shape = spec.shape;
    }
  }
  if (shape.empty()) return NotFoundError("the model has no parameter " + name);
  const bool has_lm_head = reader_->Find("lm_head.weight") != nullptr;
  ORRERY_ASSIGN_OR_RETURN(HfRef ref, MapName(config_, prefix_, name, shape, has_lm_head));
  const hf::TensorInfo* info = reader_->Find(ref.name);
  if (info == nullptr || info->shape != ref.hf_shape) {
    return InvalidArgumentError("tensor " + ref.name + " (for " + name + ") is missing from " +
                                dir_ + " or does not match config.json");
  }
  const int64_t numel = checkpoint::Numel(shape);
  if (begin < 0 || end > numel || begin > end)
    return InvalidArgumentError("elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") are outside " + name);
  at::Tensor out = at::empty({end - begin}, at::kFloat);
  if (begin == end) return out;
  if (shape.size() == 1) {
    ORRERY_RETURN_IF_ERROR(reader_->ReadFloat32(
        ref.name, hf::Block{ref.offset + begin, ref.offset + end, 0, -1}, out.data_ptr<float>()));
  } else if (!ref.transpose) {
    ORRERY_RETURN_IF_ERROR(reader_->ReadFlatFloat32(ref.name, begin, end, out.data_ptr<float>()));
  } else {
    // Orrery's rows [r0, r1) are columns of the stored [in, out] weight.
    const int64_t cols = shape[1], r0 = begin / cols, r1 = (end + cols - 1) / cols;
    at::Tensor block = at::empty({cols, r1 - r0}, at::kFloat);
    ORRERY_RETURN_IF_ERROR(reader_->ReadFloat32(
        ref.name, hf::Block{0, cols, ref.offset + r0, ref.offset + r1}, block.data_ptr<float>()));
    out.copy_(block.t().contiguous().view({-1}).narrow(0, begin - r0 * cols, end - begin));
  }
  return out;
}

// --- weights out ---------------------------------------------------------------

namespace {

json ConfigForExport(const GptConfig& c, const std::string& dtype) {
  json j;
  if (!c.Llama()) {
    j["model_type"] = "gpt2";
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_layer"] = c.layers;
    j["n_embd"] = c.hidden;
    j["n_head"] = c.heads;
    j["n_positions"] = c.MaxPositions();
    j["n_inner"] = c.Intermediate();
    j["vocab_size"] = c.vocab;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = c.activation == "gelu_tanh" ? "gelu_new" : "gelu";
    // Orrery trains without dropout; the export says so.
    j["resid_pdrop"] = j["embd_pdrop"] = j["attn_pdrop"] = 0.0;
  } else {
    const std::string type = c.hf_model_type.empty() ? "llama" : c.hf_model_type;
    j["model_type"] = type;
    j["architectures"] = {type == "qwen2"     ? "Qwen2ForCausalLM"
                          : type == "mistral" ? "MistralForCausalLM"
                                              : "LlamaForCausalLM"};
    j["num_hidden_layers"] = c.layers;
    j["hidden_size"] = c.hidden;
    j["num_attention_heads"] = c.heads;
    j["num_key_value_heads"] = c.KvHeads();
    j["head_dim"] = c.HeadDim();
    j["intermediate_size"] = c.Intermediate();
    j["vocab_size"] = c.vocab;
    j["max_position_embeddings"] = std::max(c.MaxPositions(), c.seq);
    j["rms_norm_eps"] = c.norm_eps;
    j["hidden_act"] = "silu";
    if (type != "qwen2") {
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
    }
    json rope = {{"rope_theta", c.rope.theta}, {"rope_type", c.rope.type}};
    if (c.rope.type != "default") rope["factor"] = c.rope.factor;
    if (c.rope.type == "llama3") {
      rope["low_freq_factor"] = c.rope.low_freq_factor;
      rope["high_freq_factor"] = c.rope.high_freq_factor;
      rope["original_max_position_embeddings"] = c.rope.original_max_positions;
    }
    j["rope_parameters"] = rope;
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["dtype"] = dtype;
  return j;
}

}  // namespace

Status ExportPretrained(const GptConfig& c, const NamedTensors& params, const std::string& dir,
                        const ExportOptions& options) {
  checkpoint::DType dtype;
  if (options.dtype == "float32") {
    dtype = checkpoint::DType::kFloat32;
  } else if (options.dtype == "bfloat16") {
    dtype = checkpoint::DType::kBFloat16;
  } else if (options.dtype == "float16") {
    dtype = checkpoint::DType::kFloat16;
  } else {
    return InvalidArgumentError("export dtype '" + options.dtype +
                                "' is not supported (float32, bfloat16, float16)");
  }
  std::map<std::string, at::Tensor> by_name(params.begin(), params.end());
  // Each Hugging Face tensor with the parts of Orrery's parameters it is made of.
  struct Part {
    at::Tensor value;
    HfRef ref;
  };
  std::map<std::string, std::vector<Part>> tensors;
  std::vector<std::string> order;
  const std::string prefix = c.Llama() ? "" : "transformer.";
  for (size_t index = 0; index < static_cast<size_t>(c.layers) + 2; ++index) {
    const std::string layer = internal::LayerName(c, index);
    for (const internal::ParamSpec& spec : internal::LayerSpecs(c, index)) {
      const std::string name = layer + "." + spec.local;
      if (name == "head.proj.weight" && c.tie_embeddings) continue;  // stored as the embedding
      auto it = by_name.find(name);
      if (it == by_name.end()) return NotFoundError("export: parameter " + name + " missing");
      if (it->second.sizes().vec() != spec.shape) {
        return InvalidArgumentError("export: parameter " + name + " has shape " +
                                    ShapeString(it->second.sizes().vec()) + ", the model " +
                                    ShapeString(spec.shape));
      }
      ORRERY_ASSIGN_OR_RETURN(HfRef ref, MapName(c, prefix, name, spec.shape, !c.tie_embeddings));
      if (tensors.find(ref.name) == tensors.end()) order.push_back(ref.name);
      tensors[ref.name].push_back({it->second.detach().to(at::kCPU, at::kFloat), ref});
    }
  }
  std::vector<hf::TensorToWrite> out;
  for (const std::string& hf_name : order) {
    const std::vector<Part>& parts = tensors[hf_name];
    hf::TensorToWrite t;
    t.name = hf_name;
    t.shape = parts.front().ref.hf_shape;
    t.fill = [parts, shape = t.shape](float* dst) -> Status {
      at::Tensor whole = at::from_blob(dst, shape, at::kFloat);
      for (const Part& p : parts) {
        at::Tensor v = p.ref.transpose ? p.value.t() : p.value;
        const int64_t dim = static_cast<int64_t>(shape.size()) - 1;
        const int64_t width = v.size(dim);
        whole.narrow(dim, p.ref.offset, width).copy_(v);
      }
      return OkStatus();
    };
    out.push_back(std::move(t));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("export: cannot create " + dir + ": " + ec.message());
  hf::WriteOptions wo;
  wo.dtype = dtype;
  wo.max_shard_bytes = options.max_shard_bytes;
  ORRERY_RETURN_IF_ERROR(hf::WriteSafetensors(dir, out, wo));
  // config.json: the source's own (every field transformers reads stays as the
  // user had it), or one made from the configuration.
  json config = ConfigForExport(c, options.dtype);
  if (!options.source_dir.empty()) {
    std::ifstream in(fs::path(options.source_dir) / "config.json");
    if (in) {
      json source = json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (source.is_object()) {
        source["dtype"] = options.dtype;
        if (source.contains("torch_dtype")) source["torch_dtype"] = options.dtype;
        config = source;
      }
    }
    for (const char* f :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
          "merges.txt", "tokenizer.model", "generation_config.json"}) {
      const fs::path from = fs::path(options.source_dir) / f;
      if (!fs::exists(from)) continue;
      std::ifstream src(from, std::ios::binary);
      std::stringstream bytes;
      bytes << src.rdbuf();
      ORRERY_RETURN_IF_ERROR(hf::WriteFileAtomically((fs::path(dir) / f).string(), bytes.str()));
    }
  }
  return hf::WriteFileAtomically((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
}

namespace {

// The Hugging Face module path of one of Orrery's projections in block `block`.
std::string ModulePath(const GptConfig& c, int block, const std::string& projection) {
  static const std::map<std::string, std::string> kLlama = {
      {"attn.q", "self_attn.q_proj"}, {"attn.k", "self_attn.k_proj"},
      {"attn.v", "self_attn.v_proj"}, {"attn.proj", "self_attn.o_proj"},
      {"mlp.gate", "mlp.gate_proj"},  {"mlp.up", "mlp.up_proj"},
      {"mlp.down", "mlp.down_proj"}};
  static const std::map<std::string, std::string> kGpt2 = {{"attn.qkv", "attn.c_attn"},
                                                           {"attn.proj", "attn.c_proj"},
                                                           {"mlp.fc1", "mlp.c_fc"},
                                                           {"mlp.fc2", "mlp.c_proj"}};
  const auto& table = c.Llama() ? kLlama : kGpt2;
  auto it = table.find(projection);
  if (it == table.end()) return "";
  return (c.Llama() ? "model.layers." : "transformer.h.") + std::to_string(block) + "." +
         it->second;
}

}  // namespace

Status ExportLoraAdapter(const ModelConfig& mc, const NamedTensors& params, const std::string& dir,
                         const ExportOptions& options) {
  const GptConfig& c = mc.gpt;
  if (!mc.finetune.Lora()) return FailedPreconditionError("the model has no LoRA adapters");
  ORRERY_ASSIGN_OR_RETURN(std::vector<std::string> projections, LoraProjections(c, mc.finetune));
  std::map<std::string, at::Tensor> by_name(params.begin(), params.end());
  auto get = [&](const std::string& name) -> StatusOr<at::Tensor> {
    auto it = by_name.find(name);
    if (it == by_name.end()) return NotFoundError("export: adapter " + name + " missing");
    return it->second.detach().to(at::kCPU, at::kFloat).contiguous();
  };
  std::vector<hf::TensorToWrite> out;
  for (int block = 0; block < c.layers; ++block) {
    const std::string prefix = "blocks." + std::to_string(block) + ".";
    for (const std::string& p : projections) {
      const std::string module = "base_model.model." + ModulePath(c, block, p);
      ORRERY_ASSIGN_OR_RETURN(at::Tensor a, get(prefix + p + ".lora_a"));
      at::Tensor b;
      if (p == "attn.qkv") {
        std::vector<at::Tensor> parts;
        for (const char* part : {"attn.q", "attn.k", "attn.v"}) {
          ORRERY_ASSIGN_OR_RETURN(at::Tensor t, get(prefix + part + ".lora_b"));
          parts.push_back(t);
        }
        b = at::cat(parts, 0);
      } else {
        ORRERY_ASSIGN_OR_RETURN(b, get(prefix + p + ".lora_b"));
      }
      for (auto& [suffix, t] : std::vector<std::pair<std::string, at::Tensor>>{
               {".lora_A.weight", a}, {".lora_B.weight", b}}) {
        hf::TensorToWrite w;
        w.name = module + suffix;
        w.shape = t.sizes().vec();
        w.fill = [t](float* dst) -> Status {
          std::memcpy(dst, t.data_ptr<float>(), static_cast<size_t>(t.numel()) * sizeof(float));
          return OkStatus();
        };
        out.push_back(std::move(w));
      }
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("export: cannot create " + dir + ": " + ec.message());
  hf::WriteOptions wo;
  wo.max_shard_bytes = std::numeric_limits<int64_t>::max();  // PEFT reads one file
  ORRERY_RETURN_IF_ERROR(hf::WriteSafetensors(dir, out, wo));
  // WriteSafetensors names its single file model.safetensors; PEFT wants
  // adapter_model.safetensors.
  fs::rename(fs::path(dir) / "model.safetensors", fs::path(dir) / "adapter_model.safetensors", ec);
  if (ec)
    return InternalError("export: cannot name the adapter file in " + dir + ": " + ec.message());
  std::vector<std::string> targets = mc.finetune.lora_targets;
  if (targets.empty())
    targets = c.Llama() ? std::vector<std::string>{"q_proj", "v_proj"}
                        : std::vector<std::string>{"c_attn"};
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"r", mc.finetune.lora_rank},
                 {"lora_alpha", mc.finetune.lora_alpha},
                 {"lora_dropout", 0.0},
                 {"target_modules", targets},
                 {"bias", "none"},
                 // GPT-2's Conv1D stores weights [in, out].
                 {"fan_in_fan_out", !c.Llama()},
                 {"inference_mode", true},
                 {"use_rslora", false},
                 {"use_dora", false},
                 {"init_lora_weights", true},
                 {"base_model_name_or_path", options.source_dir}};
  return hf::WriteFileAtomically((fs::path(dir) / "adapter_config.json").string(),
                                 config.dump(2) + "\n");
}

StatusOr<NamedTensors> MergeLora(const ModelConfig& mc, const NamedTensors& params) {
  if (!mc.finetune.Lora()) return params;
  const double scale = mc.finetune.lora_alpha / mc.finetune.lora_rank;
  std::map<std::string, at::Tensor> by_name(params.begin(), params.end());
  NamedTensors out;
  torch::NoGradGuard no_grad;
  for (const auto& [name, value] : params) {
    if (name.find(".lora_") != std::string::npos) continue;
    at::Tensor w = value.detach().to(at::kCPU, at::kFloat).clone();
    const std::string stem = name.size() > 7 && EndsWith(name, ".weight")
                                 ? name.substr(0, name.size() - 7)
                                 : std::string();
    if (!stem.empty()) {
      auto b = by_name.find(stem + ".lora_b");
      if (b != by_name.end()) {
        // GPT-2's q, k, v share c_attn's A.
        auto a = by_name.find(stem + ".lora_a");
        if (a == by_name.end()) a = by_name.find(stem.substr(0, stem.rfind('.')) + ".qkv.lora_a");
        if (a == by_name.end()) return InternalError("merge: no LoRA A for " + name);
        w.add_(at::matmul(b->second.to(at::kCPU, at::kFloat), a->second.to(at::kCPU, at::kFloat)),
               scale);
      }
    }
    out.emplace_back(name, w);
  }
  return out;
}

}  // namespace orrery::model
