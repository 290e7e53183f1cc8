// A worker rank's /metrics endpoint: the registry with the worker's metric
// families (operator/metrics), this rank's WorkerRecorder for Train to record
// into, and the HTTP exposer. It lives as long as the process, so a scrape
// after the last step still sees the final values. Torch-free.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "common/status.h"
#include "operator/metrics/metrics.h"
#include "worker/train/task.h"

namespace orrery::train {

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

  metrics::WorkerRecorder& recorder() { return *recorder_; }
  // "host:port" as bound (port 0 in the request becomes the real port).
  const std::string& address() const { return exposer_->address(); }
  int port() const { return exposer_->port(); }

 private:
  MetricsExport() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<metrics::WorkerMetrics> families_;
  std::unique_ptr<metrics::WorkerRecorder> recorder_;
  std::unique_ptr<metrics::Exposer> exposer_;
};

}  // namespace orrery::train
