// A first-principles estimate of a configuration's throughput and memory, used
// where no profile was measured (`orrery plan` before anything ran). Every
// figure it returns is an estimate and is labelled as one; profiles replace it.
//   compute: 6 FLOPs per parameter per token for a forward and backward pass
//            (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1),
//            split as 2N forward, 2N backward through the activations and 2N for
//            the weight gradients; a fine-tune keeps the forward, propagates
//            activation gradients only from its first trainable layer on and
//            computes weight gradients only for what it trains (CountParameters);
//   device:  A100 dense BF16 peak 312 TFLOP/s (NVIDIA A100 datasheet) at 40% model
//            FLOPs utilisation (Chowdhery et al. 2022, "PaLM", Table 3 reports
//            46%); a CPU core ~50 GFLOP/s;
//   memory:  16 bytes per trained parameter with Adam (weights, gradients, two
//            moments; Rajbhandari et al. 2020, "ZeRO", §3.1, count the same 16
//            for mixed precision), 4 per frozen one (its weight: see
//            the template table's frozen_bytes_per_parameter), divided by the degree that shards
//            it, plus the buffers a template holds beyond it (AdamW's temporaries,
//            ddp's gradient buckets, fsdp's gathered units); docs/DESIGN.md, "The
//            memory model", and bench/worker/memory_model_bench against measurement.
// A pre-trained model's size comes from its config.json, which this file only
// parses (ParsePretrainedConfig): the world that can read the file passes the
// shape in. Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/api/field_error.h"
#include "operator/api/types.h"
#include "operator/planner/problem.h"

namespace orrery::engine {

struct DeviceModel {
  std::string kind = "cuda";     // cuda | cpu
  double flops = 312e12 * 0.40;  // sustained FLOP/s per device
  double memory_gib = 80;        // per device
};
DeviceModel DefaultDevice(const std::string& kind);

// What a CUDA device's peak holds beyond the model's state and activations,
// whatever the model: LibTorch takes cuBLAS's and cuBLASLt's workspaces from
// its caching allocator, so the profiler's device_allocated counts them, and
// its CUDA path allocates a little beside the model that the CPU's does not.
// On an H200 with torch 2.11 (CUDA 13.0), memory_model_bench --device cuda
// measured every small case's peak (MLPs and GPTs of 2 layers, whose own
// bytes are 2 to 5 MB) 64 MiB and 0.6 to 2.1 MB above the estimate of the
// model's bytes, most with recomputation (docs/DEVELOPING.md).
// EstimateConfig adds it on cuda.
inline constexpr double kCudaWorkspaceBytes = 66.5 * (1 << 20);

// The modelled peak (EstimateConfig's bytes and ActivationBytes) times this:
// the model itemises the state, the step's temporary, the kept activations,
// one block's backward and the gradients that exist at each peak, and misses
// a few percent of transients it does not (autograd's accumulation, the
// loss's gradient, communication's staging). Without it,
// memory_model_bench measured 0.94-1.00 of the peak on GPT shapes (ddp, fsdp,
// tensor and pipeline on one and two ranks) and 0.98-1.00 on MLPs, under
// rather than over.
inline constexpr double kModelHeadroom = 1.05;

// What of a GPU's memory the planner lets a configuration's peak fill. A
// configuration's memory is a peak of tensor bytes (the caching allocator's
// device_allocated, measured or modelled); the device also holds what that
// peak never counts, so planning to the memory the device reports (GPU feature
// discovery's nvidia.com/gpu.memory, `orrery plan --gpu-memory-gib`) picks
// configurations that run out of memory on it:
//   fixed:    per process, whatever the model: the CUDA context with the
//             kernels LibTorch loads, cuBLAS's and cuDNN's handles, and NCCL's
//             communicators (NCCL_BUFFSIZE, 4 MiB by default, per channel and
//             peer, for each protocol in use; tens of channels on NVLink);
//   fraction: of what remains, the caching allocator's blocks held but not
//             in use (its reserved over its allocated bytes: blocks rounded
//             up and split, segments cached between steps).
// The defaults are conservative estimates, not measurements: no GPU run has
// measured a worker's total use beside its allocated peak yet. The operator's
// --gpu-memory-reserve (Helm worker.gpuMemoryReserve) and `orrery plan`'s
// set them.
struct GpuMemoryReserve {
  double fixed_gib = 1.5;
  double fraction = 0.05;
};
// (device_gib - fixed) * (1 - fraction), never below 0.
double UsableGpuMemoryGib(double device_gib, const GpuMemoryReserve& reserve = {});
// "1.5Gi+5%", "2Gi", "10%", "0": a size in Gi (GiB) or Mi (MiB) and/or a
// percentage; INVALID_ARGUMENT naming `flag` and the expected form otherwise
// (a percentage of 100 or more, a negative size).
StatusOr<GpuMemoryReserve> ParseGpuMemoryReserve(std::string_view text, const std::string& flag);
std::string GpuMemoryReserveText(const GpuMemoryReserve& reserve);  // "1.5Gi+5%"

// The architecture a Hugging Face config.json describes, as far as counting
// parameters goes: the fields the worker reads to build it (worker/model
// pretrained.h), GPT-2's n_layer, n_embd, n_head, n_inner, n_positions,
// vocab_size and Llama's (Qwen2's, Mistral's) num_hidden_layers, hidden_size,
// num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
// vocab_size, tie_word_embeddings, attention_bias, mlp_bias.
struct PretrainedShape {
  std::string model_type;  // gpt2 | llama | qwen2 | mistral
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;      // grouped-query attention; = heads for GPT-2
  int head_dim = 0;      // hidden / heads unless config.json says otherwise
  int intermediate = 0;  // the MLP's width
  int vocab = 0;
  int positions = 0;  // GPT-2's learned position rows (n_positions); 0 with rotary positions
  bool tie_embeddings = false;
  bool qkv_bias = false;
  bool out_bias = false;
  bool mlp_bias = false;
  bool Gpt2() const { return model_type == "gpt2"; }
  // The family the worker builds it as and the LoRA module names it has.
  std::string Family() const { return Gpt2() ? "gpt2" : "llama"; }
};

// config.json's text -> its shape; INVALID_ARGUMENT naming `where` and the field
// for a file that is not JSON, a model_type other than gpt2, llama, qwen2 and
// mistral (also read from `architectures`), or a missing or non-positive size.
StatusOr<PretrainedShape> ParsePretrainedConfig(std::string_view json_text,
                                                const std::string& where);

// A task's parameters by what its run does with them.
struct ParameterCount {
  // Every parameter, a tied head once, LoRA adapters included; 0 = unknown
  // (TorchScript, or a pre-trained model whose config.json was not passed in).
  double total = 0;
  double trainable = 0;  // what gets gradients
  // The parameters of the layers from the first trainable one to the output,
  // which backward propagates activation gradients through (a tied head's
  // matrix counts with the head, where its matmul is).
  double backward = 0;
  // What the worker holds: total plus the second copy of a tied head (the
  // templates keep embedding and head apart and sum their gradients), and the
  // part of it that has gradients.
  double stored = 0;
  double stored_trainable = 0;
  // The part of stored (and of stored_trainable) outside the transformer
  // blocks: the embedding, the head and a tied head's second copy, which
  // tensor parallelism does not slice (worker/model/transformer.cc
  // SliceWeights slices blocks only). 0 for an MLP.
  double stored_outside_blocks = 0;
  double stored_trainable_outside_blocks = 0;
  // What the count rests on, for a plan's notes: "gpt2 from config.json:
  // 124.44M parameters, 0.30M trainable (LoRA r=8: c_attn)", or why unknown.
  std::string label;
};

// `pretrained` is the task's config.json when the caller could read it (null:
// unknown, and the label says the size awaits a profile); `unreadable` says
// why it could not ("on volume models", "no such file").
ParameterCount CountParameters(const api::TaskSpec& task,
                               const PretrainedShape* pretrained = nullptr,
                               const std::string& unreadable = "");

// CountParameters(...).total.
double ModelParameters(const api::TaskSpec& task, const PretrainedShape* pretrained = nullptr);

// Bytes per parameter, as the worker allocates them (fp32 Adam): a trained
// parameter has its weight, its gradient and two moments; a frozen one only its
// weight (no gradient, and the optimizer keeps no state for it), except under
// fsdp, whose flat gradient shard covers frozen elements too: the template
// table's frozen_bytes_per_parameter (worker/contract/templates.h).
inline constexpr double kTrainedBytesPerParameter = 16;

// Samples per second and per-device memory for `template_name` on `gpus`
// devices; nullopt when the template cannot run the model on that many devices
// or the model's size is unknown (profiles are the only source then).
std::optional<planner::Config> EstimateConfig(const api::TaskSpec& task,
                                              const std::string& template_name, int gpus,
                                              const DeviceModel& device,
                                              const PretrainedShape* pretrained = nullptr);

// The weights, gradients and optimizer moments one device holds when
// `template_name` trains `task` on `gpus` devices (no buffers, no
// activations): a floor under any peak the device reaches. nullopt when the
// model's size is unknown, and for spill, whose state lives on the host.
std::optional<double> ParameterStateBytes(const api::TaskSpec& task,
                                          const std::string& template_name, int gpus,
                                          const PretrainedShape* pretrained = nullptr);

// What the activations add to one device's peak when `template_name` trains
// `task` at global `batch` on `gpus` devices with activation recomputation
// `recompute` ("none" | "unit"): the backward's peak (the kept activations,
// one block's backward, the logits and the gradients there by then) less the
// optimizer step's that EstimateConfig counts (every gradient and the step's
// temporary), never below 0, with the model's headroom; nullopt when the
// model is not a spec-defined GPT or MLP (its shape is unknown here), and for
// an MLP recomputing (it has no unit to recompute). A configuration's memory
// is EstimateConfig's (or a profile's parameter bytes) plus this.
std::optional<double> ActivationBytes(const api::TaskSpec& task, const std::string& template_name,
                                      int gpus, int64_t batch, const std::string& recompute);

// A configuration recomputing per unit runs one more forward (2N of the 6N
// FLOPs a token costs): about 6/8 of the speed without.
inline constexpr double kRecomputeThroughput = 0.75;

// What validation cannot check before config.json is read: freezeBlocks (and
// a search space's values, already substituted in an expanded task) within the
// model's blocks, LoRA targets among its family's modules, and for GPT-2 a
// seqLen within its learned positions. Errors name `task_path` ("spec.tasks[0]").
std::vector<api::FieldError> CheckAgainstPretrained(const api::TaskSpec& task,
                                                    const PretrainedShape& shape,
                                                    const std::string& task_path);

}  // namespace orrery::engine
