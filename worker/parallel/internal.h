// Private to worker/parallel: the optimizer the templates share and the
// constructors of each template, so strategy.cc can dispatch without every
// template living in one translation unit.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/parallel/strategy.h"

namespace orrery::parallel::internal {

// SGD with momentum or AdamW over whatever tensors this rank owns (full
// parameters, tensor-parallel slices or flat FSDP shards): both are elementwise,
// so sharding the state changes nothing but where it lives. Frozen elements
// (layer-wise fine-tuning, the base weights under LoRA) have no state at all:
// their slots take no memory, which is what makes LoRA cheap to train.
class Optimizer {
 public:
  // frozen[i], when given, says params[i] is frozen whole (single and the
  // hybrid family: tensors whose requires_grad the model turned off). masks[i],
  // when given and defined, is a bool tensor shaped like params[i] whose false
  // elements are frozen (flat shards mixing frozen and trained parameters:
  // fsdp, spill); its slots then hold only the true elements.
  Optimizer(OptimizerConfig config, std::vector<at::Tensor> params,
            std::vector<at::Tensor> masks = {}, std::vector<bool> frozen = {});
  // Frozen flags from requires_grad, for templates that step the model's own
  // parameters.
  static std::vector<bool> FrozenByRequiresGrad(const std::vector<at::Tensor>& params);
  void SetLearningRate(double lr) { config_.lr = lr; }
  // grads[i] belongs to params[i] (same shape); an undefined gradient skips
  // that parameter.
  void Step(const std::vector<at::Tensor>& grads);
  void Reset();

  // The state's slots: sgd {"momentum"}, adamw {"exp_avg", "exp_avg_sq"}; and
  // the number of steps taken (Adam's bias correction depends on it).
  std::vector<std::string> SlotNames() const;
  int64_t steps() const { return steps_; }
  // Shows slot k through the parameters (zeros where frozen), so the
  // template's own views and gathers see it; the parameters are kept aside
  // until Unshow() puts them back.
  void ShowSlot(size_t k);
  void Unshow();
  // Installs a state: slots[k][i] is slot k of params[i], shaped like it
  // (frozen elements are ignored).
  Status SetState(const std::vector<std::vector<at::Tensor>>& slots, int64_t steps);
  const std::vector<at::Tensor>& params() const { return params_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // The views State() returns, without segments.
  LocalState View() const;
  // Sets each segment's slot_offset (-1 where its elements are frozen).
  void SetSlotOffsets(std::vector<StateSegment>& segments) const;
  // "optim/<slot>/<names[i]>" for each slot tensor (names[i] names params[i]).
  void AppendPlacement(const std::vector<std::string>& names, bool host_by_design,
                       std::vector<PlacedTensor>& out) const;

 private:
  // A stretch [begin, end) of a masked parameter's elements that trains,
  // stored from slot_begin in its slots.
  struct Run {
    int64_t begin, end, slot_begin;
  };
  const std::vector<at::Tensor>& slot(size_t k) const { return k == 0 ? m_ : v_; }
  // Slot-shaped (trained elements) from parameter-shaped, and back (zeros
  // where frozen).
  at::Tensor Compact(size_t i, const at::Tensor& full) const;
  at::Tensor Expand(size_t i, const at::Tensor& compact) const;

  OptimizerConfig config_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> masks_;
  std::vector<bool> frozen_;  // per param: no element trains
  std::vector<std::vector<Run>> runs_;
  std::vector<at::Tensor> m_, v_, shown_;
  int64_t steps_ = 0;
};

// The trainable elements of a flat buffer of `params` (requires_grad per
// parameter), cut to [begin, begin + length): undefined when all train.
at::Tensor TrainableMask(const model::NamedTensors& params, int64_t begin, int64_t length,
                         c10::Device device);

// Segments for tensors each held whole by this rank, `names[i]` being
// optimizer tensor i (or a stretch of a flat buffer: `offsets[i]` in tensor
// `params[i]`), replicated over `replicas` ranks of which this is `replica`:
// the k-th is written by replica k % replicas.
struct WholeTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t param = 0;
  int64_t offset = 0;
};
std::vector<StateSegment> WholeSegments(const std::vector<WholeTensor>& tensors, int replicas,
                                        int replica);

// bfloat16 autocast for one forward on `device` when precision is "bf16"
// (a no-op for "fp32"); restores the previous state when it goes.
class AutocastGuard {
 public:
  AutocastGuard(const std::string& precision, c10::Device device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool on_ = false;
  c10::DeviceType type_ = c10::kCPU;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// Runs `layers` as a chain on `x`. With `recompute` (and grad mode on) each
// layer is an activation checkpoint: its forward runs without autograd and
// keeps only its input, and its backward runs the forward again under
// autograd (and `precision`'s autocast) before back-propagating through it,
// as torch.utils.checkpoint's reentrant form does. Gradients of the layer's
// parameters accumulate inside that backward, so gradient hooks (ddp's
// buckets) and collectives inside layers (tensor parallelism) run as usual.
at::Tensor ForwardLayers(const std::vector<std::shared_ptr<model::Layer>>& layers,
                         const at::Tensor& x, bool recompute, const std::string& precision);

// Adds the wall time of its scope to `total_s`: how a template counts the time
// it waits on communication or copies (StrategyInfo::wait_fraction).
class WaitTimer {
 public:
  explicit WaitTimer(double& total_s)
      : total_s_(total_s), start_(std::chrono::steady_clock::now()) {}
  ~WaitTimer() {
    total_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  double& total_s_;
  std::chrono::steady_clock::time_point start_;
};

// Seconds since `start`, for a step's wall time.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Turns any exception from a step into a status (torch ops, collectives inside
// autograd functions).
Status StatusFromException(const std::exception& e, const std::string& what);

// Builds the stage-local model pieces for hybrid (ddp × tensor × pipeline).
StatusOr<std::unique_ptr<Strategy>> MakeHybrid(const model::ModelConfig& model,
                                               const StrategyConfig& config,
                                               const OptimizerConfig& optimizer,
                                               dist::Rendezvous* rendezvous);
StatusOr<std::unique_ptr<Strategy>> MakeFsdp(const model::ModelConfig& model,
                                             const StrategyConfig& config,
                                             const OptimizerConfig& optimizer,
                                             dist::Rendezvous* rendezvous);
StatusOr<std::unique_ptr<Strategy>> MakeSpill(const model::ModelConfig& model,
                                              const StrategyConfig& config,
                                              const OptimizerConfig& optimizer,
                                              dist::Rendezvous* rendezvous);
// The checks MakeStrategy makes of its inputs, and the template's defaults
// filled in (recompute).
StatusOr<StrategyConfig> ResolveStrategyConfig(const StrategyConfig& config,
                                               const OptimizerConfig& optimizer);
// A spill strategy for `task` in an interleaved group (shard_group.h), which
// it joins now and leaves when destroyed.
class ShardGroup;
StatusOr<std::unique_ptr<Strategy>> MakeInterleavedSpill(const model::ModelConfig& model,
                                                         const StrategyConfig& config,
                                                         const OptimizerConfig& optimizer,
                                                         std::shared_ptr<ShardGroup> group,
                                                         const std::string& task);

// Copies full parameters by name into `params` (which may be tensor-parallel
// slices: `tp_rank`/`tp_size` pick the slice).
Status CopyNamed(const model::NamedTensors& full, const model::NamedTensors& params, int tp_rank,
                 int tp_size);

int64_t Bytes(const at::Tensor& t);

// Makes each tied pair's gradients (model::TiedParameters) their sum, for
// templates that hold parameters whole: `params` are this rank's. Without a
// group both members must be here; with one (the pipeline group, whose first
// and last stages hold the two), every member of the group calls it and the
// sum is all-reduced, ranks holding neither contributing zeros. `shapes` gives
// the tied tensors' shapes. Call after the data-parallel reduction and before
// the optimizer step.
Status SumTiedGradients(const std::vector<std::pair<std::string, std::string>>& tied,
                        const model::NamedTensors& params,
                        const std::map<std::string, std::vector<int64_t>>& shapes,
                        dist::Communicator* group, c10::Device device);

// Placement entries: "param/<name>" and, where defined, "grad/<name>"; and
// "batch/inputs", "batch/targets" (nothing before the first step).
void AppendParameterPlacement(const model::NamedTensors& params, std::vector<PlacedTensor>& out);
void AppendBatchPlacement(const model::Batch& batch, std::vector<PlacedTensor>& out);

// Every tensor of `params` copied to host memory (what GatherFullParameters
// returns on any device).
model::NamedTensors OnHost(model::NamedTensors params);

// Builds the model on the host and moves it to the configured device.
StatusOr<model::Model> BuildOn(const model::ModelConfig& mc, c10::Device device);

// Optimizer state through a template's own full-parameter gather and scatter,
// so every template's sharding (tp slices, pipeline stages, fsdp flat shards,
// spilled host copies) is handled by code that already exists: each slot is
// shown through the parameters, gathered (or loaded), and the parameters put
// back. Frozen parameters' slots gather as zeros.
StatusOr<model::NamedTensors> GatherOptimizerState(Strategy& strategy, Optimizer& optimizer);
Status LoadFullState(Strategy& strategy, Optimizer& optimizer, const model::NamedTensors& params,
                     const model::NamedTensors& optimizer_state);

}  // namespace orrery::parallel::internal
