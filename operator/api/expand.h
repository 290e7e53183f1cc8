// Search-space expansion: each spec task with a grid or random search space
// becomes many concrete tasks, each with its own hyper-parameters and a stable,
// DNS-1123-safe name (`gpt-lr-3e-4-bs-32` for a grid point, `gpt-r7` for the 8th
// random sample, the task's own name without a search space). Random sampling
// uses SplitMix64 and a fixed sampling procedure written here, not <random>'s
// distributions, whose output differs between standard libraries: the same seed
// gives the same tasks on every machine, so a restarted operator rebuilds the
// same task list.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/random.h"
#include "common/status.h"
#include "operator/api/field_error.h"
#include "operator/api/types.h"

namespace orrery::api {

struct ExpandedTask {
  std::string name;         // unique in the job, a DNS-1123 label
  std::string source;       // the spec task it came from
  size_t source_index = 0;  // index in spec.tasks
  size_t variant = 0;       // index among that task's variants
  // name = `name`, hyper-parameters (and fine-tuning choices) substituted, no
  // search space, {task} in output.path replaced by `name`.
  TaskSpec task;
  // The hyper-parameters the search space chose, in order: {"learningRate", "0.0003"}.
  std::vector<std::pair<std::string, std::string>> assignments;
  bool operator==(const ExpandedTask&) const = default;
};

// How many concrete tasks `task` expands to, saturating at SIZE_MAX.
size_t CountVariants(const TaskSpec& task);

// Expands every task; on error (too many tasks, clashing names) returns the
// errors with field paths and leaves `out` empty. Expects a validated spec.
std::vector<FieldError> ExpandTasks(const ModelSelectionJobSpec& spec,
                                    std::vector<ExpandedTask>* out,
                                    size_t max_tasks = kMaxExpandedTasks);
StatusOr<std::vector<ExpandedTask>> Expand(const ModelSelectionJobSpec& spec,
                                           size_t max_tasks = kMaxExpandedTasks);

// The name fragment for a number: 32 -> "32", 0.0003 -> "3e-4", 2.5e-5 -> "2p5e-5".
std::string NumberForName(double value);

using ::orrery::SplitMix64;  // common/random.h

}  // namespace orrery::api
