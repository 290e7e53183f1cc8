// Elastic allocation across GPU types (issue #25): on seeded Poisson traces over
// clusters of two and three GPU types (operator/sim/elastic_trace_typed.h), jobs
// completed within the horizon and mean job completion time under `elastic`
// (type, GPUs and batch chosen together), `gpu-only` (batch fixed, type-blind:
// GPUs counted, not told apart), `static` (requested GPUs, first pool with
// room, FIFO) and `optimum` (the exact per-event optimum of the allocator's
// objective, applied with no rescale guard), all measured in the same run, and
// per trace whether elastic is at least as good as each (completed >= and mean
// JCT <=).
//
//   build/<dir>/bench/bench_elastic_types [--seeds N] [--scale S] [--load L]
//
// Defaults are CI-sized (6 seeds per type count, pools of 4-8 GPUs, about a
// second); ORRERY_ELASTIC_TYPED_SEEDS and ORRERY_ELASTIC_TYPED_SCALE override
// the defaults for a bigger run (flags win over both).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "operator/sim/elastic_sim.h"
#include "operator/sim/elastic_trace_typed.h"

namespace {

using orrery::sim::ElasticPolicy;
using orrery::sim::ElasticResult;

constexpr ElasticPolicy kPolicies[] = {ElasticPolicy::kElastic, ElasticPolicy::kGpuOnly,
                                       ElasticPolicy::kStatic, ElasticPolicy::kOptimum};
constexpr int kN = 4;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// Elastic at least as good as `other`: no fewer jobs completed, mean JCT no higher.
bool AtLeastAsGood(const ElasticResult& e, const ElasticResult& other) {
  return e.completed_in_horizon >= other.completed_in_horizon &&
         e.mean_jct <= other.mean_jct * (1 + 1e-12);
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = EnvInt("ORRERY_ELASTIC_TYPED_SEEDS", 6);
  orrery::sim::TypedTraceShape shape;
  shape.scale = EnvInt("ORRERY_ELASTIC_TYPED_SCALE", 1);
  for (int i = 1; i < argc; ++i) {
    const bool has = i + 1 < argc;
    if (std::strcmp(argv[i], "--seeds") == 0 && has) {
      seeds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--scale") == 0 && has) {
      shape.scale = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--load") == 0 && has) {
      shape.load = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--seeds N] [--scale S] [--load L]\n", argv[0]);
      return 2;
    }
  }
  std::printf("elastic allocation across GPU types: %d seeds x {2, 3} types, scale %d, load %.2f\n",
              seeds, shape.scale, shape.load);
  std::printf("%-12s %5s %5s | %-26s | %-26s | %-26s | %-26s | %s\n", "trace", "GPUs", "jobs",
              "elastic done/meanJCT s", "gpu-only", "static", "optimum", "elastic >= each");
  int traces = 0, as_good[kN] = {0, 0, 0, 0};
  double ratio_sum[kN] = {0, 0, 0, 0};
  for (int types = 2; types <= 3; ++types) {
    shape.types = types;
    for (int seed = 1; seed <= seeds; ++seed) {
      auto trace = orrery::sim::RandomTypedTrace(static_cast<uint64_t>(seed), shape);
      if (!trace.ok()) {
        std::fprintf(stderr, "trace: %s\n", trace.status().ToString().c_str());
        return 1;
      }
      if (trace->jobs.empty()) continue;
      ElasticResult r[kN];
      for (int k = 0; k < kN; ++k) {
        auto res = orrery::sim::SimulateElastic(*trace, kPolicies[k], {});
        if (!res.ok()) {
          std::fprintf(stderr, "%s %s: %s\n", trace->name.c_str(),
                       orrery::sim::ElasticPolicyName(kPolicies[k]),
                       res.status().ToString().c_str());
          return 1;
        }
        r[k] = *res;
      }
      ++traces;
      std::string verdict;
      for (int k = 1; k < kN; ++k) {
        const bool ok = AtLeastAsGood(r[0], r[k]);
        as_good[k] += ok ? 1 : 0;
        ratio_sum[k] += r[0].mean_jct / r[k].mean_jct;
        verdict += std::string(ok ? "yes" : "NO") + (k + 1 < kN ? "/" : "");
      }
      std::printf("%-12s %5d %5zu |", trace->name.c_str(), trace->cluster.gpus(),
                  trace->jobs.size());
      for (int k = 0; k < kN; ++k)
        std::printf(" %4d / %8.0f (%5d resc) |", r[k].completed_in_horizon, r[k].mean_jct,
                    r[k].rescales);
      std::printf(" %s\n", verdict.c_str());
    }
  }
  std::printf("\n%d traces. elastic at least as good (completed >=, mean JCT <=) as:\n", traces);
  for (int k = 1; k < kN; ++k)
    std::printf("  %-9s on %d of %d traces; mean JCT elastic/%s %.3f on average\n",
                orrery::sim::ElasticPolicyName(kPolicies[k]), as_good[k], traces,
                orrery::sim::ElasticPolicyName(kPolicies[k]),
                traces > 0 ? ratio_sum[k] / traces : 0.0);
  return 0;
}
