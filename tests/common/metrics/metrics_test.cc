// The metrics follow Prometheus conventions and are really served over HTTP.
#include "common/metrics/metrics.h"

#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "tests/testing/control_plane.h"  // RunCommand

namespace orrery::metrics {
namespace {

TEST(MetricsTest, NamesFollowPrometheusConventions) {
  const std::regex name_re("^orrery_[a-z0-9_]+$");
  const std::regex label_re("^[a-z][a-z0-9_]*$");
  std::set<std::string> names;
  for (const MetricDef& d : AllMetricDefs()) {
    EXPECT_TRUE(std::regex_match(d.name, name_re)) << d.name;
    EXPECT_FALSE(d.help.empty()) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate " << d.name;
    const bool ends_total =
        d.name.size() > 6 && d.name.compare(d.name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(d.kind == MetricKind::kCounter, ends_total) << d.name;
    if (d.kind == MetricKind::kHistogram) {
      EXPECT_NE(d.name.find("_seconds"), std::string::npos) << d.name << ": durations in seconds";
    }
    for (const std::string& l : d.labels) EXPECT_TRUE(std::regex_match(l, label_re)) << d.name;
  }
  EXPECT_EQ(names.size(), 34u);
}

TEST(MetricsTest, ExpositionCarriesTypeAndHelpFromTheTable) {
  // Building both sets touches every family (a name missing from the table aborts).
  prometheus::Registry registry;
  OperatorMetrics op(registry);
  WorkerMetrics worker(registry);
  op.leader.Add({}).Set(1);
  worker.step_seconds
      .Add({{"msj", "ns/j"}, {"task", "t"}, {"rank", "0"}},
           prometheus::Histogram::BucketBoundaries{0.1, 1})
      .Observe(0.5);
  const std::string text = Serialize(registry);
  EXPECT_NE(text.find("# HELP orrery_leader 1 while this operator replica holds the leader lease"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE orrery_worker_step_duration_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("orrery_worker_step_duration_seconds_bucket{msj=\"ns/"
                      "j\",rank=\"0\",task=\"t\",le=\"1\"} 1"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, ExposerServesRecordedValues) {
  auto registry = std::make_shared<prometheus::Registry>();
  OperatorMetrics op(*registry);
  op.reconciles.Add({{"controller", "modelselectionjob"}, {"result", "success"}}).Increment(3);
  op.gpus_held.Add({{"msj", "default/sweep"}}).Set(16);
  auto exposer = Exposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  ASSERT_GT((*exposer)->port(), 0);
  const auto r = orrery::testing::RunCommand(
      "curl -sf http://127.0.0.1:" + std::to_string((*exposer)->port()) + "/metrics");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(
                "orrery_reconcile_total{controller=\"modelselectionjob\",result=\"success\"} 3"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("orrery_job_gpus_held{msj=\"default/sweep\"} 16"), std::string::npos);
  EXPECT_EQ(Serialize(*registry).find("orrery_job_gpus_held{msj=\"default/sweep\"} 16") ==
                std::string::npos,
            false);
}

TEST(MetricsTest, PortInUseIsAnErrorNotACrash) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = Exposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Exposer::Start("127.0.0.1:" + std::to_string((*first)->port()), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics-bind-address"), std::string::npos);
}

TEST(MetricsTest, ExposerOnColonPortListensOnEveryInterface) {
  auto registry = std::make_shared<prometheus::Registry>();
  OperatorMetrics op(*registry);
  op.leader.Add({}).Set(1);
  auto exposer = Exposer::Start(":0", registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  EXPECT_EQ((*exposer)->address(), "0.0.0.0:" + std::to_string((*exposer)->port()));
  const auto r = orrery::testing::RunCommand(
      "curl -sf http://127.0.0.1:" + std::to_string((*exposer)->port()) + "/metrics");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("orrery_leader 1"), std::string::npos) << r.output;
}

TEST(MetricsTest, MalformedAddressNamesTheFlag) {
  auto registry = std::make_shared<prometheus::Registry>();
  for (const std::string bad : {"9400", "127.0.0.1:", "127.0.0.1:x1"}) {
    auto e = Exposer::Start(bad, registry, "--metrics-address");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(e.status().message().find("--metrics-address"), std::string::npos) << bad;
  }
}

TEST(MetricsTest, RankZeroRecordsTaskSeriesOtherRanksOnlyTheirOwn) {
  prometheus::Registry registry;
  WorkerMetrics m(registry);
  WorkerRecorder rank0(m, "ns/j", "t", 0, /*task_level=*/true);
  WorkerRecorder rank1(m, "ns/j", "t", 1, /*task_level=*/false);
  const std::string before = Serialize(registry);
  // Nothing claims a loss or a checkpoint before there is one.
  EXPECT_EQ(before.find("orrery_worker_loss{"), std::string::npos) << before;
  EXPECT_EQ(before.find("orrery_worker_checkpoint_step{"), std::string::npos) << before;
  EXPECT_NE(before.find("orrery_worker_samples_total{msj=\"ns/j\",rank=\"1\",task=\"t\"} 0"),
            std::string::npos)
      << before;
  rank0.RecordStart(4);
  rank0.RecordCheckpoint(WorkerRecorder::CheckpointOp::kLoad, 4, 0.25, 1000);
  for (int64_t step = 5; step <= 6; ++step) {
    rank0.RecordStep(step, 0.003, 4, 2.5);
    rank1.RecordStep(step, 0.003, 4, 9.0);  // not rank 0's loss: never exported
  }
  rank0.RecordCheckpoint(WorkerRecorder::CheckpointOp::kSave, 6, 0.5, 2048);
  rank1.RecordCheckpoint(WorkerRecorder::CheckpointOp::kSave, 6, 0.5, 4096);
  rank1.RecordThroughput(80);
  const std::string text = Serialize(registry);
  for (const char* line : {
           "orrery_worker_step{msj=\"ns/j\",task=\"t\"} 6",
           "orrery_worker_loss{msj=\"ns/j\",task=\"t\"} 2.5",
           "orrery_worker_checkpoint_step{msj=\"ns/j\",task=\"t\"} 6",
           "orrery_worker_checkpoint_bytes{msj=\"ns/j\",task=\"t\"} 2048",
           "orrery_worker_checkpoint_duration_seconds_count{msj=\"ns/j\",op=\"save\",task=\"t\"} 1",
           "orrery_worker_checkpoint_duration_seconds_count{msj=\"ns/j\",op=\"load\",task=\"t\"} 1",
           "orrery_worker_samples_total{msj=\"ns/j\",rank=\"0\",task=\"t\"} 8",
           "orrery_worker_samples_total{msj=\"ns/j\",rank=\"1\",task=\"t\"} 8",
           "orrery_worker_step_duration_seconds_count{msj=\"ns/j\",rank=\"1\",task=\"t\"} 2",
           "orrery_worker_samples_per_second{msj=\"ns/j\",rank=\"1\",task=\"t\"} 80",
       }) {
    EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << text;
  }
  EXPECT_EQ(text.find("} 9\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("} 4096\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace orrery::metrics
