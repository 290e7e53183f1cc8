// Elastic traces: the input of the elastic simulator (elastic_sim.h). A trace is
// a cluster, job kinds with the parameters of a throughput model, and jobs that
// arrive online: listed (YAML or CSV rows), or drawn from a seeded Poisson
// process over a horizon with a job mix.
//
// Throughput model (Saxena et al., MASCOTS 2020, Sec. III, the model behind each
// job's scaling efficiency, as we read it): one data-parallel iteration at global
// batch B on g GPUs takes
//   t(g, B) = overhead + compute_per_sample x B/g + allreduce(g)
//   allreduce(g) = 0 for g = 1, else 2(g-1)/g x gradient bytes / bandwidth(g)
//                  + 2(g-1) x latency            (ring all-reduce)
// with the intra-node bandwidth while g fits one node and the inter-node one
// beyond; throughput is B / t(g, B) samples per second. Per-GPU compute is linear
// in per-GPU batch with a fixed overhead, so a small per-GPU batch wastes the GPU
// on overhead and communication: the reason a job that scales badly at a fixed
// batch scales well when its batch grows with its GPUs. A job's work is in
// samples (epochs x dataset), the same at any batch within its bounds: the
// paper's premise that the bounds keep the final accuracy.
//
// GPU types: a cluster may instead be pools, each of one GPU type with its own
// node count, GPUs per node, relative speed and memory per GPU. On a pool the
// compute term above is divided by the kind's speed there: the kind's own
// measured speed on that type when the trace gives it (speedByType), else the
// pool's speed, the ratio a profile on one type is carried to the others with
// (as Sia bootstraps its per-type throughput from one profiled type); the
// all-reduce is the pool's own (its GPUs per node). A kind whose memory per GPU
// (memoryGiB) exceeds a pool's cannot run there. A job runs on one pool only.
//
// Parsing works on text (the caller reads files), with field-path errors like
// "jobs[3].kind: unknown kind vgg19".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace orrery::sim {

// One pool of GPUs of one type.
struct GpuPool {
  std::string type;  // e.g. a100; unique in the cluster
  int nodes = 0;
  int gpus_per_node = 0;
  double speed = 1;      // compute speed relative to the reference GPU (1)
  double memory_gb = 0;  // GiB per GPU; 0: every kind fits
  int gpus() const { return nodes * gpus_per_node; }
};

struct ElasticCluster {
  // Without pools: one pool of nodes x gpus_per_node at speed 1, memory unbounded.
  int nodes = 0;
  int gpus_per_node = 0;
  std::vector<GpuPool> pools;
  double intra_node_gbps = 20;  // GB/s per GPU link inside a node
  double inter_node_gbps = 3;   // GB/s per GPU across nodes
  double allreduce_latency_s = 1e-4;
  int gpus() const;
};

// The cluster's pools: `pools`, or the one pool nodes x gpus_per_node stands for.
std::vector<GpuPool> Pools(const ElasticCluster& cluster);

struct JobKind {
  std::string name;
  double compute_s_per_sample = 0;   // per GPU
  double overhead_s = 0;             // per iteration
  double gradient_mb = 0;            // bytes all-reduced per iteration, in MB
  int max_batch_per_gpu = 0;         // GPU memory bound
  int min_batch = 0, max_batch = 0;  // global batch bounds that keep accuracy
  int base_batch = 0;                // the user's batch: gpu-only and static keep it
  int requested_gpus = 0;            // static's GPUs; 0: fewest that hold base_batch
  int batch_step = 0;                // global batches tried: min_batch + k x step; 0: min_batch
  double work = 0;                   // samples of a default-sized job
  double memory_gb = 0;  // GiB per GPU a worker needs; pools with less cannot run it (0: any)
  // Measured compute speed on a GPU type relative to the reference GPU; types
  // missing here take their pool's speed (the estimate from a speed ratio).
  std::vector<std::pair<std::string, double>> speed_by_type;
};

// The index in Pools(cluster) of the pool of `type` ("" names the only pool),
// or -1.
int PoolIndex(const ElasticCluster& cluster, const std::string& type);

// The kind's compute speed on `pool` (its measured one, else the pool's), and
// whether the kind fits the pool's memory.
double KindSpeed(const JobKind& kind, const GpuPool& pool);
bool KindFits(const JobKind& kind, const GpuPool& pool);

struct ElasticJob {
  std::string name;
  std::string kind;
  double arrival = 0;
  double work = 0;                                   // samples
  int min_batch = 0, max_batch = 0, base_batch = 0;  // 0: the kind's
};

struct CapacityEvent {
  double time = 0;
  int gpus = 0;        // the pool's (or the untyped cluster's) GPUs from this time on
  std::string pool{};  // its pool's type; required when the cluster has several pools
};

struct PoissonArrivals {
  double rate_per_hour = 0;
  uint64_t seed = 1;
  std::vector<std::pair<std::string, double>> mix;  // kind, weight
  // A job's work is the kind's times a factor log-uniform in [1/spread, spread].
  double size_spread = 1;
};

struct ElasticTrace {
  std::string name;
  ElasticCluster cluster;
  std::vector<JobKind> kinds;
  std::vector<ElasticJob> jobs;             // by arrival (listed and drawn)
  std::optional<PoissonArrivals> arrivals;  // the process jobs were drawn from, if any
  std::vector<CapacityEvent> capacity;
  double horizon_s = 86400;    // arrivals before it; completions before it count
  double rescale_cost_s = 60;  // checkpoint + restart
  double interval_s = 600;     // periodic autoscaler run
};

// Samples per second of `kind` on `gpus` GPUs at global batch `batch`, on the
// reference GPU with the cluster's GPUs per node.
double Throughput(const JobKind& kind, const ElasticCluster& cluster, int gpus, int batch);
// The same on `pool`: the kind's speed there, the pool's GPUs per node; 0 when
// the kind does not fit the pool's memory.
double Throughput(const JobKind& kind, const ElasticCluster& cluster, const GpuPool& pool, int gpus,
                  int batch);

// The fewest GPUs that hold `batch` and divide it, or 0 when none up to max_gpus.
int FewestGpus(const JobKind& kind, int batch, int max_gpus);

// Draws arrivals in [0, horizon) from `arrivals` (exponential gaps, mix by
// weight), named "<kind>-<n>". Deterministic in the seed on every platform.
StatusOr<std::vector<ElasticJob>> DrawPoisson(const std::vector<JobKind>& kinds,
                                              const PoissonArrivals& arrivals, double horizon_s);

// YAML: name, cluster (nodes and gpusPerNode, or pools: [{gpuType, nodes,
// gpusPerNode, speed, gpuMemoryGiB}]), kinds (memoryGiB, speedByType: {gpuType:
// speed} optional), optional jobs, optional arrivals (Poisson; its jobs
// are added to the listed ones), optional capacity events, horizonS,
// rescaleCostS, intervalS. Jobs are sorted by arrival; every job is checked
// against its kind and the cluster.
StatusOr<ElasticTrace> ParseElasticTrace(std::string_view yaml);

// CSV rows "arrival,kind,work,minBatch,maxBatch[,baseBatch]" with that header,
// checked against `trace`'s kinds and appended to its jobs. Errors name
// "csv line N.field" for a malformed row and "csv jobs[i].field" (i counting data
// rows from 0) for a row its kind or the cluster rejects.
Status AppendJobsCsv(std::string_view csv, ElasticTrace* trace);

// Checks jobs against kinds and the cluster, fills per-job defaults from the
// kind, names unnamed jobs, sorts by arrival.
Status ValidateTrace(ElasticTrace* trace);

}  // namespace orrery::sim
