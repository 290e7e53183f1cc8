// A workload on a cluster it shares with another job (otherJobs), for the
// simulator's and `orrery simulate`'s tests: two tasks on one node of four
// GPUs, a second GPU adding 20% to each; the other job's one task arrives at
// 100 s and leaves at 200 s.
#pragma once

namespace orrery::sim::testing {

inline constexpr const char* kSharedClusterWorkload = R"(
name: mine
cluster: {nodes: 1, gpusPerNode: 4, gpuMemoryGiB: 40}
tasks:
  - {name: a, work: 96000, profiles: [{template: ddp, gpus: 1, batchSize: 16, throughput: 100, memoryGiB: 10},
                                       {template: ddp, gpus: 2, batchSize: 16, throughput: 120, memoryGiB: 10}]}
  - {name: b, work: 96000, profiles: [{template: ddp, gpus: 1, batchSize: 16, throughput: 100, memoryGiB: 10},
                                       {template: ddp, gpus: 2, batchSize: 16, throughput: 120, memoryGiB: 10}]}
otherJobs:
  - name: theirs
    arrival: 100
    leave: 200
    tasks:
      - {name: t, work: 96000, profiles: [{template: ddp, gpus: 1, batchSize: 16, throughput: 100, memoryGiB: 10}]}
)";

}  // namespace orrery::sim::testing
