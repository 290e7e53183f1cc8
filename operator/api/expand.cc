// Search-space expansion; see expand.h.
#include "operator/api/expand.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "operator/api/paths.h"

namespace orrery::api {

namespace {

size_t SaturatingMul(size_t a, size_t b) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a)
    return std::numeric_limits<size_t>::max();
  return a * b;
}

// Rounds to `digits` significant digits through decimal text, so a sampled value
// reads back exactly as it prints and one ulp of libm difference in exp/log does
// not change the task.
double RoundSignificant(double value, int digits) {
  if (value == 0 || !std::isfinite(value)) return value;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, value);
  double out = value;
  std::from_chars(buf, buf + std::char_traits<char>::length(buf), out);
  return out;
}

std::string FormatValue(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, ptr) : "0";
}

struct Param {
  const char* field;       // "learningRate"
  const char* short_name;  // "lr"
  bool integer;
};
constexpr Param kLearningRate{"learningRate", "lr", false};
constexpr Param kBatchSize{"batchSize", "bs", true};
constexpr Param kWeightDecay{"weightDecay", "wd", false};
constexpr Param kWarmupSteps{"warmupSteps", "wu", true};
constexpr Param kLoraRank{"loraRank", "lora", true};
constexpr Param kFreezeBlocks{"freezeBlocks", "fb", true};

void Assign(const Param& p, double value, TaskSpec* task) {
  TrainingSpec* t = &task->training;
  if (&p == &kLearningRate) t->learning_rate = value;
  if (&p == &kBatchSize) t->batch_size = static_cast<int64_t>(value);
  if (&p == &kWeightDecay) t->weight_decay = value;
  if (&p == &kWarmupSteps) t->warmup_steps = static_cast<int64_t>(value);
  // The fine-tuning dimensions make the task a LoRA or a layer-wise fine-tune
  // when its spec has no such block yet (alpha and targets at their defaults).
  if (&p == &kLoraRank) {
    if (!task->fine_tuning) task->fine_tuning.emplace();
    if (!task->fine_tuning->lora) task->fine_tuning->lora.emplace();
    task->fine_tuning->lora->rank = static_cast<int>(value);
  }
  if (&p == &kFreezeBlocks) {
    if (!task->fine_tuning) task->fine_tuning.emplace();
    task->fine_tuning->freeze_blocks = static_cast<int>(value);
  }
}

// The task as expansion hands it on: named, without its search space, its
// output folder's {task} replaced by the name.
void Finish(const std::string& name, TaskSpec* task) {
  task->name = name;
  task->search_space.reset();
  if (task->output) task->output->path = SubstituteTask(task->output->path, name);
}

double Sample(const Distribution& d, bool integer, SplitMix64* rng) {
  if (!d.values.empty()) return d.values[rng->Below(d.values.size())];
  double lo = d.min.value_or(0), hi = d.max.value_or(lo);
  if (integer) {
    auto ilo = static_cast<int64_t>(std::ceil(lo)), ihi = static_cast<int64_t>(std::floor(hi));
    if (ihi <= ilo) return static_cast<double>(ilo);
    if (!d.log_scale)
      return static_cast<double>(ilo + static_cast<int64_t>(rng->Below(ihi - ilo + 1)));
    double v = std::exp(std::log(static_cast<double>(ilo)) +
                        rng->Uniform01() * (std::log(static_cast<double>(ihi)) -
                                            std::log(static_cast<double>(ilo))));
    return std::clamp(std::round(v), static_cast<double>(ilo), static_cast<double>(ihi));
  }
  double u = rng->Uniform01();
  double v =
      d.log_scale ? std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo))) : lo + u * (hi - lo);
  return std::clamp(RoundSignificant(v, 3), lo, hi);
}

}  // namespace

std::string NumberForName(double value) {
  std::string out;
  if (value < 0) {
    out = "m";
    value = -value;
  }
  if (value == std::floor(value) && value < 1e6) {
    return out + std::to_string(static_cast<int64_t>(value));
  }
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string s = ec == std::errc() ? std::string(buf, ptr) : "0";
  // "2.5e-05" -> mantissa "2p5", exponent "-5".
  size_t e = s.find('e');
  std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
  for (char& c : mantissa)
    if (c == '.') c = 'p';
  std::string sign;
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) {
    if (exponent[0] == '-') sign = "-";
    exponent.erase(0, 1);
  }
  while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
  return out + mantissa + "e" + sign + exponent;
}

size_t CountVariants(const TaskSpec& task) {
  if (!task.search_space) return 1;
  if (task.search_space->random)
    return static_cast<size_t>(std::max(task.search_space->random->count, 0));
  if (!task.search_space->grid) return 1;
  const GridSpace& g = *task.search_space->grid;
  size_t n = 1;
  for (size_t len :
       {g.learning_rate.size(), g.batch_size.size(), g.weight_decay.size(), g.warmup_steps.size(),
        g.optimizer.size(), g.lora_rank.size(), g.freeze_blocks.size()}) {
    if (len > 0) n = SaturatingMul(n, len);
  }
  return n;
}

namespace {

void ExpandGrid(const TaskSpec& task, size_t index, std::vector<ExpandedTask>* out) {
  const GridSpace& g = *task.search_space->grid;
  // One axis per listed parameter, in a fixed order; the last axis varies fastest.
  struct Axis {
    const Param* param;  // nullptr for the optimizer axis
    std::vector<double> values;
    std::vector<Optimizer> optimizers;
    size_t size() const { return param ? values.size() : optimizers.size(); }
  };
  std::vector<Axis> axes;
  if (!g.learning_rate.empty()) axes.push_back({&kLearningRate, g.learning_rate, {}});
  if (!g.batch_size.empty())
    axes.push_back({&kBatchSize, {g.batch_size.begin(), g.batch_size.end()}, {}});
  if (!g.weight_decay.empty()) axes.push_back({&kWeightDecay, g.weight_decay, {}});
  if (!g.warmup_steps.empty())
    axes.push_back({&kWarmupSteps, {g.warmup_steps.begin(), g.warmup_steps.end()}, {}});
  if (!g.optimizer.empty()) axes.push_back({nullptr, {}, g.optimizer});
  if (!g.lora_rank.empty())
    axes.push_back({&kLoraRank, {g.lora_rank.begin(), g.lora_rank.end()}, {}});
  if (!g.freeze_blocks.empty())
    axes.push_back({&kFreezeBlocks, {g.freeze_blocks.begin(), g.freeze_blocks.end()}, {}});

  size_t total = CountVariants(task);
  std::vector<size_t> digit(axes.size(), 0);
  for (size_t v = 0; v < total; ++v) {
    ExpandedTask e;
    e.source = task.name;
    e.source_index = index;
    e.variant = v;
    e.task = task;
    e.task.search_space.reset();
    std::string name = task.name;
    for (size_t a = 0; a < axes.size(); ++a) {
      const Axis& axis = axes[a];
      if (axis.param) {
        double value = axis.values[digit[a]];
        Assign(*axis.param, value, &e.task);
        e.assignments.emplace_back(axis.param->field, FormatValue(value));
        name += std::string("-") + axis.param->short_name + "-" + NumberForName(value);
      } else {
        Optimizer o = axis.optimizers[digit[a]];
        e.task.training.optimizer = o;
        e.assignments.emplace_back("optimizer", std::string(EnumName(o)));
        name += "-" + std::string(EnumName(o));
      }
    }
    if (name.size() > static_cast<size_t>(kMaxExpandedNameLength))
      name = task.name + "-g" + std::to_string(v);
    e.name = name;
    Finish(name, &e.task);
    out->push_back(std::move(e));
    for (size_t a = axes.size(); a-- > 0;) {
      if (++digit[a] < axes[a].size()) break;
      digit[a] = 0;
    }
  }
}

void ExpandRandom(const TaskSpec& task, size_t index, std::vector<ExpandedTask>* out) {
  const RandomSpace& r = *task.search_space->random;
  SplitMix64 rng(static_cast<uint64_t>(r.seed));
  std::vector<std::pair<const Param*, const Distribution*>> params;
  if (r.learning_rate) params.emplace_back(&kLearningRate, &*r.learning_rate);
  if (r.batch_size) params.emplace_back(&kBatchSize, &*r.batch_size);
  if (r.weight_decay) params.emplace_back(&kWeightDecay, &*r.weight_decay);
  if (r.warmup_steps) params.emplace_back(&kWarmupSteps, &*r.warmup_steps);
  if (r.lora_rank) params.emplace_back(&kLoraRank, &*r.lora_rank);
  if (r.freeze_blocks) params.emplace_back(&kFreezeBlocks, &*r.freeze_blocks);
  for (int v = 0; v < r.count; ++v) {
    ExpandedTask e;
    e.source = task.name;
    e.source_index = index;
    e.variant = static_cast<size_t>(v);
    e.task = task;
    e.task.search_space.reset();
    for (const auto& [param, dist] : params) {
      double value = Sample(*dist, param->integer, &rng);
      Assign(*param, value, &e.task);
      e.assignments.emplace_back(param->field, FormatValue(value));
    }
    e.name = task.name + "-r" + std::to_string(v);
    Finish(e.name, &e.task);
    out->push_back(std::move(e));
  }
}

}  // namespace

std::vector<FieldError> ExpandTasks(const ModelSelectionJobSpec& spec,
                                    std::vector<ExpandedTask>* out, size_t max_tasks) {
  std::vector<FieldError> errors;
  out->clear();
  size_t total = 0;
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    size_t n = CountVariants(spec.tasks[i]);
    if (n > max_tasks) {
      errors.push_back(
          {IndexPath("spec.tasks", i) + ".searchSpace",
           "expands to " +
               (n == std::numeric_limits<size_t>::max() ? std::string("too many")
                                                        : std::to_string(n)) +
               " tasks, more than the limit of " + std::to_string(max_tasks) + " per job",
           "shorten the grid lists or lower random.count, or split the sweep into several jobs"});
    }
    total = std::min(std::numeric_limits<size_t>::max() - n, total) + n;
  }
  if (errors.empty() && total > max_tasks) {
    errors.push_back({"spec.tasks",
                      "the search spaces expand to " + std::to_string(total) +
                          " tasks in all, more than the limit of " + std::to_string(max_tasks) +
                          " per job",
                      "shrink the search spaces or split the sweep into several jobs"});
  }
  if (!errors.empty()) return errors;

  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskSpec& t = spec.tasks[i];
    if (t.search_space && t.search_space->random) {
      ExpandRandom(t, i, out);
    } else if (t.search_space && t.search_space->grid) {
      ExpandGrid(t, i, out);
    } else {
      ExpandedTask e;
      e.name = t.name;
      e.source = t.name;
      e.source_index = i;
      e.task = t;
      Finish(t.name, &e.task);
      out->push_back(std::move(e));
    }
  }
  // A generated name can collide with another task's name ("a-r0" written by hand).
  std::map<std::string, const ExpandedTask*> seen;
  for (const ExpandedTask& e : *out) {
    auto [it, inserted] = seen.emplace(e.name, &e);
    if (!inserted) {
      errors.push_back({IndexPath("spec.tasks", e.source_index) + ".name",
                        "expanded task name \"" + e.name +
                            "\" clashes with a task expanded from spec.tasks[" +
                            std::to_string(it->second->source_index) + "]",
                        "rename one of the two tasks"});
    }
  }
  // Two tasks exporting into one folder would overwrite each other's model.
  std::map<std::string, const ExpandedTask*> exports;
  for (const ExpandedTask& e : *out) {
    if (!e.task.output) continue;
    auto [it, inserted] = exports.emplace(OutputDirectory(*e.task.output), &e);
    if (!inserted && it->second->source_index != e.source_index) {
      errors.push_back({IndexPath("spec.tasks", e.source_index) + ".output.path",
                        "task \"" + e.name + "\" would write its model to \"" + it->first +
                            "\", as task \"" + it->second->name + "\" (spec.tasks[" +
                            std::to_string(it->second->source_index) + "]) does",
                        "put {task} in the path, or give each task its own folder"});
    }
  }
  if (!errors.empty()) out->clear();
  return errors;
}

StatusOr<std::vector<ExpandedTask>> Expand(const ModelSelectionJobSpec& spec, size_t max_tasks) {
  std::vector<ExpandedTask> out;
  ORRERY_RETURN_IF_ERROR(
      FieldErrorsToStatus(ExpandTasks(spec, &out, max_tasks), "expanding the search space"));
  return out;
}

}  // namespace orrery::api
