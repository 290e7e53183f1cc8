// Parallelism templates (Saturn's "templates"): one training step of one model
// under one layout, each a Strategy with the same contract, so the planner's
// choice between them is real and the trainer and profiler never branch on it.
//
//   single    one process, the plain loop; the reference the others must equal
//   ddp       replicated model, gradients all-reduced in buckets as backward
//             produces them (overlapped with the rest of backward)
//   fsdp      each layer's parameters, gradients and optimizer state sharded over
//             the data-parallel ranks; a layer is all-gathered before it computes
//             (in forward and again in backward) and freed after; gradients
//             reduce-scattered
//   tensor    Megatron column/row-parallel attention and MLP (GPT only)
//   pipeline  contiguous stages balanced by measured layer time, micro-batches
//             scheduled GPipe (all forwards, then all backwards) or 1F1B
//             (PipeDream-Flush: the same gradients, fewer activations held)
//   hybrid    any dp × tp × pp layout combining ddp, tensor and pipeline
//   spill     Hydra model spilling: parameters in host memory, the model cut into
//             shards that fit a device budget, each shard brought in for its
//             forward and again for its backward (activations checkpointed at
//             shard boundaries), the next shard prefetched while the current
//             one computes (on CUDA: non-blocking copies from pinned host
//             memory on a side stream, ordered by events; on CPU: another
//             thread); composes with data parallelism
//
// Device (StrategyConfig::device): every template builds the model on the host
// from the seed (so every device starts from the same numbers) and moves what it
// computes with to the device: parameters, gradients, optimizer state,
// communication buffers and each step's rows of the batch. Spill is the one
// exception by design: its master parameters, their gradient sums and the
// optimizer state live in host memory, and only the resident shards are on the
// device. Losses are read back to the host; GatherFullParameters returns host
// tensors (checkpoints and comparisons need no device).
//
// Every rank passes the same global batch to Step(); each takes its own rows.
// Step() returns the mean loss over the global batch, identical on every rank.
// All methods are collective unless said otherwise: every rank calls them in
// the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/layout.h"
#include "worker/dist/communicator.h"
#include "worker/dist/topology.h"
#include "worker/model/model.h"

namespace orrery::parallel {

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd (with momentum) | adamw
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct StrategyConfig {
  std::string name = "single";  // single|ddp|fsdp|tensor|pipeline|hybrid|spill
  // ddp/fsdp/spill: dp = world size; tensor: tp = world size; pipeline: pp =
  // world size; hybrid: as given (must multiply to the world size).
  dist::Layout layout;
  // pipeline: micro-batches per step (0: 2 × pp).
  int micro_batches = 0;
  // pipeline: first layer of each stage after the first, e.g. {2} for two
  // stages split before layer 2; empty: balanced by measured layer time.
  std::vector<int> stage_starts;
  // pipeline (and hybrid with pp > 1): "gpipe" or "1f1b" (see PipelineSchedule).
  std::string pipeline_schedule = "gpipe";
  // ddp: gradient bucket size (PyTorch DDP's default is 25 MiB; small models
  // need small buckets to overlap at all).
  int64_t bucket_bytes = 1 << 20;
  // spill: device-memory budget for resident parameters and their gradients.
  int64_t spill_budget_bytes = 64 << 20;
  bool spill_double_buffer = true;
  // spill on the CPU path only (0: off): every shard copy takes at least
  // bytes / this many seconds, over one link per process that copies take in
  // turn, as a host-to-device link (PCIe) would; the CPU path's copies are
  // otherwise memcpys, far faster against its compute than a GPU's link
  // against a GPU's. For benchmarks of the schedule, never a real device.
  int64_t spill_link_bytes_per_s = 0;
  // Activation recomputation, a memory-for-time trade open to every template:
  //   "none"  every activation autograd saves is kept from forward to
  //           backward (fsdp still frees a unit's gathered parameters after
  //           its forward and gathers them again for its backward, as
  //           PyTorch FSDP does; spill copies a shard in again likewise);
  //   "unit"  only each unit's input is kept (a layer, i.e. a transformer
  //           block, for single/ddp/tensor/pipeline/hybrid; fsdp's unit;
  //           spill's shard) and its forward runs again before its backward.
  //   ""      the template's default (contract::TemplateTraits::recompute).
  std::string recompute;
  // fsdp: gather the next unit while this one computes, and reduce-scatter a
  // unit's gradients while the next backward runs.
  bool fsdp_prefetch = true;
  // "fp32", or "bf16": the forward runs under bfloat16 autocast (matmuls in
  // bf16; parameters, gradients and optimizer state stay float32, the master
  // copy; norms, softmax and the loss in float32), as torch.autocast does.
  std::string precision = "fp32";
  // Where this rank computes: CPU, or its GPU (dist::RankDevice). With NCCL the
  // rank's CUDA device must also be current (dist::UseDevice) before groups are
  // made.
  c10::Device device{c10::kCPU};
};

// The device of one tensor a template computed with (see Strategy::Placement).
struct PlacedTensor {
  std::string name;  // "param/<name>", "grad/<name>", "optim/<slot>/<name>", "batch/inputs", ...
  c10::Device device{c10::kCPU};
  // True where the template keeps it in host memory by design (spill's masters).
  bool host_by_design = false;
};

// Facts a strategy reports about itself (the profiler prints them as its knobs).
struct StrategyInfo {
  std::string name;
  dist::Layout layout;
  int micro_batches = 1;
  std::vector<int> stage_starts;  // pipeline
  std::string pipeline_schedule;  // pipeline: gpipe | 1f1b
  // pipeline: the most micro-batches whose activations (autograd graphs) this
  // stage held at once in any step so far: M under gpipe, at most pp - stage
  // under 1f1b.
  int peak_live_micro_batches = 0;
  int64_t bucket_bytes = 0;          // ddp
  int buckets = 0;                   // ddp
  int spill_shards = 0;              // spill
  int64_t spill_budget_bytes = 0;    // spill
  bool spill_double_buffer = false;  // spill
  std::string recompute;             // none | unit
  // Of the last step's wall time, the fraction this rank spent waiting on
  // communication or copies it could not hide behind compute (fsdp's
  // gathers and reduce-scatters, ddp's bucket all-reduces, pipeline
  // receives and sends, spill's shard copies); 0 before the first step.
  double wait_fraction = 0;
  // Peak bytes of parameters (and gradients) resident on the device this rank
  // ever held: for spill what the accountant measured, else the local shard size.
  int64_t peak_device_parameter_bytes = 0;
};

// One stretch of a rank's own training state that is one region of one global
// tensor: Tenplex's parallelizable tensor collection seen from one rank. It is
// the elements [offset, offset + region.Numel()) of the flattening of
// LocalState::params[param] (and the same elements of each optimizer slot of
// that tensor, from slot_offset), and they are `region` of the global
// parameter `name`.
struct StateSegment {
  std::string name;  // the parameter's name from the model root
  std::vector<int64_t> global_shape;
  checkpoint::Region region;
  size_t param = 0;
  int64_t offset = 0;
  // Where the same elements start in the flattening of each slot of `param`
  // (slots hold only trained elements), or -1 for a frozen parameter, which
  // has no optimizer state at all: a checkpoint holds none for it, in any
  // layout.
  int64_t slot_offset = 0;
  // This rank saves the segment. Data replicated over ranks (ddp replicas, a
  // tensor the tensor template does not split) has one writer, chosen round
  // robin over the replicas so a save spreads its bytes over every rank.
  bool writer = true;
};

// Everything a rank must save for the job to resume in any layout, as views of
// the template's own storage: writing into the tensors changes the model and
// the optimizer (then call Strategy::StateRestored).
struct LocalState {
  std::vector<at::Tensor> params;       // what the optimizer steps, in its order
  std::vector<std::string> slot_names;  // sgd {"momentum"}; adamw {"exp_avg", "exp_avg_sq"}
  // [slot][param]: shaped like params[param] when every element trains; for a
  // frozen tensor empty; for a flat shard mixing frozen and trained
  // parameters (fsdp, spill) 1-d, the trained elements only, in order.
  std::vector<std::vector<at::Tensor>> slots;
  int64_t optimizer_steps = 0;
  std::vector<StateSegment> segments;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // One forward, backward and optimizer step. Errors (a peer died, a shape does
  // not fit) leave the model in an unspecified state.
  virtual StatusOr<double> Step(const model::Batch& global_batch) = 0;
  // The model's outputs for `inputs` (a transformer's logits [batch, seq,
  // vocab] in float32) under the current parameters: no gradients, no
  // optimizer step, the template's own forward (tensor slices, pipeline
  // stages, gathered fsdp units, spilled shards). Collective: every rank of
  // the gang passes the same inputs and receives every row's outputs.
  virtual StatusOr<at::Tensor> Forward(const at::Tensor& inputs) = 0;
  // Not collective.
  virtual void SetLearningRate(double lr) = 0;
  // The whole model's parameters, gathered; every rank receives them.
  virtual StatusOr<model::NamedTensors> GatherFullParameters() = 0;
  // Replaces the parameters from a full set (each rank takes its slice). Not
  // collective. Optimizer state is reset.
  virtual Status LoadFullParameters(const model::NamedTensors& full) = 0;
  virtual StrategyInfo Info() const = 0;
  // Where every tensor this rank's template holds or used in its last Step()
  // lives: parameters, their gradients, the optimizer's state and the batch rows
  // it computed on (spill: also the device buffers its shards passed through).
  // Not collective. Tests assert each is on the configured device.
  virtual std::vector<PlacedTensor> Placement() const = 0;

  // This rank's own state (see LocalState): the segments cover, over all ranks,
  // every element of every parameter, and no rank holds a full copy of what it
  // does not own. Not collective; no copy is made.
  virtual StatusOr<LocalState> State() = 0;
  // After the caller wrote a checkpoint's values into State()'s tensors: sets
  // the optimizer's step count and refreshes whatever the template derives
  // from them. Not collective.
  virtual Status StateRestored(int64_t optimizer_steps) = 0;

  // The optimizer's state gathered to full tensors like the parameters: for
  // every slot (sgd "momentum"; adamw "exp_avg", "exp_avg_sq") and parameter,
  // "<slot>/<parameter name>" with the parameter's shape, plus "step" (a 0-d
  // int64 tensor). Every rank receives it.
  virtual StatusOr<model::NamedTensors> GatherFullOptimizerState() {
    return UnimplementedError("this template cannot gather its optimizer state");
  }
  // Replaces parameters and optimizer state from full sets as the two gathers
  // return them (each rank takes its slice). Not collective.
  virtual Status LoadFullState(const model::NamedTensors& params,
                               const model::NamedTensors& optimizer_state) {
    (void)params;
    (void)optimizer_state;
    return UnimplementedError("this template cannot load optimizer state");
  }
};

// Builds the named template for this rank. `rendezvous` may be null only when
// the world size is 1. Fails with INVALID_ARGUMENT for a layout that does not
// fit the model (tp not dividing heads, more stages than layers) and
// FAILED_PRECONDITION for a template the model cannot use (TorchScript with
// tensor or pipeline).
StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const model::ModelConfig& model,
                                                 const StrategyConfig& config,
                                                 const OptimizerConfig& optimizer,
                                                 dist::Rendezvous* rendezvous);

// One unit of a pipeline stage's work in a step: the forward or the backward
// of one micro-batch.
struct PipelineOp {
  bool forward = true;
  int micro_batch = 0;
  bool operator==(const PipelineOp&) const = default;
};

// The order in which `stage` of `stages` runs the forwards and backwards of
// `micro_batches` micro-batches in one step. Both schedules flush (every
// backward of a step ends before the optimizer step) and run the backwards in
// micro-batch order, so gradients accumulate in the same order and the two
// give bit-identical results:
//   gpipe  (Huang et al. 2019) every forward, then every backward: M micro-
//          batches' activations live at once on every stage;
//   1f1b   (PipeDream-Flush, Narayanan et al. 2021) min(stages - stage - 1, M)
//          warm-up forwards, then one forward and one backward alternately,
//          then the remaining backwards: at most stages - stage live at once.
// INVALID_ARGUMENT for an unknown schedule or counts out of range.
StatusOr<std::vector<PipelineOp>> PipelineSchedule(const std::string& schedule, int stages,
                                                   int stage, int micro_batches);

}  // namespace orrery::parallel
