#include "operator/engine/worker_command.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "operator/api/paths.h"

namespace orrery::engine {
namespace {

std::string Flag(const std::string& name, const std::string& value) {
  return "--" + name + "=" + value;
}
std::string Flag(const std::string& name, int64_t value) {
  return Flag(name, std::to_string(value));
}
// The shortest text that reads back as the same double ("0.8", "3e-04").
std::string Number(double value) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

std::string Resolve(const std::string& base, const std::string& path) {
  if (base.empty() || path.empty() || path.front() == '/') return path;
  return base + "/" + path;
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

// The flags every worker command of this task shares: model, data, optimizer.
std::vector<std::string> CommonFlags(const api::ExpandedTask& expanded, const LaunchConfig& c) {
  const api::TaskSpec& t = expanded.task;
  std::vector<std::string> f;
  const api::ModelSpec& m = t.model;
  std::string like = "gpt";
  if (m.gpt) {
    f.push_back(Flag("model", "gpt"));
  } else if (m.mlp) {
    f.push_back(Flag("model", "mlp"));
    like = "mlp";
  } else if (m.torchscript) {
    f.push_back(Flag("model", "torchscript"));
    f.push_back(Flag("torchscript", Resolve(c.base_dir, m.torchscript->path)));
  } else if (m.pretrained) {
    // config.json sets the architecture: passing its sizes too would only
    // give the worker something to disagree with.
    f.push_back(Flag("model", "gpt"));
    f.push_back(Flag("pretrained", Resolve(c.base_dir, api::ModelDirectory(*m.pretrained))));
    f.push_back(Flag("seq", m.pretrained->seq_len));
  }
  if (m.gpt) {
    f.push_back(Flag("layers", m.gpt->layers));
    f.push_back(Flag("hidden", m.gpt->hidden));
    f.push_back(Flag("heads", m.gpt->heads));
    f.push_back(Flag("seq", m.gpt->seq_len));
    f.push_back(Flag("vocab", m.gpt->vocab));
  }
  if (m.mlp) {
    f.push_back(Flag("mlp-input", m.mlp->inputs));
    f.push_back(Flag("mlp-hidden", m.mlp->hidden));
    f.push_back(Flag("mlp-layers", m.mlp->layers));
    f.push_back(Flag("classes", m.mlp->outputs));
  }
  if (m.torchscript) f.push_back(Flag("torchscript-like", like));
  // What the run trains changes its step time and memory: profiles and
  // training runs carry it alike.
  if (t.fine_tuning) {
    const api::FineTuningSpec& ft = *t.fine_tuning;
    if (ft.freeze_embeddings) f.push_back("--freeze-embeddings");
    if (ft.freeze_blocks > 0) f.push_back(Flag("freeze-blocks", ft.freeze_blocks));
    if (ft.lora && ft.lora->rank) {
      f.push_back(Flag("lora-rank", *ft.lora->rank));
      f.push_back(Flag("lora-alpha", Number(ft.lora->alpha)));
      if (!ft.lora->targets.empty()) f.push_back(Flag("lora-targets", Joined(ft.lora->targets)));
    }
  }

  const api::DataSpec& d = t.data;
  int64_t seed = 0;
  if (d.synthetic) {
    f.push_back(Flag("data", "synthetic"));
    f.push_back(Flag("data-samples", d.synthetic->samples));
    seed = d.synthetic->seed;
  } else if (d.tokens) {
    f.push_back(Flag("data", "tokens"));
    f.push_back(Flag("data-path", Resolve(c.base_dir, d.tokens->path)));
    f.push_back(Flag("token-bytes", d.tokens->dtype == api::TokenDtype::kUint32 ? 4 : 2));
  } else if (d.text) {
    f.push_back(Flag("data", "text"));
    f.push_back(Flag("data-path", Resolve(c.base_dir, d.text->path)));
    if (!d.text->tokenizer.empty())
      f.push_back(Flag("tokenizer", Resolve(c.base_dir, d.text->tokenizer)));
  }
  f.push_back(Flag("seed", seed));

  const api::TrainingSpec& tr = t.training;
  const int64_t batch = c.batch_size > 0 ? c.batch_size : tr.batch_size;
  // The worker has SGD and AdamW; Adam is AdamW's update with the decay applied
  // as decoupled weight decay (Loshchilov & Hutter 2019), which is what
  // "adam with weight decay" means in most current training code.
  f.push_back(Flag("optimizer", tr.optimizer == api::Optimizer::kSgd ? "sgd" : "adamw"));
  f.push_back(
      Flag("lr", Number(ScaledLearningRate(tr.learning_rate, c.lr_scaling, batch, tr.batch_size))));
  f.push_back(Flag("weight-decay", Number(tr.weight_decay)));
  if (tr.optimizer == api::Optimizer::kSgd) f.push_back(Flag("momentum", Number(tr.momentum)));
  // Warm-up is tuned in steps of the task's own batch; at another batch it
  // keeps its length in samples (Goyal et al. 2017 count it in epochs).
  int64_t warmup = tr.warmup_steps;
  if (batch != tr.batch_size && tr.batch_size > 0 && batch > 0) {
    warmup = (tr.warmup_steps * tr.batch_size + batch - 1) / batch;
  }
  f.push_back(Flag("warmup-steps", warmup));
  f.push_back(Flag("decay", std::string(api::EnumName(tr.schedule))));
  f.push_back(Flag("precision", std::string(api::EnumName(tr.precision))));
  f.push_back(Flag("batch", batch));
  f.push_back(Flag("template", WorkerTemplate(c.template_name, c.gpus)));
  // Pipelines run 1F1B (PipeDream-Flush, Narayanan et al. 2021): the same
  // gradients as GPipe with at most pp - stage micro-batches of activations held
  // instead of all of them, so the memory a profile measures is 1F1B's too.
  if (WorkerTemplate(c.template_name, c.gpus) == "pipeline") {
    f.push_back(Flag("pipeline-schedule", "1f1b"));
  }
  f.push_back(Flag("threads", c.threads));
  if (!c.device.empty()) f.push_back(Flag("device", c.device));
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

std::string WorkerTemplate(const std::string& template_name, int gpus) {
  if (gpus <= 1 && template_name != "spill") return "single";
  return template_name;
}

std::vector<std::string> TrainFlags(const api::ExpandedTask& task, const LaunchConfig& config) {
  std::vector<std::string> f = CommonFlags(task, config);
  const api::TrainingSpec& tr = task.task.training;
  if (config.samples > 0) {
    f.push_back(Flag("samples", config.samples));
  } else if (config.steps > 0) {
    f.push_back(Flag("steps", config.steps));
  } else if (tr.epochs) {
    f.push_back(Flag("epochs", *tr.epochs));
  } else {
    f.push_back(Flag("steps", tr.steps.value_or(0)));
  }
  f.push_back(Flag("report-every", config.report_every));
  if (!config.checkpoint_dir.empty()) {
    f.push_back(Flag("checkpoint-dir", config.checkpoint_dir));
    f.push_back(Flag("checkpoint-every", config.checkpoint_every));
    f.push_back(Flag("keep", config.keep));
  }
  f.push_back(Flag("lr-scaling", std::string(api::EnumName(config.lr_scaling))));
  if (const std::string dir = ExportDir(task, config.base_dir); !dir.empty()) {
    const api::OutputSpec& o = *task.task.output;
    f.push_back(Flag("export-dir", dir));
    f.push_back(Flag("export-dtype", std::string(api::EnumName(o.dtype))));
    if (o.merge_lora) f.push_back("--export-merged");
  }
  return f;
}

std::string ExportDir(const api::ExpandedTask& task, const std::string& base_dir) {
  if (!task.task.output) return "";
  return Resolve(base_dir, api::OutputDirectory(*task.task.output));
}

std::vector<std::string> ProfileFlags(const api::ExpandedTask& task, const LaunchConfig& config,
                                      int trial_steps) {
  std::vector<std::string> f = CommonFlags(task, config);
  // Saturn profiles a handful of steps after warm-up; a third of the trial (at
  // least one step) warms up the allocator and caches.
  f.push_back(Flag("profile-warmup", std::max(1, trial_steps / 3)));
  f.push_back(Flag("profile-steps", std::max(1, trial_steps)));
  return f;
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
