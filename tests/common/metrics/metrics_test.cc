// The metrics follow Prometheus conventions and are really served over HTTP, or
// HTTPS with an access check.
#include "common/metrics/metrics.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "common/metrics/tls.h"
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

// HTTPS with a caller-supplied access check: the status codes a scraper sees.
class SecureExposerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    OperatorMetrics op(*registry_);
    op.leader.Add({}).Set(1);
  }
  // The HTTP status of GET `path` with `token` ("" for none), certificate unchecked.
  static std::string Code(int port, const std::string& token, const std::string& path = "/metrics",
                          const std::string& scheme = "https") {
    std::string command = "curl -sk --max-time 10 -o /dev/null -w '%{http_code}' ";
    if (!token.empty()) command += "-H 'Authorization: Bearer " + token + "' ";
    return orrery::testing::RunCommand(command + scheme + "://127.0.0.1:" + std::to_string(port) +
                                       path)
        .output;
  }
  static ExposerOptions Options(TlsMaterial tls) {
    ExposerOptions o;
    o.https = true;
    o.tls = std::move(tls);
    o.authorize = [](const std::string& method, const std::string& path,
                     const std::string& authorization) -> Status {
      if (authorization.empty()) return UnauthenticatedError("a bearer token is required");
      if (authorization == "Bearer down") return UnavailableError("API server down");
      if (authorization != "Bearer reader") return PermissionDeniedError("may not");
      if (method != "GET" || path != "/metrics") return PermissionDeniedError("only GET /metrics");
      return OkStatus();
    };
    return o;
  }
  std::shared_ptr<prometheus::Registry> registry_;
};

TEST_F(SecureExposerTest, RefusesWithoutTokenOrPermissionAndServesTheReader) {
  auto tls = SelfSignedCertificate({"localhost", "127.0.0.1"});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_NE(tls->cert_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  auto exposer = Exposer::Start("127.0.0.1:0", registry_, "--metrics-bind-address", Options(*tls));
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  EXPECT_EQ(Code(port, ""), "401");
  EXPECT_EQ(Code(port, "someone"), "403");
  EXPECT_EQ(Code(port, "down"), "503");
  EXPECT_EQ(Code(port, "reader"), "200");
  EXPECT_EQ(Code(port, "reader", "/other"), "403");            // refused before a 404 says anything
  EXPECT_EQ(Code(port, "reader", "/metrics", "http"), "000");  // no plain HTTP on the port
  const auto body = orrery::testing::RunCommand(
      "curl -sk -H 'Authorization: Bearer reader' https://127.0.0.1:" + std::to_string(port) +
      "/metrics");
  EXPECT_NE(body.output.find("orrery_leader 1"), std::string::npos) << body.output;
  // The certificate names the hosts it was made for: curl verifies it against itself.
  const std::string ca = ::testing::TempDir() + "/orrery_self_signed.crt";
  std::ofstream(ca) << tls->cert_pem;
  const auto verified = orrery::testing::RunCommand(
      "curl -s -o /dev/null -w '%{http_code}' --cacert " + ca +
      " -H 'Authorization: Bearer reader' https://localhost:" + std::to_string(port) + "/metrics");
  EXPECT_EQ(verified.output, "200");
}

TEST_F(SecureExposerTest, CertificateFilesAreReloadedWhenRotated) {
  const std::string dir = ::testing::TempDir() + "/orrery_metrics_tls";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto write = [&](const TlsMaterial& m) {
    // As the kubelet updates a Secret volume: new files renamed into place.
    std::ofstream(dir + "/tls.key.new") << m.key_pem;
    std::ofstream(dir + "/tls.crt.new") << m.cert_pem;
    std::filesystem::rename(dir + "/tls.key.new", dir + "/tls.key");
    std::filesystem::rename(dir + "/tls.crt.new", dir + "/tls.crt");
  };
  auto first = SelfSignedCertificate({"localhost"});
  auto second = SelfSignedCertificate({"localhost"});
  ASSERT_TRUE(first.ok() && second.ok());
  write(*first);
  ExposerOptions o = Options({});
  o.cert_file = dir + "/tls.crt";
  o.key_file = dir + "/tls.key";
  auto exposer = Exposer::Start("127.0.0.1:0", registry_, "--metrics-bind-address", o);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const std::string url = "https://localhost:" + std::to_string((*exposer)->port()) + "/metrics";
  auto served_by = [&](const TlsMaterial& m) {
    const std::string ca = dir + "/ca.crt";
    std::ofstream(ca) << m.cert_pem;
    return orrery::testing::RunCommand("curl -s -o /dev/null -w '%{http_code}' --cacert " + ca +
                                       " -H 'Authorization: Bearer reader' " + url)
               .output == "200";
  };
  EXPECT_TRUE(served_by(*first));
  EXPECT_FALSE(served_by(*second));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a new mtime
  write(*second);
  EXPECT_TRUE(served_by(*second));
  EXPECT_FALSE(served_by(*first));
  std::filesystem::remove_all(dir);
}

TEST_F(SecureExposerTest, BadCertificateFailsTheStartWithTheFile) {
  const std::string dir = ::testing::TempDir() + "/orrery_metrics_badtls";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tls.crt") << "not a certificate";
  std::ofstream(dir + "/tls.key") << "not a key";
  ExposerOptions o = Options({});
  o.cert_file = dir + "/tls.crt";
  o.key_file = dir + "/tls.key";
  auto e = Exposer::Start("127.0.0.1:0", registry_, "--metrics-bind-address", o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(dir + "/tls.crt"), std::string::npos) << e.status();
  o.cert_file = dir + "/missing.crt";
  e = Exposer::Start("127.0.0.1:0", registry_, "--metrics-bind-address", o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("missing.crt"), std::string::npos) << e.status();
  // A key that is not the certificate's.
  auto a = SelfSignedCertificate({"localhost"});
  auto b = SelfSignedCertificate({"localhost"});
  ASSERT_TRUE(a.ok() && b.ok());
  e = Exposer::Start("127.0.0.1:0", registry_, "--metrics-bind-address",
                     Options(TlsMaterial{a->cert_pem, b->key_pem}));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("does not match"), std::string::npos) << e.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::metrics
