// The elastic simulator: jobs of an elastic trace (elastic_trace.h) arrive
// online on a cluster of GPUs, and one of four policies runs them:
//   elastic   the engine's autoscaler over the elastic allocator, each job's
//             options being every GPU type and count with the best global batch
//             within its bounds there (type, GPUs and batch chosen together:
//             Saxena et al., made heterogeneity-aware);
//   gpu-only  the same autoscaler, each job's batch fixed at its base batch (the
//             paper's strong baseline: GPUs scale, batch size does not), and
//             type-blind: it weighs every pool's GPUs at the reference speed
//             (1), so it counts GPUs and takes the first pool with room, as a
//             scheduler that knows GPU counts but not types does; jobs run at
//             their true speed there;
//   static    each job gets its requested GPUs at its base batch on the first
//             pool (in the trace's order) it fits with room, first come first
//             served (strict FIFO), never rescaled;
//   optimum   at every event, the exact optimum of the allocator's objective
//             (the autoscaler's value, every typed option) applied as it is,
//             with no rescale guard: the per-event optimum the autoscaler's
//             guarded decisions are measured against. Where an event's options
//             are few enough, an exhaustive search checks the DP's optimum.
// A job's speed comes from the trace's throughput model. A rescale (other GPUs or
// batch, or a preemption and later restart) stops the job's progress for the
// trace's rescale cost while it holds its new GPUs. A job never spans pools. The autoscaler runs on
// every arrival, completion and capacity change, and every interval. The cluster is GPUs counted,
// not placed: the model's inter-node bandwidth beyond one node's GPUs stands for placement.
// Deterministic: the same trace gives the same result.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/engine/autoscaler.h"
#include "operator/sim/elastic_trace.h"

namespace orrery::sim {

enum class ElasticPolicy { kElastic, kGpuOnly, kStatic, kOptimum };
const char* ElasticPolicyName(ElasticPolicy policy);
StatusOr<ElasticPolicy> ParseElasticPolicy(std::string_view name);

struct ElasticSimOptions {
  // rescale_cost_s is taken from the trace.
  engine::AutoscalerOptions autoscaler;
  double max_time_factor = 1000;  // safety stop at horizon x this
  // Tell the autoscaler that completions count until the trace's horizon (its
  // deadline_s), for elastic and gpu-only alike.
  bool horizon_aware = true;
  bool keep_decisions = false;  // copy the autoscaler's decision log into the result
};

struct JobOutcome {
  std::string name;
  double arrival = 0;
  double completion = 0;
  int rescales = 0;
};

struct ElasticResult {
  std::string trace;
  std::string policy;
  int jobs = 0;
  int completed_in_horizon = 0;
  double mean_jct = 0;             // all jobs, each run to completion
  double mean_jct_in_horizon = 0;  // jobs completed within the horizon
  double makespan = 0;
  int rescales = 0;     // running jobs moved to other GPUs or batch
  int preemptions = 0;  // running jobs sent back to the queue
  int autoscaler_runs = 0;
  double gpu_utilisation = 0;  // GPU-seconds held / GPU-seconds present, to the makespan
  // optimum: events whose DP optimum an exhaustive search confirmed (the rest
  // had too many combinations of options to enumerate).
  int optimum_checked = 0;
  std::vector<JobOutcome> outcomes;
  std::vector<engine::ScaleDecision> decisions;  // when keep_decisions
};

// The options a job has under `policy`: on each pool its kind fits, for each GPU
// count the pool may give (1, 2, 4, ... up to a node, then whole nodes), the
// global batch with the highest throughput: within [min, max] on the kind's
// batch grid for elastic and optimum, the base batch only for gpu-only and
// static. Throughputs are the true ones (the type-blind view of gpu-only is
// the simulator's own).
std::vector<planner::elastic::Option> JobOptions(const ElasticTrace& trace, const ElasticJob& job,
                                                 ElasticPolicy policy);

StatusOr<ElasticResult> SimulateElastic(const ElasticTrace& trace, ElasticPolicy policy,
                                        const ElasticSimOptions& options);

// One row per result: policy, jobs, completed in horizon, mean JCT, ...
std::string ElasticTable(const std::vector<ElasticResult>& results);

}  // namespace orrery::sim
