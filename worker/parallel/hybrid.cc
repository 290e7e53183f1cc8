// The ddp, tensor and pipeline templates, and any dp × tp × pp composition of
// them (see strategy.h). Each rank builds the whole model from the seed, keeps
// its pipeline stage's layers, and slices the blocks for its tensor-parallel
// rank; data-parallel replicas all-reduce gradients in buckets. The stage's
// layers, the buckets and the activations and gradients the stages exchange live
// on the configured device.
#include <algorithm>
#include <chrono>
#include <map>

#include "worker/contract/stages.h"
#include "worker/dist/device.h"
#include "worker/parallel/internal.h"

namespace orrery::parallel::internal {
namespace {

// Bucketed gradient all-reduce overlapped with backward (Li et al. 2020,
// "PyTorch Distributed", §3.2): a hook on every parameter copies its gradient
// into its bucket as autograd produces it; a full bucket starts its
// asynchronous all-reduce at once, while backward goes on with earlier layers.
// Buckets launch strictly in bucket order on every rank, because collectives
// are matched by order. Frozen parameters are in no bucket (LoRA all-reduces
// its adapters, not zeros for the whole base model). A tied pair held here
// (GPT-2's embedding and head) is all-reduced once: the folded member's
// gradient is added into the kept one's before its bucket goes, which is
// exact because the average is linear, and both then see the sum.
class DdpBuckets {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // folds: (kept, folded) indices into params.
  DdpBuckets(std::vector<at::Tensor> params, int64_t bucket_bytes, dist::Communicator* comm,
             const std::vector<std::pair<size_t, size_t>>& folds)
      : params_(std::move(params)), comm_(comm) {
    const size_t n = params_.size();
    fold_of_.assign(n, kNone);
    folded_into_.assign(n, kNone);
    for (auto [keep, fold] : folds) {
      fold_of_[keep] = fold;
      folded_into_[fold] = keep;
    }
    fold_grad_.resize(n);
    pending_.resize(n);
    fold_seen_.assign(n, false);
    // Backward produces gradients roughly in reverse registration order.
    Bucket current;
    int64_t bytes = 0;
    where_.assign(n, {kNone, kNone});
    for (size_t k = n; k-- > 0;) {
      const at::Tensor& p = params_[k];
      if (!p.requires_grad() || folded_into_[k] != kNone) continue;
      if (!current.members.empty() && bytes + Bytes(p) > bucket_bytes) {
        buckets_.push_back(std::move(current));
        current = Bucket();
        bytes = 0;
      }
      current.members.push_back(k);
      current.offsets.push_back(bytes / static_cast<int64_t>(p.element_size()));
      bytes += Bytes(p);
    }
    if (!current.members.empty()) buckets_.push_back(std::move(current));
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bucket = buckets_[b];
      int64_t numel = 0;
      for (size_t j = 0; j < bucket.members.size(); ++j) {
        where_[bucket.members[j]] = {b, j};
        numel += params_[bucket.members[j]].numel();
      }
      bucket.flat = at::zeros({numel}, params_[bucket.members[0]].options().requires_grad(false));
      bucket.filled.assign(bucket.members.size(), false);
    }
    for (size_t k = 0; k < n; ++k) {
      if (!params_[k].requires_grad()) continue;  // frozen: no gradient, no hook
      auto hook = folded_into_[k] != kNone
                      ? std::function<void(const at::Tensor&)>(
                            [this, k](const at::Tensor& g) { OnFoldedGrad(k, g); })
                      : std::function<void(const at::Tensor&)>(
                            [this, k](const at::Tensor& g) { OnGrad(k, g); });
      hooks_.emplace_back(k, params_[k].register_hook(hook));
    }
  }

  ~DdpBuckets() {
    for (auto [k, handle] : hooks_) params_[k].remove_hook(handle);
  }
  DdpBuckets(const DdpBuckets&) = delete;
  DdpBuckets& operator=(const DdpBuckets&) = delete;

  // Only the backward pass that completes a step's gradients syncs (earlier
  // pipeline micro-batches just accumulate).
  void Arm(bool on) {
    armed_ = on;
    if (!on) return;
    next_launch_ = 0;
    for (auto& b : buckets_) {
      b.ready = 0;
      b.filled.assign(b.members.size(), false);
      b.op.reset();
    }
    fold_seen_.assign(params_.size(), false);
    for (auto& t : fold_grad_) t = at::Tensor();
    for (auto& t : pending_) t = at::Tensor();
  }

  // Launches what backward did not reach (parameters without gradients count as
  // zero), waits for every bucket and hands each parameter its averaged
  // gradient, a view of its bucket (valid until the next step's backward).
  Status Finish() {
    armed_ = false;
    torch::NoGradGuard no_grad;
    for (auto& b : buckets_) {
      for (size_t j = 0; j < b.members.size(); ++j) {
        if (b.filled[j]) continue;
        const size_t k = b.members[j];
        const at::Tensor& p = params_[k];
        at::Tensor g = pending_[k].defined() ? pending_[k]
                       : p.grad().defined()  ? p.grad()
                                             : at::zeros_like(p);
        if (fold_of_[k] != kNone) g = g + FoldedGrad(fold_of_[k]);
        Fill(k, g, /*launch=*/false);
      }
    }
    LaunchReady();
    Status result;
    for (auto& b : buckets_) {
      Status s = b.op->Wait();
      if (!s.ok() && result.ok()) result = s;
    }
    if (!result.ok()) return result.WithContext("data-parallel gradient all-reduce");
    for (auto& b : buckets_) {
      for (size_t j = 0; j < b.members.size(); ++j) {
        const size_t k = b.members[j];
        at::Tensor& p = params_[k];
        p.mutable_grad() = Slice(b, j).view(p.sizes());
        if (fold_of_[k] != kNone) params_[fold_of_[k]].mutable_grad() = p.grad();
      }
    }
    return OkStatus();
  }

  int count() const { return static_cast<int>(buckets_.size()); }

  void AppendPlacement(std::vector<PlacedTensor>& out) const {
    for (size_t b = 0; b < buckets_.size(); ++b)
      out.push_back({"comm/bucket/" + std::to_string(b), buckets_[b].flat.device(), false});
  }

 private:
  struct Bucket {
    std::vector<size_t> members;
    std::vector<int64_t> offsets;
    std::vector<bool> filled;
    at::Tensor flat;
    int ready = 0;
    std::unique_ptr<dist::PendingOp> op;
  };

  at::Tensor Slice(Bucket& b, size_t j) {
    return b.flat.narrow(0, b.offsets[j], params_[b.members[j]].numel());
  }

  // The folded member's gradient of this step: from its hook, else what it
  // holds (zeros when it got none).
  at::Tensor FoldedGrad(size_t f) const {
    if (fold_seen_[f]) return fold_grad_[f];
    const at::Tensor& p = params_[f];
    return p.grad().defined() ? p.grad() : at::zeros_like(p);
  }

  void Fill(size_t k, const at::Tensor& g, bool launch) {
    auto [b, j] = where_[k];
    Bucket& bucket = buckets_[b];
    Slice(bucket, j).copy_(g.reshape({-1}));
    bucket.filled[j] = true;
    ++bucket.ready;
    if (launch && bucket.ready == static_cast<int>(bucket.members.size())) LaunchReady();
  }

  void OnGrad(size_t k, const at::Tensor& g) {
    if (!armed_) return;
    auto [b, j] = where_[k];
    if (buckets_[b].filled[j] || pending_[k].defined()) return;
    const at::Tensor& p = params_[k];
    torch::NoGradGuard no_grad;
    at::Tensor total = p.grad().defined() ? p.grad() + g : g;
    if (fold_of_[k] != kNone) {
      const size_t f = fold_of_[k];
      if (!fold_seen_[f]) {
        pending_[k] = total;  // completed when the folded member's gradient arrives
        return;
      }
      total = total + fold_grad_[f];
    }
    Fill(k, total, /*launch=*/true);
  }

  void OnFoldedGrad(size_t f, const at::Tensor& g) {
    if (!armed_ || fold_seen_[f]) return;
    const at::Tensor& p = params_[f];
    torch::NoGradGuard no_grad;
    fold_grad_[f] = p.grad().defined() ? p.grad() + g : g;
    fold_seen_[f] = true;
    const size_t k = folded_into_[f];
    if (pending_[k].defined()) {
      at::Tensor total = pending_[k] + fold_grad_[f];
      pending_[k] = at::Tensor();
      Fill(k, total, /*launch=*/true);
    }
  }

  void LaunchReady() {
    while (next_launch_ < buckets_.size() &&
           buckets_[next_launch_].ready ==
               static_cast<int>(buckets_[next_launch_].members.size())) {
      Bucket& b = buckets_[next_launch_++];
      b.op = comm_->AllReduceAsync(b.flat, dist::ReduceOp::kAvg);
    }
  }

  std::vector<at::Tensor> params_;
  dist::Communicator* comm_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;
  std::vector<std::pair<size_t, unsigned>> hooks_;
  std::vector<size_t> fold_of_, folded_into_;
  std::vector<at::Tensor> fold_grad_, pending_;
  std::vector<bool> fold_seen_;
  size_t next_launch_ = 0;
  bool armed_ = false;
};

struct FullParam {
  std::string name;
  std::vector<int64_t> shape;
  int stage = 0;
};

class HybridStrategy final : public Strategy {
 public:
  static StatusOr<std::unique_ptr<Strategy>> Create(const model::ModelConfig& mc,
                                                    const StrategyConfig& config,
                                                    const OptimizerConfig& opt,
                                                    dist::Rendezvous* rdv) {
    auto s = std::unique_ptr<HybridStrategy>(new HybridStrategy());
    ORRERY_RETURN_IF_ERROR(s->Init(mc, config, opt, rdv));
    return std::unique_ptr<Strategy>(std::move(s));
  }

  StatusOr<double> Step(const model::Batch& global_batch) override {
    try {
      return StepImpl(global_batch);
    } catch (const std::exception& e) {
      return StatusFromException(e, info_.name + " step");
    }
  }

  // Every replica computes every row; pipeline stages hand activations on (tags
  // above any step's) and the last stage broadcasts the outputs, shape first.
  StatusOr<at::Tensor> Forward(const at::Tensor& inputs) override {
    constexpr int kTag = 1 << 20;
    try {
      torch::NoGradGuard no_grad;
      auto long_header = [&] {
        return at::zeros({8}, at::TensorOptions().dtype(at::kLong).device(device_));
      };
      auto header_of = [&](const at::Tensor& t) {
        at::Tensor h = at::zeros({8}, at::kLong);
        h[0] = t.dim();
        for (int64_t d = 0; d < t.dim(); ++d) h[d + 1] = t.size(d);
        return h.to(device_);
      };
      auto empty_from = [&](at::Tensor header) {
        header = header.to(at::kCPU);
        const int64_t* h = header.data_ptr<int64_t>();
        return at::empty(std::vector<int64_t>(h + 1, h + 1 + h[0]),
                         at::TensorOptions().dtype(at::kFloat).device(device_));
      };
      at::Tensor x = inputs.to(device_);
      if (!first_stage_) {
        at::Tensor header = long_header();
        ORRERY_RETURN_IF_ERROR(pp_->Recv(header, coords_.pp - 1, kTag));
        x = empty_from(header);
        ORRERY_RETURN_IF_ERROR(pp_->Recv(x, coords_.pp - 1, kTag + 1));
      }
      at::Tensor y;
      {
        AutocastGuard autocast(precision_, device_);
        y = stage_.Forward(x);
      }
      y = y.to(at::kFloat).contiguous();
      if (layout_.pp == 1) return y.to(at::kCPU);
      if (!last_stage_) {
        ORRERY_RETURN_IF_ERROR(pp_->Send(header_of(y), coords_.pp + 1, kTag));
        ORRERY_RETURN_IF_ERROR(pp_->Send(y, coords_.pp + 1, kTag + 1));
      }
      const int root = layout_.pp - 1;
      at::Tensor header = last_stage_ ? header_of(y) : long_header();
      ORRERY_RETURN_IF_ERROR(pp_->Broadcast(header, root));
      at::Tensor out = last_stage_ ? y : empty_from(header);
      ORRERY_RETURN_IF_ERROR(pp_->Broadcast(out, root));
      return out.to(at::kCPU);
    } catch (const std::exception& e) {
      return StatusFromException(e, info_.name + " forward");
    }
  }

  void SetLearningRate(double lr) override { optimizer_->SetLearningRate(lr); }

  StatusOr<model::NamedTensors> GatherFullParameters() override {
    try {
      std::map<std::string, at::Tensor> local;
      for (auto& [name, p] : stage_.NamedParameters()) {
        at::Tensor t = p.detach().contiguous();
        int dim = layout_.tp > 1 ? model::GptTensorParallelDim(name) : -1;
        if (dim >= 0) {
          at::Tensor all = at::empty({layout_.tp * t.numel()}, t.options());
          ORRERY_RETURN_IF_ERROR(tp_->AllGather(t, all));
          std::vector<at::Tensor> parts;
          for (int r = 0; r < layout_.tp; ++r)
            parts.push_back(all.narrow(0, r * t.numel(), t.numel()).view(t.sizes()));
          t = at::cat(parts, dim);
        }
        local[name] = t.clone();
      }
      model::NamedTensors out;
      for (const auto& fp : full_params_) {
        at::Tensor t;
        if (fp.stage == coords_.pp) {
          t = local.at(fp.name);
        } else {
          t = at::empty(fp.shape, at::TensorOptions().dtype(at::kFloat).device(device_));
        }
        if (layout_.pp > 1) ORRERY_RETURN_IF_ERROR(pp_->Broadcast(t, fp.stage));
        out.emplace_back(fp.name, t);
      }
      return OnHost(std::move(out));
    } catch (const std::exception& e) {
      return StatusFromException(e, "gathering parameters");
    }
  }

  Status LoadFullParameters(const model::NamedTensors& full) override {
    optimizer_->Reset();
    return CopyNamed(full, stage_.NamedParameters(), coords_.tp, layout_.tp);
  }

  StatusOr<model::NamedTensors> GatherFullOptimizerState() override {
    return GatherOptimizerState(*this, *optimizer_);
  }
  Status LoadFullState(const model::NamedTensors& params,
                       const model::NamedTensors& state) override {
    return internal::LoadFullState(*this, *optimizer_, params, state);
  }

  // The stage's parameters: whole, or the tensor-parallel slice along the
  // dimension the model splits (torch's chunk: ceil-sized parts, the slice
  // SliceGptForTensorParallel and CopyNamed take).
  StatusOr<LocalState> State() override {
    LocalState state = optimizer_->View();
    std::map<std::string, std::vector<int64_t>> global;
    for (const auto& fp : full_params_) global[fp.name] = fp.shape;
    model::NamedTensors named = stage_.NamedParameters();
    const int tp_replicas = layout_.dp * layout_.tp;
    const int tp_replica = coords_.dp * layout_.tp + coords_.tp;
    // Every name gets its segment, a shared tensor's second name too; `param`
    // indexes the optimizer's distinct tensors.
    std::map<const c10::TensorImpl*, size_t> distinct;
    for (size_t i = 0; i < params_.size(); ++i) distinct[params_[i].unsafeGetTensorImpl()] = i;
    for (size_t k = 0; k < named.size(); ++k) {
      const auto& [name, p] = named[k];
      auto it = global.find(name);
      if (it == global.end()) return InternalError("parameter " + name + " has no global shape");
      StateSegment seg;
      seg.name = name;
      seg.global_shape = it->second;
      seg.param = distinct.at(p.unsafeGetTensorImpl());
      seg.region = checkpoint::FullRegion(it->second);
      const int dim = layout_.tp > 1 ? model::GptTensorParallelDim(name) : -1;
      const int replicas = dim >= 0 ? layout_.dp : tp_replicas;
      const int replica = dim >= 0 ? coords_.dp : tp_replica;
      if (dim >= 0) {
        const int64_t whole = it->second[static_cast<size_t>(dim)];
        const int64_t part = (whole + layout_.tp - 1) / layout_.tp;
        seg.region.offsets[static_cast<size_t>(dim)] = part * coords_.tp;
        seg.region.sizes = p.sizes().vec();
        seg.region.flat_end = p.numel();
      }
      if (seg.region.sizes != p.sizes().vec())
        return InternalError("parameter " + name + " does not match its slice of the model");
      seg.writer = static_cast<int>(k % static_cast<size_t>(replicas)) == replica;
      state.segments.push_back(std::move(seg));
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
    AppendParameterPlacement(stage_.NamedParameters(), out);
    std::vector<std::string> names;  // the optimizer's: one per distinct tensor
    for (const auto& [name, p] : stage_.DistinctParameters()) names.push_back(name);
    optimizer_->AppendPlacement(names, false, out);
    if (ddp_) ddp_->AppendPlacement(out);
    AppendBatchPlacement(last_batch_, out);
    return out;
  }

 private:
  HybridStrategy() = default;

  Status Init(const model::ModelConfig& mc, const StrategyConfig& config,
              const OptimizerConfig& opt, dist::Rendezvous* rdv) {
    layout_ = config.layout;
    int rank = rdv == nullptr ? 0 : rdv->config().rank;
    coords_ = dist::CoordinatesOf(layout_, rank);
    info_.name = config.name;
    info_.layout = layout_;
    device_ = config.device;
    precision_ = config.precision;
    recompute_ = config.recompute == "unit";
    info_.recompute = config.recompute;
    // Built on the host a layer at a time, keeping only this rank's stage (and
    // its tensor slice), which then moves to the device: no rank ever holds the
    // whole model.
    if (mc.kind == "torchscript" && (layout_.tp > 1 || layout_.pp > 1)) {
      return FailedPreconditionError(
          "a TorchScript model cannot be split by the tensor or pipeline template; use ddp or "
          "fsdp");
    }
    if (layout_.tp > 1 && !model::IsTransformer(mc)) {
      return FailedPreconditionError("the tensor template needs a transformer (gpt), not " +
                                     mc.kind);
    }
    if (layout_.tp > 1)
      ORRERY_RETURN_IF_ERROR(model::CheckTensorParallelDegree(mc.gpt, layout_.tp));
    const int n_layers = model::NumLayers(mc);
    if (layout_.pp > n_layers) {
      return InvalidArgumentError(std::to_string(layout_.pp) + " pipeline stages for a model of " +
                                  std::to_string(n_layers) + " layers");
    }
    // Groups are joined in the same order on every rank: world, tp, dp, pp.
    if (layout_.world_size() > 1) {
      ORRERY_ASSIGN_OR_RETURN(world_, rdv->NewGroup("world", AllRanks()));
    }
    if (layout_.tp > 1) {
      ORRERY_ASSIGN_OR_RETURN(tp_, rdv->NewGroup(dist::TensorGroupName(layout_, rank),
                                                 dist::TensorGroup(layout_, rank)));
    }
    if (layout_.dp > 1) {
      ORRERY_ASSIGN_OR_RETURN(
          dp_, rdv->NewGroup(dist::DataGroupName(layout_, rank), dist::DataGroup(layout_, rank)));
    }
    if (layout_.pp > 1) {
      ORRERY_ASSIGN_OR_RETURN(pp_, rdv->NewGroup(dist::PipelineGroupName(layout_, rank),
                                                 dist::PipelineGroup(layout_, rank)));
    }
    // Pipeline stages.
    std::vector<int> starts = config.stage_starts;
    if (layout_.pp > 1 && starts.empty()) {
      ORRERY_ASSIGN_OR_RETURN(starts, DefaultStageStarts(mc));
    }
    if (static_cast<int>(starts.size()) != layout_.pp - 1) {
      return InvalidArgumentError("pipeline needs " + std::to_string(layout_.pp - 1) +
                                  " stage starts");
    }
    std::vector<int> bounds{0};
    for (int s : starts) bounds.push_back(s);
    bounds.push_back(n_layers);
    for (size_t i = 1; i < bounds.size(); ++i) {
      if (bounds[i] <= bounds[i - 1])
        return InvalidArgumentError(
            "pipeline stage starts must increase and leave every stage a layer");
    }
    info_.stage_starts = starts;
    stage_.kind = mc.kind;
    stage_.supports_surgery = mc.kind != "torchscript";
    auto stage_of = [&](size_t layer_index) {
      int stage = 0;
      while (static_cast<int>(layer_index) >= bounds[static_cast<size_t>(stage) + 1]) ++stage;
      return stage;
    };
    ORRERY_ASSIGN_OR_RETURN(auto shapes, model::ParameterShapes(mc));
    ORRERY_ASSIGN_OR_RETURN(auto layers_of, model::ParameterLayers(mc));
    for (size_t i = 0; i < shapes.size(); ++i)
      full_params_.push_back({shapes[i].first, shapes[i].second, stage_of(layers_of[i])});
    tied_ = model::TiedParameters(mc);
    for (const auto& [name, shape] : shapes) tied_shapes_[name] = shape;
    // Only this stage's layers are built (a pre-trained model's others are not
    // even read), each block already sliced for this tensor-parallel rank.
    model::TensorParallelSlice slice{coords_.tp, layout_.tp, tp_.get()};
    ORRERY_RETURN_IF_ERROR(model::ForEachLayer(
        mc,
        [&](std::shared_ptr<model::Layer> layer) -> Status {
          stage_.layers.push_back(std::move(layer));
          return OkStatus();
        },
        slice, [&](size_t index) { return stage_of(index) == coords_.pp; }));
    ORRERY_RETURN_IF_ERROR(model::MoveToDevice(stage_, device_));
    first_stage_ = coords_.pp == 0;
    last_stage_ = coords_.pp == layout_.pp - 1;
    micro_batches_ =
        layout_.pp > 1 ? (config.micro_batches > 0 ? config.micro_batches : 2 * layout_.pp) : 1;
    info_.micro_batches = micro_batches_;
    if (layout_.pp > 1) {
      schedule_ = config.pipeline_schedule;
      info_.pipeline_schedule = schedule_;
    }
    // A tied pair on this stage, unsliced (tp = 1), is one tensor: one gradient,
    // one update (and, under dp, one all-reduce). Pairs split across stages or
    // sliced by tensor parallelism keep two copies (SumTiedGradients, folds).
    if (layout_.tp == 1) tied_ = model::ShareTiedParameters(stage_, tied_);
    for (auto& [name, p] : stage_.DistinctParameters()) params_.push_back(p);
    for (const auto& p : params_) info_.peak_device_parameter_bytes += 2 * Bytes(p);
    optimizer_ = std::make_unique<Optimizer>(opt, params_, std::vector<at::Tensor>{},
                                             Optimizer::FrozenByRequiresGrad(params_));
    if (layout_.dp > 1) {
      // A tied pair on this stage is folded into one all-reduce; the others
      // (the pipeline's first and last stages) are summed after it.
      std::vector<std::pair<size_t, size_t>> folds;
      std::vector<std::string> names;
      for (const auto& [name, p] : stage_.DistinctParameters()) names.push_back(name);
      auto index = [&](const std::string& n) {
        return static_cast<size_t>(std::find(names.begin(), names.end(), n) - names.begin());
      };
      std::vector<std::pair<std::string, std::string>> across;
      for (const auto& [a, b] : tied_) {
        if (index(a) < names.size() && index(b) < names.size()) {
          folds.emplace_back(index(a), index(b));
        } else {
          across.emplace_back(a, b);
        }
      }
      tied_ = across;
      ddp_ = std::make_unique<DdpBuckets>(params_, config.bucket_bytes, dp_.get(), folds);
      info_.bucket_bytes = config.bucket_bytes;
      info_.buckets = ddp_->count();
    }
    return OkStatus();
  }

  std::vector<int> AllRanks() const {
    std::vector<int> r;
    for (int i = 0; i < layout_.world_size(); ++i) r.push_back(i);
    return r;
  }

  // The cut the planner's estimate assumes (worker/contract/stages.h): a
  // transformer's layers balanced by their FLOPs; an MLP's by its layers'
  // weights (2 FLOPs each per sample).
  StatusOr<std::vector<int>> DefaultStageStarts(const model::ModelConfig& mc) const {
    if (mc.kind == "gpt") {
      const model::GptConfig& g = mc.gpt;
      contract::TransformerShape shape;
      shape.blocks = g.layers;
      shape.hidden = g.hidden;
      shape.q_out = static_cast<double>(g.heads) * g.HeadDim();
      shape.kv_out = static_cast<double>(g.KvHeads()) * g.HeadDim();
      shape.ff = g.Intermediate();
      shape.gated = g.Llama();
      shape.seq = g.seq;
      shape.vocab = g.vocab;
      return contract::TransformerStageStarts(shape, layout_.pp);
    }
    ORRERY_ASSIGN_OR_RETURN(auto shapes, model::ParameterShapes(mc));
    ORRERY_ASSIGN_OR_RETURN(auto layers_of, model::ParameterLayers(mc));
    std::vector<double> costs(static_cast<size_t>(model::NumLayers(mc)), 0.0);
    for (size_t i = 0; i < shapes.size() && i < layers_of.size(); ++i) {
      double n = 1;
      for (int64_t d : shapes[i].second) n *= static_cast<double>(d);
      if (layers_of[i] < costs.size()) costs[layers_of[i]] += n;
    }
    return contract::BalanceStages(costs, layout_.pp);
  }

  StatusOr<double> StepImpl(const model::Batch& global_batch) {
    const auto start = std::chrono::steady_clock::now();
    wait_s_ = 0;
    ORRERY_ASSIGN_OR_RETURN(model::Batch rows,
                            model::SliceBatch(global_batch, coords_.dp, layout_.dp));
    model::Batch local = model::BatchOn(rows, device_);
    last_batch_ = local;
    for (auto& p : params_) p.mutable_grad().reset();
    double local_loss = 0.0;
    if (layout_.pp == 1) {
      if (ddp_) ddp_->Arm(true);
      at::Tensor loss;
      {
        AutocastGuard autocast(precision_, device_);
        loss = model::Loss(ForwardLayers(stage_.layers, local.inputs, recompute_, precision_),
                           local.targets);
      }
      loss.backward();
      local_loss = loss.item<double>();
    } else {
      ORRERY_ASSIGN_OR_RETURN(local_loss, PipelineStep(local));
    }
    if (ddp_) {
      WaitTimer wait(wait_s_);
      ORRERY_RETURN_IF_ERROR(ddp_->Finish());
    }
    ORRERY_RETURN_IF_ERROR(
        SumTiedGradients(tied_, stage_.NamedParameters(), tied_shapes_, pp_.get(), device_));
    std::vector<at::Tensor> grads;
    for (auto& p : params_) grads.push_back(p.grad());
    optimizer_->Step(grads);
    // The loss is known on the last stage; average over replicas, then share it.
    at::Tensor loss =
        at::full({1}, local_loss, at::TensorOptions().dtype(at::kDouble).device(device_));
    if (dp_ && last_stage_) ORRERY_RETURN_IF_ERROR(dp_->AllReduce(loss, dist::ReduceOp::kAvg));
    if (pp_) ORRERY_RETURN_IF_ERROR(pp_->Broadcast(loss, layout_.pp - 1));
    const double value = loss.item<double>();
    // Tensor parallelism's all-reduces run inside its layers and count as
    // compute here; ddp's wait for buckets and a stage's receives count.
    info_.wait_fraction = wait_s_ / std::max(SecondsSince(start), 1e-9);
    return value;
  }

  // One step of micro-batches in the configured schedule's order (see
  // PipelineSchedule); gradients accumulate over micro-batches, each loss
  // scaled by 1/M so the sum is the mean over the local batch. Activations
  // travel with a shape header. A micro-batch's graph, input and outgoing
  // activation are dropped as soon as its backward is done.
  StatusOr<double> PipelineStep(const model::Batch& local) {
    int m_count = micro_batches_;
    if (local.size() % m_count != 0) {
      return InvalidArgumentError("local batch of " + std::to_string(local.size()) +
                                  " does not split into " + std::to_string(m_count) +
                                  " micro-batches");
    }
    ORRERY_ASSIGN_OR_RETURN(std::vector<PipelineOp> ops,
                            PipelineSchedule(schedule_, layout_.pp, coords_.pp, m_count));
    int prev = coords_.pp - 1, next = coords_.pp + 1;
    auto count = static_cast<size_t>(m_count);
    std::vector<at::Tensor> inputs(count), outputs(count);
    // Activation sends per micro-batch (done once the next stage has returned
    // that micro-batch's gradient); gradient sends until the end of the step.
    std::vector<std::vector<std::unique_ptr<dist::PendingOp>>> activation_sends(count);
    std::vector<std::unique_ptr<dist::PendingOp>> gradient_sends;
    double loss_sum = 0.0;
    for (size_t i = 0; i < ops.size(); ++i) {
      int m = ops[i].micro_batch;
      auto mi = static_cast<size_t>(m);
      if (ops[i].forward) {
        ORRERY_ASSIGN_OR_RETURN(model::Batch mb, model::SliceBatch(local, m, m_count));
        at::Tensor x;
        if (first_stage_) {
          x = mb.inputs;
        } else {
          at::Tensor header = at::zeros({8}, at::TensorOptions().dtype(at::kLong).device(device_));
          WaitTimer wait(wait_s_);
          ORRERY_RETURN_IF_ERROR(pp_->Recv(header, prev, 4 * m));
          header = header.to(at::kCPU);
          std::vector<int64_t> shape(header.data_ptr<int64_t>() + 1,
                                     header.data_ptr<int64_t>() + 1 + header[0].item<int64_t>());
          x = at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(device_));
          ORRERY_RETURN_IF_ERROR(pp_->Recv(x, prev, 4 * m + 1));
          x.requires_grad_(true);
        }
        at::Tensor y;
        {
          AutocastGuard autocast(precision_, device_);
          y = ForwardLayers(stage_.layers, x, recompute_, precision_);
          if (last_stage_) y = model::Loss(y, mb.targets) / static_cast<double>(m_count);
        }
        if (last_stage_) {
          loss_sum += y.item<double>();
        } else {
          at::Tensor header = at::zeros({8}, at::kLong);
          header[0] = y.dim();
          for (int64_t d = 0; d < y.dim(); ++d) header[d + 1] = y.size(d);
          activation_sends[mi].push_back(pp_->SendAsync(header.to(device_), next, 4 * m));
          activation_sends[mi].push_back(pp_->SendAsync(y.detach().contiguous(), next, 4 * m + 1));
        }
        inputs[mi] = x;
        outputs[mi] = y;
        // The memory claim, counted from what is actually held.
        int live = static_cast<int>(std::count_if(outputs.begin(), outputs.end(),
                                                  [](const at::Tensor& t) { return t.defined(); }));
        info_.peak_live_micro_batches = std::max(info_.peak_live_micro_batches, live);
        continue;
      }
      // Only the step's last backward syncs data-parallel gradients (earlier
      // micro-batches just accumulate).
      if (ddp_) ddp_->Arm(i + 1 == ops.size());
      at::Tensor& y = outputs[mi];
      if (last_stage_) {
        y.backward();
      } else {
        at::Tensor g = at::empty(y.sizes(), y.options().requires_grad(false));
        {
          WaitTimer wait(wait_s_);
          ORRERY_RETURN_IF_ERROR(pp_->Recv(g, next, 4 * m + 2));
        }
        // A first stage that is all frozen (layer-wise fine-tuning) has nothing to compute.
        if (y.requires_grad()) y.backward(g);
      }
      if (!first_stage_)
        gradient_sends.push_back(pp_->SendAsync(inputs[mi].grad(), prev, 4 * m + 2));
      WaitTimer wait(wait_s_);
      for (auto& s : activation_sends[mi])
        ORRERY_RETURN_IF_ERROR(s->Wait().WithContext("pipeline send"));
      activation_sends[mi].clear();
      outputs[mi] = at::Tensor();
      inputs[mi] = at::Tensor();
    }
    WaitTimer wait(wait_s_);
    for (auto& s : gradient_sends) ORRERY_RETURN_IF_ERROR(s->Wait().WithContext("pipeline send"));
    return loss_sum;
  }

  dist::Layout layout_;
  dist::Coordinates coords_;
  std::unique_ptr<dist::Communicator> world_, tp_, dp_, pp_;
  model::Model stage_;
  std::vector<FullParam> full_params_;
  // Tied pairs whose gradients SumTiedGradients sums after the data-parallel
  // reduction (a pair on one stage under ddp is folded by DdpBuckets instead).
  std::vector<std::pair<std::string, std::string>> tied_;
  std::map<std::string, std::vector<int64_t>> tied_shapes_;
  std::string precision_ = "fp32";
  bool recompute_ = false;
  double wait_s_ = 0;  // this step's time waiting on communication
  std::vector<at::Tensor> params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<DdpBuckets> ddp_;
  bool first_stage_ = true, last_stage_ = true;
  int micro_batches_ = 1;
  std::string schedule_ = "gpipe";
  c10::Device device_{c10::kCPU};
  model::Batch last_batch_;
  StrategyInfo info_;
};

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakeHybrid(const model::ModelConfig& mc,
                                               const StrategyConfig& config,
                                               const OptimizerConfig& opt, dist::Rendezvous* rdv) {
  return HybridStrategy::Create(mc, config, opt, rdv);
}

}  // namespace orrery::parallel::internal
