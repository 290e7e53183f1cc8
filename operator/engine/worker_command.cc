#include "operator/engine/worker_command.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "operator/api/paths.h"
#include "worker/contract/worker_args.h"

namespace orrery::engine {
namespace {

std::string Resolve(const std::string& base, const std::string& path) {
  if (base.empty() || path.empty() || path.front() == '/') return path;
  return base + "/" + path;
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

// What every worker command of this task shares: model, data, optimizer.
contract::WorkerArgs CommonArgs(const api::ExpandedTask& expanded, const LaunchConfig& c) {
  const api::TaskSpec& t = expanded.task;
  contract::WorkerArgs f;
  const api::ModelSpec& m = t.model;
  if (m.gpt) {
    f.model = "gpt";
    f.layers = m.gpt->layers;
    f.hidden = m.gpt->hidden;
    f.heads = m.gpt->heads;
    f.seq = m.gpt->seq_len;
    f.vocab = m.gpt->vocab;
  } else if (m.mlp) {
    f.model = "mlp";
    f.mlp_input = m.mlp->inputs;
    f.mlp_hidden = m.mlp->hidden;
    f.mlp_layers = m.mlp->layers;
    f.classes = m.mlp->outputs;
  } else if (m.torchscript) {
    f.model = "torchscript";
    f.torchscript = Resolve(c.base_dir, m.torchscript->path);
    f.torchscript_like = "gpt";
  } else if (m.pretrained) {
    // config.json sets the architecture: passing its sizes too would only
    // give the worker something to disagree with.
    f.model = "gpt";
    f.pretrained = Resolve(c.base_dir, api::ModelDirectory(*m.pretrained));
    f.seq = m.pretrained->seq_len;
  }
  // What the run trains changes its step time and memory: profiles and
  // training runs carry it alike.
  if (t.fine_tuning) {
    const api::FineTuningSpec& ft = *t.fine_tuning;
    f.freeze_embeddings = ft.freeze_embeddings;
    if (ft.freeze_blocks > 0) f.freeze_blocks = ft.freeze_blocks;
    if (ft.lora && ft.lora->rank) {
      f.lora_rank = *ft.lora->rank;
      f.lora_alpha = ft.lora->alpha;
      if (!ft.lora->targets.empty()) f.lora_targets = ft.lora->targets;
    }
  }

  const api::DataSpec& d = t.data;
  int64_t seed = 0;
  if (d.synthetic) {
    f.data = "synthetic";
    f.data_samples = d.synthetic->samples;
    seed = d.synthetic->seed;
  } else if (d.tokens) {
    f.data = "tokens";
    f.data_path = Resolve(c.base_dir, d.tokens->path);
    f.token_bytes = d.tokens->dtype == api::TokenDtype::kUint32 ? 4 : 2;
  } else if (d.text) {
    f.data = "text";
    f.data_path = Resolve(c.base_dir, d.text->path);
    if (!d.text->tokenizer.empty()) f.tokenizer = Resolve(c.base_dir, d.text->tokenizer);
  }
  f.seed = seed;

  const api::TrainingSpec& tr = t.training;
  const int64_t batch = c.batch_size > 0 ? c.batch_size : tr.batch_size;
  // The worker has SGD and AdamW; Adam is AdamW's update with the decay applied
  // as decoupled weight decay (Loshchilov & Hutter 2019), which is what
  // "adam with weight decay" means in most current training code.
  f.optimizer = tr.optimizer == api::Optimizer::kSgd ? "sgd" : "adamw";
  f.lr = ScaledLearningRate(tr.learning_rate, c.lr_scaling, batch, tr.batch_size);
  f.weight_decay = tr.weight_decay;
  if (tr.optimizer == api::Optimizer::kSgd) f.momentum = tr.momentum;
  // Warm-up is tuned in steps of the task's own batch; at another batch it
  // keeps its length in samples (Goyal et al. 2017 count it in epochs).
  int64_t warmup = tr.warmup_steps;
  if (batch != tr.batch_size && tr.batch_size > 0 && batch > 0) {
    warmup = (tr.warmup_steps * tr.batch_size + batch - 1) / batch;
  }
  f.warmup_steps = warmup;
  f.decay = std::string(api::EnumName(tr.schedule));
  f.precision = std::string(api::EnumName(tr.precision));
  f.batch = batch;
  f.template_name = contract::WorkerTemplate(c.template_name, c.gpus);
  // Pipelines run 1F1B (PipeDream-Flush, Narayanan et al. 2021): the same
  // gradients as GPipe with at most pp - stage micro-batches of activations held
  // instead of all of them, so the memory a profile measures is 1F1B's too.
  const contract::TemplateTraits* traits = contract::FindTemplate(*f.template_name);
  if (traits != nullptr && traits->axis == contract::WorldAxis::kPipeline) {
    f.pipeline_schedule = "1f1b";
  }
  f.threads = c.threads;
  if (!c.device.empty()) f.device = c.device;
  if (!c.recompute.empty()) f.recompute = c.recompute;
  return f;
}

}  // namespace

double ScaledLearningRate(double learning_rate, api::LrScaling rule, int64_t batch,
                          int64_t tuned_batch) {
  if (batch <= 0 || tuned_batch <= 0 || batch == tuned_batch) return learning_rate;
  double ratio = static_cast<double>(batch) / static_cast<double>(tuned_batch);
  switch (rule) {
    case api::LrScaling::kLinear: return learning_rate * ratio;
    case api::LrScaling::kSqrt: return learning_rate * std::sqrt(ratio);
    case api::LrScaling::kNone: break;
  }
  return learning_rate;
}

std::vector<std::string> TrainFlags(const api::ExpandedTask& task, const LaunchConfig& config) {
  contract::WorkerArgs f = CommonArgs(task, config);
  const api::TrainingSpec& tr = task.task.training;
  if (config.samples > 0) {
    f.samples = config.samples;
  } else if (config.steps > 0) {
    f.steps = config.steps;
  } else if (tr.epochs) {
    f.epochs = *tr.epochs;
  } else {
    f.steps = tr.steps.value_or(0);
  }
  f.report_every = config.report_every;
  if (!config.checkpoint_dir.empty()) {
    f.checkpoint_dir = config.checkpoint_dir;
    f.checkpoint_every = config.checkpoint_every;
    f.keep = config.keep;
  }
  f.lr_scaling = std::string(api::EnumName(config.lr_scaling));
  if (const std::string dir = ExportDir(task, config.base_dir); !dir.empty()) {
    const api::OutputSpec& o = *task.task.output;
    f.export_dir = dir;
    f.export_dtype = std::string(api::EnumName(o.dtype));
    f.export_merged = o.merge_lora;
  }
  return contract::ToArgs(f);
}

std::string ExportDir(const api::ExpandedTask& task, const std::string& base_dir) {
  if (!task.task.output) return "";
  return Resolve(base_dir, api::OutputDirectory(*task.task.output));
}

std::vector<std::string> ProfileFlags(const api::ExpandedTask& task, const LaunchConfig& config,
                                      int trial_steps) {
  contract::WorkerArgs f = CommonArgs(task, config);
  // Saturn profiles a handful of steps after warm-up; a third of the trial (at
  // least one step) warms up the allocator and caches.
  f.profile_warmup = std::max(1, trial_steps / 3);
  f.profile_steps = std::max(1, trial_steps);
  return contract::ToArgs(f);
}

std::string ModelSignature(const api::TaskSpec& t) {
  std::ostringstream os;
  const api::ModelSpec& m = t.model;
  if (m.gpt) {
    os << "gpt-l" << m.gpt->layers << "-h" << m.gpt->hidden << "-a" << m.gpt->heads << "-s"
       << m.gpt->seq_len << "-v" << m.gpt->vocab;
  } else if (m.mlp) {
    os << "mlp-l" << m.mlp->layers << "-h" << m.mlp->hidden << "-i" << m.mlp->inputs << "-o"
       << m.mlp->outputs;
  } else if (m.torchscript) {
    os << "ts-" << m.torchscript->path;
  } else if (m.pretrained) {
    os << "hf-" << api::ModelDirectory(*m.pretrained);
    if (m.pretrained->volume) os << "@" << m.pretrained->volume->claim_name;
    os << "-s" << m.pretrained->seq_len;
  }
  if (t.fine_tuning) {
    const api::FineTuningSpec& ft = *t.fine_tuning;
    if (ft.lora && ft.lora->rank) {
      // alpha scales the adapters' output, not the work: it is left out.
      os << "-lora" << *ft.lora->rank << "-"
         << (ft.lora->targets.empty() ? "default" : Joined(ft.lora->targets));
    } else {
      if (ft.freeze_embeddings) os << "-fe";
      if (ft.freeze_blocks > 0) os << "-fb" << ft.freeze_blocks;
    }
  }
  // Text data is byte-level (vocabulary 256) whatever the model says; token files
  // set the vocabulary from their content; the kind is enough.
  os << (t.data.synthetic ? "/synthetic" : t.data.tokens ? "/tokens" : "/text");
  os << "/b" << t.training.batch_size;
  return os.str();
}

int64_t TotalSteps(const api::TaskSpec& task, int64_t dataset_samples) {
  const api::TrainingSpec& tr = task.training;
  if (!tr.epochs) return tr.steps.value_or(0);
  int64_t samples = dataset_samples;
  if (task.data.synthetic) samples = task.data.synthetic->samples;
  if (samples <= 0 || tr.batch_size <= 0) return *tr.epochs * 1000;
  return *tr.epochs * std::max<int64_t>(1, samples / tr.batch_size);
}

}  // namespace orrery::engine
