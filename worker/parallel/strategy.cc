// The template factory, the single-process reference loop, the shared optimizer
// and the pipeline stage balancer. See strategy.h.
#include "worker/parallel/strategy.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "worker/contract/templates.h"
#include "worker/parallel/internal.h"

namespace orrery::parallel {
namespace internal {

Optimizer::Optimizer(OptimizerConfig config, std::vector<at::Tensor> params,
                     std::vector<at::Tensor> masks, std::vector<bool> frozen)
    : config_(std::move(config)),
      params_(std::move(params)),
      masks_(std::move(masks)),
      frozen_(std::move(frozen)) {
  masks_.resize(params_.size());
  frozen_.resize(params_.size(), false);
  runs_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!masks_[i].defined()) continue;
    // Runs of true elements (a mask follows whole parameters, so there are few).
    at::Tensor m = masks_[i].to(at::kCPU).contiguous();
    const bool* d = m.data_ptr<bool>();
    int64_t stored = 0;
    for (int64_t e = 0, n = m.numel(); e < n;) {
      if (!d[e]) {
        ++e;
        continue;
      }
      int64_t end = e;
      while (end < n && d[end]) ++end;
      runs_[i].push_back({e, end, stored});
      stored += end - e;
      e = end;
    }
    if (stored == 0) frozen_[i] = true;
    // All trained: an ordinary parameter.
    if (stored == m.numel()) masks_[i] = at::Tensor(), runs_[i].clear();
  }
  Reset();
}

std::vector<bool> Optimizer::FrozenByRequiresGrad(const std::vector<at::Tensor>& params) {
  std::vector<bool> frozen;
  for (const auto& p : params) frozen.push_back(!p.requires_grad());
  return frozen;
}

at::Tensor TrainableMask(const model::NamedTensors& params, int64_t begin, int64_t length,
                         c10::Device device) {
  bool all = true;
  for (const auto& [name, p] : params) all = all && p.requires_grad();
  if (all) return at::Tensor();
  std::vector<at::Tensor> pieces;
  for (const auto& [name, p] : params)
    pieces.push_back(at::full({p.numel()}, p.requires_grad(), at::kBool));
  at::Tensor flat = pieces.empty() ? at::zeros({0}, at::kBool) : at::cat(pieces);
  at::Tensor out = at::zeros({length}, at::kBool);  // padding trains nothing
  const int64_t n = std::max<int64_t>(0, std::min(length, flat.numel() - begin));
  if (n > 0) out.narrow(0, 0, n).copy_(flat.narrow(0, begin, n));
  return out.to(device);
}

at::Tensor Optimizer::Compact(size_t i, const at::Tensor& full) const {
  if (frozen_[i]) return at::empty({0}, full.options());
  if (!masks_[i].defined()) return full;
  return full.reshape({-1}).masked_select(masks_[i].reshape({-1}));
}

at::Tensor Optimizer::Expand(size_t i, const at::Tensor& compact) const {
  if (frozen_[i]) return at::zeros_like(params_[i]);
  if (!masks_[i].defined()) return compact;
  return at::zeros_like(params_[i]).masked_scatter_(masks_[i], compact);
}

void Optimizer::Reset() {
  torch::NoGradGuard no_grad;
  m_.clear();
  v_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor shape = Compact(i, params_[i].detach());
    m_.push_back(at::zeros_like(shape, at::MemoryFormat::Contiguous));
    v_.push_back(config_.kind == "adamw" ? at::zeros_like(shape, at::MemoryFormat::Contiguous)
                                         : at::Tensor());
  }
  steps_ = 0;
}

void Optimizer::Step(const std::vector<at::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined() || frozen_[i]) continue;
    // A mixed flat shard steps its trained elements only (gathered, updated,
    // scattered back): frozen ones keep their values and get no weight decay.
    const bool masked = masks_[i].defined();
    at::Tensor p = masked ? Compact(i, params_[i].detach()) : params_[i];
    at::Tensor g = masked ? Compact(i, grads[i]) : grads[i];
    if (config_.kind == "adamw") {
      // Loshchilov & Hutter 2019: decoupled weight decay, then Adam's update.
      if (config_.weight_decay != 0.0) p.mul_(1.0 - config_.lr * config_.weight_decay);
      m_[i].mul_(config_.beta1).add_(g, 1.0 - config_.beta1);
      v_[i].mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
      double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(steps_));
      double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(steps_));
      at::Tensor denom = (v_[i] / bc2).sqrt_().add_(config_.eps);
      p.addcdiv_(m_[i], denom, -config_.lr / bc1);
    } else {
      at::Tensor d = g;
      if (config_.weight_decay != 0.0) d = d + p * config_.weight_decay;
      m_[i].mul_(config_.momentum).add_(d);
      p.add_(m_[i], -config_.lr);
    }
    if (masked) params_[i].detach().masked_scatter_(masks_[i], p);
  }
}

void Optimizer::SetSlotOffsets(std::vector<StateSegment>& segments) const {
  for (StateSegment& seg : segments) {
    const size_t i = seg.param;
    if (i >= params_.size() || frozen_[i]) {
      seg.slot_offset = -1;
      continue;
    }
    if (!masks_[i].defined()) {
      seg.slot_offset = seg.offset;
      continue;
    }
    // A segment lies within one parameter, so within one run or outside all.
    seg.slot_offset = -1;
    for (const Run& r : runs_[i]) {
      if (seg.offset >= r.begin && seg.offset < r.end) {
        seg.slot_offset = r.slot_begin + (seg.offset - r.begin);
        break;
      }
    }
  }
}

void Optimizer::AppendPlacement(const std::vector<std::string>& names, bool host_by_design,
                                std::vector<PlacedTensor>& out) const {
  std::vector<std::string> slots = SlotNames();
  for (size_t k = 0; k < slots.size(); ++k) {
    const std::vector<at::Tensor>& slot = k == 0 ? m_ : v_;
    for (size_t i = 0; i < slot.size() && i < names.size(); ++i)
      out.push_back({"optim/" + slots[k] + "/" + names[i], slot[i].device(), host_by_design});
  }
}

void AppendParameterPlacement(const model::NamedTensors& params, std::vector<PlacedTensor>& out) {
  for (const auto& [name, p] : params) {
    out.push_back({"param/" + name, p.device(), false});
    if (p.grad().defined()) out.push_back({"grad/" + name, p.grad().device(), false});
  }
}

void AppendBatchPlacement(const model::Batch& batch, std::vector<PlacedTensor>& out) {
  if (batch.inputs.defined()) out.push_back({"batch/inputs", batch.inputs.device(), false});
  if (batch.targets.defined()) out.push_back({"batch/targets", batch.targets.device(), false});
}

model::NamedTensors OnHost(model::NamedTensors params) {
  for (auto& [name, t] : params) t = t.to(at::kCPU);
  return params;
}

StatusOr<model::Model> BuildOn(const model::ModelConfig& mc, c10::Device device) {
  ORRERY_ASSIGN_OR_RETURN(model::Model m, model::BuildModel(mc));
  ORRERY_RETURN_IF_ERROR(model::MoveToDevice(m, device));
  return m;
}

std::vector<std::string> Optimizer::SlotNames() const {
  if (config_.kind == "adamw") return {"exp_avg", "exp_avg_sq"};
  return {"momentum"};
}

void Optimizer::ShowSlot(size_t k) {
  torch::NoGradGuard no_grad;
  shown_.clear();
  const std::vector<at::Tensor>& s = slot(k);
  for (size_t i = 0; i < params_.size(); ++i) {
    shown_.push_back(params_[i].detach().clone());
    params_[i].detach().copy_(Expand(i, s[i]).view(params_[i].sizes()));
  }
}

void Optimizer::Unshow() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < shown_.size() && i < params_.size(); ++i)
    params_[i].detach().copy_(shown_[i]);
  shown_.clear();
}

Status Optimizer::SetState(const std::vector<std::vector<at::Tensor>>& slots, int64_t steps) {
  torch::NoGradGuard no_grad;
  if (slots.size() != SlotNames().size())
    return InvalidArgumentError("wrong number of optimizer slots");
  for (size_t k = 0; k < slots.size(); ++k) {
    std::vector<at::Tensor>& mine = k == 0 ? m_ : v_;
    if (slots[k].size() != params_.size())
      return InvalidArgumentError("optimizer slot of the wrong length");
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!slots[k][i].sizes().equals(params_[i].sizes()))
        return InvalidArgumentError("optimizer slot of the wrong shape");
      mine[i].copy_(Compact(i, slots[k][i].to(params_[i].device())).view(mine[i].sizes()));
    }
  }
  steps_ = steps;
  return OkStatus();
}

LocalState Optimizer::View() const {
  LocalState state;
  state.params = params_;
  state.slot_names = SlotNames();
  for (size_t k = 0; k < state.slot_names.size(); ++k) state.slots.push_back(slot(k));
  state.optimizer_steps = steps_;
  return state;
}

std::vector<StateSegment> WholeSegments(const std::vector<WholeTensor>& tensors, int replicas,
                                        int replica) {
  std::vector<StateSegment> out;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const WholeTensor& t = tensors[k];
    StateSegment seg;
    seg.name = t.name;
    seg.global_shape = t.shape;
    seg.region = checkpoint::FullRegion(t.shape);
    seg.param = t.param;
    seg.offset = t.offset;
    seg.writer = static_cast<int>(k % static_cast<size_t>(std::max(1, replicas))) == replica;
    out.push_back(std::move(seg));
  }
  return out;
}

StatusOr<model::NamedTensors> GatherOptimizerState(Strategy& strategy, Optimizer& optimizer) {
  model::NamedTensors out;
  std::vector<std::string> slots = optimizer.SlotNames();
  for (size_t k = 0; k < slots.size(); ++k) {
    optimizer.ShowSlot(k);
    auto gathered = strategy.GatherFullParameters();
    optimizer.Unshow();  // restore before any early return
    if (!gathered.ok()) return gathered.status();
    for (auto& [name, t] : *gathered) out.emplace_back(slots[k] + "/" + name, std::move(t));
  }
  out.emplace_back("step", at::scalar_tensor(optimizer.steps(), at::kLong));
  return out;
}

Status LoadFullState(Strategy& strategy, Optimizer& optimizer, const model::NamedTensors& params,
                     const model::NamedTensors& optimizer_state) {
  std::vector<std::string> slots = optimizer.SlotNames();
  std::map<std::string, model::NamedTensors> by_slot;
  int64_t steps = -1;
  for (const auto& [name, t] : optimizer_state) {
    if (name == "step") {
      steps = t.item<int64_t>();
      continue;
    }
    size_t slash = name.find('/');
    if (slash == std::string::npos)
      return InvalidArgumentError("optimizer state entry " + name + " has no slot");
    by_slot[name.substr(0, slash)].emplace_back(name.substr(slash + 1), t);
  }
  if (steps < 0) return NotFoundError("optimizer state has no step count");
  // Each slot is scattered through the parameters (LoadFullParameters resets
  // the optimizer, so the slices are kept aside and installed at the end).
  std::vector<std::vector<at::Tensor>> local(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    auto it = by_slot.find(slots[k]);
    if (it == by_slot.end()) return NotFoundError("optimizer state has no slot " + slots[k]);
    ORRERY_RETURN_IF_ERROR(
        strategy.LoadFullParameters(it->second).WithContext("optimizer slot " + slots[k]));
    for (const auto& p : optimizer.params()) local[k].push_back(p.detach().clone());
  }
  ORRERY_RETURN_IF_ERROR(strategy.LoadFullParameters(params));
  return optimizer.SetState(local, steps);
}

Status StatusFromException(const std::exception& e, const std::string& what) {
  std::string msg = e.what();
  std::string head = msg.substr(0, msg.find('\n'));
  if (head.find("UNAVAILABLE") != std::string::npos) return UnavailableError(what + ": " + head);
  if (head.find("DEADLINE_EXCEEDED") != std::string::npos)
    return DeadlineExceededError(what + ": " + head);
  return InternalError(what + ": " + head);
}

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

Status CopyNamed(const model::NamedTensors& full, const model::NamedTensors& params, int tp_rank,
                 int tp_size) {
  std::map<std::string, at::Tensor> by_name(full.begin(), full.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      return NotFoundError("parameter " + name + " missing from the loaded set");
    at::Tensor src = it->second;
    int dim = tp_size > 1 ? model::GptTensorParallelDim(name) : -1;
    if (dim >= 0) src = src.chunk(tp_size, dim)[static_cast<size_t>(tp_rank)];
    if (!src.sizes().equals(p.sizes()))
      return InvalidArgumentError("parameter " + name + " has the wrong shape");
    p.copy_(src);
  }
  return OkStatus();
}

// torch 2.4 replaced the per-device autocast functions with ones taking the
// device type; the worker builds against 1.13 (Debian) and the CUDA wheels.
AutocastGuard::AutocastGuard(const std::string& precision, c10::Device device)
    : on_(precision == "bf16"), type_(device.type()) {
  if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  at::autocast::set_autocast_enabled(type_, true);
#else
  if (type_ == c10::kCUDA) {
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  }
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!on_) return;
  // The casts of the parameters made in this forward are not kept past it.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
#else
  if (type_ == c10::kCUDA) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  }
#endif
}

namespace {

// One layer as an activation checkpoint (see ForwardLayers). `anchor` is an
// empty tensor that requires a gradient: it makes the output require one even
// when the input does not (token ids into the embedding), so autograd still
// reaches this backward and the layer's parameters get their gradients. The
// layer is passed by address: it outlives the step's graph.
class LayerCheckpoint : public torch::autograd::Function<LayerCheckpoint> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& anchor, int64_t layer, const std::string& precision) {
    (void)anchor;
    ctx->save_for_backward({x});
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["precision"] = precision;
    // Function::apply runs this without autograd: nothing inside is kept.
    return reinterpret_cast<model::Layer*>(layer)->Forward(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor x = ctx->get_saved_variables()[0].detach();
    auto* layer = reinterpret_cast<model::Layer*>(ctx->saved_data["layer"].toInt());
    const std::string precision = ctx->saved_data["precision"].toStringRef();
    if (x.is_floating_point() && ctx->needs_input_grad(0)) x.requires_grad_(true);
    at::Tensor y;
    {
      torch::AutoGradMode grad_mode(true);
      AutocastGuard autocast(precision, x.device());
      y = layer->Forward(x);
    }
    if (y.requires_grad() && grads[0].defined()) torch::autograd::backward({y}, {grads[0]});
    return {x.requires_grad() ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ForwardLayers(const std::vector<std::shared_ptr<model::Layer>>& layers,
                         const at::Tensor& x, bool recompute, const std::string& precision) {
  at::Tensor y = x;
  if (!recompute || !at::GradMode::is_enabled()) {
    for (const auto& l : layers) y = l->Forward(y);
    return y;
  }
  at::Tensor anchor = at::empty({0}, x.options().dtype(at::kFloat)).requires_grad_(true);
  for (const auto& l : layers) {
    y = LayerCheckpoint::apply(y, anchor, reinterpret_cast<int64_t>(l.get()), precision);
  }
  return y;
}

Status SumTiedGradients(const std::vector<std::pair<std::string, std::string>>& tied,
                        const model::NamedTensors& params,
                        const std::map<std::string, std::vector<int64_t>>& shapes,
                        dist::Communicator* group, c10::Device device) {
  if (tied.empty()) return OkStatus();
  std::map<std::string, at::Tensor> local(params.begin(), params.end());
  torch::NoGradGuard no_grad;
  for (const auto& [a, b] : tied) {
    auto ia = local.find(a), ib = local.find(b);
    if (group == nullptr && ia != local.end() && ib != local.end() && ia->second.grad().defined() &&
        ib->second.grad().defined()) {
      // Both here (one process, tensor parallelism): summed in place, one
      // tensor shared by both (a GPT-2 head is 50257 x 768: no copies).
      at::Tensor sum = ia->second.mutable_grad();
      sum.add_(ib->second.grad());
      ib->second.mutable_grad() = sum;
      continue;
    }
    auto shape = shapes.find(a);
    if (shape == shapes.end()) return InternalError("tied parameter " + a + " has no shape");
    at::Tensor sum = at::zeros(shape->second, at::TensorOptions().device(device));
    std::vector<at::Tensor> here;
    for (const std::string& name : {a, b}) {
      auto it = local.find(name);
      if (it == local.end()) continue;
      here.push_back(it->second);
      if (it->second.grad().defined()) sum.add_(it->second.grad());
    }
    if (group != nullptr) {
      ORRERY_RETURN_IF_ERROR(group->AllReduce(sum, dist::ReduceOp::kSum)
                                 .WithContext("summing the gradients of " + a + " and " + b));
    } else if (here.size() != 2) {
      return InternalError("tied parameters " + a + " and " + b +
                           " are not both on this rank, or one of them alone is frozen");
    }
    for (at::Tensor& p : here) p.mutable_grad() = sum.clone();
  }
  return OkStatus();
}

namespace {

// The plain loop: forward, loss, backward, step. Every template must equal it.
class SingleStrategy final : public Strategy {
 public:
  SingleStrategy(model::Model m, const OptimizerConfig& opt, c10::Device device,
                 std::vector<std::pair<std::string, std::string>> tied, std::string precision,
                 bool recompute)
      : model_(std::move(m)),
        device_(device),
        tied_(std::move(tied)),
        precision_(std::move(precision)),
        recompute_(recompute) {
    // A tied pair is one tensor here: one gradient (autograd adds both uses),
    // one optimizer update, as transformers' tied model.
    tied_ = model::ShareTiedParameters(model_, tied_);
    std::map<const c10::TensorImpl*, size_t> index;
    for (auto& [name, p] : model_.NamedParameters()) {
      shapes_[name] = p.sizes().vec();
      auto [it, fresh] = index.emplace(p.unsafeGetTensorImpl(), params_.size());
      if (fresh) {
        params_.push_back(p);
        names_.push_back(name);
      }
      every_name_.emplace_back(name, it->second);
    }
    optimizer_ = std::make_unique<Optimizer>(opt, params_, std::vector<at::Tensor>{},
                                             Optimizer::FrozenByRequiresGrad(params_));
  }

  StatusOr<double> Step(const model::Batch& global_batch) override {
    try {
      model::Batch batch = model::BatchOn(global_batch, device_);
      last_batch_ = batch;
      for (auto& p : params_) p.mutable_grad().reset();
      at::Tensor loss;
      {
        AutocastGuard autocast(precision_, device_);
        loss = model::Loss(ForwardLayers(model_.layers, batch.inputs, recompute_, precision_),
                           batch.targets);
      }
      loss.backward();
      ORRERY_RETURN_IF_ERROR(
          SumTiedGradients(tied_, model_.NamedParameters(), shapes_, nullptr, device_));
      std::vector<at::Tensor> grads;
      for (auto& p : params_) grads.push_back(p.grad());
      optimizer_->Step(grads);
      return loss.item<double>();
    } catch (const std::exception& e) {
      return StatusFromException(e, "single step");
    }
  }
  StatusOr<at::Tensor> Forward(const at::Tensor& inputs) override {
    try {
      torch::NoGradGuard no_grad;
      at::Tensor y;
      {
        AutocastGuard autocast(precision_, device_);
        y = model_.Forward(inputs.to(device_));
      }
      return y.to(at::kFloat).to(at::kCPU).contiguous();
    } catch (const std::exception& e) {
      return StatusFromException(e, "single forward");
    }
  }
  void SetLearningRate(double lr) override { optimizer_->SetLearningRate(lr); }
  StatusOr<model::NamedTensors> GatherFullParameters() override {
    model::NamedTensors out;
    for (auto& [name, p] : model_.NamedParameters()) out.emplace_back(name, p.detach().clone());
    return OnHost(std::move(out));
  }
  Status LoadFullParameters(const model::NamedTensors& full) override {
    optimizer_->Reset();
    return CopyNamed(full, model_.NamedParameters(), 0, 1);
  }
  StatusOr<model::NamedTensors> GatherFullOptimizerState() override {
    return GatherOptimizerState(*this, *optimizer_);
  }
  Status LoadFullState(const model::NamedTensors& params,
                       const model::NamedTensors& state) override {
    return internal::LoadFullState(*this, *optimizer_, params, state);
  }
  StatusOr<LocalState> State() override {
    LocalState state = optimizer_->View();
    std::vector<WholeTensor> whole;
    // Every name, a shared tensor's too (a checkpoint holds both halves of a tie,
    // so a template that keeps them apart can load it).
    for (const auto& [name, i] : every_name_)
      whole.push_back({name, params_[i].sizes().vec(), i, 0});
    state.segments = WholeSegments(whole, 1, 0);
    optimizer_->SetSlotOffsets(state.segments);
    return state;
  }
  Status StateRestored(int64_t optimizer_steps) override {
    optimizer_->set_steps(optimizer_steps);
    return OkStatus();
  }
  StrategyInfo Info() const override {
    StrategyInfo info;
    info.name = "single";
    info.recompute = recompute_ ? "unit" : "none";
    for (const auto& p : params_) info.peak_device_parameter_bytes += 2 * Bytes(p);
    return info;
  }
  std::vector<PlacedTensor> Placement() const override {
    std::vector<PlacedTensor> out;
    AppendParameterPlacement(model_.NamedParameters(), out);
    optimizer_->AppendPlacement(names_, false, out);
    AppendBatchPlacement(last_batch_, out);
    return out;
  }

 private:
  model::Model model_;
  c10::Device device_;
  std::vector<std::pair<std::string, std::string>> tied_;
  std::string precision_;
  bool recompute_ = false;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::vector<std::string> names_;  // names_[i] names params_[i]
  // Every parameter name and its index in params_ (two names may share one).
  std::vector<std::pair<std::string, size_t>> every_name_;
  model::Batch last_batch_;
  std::vector<at::Tensor> params_;  // distinct tensors: what the optimizer steps
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace
}  // namespace internal

StatusOr<std::vector<PipelineOp>> PipelineSchedule(const std::string& schedule, int stages,
                                                   int stage, int micro_batches) {
  if (schedule != "gpipe" && schedule != "1f1b") {
    return InvalidArgumentError("unknown pipeline schedule '" + schedule + "' (gpipe, 1f1b)");
  }
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1) {
    return InvalidArgumentError("no pipeline schedule for stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + " with " + std::to_string(micro_batches) +
                                " micro-batches");
  }
  // GPipe is 1F1B with every forward as warm-up.
  int warmup = schedule == "gpipe" ? micro_batches : std::min(stages - stage - 1, micro_batches);
  std::vector<PipelineOp> ops;
  int forwards = 0, backwards = 0;
  while (forwards < warmup) ops.push_back({true, forwards++});
  while (forwards < micro_batches) {
    ops.push_back({true, forwards++});
    ops.push_back({false, backwards++});
  }
  while (backwards < micro_batches) ops.push_back({false, backwards++});
  return ops;
}

namespace internal {

StatusOr<StrategyConfig> ResolveStrategyConfig(const StrategyConfig& config,
                                               const OptimizerConfig& optimizer) {
  if (optimizer.kind != "sgd" && optimizer.kind != "adamw") {
    return InvalidArgumentError("unknown optimizer '" + optimizer.kind + "' (sgd, adamw)");
  }
  if (config.precision != "fp32" && config.precision != "bf16") {
    return InvalidArgumentError("unknown precision '" + config.precision + "' (fp32, bf16)");
  }
  if (config.pipeline_schedule != "gpipe" && config.pipeline_schedule != "1f1b") {
    return InvalidArgumentError("unknown pipeline schedule '" + config.pipeline_schedule +
                                "' (gpipe, 1f1b)");
  }
  if (config.spill_link_bytes_per_s < 0) {
    return InvalidArgumentError("spill_link_bytes_per_s is " +
                                std::to_string(config.spill_link_bytes_per_s) +
                                "; it must be positive, or 0 for no emulated link");
  }
  StrategyConfig c = config;
  // The template table (worker/contract/templates.h) says along which axis the
  // ranks lie and how the state divides; that picks the strategy.
  const contract::TemplateTraits* traits = contract::FindTemplate(c.name);
  if (traits == nullptr) {
    return InvalidArgumentError("unknown template '" + c.name + "' (" +
                                contract::TemplateNames(/*plannable_only=*/false) + ")");
  }
  if (c.recompute.empty()) c.recompute = std::string(traits->recompute);
  if (!contract::IsRecomputeMode(c.recompute)) {
    return InvalidArgumentError("unknown recompute mode '" + c.recompute + "' (none, unit)");
  }
  return c;
}

}  // namespace internal

StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const model::ModelConfig& model_config,
                                                 const StrategyConfig& config,
                                                 const OptimizerConfig& optimizer,
                                                 dist::Rendezvous* rendezvous) {
  int world = rendezvous == nullptr ? 1 : rendezvous->config().world_size;
  if (world > 1 && rendezvous == nullptr)
    return InvalidArgumentError("a multi-rank strategy needs a rendezvous");
  ORRERY_ASSIGN_OR_RETURN(StrategyConfig c, internal::ResolveStrategyConfig(config, optimizer));
  const contract::TemplateTraits* traits = contract::FindTemplate(c.name);
  switch (traits->axis) {
    case contract::WorldAxis::kNone: {
      if (world != 1) {
        return InvalidArgumentError("template " + c.name + " runs on one rank, not " +
                                    std::to_string(world));
      }
      ORRERY_ASSIGN_OR_RETURN(model::Model m, internal::BuildOn(model_config, config.device));
      return std::unique_ptr<Strategy>(std::make_unique<internal::SingleStrategy>(
          std::move(m), optimizer, config.device, model::TiedParameters(model_config),
          config.precision, c.recompute == "unit"));
    }
    case contract::WorldAxis::kData: c.layout = {world, 1, 1}; break;
    case contract::WorldAxis::kTensor: c.layout = {1, world, 1}; break;
    case contract::WorldAxis::kPipeline: c.layout = {1, 1, world}; break;
    case contract::WorldAxis::kLayout:
      if (c.layout.world_size() != world) {
        return InvalidArgumentError("layout " + dist::LayoutToString(c.layout) + " needs " +
                                    std::to_string(c.layout.world_size()) +
                                    " ranks, the world has " + std::to_string(world));
      }
      break;
  }
  if (traits->memory == contract::MemoryModel::kShardedFlat)
    return internal::MakeFsdp(model_config, c, optimizer, rendezvous);
  if (traits->memory == contract::MemoryModel::kSpilled)
    return internal::MakeSpill(model_config, c, optimizer, rendezvous);
  // ddp, tensor, pipeline and hybrid are one strategy over the dp × tp × pp layout.
  return internal::MakeHybrid(model_config, c, optimizer, rendezvous);
}

}  // namespace orrery::parallel
