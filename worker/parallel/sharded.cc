// The two templates that keep only part of the model's parameters alive at a
// time: fsdp (parameters sharded across data-parallel ranks, gathered per layer)
// and spill (Hydra: parameters in host memory, brought to the device per shard).
// Both run the model as a chain of units, each resident twice per step (once
// for its forward, once for its backward), in one of two ways
// (StrategyConfig::recompute):
//   unit  a forward pass without autograd that keeps only each unit's input
//         (the activation checkpoint at the unit boundary), then, from the
//         last unit back, each unit's forward again with autograd and its
//         backward; Hydra's and ZeRO-Infinity's way, least memory;
//   none  each unit's forward runs once with autograd and its activations
//         are kept; its parameters' memory is freed after the forward while
//         autograd's saved views still refer to it, and refilled (gathered or
//         copied in again) before its backward, as PyTorch FSDP does with its
//         flat parameter's storage.
// Either way the computed losses and gradients equal the plain loop's.
// Models are built on the host; fsdp's shards, gathers and gradient buffers live
// on the configured device, spill's masters on the host (see below).
#include <chrono>
#include <functional>
#include <map>

#include "worker/model/pretrained.h"
#include "worker/parallel/internal.h"
#include "worker/parallel/memory_accountant.h"
#include "worker/parallel/shard_copier.h"
#include "worker/parallel/shard_device.h"
#include "worker/parallel/shard_group.h"

namespace orrery::parallel::internal {
namespace {

struct Unit {
  std::vector<std::shared_ptr<model::Layer>> layers;
  model::NamedTensors params;  // the layers' parameter variables
  int64_t numel = 0;
};

// Where a unit's parameters come from and where its gradients go.
class Residency {
 public:
  virtual ~Residency() = default;
  // Visit `visit` of the step's visit order (units 0..U-1, then U-2..0) begins:
  // the unit's parameters must be bound to its variables on return.
  virtual Status Acquire(size_t visit, size_t unit, bool backward) = 0;
  // The unit's forward (or backward) is done; after a backward its variables
  // hold gradients to consume. Must unbind the parameters.
  virtual Status Release(size_t unit, bool backward) = 0;
};

// Shapes survive unbinding: set_data() to an empty tensor would lose them.
struct Shapes {
  std::vector<std::vector<std::vector<int64_t>>> by_unit;
};

void BindShaped(Unit& u, const at::Tensor& flat, const std::vector<std::vector<int64_t>>& shapes) {
  int64_t off = 0;
  for (size_t i = 0; i < u.params.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    u.params[i].second.set_data(flat.narrow(0, off, n).view(shapes[i]));
    off += n;
  }
}

// Leaves each variable an empty tensor on `device` (where it is bound next).
void Unbind(Unit& u, c10::Device device) {
  for (auto& [name, p] : u.params) {
    p.mutable_grad().reset();
    p.set_data(at::empty({0}, p.options().device(device).requires_grad(false)));
  }
}

// Flattens the unit's gradients (zeros where a parameter got none) into `out`.
void FlattenGrads(const Unit& u, const std::vector<std::vector<int64_t>>& shapes, at::Tensor& out) {
  int64_t off = 0;
  for (size_t i = 0; i < u.params.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    const at::Tensor& g = u.params[i].second.grad();
    if (g.defined()) {
      out.narrow(0, off, n).copy_(g.reshape({-1}));
    } else {
      out.narrow(0, off, n).zero_();
    }
    off += n;
  }
}

// Frees the memory of `t`'s storage while tensors that view it (autograd's
// saved parameters) stay valid objects; AdoptStorage fills it again.
void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

// Gives `t`'s (freed) storage the values of `fresh`, shaped like `t`, by
// taking over fresh's memory when fresh owns exactly that much, else by
// copying; every view of `t` then reads the new values.
void AdoptStorage(const at::Tensor& t, const at::Tensor& fresh) {
  c10::StorageImpl* dst = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  c10::StorageImpl* src = fresh.storage().unsafeGetStorageImpl();
  if (fresh.storage_offset() == 0 && fresh.is_contiguous() && src->nbytes() == bytes &&
      fresh.device() == t.device() && fresh.dtype() == t.dtype() &&
      fresh.storage().use_count() == 1) {
    dst->set_data_ptr_noswap(src->set_data_ptr(at::DataPtr(nullptr, fresh.device())));
    src->set_nbytes(0);
  } else {
    dst->set_data_ptr_noswap(dst->allocator()->allocate(bytes));
    dst->set_nbytes(bytes);
    at::Tensor(t).copy_(fresh.view(t.sizes()));
    return;
  }
  dst->set_nbytes(bytes);
}

at::Tensor Checkpointed(const at::Tensor& x) {
  at::Tensor d = x.detach();
  if (d.is_floating_point()) d.requires_grad_(true);
  return d;
}

at::Tensor RunUnit(Unit& u, at::Tensor x) {
  for (auto& l : u.layers) x = l->Forward(x);
  return x;
}

// Forward without autograd keeping unit inputs, then recomputing backward.
StatusOr<double> RunRecomputed(std::vector<Unit>& units, const model::Batch& batch, Residency& res,
                               const std::string& precision, c10::Device device) {
  size_t n = units.size();
  std::vector<at::Tensor> boundary(n);
  boundary[0] = batch.inputs;
  size_t visit = 0;
  for (size_t u = 0; u + 1 < n; ++u) {
    ORRERY_RETURN_IF_ERROR(res.Acquire(visit++, u, false));
    {
      torch::NoGradGuard no_grad;
      AutocastGuard autocast(precision, device);
      boundary[u + 1] = RunUnit(units[u], boundary[u]);
    }
    ORRERY_RETURN_IF_ERROR(res.Release(u, false));
  }
  double loss_value = 0.0;
  at::Tensor grad;
  for (size_t u = n; u-- > 0;) {
    ORRERY_RETURN_IF_ERROR(res.Acquire(visit++, u, true));
    at::Tensor x = Checkpointed(boundary[u]);
    at::Tensor y;
    {
      AutocastGuard autocast(precision, device);
      y = RunUnit(units[u], x);
      if (u + 1 == n) y = model::Loss(y, batch.targets);
    }
    if (u + 1 == n) {
      at::Tensor loss = y;
      loss_value = loss.item<double>();
      loss.backward();
    } else if (y.requires_grad()) {  // the embedding, when it is frozen, needs none
      y.backward(grad);
    }
    grad = x.requires_grad() ? x.grad() : at::Tensor();
    boundary[u] = at::Tensor();
    ORRERY_RETURN_IF_ERROR(res.Release(u, true));
  }
  return loss_value;
}

// Forward with autograd keeping every unit's activations (no recomputation):
// each unit runs once, on a detached copy of its input, so the backward goes
// unit by unit and each unit's parameters need only be back for its own. The
// visits are those of RunRecomputed: units 0..U-1 forward (the last one with
// its backward), then U-2..0.
StatusOr<double> RunKept(std::vector<Unit>& units, const model::Batch& batch, Residency& res,
                         const std::string& precision, c10::Device device) {
  const size_t n = units.size();
  std::vector<at::Tensor> inputs(n), outputs(n);
  at::Tensor x = batch.inputs;
  size_t visit = 0;
  for (size_t u = 0; u < n; ++u) {
    const bool last = u + 1 == n;
    ORRERY_RETURN_IF_ERROR(res.Acquire(visit++, u, last));
    inputs[u] = Checkpointed(x);
    {
      AutocastGuard autocast(precision, device);
      outputs[u] = RunUnit(units[u], inputs[u]);
      if (last) outputs[u] = model::Loss(outputs[u], batch.targets);
    }
    x = outputs[u];
    if (!last) ORRERY_RETURN_IF_ERROR(res.Release(u, false));
  }
  x = at::Tensor();
  double loss_value = 0.0;
  at::Tensor grad;
  for (size_t u = n; u-- > 0;) {
    if (u + 1 == n) {
      loss_value = outputs[u].item<double>();
      outputs[u].backward();
    } else {
      ORRERY_RETURN_IF_ERROR(res.Acquire(visit++, u, true));
      // The embedding, when it is frozen, needs no backward.
      if (outputs[u].requires_grad()) outputs[u].backward(grad);
    }
    grad = inputs[u].requires_grad() ? inputs[u].grad() : at::Tensor();
    inputs[u] = at::Tensor();
    outputs[u] = at::Tensor();
    ORRERY_RETURN_IF_ERROR(res.Release(u, true));
  }
  return loss_value;
}

StatusOr<double> RunUnits(bool recompute, std::vector<Unit>& units, const model::Batch& batch,
                          Residency& res, const std::string& precision, c10::Device device) {
  return recompute ? RunRecomputed(units, batch, res, precision, device)
                   : RunKept(units, batch, res, precision, device);
}

// Makes each tied pair's gradients their sum where units hold gradients flat:
// grads[u] is this rank's range [begin(u), begin(u) + grads[u].numel()) of
// unit u's flat gradient (fsdp: its shard; spill: the whole unit). The pair's
// elements may lie on different ranks (fsdp), so the sum is gathered into one
// buffer all-reduced over `group` (each element has exactly one owner), or
// summed locally without a group.
Status SumTiedFlat(const std::vector<std::pair<std::string, std::string>>& tied,
                   const std::vector<Unit>& units, const Shapes& shapes,
                   std::vector<at::Tensor>& grads, const std::function<int64_t(size_t)>& begin,
                   dist::Communicator* group) {
  struct Piece {
    size_t unit;
    int64_t lo, hi;  // within the parameter
    int64_t at;      // within grads[unit]
  };
  torch::NoGradGuard no_grad;
  for (const auto& [a, b] : tied) {
    std::vector<Piece> pieces;
    int64_t numel = -1;
    for (size_t u = 0; u < units.size(); ++u) {
      int64_t off = 0;
      for (size_t i = 0; i < units[u].params.size(); ++i) {
        const int64_t n = checkpoint::Numel(shapes.by_unit[u][i]);
        const std::string& name = units[u].params[i].first;
        if (name == a || name == b) {
          numel = n;
          const int64_t first = begin(u), last = first + grads[u].numel();
          const int64_t lo = std::max(first, off), hi = std::min(last, off + n);
          if (lo < hi) pieces.push_back({u, lo - off, hi - off, lo - first});
        }
        off += n;
      }
    }
    if (numel < 0) return InternalError("tied parameter " + a + " is not in the model");
    at::Tensor sum = at::zeros({numel}, grads.front().options());
    for (const Piece& p : pieces)
      sum.narrow(0, p.lo, p.hi - p.lo).add_(grads[p.unit].narrow(0, p.at, p.hi - p.lo));
    if (group != nullptr) {
      ORRERY_RETURN_IF_ERROR(group->AllReduce(sum, dist::ReduceOp::kSum)
                                 .WithContext("summing the gradients of " + a + " and " + b));
    }
    for (const Piece& p : pieces)
      grads[p.unit].narrow(0, p.at, p.hi - p.lo).copy_(sum.narrow(0, p.lo, p.hi - p.lo));
  }
  return OkStatus();
}

std::vector<int> AllRanks(int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(i);
  return r;
}

// ---------------------------------------------------------------------------
// fsdp (Zhao et al. 2023, "PyTorch FSDP"; ZeRO stage 3 of Rajbhandari et al.
// 2020): each layer is one unit whose flat parameter is padded to a multiple of
// the data-parallel degree and split evenly; the optimizer sees only the shard.
class FsdpStrategy final : public Strategy, private Residency {
 public:
  static StatusOr<std::unique_ptr<Strategy>> Create(const model::ModelConfig& mc,
                                                    const StrategyConfig& config,
                                                    const OptimizerConfig& opt,
                                                    dist::Rendezvous* rdv) {
    auto s = std::unique_ptr<FsdpStrategy>(new FsdpStrategy());
    ORRERY_RETURN_IF_ERROR(s->Init(mc, config, opt, rdv));
    return std::unique_ptr<Strategy>(std::move(s));
  }

  StatusOr<double> Step(const model::Batch& global_batch) override {
    try {
      ORRERY_ASSIGN_OR_RETURN(model::Batch rows,
                              model::SliceBatch(global_batch, dp_rank_, dp_size_));
      model::Batch local = model::BatchOn(rows, device_);
      last_batch_ = local;
      const auto start = std::chrono::steady_clock::now();
      wait_s_ = 0;
      in_step_ = true;
      StatusOr<double> run = RunUnits(recompute_, units_, local, *this, precision_, device_);
      in_step_ = false;
      // Every reduce-scatter still in flight (and, after an error, a prefetch).
      Status drained = DrainPending();
      if (!run.ok()) return run.status();
      ORRERY_RETURN_IF_ERROR(drained);
      const double loss = *run;
      ORRERY_RETURN_IF_ERROR(SumTiedFlat(
          tied_, units_, shapes_, shard_grads_,
          [&](size_t u) { return dp_rank_ * (padded_[u] / dp_size_); }, dp_.get()));
      optimizer_->Step(shard_grads_);
      at::Tensor l = at::full({1}, loss, Options().dtype(at::kDouble));
      if (dp_) ORRERY_RETURN_IF_ERROR(dp_->AllReduce(l, dist::ReduceOp::kAvg));
      info_.wait_fraction = wait_s_ / std::max(SecondsSince(start), 1e-9);
      return l.item<double>();
    } catch (const std::exception& e) {
      in_step_ = false;
      (void)DrainPending();
      return StatusFromException(e, "fsdp step");
    }
  }

  // Unit by unit, each gathered for its forward and dropped; every replica
  // computes every row.
  StatusOr<at::Tensor> Forward(const at::Tensor& inputs) override {
    try {
      torch::NoGradGuard no_grad;
      at::Tensor x = inputs.to(device_);
      for (size_t u = 0; u < units_.size(); ++u) {
        ORRERY_RETURN_IF_ERROR(Acquire(u, u, false));
        {
          AutocastGuard autocast(precision_, device_);
          x = RunUnit(units_[u], x);
        }
        ORRERY_RETURN_IF_ERROR(Release(u, false));
      }
      return x.to(at::kFloat).to(at::kCPU).contiguous();
    } catch (const std::exception& e) {
      return StatusFromException(e, "fsdp forward");
    }
  }

  void SetLearningRate(double lr) override { optimizer_->SetLearningRate(lr); }

  StatusOr<model::NamedTensors> GatherFullParameters() override {
    try {
      model::NamedTensors out;
      for (size_t u = 0; u < units_.size(); ++u) {
        ORRERY_ASSIGN_OR_RETURN(at::Tensor full, Gather(u));
        int64_t off = 0;
        for (size_t i = 0; i < units_[u].params.size(); ++i) {
          const auto& shape = shapes_.by_unit[u][i];
          int64_t n = 1;
          for (int64_t d : shape) n *= d;
          out.emplace_back(units_[u].params[i].first, full.narrow(0, off, n).view(shape).clone());
          off += n;
        }
      }
      return OnHost(std::move(out));
    } catch (const std::exception& e) {
      return StatusFromException(e, "gathering fsdp parameters");
    }
  }

  Status LoadFullParameters(const model::NamedTensors& full) override {
    std::map<std::string, at::Tensor> by_name(full.begin(), full.end());
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < units_.size(); ++u) {
      at::Tensor flat = at::zeros({padded_[u]});
      int64_t off = 0;
      for (size_t i = 0; i < units_[u].params.size(); ++i) {
        const std::string& name = units_[u].params[i].first;
        auto it = by_name.find(name);
        if (it == by_name.end())
          return NotFoundError("parameter " + name + " missing from the loaded set");
        if (it->second.sizes().vec() != shapes_.by_unit[u][i])
          return InvalidArgumentError("parameter " + name + " has the wrong shape");
        flat.narrow(0, off, it->second.numel()).copy_(it->second.reshape({-1}));
        off += it->second.numel();
      }
      int64_t each = padded_[u] / dp_size_;
      shards_[u].copy_(flat.narrow(0, dp_rank_ * each, each));
    }
    optimizer_->Reset();
    return OkStatus();
  }

  StatusOr<model::NamedTensors> GatherFullOptimizerState() override {
    return GatherOptimizerState(*this, *optimizer_);
  }
  Status LoadFullState(const model::NamedTensors& params,
                       const model::NamedTensors& state) override {
    return internal::LoadFullState(*this, *optimizer_, params, state);
  }

  // The rank's flat shard of each unit, cut at its parameters' edges: each
  // piece is a flat range of one parameter (padding belongs to none).
  StatusOr<LocalState> State() override {
    LocalState state = optimizer_->View();
    for (size_t u = 0; u < units_.size(); ++u) {
      const int64_t each = padded_[u] / dp_size_;
      const int64_t begin = dp_rank_ * each, end = begin + each;
      int64_t off = 0;
      for (size_t i = 0; i < units_[u].params.size(); ++i) {
        const auto& shape = shapes_.by_unit[u][i];
        const int64_t n = checkpoint::Numel(shape);
        const int64_t lo = std::max(begin, off), hi = std::min(end, off + n);
        if (lo < hi) {
          StateSegment seg;
          seg.name = units_[u].params[i].first;
          seg.global_shape = shape;
          seg.region = checkpoint::FullRegion(shape);
          seg.region.flat_begin = lo - off;
          seg.region.flat_end = hi - off;
          seg.param = u;
          seg.offset = lo - begin;
          state.segments.push_back(std::move(seg));
        }
        off += n;
      }
    }
    optimizer_->SetSlotOffsets(state.segments);
    return state;
  }
  Status StateRestored(int64_t optimizer_steps) override {
    optimizer_->set_steps(optimizer_steps);
    return OkStatus();
  }

  StrategyInfo Info() const override { return info_; }

  std::vector<PlacedTensor> Placement() const override {
    std::vector<PlacedTensor> out;
    std::vector<std::string> names;
    for (size_t u = 0; u < shards_.size(); ++u) {
      names.push_back("unit" + std::to_string(u));
      out.push_back({"param/shard/" + names.back(), shards_[u].device(), false});
      out.push_back({"grad/shard/" + names.back(), shard_grads_[u].device(), false});
    }
    optimizer_->AppendPlacement(names, false, out);
    // The unbound variables autograd sees (bound to gathered buffers in a step).
    for (const auto& u : units_) {
      for (const auto& [name, p] : u.params) out.push_back({"param/" + name, p.device(), false});
    }
    AppendBatchPlacement(last_batch_, out);
    return out;
  }

 private:
  FsdpStrategy() = default;

  at::TensorOptions Options() const { return at::TensorOptions().device(device_); }

  Status Init(const model::ModelConfig& mc, const StrategyConfig& config,
              const OptimizerConfig& opt, dist::Rendezvous* rdv) {
    device_ = config.device;
    dp_size_ = config.layout.dp;
    dp_rank_ = rdv == nullptr ? 0 : rdv->config().rank;
    tied_ = model::TiedParameters(mc);
    precision_ = config.precision;
    recompute_ = config.recompute == "unit";
    prefetch_ = config.fsdp_prefetch;
    info_.name = "fsdp";
    info_.layout = config.layout;
    info_.recompute = config.recompute;
    if (dp_size_ > 1) {
      ORRERY_ASSIGN_OR_RETURN(dp_, rdv->NewGroup("fsdp", AllRanks(dp_size_)));
    }
    int64_t largest = 0, shard_bytes = 0;
    std::vector<at::Tensor> masks;  // per unit shard: which elements train
    // A pre-trained model's layers are built from the seed for their shapes;
    // each rank then reads only its shard's elements from the files.
    std::unique_ptr<model::PretrainedWeights> pretrained;
    model::ModelConfig built = mc;
    if (!mc.pretrained.empty()) {
      ORRERY_ASSIGN_OR_RETURN(pretrained, model::PretrainedWeights::Open(mc.pretrained, mc.gpt));
      built.pretrained.clear();
    }
    // A layer at a time: each is flattened, this rank keeps its shard, and the
    // layer's full parameters are freed before the next is built.
    model_.kind = mc.kind;
    model_.supports_surgery = mc.kind != "torchscript";
    ORRERY_RETURN_IF_ERROR(
        model::ForEachLayer(built, [&](std::shared_ptr<model::Layer> layer) -> Status {
          model_.layers.push_back(layer);
          Unit u;
          u.layers = {layer};
          u.params = layer->NamedParameters();
          std::vector<std::vector<int64_t>> shapes;
          std::vector<at::Tensor> pieces;
          for (auto& [name, p] : u.params) {
            shapes.push_back(p.sizes().vec());
            pieces.push_back(p.detach().reshape({-1}));
            u.numel += p.numel();
          }
          int64_t padded = (u.numel + dp_size_ - 1) / dp_size_ * dp_size_;
          at::Tensor flat = at::zeros({padded});
          if (u.numel > 0) flat.narrow(0, 0, u.numel).copy_(at::cat(pieces));
          int64_t each = padded / dp_size_;
          if (pretrained != nullptr) {
            const int64_t begin = dp_rank_ * each, end = begin + each;
            int64_t off = 0;
            for (const auto& [name, p] : u.params) {
              const int64_t n = p.numel(), lo = std::max(begin, off), hi = std::min(end, off + n);
              // LoRA adapters are not in the files: they keep their seeded values.
              if (lo < hi && name.find(".lora_") == std::string::npos) {
                ORRERY_ASSIGN_OR_RETURN(at::Tensor part,
                                        pretrained->ReadFlat(name, lo - off, hi - off));
                flat.narrow(0, lo, hi - lo).copy_(part);
              }
              off += n;
            }
          }
          shards_.push_back(flat.narrow(0, dp_rank_ * each, each)
                                .to(device_, at::kFloat, false,
                                    /*copy=*/true));
          shard_grads_.push_back(at::zeros({each}, Options()));
          masks.push_back(TrainableMask(u.params, dp_rank_ * each, each, device_));
          padded_.push_back(padded);
          largest = std::max(largest, padded * 4);
          shard_bytes += each * 4 * 2;
          Unbind(u, device_);
          shapes_.by_unit.push_back(std::move(shapes));
          units_.push_back(std::move(u));
          return OkStatus();
        }));
    // One gathered unit, its gradients and the gradient buffer, plus the shards
    // (and with prefetch the next unit's gather).
    info_.peak_device_parameter_bytes = (prefetch_ ? 4 : 3) * largest + shard_bytes;
    const size_t n = units_.size();
    full_.resize(n);
    for (size_t u = 0; u < n; ++u) visits_.push_back(u);
    for (size_t u = n - 1; u-- > 0;) visits_.push_back(u);
    optimizer_ = std::make_unique<Optimizer>(opt, shards_, masks);
    return OkStatus();
  }

  StatusOr<at::Tensor> Gather(size_t u) {
    at::Tensor full = at::empty({padded_[u]}, Options());
    if (dp_) {
      WaitTimer wait(wait_s_);
      ORRERY_RETURN_IF_ERROR(dp_->AllGather(shards_[u], full));
    } else {
      full.copy_(shards_[u]);
    }
    return full;
  }

  // Unit u gathered: the prefetch started for it, or a gather now.
  StatusOr<at::Tensor> Gathered(size_t u) {
    if (gather_ != nullptr && gather_unit_ != u) {
      // Not the unit expected (a step cut short): finish it before its
      // buffer goes.
      WaitTimer wait(wait_s_);
      (void)gather_->Wait();
      gather_.reset();
      gather_buffer_ = at::Tensor();
    }
    if (gather_ != nullptr) {
      Status done;
      {
        WaitTimer wait(wait_s_);
        done = gather_->Wait();
      }
      gather_.reset();
      at::Tensor full = std::move(gather_buffer_);
      ORRERY_RETURN_IF_ERROR(done.WithContext("gathering fsdp unit " + std::to_string(u)));
      return full;
    }
    return Gather(u);
  }

  Status WaitReduceScatters() {
    Status first = OkStatus();
    WaitTimer wait(wait_s_);
    for (auto& op : reduce_scatters_) {
      Status s = op->Wait();
      if (first.ok() && !s.ok()) first = s.WithContext("reduce-scattering fsdp gradients");
    }
    reduce_scatters_.clear();
    grad_buffers_.clear();
    return first;
  }

  // Waits for what is in flight: gradient reduce-scatters and a prefetch.
  Status DrainPending() {
    Status first = WaitReduceScatters();
    WaitTimer wait(wait_s_);
    if (gather_ != nullptr) {
      Status s = gather_->Wait();
      if (first.ok()) first = s;
    }
    gather_.reset();
    gather_buffer_ = at::Tensor();
    return first;
  }

  Status Acquire(size_t visit, size_t u, bool) override {
    ORRERY_ASSIGN_OR_RETURN(at::Tensor full, Gathered(u));
    // The next visit's gather runs while this unit computes (PyTorch FSDP's
    // forward and backward prefetch; the order is the step's fixed visits).
    if (in_step_ && prefetch_ && dp_ && visit + 1 < visits_.size()) {
      gather_unit_ = visits_[visit + 1];
      gather_buffer_ = at::empty({padded_[gather_unit_]}, Options());
      gather_ = dp_->AllGatherAsync(shards_[gather_unit_], gather_buffer_);
    }
    if (full_[u].defined()) {
      // Kept activations still view this unit's freed parameters: refill them.
      AdoptStorage(full_[u], full);
    } else {
      full_[u] = full;
      BindShaped(units_[u], full, shapes_.by_unit[u]);
    }
    return OkStatus();
  }

  Status Release(size_t u, bool backward) override {
    if (!backward && in_step_ && !recompute_) {
      // Autograd keeps views of the parameters for the backward; only the
      // memory goes (Acquire refills it).
      FreeStorage(full_[u]);
      return OkStatus();
    }
    if (backward) {
      at::Tensor flat = at::zeros({padded_[u]}, Options());
      FlattenGrads(units_[u], shapes_.by_unit[u], flat);
      if (dp_) {
        // The previous unit's reduce-scatter ran during this backward; this
        // one runs during the next (one in flight bounds the memory), and
        // the last is drained before the optimizer reads the gradients.
        ORRERY_RETURN_IF_ERROR(WaitReduceScatters());
        reduce_scatters_.push_back(
            dp_->ReduceScatterAsync(flat, shard_grads_[u], dist::ReduceOp::kAvg));
        grad_buffers_.push_back(flat);
        if (!prefetch_) ORRERY_RETURN_IF_ERROR(WaitReduceScatters());
      } else {
        shard_grads_[u].copy_(flat);
      }
    }
    Unbind(units_[u], device_);
    full_[u] = at::Tensor();
    return OkStatus();
  }

  c10::Device device_{c10::kCPU};
  model::Batch last_batch_;
  int dp_size_ = 1, dp_rank_ = 0;
  std::unique_ptr<dist::Communicator> dp_;
  model::Model model_;
  std::vector<Unit> units_;
  Shapes shapes_;
  std::vector<int64_t> padded_;
  std::vector<at::Tensor> shards_, shard_grads_;
  std::vector<std::pair<std::string, std::string>> tied_;
  std::string precision_ = "fp32";
  bool recompute_ = false, prefetch_ = true;
  bool in_step_ = false;  // Acquire and Release serve Step (else Forward)
  // Each unit's gathered parameters while bound (kept mode: across its
  // forward and backward, the storage freed in between).
  std::vector<at::Tensor> full_;
  std::vector<size_t> visits_;               // the step's units in visit order
  std::unique_ptr<dist::PendingOp> gather_;  // the prefetch in flight
  size_t gather_unit_ = 0;
  at::Tensor gather_buffer_;
  std::vector<std::unique_ptr<dist::PendingOp>> reduce_scatters_;
  std::vector<at::Tensor> grad_buffers_;  // their inputs, alive until they finish
  double wait_s_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  StrategyInfo info_;
};

// ---------------------------------------------------------------------------
// spill (Nagrecha & Kumar, "Hydra", 2022): the master copy of every parameter
// lives in host memory; the model is cut into shards whose parameters fit the
// device budget; a shard is copied in before its forward and again before its
// backward, its gradients copied out to the host after its backward (all-reduced
// over data-parallel replicas first, on the device). With double buffering, the
// copy of the next shard in visit order runs while the current one computes
// (ShardCopier: a side CUDA stream on a GPU, another thread on CPU). Budget per
// shard: current parameters + current gradients + next parameters must fit, so a
// shard may hold a third of the budget (half without double buffering). The
// optimizer steps the host masters with the host gradient sums, as Hydra does.
//
// Every device buffer is charged to a MemoryAccountant before it exists. On CPU
// the "device" is a separate pool of host tensors; on CUDA the buffers are real
// device memory and the host masters are pinned.
//
// In an interleaved group (interleaved.h, shard_group.h) the device side
// (ShardDevice: budget, copier, prefetch) is the group's: each visit first
// waits for its slot in the group's schedule, and prefetches the shard of the
// schedule's next slot, which may be another member's.
class SpillStrategy final : public Strategy, private Residency {
 public:
  // `group` null: alone, with a device of its own.
  static StatusOr<std::unique_ptr<Strategy>> Create(const model::ModelConfig& mc,
                                                    const StrategyConfig& config,
                                                    const OptimizerConfig& opt,
                                                    dist::Rendezvous* rdv,
                                                    std::shared_ptr<ShardGroup> group = nullptr,
                                                    const std::string& task = "") {
    auto s = std::unique_ptr<SpillStrategy>(new SpillStrategy());
    s->task_ = task;
    ORRERY_RETURN_IF_ERROR(s->Init(mc, config, opt, rdv, std::move(group)));
    if (s->group_) s->member_ = s->group_->Join(task, s.get(), s->host_, s->visits_);
    return std::unique_ptr<Strategy>(std::move(s));
  }

  ~SpillStrategy() override {
    if (group_ && member_ >= 0) group_->Leave(member_);
  }

  StatusOr<double> Step(const model::Batch& global_batch) override {
    try {
      StatusOr<model::Batch> rows = model::SliceBatch(global_batch, dp_rank_, dp_size_);
      if (!rows.ok()) {
        EndTurn();  // in a group, this step's slots go unused
        return rows.status();
      }
      model::Batch local = model::BatchOn(*rows, device_);
      last_batch_ = local;
      shard_devices_.clear();
      const auto start = std::chrono::steady_clock::now();
      wait_s_ = 0;
      in_step_ = true;
      StatusOr<double> loss = RunUnits(recompute_, units_, local, *this, precision_, device_);
      in_step_ = false;
      // Alone, only after an error: a successful step's last visit prefetches
      // nothing. In a group it prefetched the next slot's shard.
      if (!group_ || !loss.ok()) DropPrefetch();
      if (!loss.ok()) {
        ReleaseAfterError();
        EndTurn();
        return loss.status();
      }
      // In a group the optimizer steps within this step's last turn. Moved
      // after it (the device going on with another model meanwhile),
      // interleaving measured 0.77x one model after another on an H200, where
      // it had measured 1.10x (two runs, docs/DEVELOPING.md): likely each
      // model's optimizer threads contending with the other's turn for cores.
      ORRERY_RETURN_IF_ERROR(SumTiedFlat(
          tied_, units_, shapes_, host_grad_views_, [](size_t) { return int64_t{0}; }, nullptr));
      optimizer_->Step(host_grad_views_);
      at::Tensor l = at::full({1}, *loss, at::TensorOptions().dtype(at::kDouble).device(device_));
      if (dp_) ORRERY_RETURN_IF_ERROR(dp_->AllReduce(l, dist::ReduceOp::kAvg));
      info_.peak_device_parameter_bytes = dev_->accountant().peak();
      info_.wait_fraction = wait_s_ / std::max(SecondsSince(start), 1e-9);
      const double value = l.item<double>();
      EndTurn();
      return value;
    } catch (const std::exception& e) {
      in_step_ = false;
      DropPrefetch();
      ReleaseAfterError();
      EndTurn();
      return StatusFromException(e, "spill step");
    }
  }

  // The forward visits of a step (shards copied in with the same double
  // buffering), without gradients; every replica computes every row.
  StatusOr<at::Tensor> Forward(const at::Tensor& inputs) override {
    SoloTurn solo(*this);
    try {
      torch::NoGradGuard no_grad;
      shard_devices_.clear();
      at::Tensor x = inputs.to(device_);
      Status status = OkStatus();
      for (size_t u = 0; u < units_.size() && status.ok(); ++u) {
        status = Acquire(u, u, false);
        if (!status.ok()) break;
        {
          AutocastGuard autocast(precision_, device_);
          x = RunUnit(units_[u], x);
        }
        status = Release(u, false);
      }
      // The last forward visit prefetched the first backward shard.
      DropPrefetch();
      ORRERY_RETURN_IF_ERROR(status);
      return x.to(at::kFloat).to(at::kCPU).contiguous();
    } catch (const std::exception& e) {
      DropPrefetch();
      return StatusFromException(e, "spill forward");
    }
  }

  void SetLearningRate(double lr) override { optimizer_->SetLearningRate(lr); }

  StatusOr<model::NamedTensors> GatherFullParameters() override {
    model::NamedTensors out;
    for (size_t u = 0; u < units_.size(); ++u) {
      int64_t off = 0;
      for (size_t i = 0; i < units_[u].params.size(); ++i) {
        const auto& shape = shapes_.by_unit[u][i];
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        out.emplace_back(units_[u].params[i].first, host_[u].narrow(0, off, n).view(shape).clone());
        off += n;
      }
    }
    return out;
  }

  Status LoadFullParameters(const model::NamedTensors& full) override {
    std::map<std::string, at::Tensor> by_name(full.begin(), full.end());
    for (size_t u = 0; u < units_.size(); ++u) {
      int64_t off = 0;
      for (size_t i = 0; i < units_[u].params.size(); ++i) {
        const std::string& name = units_[u].params[i].first;
        auto it = by_name.find(name);
        if (it == by_name.end())
          return NotFoundError("parameter " + name + " missing from the loaded set");
        if (it->second.sizes().vec() != shapes_.by_unit[u][i])
          return InvalidArgumentError("parameter " + name + " has the wrong shape");
        host_[u].narrow(0, off, it->second.numel()).copy_(it->second.reshape({-1}));
        off += it->second.numel();
      }
    }
    optimizer_->Reset();
    return OkStatus();
  }

  StatusOr<model::NamedTensors> GatherFullOptimizerState() override {
    // Shows each slot through the host masters: no copy may read them.
    SoloTurn solo(*this);
    return GatherOptimizerState(*this, *optimizer_);
  }
  Status LoadFullState(const model::NamedTensors& params,
                       const model::NamedTensors& state) override {
    return internal::LoadFullState(*this, *optimizer_, params, state);
  }

  // The host masters, replicated over the data-parallel ranks: whole
  // parameters, written round robin by the replicas.
  StatusOr<LocalState> State() override {
    LocalState state = optimizer_->View();
    std::vector<WholeTensor> whole;
    for (size_t u = 0; u < units_.size(); ++u) {
      int64_t off = 0;
      for (size_t i = 0; i < units_[u].params.size(); ++i) {
        const auto& shape = shapes_.by_unit[u][i];
        whole.push_back({units_[u].params[i].first, shape, u, off});
        off += checkpoint::Numel(shape);
      }
    }
    state.segments = WholeSegments(whole, dp_size_, dp_rank_);
    optimizer_->SetSlotOffsets(state.segments);
    return state;
  }
  Status StateRestored(int64_t optimizer_steps) override {
    optimizer_->set_steps(optimizer_steps);
    return OkStatus();
  }

  StrategyInfo Info() const override { return info_; }

  std::vector<PlacedTensor> Placement() const override {
    std::vector<PlacedTensor> out;
    std::vector<std::string> names;
    for (size_t u = 0; u < units_.size(); ++u) {
      names.push_back("unit" + std::to_string(u));
      out.push_back({"param/host/" + names.back(), host_[u].device(), true});
      out.push_back({"grad/host/" + names.back(), host_grad_[u].device(), true});
    }
    optimizer_->AppendPlacement(names, true, out);
    out.insert(out.end(), shard_devices_.begin(), shard_devices_.end());
    AppendBatchPlacement(last_batch_, out);
    return out;
  }

 private:
  SpillStrategy() = default;

  // In a group: the device to itself (no copy in flight) for its scope.
  class SoloTurn {
   public:
    explicit SoloTurn(SpillStrategy& s) : s_(s) {
      if (!s_.group_) return;
      s_.group_->EnterSolo(s_.member_);
      s_.dev_->Drop();
    }
    ~SoloTurn() {
      if (s_.group_) s_.group_->ExitSolo(s_.member_);
    }
    SoloTurn(const SoloTurn&) = delete;
    SoloTurn& operator=(const SoloTurn&) = delete;

   private:
    SpillStrategy& s_;
  };

  // After a failed step: the shards it left resident (their parameters and
  // gradients) go back to the budget, which a group's other members share.
  void ReleaseAfterError() {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (!resident_[u].defined()) continue;
      Unbind(units_[u], device_);
      resident_[u] = at::Tensor();
    }
    dev_->accountant().Release(charged_);
    charged_ = 0;
  }

  // In a group: hands the device to the schedule's next slot.
  void EndTurn() {
    if (group_) group_->EndStep(member_);
  }

  Status Init(const model::ModelConfig& mc, const StrategyConfig& config,
              const OptimizerConfig& opt, dist::Rendezvous* rdv,
              std::shared_ptr<ShardGroup> group) {
    device_ = config.device;
    dp_size_ = config.layout.dp;
    dp_rank_ = rdv == nullptr ? 0 : rdv->config().rank;
    tied_ = model::TiedParameters(mc);
    precision_ = config.precision;
    double_buffer_ = config.spill_double_buffer;
    recompute_ = config.recompute == "unit";
    info_.recompute = config.recompute;
    info_.name = "spill";
    info_.layout = config.layout;
    info_.spill_budget_bytes = config.spill_budget_bytes;
    info_.spill_double_buffer = double_buffer_;
    group_ = std::move(group);
    if (group_) {
      dev_ = &group_->shard_device();
    } else {
      ORRERY_ASSIGN_OR_RETURN(auto copier, MakeShardCopier(device_, config.spill_link_bytes_per_s));
      own_device_ = std::make_unique<ShardDevice>(config.spill_budget_bytes, std::move(copier));
      dev_ = own_device_.get();
    }
    ORRERY_ASSIGN_OR_RETURN(model_, model::BuildModel(mc));
    if (dp_size_ > 1) {
      ORRERY_ASSIGN_OR_RETURN(dp_, rdv->NewGroup("spill", AllRanks(dp_size_)));
    }
    int64_t limit = config.spill_budget_bytes / (double_buffer_ ? 3 : 2);
    // Greedy contiguous shards under the per-shard limit.
    Unit cur;
    int64_t cur_bytes = 0;
    auto flush = [&]() {
      if (!cur.layers.empty()) units_.push_back(std::move(cur));
      cur = Unit();
      cur_bytes = 0;
    };
    for (auto& layer : model_.layers) {
      int64_t bytes = 0;
      for (auto& [name, p] : layer->NamedParameters()) bytes += Bytes(p);
      if (bytes > limit) {
        return ResourceExhaustedError(
            "layer " + layer->name() + " holds " + std::to_string(bytes) +
            " parameter bytes; with its gradients" +
            (double_buffer_ ? " and the prefetched next shard" : std::string()) +
            " it does not fit the " + std::to_string(config.spill_budget_bytes) +
            "-byte device budget");
      }
      if (cur_bytes + bytes > limit) flush();
      cur.layers.push_back(layer);
      for (auto& np : layer->NamedParameters()) cur.params.push_back(np);
      cur_bytes += bytes;
    }
    flush();
    std::vector<at::Tensor> host_views;
    std::vector<at::Tensor> masks;  // per unit: which elements train
    for (auto& u : units_) {
      std::vector<std::vector<int64_t>> shapes;
      std::vector<at::Tensor> pieces;
      for (auto& [name, p] : u.params) {
        shapes.push_back(p.sizes().vec());
        pieces.push_back(p.detach().reshape({-1}));
        u.numel += p.numel();
      }
      at::Tensor host = HostBuffer(u.numel, device_);
      if (u.numel > 0) host.copy_(at::cat(pieces));
      at::Tensor grad = HostBuffer(u.numel, device_);
      host_.push_back(host);
      host_grad_.push_back(grad);
      host_grad_views_.push_back(grad);
      host_views.push_back(host);
      masks.push_back(TrainableMask(u.params, 0, u.numel, host.device()));
      Unbind(u, device_);
      shapes_.by_unit.push_back(std::move(shapes));
    }
    resident_.resize(units_.size());
    size_t n = units_.size();
    for (size_t u = 0; u < n; ++u) visits_.push_back(u);
    for (size_t u = n - 1; u-- > 0;) visits_.push_back(u);
    info_.spill_shards = static_cast<int>(n);
    optimizer_ = std::make_unique<Optimizer>(opt, host_views, masks);
    return OkStatus();
  }

  // Waits out a prefetch nobody will use and returns its budget (in a group
  // only while this member holds the device).
  void DropPrefetch() {
    if (!group_ || group_->Holds(member_)) dev_->Drop();
  }

  std::string ShardName(size_t u, const char* what) const {
    std::string name = "shard " + std::to_string(u) + " " + what;
    return group_ ? "task " + task_ + " " + name : name;
  }

  Status Reserve(size_t u, const char* what) {
    return dev_->accountant().Reserve(Bytes(host_[u]), ShardName(u, what));
  }

  // The next shard to prefetch: the next visit's alone, the schedule's next
  // slot's in a group (outside a step, as alone: a forward's visits).
  Status Prefetch(size_t visit) {
    if (!double_buffer_) return OkStatus();
    if (group_ && in_step_) {
      std::optional<ShardGroup::Next> next = group_->NextShard();
      if (!next.has_value()) return OkStatus();
      return dev_->Prefetch(next->owner, next->unit, next->host,
                            "shard " + std::to_string(next->unit) + " parameters (prefetch)");
    }
    if (visit + 1 >= visits_.size()) return OkStatus();
    // The next shard's buffer is charged now, before its copy starts.
    const size_t u = visits_[visit + 1];
    return dev_->Prefetch(this, u, host_[u], ShardName(u, "parameters (prefetch)"));
  }

  Status Acquire(size_t visit, size_t u, bool backward) override {
    if (group_ && in_step_) ORRERY_RETURN_IF_ERROR(group_->Enter(member_, visit));
    double waited = 0;
    // While an interleaved group measures its first round, copies are timed
    // to their end (on CUDA they would otherwise cost the host nothing).
    const bool timed = group_ && in_step_ && !group_->prefetching();
    ORRERY_ASSIGN_OR_RETURN(
        at::Tensor device,
        dev_->Take(this, u, host_[u], ShardName(u, "parameters"), waited, timed));
    charged_ += Bytes(host_[u]);
    wait_s_ += waited;
    if (group_ && in_step_) group_->AddWait(waited);
    ORRERY_RETURN_IF_ERROR(Prefetch(visit));
    shard_devices_.push_back({"shard/" + std::to_string(u) + "/parameters", device.device()});
    if (resident_[u].defined()) {
      // Kept activations still view this shard's freed parameters: refill them.
      AdoptStorage(resident_[u], device);
    } else {
      resident_[u] = device;
      BindShaped(units_[u], device, shapes_.by_unit[u]);
    }
    if (backward) {
      // Autograd will allocate this shard's gradients on the device.
      ORRERY_RETURN_IF_ERROR(Reserve(u, "gradients"));
      charged_ += Bytes(host_[u]);
    }
    return OkStatus();
  }

  Status Release(size_t u, bool backward) override {
    if (!backward && in_step_ && !recompute_) {
      // Autograd keeps views of the parameters for the backward; the device
      // memory goes back to the budget (Acquire copies the shard in again).
      FreeStorage(resident_[u]);
      dev_->accountant().Release(Bytes(host_[u]));
      charged_ -= Bytes(host_[u]);
      return OkStatus();
    }
    if (backward) {
      // On CPU the host sum is written directly; on CUDA the gradients are
      // flattened and all-reduced on the device, then copied out (a blocking
      // copy: the optimizer reads them, and the shard's memory is freed next).
      at::Tensor flat = device_.is_cpu() ? host_grad_[u]
                                         : at::empty({host_grad_[u].numel()},
                                                     at::TensorOptions().device(device_));
      FlattenGrads(units_[u], shapes_.by_unit[u], flat);
      if (dp_) {
        WaitTimer wait(wait_s_);
        ORRERY_RETURN_IF_ERROR(dp_->AllReduce(flat, dist::ReduceOp::kAvg));
      }
      shard_devices_.push_back({"shard/" + std::to_string(u) + "/gradients", flat.device()});
      if (!device_.is_cpu()) host_grad_[u].copy_(flat);
    }
    Unbind(units_[u], device_);
    resident_[u] = at::Tensor();
    dev_->accountant().Release(Bytes(host_[u]) * (backward ? 2 : 1));
    charged_ -= Bytes(host_[u]) * (backward ? 2 : 1);
    return OkStatus();
  }

  c10::Device device_{c10::kCPU};
  int dp_size_ = 1, dp_rank_ = 0;
  bool double_buffer_ = true;
  bool recompute_ = true;
  bool in_step_ = false;  // Acquire and Release serve Step (else Forward)
  double wait_s_ = 0;     // this step's time waiting on copies and all-reduces
  std::unique_ptr<dist::Communicator> dp_;
  model::Model model_;
  std::vector<Unit> units_;
  Shapes shapes_;
  std::vector<at::Tensor> host_, host_grad_, host_grad_views_, resident_;
  std::vector<std::pair<std::string, std::string>> tied_;
  std::string precision_ = "fp32";
  std::vector<size_t> visits_;
  std::unique_ptr<ShardDevice> own_device_;  // alone
  std::shared_ptr<ShardGroup> group_;        // interleaved
  ShardDevice* dev_ = nullptr;               // one of the two
  int member_ = -1;
  std::string task_;
  int64_t charged_ = 0;  // this member's bytes charged to the budget now
  std::unique_ptr<Optimizer> optimizer_;
  model::Batch last_batch_;
  std::vector<PlacedTensor> shard_devices_;  // the last step's device buffers
  StrategyInfo info_;
};

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakeFsdp(const model::ModelConfig& mc,
                                             const StrategyConfig& config,
                                             const OptimizerConfig& opt, dist::Rendezvous* rdv) {
  return FsdpStrategy::Create(mc, config, opt, rdv);
}

StatusOr<std::unique_ptr<Strategy>> MakeSpill(const model::ModelConfig& mc,
                                              const StrategyConfig& config,
                                              const OptimizerConfig& opt, dist::Rendezvous* rdv) {
  return SpillStrategy::Create(mc, config, opt, rdv);
}

StatusOr<std::unique_ptr<Strategy>> MakeInterleavedSpill(const model::ModelConfig& mc,
                                                         const StrategyConfig& config,
                                                         const OptimizerConfig& opt,
                                                         std::shared_ptr<ShardGroup> group,
                                                         const std::string& task) {
  return SpillStrategy::Create(mc, config, opt, nullptr, std::move(group), task);
}

}  // namespace orrery::parallel::internal
