// Progress of running gangs, read from the workers themselves: every gang's rank
// 0 serves Prometheus metrics on its pod IP (gang.h: ORRERY_METRICS_ADDRESS,
// port kMetricsPort), and the ProgressScraper polls it. What it reads (step,
// throughput, last committed checkpoint and the samples consumed at it, loss)
// is kept on a ProgressBoard that
// the reconciler reads when it writes status and feeds the engine (remaining
// work, measured throughput); a change wakes the job's reconcile.
//
// Scraping, not pushing: workers need no API credentials or RBAC, and a worker
// that hangs simply stops advancing its step, which the operator sees.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/kube/store.h"

namespace orrery::controller {

struct TaskProgress {
  int generation = 0;            // the gang it was read from
  int64_t step = 0;              // last completed optimizer step
  int64_t checkpoint_step = -1;  // last committed checkpoint, -1 when none yet
  // Samples consumed at that checkpoint (orrery_worker_checkpoint_samples; exact
  // across batch changes); 0 when the worker does not export it.
  int64_t checkpoint_samples = 0;
  double samples_per_second = 0;
  double loss = 0;
  bool has_loss = false;
  bool operator==(const TaskProgress&) const = default;
};

// Reads a worker's /metrics text (the first series of each orrery_worker_*
// family: rank 0 serves its own). Missing step: nullopt (not a worker, or not
// trained a step yet).
std::optional<TaskProgress> ParseWorkerMetrics(const std::string& text);

// The task status's lastCheckpoint once `p` is read: a new reference (at `path`,
// committed at `now`) when `p` reports a checkpoint at another step than `last`;
// `last` with the samples filled in or corrected when only they differ (the
// worker sets its step and samples gauges one after the other); else `last`.
std::optional<api::CheckpointRef> LastCheckpoint(const std::optional<api::CheckpointRef>& last,
                                                 const TaskProgress& p, const std::string& path,
                                                 const std::string& now);

// GET http://host:port/path with a deadline; the body of a 200 answer.
StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                              int timeout_ms);

// Thread-safe progress by job key ("ns/name") and task label value.
class ProgressBoard {
 public:
  // True when it changed what the board held.
  bool Set(const std::string& job, const std::string& task, const TaskProgress& p);
  std::map<std::string, TaskProgress> ForJob(const std::string& job) const;
  void ForgetJob(const std::string& job);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, TaskProgress>> by_job_;
};

struct ProgressScraperOptions {
  std::chrono::milliseconds period{5000};
  int timeout_ms = 2000;
  int port = 0;  // 0: the pod's container port named "metrics"
};

// Polls rank 0 of every Running gang pod in `pods` (an informer store) and
// writes the board; `on_change(job_key)` runs when a job's progress moved.
class ProgressScraper {
 public:
  ProgressScraper(const kube::Store* pods, ProgressBoard* board,
                  std::function<void(const std::string&)> on_change,
                  ProgressScraperOptions options = {});
  ~ProgressScraper();  // Stop()
  ProgressScraper(const ProgressScraper&) = delete;
  ProgressScraper& operator=(const ProgressScraper&) = delete;

  void Start();
  void Stop();
  // One pass over the store (what the thread does each period); for tests.
  void ScrapeOnce();

 private:
  void Loop();
  const kube::Store* pods_;
  ProgressBoard* board_;
  std::function<void(const std::string&)> on_change_;
  ProgressScraperOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace orrery::controller
