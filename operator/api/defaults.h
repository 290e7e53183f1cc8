// Defaults that depend on other fields, so the CRD cannot state them: the GPU
// counts to profile follow gpusPerTask, the elastic batch-size bounds follow the
// tasks' batch sizes. Fixed defaults live in schema.h and arrive with decoding
// (or from the API server, which applies the CRD's `default:`s).
#pragma once

#include <vector>

#include "operator/api/types.h"

namespace orrery::api {

// Fills computed defaults in place. Idempotent; never overwrites a set value.
void ApplyDefaults(ModelSelectionJobSpec* spec);

// Powers of two within [min, max], plus max itself: the GPU counts profiled when
// profiling.gpuCounts is empty (the profiler's scaling fit interpolates the rest).
std::vector<int> DefaultProfileGpuCounts(int min_gpus, int max_gpus);

// Elastic batch bounds: from a quarter of the smallest to 4x the largest batch
// size any task (or search-space value) asks for, so rescaling keeps each task's
// per-GPU batch within a 4x band of what it was tuned for.
inline constexpr int64_t kElasticBatchShrink = 4;
inline constexpr int64_t kElasticBatchGrow = 4;

}  // namespace orrery::api
