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
#include "worker/hf/config.h"
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

// The architecture worker/hf read, as the layers Orrery builds.
StatusOr<GptConfig> ToGptConfig(const hf::ModelConfig& h, const std::string& where, int seq) {
  ORRERY_RETURN_IF_ERROR(hf::CheckSequence(h, seq, where));
  GptConfig c;
  c.seq = seq;
  c.hf_model_type = h.model_type;
  c.family = h.Family();
  c.layers = h.layers;
  c.hidden = h.hidden;
  c.heads = h.heads;
  c.vocab = h.vocab;
  c.intermediate = h.intermediate;
  c.max_positions = h.max_positions;
  c.norm_eps = h.norm_eps;
  c.tie_embeddings = h.tie_embeddings;
  c.qkv_bias = h.qkv_bias;
  c.out_bias = h.out_bias;
  c.mlp_bias = h.mlp_bias;
  c.activation = h.activation;
  if (!h.Gpt2()) {
    // GPT-2's heads split the width evenly; ValidateGpt says so when they do not.
    c.kv_heads = h.kv_heads;
    c.head_dim = h.head_dim;
    c.rope = h.rope;
  }
  Status valid = internal::ValidateGpt(c);
  if (!valid.ok()) return valid.WithContext(where);
  return c;
}

}  // namespace

StatusOr<GptConfig> ParseHuggingFaceConfig(const std::string& text, const std::string& where,
                                           int seq) {
  ORRERY_ASSIGN_OR_RETURN(hf::ModelConfig h, hf::ParseModelConfig(text, where));
  return ToGptConfig(h, where, seq);
}

StatusOr<GptConfig> ConfigFromPretrained(const std::string& dir, int seq) {
  ORRERY_ASSIGN_OR_RETURN(hf::ModelConfig h, hf::ReadModelConfig(dir));
  return ToGptConfig(h, (fs::path(dir) / "config.json").string(), seq);
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
