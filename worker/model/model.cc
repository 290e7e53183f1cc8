// GPT, MLP and TorchScript layers, the Megatron tensor-parallel slicing of GPT,
// the loss, and synthetic batches. See model.h.
#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "worker/dist/communicator.h"
#include "worker/model/pretrained.h"
#include "worker/model/transformer.h"

namespace orrery::model {
namespace {

// Parameters of one layer, in registration order.
class ParamLayer : public Layer {
 public:
  explicit ParamLayer(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  NamedTensors NamedParameters() override { return params_; }

 protected:
  at::Tensor Add(const std::string& local_name, at::Tensor value) {
    value = value.detach().contiguous().clone().set_requires_grad(true);
    params_.emplace_back(name_ + "." + local_name, value);
    return value;
  }
  std::string name_;
  NamedTensors params_;
};

class MlpLinear final : public ParamLayer {
 public:
  MlpLinear(int index, int64_t in, int64_t out, bool relu, at::Generator& gen)
      : ParamLayer("layers." + std::to_string(index)), relu_(relu) {
    // Kaiming-uniform bound as torch.nn.Linear uses: 1/sqrt(fan_in).
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    w_ = Add("weight", at::empty({out, in}).uniform_(-bound, bound, gen));
    b_ = Add("bias", at::empty({out}).uniform_(-bound, bound, gen));
  }
  at::Tensor Forward(const at::Tensor& x) override {
    at::Tensor y = at::linear(x, w_, b_);
    return relu_ ? at::relu(y) : y;
  }

 private:
  bool relu_;
  at::Tensor w_, b_;
};

class ScriptLayer final : public Layer {
 public:
  explicit ScriptLayer(torch::jit::Module m) : module_(std::move(m)) {
    // A scripted module keeps the requires_grad its author saved; train them all.
    for (const auto& p : module_.parameters(/*recurse=*/true)) p.requires_grad_(true);
  }
  std::string name() const override { return "script"; }
  at::Tensor Forward(const at::Tensor& x) override { return module_.forward({x}).toTensor(); }
  // The module's own move: parameters and buffers, in place (set_data).
  void To(c10::Device device) override { module_.to(device); }
  NamedTensors NamedParameters() override {
    NamedTensors out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true))
      out.emplace_back("script." + p.name, p.value);
    return out;
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

bool Layer::ShareParameter(const std::string&, const at::Tensor&) { return false; }

void Layer::To(c10::Device device) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : NamedParameters()) {
    if (p.device() != device) p.set_data(p.data().to(device));
  }
}

Status MoveToDevice(Model& model, c10::Device device) {
  try {
    for (auto& l : model.layers) l->To(device);
    return OkStatus();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return InvalidArgumentError("moving the " + model.kind + " model to " + device.str() + ": " +
                                msg.substr(0, msg.find('\n')));
  }
}

Batch BatchOn(const Batch& batch, c10::Device device) {
  // non_blocking: a pinned host batch overlaps its copy with queued kernels.
  return Batch{batch.inputs.to(device, /*non_blocking=*/true),
               batch.targets.to(device, /*non_blocking=*/true)};
}

NamedTensors Model::NamedParameters() const {
  NamedTensors out;
  for (const auto& l : layers) {
    for (auto& p : l->NamedParameters()) out.push_back(std::move(p));
  }
  return out;
}

NamedTensors Model::DistinctParameters() const {
  NamedTensors out;
  std::set<const c10::TensorImpl*> seen;
  for (auto& [name, p] : NamedParameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.emplace_back(name, p);
  }
  return out;
}

int64_t Model::NumParameters() const {
  int64_t n = 0;
  for (const auto& p : DistinctParameters()) n += p.second.numel();
  return n;
}

std::vector<std::pair<std::string, std::string>> ShareTiedParameters(
    Model& model, const std::vector<std::pair<std::string, std::string>>& tied) {
  std::vector<std::pair<std::string, std::string>> apart;
  for (const auto& [first, second] : tied) {
    at::Tensor value;
    for (auto& [name, p] : model.NamedParameters())
      if (name == first) value = p;
    bool shared = false;
    for (size_t l = 0; value.defined() && !shared && l < model.layers.size(); ++l) {
      bool holds = false;
      for (auto& [name, p] : model.layers[l]->NamedParameters()) holds = holds || name == second;
      shared = holds && model.layers[l]->ShareParameter(second, value);
    }
    if (!shared) apart.emplace_back(first, second);
  }
  return apart;
}

at::Tensor Model::Forward(const at::Tensor& inputs) const {
  at::Tensor x = inputs;
  for (const auto& l : layers) x = l->Forward(x);
  return x;
}

Status ForEachLayer(const ModelConfig& config,
                    const std::function<Status(std::shared_ptr<Layer>)>& take,
                    const TensorParallelSlice& tp, const std::function<bool(size_t)>& wanted) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(config.seed);
  size_t built = 0;
  auto take_wanted = [&](std::shared_ptr<Layer> layer) -> Status {
    const size_t index = built++;
    if (wanted != nullptr && !wanted(index)) return OkStatus();
    return take(std::move(layer));
  };
  try {
    if (config.kind == "gpt") {
      const GptConfig& c = config.gpt;
      ORRERY_RETURN_IF_ERROR(internal::ValidateGpt(c));
      if (tp.size > 1) ORRERY_RETURN_IF_ERROR(CheckTensorParallelDegree(c, tp.size));
      ORRERY_RETURN_IF_ERROR(CheckFineTune(config));
      std::unique_ptr<PretrainedWeights> pretrained;
      if (!config.pretrained.empty()) {
        ORRERY_ASSIGN_OR_RETURN(pretrained, PretrainedWeights::Open(config.pretrained, c));
      }
      for (size_t index = 0; index < static_cast<size_t>(c.layers) + 2; ++index) {
        const bool keep = wanted == nullptr || wanted(index);
        internal::LayerWeights w;
        if (!keep) {
          // The seeded stream still advances past the layer, so the layers a
          // caller keeps are the same whichever it skips.
          if (pretrained == nullptr) (void)internal::InitLayer(c, index, gen, config.seed);
          continue;
        }
        if (pretrained != nullptr) {
          ORRERY_ASSIGN_OR_RETURN(w, pretrained->ReadLayer(index, tp));
        } else {
          w = internal::SliceWeights(c, index, internal::InitLayer(c, index, gen, config.seed), tp);
        }
        for (auto& [local, value] :
             internal::SliceWeights(c, index, internal::InitLora(config, index), tp))
          w[local] = value;
        ORRERY_RETURN_IF_ERROR(take(internal::MakeLayer(config, index, w, tp)));
      }
      return OkStatus();
    }
    if (config.kind == "mlp") {
      const MlpConfig& c = config.mlp;
      if (c.input < 1 || c.hidden < 1 || c.layers < 1 || c.classes < 2) {
        return InvalidArgumentError("mlp: input, hidden, layers must be >= 1 and classes >= 2");
      }
      int64_t in = c.input;
      for (int i = 0; i < c.layers; ++i) {
        ORRERY_RETURN_IF_ERROR(
            take_wanted(std::make_shared<MlpLinear>(i, in, c.hidden, true, gen)));
        in = c.hidden;
      }
      return take_wanted(std::make_shared<MlpLinear>(c.layers, in, c.classes, false, gen));
    }
    if (config.kind == "torchscript") {
      if (config.torchscript_path.empty())
        return InvalidArgumentError("torchscript: no module path");
      torch::jit::Module module = torch::jit::load(config.torchscript_path);
      module.train();
      return take_wanted(std::make_shared<ScriptLayer>(std::move(module)));
    }
    return InvalidArgumentError("unknown model kind '" + config.kind + "' (gpt, mlp, torchscript)");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return InvalidArgumentError("building " + config.kind +
                                " model: " + msg.substr(0, msg.find('\n')));
  }
}

StatusOr<Model> BuildModel(const ModelConfig& config) {
  Model m;
  m.kind = config.kind;
  m.supports_surgery = config.kind != "torchscript";
  ORRERY_RETURN_IF_ERROR(ForEachLayer(config, [&](std::shared_ptr<Layer> layer) {
    m.layers.push_back(std::move(layer));
    return OkStatus();
  }));
  return m;
}

int NumLayers(const ModelConfig& config) {
  if (config.kind == "gpt") return config.gpt.layers + 2;
  if (config.kind == "mlp") return config.mlp.layers + 1;
  return 1;
}

StatusOr<std::vector<std::pair<std::string, std::vector<int64_t>>>> ParameterShapes(
    const ModelConfig& config) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  if (config.kind == "gpt") {
    ORRERY_RETURN_IF_ERROR(internal::ValidateGpt(config.gpt));
    ORRERY_RETURN_IF_ERROR(CheckFineTune(config));
    for (size_t index = 0; index < static_cast<size_t>(config.gpt.layers) + 2; ++index) {
      const std::string layer = internal::LayerName(config.gpt, index);
      for (auto& spec : internal::LayerSpecs(config.gpt, index))
        out.emplace_back(layer + "." + spec.local, spec.shape);
      for (auto& spec : internal::LoraSpecs(config, index))
        out.emplace_back(layer + "." + spec.local, spec.shape);
    }
    return out;
  }
  ORRERY_RETURN_IF_ERROR(ForEachLayer(config, [&](std::shared_ptr<Layer> layer) {
    for (const auto& [name, p] : layer->NamedParameters()) out.emplace_back(name, p.sizes().vec());
    return OkStatus();
  }));
  return out;
}

StatusOr<std::vector<size_t>> ParameterLayers(const ModelConfig& config) {
  std::vector<size_t> out;
  if (config.kind == "gpt") {
    ORRERY_RETURN_IF_ERROR(internal::ValidateGpt(config.gpt));
    ORRERY_RETURN_IF_ERROR(CheckFineTune(config));
    for (size_t index = 0; index < static_cast<size_t>(config.gpt.layers) + 2; ++index) {
      out.insert(out.end(),
                 internal::LayerSpecs(config.gpt, index).size() +
                     internal::LoraSpecs(config, index).size(),
                 index);
    }
    return out;
  }
  size_t index = 0;
  ORRERY_RETURN_IF_ERROR(ForEachLayer(config, [&](std::shared_ptr<Layer> layer) {
    out.insert(out.end(), layer->NamedParameters().size(), index++);
    return OkStatus();
  }));
  return out;
}

StatusOr<int64_t> CountParameters(const ModelConfig& config) {
  ORRERY_ASSIGN_OR_RETURN(auto shapes, ParameterShapes(config));
  int64_t n = 0;
  // A tied head is the embedding: counted once, as transformers'
  // num_parameters() counts it (GPT-2 small: 124,439,808).
  const bool tied = config.kind == "gpt" && config.gpt.tie_embeddings;
  for (const auto& [name, shape] : shapes) {
    if (tied && name == "head.proj.weight") continue;
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    n += k;
  }
  return n;
}

Status ApplyFamilyDefaults(GptConfig& c) {
  if (c.family == "gpt") return OkStatus();
  if (c.family == "gpt2") {
    c.tie_embeddings = true;
    c.activation = "gelu_tanh";
    if (c.hf_model_type.empty()) c.hf_model_type = "gpt2";
    return OkStatus();
  }
  if (c.family == "llama") {
    c.qkv_bias = c.out_bias = c.mlp_bias = false;
    c.norm_eps = 1e-6;
    c.activation = "silu";
    if (c.intermediate == 0) {
      // Llama's SwiGLU width: 2/3 of 4 × hidden, rounded up to a multiple of 8
      // (Touvron et al. 2023 keep the MLP's parameter count of the 4× GELU one).
      c.intermediate = (8 * c.hidden / 3 + 7) / 8 * 8;
    }
    if (c.hf_model_type.empty()) c.hf_model_type = "llama";
    return OkStatus();
  }
  return InvalidArgumentError("unknown model family '" + c.family + "' (gpt, gpt2, llama)");
}

std::vector<std::pair<std::string, std::string>> TiedParameters(const ModelConfig& config) {
  // A frozen tie (LoRA, frozen embeddings) has no gradients to sum.
  const bool frozen = config.finetune.Lora() || config.finetune.freeze_embeddings;
  if (config.kind == "gpt" && config.gpt.tie_embeddings && !frozen)
    return {{"embed.tokens", "head.proj.weight"}};
  return {};
}

bool IsTransformer(const ModelConfig& config) { return config.kind == "gpt"; }

Status CheckTensorParallelDegree(const GptConfig& c, int tp_size) {
  auto divides = [&](int n, const char* what) -> Status {
    if (tp_size >= 1 && n % tp_size == 0) return OkStatus();
    return InvalidArgumentError("tensor parallel degree " + std::to_string(tp_size) +
                                " must divide " + what + " " + std::to_string(n) +
                                "; choose tp among its divisors");
  };
  ORRERY_RETURN_IF_ERROR(divides(c.heads, "heads"));
  ORRERY_RETURN_IF_ERROR(divides(c.KvHeads(), "kv_heads"));
  return divides(c.Intermediate(), "the MLP width (intermediate)");
}

StatusOr<std::vector<std::string>> LoraProjections(const GptConfig& c, const FineTuneConfig& ft) {
  std::vector<std::string> targets = ft.lora_targets;
  if (targets.empty()) {
    // PEFT's defaults for these architectures.
    targets = c.Llama() ? std::vector<std::string>{"q_proj", "v_proj"}
                        : std::vector<std::string>{"c_attn"};
  }
  const std::map<std::string, std::vector<std::string>> by_name =
      c.Llama()
          ? std::map<std::string, std::vector<std::string>>{{"q_proj", {"attn.q"}},
                                                            {"k_proj", {"attn.k"}},
                                                            {"v_proj", {"attn.v"}},
                                                            {"o_proj", {"attn.proj"}},
                                                            {"gate_proj", {"mlp.gate"}},
                                                            {"up_proj", {"mlp.up"}},
                                                            {"down_proj", {"mlp.down"}}}
          : std::map<std::string, std::vector<std::string>>{{"c_attn", {"attn.qkv"}},
                                                            {"c_proj", {"attn.proj", "mlp.fc2"}},
                                                            {"c_fc", {"mlp.fc1"}}};
  std::vector<std::string> out;
  for (std::string t : targets) {
    // PEFT matches a module by its name's last component(s): "attn.c_proj" too.
    const std::string full = t;
    if (auto dot = t.rfind('.'); dot != std::string::npos) t = t.substr(dot + 1);
    auto it = by_name.find(t);
    if (it == by_name.end()) {
      std::string known;
      for (const auto& [k, v] : by_name) known += (known.empty() ? "" : ", ") + k;
      return InvalidArgumentError("lora target '" + full + "' is not a projection of the " +
                                  c.family + " family (" + known + ")");
    }
    std::vector<std::string> projections = it->second;
    // "attn.c_proj" / "mlp.c_proj" pick one of GPT-2's two c_proj.
    if (full.find("attn.") != std::string::npos) {
      std::erase_if(projections, [](const std::string& p) { return p.rfind("attn.", 0) != 0; });
    } else if (full.find("mlp.") != std::string::npos) {
      std::erase_if(projections, [](const std::string& p) { return p.rfind("mlp.", 0) != 0; });
    }
    for (const auto& p : projections) {
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
  }
  return out;
}

Status CheckFineTune(const ModelConfig& config) {
  const FineTuneConfig& ft = config.finetune;
  if (ft.lora_rank < 0) return InvalidArgumentError("lora rank must not be negative");
  if (ft.freeze_blocks < 0 || ft.freeze_blocks > config.gpt.layers) {
    return InvalidArgumentError("freeze_blocks " + std::to_string(ft.freeze_blocks) +
                                " must be between 0 and the model's " +
                                std::to_string(config.gpt.layers) + " blocks");
  }
  if (ft.Lora()) {
    if (ft.lora_alpha <= 0) return InvalidArgumentError("lora alpha must be > 0");
    ORRERY_RETURN_IF_ERROR(LoraProjections(config.gpt, ft).status());
  }
  // Freezing everything still leaves the head's norm to train.
  return OkStatus();
}

int GptTensorParallelDim(const std::string& name) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (name.rfind("blocks.", 0) != 0) return -1;
  // LoRA: B of a column-parallel projection splits its rows like the weight;
  // A of a row-parallel one its columns; the other factor is replicated.
  for (const char* n : {".attn.q.lora_b", ".attn.k.lora_b", ".attn.v.lora_b", ".mlp.fc1.lora_b",
                        ".mlp.gate.lora_b", ".mlp.up.lora_b"}) {
    if (ends(n)) return 0;
  }
  if (ends(".attn.proj.lora_a") || ends(".mlp.fc2.lora_a") || ends(".mlp.down.lora_a")) return 1;
  if (name.find(".lora_") != std::string::npos) return -1;
  for (const char* n : {".attn.q.weight", ".attn.q.bias", ".attn.k.weight", ".attn.k.bias",
                        ".attn.v.weight", ".attn.v.bias", ".mlp.fc1.weight", ".mlp.fc1.bias",
                        ".mlp.gate.weight", ".mlp.gate.bias", ".mlp.up.weight", ".mlp.up.bias"}) {
    if (ends(n)) return 0;  // column-parallel: output rows split
  }
  if (ends(".attn.proj.weight") || ends(".mlp.fc2.weight") || ends(".mlp.down.weight"))
    return 1;  // row-parallel: input columns split
  return -1;
}

namespace {

Status CheckTensorParallel(const GptConfig& c, int tp_size, dist::Communicator* tp) {
  ORRERY_RETURN_IF_ERROR(internal::ValidateGpt(c));
  ORRERY_RETURN_IF_ERROR(CheckTensorParallelDegree(c, tp_size));
  if (tp_size > 1 && (tp == nullptr || tp->size() != tp_size)) {
    return InvalidArgumentError("tensor parallel communicator missing or of the wrong size");
  }
  return OkStatus();
}

std::shared_ptr<Layer> SliceLayer(const GptConfig& c, size_t index,
                                  const std::shared_ptr<Layer>& layer, int tp_rank, int tp_size,
                                  dist::Communicator* tp) {
  if (index == 0 || index > static_cast<size_t>(c.layers)) return layer;  // embedding, head
  internal::LayerWeights full;
  const std::string prefix = internal::LayerName(c, index) + ".";
  for (const auto& [name, value] : layer->NamedParameters())
    full[name.substr(prefix.size())] = value.detach();
  TensorParallelSlice slice{tp_rank, tp_size, tp};
  ModelConfig mc;  // no fine-tuning adapters: this slices a plain GPT layer
  mc.gpt = c;
  return internal::MakeLayer(mc, index, internal::SliceWeights(c, index, full, slice), slice);
}

}  // namespace

StatusOr<Model> SliceGptForTensorParallel(const GptConfig& c, const Model& full, int tp_rank,
                                          int tp_size, dist::Communicator* tp) {
  ORRERY_RETURN_IF_ERROR(CheckTensorParallel(c, tp_size, tp));
  if (full.kind != "gpt")
    return FailedPreconditionError("tensor parallelism needs the GPT model, not " + full.kind);
  if (static_cast<int>(full.layers.size()) != c.layers + 2)
    return InvalidArgumentError("model does not match config");
  Model m;
  m.kind = "gpt";
  for (size_t l = 0; l < full.layers.size(); ++l)
    m.layers.push_back(SliceLayer(c, l, full.layers[l], tp_rank, tp_size, tp));
  return m;
}

at::Tensor Loss(const at::Tensor& logits, const at::Tensor& targets) {
  // In float32 whatever the logits' type (bf16 autocast), as transformers does.
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                              targets.reshape({-1}));
}

int64_t Batch::size() const { return inputs.defined() ? inputs.size(0) : 0; }

Batch SyntheticBatch(const ModelConfig& config, int64_t batch_size, int64_t step) {
  std::string like = config.kind == "torchscript" ? config.torchscript_like : config.kind;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(config.seed * 1000003ULL +
                                                               static_cast<uint64_t>(step) + 17);
  Batch b;
  if (like == "gpt") {
    const GptConfig& c = config.gpt;
    at::Tensor start = at::randint(c.vocab, {batch_size, 1}, gen, at::kLong);
    at::Tensor stride = at::randint(1, 4, {batch_size, 1}, gen, at::kLong);
    at::Tensor t = at::arange(c.seq + 1, at::kLong).unsqueeze(0);
    at::Tensor tokens = (start + stride * t).remainder(c.vocab);
    b.inputs = tokens.narrow(1, 0, c.seq).contiguous();
    b.targets = tokens.narrow(1, 1, c.seq).contiguous();
  } else {
    const MlpConfig& c = config.mlp;
    at::Generator teacher_gen = at::make_generator<at::CPUGeneratorImpl>(config.seed + 99);
    at::Tensor teacher = at::empty({c.classes, c.input}).normal_(0.0, 1.0, teacher_gen);
    b.inputs = at::empty({batch_size, c.input}).normal_(0.0, 1.0, gen);
    b.targets = at::linear(b.inputs, teacher).argmax(1);
  }
  return b;
}

StatusOr<Batch> SliceBatch(const Batch& batch, int part, int parts) {
  int64_t n = batch.size();
  if (parts < 1 || part < 0 || part >= parts || n % parts != 0) {
    return InvalidArgumentError("batch of " + std::to_string(n) + " does not split into " +
                                std::to_string(parts) + " equal parts");
  }
  int64_t each = n / parts;
  return Batch{batch.inputs.narrow(0, part * each, each),
               batch.targets.narrow(0, part * each, each)};
}

StatusOr<double> MaxRelativeDifference(const NamedTensors& a, const NamedTensors& b,
                                       std::string* worst) {
  if (a.size() != b.size())
    return InvalidArgumentError("parameter counts differ: " + std::to_string(a.size()) + " vs " +
                                std::to_string(b.size()));
  std::map<std::string, at::Tensor> by_name(b.begin(), b.end());
  double max_rel = 0.0;
  for (const auto& [name, t] : a) {
    auto it = by_name.find(name);
    if (it == by_name.end()) return NotFoundError("parameter " + name + " missing");
    if (!t.sizes().equals(it->second.sizes()))
      return InvalidArgumentError("parameter " + name + " shapes differ");
    at::Tensor x = t.detach().to(at::kDouble), y = it->second.detach().to(at::kDouble);
    // Floor the norm at an RMS of 1e-3: a tensor that is zero in exact
    // arithmetic (the attention key bias: softmax ignores a shift shared by all
    // keys, so its gradient is rounding noise) is compared absolutely.
    double floor = 1e-3 * std::sqrt(static_cast<double>(std::max<int64_t>(y.numel(), 1)));
    double denom = std::max(y.norm().item<double>(), floor);
    double rel = (x - y).norm().item<double>() / denom;
    if (rel > max_rel || (worst != nullptr && worst->empty())) {
      max_rel = std::max(max_rel, rel);
      if (worst != nullptr) *worst = name;
    }
  }
  return max_rel;
}

}  // namespace orrery::model
