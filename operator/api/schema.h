// The one list of the ModelSelectionJob's enums, defaults and limits. The C++
// types (types.h) take their initialisers from here, validation.cc checks against
// kLimits, and tests/operator/api/crd_consistency_test.cc checks that crds/ says
// exactly the same, so the API server and `orrery validate` cannot drift apart.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "worker/contract/templates.h"

namespace orrery::api {

// ---- enums ----------------------------------------------------------------
enum class Template { kDdp, kFsdp, kPipeline, kTensor, kSpill };
enum class Optimizer { kSgd, kAdam, kAdamW };
enum class LrSchedule { kConstant, kCosine, kLinear };
enum class Precision { kFp32, kBf16 };
enum class TokenDtype { kUint16, kUint32 };
enum class Objective { kMakespan, kWeightedCompletionTime };
enum class LrScaling { kNone, kLinear, kSqrt };
enum class Phase { kPending, kProfiling, kPlanning, kRunning, kSuspended, kSucceeded, kFailed };
enum class TaskState { kPending, kProfiling, kQueued, kRunning, kRescaling, kSucceeded, kFailed };
enum class ExportDtype { kFloat32, kBfloat16, kFloat16 };

// EnumNames<E>::kNames[i] is the wire name of the enumerator with value i.
template <typename E>
struct EnumNames;
template <>
struct EnumNames<Template> {
  // The plannable rows of the template table (worker/contract/templates.h).
  static constexpr auto kNames = contract::kPlannableTemplates;
};
static_assert(EnumNames<Template>::kNames[static_cast<size_t>(Template::kDdp)] == "ddp" &&
                  EnumNames<Template>::kNames[static_cast<size_t>(Template::kFsdp)] == "fsdp" &&
                  EnumNames<Template>::kNames[static_cast<size_t>(Template::kPipeline)] ==
                      "pipeline" &&
                  EnumNames<Template>::kNames[static_cast<size_t>(Template::kTensor)] == "tensor" &&
                  EnumNames<Template>::kNames[static_cast<size_t>(Template::kSpill)] == "spill",
              "api::Template's enumerators follow the template table's plannable rows");
template <>
struct EnumNames<Optimizer> {
  static constexpr std::array<std::string_view, 3> kNames = {"sgd", "adam", "adamw"};
};
template <>
struct EnumNames<LrSchedule> {
  static constexpr std::array<std::string_view, 3> kNames = {"constant", "cosine", "linear"};
};
template <>
struct EnumNames<Precision> {
  static constexpr std::array<std::string_view, 2> kNames = {"fp32", "bf16"};
};
template <>
struct EnumNames<TokenDtype> {
  static constexpr std::array<std::string_view, 2> kNames = {"uint16", "uint32"};
};
template <>
struct EnumNames<Objective> {
  static constexpr std::array<std::string_view, 2> kNames = {"makespan", "weightedCompletionTime"};
};
template <>
struct EnumNames<LrScaling> {
  static constexpr std::array<std::string_view, 3> kNames = {"none", "linear", "sqrt"};
};
template <>
struct EnumNames<Phase> {
  static constexpr std::array<std::string_view, 7> kNames = {
      "Pending", "Profiling", "Planning", "Running", "Suspended", "Succeeded", "Failed"};
};
template <>
struct EnumNames<TaskState> {
  static constexpr std::array<std::string_view, 7> kNames = {
      "Pending", "Profiling", "Queued", "Running", "Rescaling", "Succeeded", "Failed"};
};

template <>
struct EnumNames<ExportDtype> {
  static constexpr std::array<std::string_view, 3> kNames = {"float32", "bfloat16", "float16"};
};

template <typename E>
std::string_view EnumName(E value) {
  return EnumNames<E>::kNames[static_cast<size_t>(value)];
}

template <typename E>
std::optional<E> ParseEnum(std::string_view name) {
  for (size_t i = 0; i < EnumNames<E>::kNames.size(); ++i) {
    if (EnumNames<E>::kNames[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

template <typename E>
std::vector<std::string> EnumNameList() {
  return {EnumNames<E>::kNames.begin(), EnumNames<E>::kNames.end()};
}

// "ddp, fsdp, pipeline, tensor, spill"
template <typename E>
std::string EnumNamesJoined() {
  std::string out;
  for (auto n : EnumNames<E>::kNames) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// ---- defaults -------------------------------------------------------------
inline constexpr TokenDtype kDefaultTokenDtype = TokenDtype::kUint16;
inline constexpr int kDefaultSyntheticVocabSize = 256;
inline constexpr int64_t kDefaultSyntheticSamples = 65536;
inline constexpr Optimizer kDefaultOptimizer = Optimizer::kAdamW;
inline constexpr double kDefaultWeightDecay = 0.0;
inline constexpr double kDefaultMomentum = 0.9;
inline constexpr LrSchedule kDefaultLrSchedule = LrSchedule::kConstant;
inline constexpr Precision kDefaultPrecision = Precision::kFp32;
inline constexpr int64_t kDefaultWarmupSteps = 0;
inline constexpr double kDefaultTaskWeight = 1.0;
inline constexpr int kDefaultGpusPerTaskMin = 1;
inline constexpr int kDefaultGpusPerTaskMax = 8;
inline constexpr const char* kDefaultGpuResourceName = "nvidia.com/gpu";
inline constexpr const char* kDefaultWorkerImage = "orrery/worker:0.1.0";
inline constexpr Objective kDefaultObjective = Objective::kMakespan;
inline constexpr int kDefaultSolverTimeLimitSeconds = 30;
inline constexpr int kDefaultReplanIntervalSeconds = 300;
inline constexpr double kDefaultMinSwitchGain = 0.05;
inline constexpr int kDefaultTrialSteps = 20;
inline constexpr LrScaling kDefaultLrScaling = LrScaling::kLinear;
inline constexpr const char* kDefaultCheckpointPath = "/checkpoints";
inline constexpr int64_t kDefaultCheckpointIntervalSteps = 500;
inline constexpr int kDefaultCheckpointKeep = 3;
// Where a task's volumes are mounted when the spec names no mountPath.
inline constexpr const char* kDefaultModelMountPath = "/models";
inline constexpr const char* kDefaultOutputMountPath = "/outputs";
inline constexpr ExportDtype kDefaultExportDtype = ExportDtype::kFloat32;
inline constexpr bool kDefaultMergeLora = false;
inline constexpr double kDefaultLoraAlpha = 16;  // the worker's default (model.h FineTuneConfig)
inline constexpr int kDefaultFreezeBlocks = 0;
inline constexpr bool kDefaultFreezeEmbeddings = false;

inline std::vector<Template> DefaultTemplates() {
  return {Template::kDdp, Template::kFsdp, Template::kPipeline, Template::kTensor,
          Template::kSpill};
}

// ---- limits ---------------------------------------------------------------
// The hard cap on tasks after search-space expansion, over the whole job: the
// planner's MILP grows with tasks x configurations, and one status object must
// stay well under etcd's 1.5 MiB object limit.
inline constexpr int kMaxExpandedTasks = 512;
inline constexpr int kMaxTasks = 64;           // spec.tasks entries
inline constexpr int kMaxTaskNameLength = 40;  // leaves room for "-r511" etc. in a 63-char label
inline constexpr int kMaxExpandedNameLength = 63;  // a DNS-1123 label

// What a limit bounds: a number's value, a list's length, a string's length, a
// map's entries.
enum class LimitKind { kValue, kItems, kLength, kProperties };

// One bound, named by its schema path: "spec.tasks[].training.batchSize" with
// "[]" for any list index and "{}" for any map key.
struct Limit {
  std::string_view path;
  LimitKind kind;
  std::optional<double> min;
  std::optional<double> max;
  bool exclusive_min = false;
};

inline constexpr Limit kLimits[] = {
    {"spec.tasks", LimitKind::kItems, 1, kMaxTasks},
    {"spec.tasks[].name", LimitKind::kLength, 1, kMaxTaskNameLength},
    {"spec.tasks[].weight", LimitKind::kValue, 0, 1e6, true},
    {"spec.tasks[].model.gpt.layers", LimitKind::kValue, 1, 1024},
    {"spec.tasks[].model.gpt.hidden", LimitKind::kValue, 1, 65536},
    {"spec.tasks[].model.gpt.heads", LimitKind::kValue, 1, 1024},
    {"spec.tasks[].model.gpt.seqLen", LimitKind::kValue, 1, 1048576},
    {"spec.tasks[].model.gpt.vocab", LimitKind::kValue, 2, 1048576},
    {"spec.tasks[].model.mlp.layers", LimitKind::kValue, 1, 1024},
    {"spec.tasks[].model.mlp.hidden", LimitKind::kValue, 1, 1048576},
    {"spec.tasks[].model.mlp.inputs", LimitKind::kValue, 1, 1048576},
    {"spec.tasks[].model.mlp.outputs", LimitKind::kValue, 1, 1048576},
    {"spec.tasks[].model.torchscript.path", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].model.pretrained.path", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].model.pretrained.seqLen", LimitKind::kValue, 1, 1048576},
    {"spec.tasks[].model.pretrained.volume.claimName", LimitKind::kLength, 1, 253},
    {"spec.tasks[].model.pretrained.volume.mountPath", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].data.tokens.path", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].data.text.path", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].data.text.tokenizer", LimitKind::kLength, std::nullopt, 1024},
    {"spec.tasks[].data.synthetic.seed", LimitKind::kValue, 0, std::nullopt},
    {"spec.tasks[].data.synthetic.vocabSize", LimitKind::kValue, 2, 1048576},
    {"spec.tasks[].data.synthetic.samples", LimitKind::kValue, 1, 1e12},
    {"spec.tasks[].training.steps", LimitKind::kValue, 1, 1e12},
    {"spec.tasks[].training.epochs", LimitKind::kValue, 1, 1e6},
    {"spec.tasks[].training.batchSize", LimitKind::kValue, 1, 1048576},
    {"spec.tasks[].training.learningRate", LimitKind::kValue, 0, 10, true},
    {"spec.tasks[].training.weightDecay", LimitKind::kValue, 0, 10},
    {"spec.tasks[].training.momentum", LimitKind::kValue, 0, 1},
    {"spec.tasks[].training.warmupSteps", LimitKind::kValue, 0, 1e12},
    {"spec.tasks[].fineTuning.freezeBlocks", LimitKind::kValue, 0, 1024},
    {"spec.tasks[].fineTuning.lora.rank", LimitKind::kValue, 1, 4096},
    {"spec.tasks[].fineTuning.lora.alpha", LimitKind::kValue, 0, 1e6, true},
    {"spec.tasks[].fineTuning.lora.targets", LimitKind::kItems, std::nullopt, 16},
    {"spec.tasks[].fineTuning.lora.targets[]", LimitKind::kLength, 1, 128},
    {"spec.tasks[].gpuTypes", LimitKind::kItems, std::nullopt, 16},
    {"spec.tasks[].gpuTypes[]", LimitKind::kLength, 1, 63},
    {"spec.tasks[].output.path", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].output.volume.claimName", LimitKind::kLength, 1, 253},
    {"spec.tasks[].output.volume.mountPath", LimitKind::kLength, 1, 1024},
    {"spec.tasks[].searchSpace.grid.learningRate", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.grid.batchSize", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.grid.weightDecay", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.grid.warmupSteps", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.grid.optimizer", LimitKind::kItems, 1, 3},
    {"spec.tasks[].searchSpace.grid.loraRank", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.grid.freezeBlocks", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.random.seed", LimitKind::kValue, 0, std::nullopt},
    {"spec.tasks[].searchSpace.random.count", LimitKind::kValue, 1, kMaxExpandedTasks},
    {"spec.tasks[].searchSpace.random.learningRate.values", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.random.batchSize.values", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.random.weightDecay.values", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.random.warmupSteps.values", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.random.loraRank.values", LimitKind::kItems, 1, 64},
    {"spec.tasks[].searchSpace.random.freezeBlocks.values", LimitKind::kItems, 1, 64},
    {"spec.resources.templates", LimitKind::kItems, 1, 5},
    {"spec.resources.gpusPerTask.min", LimitKind::kValue, 1, 1024},
    {"spec.resources.gpusPerTask.max", LimitKind::kValue, 1, 1024},
    {"spec.resources.gpuQuota", LimitKind::kValue, 1, 100000},
    {"spec.resources.gpuResourceName", LimitKind::kLength, 1, 253},
    {"spec.resources.image", LimitKind::kLength, 1, 1024},
    {"spec.resources.nodeSelector", LimitKind::kProperties, std::nullopt, 64},
    {"spec.resources.tolerations", LimitKind::kItems, std::nullopt, 32},
    {"spec.scheduling.solverTimeLimitSeconds", LimitKind::kValue, 1, 3600},
    {"spec.scheduling.replanIntervalSeconds", LimitKind::kValue, 10, 86400},
    {"spec.scheduling.minSwitchGain", LimitKind::kValue, 0, 1},
    {"spec.scheduling.coalesceWindowSeconds", LimitKind::kValue, 0, 3600},
    {"spec.profiling.trialSteps", LimitKind::kValue, 1, 10000},
    {"spec.profiling.gpuCounts", LimitKind::kItems, std::nullopt, 16},
    {"spec.elasticity.minBatchSize", LimitKind::kValue, 1, 1048576},
    {"spec.elasticity.maxBatchSize", LimitKind::kValue, 1, 1048576},
    {"spec.checkpoints.claimName", LimitKind::kLength, std::nullopt, 253},
    {"spec.checkpoints.path", LimitKind::kLength, 1, 1024},
    {"spec.checkpoints.intervalSteps", LimitKind::kValue, 1, 1e12},
    {"spec.checkpoints.keep", LimitKind::kValue, 1, 100},
};

// ---- patterns -------------------------------------------------------------
// The syntax of what goes into a worker pod as the API server and the kubelet
// check it. The CRD carries these exact strings as `pattern:` (RE2); validation.cc
// checks the same grammar by hand, with messages that say which part is wrong
// (IsLabelValue, IsLabelKey, IsExtendedResourceName, ImageReferenceProblem in
// validation.h). tests/operator/api/schema_test.cc checks both: the strings are
// in the CRD, and each agrees with its C++ check on a table of samples.
//
// A label value: at most 63 (maxLength) of [A-Za-z0-9-_.], alphanumeric at both
// ends, or empty.
inline constexpr const char* kLabelValuePattern =
    R"(^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$)";
// A label key (a qualified name): an optional DNS-1123 subdomain prefix and '/',
// then a name of at most 63 characters. (The prefix's 253-character bound is
// validation's: a pattern cannot count it.)
inline constexpr const char* kLabelKeyPattern =
    R"(^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$)";
// A toleration's key: a label key, or empty (with operator Exists).
inline constexpr const char* kTolerationKeyPattern =
    R"(^(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$)";
// An extended resource: a label key whose prefix is required (a bare name is a
// native resource such as cpu).
inline constexpr const char* kExtendedResourcePattern =
    R"(^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$)";
// A container image reference as the kubelet parses it (distribution's
// reference grammar): [registry[:port]/]repository[:tag][@digest], the
// repository lower case, a digest one the kubelet can verify.
inline constexpr const char* kImagePattern =
    R"(^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?/)?[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?$)";

// The limit at `path`; aborts when there is none (a programming error, caught by tests).
const Limit& LimitFor(std::string_view path);

}  // namespace orrery::api
