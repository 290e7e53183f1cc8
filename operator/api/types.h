// The ModelSelectionJob resource (orrery.dev/v1alpha1) as plain C++ values: what a
// user asks for (spec) and what the operator reports (status). The JSON/YAML
// codec (codec.h) maps these to the wire form, defaults.h fills computed defaults,
// validation.h checks them, expand.h turns the search space into concrete tasks.
//
// Scalars with a fixed default carry it as their initialiser; the same values are
// written in crds/ and a test keeps the two equal (schema.h holds the constants).
// std::optional marks what is genuinely optional or one-of (a model is gpt OR
// mlp OR torchscript OR pretrained), so "absent" stays distinguishable from zero.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/schema.h"

namespace orrery::api {

inline constexpr const char* kGroup = "orrery.dev";
inline constexpr const char* kVersion = "v1alpha1";
inline constexpr const char* kApiVersion = "orrery.dev/v1alpha1";
inline constexpr const char* kKind = "ModelSelectionJob";
inline constexpr const char* kPlural = "modelselectionjobs";
inline constexpr const char* kShortName = "msj";

// ---- model ----------------------------------------------------------------
struct GptModel {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
  bool operator==(const GptModel&) const = default;
};

struct MlpModel {
  int layers = 0;
  int hidden = 0;
  int inputs = 0;
  int outputs = 0;
  bool operator==(const MlpModel&) const = default;
};

struct TorchScriptModel {
  std::string path;
  bool operator==(const TorchScriptModel&) const = default;
};

// A PersistentVolumeClaim in the job's namespace that holds pre-trained models,
// mounted read-only at mount_path in every worker pod of the task (training and
// profiling): the workers only read the model.
struct ModelVolume {
  std::string claim_name;  // required
  std::string mount_path = kDefaultModelMountPath;
  bool operator==(const ModelVolume&) const = default;
};

// A Hugging Face model directory (config.json and model.safetensors, or a
// sharded model.safetensors.index.json, as save_pretrained writes them) of a
// GPT-2, Llama, Qwen2 or Mistral model, fine-tuned from its weights. config.json
// sets the architecture; seq_len is the training window. With a volume, a
// relative path is inside the volume (mount_path/path) and an absolute one must
// lie under mount_path; without one, the path is on the node or in the image
// (ModelDirectory in paths.h).
struct PretrainedModel {
  std::string path = {};
  int seq_len = 0;  // required
  std::optional<ModelVolume> volume = std::nullopt;
  bool operator==(const PretrainedModel&) const = default;
};

// Exactly one member is set in a valid spec.
struct ModelSpec {
  std::optional<GptModel> gpt;
  std::optional<MlpModel> mlp;
  std::optional<TorchScriptModel> torchscript;
  // Members added after others carry an initialiser, so aggregate
  // initialisations written before them stay free of missing-initialiser
  // warnings.
  std::optional<PretrainedModel> pretrained = std::nullopt;
  bool operator==(const ModelSpec&) const = default;
};

// ---- data -----------------------------------------------------------------
struct TokenData {
  std::string path;
  TokenDtype dtype = kDefaultTokenDtype;
  bool operator==(const TokenData&) const = default;
};

struct TextData {
  std::string path;
  // A Hugging Face tokenizer.json, or a directory holding one, to tokenise the
  // text with; "" = the pre-trained model's own tokenizer (byte-level tokens
  // for other models).
  std::string tokenizer = {};
  bool operator==(const TextData&) const = default;
};

struct SyntheticData {
  int64_t seed = 0;
  int vocab_size = kDefaultSyntheticVocabSize;
  int64_t samples = kDefaultSyntheticSamples;
  bool operator==(const SyntheticData&) const = default;
};

// Exactly one member is set in a valid spec.
struct DataSpec {
  std::optional<TokenData> tokens;
  std::optional<TextData> text;
  std::optional<SyntheticData> synthetic;
  bool operator==(const DataSpec&) const = default;
};

// ---- training -------------------------------------------------------------
struct TrainingSpec {
  std::optional<int64_t> steps;  // exactly one of steps and epochs
  std::optional<int64_t> epochs;
  int64_t batch_size = 0;  // global, across all ranks; required
  Optimizer optimizer = kDefaultOptimizer;
  double learning_rate = 0;  // required
  double weight_decay = kDefaultWeightDecay;
  double momentum = kDefaultMomentum;  // sgd only
  LrSchedule schedule = kDefaultLrSchedule;
  // bf16: bfloat16 autocast of the forward with float32 master weights.
  Precision precision = kDefaultPrecision;
  int64_t warmup_steps = kDefaultWarmupSteps;
  bool operator==(const TrainingSpec&) const = default;
};

// ---- fine-tuning ----------------------------------------------------------
// Low-rank adapters (Hu et al. 2021, "LoRA"): every base parameter is frozen and
// each targeted projection W gains B A with W x + (alpha / rank) B A x.
struct LoraSpec {
  // Required unless the task's search space lists loraRank (which sets it).
  std::optional<int> rank = std::nullopt;
  double alpha = kDefaultLoraAlpha;
  // Hugging Face module names, matched as PEFT matches them: llama (and qwen2,
  // mistral) q_proj k_proj v_proj o_proj gate_proj up_proj down_proj; gpt2
  // c_attn c_proj c_fc. Empty: PEFT's defaults (q_proj, v_proj; c_attn).
  std::vector<std::string> targets = {};
  bool operator==(const LoraSpec&) const = default;
};

// What a transformer's training leaves frozen: the embeddings, the first
// freeze_blocks blocks, or, with lora, every base parameter.
struct FineTuningSpec {
  bool freeze_embeddings = kDefaultFreezeEmbeddings;
  int freeze_blocks = kDefaultFreezeBlocks;
  std::optional<LoraSpec> lora = std::nullopt;
  bool operator==(const FineTuningSpec&) const = default;
};

// ---- output ---------------------------------------------------------------
// A PersistentVolumeClaim the trained models are written to, mounted read-write
// at mount_path in the task's training pods.
struct OutputVolume {
  std::string claim_name;  // required
  std::string mount_path = kDefaultOutputMountPath;
  bool operator==(const OutputVolume&) const = default;
};

// Where a finished task writes its trained model as a Hugging Face directory
// (a LoRA run: the PEFT adapter, and with merge_lora the merged model in
// <path>/merged). "{task}" in path stands for the expanded task's name, so a
// sweep's tasks write apart; expansion substitutes it (expand.h). Paths follow
// PretrainedModel's rules (OutputDirectory in paths.h).
struct OutputSpec {
  std::string path;
  ExportDtype dtype = kDefaultExportDtype;
  bool merge_lora = kDefaultMergeLora;
  std::optional<OutputVolume> volume = std::nullopt;
  bool operator==(const OutputSpec&) const = default;
};

// ---- search space ---------------------------------------------------------
// Grid: every combination of the listed values.
struct GridSpace {
  std::vector<double> learning_rate;
  std::vector<int64_t> batch_size;
  std::vector<double> weight_decay;
  std::vector<int64_t> warmup_steps;
  std::vector<Optimizer> optimizer;
  // Fine-tuning: LoRA ranks (each task gets fineTuning.lora with that rank) and
  // numbers of frozen leading blocks.
  std::vector<int64_t> lora_rank = {};
  std::vector<int64_t> freeze_blocks = {};
  bool operator==(const GridSpace&) const = default;
};

// One sampled hyper-parameter: a range [min, max] (log-uniform when log_scale)
// or a list of values to choose from uniformly.
struct Distribution {
  std::optional<double> min;
  std::optional<double> max;
  bool log_scale = false;
  std::vector<double> values;
  bool operator==(const Distribution&) const = default;
};

struct RandomSpace {
  int64_t seed = 0;
  int count = 0;  // required
  std::optional<Distribution> learning_rate;
  std::optional<Distribution> batch_size;
  std::optional<Distribution> weight_decay;
  std::optional<Distribution> warmup_steps;
  std::optional<Distribution> lora_rank = std::nullopt;
  std::optional<Distribution> freeze_blocks = std::nullopt;
  bool operator==(const RandomSpace&) const = default;
};

// At most one of grid and random.
struct SearchSpace {
  std::optional<GridSpace> grid;
  std::optional<RandomSpace> random;
  bool operator==(const SearchSpace&) const = default;
};

struct TaskSpec {
  std::string name;
  double weight = kDefaultTaskWeight;  // for the weightedCompletionTime objective
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  std::optional<SearchSpace> search_space;
  std::optional<FineTuningSpec> fine_tuning = std::nullopt;  // transformers (gpt, pretrained)
  std::optional<OutputSpec> output = std::nullopt;           // transformers only
  // The GPU types (node label values, e.g. "NVIDIA-H100-80GB-HBM3") the task may
  // run on; empty = any. Every task its search space expands to keeps it: the
  // need for a type (memory, speed) belongs to the model, not to a
  // hyper-parameter. The gang runs on nodes of one type among these.
  std::vector<std::string> gpu_types = {};
  bool operator==(const TaskSpec&) const = default;
};

// ---- how the job may run --------------------------------------------------
struct GpuRange {
  int min = kDefaultGpusPerTaskMin;
  int max = kDefaultGpusPerTaskMax;
  bool operator==(const GpuRange&) const = default;
};

struct Toleration {
  std::string key;
  std::string operator_ = "Equal";  // "operator" is a C++ keyword
  std::string value;
  std::string effect;  // "" means all effects
  std::optional<int64_t> toleration_seconds;
  bool operator==(const Toleration&) const = default;
};

struct ResourcesSpec {
  std::vector<Template> templates = DefaultTemplates();
  GpuRange gpus_per_task;
  int gpu_quota = 0;  // required
  std::string gpu_resource_name = kDefaultGpuResourceName;
  std::map<std::string, std::string> node_selector;
  std::vector<Toleration> tolerations;
  std::string image = kDefaultWorkerImage;
  bool operator==(const ResourcesSpec&) const = default;
};

struct SchedulingSpec {
  Objective objective = kDefaultObjective;
  int solver_time_limit_seconds = kDefaultSolverTimeLimitSeconds;
  int replan_interval_seconds = kDefaultReplanIntervalSeconds;
  double min_switch_gain = kDefaultMinSwitchGain;
  // Re-planning within a budget (engine::EngineOptions): triggers within this
  // many seconds of the last solve wait and are solved together (0: none
  // wait); warm starts re-plan from the plan in force and, on an arrival or a
  // finish, plan only what waits (running gangs keep their GPUs).
  int coalesce_window_seconds = 0;
  bool warm_start = false;
  bool operator==(const SchedulingSpec&) const = default;
};

struct ProfilingSpec {
  int trial_steps = kDefaultTrialSteps;
  std::vector<int> gpu_counts;  // empty: powers of two within gpusPerTask (defaults.h)
  bool reuse_cache = true;
  bool operator==(const ProfilingSpec&) const = default;
};

struct ElasticitySpec {
  bool enabled = false;
  std::optional<int64_t> min_batch_size;  // defaulted from the tasks (defaults.h)
  std::optional<int64_t> max_batch_size;
  LrScaling learning_rate_scaling = kDefaultLrScaling;
  bool operator==(const ElasticitySpec&) const = default;
};

struct CheckpointSpec {
  std::string claim_name;  // "" = no volume: node-local scratch, lost with the pod
  std::string path = kDefaultCheckpointPath;
  int64_t interval_steps = kDefaultCheckpointIntervalSteps;
  int keep = kDefaultCheckpointKeep;
  bool operator==(const CheckpointSpec&) const = default;
};

struct ModelSelectionJobSpec {
  std::vector<TaskSpec> tasks;
  ResourcesSpec resources;
  SchedulingSpec scheduling;
  ProfilingSpec profiling;
  ElasticitySpec elasticity;
  CheckpointSpec checkpoints;
  bool suspend = false;
  bool operator==(const ModelSelectionJobSpec&) const = default;
};

// ---- status ---------------------------------------------------------------
struct Condition {
  std::string type;    // Ready, Progressing, Degraded, ...
  std::string status;  // "True", "False", "Unknown"
  int64_t observed_generation = 0;
  std::string last_transition_time;  // RFC 3339
  std::string reason;
  std::string message;
  bool operator==(const Condition&) const = default;
};

struct PlanStatus {
  double makespan_seconds = 0;
  double lower_bound_seconds = 0;  // on the makespan; 0 under weightedCompletionTime
  double gap = 0;                  // (objective - its lower bound) / objective
  double solve_seconds = 0;
  int64_t revision = 0;
  // Why the planner made this plan: the engine's trigger (engine::TriggerName:
  // "start", "interval", "task-finished", "task-arrived", "capacity-changed",
  // "throughput-drift", "quota-changed", "spec-changed"); "" = not recorded.
  std::string trigger = {};
  bool operator==(const PlanStatus&) const = default;
};

struct TaskConfig {
  Template template_ = Template::kDdp;  // "template" is a C++ keyword
  int gpus = 0;
  int64_t batch_size = 0;
  std::vector<std::string> nodes;
  // Activation recomputation the gang runs with: "none" | "unit" (each
  // transformer block's forward runs again in its backward); "" = not recorded
  // (a gang made before the plan chose it: the template's default).
  std::string recompute = {};
  // The GPU type of the gang's nodes (their GPU type label); "" = unlabelled
  // nodes or not recorded.
  std::string gpu_type = {};
  bool operator==(const TaskConfig&) const = default;
};

struct CheckpointRef {
  int64_t step = 0;
  std::string path;
  std::string time;  // RFC 3339
  // Samples consumed at it, as the worker reported (exact across batch
  // changes); 0 when it did not report them.
  int64_t samples = 0;
  // The save that wrote it, as the gang's rank 0 reported it for the gang: the
  // whole save's seconds, the bytes its ranks wrote and needed (summed over the
  // ranks; rank 0's alone from a worker that exports no gang sums) and the
  // largest rank's peak resident memory. 0: not reported (a checkpoint the gang
  // resumed from, an older worker).
  double seconds = 0;
  int64_t bytes_written = 0;
  int64_t bytes_needed = 0;
  int64_t peak_rss_bytes = 0;
  bool operator==(const CheckpointRef&) const = default;
};

// The newest restore: a gang generation that resumed from a checkpoint (in any
// layout: a relaunch in another one re-shards), as its rank 0 reported it.
struct RestoreRef {
  int generation = 0;  // the gang that restored (its task's restarts)
  int64_t step = -1;   // the checkpoint's step; -1 when no scrape caught it
  std::string time;    // RFC 3339, when the operator first saw it
  // The whole load's seconds (0: not reported), the bytes the gang's ranks read
  // and needed (summed over the ranks) and the largest rank's peak resident
  // memory (0: not reported).
  double seconds = 0;
  int64_t bytes_read = 0;
  int64_t bytes_needed = 0;
  int64_t peak_rss_bytes = 0;
  // The layout that wrote the checkpoint and the one that loaded it, each as
  // "<template> dp=..,tp=..,pp=..,fsdp=.."; they differ when the restore
  // re-sharded. Empty: not reported.
  std::string from_layout;
  std::string layout;
  bool operator==(const RestoreRef&) const = default;
};

struct TaskStatus {
  std::string name;
  TaskState state = TaskState::kPending;
  std::optional<TaskConfig> config;
  int64_t steps_done = 0;
  int64_t steps_total = 0;
  double progress = 0;            // 0..1
  double samples_per_second = 0;  // measured throughput
  double eta_seconds = 0;
  std::optional<CheckpointRef> last_checkpoint;
  std::optional<RestoreRef> last_restore;
  // The Hugging Face directory the task's trained model was written to (its
  // spec's output), set once the task succeeded: the worker exits successfully
  // only after the export is written. "" = none.
  std::string export_path = {};
  int restarts = 0;
  std::string message;
  bool operator==(const TaskStatus&) const = default;
};

struct ModelSelectionJobStatus {
  Phase phase = Phase::kPending;
  int64_t observed_generation = 0;
  std::vector<Condition> conditions;
  std::optional<PlanStatus> plan;
  std::vector<TaskStatus> tasks;
  std::string task_summary;  // "done/total", shown by kubectl get
  int gpus_held = 0;
  std::string eta;  // human duration ("1h20m"), shown by kubectl get
  bool operator==(const ModelSelectionJobStatus&) const = default;
};

// The metadata Orrery reads. Everything else the server sends (managedFields,
// ownerReferences, ...) is kept verbatim in `extra_json` so a decode/encode cycle
// of an object read from the server loses nothing.
struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::string extra_json;  // serialised JSON object of the remaining fields, or ""
  bool operator==(const ObjectMeta&) const = default;
};

struct ModelSelectionJob {
  std::string api_version = kApiVersion;
  std::string kind = kKind;
  ObjectMeta metadata;
  ModelSelectionJobSpec spec;
  std::optional<ModelSelectionJobStatus> status;
  bool operator==(const ModelSelectionJob&) const = default;
};

}  // namespace orrery::api
