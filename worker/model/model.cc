// GPT, MLP and TorchScript layers, the Megatron tensor-parallel slicing of GPT,
// the loss, and synthetic batches. See model.h.
#include "worker/model/model.h"

#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "worker/dist/communicator.h"

namespace orrery::model {
namespace {

// Megatron's two conjugate operators (Shoeybi et al. 2019, "Megatron-LM", §3):
// f is the identity forward and an all-reduce of the gradient backward, placed
// before a column-parallel projection; g is an all-reduce forward and the
// identity backward, placed after a row-parallel one.
void AllReduceOrThrow(dist::Communicator* comm, at::Tensor& t) {
  Status s = comm->AllReduce(t, dist::ReduceOp::kSum);
  if (!s.ok()) throw std::runtime_error("tensor-parallel all-reduce: " + s.ToString());
}

dist::Communicator* CommFrom(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<dist::Communicator*>(ctx->saved_data["comm"].toInt());  // NOLINT
}

struct CopyToTensorRegion : public torch::autograd::Function<CopyToTensorRegion> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor g = grads[0].contiguous().clone();
    AllReduceOrThrow(CommFrom(ctx), g);
    return {g, at::Tensor()};
  }
};

struct ReduceFromTensorRegion : public torch::autograd::Function<ReduceFromTensorRegion> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t comm) {
    ctx->saved_data["comm"] = comm;
    at::Tensor y = x.contiguous().clone();
    AllReduceOrThrow(reinterpret_cast<dist::Communicator*>(comm), y);  // NOLINT
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

int64_t CommHandle(dist::Communicator* comm) { return reinterpret_cast<int64_t>(comm); }  // NOLINT

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

at::Tensor Normal(at::Generator& gen, std::vector<int64_t> shape, double stddev) {
  return at::empty(shape, at::kFloat).normal_(0.0, stddev, gen);
}

class GptEmbedding final : public ParamLayer {
 public:
  GptEmbedding(const GptConfig& c, at::Generator& gen) : ParamLayer("embed") {
    tokens_ = Add("tokens", Normal(gen, {c.vocab, c.hidden}, 0.02));
    positions_ = Add("positions", Normal(gen, {c.seq, c.hidden}, 0.02));
  }
  at::Tensor Forward(const at::Tensor& x) override {
    int64_t s = x.size(1);
    return at::embedding(tokens_, x) + positions_.narrow(0, 0, s).unsqueeze(0);
  }

 private:
  at::Tensor tokens_, positions_;
};

// A pre-norm transformer block. With tp_size > 1 it holds this rank's slice of
// the heads and MLP units; the row-parallel biases are replicated and added
// after the reduction, so the names and math equal the unsliced block.
class GptBlock final : public ParamLayer {
 public:
  struct Weights {
    std::map<std::string, at::Tensor> by_name;  // local names -> tensors
  };

  GptBlock(int index, const GptConfig& c, int tp_size, dist::Communicator* tp,
           const std::map<std::string, at::Tensor>& w)
      : ParamLayer("blocks." + std::to_string(index)), c_(c), tp_size_(tp_size), tp_(tp) {
    for (const char* n :
         {"ln1.weight", "ln1.bias", "attn.q.weight", "attn.q.bias", "attn.k.weight", "attn.k.bias",
          "attn.v.weight", "attn.v.bias", "attn.proj.weight", "attn.proj.bias", "ln2.weight",
          "ln2.bias", "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"}) {
      p_[n] = Add(n, w.at(n));
    }
  }

  static std::map<std::string, at::Tensor> Init(const GptConfig& c, at::Generator& gen) {
    int64_t h = c.hidden;
    std::map<std::string, at::Tensor> w;
    w["ln1.weight"] = at::ones({h});
    w["ln1.bias"] = at::zeros({h});
    for (const char* n : {"attn.q", "attn.k", "attn.v"}) {
      w[std::string(n) + ".weight"] = Normal(gen, {h, h}, 0.02);
      w[std::string(n) + ".bias"] = at::zeros({h});
    }
    // GPT-2 scales residual projections by 1/sqrt(2L) (Radford et al. 2019, §2.3).
    double resid = 0.02 / std::sqrt(2.0 * c.layers);
    w["attn.proj.weight"] = Normal(gen, {h, h}, resid);
    w["attn.proj.bias"] = at::zeros({h});
    w["ln2.weight"] = at::ones({h});
    w["ln2.bias"] = at::zeros({h});
    w["mlp.fc1.weight"] = Normal(gen, {4 * h, h}, 0.02);
    w["mlp.fc1.bias"] = at::zeros({4 * h});
    w["mlp.fc2.weight"] = Normal(gen, {h, 4 * h}, resid);
    w["mlp.fc2.bias"] = at::zeros({h});
    return w;
  }

  at::Tensor Forward(const at::Tensor& x) override {
    int64_t b = x.size(0), s = x.size(1), h = c_.hidden;
    int64_t local_heads = c_.heads / tp_size_, hd = h / c_.heads;
    at::Tensor a = at::layer_norm(x, {h}, p_["ln1.weight"], p_["ln1.bias"], 1e-5);
    if (tp_size_ > 1) a = CopyToTensorRegion::apply(a, CommHandle(tp_));
    auto heads = [&](const at::Tensor& t) {
      return t.view({b, s, local_heads, hd}).transpose(1, 2);
    };
    at::Tensor q = heads(at::linear(a, p_["attn.q.weight"], p_["attn.q.bias"]));
    at::Tensor k = heads(at::linear(a, p_["attn.k.weight"], p_["attn.k.bias"]));
    at::Tensor v = heads(at::linear(a, p_["attn.v.weight"], p_["attn.v.bias"]));
    at::Tensor scores =
        at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    at::Tensor mask = at::ones({s, s}, x.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    at::Tensor ctx =
        at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({b, s, local_heads * hd});
    at::Tensor o = at::linear(ctx, p_["attn.proj.weight"]);
    if (tp_size_ > 1) o = ReduceFromTensorRegion::apply(o, CommHandle(tp_));
    at::Tensor y = x + o + p_["attn.proj.bias"];
    at::Tensor m = at::layer_norm(y, {h}, p_["ln2.weight"], p_["ln2.bias"], 1e-5);
    if (tp_size_ > 1) m = CopyToTensorRegion::apply(m, CommHandle(tp_));
    m = at::gelu(at::linear(m, p_["mlp.fc1.weight"], p_["mlp.fc1.bias"]));
    m = at::linear(m, p_["mlp.fc2.weight"]);
    if (tp_size_ > 1) m = ReduceFromTensorRegion::apply(m, CommHandle(tp_));
    return y + m + p_["mlp.fc2.bias"];
  }

 private:
  GptConfig c_;
  int tp_size_;
  dist::Communicator* tp_;
  std::map<std::string, at::Tensor> p_;
};

class GptHead final : public ParamLayer {
 public:
  GptHead(const GptConfig& c, at::Generator& gen) : ParamLayer("head") {
    norm_w_ = Add("ln.weight", at::ones({c.hidden}));
    norm_b_ = Add("ln.bias", at::zeros({c.hidden}));
    proj_ = Add("proj.weight", Normal(gen, {c.vocab, c.hidden}, 0.02));
    hidden_ = c.hidden;
  }
  at::Tensor Forward(const at::Tensor& x) override {
    return at::linear(at::layer_norm(x, {hidden_}, norm_w_, norm_b_, 1e-5), proj_);
  }

 private:
  at::Tensor norm_w_, norm_b_, proj_;
  int64_t hidden_;
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

Status ValidateGpt(const GptConfig& c) {
  if (c.layers < 1 || c.hidden < 1 || c.heads < 1 || c.seq < 1 || c.vocab < 2) {
    return InvalidArgumentError("gpt: layers, hidden, heads, seq must be >= 1 and vocab >= 2");
  }
  if (c.hidden % c.heads != 0)
    return InvalidArgumentError("gpt: hidden must be a multiple of heads");
  return OkStatus();
}

}  // namespace

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

int64_t Model::NumParameters() const {
  int64_t n = 0;
  for (const auto& p : NamedParameters()) n += p.second.numel();
  return n;
}

at::Tensor Model::Forward(const at::Tensor& inputs) const {
  at::Tensor x = inputs;
  for (const auto& l : layers) x = l->Forward(x);
  return x;
}

Status ForEachLayer(const ModelConfig& config,
                    const std::function<Status(std::shared_ptr<Layer>)>& take) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(config.seed);
  try {
    if (config.kind == "gpt") {
      ORRERY_RETURN_IF_ERROR(ValidateGpt(config.gpt));
      const GptConfig& c = config.gpt;
      ORRERY_RETURN_IF_ERROR(take(std::make_shared<GptEmbedding>(c, gen)));
      for (int i = 0; i < c.layers; ++i) {
        ORRERY_RETURN_IF_ERROR(
            take(std::make_shared<GptBlock>(i, c, 1, nullptr, GptBlock::Init(c, gen))));
      }
      return take(std::make_shared<GptHead>(c, gen));
    }
    if (config.kind == "mlp") {
      const MlpConfig& c = config.mlp;
      if (c.input < 1 || c.hidden < 1 || c.layers < 1 || c.classes < 2) {
        return InvalidArgumentError("mlp: input, hidden, layers must be >= 1 and classes >= 2");
      }
      int64_t in = c.input;
      for (int i = 0; i < c.layers; ++i) {
        ORRERY_RETURN_IF_ERROR(take(std::make_shared<MlpLinear>(i, in, c.hidden, true, gen)));
        in = c.hidden;
      }
      return take(std::make_shared<MlpLinear>(c.layers, in, c.classes, false, gen));
    }
    if (config.kind == "torchscript") {
      if (config.torchscript_path.empty())
        return InvalidArgumentError("torchscript: no module path");
      torch::jit::Module module = torch::jit::load(config.torchscript_path);
      module.train();
      return take(std::make_shared<ScriptLayer>(std::move(module)));
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

StatusOr<int64_t> CountParameters(const ModelConfig& config) {
  int64_t n = 0;
  ORRERY_RETURN_IF_ERROR(ForEachLayer(config, [&](std::shared_ptr<Layer> layer) {
    for (const auto& [name, p] : layer->NamedParameters()) n += p.numel();
    return OkStatus();
  }));
  return n;
}

int GptTensorParallelDim(const std::string& name) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (name.rfind("blocks.", 0) != 0) return -1;
  for (const char* n : {".attn.q.weight", ".attn.q.bias", ".attn.k.weight", ".attn.k.bias",
                        ".attn.v.weight", ".attn.v.bias", ".mlp.fc1.weight", ".mlp.fc1.bias"}) {
    if (ends(n)) return 0;  // column-parallel: output rows split
  }
  if (ends(".attn.proj.weight") || ends(".mlp.fc2.weight"))
    return 1;  // row-parallel: input columns split
  return -1;
}

namespace {

Status CheckTensorParallel(const GptConfig& c, int tp_size, dist::Communicator* tp) {
  ORRERY_RETURN_IF_ERROR(ValidateGpt(c));
  if (tp_size < 1 || c.heads % tp_size != 0) {
    return InvalidArgumentError("tensor parallel degree " + std::to_string(tp_size) +
                                " must divide heads " + std::to_string(c.heads));
  }
  if (tp_size > 1 && (tp == nullptr || tp->size() != tp_size)) {
    return InvalidArgumentError("tensor parallel communicator missing or of the wrong size");
  }
  return OkStatus();
}

std::shared_ptr<Layer> SliceLayer(const GptConfig& c, size_t index,
                                  const std::shared_ptr<Layer>& layer, int tp_rank, int tp_size,
                                  dist::Communicator* tp) {
  if (index == 0 || index > static_cast<size_t>(c.layers)) return layer;  // embedding, head
  const int block = static_cast<int>(index) - 1;
  std::map<std::string, at::Tensor> w;
  const std::string prefix = "blocks." + std::to_string(block) + ".";
  for (const auto& [name, value] : layer->NamedParameters()) {
    int dim = GptTensorParallelDim(name);
    at::Tensor v = value.detach();
    if (dim >= 0) v = v.chunk(tp_size, dim)[static_cast<size_t>(tp_rank)];
    w[name.substr(prefix.size())] = v;
  }
  return std::make_shared<GptBlock>(block, c, tp_size, tp, w);
}

}  // namespace

StatusOr<std::shared_ptr<Layer>> SliceGptLayerForTensorParallel(const GptConfig& c, size_t index,
                                                                const std::shared_ptr<Layer>& layer,
                                                                int tp_rank, int tp_size,
                                                                dist::Communicator* tp) {
  ORRERY_RETURN_IF_ERROR(CheckTensorParallel(c, tp_size, tp));
  if (index > static_cast<size_t>(c.layers) + 1)
    return InvalidArgumentError("layer " + std::to_string(index) + " is not in the model");
  return SliceLayer(c, index, layer, tp_rank, tp_size, tp);
}

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
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
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
