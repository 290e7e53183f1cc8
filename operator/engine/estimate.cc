#include "operator/engine/estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>

#include "operator/api/paths.h"
#include "operator/api/yaml.h"
#include "worker/contract/stages.h"
#include "worker/contract/templates.h"
#include "worker/hf/config.h"

namespace orrery::engine {
namespace {

// The modules LoRA can target per family and the projections each stands for
// (the worker's model.h LoraProjections, which this mirrors): GPT-2's fused
// c_attn is one A shared by q, k and v; its c_proj is both the attention and
// the MLP output ("attn.c_proj" / "mlp.c_proj" pick one).
const std::vector<std::string>& Gpt2Modules() {
  static const std::vector<std::string> m = {"c_attn", "c_proj", "c_fc"};
  return m;
}
const std::vector<std::string>& LlamaModules() {
  static const std::vector<std::string> m = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  return m;
}

std::string Joined(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : separator) + i;
  return out;
}

std::string LastComponent(const std::string& target) {
  const size_t dot = target.rfind('.');
  return dot == std::string::npos ? target : target.substr(dot + 1);
}

// One transformer, layer by layer (0 the embedding, 1..layers the blocks,
// layers + 1 the head), as far as counting and LoRA go.
struct Layers {
  std::string family;  // gpt2 (also Orrery's own gpt) | llama
  std::string source;  // for the label: "model.gpt", "gpt2 config.json"
  int layers = 0;
  double hidden = 0, q_out = 0, kv_out = 0, ff = 0;
  double embedding = 0;       // layer 0, a tied head's matrix included
  double block = 0;           // each block, without adapters
  double head = 0;            // the head's norm, and its matrix when untied
  double tied = 0;            // vocab x hidden when the head is the embedding, else 0
  double vocab = 0, seq = 0;  // where a pipeline cuts it (contract::TransformerShape)
};

Layers FromGpt(const api::GptModel& g) {
  // Orrery's own GPT as the worker builds it (worker/model/transformer.cc,
  // LayerSpecs, family "gpt"): learned token and position embeddings; per
  // block two LayerNorms with biases, q, k, v and the output projection, a 4h
  // MLP, every linear layer with a bias (12h² + 13h); a final LayerNorm and an
  // untied vocab x hidden head. (The head was once left out, as the 6N rule
  // leaves out embeddings: its matrix is as large as the embedding's, and
  // with GPT-2's vocabulary the state was counted as 124M parameters of 163M.)
  Layers l;
  l.family = "gpt2";
  l.source = "model.gpt";
  l.layers = g.layers;
  const double h = g.hidden, v = g.vocab;
  l.hidden = h;
  l.q_out = l.kv_out = h;
  l.ff = 4.0 * h;
  l.embedding = v * h + static_cast<double>(g.seq_len) * h;
  l.block = 12.0 * h * h + 13.0 * h;
  l.head = 2.0 * h + v * h;
  l.vocab = v;
  l.seq = g.seq_len;
  return l;
}

Layers FromShape(const PretrainedShape& s) {
  Layers l;
  l.family = s.Family();
  l.source = s.model_type + " config.json";
  l.layers = s.layers;
  const double h = s.hidden, v = s.vocab;
  l.hidden = h;
  l.q_out = static_cast<double>(s.heads) * s.head_dim;
  l.kv_out = static_cast<double>(s.kv_heads) * s.head_dim;
  l.ff = s.intermediate;
  auto linear = [](double out, double in, bool bias) { return out * in + (bias ? out : 0); };
  if (s.Gpt2()) {
    // LayerNorms with weight and bias; every Conv1D with a bias; learned positions.
    l.embedding = v * h + static_cast<double>(s.positions) * h;
    l.block = 2 * (2 * h) + linear(3 * h, h, true) + linear(h, h, true) + linear(l.ff, h, true) +
              linear(h, l.ff, true);
    l.head = 2 * h;
  } else {
    // RMSNorm weights; grouped-query k and v; SwiGLU's gate, up and down.
    l.embedding = v * h;
    l.block = 2 * h + linear(l.q_out, h, s.qkv_bias) + 2 * linear(l.kv_out, h, s.qkv_bias) +
              linear(h, l.q_out, s.out_bias) + 2 * linear(l.ff, h, s.mlp_bias) +
              linear(h, l.ff, s.mlp_bias);
    l.head = h;
  }
  if (s.tie_embeddings) {
    l.tied = v * h;
  } else {
    l.head += v * h;
  }
  l.vocab = v;
  return l;
}

// The task's transformer, layer by layer; nullopt for an MLP, TorchScript, or
// a pre-trained model whose config.json was not read.
std::optional<Layers> LayersOf(const api::TaskSpec& task, const PretrainedShape* pretrained) {
  const api::ModelSpec& m = task.model;
  if (m.gpt) return FromGpt(*m.gpt);
  if (m.pretrained && pretrained != nullptr) {
    Layers l = FromShape(*pretrained);
    l.seq = m.pretrained->seq_len;
    return l;
  }
  return std::nullopt;
}

// LoRA's parameters in one block: rank x (in + out) per targeted projection,
// one shared A for GPT-2's c_attn (rank x (h + 3h)).
double LoraPerBlock(const Layers& l, const api::LoraSpec& lora) {
  const double r = lora.rank.value_or(0);
  std::vector<std::string> targets = lora.targets;
  if (targets.empty()) {
    targets = l.family == "llama" ? std::vector<std::string>{"q_proj", "v_proj"}
                                  : std::vector<std::string>{"c_attn"};
  }
  // Projection -> (in, out); a set, as a projection named twice gets one adapter.
  std::set<std::string> done;
  double total = 0;
  auto add = [&](const std::string& projection, double in, double out) {
    if (done.insert(projection).second) total += r * (in + out);
  };
  for (const std::string& target : targets) {
    const std::string m = LastComponent(target);
    const bool attn_only = target.find("attn.") != std::string::npos;
    const bool mlp_only = target.find("mlp.") != std::string::npos;
    if (l.family == "llama") {
      if (m == "q_proj") add("q", l.hidden, l.q_out);
      if (m == "k_proj") add("k", l.hidden, l.kv_out);
      if (m == "v_proj") add("v", l.hidden, l.kv_out);
      if (m == "o_proj") add("o", l.q_out, l.hidden);
      if (m == "gate_proj") add("gate", l.hidden, l.ff);
      if (m == "up_proj") add("up", l.hidden, l.ff);
      if (m == "down_proj") add("down", l.ff, l.hidden);
    } else {
      if (m == "c_attn") add("qkv", l.hidden, 3 * l.hidden);
      if (m == "c_proj" && !mlp_only) add("attn.proj", l.hidden, l.hidden);
      if (m == "c_proj" && !attn_only) add("mlp.fc2", l.ff, l.hidden);
      if (m == "c_fc") add("mlp.fc1", l.hidden, l.ff);
    }
  }
  return total;
}

std::string Millions(double n) {
  char buf[32];
  if (n >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2fB", n / 1e9);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  }
  return buf;
}

// Per layer: what it holds, what trains, and where its matmuls are (a tied
// matrix is looked up in layer 0 but multiplied in the head).
struct PerLayer {
  std::vector<double> params, trained, compute;
};
PerLayer LayerParameters(const Layers& l, const api::TaskSpec& task) {
  const api::FineTuningSpec ft = task.fine_tuning.value_or(api::FineTuningSpec{});
  const bool lora = ft.lora && ft.lora->rank.value_or(0) > 0;
  const double adapters = lora ? LoraPerBlock(l, *ft.lora) : 0;
  const auto n = static_cast<size_t>(l.layers) + 2;
  PerLayer per{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  std::vector<double>&params = per.params, &trained = per.trained, &compute = per.compute;
  for (size_t i = 0; i < n; ++i) {
    const bool embedding = i == 0, head = i + 1 == n;
    params[i] = embedding ? l.embedding : head ? l.head : l.block + adapters;
    compute[i] = embedding ? l.embedding - l.tied : head ? l.head + l.tied : params[i];
    if (lora) {
      trained[i] = embedding || head ? 0 : adapters;
    } else if (embedding) {
      trained[i] = ft.freeze_embeddings ? 0 : params[i];
    } else if (head) {
      trained[i] = params[i];  // its norm, and an untied matrix
    } else {
      trained[i] = static_cast<int>(i) <= ft.freeze_blocks ? 0 : params[i];
    }
  }
  return per;
}

ParameterCount Count(const Layers& l, const api::TaskSpec& task) {
  const api::FineTuningSpec ft = task.fine_tuning.value_or(api::FineTuningSpec{});
  const bool lora = ft.lora && ft.lora->rank.value_or(0) > 0;
  const PerLayer per = LayerParameters(l, task);
  const std::vector<double>&params = per.params, &trained = per.trained, &compute = per.compute;
  const size_t n = params.size();
  ParameterCount c;
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    c.total += params[i];
    c.trainable += trained[i];
    if (trained[i] > 0 && first == n) first = i;
  }
  for (size_t i = first; i < n; ++i) c.backward += compute[i];
  c.stored = c.total + l.tied;
  // A tied head trains with the embedding: both copies then have gradients.
  c.stored_trainable = c.trainable + (trained[0] > 0 ? l.tied : 0);
  c.stored_outside_blocks = params[0] + params[n - 1] + l.tied;
  c.stored_trainable_outside_blocks = trained[0] + trained[n - 1] + (trained[0] > 0 ? l.tied : 0);
  std::string what = "all trained";
  if (lora) {
    what = Millions(c.trainable) + " trained (LoRA r=" + std::to_string(*ft.lora->rank) + ")";
  } else if (ft.freeze_embeddings || ft.freeze_blocks > 0) {
    what = Millions(c.trainable) + " trained (";
    if (ft.freeze_embeddings) what += "embeddings";
    if (ft.freeze_embeddings && ft.freeze_blocks > 0) what += " and ";
    if (ft.freeze_blocks > 0) what += "first " + std::to_string(ft.freeze_blocks) + " blocks";
    what += " frozen)";
  }
  c.label = l.source + ": " + Millions(c.total) + " parameters, " + what;
  return c;
}

// One stage of a pipeline, of the layers the worker's cut gives it
// (contract::TransformerStageStarts, balanced by FLOPs: GPT-2 small's head
// costs about four and a half blocks, so two stages hold 8 and 4 blocks):
// what it stores and trains, its blocks' trained part, how many blocks, and
// whether it is the last (the head and the loss). The embedding is on the
// first stage and the head on the last, so a tied head is a second copy
// there (the worker sums the pair's gradients across the stages).
struct Stage {
  double stored = 0, trained = 0, block_trained = 0;
  int blocks = 0;
  bool last = false;
};
std::vector<Stage> PipelineStages(const Layers& l, const api::TaskSpec& task, int gpus) {
  contract::TransformerShape shape;
  shape.blocks = l.layers;
  shape.hidden = l.hidden;
  shape.q_out = l.q_out;
  shape.kv_out = l.kv_out;
  shape.ff = l.ff;
  shape.gated = l.family == "llama";
  shape.seq = l.seq;
  shape.vocab = l.vocab;
  const StatusOr<std::vector<int>> starts = contract::TransformerStageStarts(shape, gpus);
  if (!starts.ok()) return {};
  const PerLayer per = LayerParameters(l, task);
  std::vector<Stage> stages(static_cast<size_t>(gpus));
  size_t k = 0;
  for (size_t i = 0; i < per.params.size(); ++i) {
    while (k < starts->size() && static_cast<int>(i) >= (*starts)[k]) ++k;
    Stage& st = stages[k];
    st.stored += per.params[i];
    st.trained += per.trained[i];
    if (i > 0 && i + 1 < per.params.size()) {
      ++st.blocks;
      st.block_trained += per.trained[i];
    }
  }
  Stage& last = stages.back();
  last.last = true;
  last.stored += l.tied;
  if (per.trained[0] > 0) last.trained += l.tied;
  return stages;
}

// The weights, gradients and optimizer moments of `stored` parameters of
// which `trained` train, as `traits` keeps a frozen one.
double HeldBytes(const contract::TemplateTraits& traits, double stored, double trained) {
  return traits.frozen_bytes_per_parameter * (stored - trained) +
         kTrainedBytesPerParameter * trained;
}

// The fullest stage's state; nullopt where the stages are unknown (the
// model's shape is, or it has fewer layers than stages).
std::optional<double> PipelineStateBytes(const contract::TemplateTraits& traits,
                                         const api::TaskSpec& task,
                                         const PretrainedShape* pretrained, int gpus) {
  const std::optional<Layers> l = LayersOf(task, pretrained);
  if (!l) return std::nullopt;
  const std::vector<Stage> stages = PipelineStages(*l, task, gpus);
  if (stages.empty()) return std::nullopt;
  double most = 0;
  for (const Stage& st : stages) most = std::max(most, HeldBytes(traits, st.stored, st.trained));
  return most;
}

// The largest single parameter tensor and the largest fsdp unit (a layer: the
// embedding, a block or the head; an MLP's linear layer), in parameters; 0
// when the shape is unknown here.
struct LargestParts {
  double tensor = 0;
  double unit = 0;
};
LargestParts Largest(const api::ModelSpec& m) {
  LargestParts p;
  if (m.gpt) {
    const double h = m.gpt->hidden, v = m.gpt->vocab;
    p.tensor = std::max(v * h, 4 * h * h);  // embedding or head; an MLP matrix
    p.unit = std::max(v * h + m.gpt->seq_len * h, 12 * h * h + 13 * h);
  } else if (m.mlp) {
    const double h = m.mlp->hidden;
    p.tensor = std::max({m.mlp->inputs * h, h * h, h * m.mlp->outputs});
    p.unit = p.tensor + h;
  }
  return p;
}

// Device bytes a template holds beyond its share of the state, measured with
// bench/worker/memory_model_bench:
//  - AdamW's temporary while it steps a tensor: one copy of the largest (the
//    worker's optimizer, worker/parallel/strategy.cc Optimizer::Step, computes
//    the denominator out of place and all else in place). Two are counted
//    where the step overlaps other transients the model does not itemise:
//    fsdp's gathers and reduce-scatters beside its units (its peak varies by
//    up to ~8% from run to run with their overlap), and spill's copies.
//  - ddp's flat gradient buckets on more than one rank (one float32 copy of
//    every gradient: Li et al. 2020, "PyTorch Distributed", sec. 3.2.3). Once
//    they are reduced each gradient is a view of its bucket and the copies
//    autograd made are freed, so the optimizer's temporary fits in their
//    place: ddp x n counts none (ddp x2 measured 1.01-1.08 of this estimate
//    on the GPT and MLP shapes; 1.12-1.19 with two copies).
//  - fsdp's gathered unit, its gradients, the reduce-scatter buffer and the
//    prefetched next unit (four units: the worker's own count,
//    worker/parallel/sharded.cc).
double StepTemporaryBytes(const api::TaskSpec& task, const contract::TemplateTraits& traits,
                          int gpus) {
  LargestParts largest = Largest(task.model);
  if (traits.memory == contract::MemoryModel::kSliced && task.model.gpt && gpus > 1) {
    // A tensor-parallel rank steps its slice of a block's matrices; the
    // embedding (and a tied head) stay whole (on the CPU, gpt-2L-h64's tensor
    // x2 peaks measured 1.04 and 1.10 of the estimate that counted the whole
    // 4h x h matrix; 1.01 and 1.07 with the slice).
    const double h = task.model.gpt->hidden, v = task.model.gpt->vocab;
    largest.tensor = std::max(v * h, 4 * h * h / gpus);
  }
  const double step_temporary = 4 * largest.tensor;
  const bool several = gpus > 1;
  switch (traits.memory) {
    case contract::MemoryModel::kWhole: return several ? 0 : step_temporary;
    case contract::MemoryModel::kShardedFlat:
    case contract::MemoryModel::kSpilled: return 2 * step_temporary;
    case contract::MemoryModel::kSliced:
    case contract::MemoryModel::kLayerRange:
    case contract::MemoryModel::kLayout: return step_temporary;
  }
  return 2 * step_temporary;
}

// The step's temporaries and what a template keeps beside its state (above).
double BufferBytes(const api::TaskSpec& task, const contract::TemplateTraits& traits, int gpus,
                   double stored_trainable) {
  const bool several = gpus > 1;
  double bytes = StepTemporaryBytes(task, traits, gpus);
  if (several && traits.memory == contract::MemoryModel::kWhole) bytes += 4 * stored_trainable;
  if (several && traits.memory == contract::MemoryModel::kShardedFlat)
    bytes += 4 * 4 * Largest(task.model).unit;
  return bytes;
}

// Weights, gradients and optimizer moments one device holds (fp32 Adam), as
// `traits` divides them over `gpus` ranks.
double StateBytes(const contract::TemplateTraits& traits, const ParameterCount& params, int gpus) {
  const double all = HeldBytes(traits, params.stored, params.stored_trainable);
  if (traits.memory == contract::MemoryModel::kSliced) {
    // Tensor parallelism slices the blocks; the embedding and the head stay
    // whole on every rank (an H200 measured GPT-2 small's tensor x2 peak 21%
    // over the estimate that divided them too: docs/DEVELOPING.md).
    const double whole =
        HeldBytes(traits, params.stored_outside_blocks, params.stored_trainable_outside_blocks);
    return whole + (all - whole) / contract::MemoryDivisor(traits, gpus);
  }
  return all / contract::MemoryDivisor(traits, gpus);
}

}  // namespace

DeviceModel DefaultDevice(const std::string& kind) {
  DeviceModel d;
  d.kind = kind;
  if (kind == "cpu") {
    d.flops = 50e9;
    d.memory_gib = 16;
  }
  return d;
}

double UsableGpuMemoryGib(double device_gib, const GpuMemoryReserve& reserve) {
  return std::max(0.0, (device_gib - reserve.fixed_gib) * (1 - reserve.fraction));
}

StatusOr<GpuMemoryReserve> ParseGpuMemoryReserve(std::string_view text, const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError(flag + "=" + std::string(text) + ": " + why +
                                "; expected a size and/or a share of the rest, e.g. 1.5Gi+5%, "
                                "512Mi, 10% or 0");
  };
  GpuMemoryReserve r{0, 0};
  bool size_seen = false, share_seen = false;
  std::string_view rest = text;
  if (rest.empty()) return bad("empty");
  while (!rest.empty()) {
    const size_t plus = rest.find('+');
    std::string part(rest.substr(0, plus));
    rest = plus == std::string_view::npos ? std::string_view() : rest.substr(plus + 1);
    if (plus != std::string_view::npos && rest.empty()) return bad("nothing after +");
    double scale = 1;  // to GiB
    bool share = false;
    if (part.size() > 1 && part.back() == '%') {
      share = true;
      part.pop_back();
    } else if (part.size() > 2 && part.compare(part.size() - 2, 2, "Gi") == 0) {
      part.resize(part.size() - 2);
    } else if (part.size() > 2 && part.compare(part.size() - 2, 2, "Mi") == 0) {
      part.resize(part.size() - 2);
      scale = 1.0 / 1024;
    } else if (part != "0") {
      return bad("\"" + part + "\" has no unit (Gi, Mi or %)");
    }
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || part.empty() || !std::isfinite(v) || v < 0)
      return bad("\"" + part + "\" is not a non-negative number");
    if (share) {
      if (share_seen || v >= 100) return bad(share_seen ? "two percentages" : "100% or more");
      share_seen = true;
      r.fraction = v / 100;
    } else {
      if (size_seen) return bad("two sizes");
      size_seen = true;
      r.fixed_gib = v * scale;
    }
  }
  return r;
}

std::string GpuMemoryReserveText(const GpuMemoryReserve& reserve) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%gGi+%g%%", reserve.fixed_gib, reserve.fraction * 100);
  return buf;
}

StatusOr<PretrainedShape> ParsePretrainedConfig(std::string_view json_text,
                                                const std::string& where) {
  // One reader of config.json for the worker and the planner (worker/hf).
  ORRERY_ASSIGN_OR_RETURN(hf::ModelConfig h, hf::ParseModelConfig(json_text, where));
  PretrainedShape s;
  s.model_type = h.model_type;
  s.layers = h.layers;
  s.hidden = h.hidden;
  s.heads = h.heads;
  s.kv_heads = h.kv_heads;
  s.head_dim = h.head_dim;
  s.intermediate = h.intermediate;
  s.vocab = h.vocab;
  s.positions = h.LearnedPositions() ? h.max_positions : 0;
  s.tie_embeddings = h.tie_embeddings;
  s.qkv_bias = h.qkv_bias;
  s.out_bias = h.out_bias;
  s.mlp_bias = h.mlp_bias;
  return s;
}

ParameterCount CountParameters(const api::TaskSpec& task, const PretrainedShape* pretrained,
                               const std::string& unreadable) {
  const api::ModelSpec& m = task.model;
  if (m.gpt) return Count(FromGpt(*m.gpt), task);
  if (m.pretrained) {
    if (pretrained != nullptr) return Count(FromShape(*pretrained), task);
    ParameterCount c;
    c.label = "size unknown: " + api::ModelDirectory(*m.pretrained) + "/config.json " +
              (unreadable.empty() ? "was not read" : unreadable) +
              "; only profiles measure this model";
    return c;
  }
  ParameterCount c;
  if (m.mlp) {
    double h = m.mlp->hidden;
    c.total = m.mlp->inputs * h + std::max(0, m.mlp->layers - 1) * h * h + h * m.mlp->outputs;
    c.trainable = c.backward = c.stored = c.stored_trainable = c.total;
    c.label = "model.mlp: " + Millions(c.total) + " parameters, all trained";
  } else if (m.torchscript) {
    c.label = "size unknown: a TorchScript module is measured by its profile only";
  }
  return c;
}

double ModelParameters(const api::TaskSpec& task, const PretrainedShape* pretrained) {
  return CountParameters(task, pretrained).total;
}

std::optional<planner::Config> EstimateConfig(const api::TaskSpec& task,
                                              const std::string& template_name, int gpus,
                                              const DeviceModel& device,
                                              const PretrainedShape* pretrained) {
  const ParameterCount params = CountParameters(task, pretrained);
  if (params.total <= 0 || gpus < 1) return std::nullopt;
  const api::ModelSpec& m = task.model;
  const bool transformer = m.gpt || (m.pretrained && pretrained != nullptr);
  double tokens = m.gpt ? m.gpt->seq_len : m.pretrained ? m.pretrained->seq_len : 1;
  // 6N split evenly over the three passes (Kaplan et al.'s 2N forward, 4N
  // backward): 2N forward; 2N for the activation gradients, only through the
  // layers after the first trainable one; 2N for the weight gradients, only of
  // what trains. A full training run gets 6N back exactly.
  double flops_per_sample =
      (2 * params.total + 2 * params.backward + 2 * params.trainable) * tokens;
  int layers = m.gpt ? m.gpt->layers : pretrained != nullptr ? pretrained->layers : 0;
  // Tensor parallelism splits heads, key/value heads and the MLP width alike
  // (the worker's CheckTensorParallelDegree).
  bool tensor_splits = false;
  if (m.gpt) {
    tensor_splits = m.gpt->heads % gpus == 0;
  } else if (m.pretrained && pretrained != nullptr) {
    tensor_splits = pretrained->heads % gpus == 0 && pretrained->kv_heads % gpus == 0 &&
                    pretrained->intermediate % gpus == 0;
  }
  // Parallel efficiency, how memory divides and what a frozen parameter costs
  // come from the template table (worker/contract/templates.h).
  const contract::TemplateTraits* traits = contract::FindTemplate(template_name);
  if (traits == nullptr || !traits->plannable) return std::nullopt;
  // What runs on `gpus` ranks: on one, every template but spill is the plain
  // loop, and holds memory as it does.
  const contract::TemplateTraits* runs =
      contract::FindTemplate(contract::WorkerTemplate(template_name, gpus));
  if (runs == nullptr) return std::nullopt;
  if (traits->memory == contract::MemoryModel::kSliced && (!transformer || !tensor_splits))
    return std::nullopt;
  if (traits->memory == contract::MemoryModel::kLayerRange && (!transformer || layers < gpus))
    return std::nullopt;
  double efficiency =
      std::pow(traits->efficiency_per_doubling, std::log2(static_cast<double>(gpus)));
  double bytes = StateBytes(*traits, params, gpus);
  if (runs->memory == contract::MemoryModel::kLayerRange) {
    // A pipeline's fullest stage, not an even share: the first holds the
    // embedding, the last the head.
    if (auto stage = PipelineStateBytes(*runs, task, pretrained, gpus)) bytes = *stage;
  }
  bytes += BufferBytes(task, *runs, gpus, params.stored_trainable);
  bytes *= kModelHeadroom;
  double spill_penalty = 1;
  if (traits->memory == contract::MemoryModel::kSpilled) {
    // Spilling keeps parameters in host memory and streams shards in: a device
    // holds a working set, at roughly half speed (Hydra reports 1.5-2x).
    spill_penalty = 0.5;
    bytes = std::min(bytes, device.memory_gib * 0.5 * (1ull << 30));
  }
  if (device.kind == "cuda") bytes += kCudaWorkspaceBytes;
  planner::Config c;
  c.template_name = template_name;
  c.gpus = gpus;
  c.nodes = 1;
  c.batch_size = static_cast<int>(task.training.batch_size);
  c.throughput = device.flops * gpus * efficiency * spill_penalty / flops_per_sample;
  c.memory_gib = bytes / (1ull << 30);
  return c;
}

namespace {

// What a backward's peak adds to EstimateConfig's bytes, which count every
// gradient and the optimizer's temporary: the step's peak, when the
// activations are gone. `backward_peak` is what the device holds at the
// backward's peak beyond the weights and the optimizer's moments; `grads`,
// the gradients one device holds after the backward (fewer are there at its
// peak: the worker drops them before each forward, set to none); nothing
// when the step's peak is the larger. With the headroom, as EstimateConfig's.
double BeyondTheStep(const api::TaskSpec& task, const contract::TemplateTraits& traits, int gpus,
                     double backward_peak, double grads) {
  const double step = grads + StepTemporaryBytes(task, traits, gpus);
  return kModelHeadroom * std::max(0.0, backward_peak - step);
}

}  // namespace

std::optional<double> ParameterStateBytes(const api::TaskSpec& task,
                                          const std::string& template_name, int gpus,
                                          const PretrainedShape* pretrained) {
  const ParameterCount params = CountParameters(task, pretrained);
  const contract::TemplateTraits* traits = contract::FindTemplate(template_name);
  if (params.total <= 0 || gpus < 1 || traits == nullptr ||
      traits->memory == contract::MemoryModel::kSpilled)
    return std::nullopt;
  if (traits->memory == contract::MemoryModel::kLayerRange && gpus > 1) {
    if (auto stage = PipelineStateBytes(*traits, task, pretrained, gpus)) return *stage;
  }
  return StateBytes(*traits, params, gpus);
}

std::optional<double> ActivationBytes(const api::TaskSpec& task, const std::string& template_name,
                                      int gpus, int64_t batch, const std::string& recompute) {
  // What runs on `gpus` ranks (one: the plain loop but for spill).
  const contract::TemplateTraits* traits =
      contract::FindTemplate(contract::WorkerTemplate(template_name, gpus));
  if (traits == nullptr || gpus < 1 || batch < 1) return std::nullopt;
  if (task.model.mlp && recompute == "none") {
    // An MLP keeps each layer's input and its ReLU's output, float32, and the
    // logits and their gradient; it has no unit worth recomputing.
    const api::MlpModel& mlp = *task.model.mlp;
    const double per_sample =
        4.0 * (mlp.inputs + 2.0 * mlp.hidden * mlp.layers + 2.0 * mlp.outputs);
    const bool split = traits->memory == contract::MemoryModel::kWhole ||
                       traits->memory == contract::MemoryModel::kShardedFlat ||
                       traits->memory == contract::MemoryModel::kSpilled;
    const double kept = per_sample * static_cast<double>(batch) / (split ? gpus : 1);
    if (traits->memory == contract::MemoryModel::kSpilled) return kModelHeadroom * kept;
    // Its layers' gradients appear as backward frees their activations: the
    // peak is all of them at backward's start, or the step's.
    const double grads =
        4 * CountParameters(task).stored_trainable / contract::MemoryDivisor(*traits, gpus);
    return BeyondTheStep(task, *traits, gpus, kept, grads);
  }
  if (!task.model.gpt) return std::nullopt;
  const api::GptModel& g = *task.model.gpt;
  const double s = g.seq_len, h = g.hidden, a = g.heads;
  // Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  // Transformer Models", sec. 4.1): a block keeps s·b·h·(34 + 5·a·s/h) bytes
  // in 16 bits. Of the 34, 2 are dropout masks; of the 5·a·s/h, the softmax's
  // output is 2, its dropout mask 1 and the dropout's output 2. Orrery trains
  // without dropout and keeps float32 (bf16 autocast keeps a mix: counted as
  // float32, the larger), so 2·(32 + 2·a·s/h) per s·b·h: the worker's block
  // (worker/model/transformer.cc) keeps 16 values per s·b·h (the block's and
  // the two layer norms' inputs and outputs, q, k, v, the attention's
  // context, the MLP's 4h input to GELU and its output) and the softmax's
  // a·s·s·b probabilities once. (Counting the dropout's output too put
  // gpt-2L-h256-s128, a·s/h = 4, 1.16x over the measured peak; GPT-2 small's
  // a·s/h is 16.) Recomputing per block keeps only each block's float32 input
  // (4·s·b·h) and, during one block's backward, that block's full
  // activations. Tensor parallelism (Megatron's, sec. 4.2.1) splits 24 of the
  // 32 and the probabilities over its t ranks; the layer norms' inputs and
  // the block's input stay whole on every rank: 2·(8 + (24 + 2·a·s/h)/t).
  // One block's backward holds more for a while: the gradients of the
  // probabilities and of the scores, one a·s·s·b of them beyond what it has
  // freed by then, and a few s·b·h (the residual stream's gradient, whole
  // under tensor parallelism, and two of its branch's, sliced):
  // 4·(a·s·s/t + (1 + 2/t)·s·h) bytes a sample (measured on the CPU:
  // gpt-2L-h64-s256, a·s/h = 16, held 1.1 a·s·s and 1.6-2.3 s·h values a
  // sample beyond the kept activations, with and without recomputation).
  double t = 1;  // tensor-parallel degree
  double samples = static_cast<double>(batch);
  double recompute_samples = samples;  // those one block's recomputation or backward holds at once
  double blocks = g.layers;
  switch (traits->memory) {
    case contract::MemoryModel::kWhole:
    case contract::MemoryModel::kShardedFlat:
    case contract::MemoryModel::kSpilled:
      samples /= gpus;
      recompute_samples = samples;
      break;
    case contract::MemoryModel::kSliced: t = gpus; break;
    case contract::MemoryModel::kLayerRange:
    case contract::MemoryModel::kLayout:
      // GPipe (the worker's default schedule) keeps every micro-batch's
      // activations until its backward: a stage holds its blocks' for the
      // whole batch (1F1B would hold pp micro-batches; counted as GPipe, the
      // larger). Recomputation runs one micro-batch's block at a time, of
      // the default 2·pp micro-batches (hybrid's pp counted as its ranks:
      // fewer samples, never more). A pipeline's stages are counted one by
      // one below; hybrid's as an even share.
      blocks = std::ceil(blocks / gpus);
      recompute_samples = samples / (2.0 * gpus);
      break;
  }
  const double full_block = s * h * 2 * (8 + (24 + 2 * a * s / h) / t);
  const double kept = (recompute == "unit" ? 4 * s * h : full_block) * samples;  // a block's
  // The block whose backward runs: its kept activations, its recomputed ones,
  // and its backward's working set.
  double current = kept + 4 * (a * s * s / t + (1 + 2 / t) * s * h) * recompute_samples;
  if (recompute == "unit") current += full_block * recompute_samples;
  // The loss's log-softmax keeps its output, float32, for every sample the
  // device holds until its backward (a pipeline's last stage: every
  // micro-batch's); that backward holds two more for a while (the output's
  // gradient and the logits'), before any block's. On the CPU,
  // gpt-2L-h64-v8192 measured 3.8 such copies at once beyond the weights,
  // moments and kept activations (LibTorch's CPU log-softmax backward also
  // materialises the softmax); CUDA's backward is one kernel, so three are
  // counted (on an H200 that shape's one-rank peaks, less 64 MiB of
  // workspaces, were within 2% of this estimate).
  const double logits = s * g.vocab * 4.0;
  const double loss_backward = blocks * kept + logits * (samples + 2 * recompute_samples);
  if (traits->memory == contract::MemoryModel::kSpilled) {
    // Spill's device holds no gradients beside them (its state is the host's).
    return kModelHeadroom * std::max(loss_backward, (blocks - 1) * kept + current);
  }
  // Then as backward runs it frees a block's activations while that block's
  // gradients appear: the peak is at its last block where a block's
  // activations outweigh its gradients, else at its first. There the device
  // holds the block whose backward runs, the other blocks' activations or
  // gradients, whichever are larger, and the gradients outside the blocks
  // (the head's come first); the loss's buffers are gone by then. (Two
  // logits' worth more were once counted here, to make up for a head the
  // count left out; with the head counted they put the small shapes 1.10-1.13
  // over.) A vocabulary like GPT-2's makes the loss's backward the peak.
  if (traits->memory == contract::MemoryModel::kLayerRange) {
    // Each stage's peak, of its own blocks and state (PipelineStages), as
    // below but for the logits, which only the last stage holds: every
    // micro-batch's log-softmax output until its backward, and two more of
    // one micro-batch during the loss's backward. A stage
    // after the first also keeps each micro-batch's input it received
    // (4·s·h a sample) until that micro-batch's backward. (Counting two
    // logits on every stage, as if the stages were even, put a last stage
    // of the head alone 1.39x over on gpt-2L-h64-v8192.)
    double full = 0, state = 0;
    const std::vector<Stage> stages = PipelineStages(FromGpt(g), task, gpus);
    for (size_t k = 0; k < stages.size(); ++k) {
      const Stage& st = stages[k];
      const double stage_state = HeldBytes(*traits, st.stored, st.trained);
      const double received = k > 0 ? 4 * s * h * samples : 0;
      // What it received, and the gradients outside its blocks.
      double peak = received + 4 * (st.trained - st.block_trained);
      if (st.blocks > 0) {
        peak += current + (st.blocks - 1) * std::max(kept, 4 * st.block_trained / st.blocks);
        // The other micro-batches' log-softmax outputs (two logits counted
        // here, as below, put GPT-2 small's last stage recomputing 1.44x
        // over on an H200).
        if (st.last) peak += logits * samples;
      }
      if (st.last) {
        peak = std::max(peak,
                        received + st.blocks * kept + logits * (samples + 2 * recompute_samples));
      }
      full = std::max(full, stage_state - 4 * st.trained + peak);
      state = std::max(state, stage_state);
    }
    return kModelHeadroom * std::max(0.0, full - state - StepTemporaryBytes(task, *traits, gpus));
  }
  const ParameterCount params = CountParameters(task);
  const double divisor = contract::MemoryDivisor(*traits, gpus);
  const double outside_grads = 4 * params.stored_trainable_outside_blocks / (t > 1 ? 1 : divisor);
  const double block_grads =
      4 * (params.stored_trainable - params.stored_trainable_outside_blocks) / divisor;
  const double block_backward =
      current + (blocks - 1) * std::max(kept, block_grads / blocks) + outside_grads;
  const double backward_peak = std::max(loss_backward, block_backward);
  return BeyondTheStep(task, *traits, gpus, backward_peak, outside_grads + block_grads);
}

std::vector<api::FieldError> CheckAgainstPretrained(const api::TaskSpec& task,
                                                    const PretrainedShape& shape,
                                                    const std::string& task_path) {
  std::vector<api::FieldError> errors;
  if (!task.model.pretrained) return errors;
  const std::string config = api::ModelDirectory(*task.model.pretrained) + "/config.json";
  if (shape.Gpt2() && task.model.pretrained->seq_len > shape.positions) {
    errors.push_back(
        {task_path + ".model.pretrained.seqLen",
         "must be at most the " + std::to_string(shape.positions) +
             " positions the model learned (n_positions in " + config + ")",
         "train on a window of at most " + std::to_string(shape.positions) + " tokens"});
  }
  if (!task.fine_tuning) return errors;
  const api::FineTuningSpec& ft = *task.fine_tuning;
  if (ft.freeze_blocks > shape.layers) {
    errors.push_back(
        {task_path + ".fineTuning.freezeBlocks",
         "must be at most the model's " + std::to_string(shape.layers) + " blocks (" + config + ")",
         "freeze at most " + std::to_string(shape.layers) + " blocks"});
  }
  if (!ft.lora) return errors;
  const std::vector<std::string>& modules = shape.Gpt2() ? Gpt2Modules() : LlamaModules();
  for (size_t i = 0; i < ft.lora->targets.size(); ++i) {
    const std::string& target = ft.lora->targets[i];
    if (std::find(modules.begin(), modules.end(), LastComponent(target)) != modules.end()) continue;
    errors.push_back(
        {api::IndexPath(task_path + ".fineTuning.lora.targets", i),
         "'" + target + "' is not a module of " + shape.model_type + " (" + Joined(modules) + ")",
         "use the module names of " + config + "'s family"});
  }
  return errors;
}

}  // namespace orrery::engine
