// Random typed traces: pools from a small catalogue, kinds from the seed.
//
// Relative speeds and memory of the catalogue are round figures of the usual
// data-centre parts, the reference (speed 1) an 80 GiB part; they set the
// shapes of the problem, not any product's real numbers: a mid pool at about
// half the speed with 32 GiB, a cheap pool at about a third with 24 GiB.
#include "operator/sim/elastic_trace_typed.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/random.h"

namespace orrery::sim {
namespace {

using Rng = SplitMix64;  // common/random.h

std::vector<GpuPool> Catalogue(Rng& rng, const TypedTraceShape& shape) {
  std::vector<GpuPool> pools;
  pools.push_back({"big", shape.scale * rng.Pick({1, 2}), 4, 1.0, 80});
  pools.push_back({"mid", shape.scale * rng.Pick({1, 2}), 4, 0.4 + 0.2 * rng.Uniform01(), 32});
  if (shape.types >= 3)
    pools.push_back(
        {"small", shape.scale * rng.Pick({1, 2}), 4, 0.25 + 0.15 * rng.Uniform01(), 24});
  // The trace lists the pools in a seeded order: first-fit baselines must not
  // find the fastest pool first by construction.
  for (size_t i = pools.size(); i > 1; --i) std::swap(pools[i - 1], pools[rng.Next() % i]);
  return pools;
}

JobKind Kind(Rng& rng, int k, const std::vector<GpuPool>& pools, const ElasticCluster& c) {
  JobKind kind;
  kind.name = "k" + std::to_string(k);
  const bool compute_bound = rng.Uniform01() < 0.5;
  kind.compute_s_per_sample =
      compute_bound ? 0.003 + 0.006 * rng.Uniform01() : 0.0003 + 0.001 * rng.Uniform01();
  kind.overhead_s = 0.005 + 0.03 * rng.Uniform01();
  kind.gradient_mb = compute_bound ? 20 + 200 * rng.Uniform01() : 300 + 900 * rng.Uniform01();
  kind.max_batch_per_gpu = rng.Pick({32, 64, 128});
  kind.min_batch = kind.max_batch_per_gpu / rng.Pick({1, 2});
  kind.base_batch = kind.min_batch * rng.Pick({1, 2});
  kind.max_batch = kind.base_batch * rng.Pick({2, 4, 8});
  kind.batch_step = kind.min_batch;
  // Memory: a quarter of the kinds fit only the 80 GiB pool.
  kind.memory_gb = rng.Uniform01() < 0.25 ? 40 + 30 * rng.Uniform01() : 8 + 14 * rng.Uniform01();
  // A communication-bound kind gains less from a faster part: its measured
  // speed on the slower pools is closer to 1 than the pool's ratio.
  for (const GpuPool& p : pools)
    if (!compute_bound && p.speed < 1 && rng.Uniform01() < 0.7)
      kind.speed_by_type.emplace_back(p.type, std::min(1.0, p.speed * (1.5 + rng.Uniform01())));
  GpuPool reference{"reference", 1, 4, 1.0, 0};
  const int g = FewestGpus(kind, kind.base_batch, 4);
  kind.work =
      Throughput(kind, c, reference, g, kind.base_batch) * 60 * (20 + 100 * rng.Uniform01());
  return kind;
}

}  // namespace

StatusOr<ElasticTrace> RandomTypedTrace(uint64_t seed, const TypedTraceShape& shape) {
  if (shape.types < 2 || shape.types > 3) return InvalidArgumentError("types: must be 2 or 3");
  if (shape.scale < 1) return InvalidArgumentError("scale: must be at least 1");
  Rng rng{seed * 0x9e37 + static_cast<uint64_t>(shape.types)};
  ElasticTrace t;
  t.name = "typed" + std::to_string(shape.types) + "-" + std::to_string(seed);
  t.cluster.pools = Catalogue(rng, shape);
  t.cluster.intra_node_gbps = 10 + 40 * rng.Uniform01();
  t.cluster.inter_node_gbps = 1 + 9 * rng.Uniform01();
  t.horizon_s = shape.horizon_s;
  t.rescale_cost_s = 20 + 100 * rng.Uniform01();
  t.interval_s = rng.Pick({300, 900});
  const int kinds = rng.Pick({2, 3, 4});
  for (int k = 0; k < kinds; ++k) t.kinds.push_back(Kind(rng, k, t.cluster.pools, t.cluster));
  PoissonArrivals a;
  a.seed = seed;
  a.size_spread = 1 + 2 * rng.Uniform01();
  a.rate_per_hour = t.cluster.gpus() * shape.load * (0.5 + rng.Uniform01());
  ORRERY_ASSIGN_OR_RETURN(t.jobs, DrawPoisson(t.kinds, a, t.horizon_s));
  t.arrivals = a;
  ORRERY_RETURN_IF_ERROR(ValidateTrace(&t));
  return t;
}

}  // namespace orrery::sim
