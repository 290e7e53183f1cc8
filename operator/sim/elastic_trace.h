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

struct ElasticCluster {
  int nodes = 0;
  int gpus_per_node = 0;
  double intra_node_gbps = 20;  // GB/s per GPU link inside a node
  double inter_node_gbps = 3;   // GB/s per GPU across nodes
  double allreduce_latency_s = 1e-4;
  int gpus() const { return nodes * gpus_per_node; }
};

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
};

struct ElasticJob {
  std::string name;
  std::string kind;
  double arrival = 0;
  double work = 0;                                   // samples
  int min_batch = 0, max_batch = 0, base_batch = 0;  // 0: the kind's
};

struct CapacityEvent {
  double time = 0;
  int gpus = 0;  // the cluster's GPUs from this time on
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

// Samples per second of `kind` on `gpus` GPUs at global batch `batch`.
double Throughput(const JobKind& kind, const ElasticCluster& cluster, int gpus, int batch);

// The fewest GPUs that hold `batch` and divide it, or 0 when none up to max_gpus.
int FewestGpus(const JobKind& kind, int batch, int max_gpus);

// Draws arrivals in [0, horizon) from `arrivals` (exponential gaps, mix by
// weight), named "<kind>-<n>". Deterministic in the seed on every platform.
StatusOr<std::vector<ElasticJob>> DrawPoisson(const std::vector<JobKind>& kinds,
                                              const PoissonArrivals& arrivals, double horizon_s);

// YAML: name, cluster, kinds, optional jobs, optional arrivals (Poisson; its jobs
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
