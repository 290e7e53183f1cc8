// A worker rank's /metrics endpoint: the registry with the worker's metric
// families (common/metrics), this rank's TrainRecorder for Train to record
// into, and the HTTP exposer. It lives as long as the process, so a scrape
// after the last step still sees the final values. Torch-free.
//
// Besides common/metrics' WorkerMetrics it exports one series only the trainer
// can give, registered here:
//   orrery_worker_checkpoint_samples{msj, task}  gauge, rank 0: the samples
//     consumed (since step 0, across resumes and batch changes) at the last
//     checkpoint committed or resumed. The operator reads it into the task's
//     status.lastCheckpoint.samples, where a relaunch at another batch finds how
//     much of the task's sample budget is done (checkpoint step × batch is wrong
//     once the batch has changed).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "common/metrics/metrics.h"
#include "common/status.h"
#include "worker/train/task.h"

namespace orrery::train {

inline constexpr const char* kCheckpointSamplesMetric = "orrery_worker_checkpoint_samples";

// A training rank's recording side: WorkerRecorder plus the checkpoint's samples.
class TrainRecorder : public metrics::WorkerRecorder {
 public:
  TrainRecorder(metrics::WorkerMetrics& metrics,
                prometheus::Family<prometheus::Gauge>& checkpoint_samples, const std::string& msj,
                const std::string& task, int rank, bool task_level);

  // The samples consumed at the checkpoint just committed (save) or restored
  // (load). Task level only (rank 0), like the checkpoint step; absent until the
  // first checkpoint.
  void RecordCheckpointSamples(int64_t samples);

 private:
  prometheus::Family<prometheus::Gauge>& checkpoint_samples_;
  std::map<std::string, std::string> task_labels_;
};

class MetricsExport {
 public:
  // Serves `config.address` with labels msj, task and rank = `rank`; rank 0
  // also records the task's series. Rank 0 announces the bound address on `out`
  // as one progress line, {"event":"metrics","address":"127.0.0.1:41234"}; the
  // other ranks log it to stderr (only rank 0 writes progress). A bad or busy
  // address is an error naming --metrics-address.
  static StatusOr<std::unique_ptr<MetricsExport>> Start(const MetricsConfig& config, int rank,
                                                        std::ostream& out);
  MetricsExport(const MetricsExport&) = delete;
  MetricsExport& operator=(const MetricsExport&) = delete;

  TrainRecorder& recorder() { return *recorder_; }
  // "host:port" as bound (port 0 in the request becomes the real port).
  const std::string& address() const { return exposer_->address(); }
  int port() const { return exposer_->port(); }

 private:
  MetricsExport() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<metrics::WorkerMetrics> families_;
  prometheus::Family<prometheus::Gauge>* checkpoint_samples_ = nullptr;
  std::unique_ptr<TrainRecorder> recorder_;
  std::unique_ptr<metrics::Exposer> exposer_;
};

}  // namespace orrery::train
