// Strict JSON decoding and full encoding of ModelSelectionJob; see codec.h.
#include "operator/api/codec.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

namespace orrery::api {
namespace {

// Levenshtein distance, for "did you mean" hints on misspelt fields.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const char* TypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "object";
    default: return "value";
  }
}

// Reads one JSON object field by field, remembering which keys were asked for so
// that Finish() can report the rest as unknown.
class ObjectReader {
 public:
  ObjectReader(const Json& json, std::string path, std::vector<FieldError>* errors)
      : json_(json), path_(std::move(path)), errors_(errors) {
    valid_ = json_.is_object();
    if (!valid_) {
      errors_->push_back({path_, std::string("must be an object, not a ") + TypeName(json_),
                          "write it as a mapping of field names to values"});
    }
  }
  ~ObjectReader() { Finish(); }
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  bool valid() const { return valid_; }
  const std::string& path() const { return path_; }
  std::vector<FieldError>* errors() const { return errors_; }
  std::string Path(const std::string& key) const { return ChildPath(path_, key); }

  // The value at `key`, or nullptr when absent or null (null means "unset", as
  // the API server treats it).
  const Json* Get(const std::string& key, bool required = false) {
    known_.push_back(key);
    if (!valid_) return nullptr;
    auto it = json_.find(key);
    if (it == json_.end() || it->is_null()) {
      if (required) errors_->push_back({Path(key), "required value", "set " + key});
      return nullptr;
    }
    return &*it;
  }

  bool Has(const std::string& key) const {
    if (!valid_) return false;
    auto it = json_.find(key);
    return it != json_.end() && !it->is_null();
  }

  template <typename T>
  void Integer(const std::string& key, T* out, bool required = false) {
    if (const Json* v = Get(key, required)) ReadInteger(*v, Path(key), out);
  }
  template <typename T>
  void Integer(const std::string& key, std::optional<T>* out) {
    if (const Json* v = Get(key)) {
      T value{};
      if (ReadInteger(*v, Path(key), &value)) *out = value;
    }
  }
  void Number(const std::string& key, double* out, bool required = false) {
    if (const Json* v = Get(key, required)) ReadNumber(*v, Path(key), out);
  }
  void Number(const std::string& key, std::optional<double>* out) {
    if (const Json* v = Get(key)) {
      double value = 0;
      if (ReadNumber(*v, Path(key), &value)) *out = value;
    }
  }
  void Bool(const std::string& key, bool* out) {
    if (const Json* v = Get(key)) {
      if (v->is_boolean()) {
        *out = v->get<bool>();
      } else {
        TypeError(Path(key), *v, "a boolean", "write true or false");
      }
    }
  }
  void String(const std::string& key, std::string* out, bool required = false) {
    if (const Json* v = Get(key, required)) ReadString(*v, Path(key), out);
  }
  template <typename E>
  void Enum(const std::string& key, E* out, bool required = false) {
    if (const Json* v = Get(key, required)) ReadEnum(*v, Path(key), out);
  }
  void StringMap(const std::string& key, std::map<std::string, std::string>* out) {
    const Json* v = Get(key);
    if (!v) return;
    if (!v->is_object()) {
      TypeError(Path(key), *v, "a mapping of strings", "write it as key: value lines");
      return;
    }
    for (const auto& [k, item] : v->items()) {
      std::string value;
      if (ReadString(item, KeyPath(Path(key), k), &value)) (*out)[k] = value;
    }
  }
  // Calls fn(element, element_path) for each element of the list at `key`.
  void List(const std::string& key,
            const std::function<void(const Json&, const std::string&)>& fn) {
    const Json* v = Get(key);
    if (!v) return;
    if (!v->is_array()) {
      TypeError(Path(key), *v, "a list", "write it as a YAML list (- item) or [a, b]");
      return;
    }
    for (size_t i = 0; i < v->size(); ++i) fn((*v)[i], IndexPath(Path(key), i));
  }

  void Finish() {
    if (finished_ || !valid_) return;
    finished_ = true;
    for (const auto& [key, value] : json_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string fix = "remove it";
      std::string best;
      size_t best_distance = 3;  // only suggest close matches
      for (const auto& k : known_) {
        size_t d = EditDistance(key, k);
        if (d < best_distance) best_distance = d, best = k;
      }
      if (!best.empty()) fix = "did you mean \"" + best + "\"?";
      std::string known_list;
      for (const auto& k : known_) known_list += (known_list.empty() ? "" : ", ") + k;
      errors_->push_back(
          // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
          {Path(key), "unknown field \"" + key + "\"", fix + "; fields here: " + known_list});
    }
  }

  // ---- element readers, usable on list items too ---------------------------
  template <typename T>
  bool ReadInteger(const Json& v, const std::string& path, T* out) {
    int64_t value = 0;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return RangeError(path, std::numeric_limits<T>::max());
      }
      value = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      value = v.get<int64_t>();
    } else if (v.is_number_float()) {
      // The API server accepts a float with an integral value as an integer.
      double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d)) {
        TypeError(path, v, "an integer", "write a whole number");
        return false;
      }
      if (d >= 9.2e18 || d <= -9.2e18) return RangeError(path, std::numeric_limits<T>::max());
      value = static_cast<int64_t>(d);
    } else {
      TypeError(path, v, "an integer", "write a whole number without quotes");
      return false;
    }
    if (value > static_cast<int64_t>(std::numeric_limits<T>::max()) ||
        value < static_cast<int64_t>(std::numeric_limits<T>::min())) {
      return RangeError(path, std::numeric_limits<T>::max());
    }
    *out = static_cast<T>(value);
    return true;
  }
  bool ReadNumber(const Json& v, const std::string& path, double* out) {
    if (!v.is_number()) {
      TypeError(path, v, "a number", "write a number without quotes, e.g. 3e-4");
      return false;
    }
    *out = v.get<double>();
    return true;
  }
  bool ReadString(const Json& v, const std::string& path, std::string* out) {
    if (!v.is_string()) {
      TypeError(path, v, "a string", "quote the value");
      return false;
    }
    *out = v.get<std::string>();
    return true;
  }
  template <typename E>
  bool ReadEnum(const Json& v, const std::string& path, E* out) {
    std::string name;
    if (!ReadString(v, path, &name)) return false;
    std::optional<E> e = ParseEnum<E>(name);
    if (!e) {
      errors_->push_back(
          {path, "unsupported value \"" + name + "\"", "use one of: " + EnumNamesJoined<E>()});
      return false;
    }
    *out = *e;
    return true;
  }

 private:
  void TypeError(const std::string& path, const Json& v, const char* expected,
                 const std::string& fix) {
    errors_->push_back({path, std::string("must be ") + expected + ", not a " + TypeName(v), fix});
  }
  template <typename M>
  bool RangeError(const std::string& path, M max) {
    errors_->push_back(
        {path, "is too large for this field", "use a value of at most " + std::to_string(max)});
    return false;
  }

  const Json& json_;
  std::string path_;
  std::vector<FieldError>* errors_;
  std::vector<std::string> known_;
  bool valid_ = false;
  bool finished_ = false;
};

// ---- decode: spec ----------------------------------------------------------
void DecodeGpt(const Json& j, const std::string& path, GptModel* m,
               std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.Integer("layers", &m->layers, true);
  r.Integer("hidden", &m->hidden, true);
  r.Integer("heads", &m->heads, true);
  r.Integer("seqLen", &m->seq_len, true);
  r.Integer("vocab", &m->vocab, true);
}

void DecodeMlp(const Json& j, const std::string& path, MlpModel* m,
               std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.Integer("layers", &m->layers, true);
  r.Integer("hidden", &m->hidden, true);
  r.Integer("inputs", &m->inputs, true);
  r.Integer("outputs", &m->outputs, true);
}

// Decodes an optional sub-object at `key` with `fn`.
template <typename T, typename F>
void Optional(ObjectReader& r, const std::string& key, std::optional<T>* out, F fn) {
  if (const Json* v = r.Get(key)) {
    T value{};
    fn(*v, r.Path(key), &value, r.errors());
    *out = std::move(value);
  }
}

void DecodeModel(const Json& j, const std::string& path, ModelSpec* m,
                 std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  Optional(r, "gpt", &m->gpt, DecodeGpt);
  Optional(r, "mlp", &m->mlp, DecodeMlp);
  Optional(
      r, "torchscript", &m->torchscript,
      [](const Json& v, const std::string& p, TorchScriptModel* t, std::vector<FieldError>* e) {
        ObjectReader o(v, p, e);
        o.String("path", &t->path, true);
      });
  Optional(r, "pretrained", &m->pretrained,
           [](const Json& v, const std::string& p, PretrainedModel* t, std::vector<FieldError>* e) {
             ObjectReader o(v, p, e);
             o.String("path", &t->path, true);
             o.Integer("seqLen", &t->seq_len, true);
             Optional(o, "volume", &t->volume,
                      [](const Json& vv, const std::string& vp, ModelVolume* vol,
                         std::vector<FieldError>* ve) {
                        ObjectReader vo(vv, vp, ve);
                        vo.String("claimName", &vol->claim_name, true);
                        vo.String("mountPath", &vol->mount_path);
                      });
           });
}

void DecodeData(const Json& j, const std::string& path, DataSpec* d,
                std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  Optional(r, "tokens", &d->tokens,
           [](const Json& v, const std::string& p, TokenData* t, std::vector<FieldError>* e) {
             ObjectReader o(v, p, e);
             o.String("path", &t->path, true);
             o.Enum("dtype", &t->dtype);
           });
  Optional(r, "text", &d->text,
           [](const Json& v, const std::string& p, TextData* t, std::vector<FieldError>* e) {
             ObjectReader o(v, p, e);
             o.String("path", &t->path, true);
             o.String("tokenizer", &t->tokenizer);
           });
  Optional(r, "synthetic", &d->synthetic,
           [](const Json& v, const std::string& p, SyntheticData* s, std::vector<FieldError>* e) {
             ObjectReader o(v, p, e);
             o.Integer("seed", &s->seed);
             o.Integer("vocabSize", &s->vocab_size);
             o.Integer("samples", &s->samples);
           });
}

void DecodeTraining(const Json& j, const std::string& path, TrainingSpec* t,
                    std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.Integer("steps", &t->steps);
  r.Integer("epochs", &t->epochs);
  r.Integer("batchSize", &t->batch_size, true);
  r.Enum("optimizer", &t->optimizer);
  r.Number("learningRate", &t->learning_rate, true);
  r.Number("weightDecay", &t->weight_decay);
  r.Number("momentum", &t->momentum);
  r.Enum("schedule", &t->schedule);
  r.Enum("precision", &t->precision);
  r.Integer("warmupSteps", &t->warmup_steps);
}

template <typename T, typename Read>
void ReadList(ObjectReader& r, const std::string& key, std::vector<T>* out, Read read) {
  r.List(key, [&](const Json& item, const std::string& item_path) {
    T value{};
    if (read(item, item_path, &value)) out->push_back(value);
  });
}

void DecodeFineTuning(const Json& j, const std::string& path, FineTuningSpec* f,
                      std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.Bool("freezeEmbeddings", &f->freeze_embeddings);
  r.Integer("freezeBlocks", &f->freeze_blocks);
  Optional(r, "lora", &f->lora,
           [](const Json& v, const std::string& p, LoraSpec* l, std::vector<FieldError>* e) {
             ObjectReader o(v, p, e);
             o.Integer("rank", &l->rank);
             o.Number("alpha", &l->alpha);
             ReadList(o, "targets", &l->targets,
                      [&o](const Json& x, const std::string& xp, std::string* out) {
                        return o.ReadString(x, xp, out);
                      });
           });
}

void DecodeOutput(const Json& j, const std::string& path, OutputSpec* out,
                  std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.String("path", &out->path, true);
  r.Enum("dtype", &out->dtype);
  r.Bool("mergeLora", &out->merge_lora);
  Optional(r, "volume", &out->volume,
           [](const Json& v, const std::string& p, OutputVolume* vol, std::vector<FieldError>* e) {
             ObjectReader o(v, p, e);
             o.String("claimName", &vol->claim_name, true);
             o.String("mountPath", &vol->mount_path);
           });
}

void DecodeGrid(const Json& j, const std::string& path, GridSpace* g,
                std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  auto number = [&r](const Json& v, const std::string& p, double* o) {
    return r.ReadNumber(v, p, o);
  };
  auto integer = [&r](const Json& v, const std::string& p, int64_t* o) {
    return r.ReadInteger(v, p, o);
  };
  ReadList(r, "learningRate", &g->learning_rate, number);
  ReadList(r, "batchSize", &g->batch_size, integer);
  ReadList(r, "weightDecay", &g->weight_decay, number);
  ReadList(r, "warmupSteps", &g->warmup_steps, integer);
  ReadList(r, "optimizer", &g->optimizer,
           [&r](const Json& v, const std::string& p, Optimizer* o) { return r.ReadEnum(v, p, o); });
  ReadList(r, "loraRank", &g->lora_rank, integer);
  ReadList(r, "freezeBlocks", &g->freeze_blocks, integer);
}

void DecodeDistribution(const Json& j, const std::string& path, Distribution* d,
                        std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.Number("min", &d->min);
  r.Number("max", &d->max);
  r.Bool("logScale", &d->log_scale);
  ReadList(r, "values", &d->values,
           [&r](const Json& v, const std::string& p, double* o) { return r.ReadNumber(v, p, o); });
}

void DecodeRandom(const Json& j, const std::string& path, RandomSpace* s,
                  std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.Integer("seed", &s->seed);
  r.Integer("count", &s->count, true);
  Optional(r, "learningRate", &s->learning_rate, DecodeDistribution);
  Optional(r, "batchSize", &s->batch_size, DecodeDistribution);
  Optional(r, "weightDecay", &s->weight_decay, DecodeDistribution);
  Optional(r, "warmupSteps", &s->warmup_steps, DecodeDistribution);
  Optional(r, "loraRank", &s->lora_rank, DecodeDistribution);
  Optional(r, "freezeBlocks", &s->freeze_blocks, DecodeDistribution);
}

void DecodeSearchSpace(const Json& j, const std::string& path, SearchSpace* s,
                       std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  Optional(r, "grid", &s->grid, DecodeGrid);
  Optional(r, "random", &s->random, DecodeRandom);
}

void DecodeTask(const Json& j, const std::string& path, TaskSpec* t,
                std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.String("name", &t->name, true);
  r.Number("weight", &t->weight);
  if (const Json* v = r.Get("model", true)) DecodeModel(*v, r.Path("model"), &t->model, errors);
  if (const Json* v = r.Get("data", true)) DecodeData(*v, r.Path("data"), &t->data, errors);
  if (const Json* v = r.Get("training", true))
    DecodeTraining(*v, r.Path("training"), &t->training, errors);
  Optional(r, "fineTuning", &t->fine_tuning, DecodeFineTuning);
  Optional(r, "output", &t->output, DecodeOutput);
  Optional(r, "searchSpace", &t->search_space, DecodeSearchSpace);
  ReadList(r, "gpuTypes", &t->gpu_types,
           [&r](const Json& x, const std::string& xp, std::string* out) {
             return r.ReadString(x, xp, out);
           });
}

void DecodeToleration(const Json& j, const std::string& path, Toleration* t,
                      std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  r.String("key", &t->key);
  r.String("operator", &t->operator_);
  r.String("value", &t->value);
  r.String("effect", &t->effect);
  r.Integer("tolerationSeconds", &t->toleration_seconds);
}

void DecodeResources(const Json& j, const std::string& path, ResourcesSpec* s,
                     std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  if (r.Has("templates")) {
    s->templates.clear();
    ReadList(r, "templates", &s->templates, [&r](const Json& v, const std::string& p, Template* o) {
      return r.ReadEnum(v, p, o);
    });
  } else {
    r.Get("templates");
  }
  if (const Json* v = r.Get("gpusPerTask")) {
    ObjectReader g(*v, r.Path("gpusPerTask"), errors);
    g.Integer("min", &s->gpus_per_task.min);
    g.Integer("max", &s->gpus_per_task.max);
  }
  r.Integer("gpuQuota", &s->gpu_quota, true);
  r.String("gpuResourceName", &s->gpu_resource_name);
  r.StringMap("nodeSelector", &s->node_selector);
  r.List("tolerations", [&](const Json& item, const std::string& p) {
    Toleration t;
    DecodeToleration(item, p, &t, errors);
    s->tolerations.push_back(std::move(t));
  });
  r.String("image", &s->image);
}

void DecodeSpec(const Json& j, const std::string& path, ModelSelectionJobSpec* s,
                std::vector<FieldError>* errors) {
  ObjectReader r(j, path, errors);
  if (r.Get("tasks", true)) {
    r.List("tasks", [&](const Json& item, const std::string& p) {
      TaskSpec t;
      DecodeTask(item, p, &t, errors);
      s->tasks.push_back(std::move(t));
    });
  }
  if (const Json* v = r.Get("resources", true))
    DecodeResources(*v, r.Path("resources"), &s->resources, errors);
  if (const Json* v = r.Get("scheduling")) {
    ObjectReader o(*v, r.Path("scheduling"), errors);
    o.Enum("objective", &s->scheduling.objective);
    o.Integer("solverTimeLimitSeconds", &s->scheduling.solver_time_limit_seconds);
    o.Integer("replanIntervalSeconds", &s->scheduling.replan_interval_seconds);
    o.Number("minSwitchGain", &s->scheduling.min_switch_gain);
    o.Integer("coalesceWindowSeconds", &s->scheduling.coalesce_window_seconds);
    o.Bool("warmStart", &s->scheduling.warm_start);
  }
  if (const Json* v = r.Get("profiling")) {
    ObjectReader o(*v, r.Path("profiling"), errors);
    o.Integer("trialSteps", &s->profiling.trial_steps);
    ReadList(
        o, "gpuCounts", &s->profiling.gpu_counts,
        [&o](const Json& x, const std::string& p, int* out) { return o.ReadInteger(x, p, out); });
    o.Bool("reuseCache", &s->profiling.reuse_cache);
  }
  if (const Json* v = r.Get("elasticity")) {
    ObjectReader o(*v, r.Path("elasticity"), errors);
    o.Bool("enabled", &s->elasticity.enabled);
    o.Integer("minBatchSize", &s->elasticity.min_batch_size);
    o.Integer("maxBatchSize", &s->elasticity.max_batch_size);
    o.Enum("learningRateScaling", &s->elasticity.learning_rate_scaling);
  }
  if (const Json* v = r.Get("checkpoints")) {
    ObjectReader o(*v, r.Path("checkpoints"), errors);
    o.String("claimName", &s->checkpoints.claim_name);
    o.String("path", &s->checkpoints.path);
    o.Integer("intervalSteps", &s->checkpoints.interval_steps);
    o.Integer("keep", &s->checkpoints.keep);
  }
  r.Bool("suspend", &s->suspend);
}

void DecodeMetadata(const Json& j, const std::string& path, ObjectMeta* m,
                    std::vector<FieldError>* errors) {
  if (!j.is_object()) {
    errors->push_back({path, std::string("must be an object, not a ") + TypeName(j),
                       "write name: under metadata"});
    return;
  }
  // Lenient on purpose: objects from the server carry many fields Orrery ignores.
  std::vector<FieldError> local;
  ObjectReader r(j, path, &local);
  r.String("name", &m->name);
  r.String("namespace", &m->namespace_);
  r.String("uid", &m->uid);
  r.String("resourceVersion", &m->resource_version);
  r.Integer("generation", &m->generation);
  r.StringMap("labels", &m->labels);
  r.StringMap("annotations", &m->annotations);
  Json extra = Json::object();
  for (const auto& [key, value] : j.items()) {
    if (key != "name" && key != "namespace" && key != "uid" && key != "resourceVersion" &&
        key != "generation" && key != "labels" && key != "annotations") {
      extra[key] = value;
    }
  }
  if (!extra.empty()) m->extra_json = extra.dump();
  // Only type errors count; unknown keys went to extra_json.
  r.Finish();
  for (auto& e : local) {
    if (e.message.rfind("unknown field", 0) != 0) errors->push_back(std::move(e));
  }
}

// ---- encode ----------------------------------------------------------------
template <typename E>
Json EnumJson(E e) {
  return std::string(EnumName(e));
}

Json EncodeModel(const ModelSpec& m) {
  Json j = Json::object();
  if (m.gpt) {
    j["gpt"] = {{"layers", m.gpt->layers},
                {"hidden", m.gpt->hidden},
                {"heads", m.gpt->heads},
                {"seqLen", m.gpt->seq_len},
                {"vocab", m.gpt->vocab}};
  }
  if (m.mlp) {
    j["mlp"] = {{"layers", m.mlp->layers},
                {"hidden", m.mlp->hidden},
                {"inputs", m.mlp->inputs},
                {"outputs", m.mlp->outputs}};
  }
  if (m.torchscript) j["torchscript"] = {{"path", m.torchscript->path}};
  if (m.pretrained) {
    Json p = {{"path", m.pretrained->path}, {"seqLen", m.pretrained->seq_len}};
    if (m.pretrained->volume) {
      p["volume"] = {{"claimName", m.pretrained->volume->claim_name},
                     {"mountPath", m.pretrained->volume->mount_path}};
    }
    j["pretrained"] = p;
  }
  return j;
}

Json EncodeData(const DataSpec& d) {
  Json j = Json::object();
  if (d.tokens) j["tokens"] = {{"path", d.tokens->path}, {"dtype", EnumJson(d.tokens->dtype)}};
  if (d.text) {
    j["text"] = {{"path", d.text->path}};
    if (!d.text->tokenizer.empty()) j["text"]["tokenizer"] = d.text->tokenizer;
  }
  if (d.synthetic) {
    j["synthetic"] = {{"seed", d.synthetic->seed},
                      {"vocabSize", d.synthetic->vocab_size},
                      {"samples", d.synthetic->samples}};
  }
  return j;
}

Json EncodeTraining(const TrainingSpec& t) {
  Json j = Json::object();
  if (t.steps) j["steps"] = *t.steps;
  if (t.epochs) j["epochs"] = *t.epochs;
  j["batchSize"] = t.batch_size;
  j["optimizer"] = EnumJson(t.optimizer);
  j["learningRate"] = t.learning_rate;
  j["weightDecay"] = t.weight_decay;
  j["momentum"] = t.momentum;
  j["schedule"] = EnumJson(t.schedule);
  j["precision"] = EnumJson(t.precision);
  j["warmupSteps"] = t.warmup_steps;
  return j;
}

Json EncodeFineTuning(const FineTuningSpec& f) {
  Json j = {{"freezeEmbeddings", f.freeze_embeddings}, {"freezeBlocks", f.freeze_blocks}};
  if (f.lora) {
    Json l = Json::object();
    if (f.lora->rank) l["rank"] = *f.lora->rank;
    l["alpha"] = f.lora->alpha;
    if (!f.lora->targets.empty()) l["targets"] = f.lora->targets;
    j["lora"] = l;
  }
  return j;
}

Json EncodeOutput(const OutputSpec& o) {
  Json j = {{"path", o.path}, {"dtype", EnumJson(o.dtype)}, {"mergeLora", o.merge_lora}};
  if (o.volume) {
    j["volume"] = {{"claimName", o.volume->claim_name}, {"mountPath", o.volume->mount_path}};
  }
  return j;
}

Json EncodeDistribution(const Distribution& d) {
  Json j = Json::object();
  if (d.min) j["min"] = *d.min;
  if (d.max) j["max"] = *d.max;
  j["logScale"] = d.log_scale;
  if (!d.values.empty()) j["values"] = d.values;
  return j;
}

Json EncodeSearchSpace(const SearchSpace& s) {
  Json j = Json::object();
  if (s.grid) {
    Json g = Json::object();
    if (!s.grid->learning_rate.empty()) g["learningRate"] = s.grid->learning_rate;
    if (!s.grid->batch_size.empty()) g["batchSize"] = s.grid->batch_size;
    if (!s.grid->weight_decay.empty()) g["weightDecay"] = s.grid->weight_decay;
    if (!s.grid->warmup_steps.empty()) g["warmupSteps"] = s.grid->warmup_steps;
    if (!s.grid->optimizer.empty()) {
      Json list = Json::array();
      for (Optimizer o : s.grid->optimizer) list.push_back(EnumJson(o));
      g["optimizer"] = list;
    }
    if (!s.grid->lora_rank.empty()) g["loraRank"] = s.grid->lora_rank;
    if (!s.grid->freeze_blocks.empty()) g["freezeBlocks"] = s.grid->freeze_blocks;
    j["grid"] = g;
  }
  if (s.random) {
    Json r = Json::object();
    r["seed"] = s.random->seed;
    r["count"] = s.random->count;
    if (s.random->learning_rate) r["learningRate"] = EncodeDistribution(*s.random->learning_rate);
    if (s.random->batch_size) r["batchSize"] = EncodeDistribution(*s.random->batch_size);
    if (s.random->weight_decay) r["weightDecay"] = EncodeDistribution(*s.random->weight_decay);
    if (s.random->warmup_steps) r["warmupSteps"] = EncodeDistribution(*s.random->warmup_steps);
    if (s.random->lora_rank) r["loraRank"] = EncodeDistribution(*s.random->lora_rank);
    if (s.random->freeze_blocks) r["freezeBlocks"] = EncodeDistribution(*s.random->freeze_blocks);
    j["random"] = r;
  }
  return j;
}

}  // namespace

Json EncodeTask(const TaskSpec& t) {
  Json j = Json::object();
  j["name"] = t.name;
  j["weight"] = t.weight;
  j["model"] = EncodeModel(t.model);
  j["data"] = EncodeData(t.data);
  j["training"] = EncodeTraining(t.training);
  if (t.fine_tuning) j["fineTuning"] = EncodeFineTuning(*t.fine_tuning);
  if (t.output) j["output"] = EncodeOutput(*t.output);
  if (t.search_space) j["searchSpace"] = EncodeSearchSpace(*t.search_space);
  if (!t.gpu_types.empty()) j["gpuTypes"] = t.gpu_types;
  return j;
}

Json EncodeSpec(const ModelSelectionJobSpec& s) {
  Json j = Json::object();
  Json tasks = Json::array();
  for (const TaskSpec& t : s.tasks) tasks.push_back(EncodeTask(t));
  j["tasks"] = tasks;

  Json res = Json::object();
  Json templates = Json::array();
  for (Template t : s.resources.templates) templates.push_back(EnumJson(t));
  res["templates"] = templates;
  res["gpusPerTask"] = {{"min", s.resources.gpus_per_task.min},
                        {"max", s.resources.gpus_per_task.max}};
  res["gpuQuota"] = s.resources.gpu_quota;
  res["gpuResourceName"] = s.resources.gpu_resource_name;
  if (!s.resources.node_selector.empty()) res["nodeSelector"] = s.resources.node_selector;
  if (!s.resources.tolerations.empty()) {
    Json list = Json::array();
    for (const Toleration& t : s.resources.tolerations) {
      Json tj = Json::object();
      if (!t.key.empty()) tj["key"] = t.key;
      tj["operator"] = t.operator_;
      if (!t.value.empty()) tj["value"] = t.value;
      if (!t.effect.empty()) tj["effect"] = t.effect;
      if (t.toleration_seconds) tj["tolerationSeconds"] = *t.toleration_seconds;
      list.push_back(tj);
    }
    res["tolerations"] = list;
  }
  res["image"] = s.resources.image;
  j["resources"] = res;

  j["scheduling"] = {{"objective", EnumJson(s.scheduling.objective)},
                     {"solverTimeLimitSeconds", s.scheduling.solver_time_limit_seconds},
                     {"replanIntervalSeconds", s.scheduling.replan_interval_seconds},
                     {"minSwitchGain", s.scheduling.min_switch_gain},
                     {"coalesceWindowSeconds", s.scheduling.coalesce_window_seconds},
                     {"warmStart", s.scheduling.warm_start}};
  Json prof = Json::object();
  prof["trialSteps"] = s.profiling.trial_steps;
  if (!s.profiling.gpu_counts.empty()) prof["gpuCounts"] = s.profiling.gpu_counts;
  prof["reuseCache"] = s.profiling.reuse_cache;
  j["profiling"] = prof;
  Json el = Json::object();
  el["enabled"] = s.elasticity.enabled;
  if (s.elasticity.min_batch_size) el["minBatchSize"] = *s.elasticity.min_batch_size;
  if (s.elasticity.max_batch_size) el["maxBatchSize"] = *s.elasticity.max_batch_size;
  el["learningRateScaling"] = EnumJson(s.elasticity.learning_rate_scaling);
  j["elasticity"] = el;
  Json ck = Json::object();
  if (!s.checkpoints.claim_name.empty()) ck["claimName"] = s.checkpoints.claim_name;
  ck["path"] = s.checkpoints.path;
  ck["intervalSteps"] = s.checkpoints.interval_steps;
  ck["keep"] = s.checkpoints.keep;
  j["checkpoints"] = ck;
  j["suspend"] = s.suspend;
  return j;
}

Json EncodeStatus(const ModelSelectionJobStatus& s) {
  Json j = Json::object();
  j["phase"] = EnumJson(s.phase);
  j["observedGeneration"] = s.observed_generation;
  Json conditions = Json::array();
  for (const Condition& c : s.conditions) {
    conditions.push_back({{"type", c.type},
                          {"status", c.status},
                          {"observedGeneration", c.observed_generation},
                          {"lastTransitionTime", c.last_transition_time},
                          {"reason", c.reason},
                          {"message", c.message}});
  }
  j["conditions"] = conditions;
  if (s.plan) {
    j["plan"] = {{"makespanSeconds", s.plan->makespan_seconds},
                 {"lowerBoundSeconds", s.plan->lower_bound_seconds},
                 {"gap", s.plan->gap},
                 {"solveSeconds", s.plan->solve_seconds},
                 {"revision", s.plan->revision}};
    if (!s.plan->trigger.empty()) j["plan"]["trigger"] = s.plan->trigger;
  }
  Json tasks = Json::array();
  for (const TaskStatus& t : s.tasks) {
    Json tj = Json::object();
    tj["name"] = t.name;
    tj["state"] = EnumJson(t.state);
    if (t.config) {
      tj["config"] = {{"template", EnumJson(t.config->template_)},
                      {"gpus", t.config->gpus},
                      {"batchSize", t.config->batch_size},
                      {"nodes", t.config->nodes}};
      if (!t.config->recompute.empty()) tj["config"]["recompute"] = t.config->recompute;
      if (!t.config->gpu_type.empty()) tj["config"]["gpuType"] = t.config->gpu_type;
    }
    tj["stepsDone"] = t.steps_done;
    tj["stepsTotal"] = t.steps_total;
    tj["progress"] = t.progress;
    tj["samplesPerSecond"] = t.samples_per_second;
    tj["etaSeconds"] = t.eta_seconds;
    if (t.last_checkpoint) {
      tj["lastCheckpoint"] = {{"step", t.last_checkpoint->step},
                              {"samples", t.last_checkpoint->samples},
                              {"path", t.last_checkpoint->path},
                              {"time", t.last_checkpoint->time},
                              {"seconds", t.last_checkpoint->seconds},
                              {"bytesWritten", t.last_checkpoint->bytes_written},
                              {"bytesNeeded", t.last_checkpoint->bytes_needed},
                              {"peakRssBytes", t.last_checkpoint->peak_rss_bytes}};
    }
    if (t.last_restore) {
      const RestoreRef& r = *t.last_restore;
      Json rj = {{"generation", r.generation},    {"time", r.time},
                 {"seconds", r.seconds},          {"bytesRead", r.bytes_read},
                 {"bytesNeeded", r.bytes_needed}, {"peakRssBytes", r.peak_rss_bytes}};
      if (r.step >= 0) rj["step"] = r.step;  // absent: no scrape caught it
      if (!r.from_layout.empty()) rj["fromLayout"] = r.from_layout;
      if (!r.layout.empty()) rj["layout"] = r.layout;
      tj["lastRestore"] = rj;
    }
    if (!t.export_path.empty()) tj["exportPath"] = t.export_path;
    tj["restarts"] = t.restarts;
    if (!t.message.empty()) tj["message"] = t.message;
    tasks.push_back(tj);
  }
  j["tasks"] = tasks;
  j["taskSummary"] = s.task_summary;
  j["gpusHeld"] = s.gpus_held;
  j["eta"] = s.eta;
  return j;
}

void DecodeStatus(const Json& json, const std::string& path, ModelSelectionJobStatus* s,
                  std::vector<FieldError>* errors) {
  ObjectReader r(json, path, errors);
  r.Enum("phase", &s->phase);
  r.Integer("observedGeneration", &s->observed_generation);
  r.List("conditions", [&](const Json& item, const std::string& p) {
    ObjectReader o(item, p, errors);
    Condition c;
    o.String("type", &c.type, true);
    o.String("status", &c.status, true);
    o.Integer("observedGeneration", &c.observed_generation);
    o.String("lastTransitionTime", &c.last_transition_time);
    o.String("reason", &c.reason);
    o.String("message", &c.message);
    s->conditions.push_back(std::move(c));
  });
  if (const Json* v = r.Get("plan")) {
    ObjectReader o(*v, r.Path("plan"), errors);
    PlanStatus p;
    o.Number("makespanSeconds", &p.makespan_seconds);
    o.Number("lowerBoundSeconds", &p.lower_bound_seconds);
    o.Number("gap", &p.gap);
    o.Number("solveSeconds", &p.solve_seconds);
    o.Integer("revision", &p.revision);
    o.String("trigger", &p.trigger);
    s->plan = p;
  }
  r.List("tasks", [&](const Json& item, const std::string& p) {
    ObjectReader o(item, p, errors);
    TaskStatus t;
    o.String("name", &t.name, true);
    o.Enum("state", &t.state);
    if (const Json* v = o.Get("config")) {
      ObjectReader c(*v, o.Path("config"), errors);
      TaskConfig config;
      c.Enum("template", &config.template_);
      c.Integer("gpus", &config.gpus);
      c.Integer("batchSize", &config.batch_size);
      c.String("recompute", &config.recompute);
      c.String("gpuType", &config.gpu_type);
      c.List("nodes", [&](const Json& n, const std::string& np) {
        std::string node;
        if (c.ReadString(n, np, &node)) config.nodes.push_back(node);
      });
      t.config = config;
    }
    o.Integer("stepsDone", &t.steps_done);
    o.Integer("stepsTotal", &t.steps_total);
    o.Number("progress", &t.progress);
    o.Number("samplesPerSecond", &t.samples_per_second);
    o.Number("etaSeconds", &t.eta_seconds);
    if (const Json* v = o.Get("lastCheckpoint")) {
      ObjectReader c(*v, o.Path("lastCheckpoint"), errors);
      CheckpointRef ref;
      c.Integer("step", &ref.step);
      c.Integer("samples", &ref.samples);
      c.String("path", &ref.path);
      c.String("time", &ref.time);
      c.Number("seconds", &ref.seconds);
      c.Integer("bytesWritten", &ref.bytes_written);
      c.Integer("bytesNeeded", &ref.bytes_needed);
      c.Integer("peakRssBytes", &ref.peak_rss_bytes);
      t.last_checkpoint = ref;
    }
    if (const Json* v = o.Get("lastRestore")) {
      ObjectReader c(*v, o.Path("lastRestore"), errors);
      RestoreRef ref;
      c.Integer("generation", &ref.generation);
      c.Integer("step", &ref.step);
      c.String("time", &ref.time);
      c.Number("seconds", &ref.seconds);
      c.Integer("bytesRead", &ref.bytes_read);
      c.Integer("bytesNeeded", &ref.bytes_needed);
      c.Integer("peakRssBytes", &ref.peak_rss_bytes);
      c.String("fromLayout", &ref.from_layout);
      c.String("layout", &ref.layout);
      t.last_restore = ref;
    }
    o.String("exportPath", &t.export_path);
    o.Integer("restarts", &t.restarts);
    o.String("message", &t.message);
    s->tasks.push_back(std::move(t));
  });
  r.String("taskSummary", &s->task_summary);
  r.Integer("gpusHeld", &s->gpus_held);
  r.String("eta", &s->eta);
}

void DecodeJob(const Json& json, ModelSelectionJob* job, std::vector<FieldError>* errors) {
  ObjectReader r(json, "", errors);
  if (!r.valid()) return;
  r.String("apiVersion", &job->api_version, true);
  r.String("kind", &job->kind, true);
  if (const Json* v = r.Get("metadata", true))
    DecodeMetadata(*v, "metadata", &job->metadata, errors);
  if (const Json* v = r.Get("spec", true)) DecodeSpec(*v, "spec", &job->spec, errors);
  if (const Json* v = r.Get("status")) {
    ModelSelectionJobStatus status;
    DecodeStatus(*v, "status", &status, errors);
    job->status = std::move(status);
  }
}

StatusOr<ModelSelectionJob> JobFromJson(const Json& json) {
  ModelSelectionJob job;
  std::vector<FieldError> errors;
  DecodeJob(json, &job, &errors);
  ORRERY_RETURN_IF_ERROR(FieldErrorsToStatus(errors, "decoding ModelSelectionJob"));
  return job;
}

StatusOr<ModelSelectionJob> JobFromJsonText(std::string_view text) {
  ORRERY_ASSIGN_OR_RETURN(Json json, ParseJson(text));
  return JobFromJson(json);
}

StatusOr<ModelSelectionJob> JobFromYaml(std::string_view text) {
  ORRERY_ASSIGN_OR_RETURN(Json json, YamlToJson(text));
  return JobFromJson(json);
}

Json EncodeJob(const ModelSelectionJob& job) {
  Json j = Json::object();
  j["apiVersion"] = job.api_version;
  j["kind"] = job.kind;
  Json meta = Json::object();
  if (!job.metadata.name.empty()) meta["name"] = job.metadata.name;
  if (!job.metadata.namespace_.empty()) meta["namespace"] = job.metadata.namespace_;
  if (!job.metadata.uid.empty()) meta["uid"] = job.metadata.uid;
  if (!job.metadata.resource_version.empty())
    meta["resourceVersion"] = job.metadata.resource_version;
  if (job.metadata.generation != 0) meta["generation"] = job.metadata.generation;
  if (!job.metadata.labels.empty()) meta["labels"] = job.metadata.labels;
  if (!job.metadata.annotations.empty()) meta["annotations"] = job.metadata.annotations;
  if (!job.metadata.extra_json.empty()) {
    Json extra = Json::parse(job.metadata.extra_json, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object()) {
      for (const auto& [key, value] : extra.items()) meta[key] = value;
    }
  }
  j["metadata"] = meta;
  j["spec"] = EncodeSpec(job.spec);
  if (job.status) j["status"] = EncodeStatus(*job.status);
  return j;
}

std::string JobToJson(const ModelSelectionJob& job, int indent) {
  return EncodeJob(job).dump(indent);
}

std::string JobToYaml(const ModelSelectionJob& job) { return JsonToYaml(EncodeJob(job)); }

}  // namespace orrery::api
