// Flag parsing, the learning-rate schedule and the batch sources. See task.h.
#include "worker/train/task.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <numbers>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "worker/data/bpe.h"
#include "worker/data/source.h"
#include "worker/data/tokenizer.h"
#include "worker/model/pretrained.h"

namespace orrery::train {
namespace {

StatusOr<int64_t> ToInt(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0')
    return InvalidArgumentError("--" + flag + ": '" + v + "' is not an integer");
  return static_cast<int64_t>(x);
}

StatusOr<double> ToDouble(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x))
    return InvalidArgumentError("--" + flag + ": '" + v + "' is not a number");
  return x;
}

}  // namespace

namespace {

// The transformer's shape: a pre-trained model's config.json, or the family's
// presets (model.h ApplyFamilyDefaults) under the flags. A flag that disagrees
// with config.json is an error rather than silently ignored.
Status ResolveArchitecture(TaskConfig& t, const std::set<std::string>& given) {
  model::GptConfig& g = t.model.gpt;
  if (t.model.pretrained.empty()) {
    if (t.model.kind != "gpt") return OkStatus();
    model::GptConfig flags = g;
    ORRERY_RETURN_IF_ERROR(model::ApplyFamilyDefaults(g).WithContext("--family"));
    // Flags the user gave win over the family's presets.
    if (given.count("intermediate")) g.intermediate = flags.intermediate;
    if (given.count("tie-embeddings")) g.tie_embeddings = true;
    return OkStatus();
  }
  if (t.model.kind != "gpt") {
    return InvalidArgumentError("--pretrained needs --model gpt (a transformer), not --model " +
                                t.model.kind);
  }
  ORRERY_ASSIGN_OR_RETURN(model::GptConfig from,
                          model::ConfigFromPretrained(t.model.pretrained, g.seq));
  const std::vector<std::pair<const char*, std::pair<int, int>>> checks = {
      {"layers", {g.layers, from.layers}},
      {"hidden", {g.hidden, from.hidden}},
      {"heads", {g.heads, from.heads}},
      {"vocab", {g.vocab, from.vocab}},
      {"kv-heads", {g.kv_heads, from.KvHeads()}},
      {"intermediate", {g.intermediate, from.Intermediate()}},
      {"head-dim", {g.head_dim, from.HeadDim()}}};
  for (const auto& [flag, values] : checks) {
    if (given.count(flag) && values.first != values.second) {
      return InvalidArgumentError("--" + std::string(flag) + "=" + std::to_string(values.first) +
                                  " disagrees with " + t.model.pretrained + "/config.json (" +
                                  std::to_string(values.second) + "); drop the flag");
    }
  }
  if (given.count("family") && g.family != from.family) {
    return InvalidArgumentError("--family=" + g.family + " disagrees with " + t.model.pretrained +
                                "/config.json (" + from.family + "); drop the flag");
  }
  g = from;
  return OkStatus();
}

}  // namespace

StatusOr<TaskConfig> ParseTaskFlags(const std::vector<std::string>& args) {
  TaskConfig t;
  // Boolean flags take no value.
  const std::map<std::string, std::function<void()>> switches = {
      {"no-double-buffer", [&] { t.strategy.spill_double_buffer = false; }},
      {"no-resume", [&] { t.resume = false; }},
      {"tune", [&] { t.tune = true; }},
      {"tie-embeddings", [&] { t.model.gpt.tie_embeddings = true; }},
      {"freeze-embeddings", [&] { t.model.finetune.freeze_embeddings = true; }},
      {"export-merged", [&] { t.export_merged = true; }},
  };
  using Setter = std::function<Status(const std::string&, const std::string&)>;
  auto int_into = [](auto* field) -> Setter {
    return [field](const std::string& f, const std::string& v) -> Status {
      ORRERY_ASSIGN_OR_RETURN(int64_t x, ToInt(f, v));
      if (x < 0) return InvalidArgumentError("--" + f + " must not be negative");
      *field = static_cast<std::remove_pointer_t<decltype(field)>>(x);
      return OkStatus();
    };
  };
  auto double_into = [](double* field) -> Setter {
    return [field](const std::string& f, const std::string& v) -> Status {
      ORRERY_ASSIGN_OR_RETURN(*field, ToDouble(f, v));
      return OkStatus();
    };
  };
  auto string_into = [](std::string* field) -> Setter {
    return [field](const std::string&, const std::string& v) -> Status {
      *field = v;
      return OkStatus();
    };
  };
  std::map<std::string, Setter> setters = {
      {"model", string_into(&t.model.kind)},
      {"layers", int_into(&t.model.gpt.layers)},
      {"hidden", int_into(&t.model.gpt.hidden)},
      {"heads", int_into(&t.model.gpt.heads)},
      {"seq", int_into(&t.model.gpt.seq)},
      {"vocab", int_into(&t.model.gpt.vocab)},
      {"mlp-input", int_into(&t.model.mlp.input)},
      {"mlp-hidden", int_into(&t.model.mlp.hidden)},
      {"mlp-layers", int_into(&t.model.mlp.layers)},
      {"classes", int_into(&t.model.mlp.classes)},
      {"torchscript", string_into(&t.model.torchscript_path)},
      {"torchscript-like", string_into(&t.model.torchscript_like)},
      {"seed", int_into(&t.model.seed)},
      {"family", string_into(&t.model.gpt.family)},
      {"kv-heads", int_into(&t.model.gpt.kv_heads)},
      {"head-dim", int_into(&t.model.gpt.head_dim)},
      {"intermediate", int_into(&t.model.gpt.intermediate)},
      {"pretrained", string_into(&t.model.pretrained)},
      {"tokenizer", string_into(&t.data.tokenizer)},
      {"export-dir", string_into(&t.export_dir)},
      {"export-dtype", string_into(&t.export_dtype)},
      {"freeze-blocks", int_into(&t.model.finetune.freeze_blocks)},
      {"lora-rank", int_into(&t.model.finetune.lora_rank)},
      {"lora-alpha", double_into(&t.model.finetune.lora_alpha)},
      {"lora-targets",
       [&](const std::string&, const std::string& v) -> Status {
         t.model.finetune.lora_targets.clear();
         std::stringstream in(v);
         for (std::string item; std::getline(in, item, ',');) {
           if (!item.empty()) t.model.finetune.lora_targets.push_back(item);
         }
         return OkStatus();
       }},
      {"template", string_into(&t.strategy.name)},
      {"layout",
       [&](const std::string& f, const std::string& v) -> Status {
         auto l = dist::ParseLayout(v);
         if (!l.ok()) return l.status().WithContext("--" + f);
         t.strategy.layout = *l;
         return OkStatus();
       }},
      {"micro-batches", int_into(&t.strategy.micro_batches)},
      {"pipeline-schedule",
       [&](const std::string& f, const std::string& v) -> Status {
         if (v != "gpipe" && v != "1f1b")
           return InvalidArgumentError("--" + f + " must be gpipe or 1f1b, not '" + v + "'");
         t.strategy.pipeline_schedule = v;
         return OkStatus();
       }},
      {"stage-starts",
       [&](const std::string& f, const std::string& v) -> Status {
         t.strategy.stage_starts.clear();
         size_t pos = 0;
         while (pos <= v.size() && !v.empty()) {
           size_t comma = v.find(',', pos);
           std::string item =
               v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
           ORRERY_ASSIGN_OR_RETURN(int64_t x, ToInt(f, item));
           t.strategy.stage_starts.push_back(static_cast<int>(x));
           if (comma == std::string::npos) break;
           pos = comma + 1;
         }
         return OkStatus();
       }},
      {"bucket-bytes", int_into(&t.strategy.bucket_bytes)},
      {"precision",
       [&](const std::string& f, const std::string& v) -> Status {
         if (v != "fp32" && v != "bf16")
           return InvalidArgumentError("--" + f + " must be fp32 or bf16, not '" + v + "'");
         t.strategy.precision = v;
         return OkStatus();
       }},
      {"spill-budget-bytes", int_into(&t.strategy.spill_budget_bytes)},
      {"optimizer", string_into(&t.optimizer.kind)},
      {"lr", double_into(&t.optimizer.lr)},
      {"momentum", double_into(&t.optimizer.momentum)},
      {"weight-decay", double_into(&t.optimizer.weight_decay)},
      {"warmup-steps", int_into(&t.schedule.warmup_steps)},
      {"decay", string_into(&t.schedule.decay)},
      {"lr-scaling", string_into(&t.schedule.lr_scaling)},
      {"min-lr-ratio", double_into(&t.schedule.min_lr_ratio)},
      {"data", string_into(&t.data.kind)},
      {"data-path", string_into(&t.data.path)},
      {"token-bytes", int_into(&t.data.token_bytes)},
      {"data-samples", int_into(&t.data.samples)},
      {"batch", int_into(&t.global_batch)},
      {"steps", int_into(&t.steps)},
      {"epochs", int_into(&t.epochs)},
      {"samples", int_into(&t.samples)},
      {"report-every", int_into(&t.report_every)},
      {"checkpoint-dir", string_into(&t.checkpoint_dir)},
      {"checkpoint-every", int_into(&t.checkpoint_every)},
      {"keep", int_into(&t.keep)},
      {"threads", int_into(&t.threads)},
      {"profile-warmup", int_into(&t.profile_warmup)},
      {"profile-steps", int_into(&t.profile_steps)},
      {"termination-message-path", string_into(&t.termination_message_path)},
      {"metrics-address", string_into(&t.metrics.address)},
      {"msj", string_into(&t.metrics.msj)},
      {"task", string_into(&t.metrics.task)},
  };
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) return InvalidArgumentError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (auto sw = switches.find(name); sw != switches.end()) {
      if (has_value) return InvalidArgumentError("--" + name + " takes no value");
      sw->second();
      continue;
    }
    auto it = setters.find(name);
    if (it == setters.end()) return InvalidArgumentError("unknown flag --" + name);
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgumentError("--" + name + " needs a value");
      value = args[++i];
    }
    ORRERY_RETURN_IF_ERROR(it->second(name, value));
    given.insert(name);
  }
  ORRERY_RETURN_IF_ERROR(ResolveArchitecture(t, given));
  const model::FineTuneConfig& ft = t.model.finetune;
  if ((ft.Lora() || ft.freeze_blocks > 0 || ft.freeze_embeddings) && !model::IsTransformer(t.model))
    return InvalidArgumentError("--lora-rank and --freeze-* need a transformer (--model gpt)");
  if (model::IsTransformer(t.model)) {
    Status s = model::CheckFineTune(t.model);
    if (!s.ok()) return s.WithContext("--lora-* / --freeze-blocks");
  }
  if (t.export_dtype != "float32" && t.export_dtype != "bfloat16" && t.export_dtype != "float16")
    return InvalidArgumentError("--export-dtype must be float32, bfloat16 or float16");
  if (t.global_batch < 1) return InvalidArgumentError("--batch must be at least 1");
  if (t.threads < 1) return InvalidArgumentError("--threads must be at least 1");
  if (t.keep < 1) return InvalidArgumentError("--keep must be at least 1");
  if (t.data.token_bytes != 2 && t.data.token_bytes != 4)
    return InvalidArgumentError("--token-bytes must be 2 or 4");
  if (t.schedule.lr_scaling != "none" && t.schedule.lr_scaling != "linear" &&
      t.schedule.lr_scaling != "sqrt") {
    return InvalidArgumentError("--lr-scaling must be none, linear or sqrt");
  }
  if (t.schedule.decay != "constant" && t.schedule.decay != "cosine" &&
      t.schedule.decay != "linear") {
    return InvalidArgumentError("--decay must be constant, cosine or linear");
  }
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
      token_path = (std::filesystem::temp_directory_path() /
                    ("orrery-text-" + std::to_string(::getpid()) + "-" +
                     std::to_string(std::hash<std::string>{}(task.data.path)) + ".bin"))
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
