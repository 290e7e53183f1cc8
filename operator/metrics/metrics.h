// Orrery's Prometheus metrics: every metric the operator and the worker export,
// defined in one place with names, types, units and labels that follow the
// Prometheus conventions (snake_case, base units, `_total` for counters,
// `_seconds` for durations), and an HTTP exposer for /metrics.
//
// The metrics are plain families on a prometheus::Registry; code that records
// takes `OperatorMetrics&` or `WorkerMetrics&` and calls Add/Set/Observe on the
// labelled child it needs. README.md lists every metric.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/status.h"

namespace prometheus {
class Exposer;
}

namespace orrery::metrics {

enum class MetricKind { kCounter, kGauge, kHistogram };

// One exported metric: the single table from which the families are built, the
// README's list is written and the conventions are tested.
struct MetricDef {
  std::string name;
  MetricKind kind;
  std::string help;
  std::vector<std::string> labels;
};
const std::vector<MetricDef>& AllMetricDefs();

// What the operator exports. Label sets are small and bounded: a job is the label
// `msj="namespace/name"` (not `job`, which Prometheus reserves for the scrape job); task-level
// detail stays in the job's status, not in metrics.
struct OperatorMetrics {
  explicit OperatorMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& reconciles;              // {controller, result}
  prometheus::Family<prometheus::Histogram>& reconcile_seconds;     // {controller}
  prometheus::Family<prometheus::Gauge>& queue_depth;               // {queue}
  prometheus::Family<prometheus::Counter>& queue_adds;              // {queue}
  prometheus::Family<prometheus::Histogram>& queue_wait_seconds;    // {queue}
  prometheus::Family<prometheus::Histogram>& solve_seconds;         // {planner}
  prometheus::Family<prometheus::Gauge>& plan_gap;                  // {msj}
  prometheus::Family<prometheus::Gauge>& plan_makespan_seconds;     // {msj}
  prometheus::Family<prometheus::Gauge>& plan_lower_bound_seconds;  // {msj}
  prometheus::Family<prometheus::Counter>& replans;                 // {msj, adopted}
  prometheus::Family<prometheus::Gauge>& gpus_planned;              // {msj}
  prometheus::Family<prometheus::Gauge>& gpus_held;                 // {msj}
  prometheus::Family<prometheus::Gauge>& cluster_gpus;              // {state} allocatable|held|idle
  prometheus::Family<prometheus::Gauge>& tasks;                     // {msj, state}
  prometheus::Family<prometheus::Gauge>& jobs;                      // {phase}
  prometheus::Family<prometheus::Counter>& profiling_runs;          // {result}
  prometheus::Family<prometheus::Counter>& rescales;                // {msj, reason}
  prometheus::Family<prometheus::Histogram>& rescale_seconds;       // {msj}
  prometheus::Family<prometheus::Counter>& api_requests;            // {verb, code}
  prometheus::Family<prometheus::Gauge>& leader;                    // 1 while this replica leads
};

// What each worker rank exports while it trains.
struct WorkerMetrics {
  explicit WorkerMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Histogram>& step_seconds;        // {msj, task, rank}
  prometheus::Family<prometheus::Gauge>& samples_per_second;      // {msj, task, rank}
  prometheus::Family<prometheus::Counter>& samples;               // {msj, task, rank}
  prometheus::Family<prometheus::Gauge>& loss;                    // {msj, task}
  prometheus::Family<prometheus::Histogram>& checkpoint_seconds;  // {msj, task, op} save|load
  prometheus::Family<prometheus::Gauge>& checkpoint_bytes;        // {msj, task}
};

// Serves a registry on http://ADDRESS/metrics. Owns a listening socket.
class Exposer {
 public:
  // `address` is "host:port", e.g. "127.0.0.1:0" (port 0 picks a free port).
  static StatusOr<std::unique_ptr<Exposer>> Start(const std::string& address,
                                                  std::shared_ptr<prometheus::Registry> registry);
  ~Exposer();
  Exposer(const Exposer&) = delete;
  Exposer& operator=(const Exposer&) = delete;

  int port() const { return port_; }

 private:
  Exposer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

// The text exposition of a registry, as /metrics would serve it (for tests,
// `orrery run`'s report, and a worker's final document).
std::string Serialize(const prometheus::Registry& registry);

}  // namespace orrery::metrics
