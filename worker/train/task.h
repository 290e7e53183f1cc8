// What one worker process runs, as parsed from its command line: the model, the
// template and layout, the optimizer, the data, and the training or profiling
// budget. The operator, the local runner and the profiler all launch
// `orrery-worker` with these flags (every flag is --name=value or --name value),
// written and parsed by one table, worker/contract/worker_args.h:
//
//   model      --model gpt|mlp|torchscript  --layers --hidden --heads --seq --vocab
//              --family gpt|gpt2|llama --kv-heads --head-dim --intermediate --tie-embeddings
//              --pretrained DIR (a Hugging Face model directory: its config.json sets
//              the architecture, its safetensors the starting weights)
//   fine-tune  --freeze-embeddings --freeze-blocks K (the first K blocks)
//              --lora-rank R --lora-alpha A --lora-targets q_proj,v_proj|c_attn,...
//              (model.h FineTuneConfig)
//              --mlp-input --mlp-hidden --mlp-layers --classes
//              --torchscript PATH --torchscript-like gpt|mlp  --seed
//   template   --template single|ddp|fsdp|tensor|pipeline|hybrid|spill
//              --layout dp=2,tp=2,pp=1  --micro-batches N  --stage-starts 2,4
//              --pipeline-schedule gpipe|1f1b
//              --bucket-bytes N  --spill-budget-bytes N  --no-double-buffer
//              --precision fp32|bf16 (bf16: autocast forward, float32 master weights)
//   optimizer  --optimizer sgd|adamw  --lr  --momentum  --weight-decay
//   schedule   --warmup-steps N  --decay constant|cosine|linear  --min-lr-ratio R
//              --lr-scaling none|linear|sqrt (on a resume whose --batch differs from
//              the checkpoint's, the checkpoint's base rate times (new/old)^1 or ^0.5)
//   data       --data synthetic|tokens|text  --data-path PATH  --token-bytes 2|4
//              --tokenizer PATH (text: a tokenizer.json; default the pretrained model's)
//              --data-samples N (synthetic)  --batch N (global batch)
//   budget     --steps N | --epochs N | --samples N   --report-every N
//              (--samples: train until N samples in all, counted across resumes at
//              any batch, from the checkpoint's own exact count)
//   checkpoint --checkpoint-dir DIR  --checkpoint-every N  --keep K  --no-resume
//   export     --export-dir DIR  --export-dtype float32|bfloat16|float16 (the trained
//              transformer as a Hugging Face model directory when the task ends; a
//              LoRA run's PEFT adapter) --export-merged (LoRA: also DIR/merged)
//   profile    --profile-warmup N  --profile-steps N  --tune  --termination-message-path P
//   process    --threads N (intra-op threads; default 1 per rank)
//   metrics    --metrics-address HOST:PORT|:PORT  --msj NAMESPACE/NAME  --task NAME
//              (each defaults to ORRERY_METRICS_ADDRESS, ORRERY_MSJ, ORRERY_TASK)
//
// Rendezvous comes from the environment (dist::RendezvousFromEnv).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/order.h"
#include "worker/model/model.h"
#include "worker/parallel/strategy.h"

namespace orrery::train {

struct ScheduleConfig {
  int64_t warmup_steps = 0;
  std::string decay = "constant";  // constant | cosine | linear
  double min_lr_ratio = 0.1;
  // How a resume with a different global batch rescales the checkpoint's base
  // rate: linear (Goyal et al. 2017, "Accurate, Large Minibatch SGD"), sqrt
  // (Krizhevsky 2014, "One weird trick"; Adam-style optimizers) or none (the
  // task's --lr as given).
  std::string lr_scaling = "none";
};

struct DataConfig {
  std::string kind = "synthetic";  // synthetic | tokens | text
  std::string path;
  int token_bytes = 2;
  int64_t samples = 1 << 16;  // synthetic dataset size
  // text: a Hugging Face tokenizer.json (or a directory with one) to tokenize
  // with; empty: the pre-trained model's own, else byte-level tokens.
  std::string tokenizer;
};

// Where a rank serves /metrics and the labels of its series (see
// common/metrics/metrics.h and the README's metric list).
struct MetricsConfig {
  std::string address;  // "" = no exporter; "HOST:PORT" or ":PORT" (every interface)
  std::string msj;      // label msj, "namespace/name" of the ModelSelectionJob
  std::string task;     // label task, the task's name in its job
};

struct TaskConfig {
  model::ModelConfig model;
  parallel::StrategyConfig strategy;
  parallel::OptimizerConfig optimizer;
  ScheduleConfig schedule;
  DataConfig data;
  int64_t global_batch = 8;
  int64_t steps = 100;
  int64_t epochs = 0;  // > 0 overrides steps: epochs × samples / batch
  // > 0 overrides steps and epochs: the samples the whole run trains on, so a
  // resume at another batch runs exactly the steps that finish them.
  int64_t samples = 0;
  int64_t report_every = 10;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep = 2;
  bool resume = true;
  int threads = 1;
  int profile_warmup = 3;
  int profile_steps = 10;
  bool tune = false;
  std::string termination_message_path;
  MetricsConfig metrics;
  // Where the trained transformer is written as a Hugging Face model directory
  // when the task ends (empty: not exported).
  std::string export_dir;
  std::string export_dtype = "float32";  // float32 | bfloat16 | float16
  // LoRA runs export the PEFT adapter into export_dir; with this, also the base
  // model with the adapters merged, into export_dir/merged.
  bool export_merged = false;
  // `orrery-worker export`: load the newest checkpoint, export it, train nothing.
  bool export_only = false;
};

// Parses flags (argv without the program and subcommand) with
// contract::ParseWorkerArgs and resolves the model's architecture. Unknown
// flags and bad values are INVALID_ARGUMENT naming the flag.
StatusOr<TaskConfig> ParseTaskFlags(const std::vector<std::string>& args);

// Fills what the metrics flags left empty from ORRERY_METRICS_ADDRESS, ORRERY_MSJ
// and ORRERY_TASK as `getenv` returns them (nullptr = unset): a flag wins.
void MetricsDefaultsFromEnvironment(MetricsConfig& metrics,
                                    const std::function<const char*(const char*)>& getenv);

// The learning rate at `step` (0-based) of `total`: linear warm-up to the base
// rate, then constant, cosine or linear decay to min_lr_ratio × base.
double LearningRate(double base_lr, const ScheduleConfig& schedule, int64_t step, int64_t total);

// Where a run stands in its learning-rate schedule (issue #10). The schedule is
// laid out in samples: warm-up over its first warmup_samples(), decay until
// total_samples(). A run that has never changed its global batch reads it at the
// samples it has consumed, so step k gets LearningRate(base, schedule, k, steps)
// bit for bit. A resume at another global batch keeps the schedule where the
// checkpoint left it and spreads the rest of it evenly over the samples this run
// still trains on (from the checkpoint's to the end of its last step): the rate,
// before the batch rule rescales it, does not jump at the change, the warm-up
// keeps its length in samples, and the schedule ends exactly when the run does,
// whatever rounding the new --steps carries. Pure (no torch).
class ScheduleClock {
 public:
  // A fresh run of `steps` steps of `batch` samples; warm-up of
  // schedule.warmup_steps steps.
  ScheduleClock(const ScheduleConfig& schedule, int64_t batch, int64_t steps);

  // A run of `steps` steps in all (counted from step 0 across resumes) at `batch`,
  // resuming at `step` with `samples` consumed, from a checkpoint whose
  // lr_schedule entries are `saved` (Save's; a checkpoint that lacks them, from
  // an older trainer, resumes as if it had never changed batch). A checkpoint
  // whose schedule had already ended lays a new one over this run's budget.
  static ScheduleClock Resume(const ScheduleConfig& schedule, int64_t batch, int64_t steps,
                              int64_t step, int64_t samples,
                              const std::map<std::string, double>& saved);

  // The rate of the step that starts with `samples` consumed (warm-up reads
  // where the step ends, decay where it starts, as LearningRate does).
  double Rate(double base_lr, const ScheduleConfig& schedule, int64_t samples) const;
  // The schedule's position, in schedule samples, after `samples` consumed.
  double Position(int64_t samples) const;
  // Adds this clock's entries, at `samples` consumed, to a checkpoint's
  // lr_schedule: "samples", "schedule_position", "schedule_total",
  // "warmup_samples".
  void Save(int64_t samples, std::map<std::string, double>& lr_schedule) const;

  double warmup_samples() const { return warmup_; }
  double total_samples() const { return to_position_; }
  // The samples consumed when the run's last step ends.
  int64_t end_samples() const { return to_samples_; }

 private:
  ScheduleClock() = default;
  int64_t batch_ = 1;
  int64_t from_samples_ = 0, to_samples_ = 0;   // what this run trains on
  double from_position_ = 0, to_position_ = 0;  // where they fall in the schedule
  double warmup_ = 0;                           // in schedule samples
  bool identity_ = true;                        // position == samples consumed
};

// Global batches in the order data::GlobalOrder gives (every rank builds the same
// global batch; the template slices its data-parallel share). MLP models draw
// seeded synthetic features instead, indexed by the step.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t NumSamples() const = 0;
  // The batch at the cursor; advances the cursor by the global batch.
  virtual StatusOr<model::Batch> Next() = 0;
  virtual data::Cursor cursor() const = 0;
  virtual Status Seek(const data::Cursor& cursor) = 0;
};

// May adjust the task's model (a text corpus sets vocab 256 and checks seq).
StatusOr<std::unique_ptr<BatchSource>> MakeBatchSource(TaskConfig& task);

}  // namespace orrery::train
