// The models a worker trains, as a chain of layers. A layer is the unit every
// parallel template cuts at: pipeline stages are contiguous runs of layers, FSDP
// gathers and frees one layer's parameters at a time, and spill shards are
// contiguous runs of layers that fit a device-memory budget.
//
//   GPT:  [embedding] [block 0] ... [block L-1] [final norm + vocabulary head]
//   MLP:  [linear+relu] ... [linear -> classes]
//   TorchScript: one layer holding the whole scripted module (no surgery: only
//                ddp and fsdp can split it, see parallel/).
//
// Parameters are plain autograd leaves owned by their layer and named from the
// model root ("blocks.0.attn.q.weight"), so a full model and a tensor-parallel
// slice of it have the same names, and checkpoints address them by name.
// Initialisation draws from a generator seeded by ModelConfig::seed, not from the
// global one, so threads that build models concurrently (tests) agree. Models are
// built on the host (the same numbers on every device) and moved with
// MoveToDevice; a layer computes on whatever device its input and parameters are.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "common/status.h"

namespace orrery::dist {
class Communicator;
}

namespace orrery::model {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  // May throw c10::Error (a torch op failed) or std::runtime_error (a tensor
  // parallel collective failed); templates catch at their step boundary.
  virtual at::Tensor Forward(const at::Tensor& x) = 0;
  virtual NamedTensors NamedParameters() = 0;
  // Moves the layer's parameters (and buffers) to `device` in place: the same
  // autograd variables, their data on the device (Tensor::set_data, as
  // torch.nn.Module.to does), so every handle the layer holds follows.
  virtual void To(c10::Device device);
};

struct GptConfig {
  int layers = 2;
  int hidden = 32;
  int heads = 4;
  int seq = 16;
  int vocab = 64;
};

struct MlpConfig {
  int input = 32;
  int hidden = 64;
  int layers = 2;  // hidden layers; the classifier is one more
  int classes = 10;
};

struct ModelConfig {
  std::string kind = "gpt";  // gpt | mlp | torchscript
  GptConfig gpt;
  MlpConfig mlp;
  // torchscript: a module whose forward(inputs) returns logits; inputs and
  // targets come from `torchscript_like` ("gpt" token batches or "mlp" features).
  std::string torchscript_path;
  std::string torchscript_like = "mlp";
  uint64_t seed = 1234;
};

struct Model {
  std::string kind;
  std::vector<std::shared_ptr<Layer>> layers;
  // False for TorchScript: the templates that rewrite layers (tensor, pipeline)
  // refuse it.
  bool supports_surgery = true;

  NamedTensors NamedParameters() const;
  int64_t NumParameters() const;
  at::Tensor Forward(const at::Tensor& inputs) const;
};

StatusOr<Model> BuildModel(const ModelConfig& config);

// Builds the model's layers one at a time, in order, from the same seeded
// stream as BuildModel, handing each to `take`: a caller that keeps only its
// slice of each layer never holds the whole model (a stage, a tensor-parallel
// slice, an fsdp shard). Stops at the first error `take` returns.
Status ForEachLayer(const ModelConfig& config,
                    const std::function<Status(std::shared_ptr<Layer>)>& take);

// The number of layers BuildModel makes (gpt: layers + 2; mlp: layers + 1;
// torchscript: 1), without building any.
int NumLayers(const ModelConfig& config);

// The number of parameters, one layer at a time.
StatusOr<int64_t> CountParameters(const ModelConfig& config);

// Layer::To for every layer. INVALID_ARGUMENT (not a throw) when the device
// cannot hold tensors (no such CUDA device, a build without CUDA).
Status MoveToDevice(Model& model, c10::Device device);

// The same GPT with its attention and MLP split Megatron-style over tp_size ranks:
// query/key/value and the first MLP projection column-parallel (heads and hidden
// units split), the attention output and second MLP projection row-parallel and
// summed by an all-reduce over `tp`. Embeddings, norms and the head stay
// replicated. Parameters are sliced from `full`, so every tp layout starts from
// the same weights as one process. `tp` must outlive the model.
StatusOr<Model> SliceGptForTensorParallel(const GptConfig& config, const Model& full, int tp_rank,
                                          int tp_size, dist::Communicator* tp);

// Layer `index` of the GPT (0 the embedding, 1..layers the blocks, then the head)
// as tensor-parallel rank `tp_rank` of `tp_size` holds it.
StatusOr<std::shared_ptr<Layer>> SliceGptLayerForTensorParallel(const GptConfig& config,
                                                                size_t index,
                                                                const std::shared_ptr<Layer>& layer,
                                                                int tp_rank, int tp_size,
                                                                dist::Communicator* tp);

// The inverse for one tensor: how a parameter of that name is split over tp
// ranks. Returns -1 when replicated, else the dimension it is split along.
int GptTensorParallelDim(const std::string& parameter_name);

// Mean cross-entropy of logits [..., C] against integer targets [...].
at::Tensor Loss(const at::Tensor& logits, const at::Tensor& targets);

struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
  int64_t size() const;
};

// A learnable synthetic batch for `step`, the same on every rank: GPT gets
// arithmetic token sequences (start and stride random), MLP Gaussian features
// labelled by a fixed random linear teacher.
Batch SyntheticBatch(const ModelConfig& config, int64_t batch_size, int64_t step);
// Rows [part*n/parts, (part+1)*n/parts) of a batch (n must divide evenly).
StatusOr<Batch> SliceBatch(const Batch& batch, int part, int parts);
// The batch on `device` (the same tensors when already there). Batches are
// built on the host; each template moves its rows to its device before its
// forward.
Batch BatchOn(const Batch& batch, c10::Device device);

// The largest relative difference ||a-b|| / max(||b||, 1e-3·sqrt(numel)) over
// two named parameter sets with equal names (error otherwise); the worst
// tensor's name is reported through `worst`.
StatusOr<double> MaxRelativeDifference(const NamedTensors& a, const NamedTensors& b,
                                       std::string* worst = nullptr);

}  // namespace orrery::model
