// Validation: a valid job passes, and every rule rejects its bad case with the
// field path and a fix. Each case starts from a valid job and breaks one thing.
#include "operator/api/validation.h"

#include <functional>
#include <optional>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "tests/operator/api/test_jobs.h"

namespace orrery::api {
namespace {

ModelSelectionJob Valid() {
  auto job = JobFromYaml(testing::kMinimalYaml);
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyDefaults(&job->spec);
  return *job;
}

std::string Dump(const std::vector<FieldError>& errors) {
  std::string s;
  for (const auto& e : errors) s += FormatFieldError(e) + "\n";
  return s;
}

struct Case {
  const char* name;
  std::function<void(ModelSelectionJob&)> mutate;
  const char* path;
  const char* message;  // a substring of the message
};

TaskSpec& T(ModelSelectionJob& j) { return j.spec.tasks[0]; }

// The task becomes a fine-tune of a pre-trained model on a volume.
TaskSpec& Pretrained(ModelSelectionJob& j) {
  T(j).model = ModelSpec{};
  T(j).model.pretrained = PretrainedModel{"llama", 512, ModelVolume{"models", "/models"}};
  return T(j);
}
// The task becomes Orrery's own GPT of 2 blocks.
TaskSpec& Gpt(ModelSelectionJob& j) {
  T(j).model = ModelSpec{};
  T(j).model.gpt = GptModel{2, 64, 4, 32, 256};
  return T(j);
}
LoraSpec Lora(std::optional<int> rank, std::vector<std::string> targets = {}) {
  LoraSpec l;
  l.rank = rank;
  l.targets = std::move(targets);
  return l;
}

Distribution Range(double lo, double hi, bool log = false) {
  Distribution d;
  d.min = lo;
  d.max = hi;
  d.log_scale = log;
  return d;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"api_version", [](auto& j) { j.api_version = "v1"; }, "apiVersion",
       "must be orrery.dev/v1alpha1"},
      {"kind", [](auto& j) { j.kind = "Job"; }, "kind", "must be ModelSelectionJob"},
      {"name_missing", [](auto& j) { j.metadata.name = ""; }, "metadata.name", "required value"},
      {"name_bad", [](auto& j) { j.metadata.name = "My_Job"; }, "metadata.name",
       "not a valid object name"},
      {"no_tasks", [](auto& j) { j.spec.tasks.clear(); }, "spec.tasks", "must not be empty"},
      {"too_many_tasks",
       [](auto& j) {
         for (int i = 1; i <= kMaxTasks; ++i) {
           TaskSpec t = T(j);
           t.name = "t" + std::to_string(i);
           j.spec.tasks.push_back(t);
         }
       },
       "spec.tasks", "must have at most 64 items"},
      {"task_name_empty", [](auto& j) { T(j).name = ""; }, "spec.tasks[0].name", "required value"},
      {"task_name_long", [](auto& j) { T(j).name = std::string(41, 'a'); }, "spec.tasks[0].name",
       "at most 40 characters"},
      {"task_name_bad", [](auto& j) { T(j).name = "Big-Model"; }, "spec.tasks[0].name",
       "not a valid name"},
      {"task_name_dup", [](auto& j) { j.spec.tasks.push_back(T(j)); }, "spec.tasks[1].name",
       "task names must be unique"},
      {"weight", [](auto& j) { T(j).weight = 0; }, "spec.tasks[0].weight",
       "must be greater than 0"},
      {"no_model", [](auto& j) { T(j).model.mlp.reset(); }, "spec.tasks[0].model",
       "exactly one of gpt, mlp"},
      {"two_models", [](auto& j) { T(j).model.torchscript = TorchScriptModel{"m.pt"}; },
       "spec.tasks[0].model", "exactly one of gpt, mlp"},
      {"gpt_heads",
       [](auto& j) {
         T(j).model.mlp.reset();
         T(j).model.gpt = GptModel{2, 100, 3, 64, 256};
       },
       "spec.tasks[0].model.gpt.heads", "hidden must be divisible by heads"},
      {"gpt_layers",
       [](auto& j) {
         T(j).model.mlp.reset();
         T(j).model.gpt = GptModel{0, 64, 4, 64, 256};
       },
       "spec.tasks[0].model.gpt.layers", "must be at least 1"},
      {"gpt_vocab",
       [](auto& j) {
         T(j).model.mlp.reset();
         T(j).model.gpt = GptModel{1, 64, 4, 64, 1};
       },
       "spec.tasks[0].model.gpt.vocab", "must be at least 2"},
      {"mlp_hidden", [](auto& j) { T(j).model.mlp->hidden = 0; }, "spec.tasks[0].model.mlp.hidden",
       "must be at least 1"},
      {"mlp_outputs", [](auto& j) { T(j).model.mlp->outputs = 2000000; },
       "spec.tasks[0].model.mlp.outputs", "must be at most 1048576"},
      {"torchscript_path",
       [](auto& j) {
         T(j).model.mlp.reset();
         T(j).model.torchscript = TorchScriptModel{""};
       },
       "spec.tasks[0].model.torchscript.path", "required value"},
      {"no_data", [](auto& j) { T(j).data.synthetic.reset(); }, "spec.tasks[0].data",
       "exactly one of tokens"},
      {"two_data", [](auto& j) { T(j).data.text = TextData{"a.txt"}; }, "spec.tasks[0].data",
       "exactly one of tokens"},
      {"tokens_path",
       [](auto& j) {
         T(j).data.synthetic.reset();
         T(j).data.tokens = TokenData{};
       },
       "spec.tasks[0].data.tokens.path", "required value"},
      {"synthetic_vocab", [](auto& j) { T(j).data.synthetic->vocab_size = 1; },
       "spec.tasks[0].data.synthetic.vocabSize", "must be at least 2"},
      {"synthetic_vocab_vs_model",
       [](auto& j) {
         T(j).model.mlp.reset();
         T(j).model.gpt = GptModel{1, 64, 4, 64, 100};
       },
       "spec.tasks[0].data.synthetic.vocabSize", "must not exceed the model's vocab (100)"},
      {"synthetic_samples", [](auto& j) { T(j).data.synthetic->samples = 0; },
       "spec.tasks[0].data.synthetic.samples", "must be at least 1"},
      {"synthetic_seed", [](auto& j) { T(j).data.synthetic->seed = -1; },
       "spec.tasks[0].data.synthetic.seed", "must be at least 0"},
      {"steps_and_epochs", [](auto& j) { T(j).training.epochs = 1; }, "spec.tasks[0].training",
       "exactly one of steps and epochs"},
      {"neither_steps_nor_epochs", [](auto& j) { T(j).training.steps.reset(); },
       "spec.tasks[0].training", "exactly one of steps and epochs"},
      {"steps", [](auto& j) { T(j).training.steps = 0; }, "spec.tasks[0].training.steps",
       "must be at least 1"},
      {"gpu_type_empty", [](auto& j) { T(j).gpu_types = {"NVIDIA-L4", ""}; },
       "spec.tasks[0].gpuTypes[1]", "required value"},
      {"gpu_type_not_a_label_value", [](auto& j) { T(j).gpu_types = {"H100 80GB"}; },
       "spec.tasks[0].gpuTypes[0]", "\"H100 80GB\" is not a node label value"},
      {"gpu_type_duplicate", [](auto& j) { T(j).gpu_types = {"L4", "A100", "L4"}; },
       "spec.tasks[0].gpuTypes[2]", "duplicate value"},
      {"gpu_types_too_many",
       [](auto& j) {
         for (int k = 0; k < 17; ++k) T(j).gpu_types.push_back("t" + std::to_string(k));
       },
       "spec.tasks[0].gpuTypes", "must have at most 16 items"},
      {"epochs",
       [](auto& j) {
         T(j).training.steps.reset();
         T(j).training.epochs = 0;
       },
       "spec.tasks[0].training.epochs", "must be at least 1"},
      {"batch_size", [](auto& j) { T(j).training.batch_size = 0; },
       "spec.tasks[0].training.batchSize", "must be at least 1"},
      {"learning_rate", [](auto& j) { T(j).training.learning_rate = 0; },
       "spec.tasks[0].training.learningRate", "must be greater than 0"},
      {"learning_rate_high", [](auto& j) { T(j).training.learning_rate = 11; },
       "spec.tasks[0].training.learningRate", "must be at most 10"},
      {"weight_decay", [](auto& j) { T(j).training.weight_decay = -0.1; },
       "spec.tasks[0].training.weightDecay", "must be at least 0"},
      {"momentum", [](auto& j) { T(j).training.momentum = 1.5; }, "spec.tasks[0].training.momentum",
       "must be at most 1"},
      {"warmup_negative", [](auto& j) { T(j).training.warmup_steps = -1; },
       "spec.tasks[0].training.warmupSteps", "must be at least 0"},
      {"warmup_vs_steps", [](auto& j) { T(j).training.warmup_steps = 100; },
       "spec.tasks[0].training.warmupSteps", "must be less than steps (100)"},
      {"search_both",
       [](auto& j) {
         T(j).search_space = SearchSpace{GridSpace{{1e-3}, {}, {}, {}, {}}, RandomSpace{}};
         T(j).search_space->random->count = 1;
         T(j).search_space->random->learning_rate = Range(1e-4, 1e-3);
       },
       "spec.tasks[0].searchSpace", "exactly one of grid and random"},
      {"search_neither", [](auto& j) { T(j).search_space = SearchSpace{}; },
       "spec.tasks[0].searchSpace", "exactly one of grid and random"},
      {"grid_empty",
       [](auto& j) {
         T(j).search_space = SearchSpace{GridSpace{}, std::nullopt};
       },
       "spec.tasks[0].searchSpace.grid", "at least one parameter"},
      {"grid_duplicate",
       [](auto& j) {
         T(j).search_space = SearchSpace{GridSpace{{1e-3, 1e-3}, {}, {}, {}, {}}, std::nullopt};
       },
       "spec.tasks[0].searchSpace.grid.learningRate[1]", "duplicate value"},
      {"grid_value_bounds",
       [](auto& j) {
         T(j).search_space = SearchSpace{GridSpace{{}, {16, 0}, {}, {}, {}}, std::nullopt};
       },
       "spec.tasks[0].searchSpace.grid.batchSize[1]", "must be at least 1"},
      {"grid_too_long",
       [](auto& j) {
         GridSpace g;
         for (int i = 1; i <= 65; ++i) g.batch_size.push_back(i);
         T(j).search_space = SearchSpace{g, std::nullopt};
       },
       "spec.tasks[0].searchSpace.grid.batchSize", "at most 64 items"},
      {"grid_optimizer_duplicate",
       [](auto& j) {
         T(j).search_space = SearchSpace{
             GridSpace{{}, {}, {}, {}, {Optimizer::kSgd, Optimizer::kSgd}}, std::nullopt};
       },
       "spec.tasks[0].searchSpace.grid.optimizer[1]", "duplicate value"},
      {"grid_expands_too_far",
       [](auto& j) {
         GridSpace g;
         for (int i = 1; i <= 30; ++i) g.batch_size.push_back(i), g.warmup_steps.push_back(i - 1);
         T(j).search_space = SearchSpace{g, std::nullopt};
       },
       "spec.tasks[0].searchSpace", "expands to 900 tasks, more than the limit of 512"},
      {"jobs_expand_too_far",
       [](auto& j) {
         RandomSpace r;
         r.count = 300;
         r.learning_rate = Range(1e-4, 1e-3);
         T(j).search_space = SearchSpace{std::nullopt, r};
         TaskSpec second = T(j);
         second.name = "second";
         j.spec.tasks.push_back(second);
       },
       "spec.tasks", "expand to 600 tasks in all"},
      {"random_count",
       [](auto& j) {
         RandomSpace r;
         r.count = 0;
         r.learning_rate = Range(1e-4, 1e-3);
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.count", "must be at least 1"},
      {"random_no_params",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random", "at least one parameter"},
      {"random_range_and_values",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.learning_rate = Range(1e-4, 1e-3);
         r.learning_rate->values = {1e-4};
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.learningRate", "either min and max, or values"},
      {"random_min_only",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.weight_decay = Distribution{};
         r.weight_decay->min = 0.1;
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.weightDecay.max", "required value"},
      {"random_min_gt_max",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.learning_rate = Range(1e-2, 1e-3);
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.learningRate", "min must not exceed max"},
      {"random_log_zero",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.weight_decay = Range(0, 0.1, true);
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.weightDecay.min", "greater than 0 when logScale"},
      {"random_log_values",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.weight_decay = Distribution{};
         r.weight_decay->values = {0.1};
         r.weight_decay->log_scale = true;
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.weightDecay.logScale", "only to a min/max range"},
      {"random_integer_param",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.batch_size = Distribution{};
         r.batch_size->values = {16, 24.5};
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.batchSize.values[1]", "whole number"},
      {"random_param_bounds",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.learning_rate = Range(1e-4, 20);
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.learningRate.max", "must be at most 10"},
      {"random_seed",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.seed = -3;
         r.learning_rate = Range(1e-4, 1e-3);
         T(j).search_space = SearchSpace{std::nullopt, r};
       },
       "spec.tasks[0].searchSpace.random.seed", "must be at least 0"},
      {"templates_empty", [](auto& j) { j.spec.resources.templates.clear(); },
       "spec.resources.templates", "must not be empty"},
      {"templates_duplicate",
       [](auto& j) {
         j.spec.resources.templates = {Template::kDdp, Template::kDdp};
       },
       "spec.resources.templates[1]", "duplicate value"},
      {"gpus_min", [](auto& j) { j.spec.resources.gpus_per_task.min = 0; },
       "spec.resources.gpusPerTask.min", "must be at least 1"},
      {"gpus_min_gt_max",
       [](auto& j) {
         j.spec.resources.gpus_per_task = {4, 2};
       },
       "spec.resources.gpusPerTask", "min must not exceed max"},
      {"quota_vs_min",
       [](auto& j) {
         j.spec.resources.gpus_per_task = {8, 8};
         j.spec.profiling.gpu_counts = {8};
       },
       "spec.resources.gpuQuota", "must be at least gpusPerTask.min"},
      {"quota_zero", [](auto& j) { j.spec.resources.gpu_quota = 0; }, "spec.resources.gpuQuota",
       "must be at least 1"},
      {"gpu_resource_name", [](auto& j) { j.spec.resources.gpu_resource_name = ""; },
       "spec.resources.gpuResourceName", "required value"},
      {"image", [](auto& j) { j.spec.resources.image = ""; }, "spec.resources.image",
       "required value"},
      {"node_selector_key", [](auto& j) { j.spec.resources.node_selector[""] = "x"; },
       "spec.resources.nodeSelector", "keys must not be empty"},
      {"toleration_operator",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"k", "In", "", "", {}}};
       },
       "spec.resources.tolerations[0].operator", "unsupported value \"In\""},
      {"toleration_exists_value",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"k", "Exists", "v", "", {}}};
       },
       "spec.resources.tolerations[0].value", "must be empty when operator is Exists"},
      {"toleration_empty_key",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"", "Equal", "", "", {}}};
       },
       "spec.resources.tolerations[0].operator", "must be Exists when key is empty"},
      {"toleration_effect",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"k", "Equal", "", "Never", {}}};
       },
       "spec.resources.tolerations[0].effect", "unsupported value"},
      // ---- what reaches a worker pod (issue 21): refused here, not at pod create ----
      {"node_selector_key_space",
       [](auto& j) { j.spec.resources.node_selector["bad key"] = "a100"; },
       "spec.resources.nodeSelector[bad key]", "\"bad key\" is not a valid label key"},
      {"node_selector_key_two_slashes",
       [](auto& j) { j.spec.resources.node_selector["a/b/c"] = "x"; },
       "spec.resources.nodeSelector[a/b/c]", "not a valid label key"},
      {"node_selector_key_prefix_upper",
       [](auto& j) { j.spec.resources.node_selector["Orrery.dev/pool"] = "x"; },
       "spec.resources.nodeSelector[Orrery.dev/pool]", "not a valid label key"},
      {"node_selector_key_name_long",
       [](auto& j) { j.spec.resources.node_selector["orrery.dev/" + std::string(64, 'k')] = "x"; },
       "spec.resources.nodeSelector[orrery.dev/"
       "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk]",
       "not a valid label key"},
      {"node_selector_value_long",
       [](auto& j) { j.spec.resources.node_selector["pool"] = std::string(64, 'v'); },
       "spec.resources.nodeSelector[pool]", "is not a valid label value"},
      {"node_selector_value_chars",
       [](auto& j) { j.spec.resources.node_selector["pool"] = "a100/80g"; },
       "spec.resources.nodeSelector[pool]", "\"a100/80g\" is not a valid label value"},
      {"node_selector_entries",
       [](auto& j) {
         for (int i = 0; i < 65; ++i) j.spec.resources.node_selector["k" + std::to_string(i)] = "v";
       },
       "spec.resources.nodeSelector", "must have at most 64 items, has 65"},
      {"toleration_key_syntax",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"bad key!", "Exists", "", "", {}}};
       },
       "spec.resources.tolerations[0].key", "\"bad key!\" is not a valid taint key"},
      {"toleration_value_syntax",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"team", "Equal", "a b", "NoSchedule", {}}};
       },
       "spec.resources.tolerations[0].value", "\"a b\" is not a valid taint value"},
      {"toleration_seconds_without_no_execute",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"k", "Exists", "", "NoSchedule", 30}};
       },
       "spec.resources.tolerations[0].tolerationSeconds", "applies only to effect NoExecute"},
      {"toleration_seconds_all_effects",
       [](auto& j) {
         j.spec.resources.tolerations = {Toleration{"k", "Exists", "", "", 30}};
       },
       "spec.resources.tolerations[0].tolerationSeconds", "applies only to effect NoExecute"},
      {"image_upper_case",
       [](auto& j) { j.spec.resources.image = "registry.example.com/Orrery/Worker:1"; },
       "spec.resources.image", "has an upper-case repository name"},
      {"image_space",
       [](auto& j) { j.spec.resources.image = "registry.example.com/orrery/worker :1"; },
       "spec.resources.image", "must not contain spaces"},
      {"image_tag", [](auto& j) { j.spec.resources.image = "registry.example.com/orrery/worker:"; },
       "spec.resources.image", "has a malformed tag"},
      {"image_tag_long",
       [](auto& j) { j.spec.resources.image = "worker:" + std::string(129, 't'); },
       "spec.resources.image", "has a malformed tag"},
      {"image_digest",
       [](auto& j) { j.spec.resources.image = "registry.example.com/orrery/worker@sha256:abc"; },
       "spec.resources.image", "has a malformed digest"},
      {"image_registry",
       [](auto& j) { j.spec.resources.image = "registry.example.com:https/worker"; },
       "spec.resources.image", "has a malformed registry"},
      {"image_component",
       [](auto& j) { j.spec.resources.image = "registry.example.com/orrery/-worker"; },
       "spec.resources.image", "has a malformed repository component \"-worker\""},
      {"image_name_long", [](auto& j) { j.spec.resources.image = "r/" + std::string(260, 'w'); },
       "spec.resources.image", "longer than 255 characters"},
      {"gpu_resource_bare", [](auto& j) { j.spec.resources.gpu_resource_name = "gpu"; },
       "spec.resources.gpuResourceName", "is a native resource"},
      {"gpu_resource_native", [](auto& j) { j.spec.resources.gpu_resource_name = "cpu"; },
       "spec.resources.gpuResourceName", "\"cpu\" is not an extended resource name"},
      {"gpu_resource_kubernetes_io",
       [](auto& j) { j.spec.resources.gpu_resource_name = "kubernetes.io/gpu"; },
       "spec.resources.gpuResourceName", "under kubernetes.io/"},
      {"gpu_resource_requests",
       [](auto& j) { j.spec.resources.gpu_resource_name = "requests.nvidia.com/gpu"; },
       "spec.resources.gpuResourceName", "not an extended resource name"},
      {"gpu_resource_syntax",
       [](auto& j) { j.spec.resources.gpu_resource_name = "nvidia.com/gpu 80g"; },
       "spec.resources.gpuResourceName", "a domain, '/', then at most 63"},
      {"checkpoint_path_colon", [](auto& j) { j.spec.checkpoints.path = "/ckpt:rw"; },
       "spec.checkpoints.path", "must not contain ':'"},
      {"checkpoint_path_dotdot", [](auto& j) { j.spec.checkpoints.path = "/data/../ckpt"; },
       "spec.checkpoints.path", "must be a clean path"},
      {"checkpoint_path_root", [](auto& j) { j.spec.checkpoints.path = "/"; },
       "spec.checkpoints.path", "must not be /"},
      {"checkpoint_path_tmp", [](auto& j) { j.spec.checkpoints.path = "/tmp"; },
       "spec.checkpoints.path", "is already a mount of the worker pods (scratch space)"},
      {"checkpoint_path_shm", [](auto& j) { j.spec.checkpoints.path = "/dev/shm/"; },
       "spec.checkpoints.path", "is already a mount of the worker pods (scratch space)"},
      {"model_mount_colon",
       [](auto& j) { Pretrained(j).model.pretrained->volume->mount_path = "/models:ro"; },
       "spec.tasks[0].model.pretrained.volume.mountPath", "must not contain ':'"},
      {"model_mount_dotdot",
       [](auto& j) { Pretrained(j).model.pretrained->volume->mount_path = "/data/../models"; },
       "spec.tasks[0].model.pretrained.volume.mountPath", "must be a clean absolute path"},
      {"solver_time", [](auto& j) { j.spec.scheduling.solver_time_limit_seconds = 0; },
       "spec.scheduling.solverTimeLimitSeconds", "must be at least 1"},
      {"replan_interval", [](auto& j) { j.spec.scheduling.replan_interval_seconds = 5; },
       "spec.scheduling.replanIntervalSeconds", "must be at least 10"},
      {"min_switch_gain", [](auto& j) { j.spec.scheduling.min_switch_gain = 2; },
       "spec.scheduling.minSwitchGain", "must be at most 1"},
      {"coalesce_window", [](auto& j) { j.spec.scheduling.coalesce_window_seconds = -1; },
       "spec.scheduling.coalesceWindowSeconds", "must be at least 0"},
      {"trial_steps", [](auto& j) { j.spec.profiling.trial_steps = 0; },
       "spec.profiling.trialSteps", "must be at least 1"},
      {"gpu_counts_range",
       [](auto& j) {
         j.spec.profiling.gpu_counts = {1, 16};
       },
       "spec.profiling.gpuCounts[1]", "must lie within resources.gpusPerTask [1, 8]"},
      {"gpu_counts_duplicate",
       [](auto& j) {
         j.spec.profiling.gpu_counts = {2, 2};
       },
       "spec.profiling.gpuCounts[1]", "duplicate value"},
      {"elastic_min", [](auto& j) { j.spec.elasticity.min_batch_size = 0; },
       "spec.elasticity.minBatchSize", "must be at least 1"},
      {"elastic_min_gt_max",
       [](auto& j) {
         j.spec.elasticity.min_batch_size = 64;
         j.spec.elasticity.max_batch_size = 32;
       },
       "spec.elasticity", "minBatchSize must not exceed maxBatchSize"},
      {"claim_name", [](auto& j) { j.spec.checkpoints.claim_name = "Bad_Claim"; },
       "spec.checkpoints.claimName", "not a valid PersistentVolumeClaim name"},
      {"checkpoint_path", [](auto& j) { j.spec.checkpoints.path = "ckpt"; },
       "spec.checkpoints.path", "must be an absolute path"},
      {"checkpoint_interval", [](auto& j) { j.spec.checkpoints.interval_steps = 0; },
       "spec.checkpoints.intervalSteps", "must be at least 1"},
      {"checkpoint_keep", [](auto& j) { j.spec.checkpoints.keep = 101; }, "spec.checkpoints.keep",
       "must be at most 100"},
      // ---- pre-trained models, fine-tuning, output (issue 19) ----
      {"pretrained_and_mlp",
       [](auto& j) {
         T(j).model.pretrained = PretrainedModel{"/m", 8, {}};
       },
       "spec.tasks[0].model", "must set exactly one of gpt, mlp, torchscript, pretrained"},
      {"pretrained_seq", [](auto& j) { Pretrained(j).model.pretrained->seq_len = 0; },
       "spec.tasks[0].model.pretrained.seqLen", "must be at least 1"},
      {"pretrained_path", [](auto& j) { Pretrained(j).model.pretrained->path = ""; },
       "spec.tasks[0].model.pretrained.path", "required value"},
      {"model_claim", [](auto& j) { Pretrained(j).model.pretrained->volume->claim_name = "M"; },
       "spec.tasks[0].model.pretrained.volume.claimName", "not a valid PersistentVolumeClaim"},
      {"model_claim_empty",
       [](auto& j) { Pretrained(j).model.pretrained->volume->claim_name = ""; },
       "spec.tasks[0].model.pretrained.volume.claimName", "required value"},
      {"model_mount_relative",
       [](auto& j) { Pretrained(j).model.pretrained->volume->mount_path = "models"; },
       "spec.tasks[0].model.pretrained.volume.mountPath", "must be a clean absolute path"},
      {"model_mount_root",
       [](auto& j) { Pretrained(j).model.pretrained->volume->mount_path = "/"; },
       "spec.tasks[0].model.pretrained.volume.mountPath", "other than /"},
      {"model_mount_is_checkpoints",
       [](auto& j) { Pretrained(j).model.pretrained->volume->mount_path = "/checkpoints"; },
       "spec.tasks[0].model.pretrained.volume.mountPath",
       "is already a mount of the worker pods (spec.checkpoints.path)"},
      {"model_path_off_volume",
       [](auto& j) { Pretrained(j).model.pretrained->path = "/data/llama"; },
       "spec.tasks[0].model.pretrained.path", "is not on the volume mounted at /models"},
      {"model_path_escapes", [](auto& j) { Pretrained(j).model.pretrained->path = "../llama"; },
       "spec.tasks[0].model.pretrained.path", "must stay inside the volume"},
      {"tokenizer_long",
       [](auto& j) {
         T(j).data = DataSpec{};
         T(j).data.text = TextData{"corpus.txt", std::string(1025, 't')};
       },
       "spec.tasks[0].data.text.tokenizer", "at most 1024 characters"},
      {"fine_tuning_mlp", [](auto& j) { T(j).fine_tuning = FineTuningSpec{}; },
       "spec.tasks[0].fineTuning", "applies only to transformer models"},
      {"lora_rank_zero",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, 0, Lora(0)};
       },
       "spec.tasks[0].fineTuning.lora.rank", "must be at least 1"},
      {"lora_rank_missing",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, 0, Lora(std::nullopt)};
       },
       "spec.tasks[0].fineTuning.lora.rank", "required value"},
      {"lora_alpha",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, 0, Lora(8)};
         T(j).fine_tuning->lora->alpha = 0;
       },
       "spec.tasks[0].fineTuning.lora.alpha", "must be greater than 0"},
      {"lora_target_of_gpt",
       [](auto& j) {
         Gpt(j).fine_tuning = FineTuningSpec{false, 0, Lora(8, {"q_proj"})};
       },
       "spec.tasks[0].fineTuning.lora.targets[0]",
       "'q_proj' is not a module of gpt2 (c_attn, c_proj, c_fc)"},
      {"lora_target_unknown",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, 0, Lora(8, {"q_proj", "q"})};
       },
       "spec.tasks[0].fineTuning.lora.targets[1]",
       "'q' is not a module of gpt2 (c_attn, c_proj, c_fc) or llama, qwen2, mistral (q_proj, "
       "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"},
      {"lora_target_duplicate",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, 0, Lora(8, {"v_proj", "v_proj"})};
       },
       "spec.tasks[0].fineTuning.lora.targets[1]", "duplicate value"},
      {"lora_with_freeze_blocks",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, 2, Lora(8)};
       },
       "spec.tasks[0].fineTuning.freezeBlocks", "has no effect with lora"},
      {"lora_with_freeze_embeddings",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{true, 0, Lora(8)};
       },
       "spec.tasks[0].fineTuning.freezeEmbeddings", "has no effect with lora"},
      {"freeze_blocks_past_layers",
       [](auto& j) {
         Gpt(j).fine_tuning = FineTuningSpec{false, 3, {}};
       },
       "spec.tasks[0].fineTuning.freezeBlocks", "must be at most the model's 2 blocks"},
      {"freeze_blocks_negative",
       [](auto& j) {
         Pretrained(j).fine_tuning = FineTuningSpec{false, -1, {}};
       },
       "spec.tasks[0].fineTuning.freezeBlocks", "must be at least 0"},
      {"output_mlp", [](auto& j) { T(j).output = OutputSpec{"/out/{task}"}; },
       "spec.tasks[0].output", "applies only to transformer models"},
      {"output_placeholder", [](auto& j) { Pretrained(j).output = OutputSpec{"/out/{name}"}; },
       "spec.tasks[0].output.path", "unknown placeholder"},
      {"output_sweep_shares_folder",
       [](auto& j) {
         Pretrained(j).output = OutputSpec{"/out/llama"};
         GridSpace g;
         g.learning_rate = {1e-4, 3e-4};
         T(j).search_space = SearchSpace{g, {}};
       },
       "spec.tasks[0].output.path", "the search space makes 2 tasks that would all write to"},
      {"output_merge_without_lora",
       [](auto& j) {
         Pretrained(j).output = OutputSpec{"/out/{task}"};
         T(j).output->merge_lora = true;
       },
       "spec.tasks[0].output.mergeLora", "applies only to LoRA fine-tuning"},
      {"output_mount_is_models",
       [](auto& j) {
         Pretrained(j).output =
             OutputSpec{"{task}", ExportDtype::kFloat32, false, OutputVolume{"o", "/models"}};
       },
       "spec.tasks[0].output.volume.mountPath", "is also model.pretrained.volume.mountPath"},
      {"output_off_volume",
       [](auto& j) {
         Pretrained(j).output =
             OutputSpec{"/elsewhere/{task}", ExportDtype::kFloat32, false, OutputVolume{"o"}};
       },
       "spec.tasks[0].output.path", "is not on the volume mounted at /outputs"},
      {"outputs_collide",
       [](auto& j) {
         Pretrained(j).output = OutputSpec{"/out/same"};
         TaskSpec other = T(j);
         other.name = "other";
         j.spec.tasks.push_back(other);
       },
       "spec.tasks[1].output.path", "would write its model to \"/out/same\", as task \"mlp\""},
      {"grid_lora_rank_mlp",
       [](auto& j) {
         GridSpace g;
         g.lora_rank = {4, 8};
         T(j).search_space = SearchSpace{g, {}};
       },
       "spec.tasks[0].searchSpace.grid.loraRank", "applies only to transformer models"},
      {"grid_lora_rank_zero",
       [](auto& j) {
         GridSpace g;
         g.lora_rank = {0, 8};
         Pretrained(j).search_space = SearchSpace{g, {}};
       },
       "spec.tasks[0].searchSpace.grid.loraRank[0]", "must be at least 1"},
      {"grid_freeze_blocks_past_layers",
       [](auto& j) {
         GridSpace g;
         g.freeze_blocks = {1, 4};
         Gpt(j).search_space = SearchSpace{g, {}};
       },
       "spec.tasks[0].searchSpace.grid.freezeBlocks[1]", "must be at most the model's 2 blocks"},
      {"grid_freeze_blocks_with_lora",
       [](auto& j) {
         GridSpace g;
         g.freeze_blocks = {1, 2};
         g.lora_rank = {8};
         Pretrained(j).search_space = SearchSpace{g, {}};
       },
       "spec.tasks[0].searchSpace.grid.freezeBlocks", "has no effect with lora"},
      {"grid_lora_rank_with_frozen_blocks",
       [](auto& j) {
         GridSpace g;
         g.lora_rank = {8};
         Pretrained(j).search_space = SearchSpace{g, {}};
         T(j).fine_tuning = FineTuningSpec{false, 2, {}};
       },
       "spec.tasks[0].searchSpace.grid.loraRank", "LoRA freezes every base parameter"},
      {"random_lora_rank_whole",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         Distribution d;
         d.values = {4.5};
         r.lora_rank = d;
         Pretrained(j).search_space = SearchSpace{{}, r};
       },
       "spec.tasks[0].searchSpace.random.loraRank.values[0]", "must be a whole number"},
      {"random_freeze_blocks_past_layers",
       [](auto& j) {
         RandomSpace r;
         r.count = 2;
         r.freeze_blocks = Range(0, 5);
         Gpt(j).search_space = SearchSpace{{}, r};
       },
       "spec.tasks[0].searchSpace.random.freezeBlocks", "must be at most the model's 2 blocks"},
  };
  return cases;
}

TEST(ValidationTest, ValidJobHasNoErrors) {
  auto errors = ValidateJob(Valid());
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_TRUE(CheckJob(Valid()).ok());
}

class RuleTest : public ::testing::TestWithParam<size_t> {};

TEST_P(RuleTest, RejectsTheBadCaseWithPathAndFix) {
  const Case& c = Cases()[GetParam()];
  ModelSelectionJob job = Valid();
  c.mutate(job);
  auto errors = ValidateJob(job);
  bool found = false;
  for (const FieldError& e : errors) {
    if (e.path == c.path && e.message.find(c.message) != std::string::npos) {
      found = true;
      EXPECT_FALSE(e.fix.empty()) << "no fix for " << FormatFieldError(e);
    }
  }
  EXPECT_TRUE(found) << c.name << ": expected " << c.path << ": ..." << c.message << "\ngot:\n"
                     << Dump(errors);
}

INSTANTIATE_TEST_SUITE_P(AllRules, RuleTest, ::testing::Range<size_t>(0, Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& param_info) {
                           return std::string(Cases()[param_info.param].name);
                         });

TEST(ValidationTest, FineTuningJobsThatAreValid) {
  // A LoRA sweep whose rank comes from the grid, exporting per task onto a
  // volume; a layer-wise fine-tune of Orrery's GPT writing under the
  // checkpoint volume; a random search over ranks.
  ModelSelectionJob job = Valid();
  GridSpace g;
  g.lora_rank = {4, 8, 16};
  g.learning_rate = {1e-4, 3e-4};
  Pretrained(job).fine_tuning = FineTuningSpec{false, 0, Lora(std::nullopt, {"q_proj", "o_proj"})};
  T(job).output = OutputSpec{"runs/{task}", ExportDtype::kBfloat16, true, OutputVolume{"results"}};
  T(job).search_space = SearchSpace{g, {}};
  TaskSpec gpt = T(job);
  gpt.name = "gpt";
  gpt.model = ModelSpec{};
  gpt.model.gpt = GptModel{4, 64, 4, 32, 256};
  gpt.fine_tuning = FineTuningSpec{true, 2, {}};
  gpt.output = OutputSpec{"/checkpoints/models/gpt"};
  gpt.search_space.reset();
  job.spec.tasks.push_back(gpt);
  TaskSpec random = T(job);
  random.name = "random";
  RandomSpace r;
  r.count = 3;
  r.lora_rank = Range(2, 64, true);
  random.search_space = SearchSpace{{}, r};
  job.spec.tasks.push_back(random);
  auto errors = ValidateJob(job);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
}

TEST(ValidationTest, ReportsEveryErrorNotJustTheFirst) {
  ModelSelectionJob job = Valid();
  job.spec.tasks[0].training.batch_size = 0;
  job.spec.resources.gpu_quota = 0;
  job.spec.checkpoints.keep = 0;
  auto errors = ValidateJob(job);
  EXPECT_EQ(errors.size(), 3u) << Dump(errors);
  Status s = CheckJob(job);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("spec.tasks[0].training.batchSize: must be at least 1 (fix: "),
            std::string::npos)
      << s;
}

TEST(ValidationTest, Dns1123) {
  EXPECT_TRUE(IsDns1123Label("a-1"));
  EXPECT_FALSE(IsDns1123Label("-a"));
  EXPECT_FALSE(IsDns1123Label("a-"));
  EXPECT_FALSE(IsDns1123Label("A"));
  EXPECT_FALSE(IsDns1123Label(std::string(64, 'a')));
  EXPECT_TRUE(IsDns1123Subdomain("a.b-c.d"));
  EXPECT_FALSE(IsDns1123Subdomain("a..b"));
  EXPECT_FALSE(IsDns1123Subdomain(""));
}

}  // namespace
}  // namespace orrery::api
