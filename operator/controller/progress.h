// Progress of running gangs, read from the workers themselves: every gang's rank
// 0 serves Prometheus metrics on its pod IP (gang.h: ORRERY_METRICS_ADDRESS,
// port kMetricsPort), and the ProgressScraper polls it. What it reads (step,
// throughput, last committed checkpoint and the samples consumed at it, loss,
// the latest save's and the restore's time, bytes and memory) is kept on a
// ProgressBoard that
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

// A task's checkpoint saves, or its restore, as its rank 0's /metrics shows
// them (the worker's orrery_worker_checkpoint_* series, op="save" or "load").
struct StateIoProgress {
  // Operations of this kind in rank 0's process, and their time together
  // (orrery_worker_checkpoint_duration_seconds _count and _sum: task-level, so
  // the gang's whole operation as rank 0 waited for it). A process loads once.
  int64_t count = 0;
  double seconds_total = 0;
  // The latest operation's time: the sum when it is the only one, else the sum's
  // growth across one more operation since the previous reading (CarryOver);
  // < 0 when unknown (several happened between two readings).
  double last_seconds = -1;
  // The gang's part of the latest operation: bytes its ranks wrote (save) or
  // read (load) and the bytes of state they needed, summed over the ranks, and
  // the largest rank's peak resident memory (rank 0 exports them for the gang:
  // orrery_worker_checkpoint_gang_bytes / _gang_peak_rss_bytes). A worker that
  // exports only its own rank's series (orrery_worker_checkpoint_rank_bytes /
  // _peak_rss_bytes) gives rank 0's; whole_gang says which. -1 when not
  // exported (an older worker, or no such operation yet).
  bool whole_gang = false;
  int64_t bytes_moved = -1;
  int64_t bytes_needed = -1;
  int64_t peak_rss_bytes = -1;
  bool operator==(const StateIoProgress&) const = default;
};

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
  StateIoProgress save;
  StateIoProgress load;
  // The step this gang resumed from: orrery_worker_checkpoint_step while the
  // gang has loaded and not yet saved (a save moves that gauge on); -1 when it
  // did not resume or no reading caught it (CarryOver keeps it once seen).
  int64_t restore_step = -1;
  // The layouts of the gang's resume (orrery_worker_restore_info): the one that
  // wrote the checkpoint and its own; empty when it did not resume.
  std::string restore_from_layout;
  std::string restore_layout;
  bool operator==(const TaskProgress&) const = default;
};

// Reads a worker's /metrics text (the first series of each orrery_worker_*
// family: rank 0 serves its own). Missing step: nullopt (not a worker, or not
// trained a step yet).
std::optional<TaskProgress> ParseWorkerMetrics(const std::string& text);

// What one reading cannot know alone, from the previous reading of the same
// gang (same generation; another gang's is ignored): the latest save's and
// load's seconds (the growth of their sum across one more operation) and the
// step it resumed from once a save has moved the checkpoint gauge on.
void CarryOver(const TaskProgress& previous, TaskProgress* next);

// The task status's lastCheckpoint once `p` is read: a new reference (at `path`,
// committed at `now`) when `p` reports a checkpoint at another step than `last`;
// `last` with the samples filled in or corrected when only they differ (the
// worker sets its step and samples gauges one after the other); else `last`.
// When the gang has saved (p.save.count > 0) its latest save wrote that
// checkpoint: the reference carries the save's seconds (when known) and the
// gang's bytes written, bytes needed and peak memory (StateIoProgress).
std::optional<api::CheckpointRef> LastCheckpoint(const std::optional<api::CheckpointRef>& last,
                                                 const TaskProgress& p, const std::string& path,
                                                 const std::string& now);

// The task status's lastRestore once `p` is read: when p's gang loaded a
// checkpoint, a restore of generation p.generation (first seen at `now`) with
// the step it resumed from, the load's seconds and the gang's bytes read, bytes
// needed and peak memory (StateIoProgress), each kept from `last` (the same generation) where p
// no longer knows it; else `last`.
std::optional<api::RestoreRef> LastRestore(const std::optional<api::RestoreRef>& last,
                                           const TaskProgress& p, const std::string& now);

// GET http://host:port/path with a deadline; the body of a 200 answer.
StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                              int timeout_ms);

// Thread-safe progress by job key ("ns/name") and task label value.
class ProgressBoard {
 public:
  // True when it changed what the board held.
  bool Set(const std::string& job, const std::string& task, const TaskProgress& p);
  std::optional<TaskProgress> Get(const std::string& job, const std::string& task) const;
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
