// Flag parsing, the learning-rate schedule and the batch sources. See task.h.
#include "worker/train/task.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <numbers>

#include <torch/torch.h>

#include "worker/contract/worker_args.h"
#include "worker/data/bpe.h"
#include "worker/data/source.h"
#include "worker/data/tokenizer.h"
#include "worker/model/pretrained.h"

namespace orrery::train {
namespace {

// The transformer's shape: a pre-trained model's config.json, or the family's
// presets (model.h ApplyFamilyDefaults) under the flags. A flag that disagrees
// with config.json is an error rather than silently ignored.
Status ResolveArchitecture(TaskConfig& t, const contract::WorkerArgs& given) {
  model::GptConfig& g = t.model.gpt;
  if (t.model.pretrained.empty()) {
    if (t.model.kind != "gpt") return OkStatus();
    model::GptConfig flags = g;
    ORRERY_RETURN_IF_ERROR(model::ApplyFamilyDefaults(g).WithContext("--family"));
    // Flags the user gave win over the family's presets.
    if (given.intermediate) g.intermediate = flags.intermediate;
    if (given.tie_embeddings) g.tie_embeddings = true;
    return OkStatus();
  }
  if (t.model.kind != "gpt") {
    return InvalidArgumentError("--pretrained needs --model gpt (a transformer), not --model " +
                                t.model.kind);
  }
  ORRERY_ASSIGN_OR_RETURN(model::GptConfig from,
                          model::ConfigFromPretrained(t.model.pretrained, g.seq));
  const std::vector<std::pair<const char*, std::pair<bool, std::pair<int, int>>>> checks = {
      {"layers", {given.layers.has_value(), {g.layers, from.layers}}},
      {"hidden", {given.hidden.has_value(), {g.hidden, from.hidden}}},
      {"heads", {given.heads.has_value(), {g.heads, from.heads}}},
      {"vocab", {given.vocab.has_value(), {g.vocab, from.vocab}}},
      {"kv-heads", {given.kv_heads.has_value(), {g.kv_heads, from.KvHeads()}}},
      {"intermediate", {given.intermediate.has_value(), {g.intermediate, from.Intermediate()}}},
      {"head-dim", {given.head_dim.has_value(), {g.head_dim, from.HeadDim()}}}};
  for (const auto& [flag, check] : checks) {
    const auto& [was_given, values] = check;
    if (was_given && values.first != values.second) {
      return InvalidArgumentError("--" + std::string(flag) + "=" + std::to_string(values.first) +
                                  " disagrees with " + t.model.pretrained + "/config.json (" +
                                  std::to_string(values.second) + "); drop the flag");
    }
  }
  if (given.family && g.family != from.family) {
    return InvalidArgumentError("--family=" + g.family + " disagrees with " + t.model.pretrained +
                                "/config.json (" + from.family + "); drop the flag");
  }
  g = from;
  return OkStatus();
}

// Copies what the command line set into the task's fields; what it left unset
// keeps TaskConfig's default.
template <typename T, typename V>
void Take(T& field, const std::optional<V>& value) {
  if (value) field = static_cast<T>(*value);
}

TaskConfig FromArgs(const contract::WorkerArgs& a) {
  TaskConfig t;
  model::ModelConfig& m = t.model;
  Take(m.kind, a.model);
  Take(m.gpt.layers, a.layers);
  Take(m.gpt.hidden, a.hidden);
  Take(m.gpt.heads, a.heads);
  Take(m.gpt.seq, a.seq);
  Take(m.gpt.vocab, a.vocab);
  Take(m.gpt.family, a.family);
  Take(m.gpt.kv_heads, a.kv_heads);
  Take(m.gpt.head_dim, a.head_dim);
  Take(m.gpt.intermediate, a.intermediate);
  if (a.tie_embeddings) m.gpt.tie_embeddings = true;
  Take(m.pretrained, a.pretrained);
  Take(m.mlp.input, a.mlp_input);
  Take(m.mlp.hidden, a.mlp_hidden);
  Take(m.mlp.layers, a.mlp_layers);
  Take(m.mlp.classes, a.classes);
  Take(m.torchscript_path, a.torchscript);
  Take(m.torchscript_like, a.torchscript_like);
  Take(m.seed, a.seed);
  if (a.freeze_embeddings) m.finetune.freeze_embeddings = true;
  Take(m.finetune.freeze_blocks, a.freeze_blocks);
  Take(m.finetune.lora_rank, a.lora_rank);
  Take(m.finetune.lora_alpha, a.lora_alpha);
  Take(m.finetune.lora_targets, a.lora_targets);
  parallel::StrategyConfig& s = t.strategy;
  Take(s.name, a.template_name);
  Take(s.micro_batches, a.micro_batches);
  if (a.stage_starts) s.stage_starts.assign(a.stage_starts->begin(), a.stage_starts->end());
  Take(s.pipeline_schedule, a.pipeline_schedule);
  Take(s.bucket_bytes, a.bucket_bytes);
  Take(s.spill_budget_bytes, a.spill_budget_bytes);
  if (a.no_double_buffer) s.spill_double_buffer = false;
  Take(s.recompute, a.recompute);
  Take(s.precision, a.precision);
  Take(t.optimizer.kind, a.optimizer);
  Take(t.optimizer.lr, a.lr);
  Take(t.optimizer.momentum, a.momentum);
  Take(t.optimizer.weight_decay, a.weight_decay);
  Take(t.schedule.warmup_steps, a.warmup_steps);
  Take(t.schedule.decay, a.decay);
  Take(t.schedule.lr_scaling, a.lr_scaling);
  Take(t.schedule.min_lr_ratio, a.min_lr_ratio);
  Take(t.data.kind, a.data);
  Take(t.data.path, a.data_path);
  Take(t.data.tokenizer, a.tokenizer);
  Take(t.data.token_bytes, a.token_bytes);
  Take(t.data.samples, a.data_samples);
  Take(t.global_batch, a.batch);
  Take(t.steps, a.steps);
  Take(t.epochs, a.epochs);
  Take(t.samples, a.samples);
  Take(t.report_every, a.report_every);
  Take(t.checkpoint_dir, a.checkpoint_dir);
  Take(t.checkpoint_every, a.checkpoint_every);
  Take(t.keep, a.keep);
  if (a.no_resume) t.resume = false;
  Take(t.export_dir, a.export_dir);
  Take(t.export_dtype, a.export_dtype);
  if (a.export_merged) t.export_merged = true;
  Take(t.profile_warmup, a.profile_warmup);
  Take(t.profile_steps, a.profile_steps);
  if (a.tune) t.tune = true;
  Take(t.termination_message_path, a.termination_message_path);
  Take(t.threads, a.threads);
  Take(t.metrics.address, a.metrics_address);
  Take(t.metrics.msj, a.msj);
  Take(t.metrics.task, a.task);
  return t;
}

}  // namespace

StatusOr<TaskConfig> ParseTaskFlags(const std::vector<std::string>& args) {
  ORRERY_ASSIGN_OR_RETURN(contract::WorkerArgs given, contract::ParseWorkerArgs(args));
  TaskConfig t = FromArgs(given);
  if (given.layout) {
    auto l = dist::ParseLayout(*given.layout);
    if (!l.ok()) return l.status().WithContext("--layout");
    t.strategy.layout = *l;
  }
  ORRERY_RETURN_IF_ERROR(ResolveArchitecture(t, given));
  const model::FineTuneConfig& ft = t.model.finetune;
  if ((ft.Lora() || ft.freeze_blocks > 0 || ft.freeze_embeddings) && !model::IsTransformer(t.model))
    return InvalidArgumentError("--lora-rank and --freeze-* need a transformer (--model gpt)");
  if (model::IsTransformer(t.model)) {
    Status s = model::CheckFineTune(t.model);
    if (!s.ok()) return s.WithContext("--lora-* / --freeze-blocks");
  }
  if (t.global_batch < 1) return InvalidArgumentError("--batch must be at least 1");
  if (t.threads < 1) return InvalidArgumentError("--threads must be at least 1");
  if (t.keep < 1) return InvalidArgumentError("--keep must be at least 1");
  return t;
}

void MetricsDefaultsFromEnvironment(MetricsConfig& m,
                                    const std::function<const char*(const char*)>& getenv) {
  auto fill = [&](std::string& field, const char* name) {
    const char* value = getenv(name);
    if (field.empty() && value != nullptr) field = value;
  };
  fill(m.address, "ORRERY_METRICS_ADDRESS");
  fill(m.msj, "ORRERY_MSJ");
  fill(m.task, "ORRERY_TASK");
}

namespace {

// The schedule in any one unit: the rate of the step that starts at `at` and ends
// at `next`, with `warmup` of warm-up and `total` in all. Integral arguments give
// exactly what integer steps would (doubles hold integers below 2^53 exactly).
double RateAt(double base, const ScheduleConfig& s, double at, double next, double warmup,
              double total) {
  // A step that straddles the warm-up's end (after a change of batch) is capped.
  if (warmup > 0 && at < warmup) return base * std::min(next, warmup) / warmup;
  if (s.decay == "constant" || total <= warmup) return base;
  double progress = (at - warmup) / std::max(1.0, total - warmup);
  progress = std::clamp(progress, 0.0, 1.0);
  double min_lr = base * s.min_lr_ratio;
  if (s.decay == "linear") return base - (base - min_lr) * progress;
  // Cosine annealing (Loshchilov & Hutter 2017, SGDR) without restarts.
  return min_lr + 0.5 * (base - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace

double LearningRate(double base, const ScheduleConfig& s, int64_t step, int64_t total) {
  return RateAt(base, s, static_cast<double>(step), static_cast<double>(step + 1),
                static_cast<double>(s.warmup_steps), static_cast<double>(total));
}

ScheduleClock::ScheduleClock(const ScheduleConfig& schedule, int64_t batch, int64_t steps)
    : batch_(std::max<int64_t>(1, batch)) {
  to_samples_ = std::max<int64_t>(0, steps) * batch_;
  to_position_ = static_cast<double>(to_samples_);
  warmup_ = static_cast<double>(schedule.warmup_steps * batch_);
}

ScheduleClock ScheduleClock::Resume(const ScheduleConfig& schedule, int64_t batch, int64_t steps,
                                    int64_t step, int64_t samples,
                                    const std::map<std::string, double>& saved) {
  auto get = [&](const char* key, double fallback) {
    auto it = saved.find(key);
    return it == saved.end() ? fallback : it->second;
  };
  ScheduleClock c;
  c.batch_ = std::max<int64_t>(1, batch);
  c.from_samples_ = samples;
  c.to_samples_ = samples + std::max<int64_t>(0, steps - step) * c.batch_;
  const double here = static_cast<double>(samples);
  double saved_batch = get("global_batch", static_cast<double>(c.batch_));
  if (saved_batch <= 0) saved_batch = static_cast<double>(c.batch_);
  const double position = get("schedule_position", here);
  // An older checkpoint's schedule ended where its run would have, at its batch.
  const double total =
      get("schedule_total", here + static_cast<double>(steps - step) * saved_batch);
  const double warmup =
      get("warmup_samples",
          get("warmup_steps", static_cast<double>(schedule.warmup_steps)) * saved_batch);
  if (saved_batch == static_cast<double>(c.batch_) && position == here) {
    // Never changed batch: the step-indexed schedule of the flags as given.
    c.from_position_ = here;
    c.to_position_ = static_cast<double>(c.to_samples_);
    c.warmup_ = static_cast<double>(schedule.warmup_steps * c.batch_);
    c.identity_ = true;
  } else if (position < total && c.to_samples_ > samples) {
    c.from_position_ = position;
    c.to_position_ = total;
    c.warmup_ = warmup;
    c.identity_ = position == here && total == static_cast<double>(c.to_samples_);
  } else {
    // The checkpoint's schedule had ended (a budget extended past it) or nothing
    // is left to train: a schedule over this run's budget, warm-up as it was.
    c.from_position_ = here;
    c.to_position_ = static_cast<double>(c.to_samples_);
    c.warmup_ = warmup;
    c.identity_ = true;
  }
  return c;
}

double ScheduleClock::Position(int64_t samples) const {
  if (identity_) return static_cast<double>(samples);
  if (samples <= from_samples_) return from_position_;
  if (samples >= to_samples_) return to_position_;  // exactly the end, no rounding
  const double done = static_cast<double>(samples - from_samples_) /
                      static_cast<double>(to_samples_ - from_samples_);
  return from_position_ + (to_position_ - from_position_) * done;
}

double ScheduleClock::Rate(double base_lr, const ScheduleConfig& schedule, int64_t samples) const {
  // Counted in steps of this run's batch, so that an unchanged run computes the
  // very numbers LearningRate does.
  const double unit = static_cast<double>(batch_);
  return RateAt(base_lr, schedule, Position(samples) / unit, Position(samples + batch_) / unit,
                warmup_ / unit, to_position_ / unit);
}

void ScheduleClock::Save(int64_t samples, std::map<std::string, double>& lr_schedule) const {
  lr_schedule["samples"] = static_cast<double>(samples);
  lr_schedule["schedule_position"] = Position(samples);
  lr_schedule["schedule_total"] = to_position_;
  lr_schedule["warmup_samples"] = warmup_;
}

namespace {

class TokenBatches final : public BatchSource {
 public:
  TokenBatches(std::unique_ptr<data::SampleSource> source, uint64_t seed, int64_t batch)
      : source_(std::move(source)), order_(seed, source_->NumSamples()), batch_(batch) {
    cursor_.seed = seed;
    cursor_.num_samples = source_->NumSamples();
  }
  int64_t NumSamples() const override { return source_->NumSamples(); }
  StatusOr<model::Batch> Next() override {
    ORRERY_ASSIGN_OR_RETURN(std::vector<int64_t> samples,
                            data::SamplesForRank(order_, cursor_, batch_, 1, 0));
    int64_t s = source_->SeqLen();
    at::Tensor tokens = at::empty({batch_, s + 1}, at::kInt);
    for (int64_t i = 0; i < batch_; ++i) {
      ORRERY_RETURN_IF_ERROR(
          source_->Read(samples[static_cast<size_t>(i)], tokens.data_ptr<int32_t>() + i * (s + 1)));
    }
    tokens = tokens.to(at::kLong);
    cursor_ = data::Advance(cursor_, batch_);
    return model::Batch{tokens.narrow(1, 0, s).contiguous(), tokens.narrow(1, 1, s).contiguous()};
  }
  data::Cursor cursor() const override { return cursor_; }
  Status Seek(const data::Cursor& c) override {
    if (c.num_samples != cursor_.num_samples || c.seed != cursor_.seed) {
      return FailedPreconditionError(
          "the checkpoint's dataset cursor is for " + std::to_string(c.num_samples) +
          " samples with seed " + std::to_string(c.seed) + ", this dataset has " +
          std::to_string(cursor_.num_samples) + " with seed " + std::to_string(cursor_.seed));
    }
    cursor_ = c;
    return OkStatus();
  }

 private:
  std::unique_ptr<data::SampleSource> source_;
  data::GlobalOrder order_;
  int64_t batch_;
  data::Cursor cursor_;
};

// Feature batches for models that do not read tokens (the MLP): a fresh seeded
// batch per stream position, so resuming from a cursor continues the stream.
class FeatureBatches final : public BatchSource {
 public:
  FeatureBatches(model::ModelConfig model, int64_t samples, int64_t batch)
      : model_(std::move(model)), batch_(batch) {
    cursor_.seed = model_.seed;
    cursor_.num_samples = samples;
  }
  int64_t NumSamples() const override { return cursor_.num_samples; }
  StatusOr<model::Batch> Next() override {
    model::Batch b = model::SyntheticBatch(model_, batch_, cursor_.Position() / batch_);
    cursor_ = data::Advance(cursor_, batch_);
    return b;
  }
  data::Cursor cursor() const override { return cursor_; }
  Status Seek(const data::Cursor& c) override {
    cursor_ = c;
    return OkStatus();
  }

 private:
  model::ModelConfig model_;
  int64_t batch_;
  data::Cursor cursor_;
};

}  // namespace

StatusOr<std::unique_ptr<BatchSource>> MakeBatchSource(TaskConfig& task) {
  std::string like =
      task.model.kind == "torchscript" ? task.model.torchscript_like : task.model.kind;
  if (like != "gpt") {
    if (task.data.kind != "synthetic")
      return InvalidArgumentError("the " + like + " model trains on synthetic features only");
    return std::unique_ptr<BatchSource>(
        std::make_unique<FeatureBatches>(task.model, task.data.samples, task.global_batch));
  }
  const model::GptConfig& g = task.model.gpt;
  std::unique_ptr<data::SampleSource> source;
  if (task.data.kind == "synthetic") {
    source =
        std::make_unique<data::SyntheticSource>(task.model.seed, task.data.samples, g.seq, g.vocab);
  } else if (task.data.kind == "tokens" || task.data.kind == "text") {
    if (task.data.path.empty())
      return InvalidArgumentError("--data " + task.data.kind + " needs --data-path");
    std::string token_path = task.data.path;
    int token_bytes = task.data.token_bytes;
    const std::string tokenizer_path =
        task.data.tokenizer.empty() ? task.model.pretrained : task.data.tokenizer;
    const bool bpe = task.data.kind == "text" && !tokenizer_path.empty();
    if (bpe) {
      // The model's own tokenizer, once per text and tokenizer: the token file
      // is cached beside the checkpoints (or in the temp folder) and reused.
      auto tokenizer = data::BpeTokenizer::Load(tokenizer_path);
      if (!tokenizer.ok()) return tokenizer.status().WithContext("--tokenizer " + tokenizer_path);
      token_bytes = tokenizer->VocabSize() <= 65536 ? 2 : 4;
      const std::string cache =
          task.checkpoint_dir.empty()
              ? (std::filesystem::temp_directory_path() / "orrery-tokens").string()
              : (std::filesystem::path(task.checkpoint_dir) / "tokens").string();
      std::error_code ec;
      std::filesystem::create_directories(cache, ec);
      if (ec) return InternalError("cannot create the token cache " + cache + ": " + ec.message());
      token_path = data::CachedTokenPath(cache, task.data.path, tokenizer_path, token_bytes);
      if (!std::filesystem::exists(token_path)) {
        auto n =
            data::EncodeTextFileWithTokenizer(task.data.path, *tokenizer, token_path, token_bytes);
        if (!n.ok()) return n.status().WithContext("tokenizing " + task.data.path);
      }
    } else if (task.data.kind == "text") {
      // Byte-level tokens: vocabulary 256 whatever the flags said.
      task.model.gpt.vocab = static_cast<int>(data::kByteVocabSize);
      // Named for this process and call, not only the process: the tasks of
      // a gang (gang.h) build theirs on threads of one process, and each
      // removes its file once mapped.
      static std::atomic<uint64_t> calls{0};
      token_path =
          (std::filesystem::temp_directory_path() /
           ("orrery-text-" + std::to_string(::getpid()) + "-" + std::to_string(calls.fetch_add(1)) +
            "-" + std::to_string(std::hash<std::string>{}(task.data.path)) + ".bin"))
              .string();
      auto n = data::EncodeTextFile(task.data.path, token_path);
      if (!n.ok()) return n.status().WithContext("tokenizing " + task.data.path);
      token_bytes = 2;
    }
    const bool bytes = task.data.kind == "text" && !bpe;
    auto file =
        data::TokenFile::Open(token_path, token_bytes, g.seq, bytes ? data::kByteVocabSize : 0);
    if (bytes) std::filesystem::remove(token_path);  // the mapping keeps the bytes alive
    if (!file.ok()) return file.status().WithContext("opening " + token_path);
    if ((*file)->VocabSize() > g.vocab) {
      return InvalidArgumentError("the token file needs vocabulary " +
                                  std::to_string((*file)->VocabSize()) +
                                  ", the model has --vocab " + std::to_string(g.vocab));
    }
    source = std::move(*file);
  } else {
    return InvalidArgumentError("unknown --data '" + task.data.kind +
                                "' (synthetic, tokens, text)");
  }
  if (source->NumSamples() < 1)
    return InvalidArgumentError("the dataset has no complete sample of seq+1 tokens");
  return std::unique_ptr<BatchSource>(
      std::make_unique<TokenBatches>(std::move(source), task.model.seed, task.global_batch));
}

}  // namespace orrery::train
