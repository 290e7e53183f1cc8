// Orrery's Prometheus metrics: every metric the operator and the worker export,
// defined in one place with names, types, units and labels that follow the
// Prometheus conventions (snake_case, base units, `_total` for counters,
// `_seconds` for durations), and an HTTP exposer for /metrics.
//
// The metrics are plain families on a prometheus::Registry; code that records
// takes `OperatorMetrics&` or `WorkerMetrics&` and calls Add/Set/Observe on the
// labelled child it needs. README.md lists every metric.
//
// The exposer is a small HTTP server of its own rather than prometheus-cpp's
// civetweb one: civetweb starts its threads with a 100 KiB stack, and glibc
// refuses to create a thread whose stack cannot hold the process's static TLS,
// which LibTorch's libraries (OpenBLAS, glog) push past 100 KiB in the worker.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/metrics/tls.h"
#include "common/status.h"

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
  prometheus::Family<prometheus::Gauge>& gpu_share;                 // {msj}
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

  prometheus::Family<prometheus::Histogram>& step_seconds;          // {msj, task, rank}
  prometheus::Family<prometheus::Gauge>& samples_per_second;        // {msj, task, rank}
  prometheus::Family<prometheus::Counter>& samples;                 // {msj, task, rank}
  prometheus::Family<prometheus::Gauge>& loss;                      // {msj, task}
  prometheus::Family<prometheus::Gauge>& step;                      // {msj, task}
  prometheus::Family<prometheus::Histogram>& checkpoint_seconds;    // {msj, task, op} save|load
  prometheus::Family<prometheus::Gauge>& checkpoint_bytes;          // {msj, task}
  prometheus::Family<prometheus::Gauge>& checkpoint_step;           // {msj, task}
  prometheus::Family<prometheus::Gauge>& checkpoint_rank_bytes;     // {msj, task, rank, op, kind}
  prometheus::Family<prometheus::Gauge>& checkpoint_peak_rss;       // {msj, task, rank, op}
  prometheus::Family<prometheus::Gauge>& checkpoint_gang_bytes;     // {msj, task, op, kind}
  prometheus::Family<prometheus::Gauge>& checkpoint_gang_peak_rss;  // {msj, task, op}
  prometheus::Family<prometheus::Gauge>& restore_info;  // {msj, task, from_layout, layout}
};

// Histogram buckets: a step from 1 ms to about 2 min, a checkpoint from 10 ms to
// about 20 min (each bucket twice the one before).
const prometheus::Histogram::BucketBoundaries& StepSecondsBuckets();
const prometheus::Histogram::BucketBoundaries& CheckpointSecondsBuckets();

// One worker rank's recording side of WorkerMetrics: the children of its task's
// labels. The per-rank series (step time, samples, throughput, labelled `rank`)
// are recorded on every rank; the task's series (loss, step, checkpoints; no
// `rank` label) only where `task_level` is set, which is rank 0, so each of them
// has exactly one source however many ranks are scraped. Series that would be
// misleading at zero (loss, checkpoint step and bytes) appear with their first
// value. Thread-safe (prometheus-cpp's children are); not copyable.
class WorkerRecorder {
 public:
  enum class CheckpointOp { kSave, kLoad };

  WorkerRecorder(WorkerMetrics& metrics, const std::string& msj, const std::string& task, int rank,
                 bool task_level);
  WorkerRecorder(const WorkerRecorder&) = delete;
  WorkerRecorder& operator=(const WorkerRecorder&) = delete;

  // One optimizer step done: `step` counts completed steps (since step 0, across
  // resumes); `samples` is what this rank trained on in it.
  void RecordStep(int64_t step, double seconds, double samples, double loss);
  // This rank's samples per second over the last report interval.
  void RecordThroughput(double samples_per_second);
  // A checkpoint of `step` committed (save) or restored (load), and its size.
  void RecordCheckpoint(CheckpointOp op, int64_t step, double seconds, uint64_t bytes);
  // This rank's part of a save or load of the live state: the bytes it wrote or
  // read, the bytes its own state needed, and its process's peak memory. Every rank.
  void RecordStateIo(CheckpointOp op, uint64_t bytes, uint64_t bytes_needed,
                     uint64_t peak_rss_bytes);
  // The whole gang's part of the same save or load (task level only): bytes
  // written or read and bytes needed summed over its ranks, and the largest
  // rank's peak memory. One scrape of rank 0 then tells the gang's figures.
  void RecordGangStateIo(CheckpointOp op, uint64_t bytes, uint64_t bytes_needed,
                         uint64_t max_peak_rss_bytes);
  // A resume: the layout that wrote the checkpoint and the one that loaded it
  // (task level only; one series, replaced by a later resume's).
  void RecordRestoreLayouts(const std::string& from_layout, const std::string& layout);
  // The step training starts from (0, or the step of the checkpoint it resumed).
  void RecordStart(int64_t step);

  bool task_level() const { return task_level_; }

 private:
  WorkerMetrics& metrics_;
  std::map<std::string, std::string> task_labels_;
  std::map<std::string, std::string> rank_labels_;
  std::mutex restore_mu_;                      // guards restore_info_
  prometheus::Gauge* restore_info_ = nullptr;  // the series RecordRestoreLayouts set last
  bool task_level_;
  prometheus::Histogram& step_seconds_;
  prometheus::Counter& samples_;
  prometheus::Gauge& samples_per_second_;
};

// How the /metrics server guards itself. Default: plain HTTP, open to anyone
// who reaches the port (a worker's pod-local endpoint, tests).
struct ExposerOptions {
  // HTTPS. With cert_file and key_file (PEM; re-read when either file changes,
  // so a rotated Secret is picked up without a restart) or else with `tls`.
  bool https = false;
  std::string cert_file;
  std::string key_file;
  TlsMaterial tls;
  // Decides each request from its method, path and Authorization header (""
  // when absent): OK serves it, Unauthenticated answers 401, PermissionDenied
  // 403, anything else 503. Empty: every request is served.
  std::function<Status(const std::string& method, const std::string& path,
                       const std::string& authorization)>
      authorize;
};

// Serves a registry on http(s)://ADDRESS/metrics (GET or HEAD; anything else is
// 404). Owns a listening socket and one thread that answers one connection at a
// time, each closed after its answer: scrapes are few and short. A client that
// stalls is dropped after a few seconds.
class Exposer {
 public:
  // `address` is "host:port", e.g. "127.0.0.1:0" (port 0 picks a free port);
  // ":port" listens on every interface. `flag` names the setting the address came
  // from, for the hint in the error.
  static StatusOr<std::unique_ptr<Exposer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Registry> registry,
      const std::string& flag = "--metrics-bind-address", ExposerOptions options = {});
  ~Exposer();
  Exposer(const Exposer&) = delete;
  Exposer& operator=(const Exposer&) = delete;

  int port() const { return port_; }
  // "host:port" with the port really bound ("0.0.0.0:port" for every interface).
  const std::string& address() const { return address_; }

 private:
  Exposer() = default;
  void Serve();
  // Reads one request through `read` and answers it through `write`.
  void Answer(const std::function<long(char*, int)>& read,  // NOLINT(google-runtime-int)
              const std::function<bool(const std::string&)>& write) const;
  // The TLS context for the next connection: re-made when the files changed.
  const TlsServerContext* CurrentTls();

  std::shared_ptr<prometheus::Registry> registry_;
  ExposerOptions options_;
  std::unique_ptr<TlsServerContext> tls_;
  std::string tls_files_stamp_;  // sizes and mtimes of the files tls_ came from
  int port_ = 0;
  std::string address_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: a byte on it stops Serve()
  std::thread thread_;
};

// The text exposition of a registry, as /metrics would serve it (for tests,
// `orrery run`'s report, and a worker's final document).
std::string Serialize(const prometheus::Registry& registry);

}  // namespace orrery::metrics
