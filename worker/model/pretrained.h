// Pre-trained models in the Hugging Face layout, in and out.
//
// In: a directory with config.json and model.safetensors (or a sharded
// model.safetensors.index.json) as `save_pretrained` writes it, for the GPT-2,
// Llama, Qwen2 and Mistral architectures. config.json sets the GptConfig; the
// weights are read a layer at a time and, for a tensor-parallel rank, only the
// rows or columns of its slice (hf::SafetensorsReader reads just those bytes),
// in whatever float type the files hold, into float32 parameters.
//
// Out: the model's parameters written back as such a directory (config.json,
// safetensors, and the source directory's tokenizer and generation files) that
// transformers' AutoModelForCausalLM.from_pretrained loads.
//
// The name mapping: Orrery keeps one naming for every family (model.h); GPT-2's
// fused, transposed Conv1D c_attn becomes three [out, in] projections q, k, v
// and its other Conv1D weights are transposed; Llama's names map one to one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/model/model.h"

namespace orrery::hf {
class SafetensorsReader;
}

namespace orrery::model {

// The architecture a config.json describes. `where` names the file in errors.
// Supported model_type: gpt2, llama, qwen2, mistral (and configs whose
// architectures name one of their CausalLM classes); anything else, and any
// feature Orrery does not compute (sliding windows shorter than the sequence,
// a rope scaling other than linear or llama3, partial rotary), is
// INVALID_ARGUMENT naming the field. `seq` is the training window (kept as
// given).
StatusOr<GptConfig> ParseHuggingFaceConfig(const std::string& json_text, const std::string& where,
                                           int seq);
// Reads DIR/config.json.
StatusOr<GptConfig> ConfigFromPretrained(const std::string& dir, int seq);

// A pre-trained directory's weights, read layer by layer into Orrery's names.
class PretrainedWeights {
 public:
  static StatusOr<std::unique_ptr<PretrainedWeights>> Open(const std::string& dir,
                                                           const GptConfig& config);
  ~PretrainedWeights();
  PretrainedWeights(const PretrainedWeights&) = delete;
  PretrainedWeights& operator=(const PretrainedWeights&) = delete;

  // Layer `index` (0 embedding, 1..layers blocks, layers + 1 head) by local
  // parameter name, as tensor-parallel rank tp.rank of tp.size holds it.
  // Shapes are checked against config.json; a missing or mis-shaped tensor is
  // an error naming it and the file.
  StatusOr<std::map<std::string, at::Tensor>> ReadLayer(size_t index,
                                                        const TensorParallelSlice& tp) const;
  // Elements [begin, end) of the row-major flattening of parameter `name`
  // (Orrery's name and orientation), as float32: an fsdp rank's stretch of it.
  // Reads those bytes (GPT-2's transposed weights: the whole rows they touch).
  StatusOr<at::Tensor> ReadFlat(const std::string& name, int64_t begin, int64_t end) const;
  // Payload bytes read so far.
  uint64_t bytes_read() const;

 private:
  PretrainedWeights() = default;
  std::string dir_;
  GptConfig config_;
  std::string prefix_;  // gpt2: "transformer." or "" (older files)
  std::unique_ptr<hf::SafetensorsReader> reader_;
};

struct ExportOptions {
  std::string dtype = "float32";  // float32 | bfloat16 | float16
  // The pre-trained directory the model came from: its config.json is kept
  // (dtype updated) and its tokenizer and generation files are copied.
  std::string source_dir;
  int64_t max_shard_bytes = 5LL << 30;
};

// Writes `params` (the whole model, Orrery's names, as GatherFullParameters
// returns them) into `dir` as a Hugging Face model directory. Atomic per file
// (see hf::WriteSafetensors); a failure leaves an earlier export loadable.
Status ExportPretrained(const GptConfig& config, const NamedTensors& params, const std::string& dir,
                        const ExportOptions& options);

// LoRA (model.h FineTuneConfig) out, in PEFT's layout: `dir` gets
// adapter_config.json and adapter_model.safetensors ("base_model.model.<module
// path>.lora_A.weight" [r, in], ".lora_B.weight" [out, r]; GPT-2's c_attn B is
// q's, k's and v's stacked), loadable with peft's PeftModel.from_pretrained
// over the base model in options.source_dir.
Status ExportLoraAdapter(const ModelConfig& config, const NamedTensors& params,
                         const std::string& dir, const ExportOptions& options);
// The base parameters with every adapter merged in: W + (alpha / r) · B A.
StatusOr<NamedTensors> MergeLora(const ModelConfig& config, const NamedTensors& params);

}  // namespace orrery::model
