// The one table of parallelism templates: what every part of Orrery knows about
// a template, so none of them compares template names. The API and the CRD list
// the templates a user may allow (the plannable ones), the planner and the
// estimates read how a template divides memory and scales, the launchers pick
// the worker's template for a rank count, and the worker builds the strategy
// the table names. Adding a template is a row here and its strategy in
// worker/parallel (docs/DESIGN.md, "Adding a parallelism template").
//
// Torch-free and constexpr, so the operator, the CLI and the API's own
// compile-time checks read it without LibTorch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace orrery::contract {

// Where one rank's share of the training state (parameters, gradients,
// optimizer slots) comes from.
enum class MemoryModel {
  kWhole,        // every rank holds all of it (single, ddp)
  kShardedFlat,  // each rank holds 1/ranks of every unit's flat state (fsdp)
  kSliced,       // each rank holds its slice of every layer (tensor)
  kLayerRange,   // each rank holds the state of its range of layers (pipeline)
  kLayout,       // dp × tp × pp as the layout says (hybrid)
  kSpilled,      // state lives in host memory; the device holds a working set (spill)
};

// Along which axis of the dp × tp × pp layout a plain template lays its ranks.
enum class WorldAxis { kNone, kData, kTensor, kPipeline, kLayout };

struct TemplateTraits {
  std::string_view name;  // the worker's --template and the planner's name
  // A user may allow it in spec.parallelism.templates and the planner may pick
  // it; the others are chosen by the worker or the launcher (single, hybrid).
  bool plannable = false;
  // A gang may span nodes: its communication tolerates the network between
  // them (tensor parallelism talks inside every layer and spill streams from
  // one host's memory, so they stay on one node).
  bool multi_node = false;
  // Each rank computes a part of every layer or a range of layers: the model
  // must be a chain of transformer blocks the worker can cut.
  bool splits_layers = false;
  // Ranks hold disjoint parts of the state rather than replicas.
  bool shards_state = false;
  MemoryModel memory = MemoryModel::kWhole;
  WorldAxis axis = WorldAxis::kNone;
  // The global batch must divide into ranks × this (a pipeline runs at least
  // two micro-batches per stage); 0: the batch need not divide (tensor
  // parallelism gives every rank the whole batch).
  int batch_multiple_per_rank = 1;
  // Planning estimates before anything is profiled: throughput kept per
  // doubling of ranks (overlapped all-reduce costs least, gathers more, a
  // collective inside every layer more, a pipeline's bubble most), and the
  // bytes a frozen parameter costs (fsdp's flat buffers keep a gradient slot
  // for it). Rough figures, replaced by profiles.
  double efficiency_per_doubling = 1;
  double frozen_bytes_per_parameter = 4;
  // The knob the profiler's tuning tries for this template.
  std::string_view tuned_knob;
  // Activation recomputation when the plan does not choose ("none" or
  // "unit", see kRecomputeModes): spill recomputes, since a shard's
  // activations kept on the device would defeat its budget.
  std::string_view recompute = "none";
};

// Activation recomputation, open to every template: "none" keeps every
// activation from forward to backward; "unit" keeps only each unit's input
// (a transformer block's; fsdp's unit, spill's shard) and runs the unit's
// forward again before its backward: less memory, about a third more compute.
inline constexpr std::array<std::string_view, 2> kRecomputeModes = {"none", "unit"};
constexpr bool IsRecomputeMode(std::string_view mode) {
  for (std::string_view m : kRecomputeModes)
    if (m == mode) return true;
  return false;
}

inline constexpr std::array<TemplateTraits, 7> kTemplates = {{
    {"single", false, false, false, false, MemoryModel::kWhole, WorldAxis::kNone, 1, 1, 4, ""},
    {"ddp", true, true, false, false, MemoryModel::kWhole, WorldAxis::kData, 1, 0.95, 4,
     "bucket_bytes"},
    {"fsdp", true, true, false, true, MemoryModel::kShardedFlat, WorldAxis::kData, 1, 0.9, 8, ""},
    {"pipeline", true, true, true, true, MemoryModel::kLayerRange, WorldAxis::kPipeline, 2, 0.8, 4,
     "micro_batches"},
    {"tensor", true, false, true, true, MemoryModel::kSliced, WorldAxis::kTensor, 0, 0.85, 4, ""},
    {"hybrid", false, true, true, true, MemoryModel::kLayout, WorldAxis::kLayout, 1, 0.85, 4,
     "micro_batches"},
    {"spill", true, false, false, true, MemoryModel::kSpilled, WorldAxis::kData, 1, 0.9, 4,
     "spill_double_buffer", "unit"},
}};

// The row named `name`, or null.
constexpr const TemplateTraits* FindTemplate(std::string_view name) {
  for (const TemplateTraits& t : kTemplates)
    if (t.name == name) return &t;
  return nullptr;
}

// The plannable templates in table order, as the API and the CRD list them.
constexpr size_t PlannableCount() {
  size_t n = 0;
  for (const TemplateTraits& t : kTemplates) n += t.plannable ? 1 : 0;
  return n;
}
inline constexpr std::array<std::string_view, PlannableCount()> kPlannableTemplates = [] {
  std::array<std::string_view, PlannableCount()> names{};
  size_t i = 0;
  for (const TemplateTraits& t : kTemplates)
    if (t.plannable) names[i++] = t.name;
  return names;
}();

// How many ranks a template's memory estimate divides the state among: all of
// them where ranks hold disjoint parts (spill's working set is bounded by the
// device instead, see operator/engine/estimate.cc), else one.
constexpr int MemoryDivisor(const TemplateTraits& t, int ranks) {
  switch (t.memory) {
    case MemoryModel::kShardedFlat:
    case MemoryModel::kSliced:
    case MemoryModel::kLayerRange:
    case MemoryModel::kLayout: return ranks;
    case MemoryModel::kWhole:
    case MemoryModel::kSpilled: return 1;
  }
  return 1;
}

// "a, b, c" of the plannable (or all) templates, for error messages.
std::string TemplateNames(bool plannable_only);

// The worker's template for a plan's `name` on `ranks` ranks: on one rank every
// template but spill (whose point is host memory, not ranks) is the plain loop.
std::string WorkerTemplate(std::string_view name, int ranks);

// Whether a global `batch` divides among `ranks` ranks of template `name`.
bool BatchSplits(std::string_view name, int ranks, int64_t batch);

}  // namespace orrery::contract
