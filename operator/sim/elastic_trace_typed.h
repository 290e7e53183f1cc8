// Seeded random elastic traces on clusters of two or three GPU types, for the
// tests and the benchmark of type-aware elastic allocation (elastic_sim.h):
// pools shaped after common data-centre GPUs, job kinds that differ in memory
// (a large model fits only the large-memory type) and in how much a faster
// type speeds them up (a small, communication-bound model runs about as fast
// on the cheap type), and Poisson arrivals. Deterministic in the seed.
#pragma once

#include <cstdint>

#include "operator/sim/elastic_trace.h"

namespace orrery::sim {

struct TypedTraceShape {
  int types = 2;                // 2 or 3 pools
  int scale = 1;                // nodes per pool multiplied by this
  double load = 0.4;            // arrivals per GPU-hour of the cluster
  double horizon_s = 4 * 3600;  // arrivals before it
};

// A trace named "typed<types>-<seed>"; jobs drawn by DrawPoisson, validated.
StatusOr<ElasticTrace> RandomTypedTrace(uint64_t seed, const TypedTraceShape& shape);

}  // namespace orrery::sim
