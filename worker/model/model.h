// The models a worker trains, as a chain of layers. A layer is the unit every
// parallel template cuts at: pipeline stages are contiguous runs of layers, FSDP
// gathers and frees one layer's parameters at a time, and spill shards are
// contiguous runs of layers that fit a device-memory budget.
//
//   GPT:  [embedding] [block 0] ... [block L-1] [final norm + vocabulary head]
//         in three families (GptConfig::family): Orrery's own small GPT, GPT-2
//         and Llama (which covers Qwen2 and Mistral), numerically as Hugging
//         Face transformers computes them; a pre-trained one is read from a
//         Hugging Face directory (pretrained.h)
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
#include "worker/hf/config.h"

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
  // Makes the parameter named `name` (its full name) be `value` itself, the
  // same autograd variable, from now on: a tied head sharing the embedding's
  // tensor. False when this layer has no such parameter or cannot share.
  virtual bool ShareParameter(const std::string& name, const at::Tensor& value);
  // Moves the layer's parameters (and buffers) to `device` in place: the same
  // autograd variables, their data on the device (Tensor::set_data, as
  // torch.nn.Module.to does), so every handle the layer holds follows.
  virtual void To(c10::Device device);
};

// Rotary position embedding (Su et al. 2021, "RoFormer"), with the frequency
// rescalings Hugging Face's modeling_rope_utils.py names "linear" (Chen et al.
// 2023, position interpolation) and "llama3" (Meta's Llama 3.1 release): the
// parameters config.json gives (worker/hf/config.h), one struct for both.
using RopeConfig = hf::RopeParameters;

// A decoder-only transformer. The family fixes the layer shapes:
//   gpt    Orrery's own small GPT: LayerNorm, learned positions, exact GELU MLP,
//          biases everywhere, untied head; names as GPT-2's below
//   gpt2   Radford et al. 2019: the same with tanh-approximated GELU ("gelu_new")
//          and the head tied to the token embedding
//   llama  Touvron et al. 2023: RMSNorm, rotary positions, SwiGLU MLP
//          (gate/up/down), grouped-query attention (kv_heads < heads), no biases
//          unless qkv_bias (Qwen2) or out_bias/mlp_bias; tied head optional
// Parameters are named from the model root the same way in every family
// ("embed.tokens", "blocks.3.attn.q.weight", "blocks.3.mlp.gate.weight",
// "head.ln.weight", "head.proj.weight"); pretrained.h maps them to and from
// the Hugging Face names.
struct GptConfig {
  GptConfig() = default;
  // Orrery's own GPT of that shape.
  GptConfig(int layers_, int hidden_, int heads_, int seq_, int vocab_)
      : layers(layers_), hidden(hidden_), heads(heads_), seq(seq_), vocab(vocab_) {}

  int layers = 2;
  int hidden = 32;
  int heads = 4;
  int seq = 16;
  int vocab = 64;
  std::string family = "gpt";  // gpt | gpt2 | llama
  int kv_heads = 0;            // 0: heads
  int head_dim = 0;            // 0: hidden / heads
  int intermediate = 0;        // MLP width; 0: 4 × hidden
  int max_positions = 0;       // learned position rows; 0: seq
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  bool qkv_bias = true;
  bool out_bias = true;
  bool mlp_bias = true;
  std::string activation = "gelu";  // gelu | gelu_tanh (GPT-2's gelu_new) | silu (llama's SwiGLU)
  RopeConfig rope;
  // Hugging Face's model_type this config came from or exports as (gpt2,
  // llama, qwen2, mistral); empty for Orrery's own GPT.
  std::string hf_model_type;

  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
  int HeadDim() const { return head_dim > 0 ? head_dim : hidden / heads; }
  int Intermediate() const { return intermediate > 0 ? intermediate : 4 * hidden; }
  int MaxPositions() const { return max_positions > 0 ? max_positions : seq; }
  bool Llama() const { return family == "llama"; }
};

// The family presets for a model built from a seed (no pre-trained weights):
// "gpt2" ties the head and uses gelu_new; "llama" has no biases, SwiGLU, RMSNorm with
// eps 1e-6 and an MLP of 8/3 × hidden rounded up to a multiple of 8 unless
// `intermediate` is set. "gpt" changes nothing. INVALID_ARGUMENT for others.
Status ApplyFamilyDefaults(GptConfig& config);

struct MlpConfig {
  int input = 32;
  int hidden = 64;
  int layers = 2;  // hidden layers; the classifier is one more
  int classes = 10;
};

// What a fine-tuning run trains (Saturn's workloads sweep these; Nagrecha et
// al. 2023). Frozen parameters keep requires_grad false: autograd computes no
// gradient for them and every template's optimizer leaves them unchanged.
//   full        everything trains (all fields default)
//   layer-wise  freeze_embeddings and/or the first freeze_blocks blocks
//   LoRA        lora_rank > 0 (Hu et al. 2021): every pre-existing parameter
//               is frozen and each targeted projection W gains A [r, in] and
//               B [out, r] with W x + (alpha / r) · B A x; A drawn as PEFT draws
//               it (Kaiming-uniform, bound 1/sqrt(in)), B zero
// LoRA targets are Hugging Face module names, matched as PEFT matches them
// (the name's last component): llama q_proj k_proj v_proj o_proj gate_proj
// up_proj down_proj; gpt2 c_attn (one A shared by q, k and v, as the fused
// projection has) c_proj (attention and MLP output) c_fc.
struct FineTuneConfig {
  bool freeze_embeddings = false;
  int freeze_blocks = 0;
  int lora_rank = 0;
  double lora_alpha = 16.0;
  std::vector<std::string> lora_targets;  // empty: PEFT's defaults (q_proj,v_proj; c_attn)
  bool Lora() const { return lora_rank > 0; }
};

struct ModelConfig {
  std::string kind = "gpt";  // gpt | mlp | torchscript (gpt covers every GptConfig::family)
  GptConfig gpt;
  MlpConfig mlp;
  // torchscript: a module whose forward(inputs) returns logits; inputs and
  // targets come from `torchscript_like` ("gpt" token batches or "mlp" features).
  std::string torchscript_path;
  std::string torchscript_like = "mlp";
  uint64_t seed = 1234;
  FineTuneConfig finetune;
  // gpt: a Hugging Face model directory (config.json + safetensors) whose
  // weights the model starts from instead of the seed; its config.json has
  // already set `gpt` (pretrained.h ConfigFromPretrained).
  std::string pretrained;
};

// A tensor-parallel rank's share: with size > 1 ForEachLayer builds each block
// already sliced Megatron-style (see SliceGptForTensorParallel), reading only
// the slice of a pre-trained tensor.
struct TensorParallelSlice {
  int rank = 0;
  int size = 1;
  dist::Communicator* comm = nullptr;
};

// Pairs of parameters that are one tensor in the model (GPT-2's head tied to its
// token embedding). Where both are in one process's layers, ShareTiedParameters
// makes them one tensor (one gradient, one optimizer update, as transformers
// ties them); where they are apart (a pipeline's first and last stages, fsdp's
// and spill's flat units, tensor-parallel slices) the templates keep both and
// sum their gradients before the optimizer steps, so the two stay equal
// (Megatron-LM's treatment of the shared embedding across pipeline stages,
// Narayanan et al. 2021, §2.2).
std::vector<std::pair<std::string, std::string>> TiedParameters(const ModelConfig& config);

struct Model {
  std::string kind;
  std::vector<std::shared_ptr<Layer>> layers;
  // False for TorchScript: the templates that rewrite layers (tensor, pipeline)
  // refuse it.
  bool supports_surgery = true;

  NamedTensors NamedParameters() const;
  // NamedParameters without repeats: a tensor shared under two names (a tied
  // pair made one) is listed once, under its first name.
  NamedTensors DistinctParameters() const;
  int64_t NumParameters() const;
  at::Tensor Forward(const at::Tensor& inputs) const;
};

StatusOr<Model> BuildModel(const ModelConfig& config);

// Makes each pair of `tied` whose two parameters are both in `model` one tensor
// (the second name's layer takes the first's tensor; their values must be
// equal, as a tied model's are). Returns the pairs it could not make one (one
// side elsewhere): what the caller still sums with SumTiedGradients.
std::vector<std::pair<std::string, std::string>> ShareTiedParameters(
    Model& model, const std::vector<std::pair<std::string, std::string>>& tied);

// Builds the model's layers one at a time, in order, from the same seeded
// stream as BuildModel, handing each to `take`: a caller that keeps only its
// slice of each layer never holds the whole model (a stage, a tensor-parallel
// slice, an fsdp shard). Stops at the first error `take` returns.
// With `tp`, each block comes already sliced for that tensor-parallel rank;
// with `wanted`, `take` sees only the layers (by index) it returns true for, and
// a pre-trained model's other layers are not read at all.
Status ForEachLayer(const ModelConfig& config,
                    const std::function<Status(std::shared_ptr<Layer>)>& take,
                    const TensorParallelSlice& tp = {},
                    const std::function<bool(size_t)>& wanted = nullptr);

// Every parameter's name and full shape, in model order, without building the
// model where the architecture gives them (GPT).
StatusOr<std::vector<std::pair<std::string, std::vector<int64_t>>>> ParameterShapes(
    const ModelConfig& config);
// The layer index of each entry of ParameterShapes (which layer holds it).
StatusOr<std::vector<size_t>> ParameterLayers(const ModelConfig& config);

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

// The inverse for one tensor: how a parameter of that name is split over tp
// ranks. Returns -1 when replicated, else the dimension it is split along.
int GptTensorParallelDim(const std::string& parameter_name);

// The LoRA targets of a config as Orrery's projections ("attn.q", "attn.qkv"
// for GPT-2's shared-A c_attn, "mlp.down", ...), or INVALID_ARGUMENT naming a
// target that matches nothing in the family.
StatusOr<std::vector<std::string>> LoraProjections(const GptConfig& gpt,
                                                   const FineTuneConfig& finetune);

// INVALID_ARGUMENT naming what is wrong with the fine-tuning choices (a LoRA
// target the family lacks, more frozen blocks than the model has).
Status CheckFineTune(const ModelConfig& config);

// Whether the model is a transformer the tensor template can slice.
bool IsTransformer(const ModelConfig& config);
// INVALID_ARGUMENT naming what does not divide when tp_size ranks cannot split
// the model (heads, kv_heads, the MLP width).
Status CheckTensorParallelDegree(const GptConfig& config, int tp_size);

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
