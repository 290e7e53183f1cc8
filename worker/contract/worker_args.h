// The `orrery-worker train|profile|export` command line, written and parsed in
// this one place: the launchers (operator/engine/worker_command.h, for the
// local runner's processes and the controller's pods) fill a WorkerArgs and
// write it with ToArgs; the worker parses it with ParseWorkerArgs and turns
// it into its TaskConfig (worker/train/task.h). Every flag is --name=value or
// --name value; switches take no value. A field left unset is not written,
// and the worker uses its own default for it.
//
// Torch-free: the operator links it without LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::contract {

struct WorkerArgs {
  // model: --model gpt|mlp|torchscript and its sizes, or --pretrained DIR (a
  // Hugging Face model directory whose config.json sets the architecture).
  std::optional<std::string> model;
  std::optional<int64_t> layers, hidden, heads, seq, vocab;
  std::optional<std::string> family;  // gpt | gpt2 | llama
  std::optional<int64_t> kv_heads, head_dim, intermediate;
  bool tie_embeddings = false;
  std::optional<std::string> pretrained;
  std::optional<int64_t> mlp_input, mlp_hidden, mlp_layers, classes;
  std::optional<std::string> torchscript, torchscript_like;
  std::optional<int64_t> seed;
  // fine-tuning
  bool freeze_embeddings = false;
  std::optional<int64_t> freeze_blocks, lora_rank;
  std::optional<double> lora_alpha;
  std::optional<std::vector<std::string>> lora_targets;
  // template (worker/contract/templates.h) and its knobs
  std::optional<std::string> template_name;  // --template
  std::optional<std::string> layout;         // dp=2,tp=2,pp=1
  std::optional<int64_t> micro_batches;
  std::optional<std::vector<int64_t>> stage_starts;
  std::optional<std::string> pipeline_schedule;  // gpipe | 1f1b
  std::optional<int64_t> bucket_bytes, spill_budget_bytes;
  bool no_double_buffer = false;
  std::optional<std::string> recompute;  // none | unit (templates.h kRecomputeModes)
  std::optional<std::string> precision;  // fp32 | bf16
  std::optional<std::string> device;     // cpu | cuda
  // optimizer and schedule
  std::optional<std::string> optimizer;  // sgd | adamw
  std::optional<double> lr, momentum, weight_decay;
  std::optional<int64_t> warmup_steps;
  std::optional<std::string> decay;       // constant | cosine | linear
  std::optional<std::string> lr_scaling;  // none | linear | sqrt
  std::optional<double> min_lr_ratio;
  // data
  std::optional<std::string> data;  // synthetic | tokens | text
  std::optional<std::string> data_path, tokenizer;
  std::optional<int64_t> token_bytes, data_samples;
  std::optional<int64_t> batch;  // global
  // budget
  std::optional<int64_t> steps, epochs, samples, report_every;
  // checkpoints
  std::optional<std::string> checkpoint_dir;
  std::optional<int64_t> checkpoint_every, keep;
  bool no_resume = false;
  // export
  std::optional<std::string> export_dir;
  std::optional<std::string> export_dtype;  // float32 | bfloat16 | float16
  bool export_merged = false;
  // profiling
  std::optional<int64_t> profile_warmup, profile_steps;
  bool tune = false;
  std::optional<std::string> termination_message_path;
  // process and metrics
  std::optional<int64_t> threads;
  std::optional<std::string> metrics_address, msj, task;

  bool operator==(const WorkerArgs&) const = default;
};

// The flags, in a fixed order (the table's), "--name=value" each.
std::vector<std::string> ToArgs(const WorkerArgs& args);

// Parses argv without the program and subcommand. Unknown flags, a value
// missing or given to a switch, a number that does not parse (or a negative
// integer), and a value outside a flag's choices are INVALID_ARGUMENT naming
// the flag and what it takes. A flag given twice keeps the last value.
StatusOr<WorkerArgs> ParseWorkerArgs(const std::vector<std::string>& argv);

// One line per flag, "--name  kind", for the worker's --help.
std::string WorkerFlagsHelp();

}  // namespace orrery::contract
