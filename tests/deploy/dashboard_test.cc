// Every query of the Grafana dashboard (deploy/grafana/orrery.json) is valid PromQL
// and returns data when a real Prometheus server scrapes the metrics Orrery
// defines (common/metrics), recorded the way the operator and the workers record
// them. A renamed metric or label breaks this test, not a user's dashboard.
#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/metrics/metrics.h"
#include "tests/testing/prometheus.h"

namespace orrery::testing {
namespace {

nlohmann::json LoadDashboard() {
  std::ifstream in(std::string(ORRERY_SOURCE_DIR) + "/deploy/grafana/orrery.json");
  return nlohmann::json::parse(in);
}

// One round of what a running job produces: reconciles, a plan, tasks moving
// through states, workers reporting, a rescale and a profiling run.
void Record(metrics::OperatorMetrics& op, metrics::WorkerMetrics& worker, int round) {
  const std::string job = "default/sweep";
  op.reconciles.Add({{"controller", "modelselectionjob"}, {"result", "success"}}).Increment();
  op.reconcile_seconds
      .Add({{"controller", "modelselectionjob"}},
           prometheus::Histogram::BucketBoundaries{0.01, 0.1, 1})
      .Observe(0.02);
  op.queue_depth.Add({{"queue", "modelselectionjob"}}).Set(round % 3);
  op.queue_adds.Add({{"queue", "modelselectionjob"}}).Increment();
  op.solve_seconds.Add({{"planner", "orrery"}}, prometheus::Histogram::BucketBoundaries{0.1, 1, 10})
      .Observe(0.4);
  op.plan_gap.Add({{"msj", job}}).Set(0.03);
  op.plan_makespan_seconds.Add({{"msj", job}}).Set(3600);
  op.plan_lower_bound_seconds.Add({{"msj", job}}).Set(3500);
  op.replans.Add({{"msj", job}, {"adopted", round % 2 ? "true" : "false"}}).Increment();
  op.gpus_planned.Add({{"msj", job}}).Set(16);
  op.gpus_held.Add({{"msj", job}}).Set(14);
  op.gpu_share.Add({{"msj", job}}).Set(16);
  op.cluster_gpus.Add({{"state", "allocatable"}}).Set(16);
  op.cluster_gpus.Add({{"state", "held"}}).Set(14);
  op.cluster_gpus.Add({{"state", "idle"}}).Set(2);
  op.tasks.Add({{"msj", job}, {"state", "running"}}).Set(4);
  op.tasks.Add({{"msj", job}, {"state", "succeeded"}}).Set(round);
  op.jobs.Add({{"phase", "Running"}}).Set(1);
  op.profiling_runs.Add({{"result", "ok"}}).Increment();
  op.rescales.Add({{"msj", job}, {"reason", "node_lost"}}).Increment();
  op.rescale_seconds.Add({{"msj", job}}, prometheus::Histogram::BucketBoundaries{10, 60, 300})
      .Observe(42);
  op.api_requests.Add({{"verb", "GET"}, {"code", "200"}}).Increment(5);
  op.leader.Add({}).Set(1);
  const prometheus::Labels rank{{"msj", job}, {"task", "lr-3e-4"}, {"rank", "0"}};
  worker.step_seconds.Add(rank, prometheus::Histogram::BucketBoundaries{0.1, 0.5, 1}).Observe(0.3);
  worker.samples_per_second.Add(rank).Set(210);
  worker.samples.Add(rank).Increment(64);
  worker.loss.Add({{"msj", job}, {"task", "lr-3e-4"}}).Set(4.0 - 0.1 * round);
  worker.checkpoint_seconds
      .Add({{"msj", job}, {"task", "lr-3e-4"}, {"op", "save"}},
           prometheus::Histogram::BucketBoundaries{1, 10, 60})
      .Observe(3);
  worker.checkpoint_bytes.Add({{"msj", job}, {"task", "lr-3e-4"}}).Set(1 << 20);
  metrics::WorkerRecorder rank0(worker, job, "lr-3e-4", 0, /*task_level=*/true);
  rank0.RecordGangStateIo(metrics::WorkerRecorder::CheckpointOp::kSave, 4 << 20, 4 << 20,
                          300 << 20);
}

TEST(DashboardTest, EveryQueryReturnsDataFromRealPrometheus) {
  const nlohmann::json dashboard = LoadDashboard();
  const std::vector<std::string> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 15u);

  auto registry = std::make_shared<prometheus::Registry>();
  metrics::OperatorMetrics op(*registry);
  metrics::WorkerMetrics worker(*registry);
  Record(op, worker, 1);
  auto exposer = metrics::Exposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  auto prom = PrometheusServer::Start({"127.0.0.1:" + std::to_string((*exposer)->port())});
  ASSERT_TRUE(prom.ok()) << prom.status();
  // rate() and increase() need two samples that differ: keep recording while
  // Prometheus scrapes every second.
  for (int round = 2; round <= 4; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    Record(op, worker, round);
  }
  ASSERT_TRUE((*prom)->WaitForScrapes(4, 30).ok());

  for (const std::string& q : queries) {
    auto data = (*prom)->Query(q);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_FALSE((*data)["result"].empty()) << "no data for: " << q;
  }
  // The job variable's query finds the job.
  auto jobs = (*prom)->Query("group by (msj) (orrery_job_tasks)");
  ASSERT_TRUE(jobs.ok());
  ASSERT_FALSE((*jobs)["result"].empty());
  EXPECT_EQ((*jobs)["result"][0]["metric"]["msj"], "default/sweep");
}

TEST(DashboardTest, PanelsAreLaidOutAndDescribed) {
  const nlohmann::json dashboard = LoadDashboard();
  EXPECT_EQ(dashboard["uid"], "orrery");
  for (const auto& panel : dashboard["panels"]) {
    EXPECT_FALSE(panel.value("title", "").empty());
    EXPECT_FALSE(panel.value("description", "").empty()) << panel["title"];
    EXPECT_LE(panel["gridPos"]["x"].get<int>() + panel["gridPos"]["w"].get<int>(), 24)
        << panel["title"];
  }
}

}  // namespace
}  // namespace orrery::testing
