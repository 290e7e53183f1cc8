// How a task of a ModelSelectionJob becomes an `orrery-worker` command line, for
// both worlds that launch workers: the local runner (processes) and the Kubernetes
// controller (pod args). Also the signature the profile cache is keyed by, and the
// amount of work a task is, in samples. Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "operator/api/expand.h"
#include "operator/api/types.h"
#include "worker/contract/templates.h"

namespace orrery::engine {

// One configuration to run a task in (what the planner chose) and where its
// state lives.
struct LaunchConfig {
  std::string template_name;  // ddp | fsdp | pipeline | tensor | spill
  // Activation recomputation (planner::Config::recompute); "" passes none and
  // the worker takes the template's default.
  std::string recompute;
  int gpus = 1;            // ranks
  int64_t batch_size = 0;  // global; 0 = the task's own
  // Optimizer steps in all (the worker's count carries on across a resume, also
  // one at another batch); 0 = the task's own budget (--steps or --epochs). The
  // local runner gives an elastic task at another batch StepsForBudget
  // (profile_configs.h), from the checkpoint its worker last reported.
  int64_t steps = 0;
  // Samples in all (--samples, counted across resumes at any batch); > 0 takes
  // the place of steps and epochs. The worker computes the steps that finish
  // them from the samples its checkpoint recorded, exactly.
  int64_t samples = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps; 0 = only on signal and at the end
  int keep = 2;
  int report_every = 10;  // steps between progress lines
  int threads = 1;        // intra-op threads per rank
  // Relative data, TorchScript, pre-trained model, tokenizer and output paths
  // (not on a volume) are resolved against this folder (the folder of the job
  // file locally); "" leaves them (a pod: the worker's working directory).
  std::string base_dir;
  api::LrScaling lr_scaling = api::LrScaling::kNone;
  // What each rank computes on: "cpu", "cuda" (rank r of a pod or process uses
  // the one GPU it was given), or "" to pass no --device (the worker's CPU
  // default). Pods that talk NCCL must say "cuda".
  std::string device;
};

// The learning rate for a run at global `batch` of a task tuned at `tuned_batch`
// under `rule` (none: unchanged). A fresh start at another batch gets it as
// --lr; a resume takes the checkpoint's base rate and the worker rescales that
// by the same rule, so both paths agree.
double ScaledLearningRate(double learning_rate, api::LrScaling rule, int64_t batch,
                          int64_t tuned_batch);

// Flags for `orrery-worker train` (without the subcommand). With a batch other
// than the task's own, --lr is ScaledLearningRate, --lr-scaling tells a resume
// how to rescale and --warmup-steps keeps the warm-up's samples; with
// config.steps set, --steps replaces --epochs.
std::vector<std::string> TrainFlags(const api::ExpandedTask& task, const LaunchConfig& config);

// The folder a task's trained model is exported to (its output spec's, {task}
// already replaced by expansion, inside its volume, relative paths resolved
// against `base_dir` like data paths), or "" when the task exports nothing.
// TrainFlags passes it as --export-dir with --export-dtype (and --export-merged
// for mergeLora); profiles never export.
std::string ExportDir(const api::ExpandedTask& task, const std::string& base_dir);

// Flags for `orrery-worker profile`: the same task, `trial_steps` timed steps
// after a short warm-up, no checkpoints.
std::vector<std::string> ProfileFlags(const api::ExpandedTask& task, const LaunchConfig& config,
                                      int trial_steps);

// What profiling results are keyed by: everything that changes a step's time
// (model shape or pre-trained directory and window, what fine-tuning trains,
// data kind and vocabulary, global batch), nothing that does not (learning
// rate, seeds, LoRA alpha). Tasks with equal signatures share one profile.
std::string ModelSignature(const api::TaskSpec& task);

// Optimizer steps the task runs; epochs are converted with the dataset size when
// it is known from the spec (synthetic data), else `dataset_samples` (0 = unknown:
// one epoch counts as 1000 steps, a placeholder the first progress report
// corrects).
int64_t TotalSteps(const api::TaskSpec& task, int64_t dataset_samples = 0);

}  // namespace orrery::engine
