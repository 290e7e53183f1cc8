// The worker's exporter. See metrics_export.h.
#include "worker/train/metrics_export.h"

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace orrery::train {

StatusOr<std::unique_ptr<MetricsExport>> MetricsExport::Start(const MetricsConfig& config, int rank,
                                                              std::ostream& out) {
  std::unique_ptr<MetricsExport> e(new MetricsExport());
  e->registry_ = std::make_shared<prometheus::Registry>();
  e->families_ = std::make_unique<metrics::WorkerMetrics>(*e->registry_);
  e->recorder_ = std::make_unique<metrics::WorkerRecorder>(*e->families_, config.msj, config.task,
                                                           rank, /*task_level=*/rank == 0);
  ORRERY_ASSIGN_OR_RETURN(
      e->exposer_, metrics::Exposer::Start(config.address, e->registry_, "--metrics-address"));
  if (rank == 0) {
    out << nlohmann::json({{"event", "metrics"}, {"address", e->address()}}).dump() << std::endl;
  } else {
    Log(LogLevel::kInfo, "Serving metrics",
        {{"address", e->address()}, {"rank", std::to_string(rank)}});
  }
  return e;
}

}  // namespace orrery::train
