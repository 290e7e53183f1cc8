// Computed defaults; see defaults.h.
#include "operator/api/defaults.h"

#include <algorithm>
#include <limits>

namespace orrery::api {

std::vector<int> DefaultProfileGpuCounts(int min_gpus, int max_gpus) {
  std::vector<int> counts;
  if (min_gpus < 1 || max_gpus < min_gpus) return counts;
  for (int64_t g = 1; g <= max_gpus; g *= 2) {
    if (g >= min_gpus) counts.push_back(static_cast<int>(g));
  }
  if (counts.empty() || counts.front() != min_gpus) counts.insert(counts.begin(), min_gpus);
  if (counts.back() != max_gpus) counts.push_back(max_gpus);
  return counts;
}

void ApplyDefaults(ModelSelectionJobSpec* spec) {
  if (spec->profiling.gpu_counts.empty()) {
    spec->profiling.gpu_counts = DefaultProfileGpuCounts(spec->resources.gpus_per_task.min,
                                                         spec->resources.gpus_per_task.max);
  }
  if (spec->elasticity.enabled &&
      (!spec->elasticity.min_batch_size || !spec->elasticity.max_batch_size)) {
    int64_t smallest = std::numeric_limits<int64_t>::max();
    int64_t largest = 0;
    auto see = [&](int64_t b) {
      if (b < 1) return;
      smallest = std::min(smallest, b);
      largest = std::max(largest, b);
    };
    for (const TaskSpec& t : spec->tasks) {
      see(t.training.batch_size);
      if (!t.search_space) continue;
      if (t.search_space->grid) {
        for (int64_t b : t.search_space->grid->batch_size) see(b);
      }
      if (t.search_space->random && t.search_space->random->batch_size) {
        const Distribution& d = *t.search_space->random->batch_size;
        for (double b : d.values) see(static_cast<int64_t>(b));
        if (d.min) see(static_cast<int64_t>(*d.min));
        if (d.max) see(static_cast<int64_t>(*d.max));
      }
    }
    if (largest > 0) {
      if (!spec->elasticity.min_batch_size) {
        spec->elasticity.min_batch_size = std::max<int64_t>(1, smallest / kElasticBatchShrink);
      }
      if (!spec->elasticity.max_batch_size) {
        const auto cap = static_cast<int64_t>(*LimitFor("spec.elasticity.maxBatchSize").max);
        spec->elasticity.max_batch_size =
            std::min(cap, std::max(largest * kElasticBatchGrow, *spec->elasticity.min_batch_size));
      }
    }
  }
}

}  // namespace orrery::api
