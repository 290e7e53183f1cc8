// The decoder-only transformer's layers in its three families (see model.h
// GptConfig), with Megatron tensor parallelism inside the blocks. The numerics
// follow Hugging Face transformers' modeling_gpt2.py and modeling_llama.py
// (v5.24): LayerNorm or RMSNorm computed in float32, GELU (exact or tanh),
// SwiGLU, rotary embeddings with cos/sin from float32 inverse frequencies and
// the "rotate half" convention, grouped-query attention by repeating each key
// and value head for its group of query heads, softmax over float32 scores.
#include "worker/model/transformer.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "worker/dist/communicator.h"

namespace orrery::model::internal {
namespace {

// Megatron's two conjugate operators (Shoeybi et al. 2019, "Megatron-LM", §3):
// f is the identity forward and an all-reduce of the gradient backward, placed
// before a column-parallel projection; g is an all-reduce forward and the
// identity backward, placed after a row-parallel one.
// Partial sums of a bf16 autocast forward (and their gradients) are summed in
// float32: gloo has no bfloat16 reduction, and the float32 sum is the more
// exact one (Megatron sums in bf16 on NCCL, at half these bytes).
void AllReduceOrThrow(dist::Communicator* comm, at::Tensor& t) {
  at::Tensor wide = t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
  Status s = comm->AllReduce(wide, dist::ReduceOp::kSum);
  if (!s.ok()) throw std::runtime_error("tensor-parallel all-reduce: " + s.ToString());
  if (!wide.is_same(t)) t.copy_(wide);
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

at::Tensor Normal(at::Generator& gen, const std::vector<int64_t>& shape, double stddev) {
  return at::empty(shape, at::kFloat).normal_(0.0, stddev, gen);
}

// Parameters of one layer, in registration order, from already-sliced values.
class TransformerLayer : public Layer {
 public:
  TransformerLayer(std::string name, const GptConfig& c, const std::vector<ParamSpec>& specs,
                   const LayerWeights& w)
      : name_(std::move(name)), c_(c) {
    for (const auto& spec : specs) {
      auto it = w.find(spec.local);
      if (it == w.end()) throw std::invalid_argument("no value for " + name_ + "." + spec.local);
      at::Tensor v = it->second.detach().to(at::kFloat).contiguous().clone();
      v.set_requires_grad(true);
      params_.emplace_back(name_ + "." + spec.local, v);
      p_[spec.local] = v;
    }
  }
  std::string name() const override { return name_; }
  NamedTensors NamedParameters() override { return params_; }
  bool ShareParameter(const std::string& name, const at::Tensor& value) override {
    for (auto& [n, p] : params_) {
      if (n != name) continue;
      if (!p.sizes().equals(value.sizes()) || p.scalar_type() != value.scalar_type()) return false;
      p = value;
      p_[name.substr(name_.size() + 1)] = value;
      return true;
    }
    return false;
  }

 protected:
  at::Tensor P(const std::string& local) const {
    auto it = p_.find(local);
    return it == p_.end() ? at::Tensor() : it->second;
  }
  // LayerNorm (gpt, gpt2) or RMSNorm (llama) with parameters "<prefix>.weight"
  // (and ".bias"), in float32 as transformers computes them.
  at::Tensor Norm(const at::Tensor& x, const std::string& prefix) const {
    if (!c_.Llama()) {
      return at::layer_norm(x, {c_.hidden}, P(prefix + ".weight"), P(prefix + ".bias"),
                            c_.norm_eps);
    }
    at::Tensor h = x.to(at::kFloat);
    at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
    h = h * at::rsqrt(variance + c_.norm_eps);
    return P(prefix + ".weight") * h.to(x.scalar_type());
  }

  std::string name_;
  GptConfig c_;
  NamedTensors params_;
  std::map<std::string, at::Tensor> p_;
};

class Embedding final : public TransformerLayer {
 public:
  using TransformerLayer::TransformerLayer;
  at::Tensor Forward(const at::Tensor& x) override {
    at::Tensor h = at::embedding(P("tokens"), x);
    if (c_.Llama()) return h;
    const int64_t s = x.size(1);
    if (s > P("positions").size(0)) {
      throw std::invalid_argument("sequence of " + std::to_string(s) + " tokens is longer than " +
                                  std::to_string(P("positions").size(0)) + " learned positions");
    }
    return h + P("positions").narrow(0, 0, s).unsqueeze(0);
  }
};

class Head final : public TransformerLayer {
 public:
  using TransformerLayer::TransformerLayer;
  at::Tensor Forward(const at::Tensor& x) override {
    return at::linear(Norm(x, "ln"), P("proj.weight"));
  }
};

// Inverse frequencies of the rotary embedding, as modeling_rope_utils.py
// computes them (float32 throughout).
at::Tensor RopeInverseFrequencies(const GptConfig& c) {
  const int64_t dim = c.HeadDim();
  at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor inv = at::pow(c.rope.theta, exponents).reciprocal();
  if (c.rope.type == "linear") return inv / c.rope.factor;
  if (c.rope.type == "llama3") {
    const double old_len = c.rope.original_max_positions;
    const double low_wavelen = old_len / c.rope.low_freq_factor;
    const double high_wavelen = old_len / c.rope.high_freq_factor;
    at::Tensor wavelen = (2.0 * M_PI) / inv;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv / c.rope.factor, inv);
    at::Tensor smooth = (old_len / wavelen - c.rope.low_freq_factor) /
                        (c.rope.high_freq_factor - c.rope.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / c.rope.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    return at::where(medium, smoothed, scaled);
  }
  return inv;
}

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// A pre-norm transformer block. With tp.size > 1 it holds this rank's slice of
// the query and key/value heads and of the MLP units; the row-parallel biases
// are replicated and added after the reduction, so the names and the math equal
// the unsliced block.
class Block final : public TransformerLayer {
 public:
  Block(std::string name, const GptConfig& c, const std::vector<ParamSpec>& specs,
        const LayerWeights& w, const TensorParallelSlice& tp, double lora_scale)
      : TransformerLayer(std::move(name), c, specs, w),
        tp_size_(tp.size),
        tp_(tp.comm),
        lora_scale_(lora_scale) {
    if (c.Llama()) inv_freq_ = RopeInverseFrequencies(c);
  }

  void To(c10::Device device) override {
    Layer::To(device);
    if (inv_freq_.defined()) inv_freq_ = inv_freq_.to(device);
    cos_ = sin_ = at::Tensor();
  }

  at::Tensor Forward(const at::Tensor& x) override {
    const int64_t b = x.size(0), s = x.size(1), hd = c_.HeadDim();
    const int64_t heads = c_.heads / tp_size_, kv_heads = c_.KvHeads() / tp_size_;
    const at::Tensor a_in = Norm(x, "ln1");
    at::Tensor a = a_in;
    if (tp_size_ > 1) a = CopyToTensorRegion::apply(a, CommHandle(tp_));
    auto split = [&](const at::Tensor& t, int64_t n) {
      return t.view({b, s, n, hd}).transpose(1, 2);
    };
    // GPT-2's c_attn LoRA: one A for the fused projection, shared by q, k, v.
    at::Tensor qkv_lora;
    if (P("attn.qkv.lora_a").defined()) qkv_lora = LoraIn(a_in, "attn.qkv");
    at::Tensor q = split(Column(a, a_in, "attn.q", qkv_lora), heads);
    at::Tensor k = split(Column(a, a_in, "attn.k", qkv_lora), kv_heads);
    at::Tensor v = split(Column(a, a_in, "attn.v", qkv_lora), kv_heads);
    if (c_.Llama()) {
      Rotary(s, x.device());
      q = q * cos_ + RotateHalf(q) * sin_;
      k = k * cos_ + RotateHalf(k) * sin_;
    }
    if (kv_heads < heads) {
      // Each key/value head serves heads / kv_heads consecutive query heads.
      const int64_t rep = heads / kv_heads;
      k = k.unsqueeze(2).expand({b, kv_heads, rep, s, hd}).reshape({b, heads, s, hd});
      v = v.unsqueeze(2).expand({b, kv_heads, rep, s, hd}).reshape({b, heads, s, hd});
    }
    at::Tensor scores =
        at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    at::Tensor mask = at::ones({s, s}, x.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    at::Tensor ctx = at::matmul(probs, v).transpose(1, 2).reshape({b, s, heads * hd});
    at::Tensor y = x + Row(ctx, "attn.proj");
    if (P("attn.proj.bias").defined()) y = y + P("attn.proj.bias");
    const at::Tensor m_in = Norm(y, "ln2");
    at::Tensor m = m_in;
    if (tp_size_ > 1) m = CopyToTensorRegion::apply(m, CommHandle(tp_));
    std::string out;
    if (c_.Llama()) {
      m = at::silu(Column(m, m_in, "mlp.gate", {})) * Column(m, m_in, "mlp.up", {});
      out = "mlp.down";
    } else {
      m = Column(m, m_in, "mlp.fc1", {});
      m = c_.activation == "gelu_tanh" ? at::gelu(m, "tanh") : at::gelu(m);
      out = "mlp.fc2";
    }
    y = y + Row(m, out);
    if (P(out + ".bias").defined()) y = y + P(out + ".bias");
    return y;
  }

 private:
  // cos and sin of the positions 0..s-1, [1, 1, s, head_dim], cached per length.
  void Rotary(int64_t s, c10::Device device) {
    if (cos_.defined() && cos_.size(2) == s && cos_.device() == device) return;
    at::Tensor inv = inv_freq_.to(device);
    at::Tensor positions = at::arange(s, at::TensorOptions().dtype(at::kLong).device(device));
    at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv.unsqueeze(0);
    at::Tensor emb = at::cat({freqs, freqs}, -1);
    cos_ = emb.cos().unsqueeze(0).unsqueeze(0);
    sin_ = emb.sin().unsqueeze(0).unsqueeze(0);
  }

  // A LoRA's A applied to the replicated input before the tensor-parallel
  // copy, so A's gradient is the whole one on every rank (the copy's backward
  // all-reduces what each rank's slice of B sends back).
  at::Tensor LoraIn(const at::Tensor& x_replicated, const std::string& proj) const {
    at::Tensor u = at::linear(x_replicated, P(proj + ".lora_a"));
    if (tp_size_ > 1) u = CopyToTensorRegion::apply(u, CommHandle(tp_));
    return u;
  }

  // A column-parallel projection (this rank's output rows) plus its LoRA, if
  // any: `x` is the input after the tensor-parallel copy, `x_in` before it;
  // `shared` is a LoRA input already computed (GPT-2's c_attn).
  at::Tensor Column(const at::Tensor& x, const at::Tensor& x_in, const std::string& proj,
                    const at::Tensor& shared) const {
    at::Tensor y = at::linear(x, P(proj + ".weight"), P(proj + ".bias"));
    at::Tensor b = P(proj + ".lora_b");
    if (!b.defined()) return y;
    at::Tensor u = shared.defined() ? shared : LoraIn(x_in, proj);
    return y + at::linear(u, b) * lora_scale_;
  }

  // A row-parallel projection summed over the tensor-parallel ranks, plus its
  // LoRA: each rank's slice of A sees its slice of the input; the partial
  // products are summed before B, which every rank applies whole.
  at::Tensor Row(const at::Tensor& x, const std::string& proj) const {
    at::Tensor y = at::linear(x, P(proj + ".weight"));
    if (tp_size_ > 1) y = ReduceFromTensorRegion::apply(y, CommHandle(tp_));
    at::Tensor a = P(proj + ".lora_a");
    if (!a.defined()) return y;
    at::Tensor u = at::linear(x, a);
    if (tp_size_ > 1) u = ReduceFromTensorRegion::apply(u, CommHandle(tp_));
    return y + at::linear(u, P(proj + ".lora_b")) * lora_scale_;
  }

  int tp_size_;
  dist::Communicator* tp_;
  double lora_scale_;
  at::Tensor inv_freq_, cos_, sin_;
};

bool IsBlock(const GptConfig& c, size_t index) {
  return index >= 1 && index <= static_cast<size_t>(c.layers);
}

}  // namespace

Status ValidateGpt(const GptConfig& c) {
  if (c.layers < 1 || c.hidden < 1 || c.heads < 1 || c.seq < 1 || c.vocab < 2) {
    return InvalidArgumentError("gpt: layers, hidden, heads, seq must be >= 1 and vocab >= 2");
  }
  if (c.family != "gpt" && c.family != "gpt2" && c.family != "llama") {
    return InvalidArgumentError("gpt: unknown family '" + c.family + "' (gpt, gpt2, llama)");
  }
  if (c.head_dim <= 0 && c.hidden % c.heads != 0)
    return InvalidArgumentError("gpt: hidden must be a multiple of heads");
  if (c.kv_heads < 0 || c.heads % c.KvHeads() != 0) {
    return InvalidArgumentError("gpt: heads (" + std::to_string(c.heads) +
                                ") must be a multiple of kv_heads (" + std::to_string(c.KvHeads()) +
                                ")");
  }
  if (!c.Llama() && (c.KvHeads() != c.heads || c.HeadDim() * c.heads != c.hidden)) {
    return InvalidArgumentError(
        "gpt: grouped-query attention and a head_dim apart from hidden / "
        "heads need the llama family");
  }
  if (c.Llama() && c.HeadDim() % 2 != 0)
    return InvalidArgumentError("gpt: rotary positions need an even head_dim");
  if (!c.Llama() && c.seq > c.MaxPositions()) {
    return InvalidArgumentError("gpt: seq " + std::to_string(c.seq) + " is longer than the " +
                                std::to_string(c.MaxPositions()) +
                                " positions the model learned (max_positions); use a shorter seq");
  }
  if (c.rope.type != "default" && c.rope.type != "linear" && c.rope.type != "llama3") {
    return InvalidArgumentError("gpt: rope scaling '" + c.rope.type +
                                "' is not supported (default, linear, llama3)");
  }
  if (c.norm_eps <= 0) return InvalidArgumentError("gpt: norm_eps must be > 0");
  if (c.Llama() ? c.activation != "silu" : c.activation != "gelu" && c.activation != "gelu_tanh") {
    return InvalidArgumentError("gpt: activation '" + c.activation + "' does not fit the " +
                                c.family + " family (gpt, gpt2: gelu or gelu_tanh; llama: silu)");
  }
  return OkStatus();
}

std::string LayerName(const GptConfig& c, size_t index) {
  if (index == 0) return "embed";
  if (IsBlock(c, index)) return "blocks." + std::to_string(index - 1);
  return "head";
}

std::vector<ParamSpec> LayerSpecs(const GptConfig& c, size_t index) {
  const int64_t h = c.hidden, v = c.vocab, hd = c.HeadDim();
  const int64_t q_out = c.heads * hd, kv_out = c.KvHeads() * hd, ff = c.Intermediate();
  std::vector<ParamSpec> out;
  auto add = [&](const std::string& n, std::vector<int64_t> shape) {
    out.push_back({n, std::move(shape)});
  };
  auto norm = [&](const std::string& n) {
    add(n + ".weight", {h});
    if (!c.Llama()) add(n + ".bias", {h});
  };
  auto linear = [&](const std::string& n, int64_t o, int64_t i, bool bias) {
    add(n + ".weight", {o, i});
    if (bias) add(n + ".bias", {o});
  };
  if (index == 0) {
    add("tokens", {v, h});
    if (!c.Llama()) add("positions", {c.MaxPositions(), h});
    return out;
  }
  if (!IsBlock(c, index)) {
    norm("ln");
    add("proj.weight", {v, h});
    return out;
  }
  norm("ln1");
  linear("attn.q", q_out, h, c.qkv_bias);
  linear("attn.k", kv_out, h, c.qkv_bias);
  linear("attn.v", kv_out, h, c.qkv_bias);
  linear("attn.proj", h, q_out, c.out_bias);
  norm("ln2");
  if (c.Llama()) {
    linear("mlp.gate", ff, h, c.mlp_bias);
    linear("mlp.up", ff, h, c.mlp_bias);
    linear("mlp.down", h, ff, c.mlp_bias);
  } else {
    linear("mlp.fc1", ff, h, c.mlp_bias);
    linear("mlp.fc2", h, ff, c.mlp_bias);
  }
  return out;
}

LayerWeights InitLayer(const GptConfig& c, size_t index, at::Generator& gen, uint64_t seed) {
  LayerWeights w;
  // GPT-2 scales residual projections by 1/sqrt(2L) (Radford et al. 2019, §2.3).
  const double resid = c.Llama() ? 0.02 : 0.02 / std::sqrt(2.0 * c.layers);
  if (index == 0) {
    w["tokens"] = Normal(gen, {c.vocab, c.hidden}, 0.02);
    if (!c.Llama()) w["positions"] = Normal(gen, {c.MaxPositions(), c.hidden}, 0.02);
    return w;
  }
  if (!IsBlock(c, index)) {
    w["ln.weight"] = at::ones({c.hidden});
    if (!c.Llama()) w["ln.bias"] = at::zeros({c.hidden});
    if (c.tie_embeddings) {
      // The token embedding is the seed's first draw: draw it again.
      at::Generator fresh = at::make_generator<at::CPUGeneratorImpl>(seed);
      w["proj.weight"] = Normal(fresh, {c.vocab, c.hidden}, 0.02);
    } else {
      w["proj.weight"] = Normal(gen, {c.vocab, c.hidden}, 0.02);
    }
    return w;
  }
  // Drawn in registration order (weights only; norms are ones, biases zeros).
  for (const ParamSpec& spec : LayerSpecs(c, index)) {
    const std::string& n = spec.local;
    const bool bias = n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
    if (n.rfind("ln", 0) == 0) {
      w[n] = bias ? at::zeros(spec.shape) : at::ones(spec.shape);
    } else if (bias) {
      w[n] = at::zeros(spec.shape);
    } else {
      const bool residual =
          n == "attn.proj.weight" || n == "mlp.fc2.weight" || n == "mlp.down.weight";
      w[n] = Normal(gen, spec.shape, residual ? resid : 0.02);
    }
  }
  return w;
}

LayerWeights SliceWeights(const GptConfig& c, size_t index, const LayerWeights& full,
                          const TensorParallelSlice& tp) {
  if (tp.size <= 1 || !IsBlock(c, index)) return full;
  LayerWeights out;
  const std::string prefix = LayerName(c, index) + ".";
  for (const auto& [local, value] : full) {
    const int dim = GptTensorParallelDim(prefix + local);
    at::Tensor v = value.detach();
    if (dim >= 0) v = v.chunk(tp.size, dim)[static_cast<size_t>(tp.rank)];
    out[local] = v;
  }
  return out;
}

std::vector<ParamSpec> LoraSpecs(const ModelConfig& mc, size_t index) {
  const GptConfig& c = mc.gpt;
  std::vector<ParamSpec> out;
  if (!mc.finetune.Lora() || !IsBlock(c, index)) return out;
  auto projections = LoraProjections(c, mc.finetune);
  if (!projections.ok()) return out;  // validated where the model is built
  const int64_t r = mc.finetune.lora_rank;
  std::map<std::string, std::vector<int64_t>> base;
  for (auto& spec : LayerSpecs(c, index)) base[spec.local] = spec.shape;
  for (const std::string& p : *projections) {
    if (p == "attn.qkv") {
      out.push_back({"attn.qkv.lora_a", {r, c.hidden}});
      for (const char* part : {"attn.q", "attn.k", "attn.v"})
        out.push_back({std::string(part) + ".lora_b", {base[std::string(part) + ".weight"][0], r}});
      continue;
    }
    const std::vector<int64_t>& w = base[p + ".weight"];
    out.push_back({p + ".lora_a", {r, w[1]}});
    out.push_back({p + ".lora_b", {w[0], r}});
  }
  return out;
}

LayerWeights InitLora(const ModelConfig& mc, size_t index) {
  LayerWeights w;
  std::vector<ParamSpec> specs = LoraSpecs(mc, index);
  if (specs.empty()) return w;
  // A stream of the adapters' own per block (0x4c6f5241 spells "LoRA").
  at::Generator gen =
      at::make_generator<at::CPUGeneratorImpl>((mc.seed ^ 0x4c6f5241ULL) * 1000003ULL + index);
  for (const ParamSpec& spec : specs) {
    if (spec.local.size() > 7 && spec.local.compare(spec.local.size() - 7, 7, ".lora_a") == 0) {
      // PEFT: kaiming_uniform_(a=sqrt(5)), whose bound is 1/sqrt(fan_in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
      w[spec.local] = at::empty(spec.shape, at::kFloat).uniform_(-bound, bound, gen);
    } else {
      w[spec.local] = at::zeros(spec.shape);
    }
  }
  return w;
}

std::shared_ptr<Layer> MakeLayer(const ModelConfig& mc, size_t index, const LayerWeights& w,
                                 const TensorParallelSlice& tp) {
  const GptConfig& c = mc.gpt;
  const FineTuneConfig& ft = mc.finetune;
  std::string name = LayerName(c, index);
  std::vector<ParamSpec> specs = LayerSpecs(c, index);
  for (auto& spec : LoraSpecs(mc, index)) specs.push_back(spec);
  std::shared_ptr<Layer> layer;
  if (index == 0) {
    layer = std::make_shared<Embedding>(name, c, specs, w);
  } else if (!IsBlock(c, index)) {
    layer = std::make_shared<Head>(name, c, specs, w);
  } else {
    layer = std::make_shared<Block>(name, c, specs, w, tp,
                                    ft.Lora() ? ft.lora_alpha / ft.lora_rank : 0.0);
  }
  // What this run does not train.
  const bool block = IsBlock(c, index);
  for (auto& [pname, p] : layer->NamedParameters()) {
    const bool adapter = pname.find(".lora_") != std::string::npos;
    bool frozen = ft.Lora() && !adapter;
    if (ft.freeze_embeddings && index == 0) frozen = true;
    if (ft.freeze_embeddings && c.tie_embeddings && pname == "head.proj.weight") frozen = true;
    if (block && static_cast<int>(index) <= ft.freeze_blocks && !adapter) frozen = true;
    if (frozen) p.requires_grad_(false);
  }
  return layer;
}

}  // namespace orrery::model::internal
