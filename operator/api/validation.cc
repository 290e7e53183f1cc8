// Validation of ModelSelectionJob; see validation.h. Numeric bounds come from
// schema.h's kLimits (shared with the CRD); the cross-field rules below mirror the
// CRD's CEL rules and use the same wording.
#include "operator/api/validation.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "operator/api/expand.h"
#include "operator/api/paths.h"

namespace orrery::api {

namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool HasUpper(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])? of at most 63 characters: a label
// value that is not empty, and the name part of a label key.
bool IsLabelName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A registry host: dot-separated components of [a-zA-Z0-9-] (alphanumeric at
// both ends), then an optional :port.
bool IsRegistryHost(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon != std::string_view::npos) {
    std::string_view port = s.substr(colon + 1);
    if (port.empty() ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    s = s.substr(0, colon);
  }
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    std::string_view c = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (c.empty() || !IsAlnum(c.front()) || !IsAlnum(c.back())) return false;
    if (!std::all_of(c.begin(), c.end(), [](char ch) { return IsAlnum(ch) || ch == '-'; })) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// A repository path component: runs of [a-z0-9] joined by '.', '_', '__' or
// any number of '-'.
bool IsPathComponent(std::string_view s) {
  size_t i = 0;
  while (true) {
    const size_t run = i;
    while (i < s.size() && IsLowerAlnum(s[i])) ++i;
    if (i == run) return false;  // empty, or a separator where letters belong
    if (i == s.size()) return true;
    if (s[i] == '.') {
      ++i;
    } else if (s[i] == '_') {
      i += (i + 1 < s.size() && s[i + 1] == '_') ? 2 : 1;
    } else if (s[i] == '-') {
      while (i < s.size() && s[i] == '-') ++i;
    } else {
      return false;
    }
  }
}

bool IsHex(std::string_view s, size_t length) {
  return s.size() == length &&
         std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) && c <= 'f'; });
}

}  // namespace

const Limit& LimitFor(std::string_view path) {
  for (const Limit& l : kLimits) {
    if (l.path == path) return l;
  }
  std::abort();  // a rule names a limit schema.h lacks: a programming error
}

bool IsDns1123Label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && i != 0 && i + 1 != s.size())) return false;
  }
  return true;
}

bool IsDns1123Subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string label = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!IsDns1123Label(label)) return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool IsLabelValue(const std::string& s) { return s.empty() || IsLabelName(s); }

bool IsLabelKey(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) return IsLabelName(s);
  if (s.find('/', slash + 1) != std::string::npos) return false;
  return IsDns1123Subdomain(s.substr(0, slash)) && IsLabelName(s.substr(slash + 1));
}

bool IsExtendedResourceName(const std::string& s) {
  // The API server's rule (IsExtendedResourceName): not native (a bare name or
  // one under kubernetes.io/), and "requests.<name>" still a qualified name, as
  // a ResourceQuota names it.
  return s.find('/') != std::string::npos && IsLabelKey(s) &&
         s.find("kubernetes.io/") == std::string::npos && s.rfind("requests.", 0) != 0 &&
         IsLabelKey("requests." + s);
}

std::string ImageReferenceProblem(const std::string& image) {
  if (image.empty()) return "must not be empty";
  if (std::any_of(image.begin(), image.end(),
                  [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; })) {
    return "must not contain spaces";
  }
  std::string_view rest = image;
  const size_t at = rest.find('@');
  if (at != std::string_view::npos) {
    std::string_view digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    const size_t colon = digest.find(':');
    std::string_view algorithm = digest.substr(0, colon);
    std::string_view hex = colon == std::string_view::npos ? "" : digest.substr(colon + 1);
    const size_t want = algorithm == "sha256"   ? 64
                        : algorithm == "sha384" ? 96
                        : algorithm == "sha512" ? 128
                                                : 0;
    if (want == 0 || !IsHex(hex, want)) {
      return "has a malformed digest \"" + std::string(digest) +
             "\": it must be sha256: and 64 lower-case hex digits (or sha384:, sha512:)";
    }
  }
  // The tag follows the last ':' after the last '/' (an earlier one is a port).
  const size_t last_slash = rest.rfind('/');
  const size_t colon = rest.find(':', last_slash == std::string_view::npos ? 0 : last_slash);
  if (colon != std::string_view::npos) {
    std::string_view tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (tag.empty() || tag.size() > 128 || tag.front() == '.' || tag.front() == '-' ||
        !std::all_of(tag.begin(), tag.end(),
                     [](char c) { return IsAlnum(c) || c == '_' || c == '.' || c == '-'; })) {
      return "has a malformed tag \"" + std::string(tag) +
             "\": at most 128 of [A-Za-z0-9_.-], not starting with '.' or '-'";
    }
  }
  if (rest.empty()) return "names no repository";
  if (rest.size() > 255) return "has a name longer than 255 characters";
  if (IsHex(rest, 64)) return "is 64 hex digits, which reads as an image ID, not a name";
  // The first component is a registry when it looks like a host (as the
  // kubelet splits it); the repository after it must be lower case.
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t slash = rest.find('/', start);
    parts.push_back(
        rest.substr(start, slash == std::string_view::npos ? rest.npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  const bool registry = parts.size() > 1 && (IsRegistryHost(parts[0]) || IsPathComponent(parts[0]));
  if (parts.size() > 1 && !registry) {
    return "has a malformed registry \"" + std::string(parts[0]) + "\"";
  }
  for (size_t i = parts.size() > 1 ? 1 : 0; i < parts.size(); ++i) {
    if (HasUpper(parts[i])) return "has an upper-case repository name: it must be lower case";
    if (!IsPathComponent(parts[i])) {
      return "has a malformed repository component \"" + std::string(parts[i]) +
             "\": lower-case letters and digits, joined by '.', '_', '__' or '-'";
    }
  }
  return "";
}

std::string MountPathProblem(const std::string& path) {
  if (path.empty() || path[0] != '/') return "must be an absolute path";
  if (path.find(':') != std::string::npos) {
    return "must not contain ':' (container runtimes read it as a separator)";
  }
  if (HasUncleanComponent(path)) return "must be a clean path: no '.', '..' or empty components";
  if (path.find_first_not_of('/') == std::string::npos) return "must not be /";
  return "";
}

namespace {

std::string Num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, ptr) : "?";
}

std::string Range(const Limit& l) {
  if (l.min && l.max) return "between " + Num(*l.min) + " and " + Num(*l.max);
  if (l.min) return (l.exclusive_min ? "greater than " : "of at least ") + Num(*l.min);
  return "of at most " + Num(*l.max);
}

class Checker {
 public:
  explicit Checker(std::vector<FieldError>* errors) : errors_(errors) {}

  void Add(std::string path, std::string message, std::string fix) {
    errors_->push_back({std::move(path), std::move(message), std::move(fix)});
  }

  // A number against the limit named `pattern`; false when out of bounds.
  bool Value(std::string_view pattern, const std::string& path, double v) {
    const Limit& l = LimitFor(pattern);
    std::string fix = "use a value " + Range(l);
    if (l.min && l.exclusive_min && !(v > *l.min)) {
      Add(path, "must be greater than " + Num(*l.min), fix);
      return false;
    }
    if (l.min && !l.exclusive_min && v < *l.min) {
      Add(path, "must be at least " + Num(*l.min), fix);
      return false;
    }
    if (l.max && v > *l.max) {
      Add(path, "must be at most " + Num(*l.max), fix);
      return false;
    }
    return true;
  }

  void Items(std::string_view pattern, const std::string& path, size_t n) {
    const Limit& l = LimitFor(pattern);
    if (l.min && static_cast<double>(n) < *l.min) {
      Add(path,
          *l.min == 1 ? std::string("must not be empty")
                      : "must have at least " + Num(*l.min) + " items",
          "list at least " + Num(*l.min) + (*l.min == 1 ? " item" : " items"));
    }
    if (l.max && static_cast<double>(n) > *l.max) {
      Add(path, "must have at most " + Num(*l.max) + " items, has " + std::to_string(n),
          "shorten the list to " + Num(*l.max) + " items");
    }
  }

  void Length(std::string_view pattern, const std::string& path, const std::string& s) {
    const Limit& l = LimitFor(pattern);
    if (l.min && static_cast<double>(s.size()) < *l.min) {
      Add(path, "required value", "set a non-empty string");
    }
    if (l.max && static_cast<double>(s.size()) > *l.max) {
      Add(path,
          "must be at most " + Num(*l.max) + " characters long, is " + std::to_string(s.size()),
          "shorten it");
    }
  }

 private:
  std::vector<FieldError>* errors_;
};

// The Hugging Face module names LoRA may target, by family (model.h
// LoraProjections in the worker): GPT-2's fused c_attn, its two c_proj
// (attention and MLP output) and c_fc; Llama's (and Qwen2's, Mistral's)
// separate projections.
const std::vector<std::string>& Gpt2LoraModules() {
  static const std::vector<std::string> names = {"c_attn", "c_proj", "c_fc"};
  return names;
}
const std::vector<std::string>& LlamaLoraModules() {
  static const std::vector<std::string> names = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}
std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool IsTransformer(const ModelSpec& m) { return m.gpt.has_value() || m.pretrained.has_value(); }

// The mount paths a worker pod already has besides the task's own volumes
// (controller/gang.h): scratch, shared memory and the checkpoint volume.
struct PodMounts {
  std::string checkpoints;  // spec.checkpoints.path
};

// A volume's claim and mount path, and `path` (the model's or the output's)
// against it: relative inside the volume, or absolute under its mount path.
void CheckVolume(Checker& c, const std::string& claim, const std::string& mount,
                 const std::string& file_path, const std::string& volume_path,
                 const std::string& limit_base, const std::string& path_field, const PodMounts& pod,
                 const std::string& example_mount) {
  c.Length(limit_base + ".claimName", volume_path + ".claimName", claim);
  if (!claim.empty() && !IsDns1123Subdomain(claim)) {
    c.Add(volume_path + ".claimName", "\"" + claim + "\" is not a valid PersistentVolumeClaim name",
          "use lower-case letters, digits, '-' and '.'");
  }
  c.Length(limit_base + ".mountPath", volume_path + ".mountPath", mount);
  bool mount_ok = false;
  if (!mount.empty()) {
    if (mount[0] != '/' || mount == "/" || mount.back() == '/' || HasUncleanComponent(mount)) {
      c.Add(volume_path + ".mountPath", "must be a clean absolute path other than /",
            "write it like " + example_mount);
    } else if (mount.find(':') != std::string::npos) {
      c.Add(volume_path + ".mountPath",
            "must not contain ':' (container runtimes read it as a separator)",
            "write it like " + example_mount);
    } else if (mount == "/tmp" || mount == "/dev/shm" || mount == pod.checkpoints) {
      c.Add(volume_path + ".mountPath",
            "is already a mount of the worker pods (" +
                std::string(mount == pod.checkpoints ? "spec.checkpoints.path" : "scratch space") +
                "): each volume needs its own mountPath",
            "mount it elsewhere, e.g. " + example_mount);
    } else {
      mount_ok = true;
    }
  }
  if (file_path.empty()) return;
  if (file_path[0] != '/') {
    if (HasUncleanComponent("/" + file_path)) {
      c.Add(path_field, "must stay inside the volume: no '.', '..' or empty components",
            "write it relative to " + mount + ", e.g. gpt2");
    }
  } else if (mount_ok && !PathUnder(file_path, mount)) {
    c.Add(path_field, "\"" + file_path + "\" is not on the volume mounted at " + mount,
          "write it relative to the volume, or under " + mount);
  }
}

// Whether the search space sets `pick` (a grid list or a random distribution).
bool SearchSets(const std::optional<SearchSpace>& s, bool (*pick)(const GridSpace&),
                bool (*pick_random)(const RandomSpace&)) {
  if (!s) return false;
  return (s->grid && pick(*s->grid)) || (s->random && pick_random(*s->random));
}
bool SetsLoraRank(const std::optional<SearchSpace>& s) {
  return SearchSets(
      s, [](const GridSpace& g) { return !g.lora_rank.empty(); },
      [](const RandomSpace& r) { return r.lora_rank.has_value(); });
}
bool SetsFreezeBlocks(const std::optional<SearchSpace>& s) {
  return SearchSets(
      s, [](const GridSpace& g) { return !g.freeze_blocks.empty(); },
      [](const RandomSpace& r) { return r.freeze_blocks.has_value(); });
}

void CheckModel(Checker& c, const ModelSpec& m, const std::string& path, const PodMounts& pod) {
  int kinds = (m.gpt ? 1 : 0) + (m.mlp ? 1 : 0) + (m.torchscript ? 1 : 0) + (m.pretrained ? 1 : 0);
  if (kinds != 1) {
    c.Add(path, "must set exactly one of gpt, mlp, torchscript, pretrained",
          kinds == 0 ? "add a model, e.g. gpt: {layers: 12, hidden: 768, heads: 12, seqLen: 1024, "
                       "vocab: 50257}, or pretrained: {path: /models/gpt2, seqLen: 1024}"
                     : "keep one model kind per task; write another task for the other model");
  }
  if (m.pretrained) {
    const std::string p = path + ".pretrained";
    c.Length("spec.tasks[].model.pretrained.path", p + ".path", m.pretrained->path);
    c.Value("spec.tasks[].model.pretrained.seqLen", p + ".seqLen", m.pretrained->seq_len);
    if (m.pretrained->volume) {
      CheckVolume(c, m.pretrained->volume->claim_name, m.pretrained->volume->mount_path,
                  m.pretrained->path, p + ".volume", "spec.tasks[].model.pretrained.volume",
                  p + ".path", pod, kDefaultModelMountPath);
    }
  }
  if (m.gpt) {
    const std::string p = path + ".gpt";
    c.Value("spec.tasks[].model.gpt.layers", p + ".layers", m.gpt->layers);
    c.Value("spec.tasks[].model.gpt.hidden", p + ".hidden", m.gpt->hidden);
    bool heads_ok = c.Value("spec.tasks[].model.gpt.heads", p + ".heads", m.gpt->heads);
    c.Value("spec.tasks[].model.gpt.seqLen", p + ".seqLen", m.gpt->seq_len);
    c.Value("spec.tasks[].model.gpt.vocab", p + ".vocab", m.gpt->vocab);
    if (heads_ok && m.gpt->hidden > 0 && m.gpt->hidden % m.gpt->heads != 0) {
      c.Add(p + ".heads", "hidden must be divisible by heads",
            "choose heads that divide hidden (" + std::to_string(m.gpt->hidden) + ")");
    }
  }
  if (m.mlp) {
    const std::string p = path + ".mlp";
    c.Value("spec.tasks[].model.mlp.layers", p + ".layers", m.mlp->layers);
    c.Value("spec.tasks[].model.mlp.hidden", p + ".hidden", m.mlp->hidden);
    c.Value("spec.tasks[].model.mlp.inputs", p + ".inputs", m.mlp->inputs);
    c.Value("spec.tasks[].model.mlp.outputs", p + ".outputs", m.mlp->outputs);
  }
  if (m.torchscript)
    c.Length("spec.tasks[].model.torchscript.path", path + ".torchscript.path",
             m.torchscript->path);
}

void CheckData(Checker& c, const DataSpec& d, const ModelSpec& m, const std::string& path) {
  int kinds = (d.tokens ? 1 : 0) + (d.text ? 1 : 0) + (d.synthetic ? 1 : 0);
  if (kinds != 1) {
    c.Add(path, "must set exactly one of tokens, text, synthetic",
          kinds == 0 ? "add a data source, e.g. synthetic: {seed: 1}"
                     : "keep one data source per task");
  }
  if (d.tokens) c.Length("spec.tasks[].data.tokens.path", path + ".tokens.path", d.tokens->path);
  if (d.text) {
    c.Length("spec.tasks[].data.text.path", path + ".text.path", d.text->path);
    c.Length("spec.tasks[].data.text.tokenizer", path + ".text.tokenizer", d.text->tokenizer);
  }
  if (d.synthetic) {
    const std::string p = path + ".synthetic";
    c.Value("spec.tasks[].data.synthetic.seed", p + ".seed",
            static_cast<double>(d.synthetic->seed));
    bool vocab_ok =
        c.Value("spec.tasks[].data.synthetic.vocabSize", p + ".vocabSize", d.synthetic->vocab_size);
    c.Value("spec.tasks[].data.synthetic.samples", p + ".samples",
            static_cast<double>(d.synthetic->samples));
    if (vocab_ok && m.gpt && m.gpt->vocab > 0 && d.synthetic->vocab_size > m.gpt->vocab) {
      c.Add(p + ".vocabSize",
            "must not exceed the model's vocab (" + std::to_string(m.gpt->vocab) + ")",
            "lower vocabSize or raise model.gpt.vocab");
    }
  }
}

void CheckTraining(Checker& c, const TrainingSpec& t, const std::string& path) {
  if (t.steps.has_value() == t.epochs.has_value()) {
    c.Add(path, "must set exactly one of steps and epochs",
          t.steps ? "remove steps or epochs"
                  : "set steps (optimizer steps) or epochs (passes over the data)");
  }
  if (t.steps)
    c.Value("spec.tasks[].training.steps", path + ".steps", static_cast<double>(*t.steps));
  if (t.epochs)
    c.Value("spec.tasks[].training.epochs", path + ".epochs", static_cast<double>(*t.epochs));
  c.Value("spec.tasks[].training.batchSize", path + ".batchSize",
          static_cast<double>(t.batch_size));
  c.Value("spec.tasks[].training.learningRate", path + ".learningRate", t.learning_rate);
  c.Value("spec.tasks[].training.weightDecay", path + ".weightDecay", t.weight_decay);
  c.Value("spec.tasks[].training.momentum", path + ".momentum", t.momentum);
  bool warmup_ok = c.Value("spec.tasks[].training.warmupSteps", path + ".warmupSteps",
                           static_cast<double>(t.warmup_steps));
  if (warmup_ok && t.steps && *t.steps >= 1 && t.warmup_steps >= *t.steps) {
    c.Add(path + ".warmupSteps", "must be less than steps (" + std::to_string(*t.steps) + ")",
          "shorten the warm-up or train for more steps");
  }
}

// A LoRA target: a module of the model's family when it is known (model.gpt is
// Orrery's own GPT, named as GPT-2), of one of the families otherwise (a
// pre-trained model's config.json is read where it can be: engine/estimate.h).
void CheckLoraTarget(Checker& c, const std::string& target, const ModelSpec& m,
                     const std::string& path) {
  // PEFT matches a module by its name's last component: "attn.c_proj" too.
  const std::string module =
      target.substr(target.rfind('.') == std::string::npos ? 0 : target.rfind('.') + 1);
  auto in = [&](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), module) != names.end();
  };
  if (m.gpt) {
    if (!in(Gpt2LoraModules())) {
      c.Add(path, "'" + target + "' is not a module of gpt2 (" + Joined(Gpt2LoraModules()) + ")",
            "use one of " + Joined(Gpt2LoraModules()) + " (model.gpt is named as GPT-2)");
    }
    return;
  }
  if (!in(Gpt2LoraModules()) && !in(LlamaLoraModules())) {
    c.Add(path,
          "'" + target + "' is not a module of gpt2 (" + Joined(Gpt2LoraModules()) +
              ") or llama, qwen2, mistral (" + Joined(LlamaLoraModules()) + ")",
          "use the Hugging Face module names of the model's family, e.g. q_proj, v_proj");
  }
}

void CheckFineTuning(Checker& c, const TaskSpec& t, const std::string& path) {
  const FineTuningSpec& f = *t.fine_tuning;
  if (!IsTransformer(t.model)) {
    c.Add(path, "applies only to transformer models (model.gpt, model.pretrained)",
          "remove fineTuning, or train a gpt or pretrained model");
  }
  bool blocks_ok =
      c.Value("spec.tasks[].fineTuning.freezeBlocks", path + ".freezeBlocks", f.freeze_blocks);
  if (blocks_ok && t.model.gpt && t.model.gpt->layers >= 1 &&
      f.freeze_blocks > t.model.gpt->layers) {
    c.Add(path + ".freezeBlocks",
          "must be at most the model's " + std::to_string(t.model.gpt->layers) +
              " blocks (model.gpt.layers)",
          "freeze at most " + std::to_string(t.model.gpt->layers) + " blocks");
  }
  if (!f.lora) return;
  const LoraSpec& l = *f.lora;
  const std::string lp = path + ".lora";
  if (l.rank) {
    c.Value("spec.tasks[].fineTuning.lora.rank", lp + ".rank", *l.rank);
  } else if (!SetsLoraRank(t.search_space)) {
    c.Add(lp + ".rank", "required value",
          "set rank (e.g. 8), or list loraRank in the task's searchSpace");
  }
  c.Value("spec.tasks[].fineTuning.lora.alpha", lp + ".alpha", l.alpha);
  c.Items("spec.tasks[].fineTuning.lora.targets", lp + ".targets", l.targets.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < l.targets.size(); ++i) {
    const std::string tp = IndexPath(lp + ".targets", i);
    c.Length("spec.tasks[].fineTuning.lora.targets[]", tp, l.targets[i]);
    if (l.targets[i].empty()) continue;
    if (!seen.insert(l.targets[i]).second) {
      c.Add(tp, "duplicate value", "list each module once");
      continue;
    }
    CheckLoraTarget(c, l.targets[i], t.model, tp);
  }
  const std::string why = "has no effect with lora: LoRA freezes every base parameter";
  if (f.freeze_embeddings) {
    c.Add(path + ".freezeEmbeddings", why,
          "remove freezeEmbeddings, or remove lora for a layer-wise fine-tune");
  }
  if (f.freeze_blocks > 0) {
    c.Add(path + ".freezeBlocks", why,
          "remove freezeBlocks, or remove lora for a layer-wise fine-tune");
  }
}

void CheckOutput(Checker& c, const TaskSpec& t, const PodMounts& pod, const std::string& path) {
  const OutputSpec& o = *t.output;
  if (!IsTransformer(t.model)) {
    c.Add(path, "applies only to transformer models (model.gpt, model.pretrained)",
          "remove output: only transformers export to the Hugging Face layout");
  }
  c.Length("spec.tasks[].output.path", path + ".path", o.path);
  // The one placeholder is {task}; any other brace is a mistake.
  const std::string bare = SubstituteTask(o.path, "");
  if (bare.find_first_of("{}") != std::string::npos) {
    c.Add(path + ".path", "has an unknown placeholder: only {task} is replaced",
          "write {task} (the expanded task's name) or remove the braces");
  }
  if (o.volume) {
    // The checks of a path inside the volume see a placeholder as a name.
    CheckVolume(c, o.volume->claim_name, o.volume->mount_path, SubstituteTask(o.path, "t"),
                path + ".volume", "spec.tasks[].output.volume", path + ".path", pod,
                kDefaultOutputMountPath);
    if (t.model.pretrained && t.model.pretrained->volume &&
        t.model.pretrained->volume->mount_path == o.volume->mount_path) {
      c.Add(path + ".volume.mountPath",
            "is also model.pretrained.volume.mountPath: each volume needs its own mountPath "
            "(the model's is read-only)",
            "mount the output elsewhere, e.g. " + std::string(kDefaultOutputMountPath) +
                " (the same claim may be mounted twice)");
    }
  }
  const bool lora = (t.fine_tuning && t.fine_tuning->lora) || SetsLoraRank(t.search_space);
  if (o.merge_lora && !lora) {
    c.Add(path + ".mergeLora", "applies only to LoRA fine-tuning",
          "remove mergeLora, or add fineTuning.lora");
  }
  const size_t variants = CountVariants(t);
  if (variants > 1 && o.path.find(kTaskPlaceholder) == std::string::npos) {
    c.Add(path + ".path",
          "the search space makes " + std::to_string(variants) +
              " tasks that would all write to \"" + o.path + "\"",
          "put {task} in the path, e.g. " + o.path + "/{task}");
  }
}

// A list of grid values: bounds per item and no repeats.
template <typename T>
void CheckGridList(Checker& c, const std::vector<T>& values, std::string_view items_pattern,
                   std::string_view value_pattern, const std::string& path) {
  c.Items(items_pattern, path, values.size());
  std::set<T> seen;
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_arithmetic_v<T>)
      c.Value(value_pattern, IndexPath(path, i), static_cast<double>(values[i]));
    if (!seen.insert(values[i]).second) {
      c.Add(IndexPath(path, i), "duplicate value", "list each value once");
    }
  }
}

void CheckDistribution(Checker& c, const Distribution& d, std::string_view param_pattern,
                       bool integer, const std::string& path, std::string_view values_pattern) {
  bool has_range = d.min || d.max;
  if (has_range == !d.values.empty()) {
    c.Add(path, "must set either min and max, or values",
          has_range ? "remove values or remove min/max"
                    : "add min and max (a range) or values (a list)");
  }
  auto check_value = [&](double v, const std::string& p) {
    bool ok = c.Value(param_pattern, p, v);
    if (ok && integer && v != std::floor(v)) c.Add(p, "must be a whole number", "round it");
    return ok;
  };
  if (has_range) {
    if (!d.min) c.Add(path + ".min", "required value", "set min together with max");
    if (!d.max) c.Add(path + ".max", "required value", "set max together with min");
    bool min_ok = d.min && check_value(*d.min, path + ".min");
    bool max_ok = d.max && check_value(*d.max, path + ".max");
    if (min_ok && max_ok && *d.min > *d.max)
      c.Add(path, "min must not exceed max", "swap min and max");
    if (d.log_scale && min_ok && *d.min <= 0) {
      c.Add(path + ".min", "must be greater than 0 when logScale is true",
            "raise min or set logScale: false");
    }
  } else if (d.log_scale) {
    c.Add(path + ".logScale", "applies only to a min/max range", "remove logScale");
  }
  if (!d.values.empty()) {
    c.Items(values_pattern, path + ".values", d.values.size());
    for (size_t i = 0; i < d.values.size(); ++i)
      check_value(d.values[i], IndexPath(path + ".values", i));
  }
}

void CheckSearchSpace(Checker& c, const SearchSpace& s, const TaskSpec& t,
                      const std::string& path) {
  if (s.grid.has_value() == s.random.has_value()) {
    c.Add(path, "must set exactly one of grid and random",
          s.grid ? "keep grid or random; write a second task for the other"
                 : "add grid (lists of values) or random (seed, count and ranges), or remove "
                   "searchSpace");
  }
  const std::string base = "spec.tasks[].searchSpace.";
  if (s.grid) {
    const GridSpace& g = *s.grid;
    const std::string p = path + ".grid";
    if (g.learning_rate.empty() && g.batch_size.empty() && g.weight_decay.empty() &&
        g.warmup_steps.empty() && g.optimizer.empty() && g.lora_rank.empty() &&
        g.freeze_blocks.empty()) {
      c.Add(p, "must list values for at least one parameter",
            "add e.g. learningRate: [1e-4, 3e-4] (also batchSize, weightDecay, warmupSteps, "
            "optimizer, loraRank, freezeBlocks)");
    }
    if (!g.learning_rate.empty())
      CheckGridList(c, g.learning_rate, base + "grid.learningRate",
                    "spec.tasks[].training.learningRate", p + ".learningRate");
    if (!g.batch_size.empty())
      CheckGridList(c, g.batch_size, base + "grid.batchSize", "spec.tasks[].training.batchSize",
                    p + ".batchSize");
    if (!g.weight_decay.empty())
      CheckGridList(c, g.weight_decay, base + "grid.weightDecay",
                    "spec.tasks[].training.weightDecay", p + ".weightDecay");
    if (!g.warmup_steps.empty())
      CheckGridList(c, g.warmup_steps, base + "grid.warmupSteps",
                    "spec.tasks[].training.warmupSteps", p + ".warmupSteps");
    if (!g.optimizer.empty())
      CheckGridList(c, g.optimizer, base + "grid.optimizer", "", p + ".optimizer");
    if (!g.lora_rank.empty())
      CheckGridList(c, g.lora_rank, base + "grid.loraRank", "spec.tasks[].fineTuning.lora.rank",
                    p + ".loraRank");
    if (!g.freeze_blocks.empty()) {
      CheckGridList(c, g.freeze_blocks, base + "grid.freezeBlocks",
                    "spec.tasks[].fineTuning.freezeBlocks", p + ".freezeBlocks");
      for (size_t i = 0; t.model.gpt && i < g.freeze_blocks.size(); ++i) {
        if (g.freeze_blocks[i] > t.model.gpt->layers) {
          c.Add(IndexPath(p + ".freezeBlocks", i),
                "must be at most the model's " + std::to_string(t.model.gpt->layers) +
                    " blocks (model.gpt.layers)",
                "remove " + std::to_string(g.freeze_blocks[i]));
        }
      }
    }
  }
  if (s.random) {
    const RandomSpace& r = *s.random;
    const std::string p = path + ".random";
    c.Value(base + "random.seed", p + ".seed", static_cast<double>(r.seed));
    c.Value(base + "random.count", p + ".count", r.count);
    if (!r.learning_rate && !r.batch_size && !r.weight_decay && !r.warmup_steps && !r.lora_rank &&
        !r.freeze_blocks) {
      c.Add(p, "must give a distribution for at least one parameter",
            "add e.g. learningRate: {min: 1e-5, max: 1e-3, logScale: true}");
    }
    if (r.learning_rate)
      CheckDistribution(c, *r.learning_rate, "spec.tasks[].training.learningRate", false,
                        p + ".learningRate", base + "random.learningRate.values");
    if (r.batch_size)
      CheckDistribution(c, *r.batch_size, "spec.tasks[].training.batchSize", true, p + ".batchSize",
                        base + "random.batchSize.values");
    if (r.weight_decay)
      CheckDistribution(c, *r.weight_decay, "spec.tasks[].training.weightDecay", false,
                        p + ".weightDecay", base + "random.weightDecay.values");
    if (r.warmup_steps)
      CheckDistribution(c, *r.warmup_steps, "spec.tasks[].training.warmupSteps", true,
                        p + ".warmupSteps", base + "random.warmupSteps.values");
    if (r.lora_rank)
      CheckDistribution(c, *r.lora_rank, "spec.tasks[].fineTuning.lora.rank", true, p + ".loraRank",
                        base + "random.loraRank.values");
    if (r.freeze_blocks) {
      CheckDistribution(c, *r.freeze_blocks, "spec.tasks[].fineTuning.freezeBlocks", true,
                        p + ".freezeBlocks", base + "random.freezeBlocks.values");
      const Distribution& d = *r.freeze_blocks;
      double most = d.max.value_or(0);
      for (double v : d.values) most = std::max(most, v);
      if (t.model.gpt && most > t.model.gpt->layers) {
        c.Add(p + ".freezeBlocks",
              "must be at most the model's " + std::to_string(t.model.gpt->layers) +
                  " blocks (model.gpt.layers)",
              "lower the largest value to " + std::to_string(t.model.gpt->layers));
      }
    }
  }
  // What the fine-tuning dimensions need of the task.
  const bool rank = SetsLoraRank(s), blocks = SetsFreezeBlocks(s);
  const std::string where = s.grid ? path + ".grid" : path + ".random";
  if ((rank || blocks) && !IsTransformer(t.model)) {
    c.Add(where + (rank ? ".loraRank" : ".freezeBlocks"),
          "applies only to transformer models (model.gpt, model.pretrained)",
          "remove it, or train a gpt or pretrained model");
  }
  if (blocks && (rank || (t.fine_tuning && t.fine_tuning->lora))) {
    c.Add(where + ".freezeBlocks", "has no effect with lora: LoRA freezes every base parameter",
          "remove freezeBlocks, or remove lora for a layer-wise fine-tune");
  }
  if (rank && t.fine_tuning &&
      (t.fine_tuning->freeze_blocks > 0 || t.fine_tuning->freeze_embeddings)) {
    c.Add(where + ".loraRank",
          "LoRA freezes every base parameter: fineTuning.freezeBlocks and "
          "freezeEmbeddings would have no effect",
          "remove fineTuning.freezeBlocks and freezeEmbeddings, or loraRank");
  }
}

void CheckResources(Checker& c, const ResourcesSpec& r) {
  const std::string p = "spec.resources";
  c.Items("spec.resources.templates", p + ".templates", r.templates.size());
  std::set<Template> seen;
  for (size_t i = 0; i < r.templates.size(); ++i) {
    if (!seen.insert(r.templates[i]).second) {
      c.Add(IndexPath(p + ".templates", i), "duplicate value", "list each template once");
    }
  }
  bool min_ok =
      c.Value("spec.resources.gpusPerTask.min", p + ".gpusPerTask.min", r.gpus_per_task.min);
  bool max_ok =
      c.Value("spec.resources.gpusPerTask.max", p + ".gpusPerTask.max", r.gpus_per_task.max);
  if (min_ok && max_ok && r.gpus_per_task.min > r.gpus_per_task.max) {
    c.Add(p + ".gpusPerTask", "min must not exceed max",
          "lower min to " + std::to_string(r.gpus_per_task.max) + " or raise max to " +
              std::to_string(r.gpus_per_task.min));
  }
  bool quota_ok = c.Value("spec.resources.gpuQuota", p + ".gpuQuota", r.gpu_quota);
  if (quota_ok && min_ok && r.gpu_quota < r.gpus_per_task.min) {
    c.Add(p + ".gpuQuota", "must be at least gpusPerTask.min, or no task could ever start",
          "raise gpuQuota to " + std::to_string(r.gpus_per_task.min) + " or lower gpusPerTask.min");
  }
  c.Length("spec.resources.gpuResourceName", p + ".gpuResourceName", r.gpu_resource_name);
  const std::string& gpu = r.gpu_resource_name;
  if (!gpu.empty() && !IsExtendedResourceName(gpu)) {
    const bool native =
        gpu.find('/') == std::string::npos || gpu.find("kubernetes.io/") != std::string::npos;
    c.Add(p + ".gpuResourceName",
          "\"" + gpu + "\" is not an extended resource name" +
              (native ? ": a name without a domain, or under kubernetes.io/, is a native "
                        "resource (cpu, memory), which no device plugin advertises"
                      : ": a domain, '/', then at most 63 of [A-Za-z0-9-_.]"),
          "use the name the nodes' device plugin advertises, e.g. nvidia.com/gpu or amd.com/gpu");
  }
  c.Length("spec.resources.image", p + ".image", r.image);
  if (!r.image.empty()) {
    if (std::string problem = ImageReferenceProblem(r.image); !problem.empty()) {
      c.Add(p + ".image", "\"" + r.image + "\" " + problem,
            "write it as [registry/]repository[:tag][@sha256:digest], e.g. " +
                std::string(kDefaultWorkerImage));
    }
  }
  c.Items("spec.resources.nodeSelector", p + ".nodeSelector", r.node_selector.size());
  for (const auto& [key, value] : r.node_selector) {
    if (key.empty()) {
      c.Add(p + ".nodeSelector", "keys must not be empty", "remove the empty key");
      continue;
    }
    const std::string kp = KeyPath(p + ".nodeSelector", key);
    if (!IsLabelKey(key)) {
      c.Add(kp,
            "\"" + key +
                "\" is not a valid label key: an optional DNS subdomain prefix and '/', then at "
                "most 63 of [A-Za-z0-9-_.], starting and ending with a letter or digit",
            "use the key as the nodes carry it, e.g. node.kubernetes.io/instance-type");
    }
    if (!IsLabelValue(value)) {
      c.Add(kp,
            "\"" + value +
                "\" is not a valid label value: at most 63 of [A-Za-z0-9-_.], starting and "
                "ending with a letter or digit",
            "use the value as the nodes carry it, e.g. a100");
    }
  }
  c.Items("spec.resources.tolerations", p + ".tolerations", r.tolerations.size());
  for (size_t i = 0; i < r.tolerations.size(); ++i) {
    const Toleration& t = r.tolerations[i];
    const std::string tp = IndexPath(p + ".tolerations", i);
    if (t.operator_ != "Equal" && t.operator_ != "Exists") {
      c.Add(tp + ".operator", "unsupported value \"" + t.operator_ + "\"",
            "use one of: Equal, Exists");
    }
    if (!t.key.empty() && !IsLabelKey(t.key)) {
      c.Add(tp + ".key",
            "\"" + t.key +
                "\" is not a valid taint key: an optional DNS subdomain prefix and '/', then at "
                "most 63 of [A-Za-z0-9-_.], starting and ending with a letter or digit",
            "use the key of the nodes' taint, e.g. nvidia.com/gpu");
    }
    if (t.operator_ == "Exists" && !t.value.empty()) {
      c.Add(tp + ".value", "must be empty when operator is Exists", "remove value");
    } else if (!IsLabelValue(t.value)) {
      c.Add(tp + ".value",
            "\"" + t.value +
                "\" is not a valid taint value: at most 63 of [A-Za-z0-9-_.], starting and "
                "ending with a letter or digit",
            "use the value of the nodes' taint");
    }
    if (t.toleration_seconds && t.effect != "NoExecute") {
      c.Add(tp + ".tolerationSeconds", "applies only to effect NoExecute",
            "set effect: NoExecute, or remove tolerationSeconds");
    }
    if (t.key.empty() && t.operator_ != "Exists") {
      c.Add(tp + ".operator", "must be Exists when key is empty",
            "set operator: Exists or give a key");
    }
    if (!t.effect.empty() && t.effect != "NoSchedule" && t.effect != "PreferNoSchedule" &&
        t.effect != "NoExecute") {
      c.Add(tp + ".effect", "unsupported value \"" + t.effect + "\"",
            "use one of: NoSchedule, PreferNoSchedule, NoExecute (or leave empty for all)");
    }
  }
}

}  // namespace

// GPU types are node label values (the operator's --gpu-type-label, by default
// nvidia.com/gpu.product): a name that is not one matches no node.
void CheckGpuTypes(Checker& c, const std::vector<std::string>& types, const std::string& path) {
  c.Items("spec.tasks[].gpuTypes", path, types.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string tp = IndexPath(path, i);
    c.Length("spec.tasks[].gpuTypes[]", tp, types[i]);
    if (types[i].empty() || types[i].size() > 63) continue;
    if (!IsLabelName(types[i])) {
      c.Add(tp,
            "\"" + types[i] +
                "\" is not a node label value: letters, digits, '-', '_' and '.', starting and "
                "ending with a letter or digit",
            "use the GPU type as the nodes' label shows it, e.g. \"NVIDIA-H100-80GB-HBM3\" "
            "(kubectl get nodes -L nvidia.com/gpu.product)");
    } else if (!seen.insert(types[i]).second) {
      c.Add(tp, "duplicate value", "list each GPU type once");
    }
  }
}

std::vector<FieldError> ValidateSpec(const ModelSelectionJobSpec& spec) {
  std::vector<FieldError> errors;
  Checker c(&errors);
  c.Items("spec.tasks", "spec.tasks", spec.tasks.size());
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskSpec& t = spec.tasks[i];
    const std::string p = IndexPath("spec.tasks", i);
    c.Length("spec.tasks[].name", p + ".name", t.name);
    if (!t.name.empty() && !IsDns1123Label(t.name)) {
      c.Add(p + ".name",
            "\"" + t.name +
                "\" is not a valid name: lower-case letters, digits and '-', starting and "
                "ending with a letter or digit",
            "rename it, e.g. \"gpt-small\"");
    }
    auto [it, inserted] = names.emplace(t.name, i);
    if (!inserted && !t.name.empty()) {
      c.Add(p + ".name",
            "task names must be unique: \"" + t.name + "\" is also spec.tasks[" +
                std::to_string(it->second) + "].name",
            "rename one of them");
    }
    c.Value("spec.tasks[].weight", p + ".weight", t.weight);
    const PodMounts pod{spec.checkpoints.path};
    CheckModel(c, t.model, p + ".model", pod);
    CheckData(c, t.data, t.model, p + ".data");
    CheckTraining(c, t.training, p + ".training");
    if (t.fine_tuning) CheckFineTuning(c, t, p + ".fineTuning");
    if (t.output) CheckOutput(c, t, pod, p + ".output");
    if (t.search_space) CheckSearchSpace(c, *t.search_space, t, p + ".searchSpace");
    CheckGpuTypes(c, t.gpu_types, p + ".gpuTypes");
  }
  CheckResources(c, spec.resources);

  const std::string s = "spec.scheduling";
  c.Value("spec.scheduling.solverTimeLimitSeconds", s + ".solverTimeLimitSeconds",
          spec.scheduling.solver_time_limit_seconds);
  c.Value("spec.scheduling.replanIntervalSeconds", s + ".replanIntervalSeconds",
          spec.scheduling.replan_interval_seconds);
  c.Value("spec.scheduling.minSwitchGain", s + ".minSwitchGain", spec.scheduling.min_switch_gain);
  c.Value("spec.scheduling.coalesceWindowSeconds", s + ".coalesceWindowSeconds",
          spec.scheduling.coalesce_window_seconds);

  const std::string pr = "spec.profiling";
  c.Value("spec.profiling.trialSteps", pr + ".trialSteps", spec.profiling.trial_steps);
  c.Items("spec.profiling.gpuCounts", pr + ".gpuCounts", spec.profiling.gpu_counts.size());
  std::set<int> counts;
  const GpuRange& range = spec.resources.gpus_per_task;
  for (size_t i = 0; i < spec.profiling.gpu_counts.size(); ++i) {
    int g = spec.profiling.gpu_counts[i];
    const std::string gp = IndexPath(pr + ".gpuCounts", i);
    if (g < range.min || g > range.max) {
      c.Add(gp,
            "must lie within resources.gpusPerTask [" + std::to_string(range.min) + ", " +
                std::to_string(range.max) + "]",
            "remove " + std::to_string(g) + " or widen gpusPerTask");
    }
    if (!counts.insert(g).second) c.Add(gp, "duplicate value", "list each GPU count once");
  }

  const std::string el = "spec.elasticity";
  bool emin_ok = !spec.elasticity.min_batch_size ||
                 c.Value("spec.elasticity.minBatchSize", el + ".minBatchSize",
                         static_cast<double>(*spec.elasticity.min_batch_size));
  bool emax_ok = !spec.elasticity.max_batch_size ||
                 c.Value("spec.elasticity.maxBatchSize", el + ".maxBatchSize",
                         static_cast<double>(*spec.elasticity.max_batch_size));
  if (emin_ok && emax_ok && spec.elasticity.min_batch_size && spec.elasticity.max_batch_size &&
      *spec.elasticity.min_batch_size > *spec.elasticity.max_batch_size) {
    c.Add(el, "minBatchSize must not exceed maxBatchSize", "swap them or widen the range");
  }

  const std::string ck = "spec.checkpoints";
  c.Length("spec.checkpoints.claimName", ck + ".claimName", spec.checkpoints.claim_name);
  if (!spec.checkpoints.claim_name.empty() && !IsDns1123Subdomain(spec.checkpoints.claim_name)) {
    c.Add(ck + ".claimName",
          "\"" + spec.checkpoints.claim_name + "\" is not a valid PersistentVolumeClaim name",
          "use lower-case letters, digits, '-' and '.'");
  }
  c.Length("spec.checkpoints.path", ck + ".path", spec.checkpoints.path);
  if (const std::string& path = spec.checkpoints.path; !path.empty()) {
    std::string bare = path;
    while (bare.size() > 1 && bare.back() == '/') bare.pop_back();
    if (std::string problem = MountPathProblem(path); !problem.empty()) {
      c.Add(ck + ".path", problem,
            path[0] == '/' ? "write it like /checkpoints" : "start it with /, e.g. /checkpoints");
    } else if (bare == "/tmp" || bare == "/dev/shm") {
      c.Add(ck + ".path",
            "is already a mount of the worker pods (scratch space): checkpoints need their own "
            "mount",
            "use another path, e.g. /checkpoints");
    }
  }
  c.Value("spec.checkpoints.intervalSteps", ck + ".intervalSteps",
          static_cast<double>(spec.checkpoints.interval_steps));
  c.Value("spec.checkpoints.keep", ck + ".keep", spec.checkpoints.keep);

  // The expansion cap is only meaningful for a search space that is otherwise sound.
  if (errors.empty()) {
    std::vector<ExpandedTask> expanded;
    for (FieldError& e : ExpandTasks(spec, &expanded)) errors.push_back(std::move(e));
  }
  return errors;
}

std::vector<FieldError> ValidateJob(const ModelSelectionJob& job) {
  std::vector<FieldError> errors;
  if (job.api_version != kApiVersion) {
    errors.push_back({"apiVersion",
                      "must be " + std::string(kApiVersion) + ", not \"" + job.api_version + "\"",
                      std::string("write apiVersion: ") + kApiVersion});
  }
  if (job.kind != kKind) {
    errors.push_back({"kind", "must be " + std::string(kKind) + ", not \"" + job.kind + "\"",
                      std::string("write kind: ") + kKind});
  }
  if (job.metadata.name.empty()) {
    errors.push_back({"metadata.name", "required value", "give the job a name"});
  } else if (!IsDns1123Subdomain(job.metadata.name)) {
    errors.push_back({"metadata.name", "\"" + job.metadata.name + "\" is not a valid object name",
                      "use lower-case letters, digits, '-' and '.'"});
  }
  for (FieldError& e : ValidateSpec(job.spec)) errors.push_back(std::move(e));
  return errors;
}

Status CheckJob(const ModelSelectionJob& job) {
  return FieldErrorsToStatus(ValidateJob(job), "invalid ModelSelectionJob " + job.metadata.name);
}

}  // namespace orrery::api
