// `orrery-worker profile`: Saturn's empirical profiler for one configuration.
// Builds the task's template, runs warm-up steps, then timed steps, and prints
// one JSON document (rank 0) that the planner's profile cache stores:
//
//   {"event":"profile","template":"pipeline","layout":"dp=1,tp=1,pp=2",
//    "world_size":2,"model":"gpt","parameters":123456,"global_batch":8,
//    "device":"cpu","device_name":"cpu","threads":1,"warmup_steps":3,"timed_steps":10,
//    "step_time_s":{"median":0.012,"p90":0.014,"mean":0.0125,"min":0.011},
//    "samples_per_s":666.7,
//    "peak_memory_bytes":{"device_parameters":40960,"host_rss":123456789},
//        (with --device cuda also "device_allocated": the CUDA caching
//        allocator's peak of allocated bytes over the measured steps)
//    "knobs":{"micro_batches":4,"stage_starts":[2],"bucket_bytes":0,
//             "spill_shards":0,"spill_budget_bytes":0,"spill_double_buffer":false,
//             "recompute":"none","wait_fraction":0.04},
//    "tuning":[{"micro_batches":2,"step_time_s":0.013}, ...],
//    "recompute_modes":[{"recompute":"none","step_time_s":0.012,"samples_per_s":666.7,
//                        "wait_fraction":0.04}, {"recompute":"unit",...}],
//    "loss_first":4.1,"loss_last":3.9}
//
// "device" is "cpu" or "cuda" (--device; "device_name" says which, "cuda:1").
// A step's time is the slowest rank's (all ranks agree by an all-reduce of the
// maximum). With --tune the profiler first tries the template's knobs
// (micro-batches for pipelines, bucket size for ddp, double buffering for spill)
// for a few steps each and keeps the fastest; "tuning" lists what it tried;
// "recompute_modes" then measures the chosen knobs with and without activation
// recomputation ("knobs"."recompute" is the mode of the main measurement,
// --recompute or the template's default; "wait_fraction" the share of a step
// spent waiting on communication or copies).
// In a pod, the document is also written to the termination message path
// (--termination-message-path, else $ORRERY_TERMINATION_MESSAGE_PATH, else
// /dev/termination-log when running under Kubernetes), where the controller
// reads it from the pod status; Kubernetes keeps at most 4096 bytes, so the
// "tuning" list is dropped there if the document would be longer.
#pragma once

#include <ostream>
#include <string>

#include "common/status.h"
#include "worker/dist/communicator.h"
#include "worker/train/task.h"

namespace orrery::profile {

struct ProfileSummary {
  double median_s = 0;
  double p90_s = 0;
  double samples_per_s = 0;
  std::string json;  // the document printed
};

StatusOr<ProfileSummary> Profile(train::TaskConfig task, dist::Rendezvous* rendezvous,
                                 std::ostream& out);

// Nearest-rank percentile (q in [0, 1]) of unsorted samples; 0 for none.
double Percentile(std::vector<double> samples, double q);

}  // namespace orrery::profile
