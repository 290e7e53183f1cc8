// The worker's exporter. See metrics_export.h.
#include "worker/train/metrics_export.h"

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace orrery::train {

TrainRecorder::TrainRecorder(metrics::WorkerMetrics& metrics,
                             prometheus::Family<prometheus::Gauge>& checkpoint_samples,
                             const std::string& msj, const std::string& task, int rank,
                             bool task_level)
    : WorkerRecorder(metrics, msj, task, rank, task_level),
      checkpoint_samples_(checkpoint_samples),
      task_labels_{{"msj", msj}, {"task", task}} {}

void TrainRecorder::RecordCheckpointSamples(int64_t samples) {
  if (!task_level()) return;
  checkpoint_samples_.Add(task_labels_).Set(static_cast<double>(samples));
}

StatusOr<std::unique_ptr<MetricsExport>> MetricsExport::Start(const MetricsConfig& config, int rank,
                                                              std::ostream& out) {
  std::unique_ptr<MetricsExport> e(new MetricsExport());
  e->registry_ = std::make_shared<prometheus::Registry>();
  e->families_ = std::make_unique<metrics::WorkerMetrics>(*e->registry_);
  e->checkpoint_samples_ =
      &prometheus::BuildGauge()
           .Name(kCheckpointSamplesMetric)
           .Help(
               "Samples consumed (since step 0, across resumes and batch changes) at the last "
               "checkpoint committed or resumed.")
           .Register(*e->registry_);
  e->recorder_ = std::make_unique<TrainRecorder>(*e->families_, *e->checkpoint_samples_, config.msj,
                                                 config.task, rank,
                                                 /*task_level=*/rank == 0);
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
