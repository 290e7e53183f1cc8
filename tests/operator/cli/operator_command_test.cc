// `orrery operator` as a process against a real API server, installed by the
// Helm chart (`helm install`, with no replica of its own) and authenticated
// with a token of the chart's service account (TokenRequest), so a missing RBAC
// rule fails this test. The chart manages one namespace (watchNamespaces), so
// the operator runs on namespaced Roles. The flags are checked before anything
// starts; a replica serves /healthz, /readyz and /metrics over HTTPS, refusing
// scrapes without a token (401) or whose account may not read it (403), and
// scraped with a token by a real Prometheus;
// takes the Lease, and reconciles a job whose profiles are already in the
// shared ConfigMap into gangs on the planned nodes; a second replica waits as a
// standby; killing the leader (SIGKILL, no release) hands the lease to the
// standby, which adopts the running gangs without creating a single duplicate
// pod; SIGTERM stops a replica cleanly (exit 0) and releases the lease.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/profile_pod.h"
#include "operator/controller/reconciler.h"
#include "operator/local/process.h"
#include "tests/operator/cli/run_orrery.h"
#include "tests/operator/controller/plane_setup.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"
#include "tests/testing/prometheus.h"
#include "tests/testing/wait.h"

namespace orrery::controller {
namespace {

using orrery::testing::CommandResult;
using orrery::testing::RunCommand;
using orrery::testing::WaitUntil;
const std::string kOrrery = std::string(ORRERY_BINARY_DIR) + "/bin/orrery";
const char* kNamespace = "op-cmd";
const char* kOperatorNamespace = "orrery-system";
const char* kGpu = "nvidia.com/gpu";

const char* kJob = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: sweep
  namespace: op-cmd
spec:
  tasks:
  - name: mlp
    model:
      mlp: {layers: 2, hidden: 32, inputs: 16, outputs: 4}
    data:
      synthetic: {seed: 3}
    training: {steps: 100, batchSize: 16, learningRate: 1e-3}
    searchSpace:
      grid:
        learningRate: [1e-3, 3e-4, 1e-4]
  resources:
    gpuQuota: 4
    gpusPerTask: {min: 1, max: 2}
    templates: [ddp]
  profiling:
    gpuCounts: [1, 2]
)";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One `orrery operator` process with its log; ports read back from the log.
class OperatorProcess {
 public:
  OperatorProcess(const std::string& kubeconfig, const std::string& log, const std::string& name)
      : log_(log) {
    std::vector<std::string> argv = {
        kOrrery,
        "operator",
        "--kubeconfig=" + kubeconfig,
        "--leader-elect=true",
        "--leader-election-namespace=" + std::string(kOperatorNamespace),
        "--lease-duration=4s",
        "--renew-deadline=3s",
        "--retry-period=500ms",
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        "--profile-namespace=" + std::string(kOperatorNamespace),
        "--solver-time-limit=2s",
        "--namespace=" + std::string(kNamespace)};
    auto p = local::Process::Spawn(argv, {{"POD_NAME", name}}, log, /*capture_stdout=*/false);
    if (p.ok()) process_.emplace(std::move(*p));
  }

  bool started() const { return process_.has_value(); }
  local::Process& process() { return *process_; }
  std::string Log() const { return ReadFile(log_); }

  // A port the process logged as `key=...:PORT` or `key=PORT` on a line with `what`.
  int Port(const std::string& what) const {
    std::regex re(what + R"(.*(?:port=|address=[0-9.]+:)([0-9]+))");
    std::smatch m;
    std::string log = Log();
    if (std::regex_search(log, m, re)) return std::stoi(m[1]);
    return 0;
  }
  int HealthPort() const { return Port("Serving probes"); }
  int MetricsPort() const { return Port("Serving metrics"); }

  // The HTTP status of GET path on the probe port ("000" when it cannot connect).
  std::string Probe(const std::string& path) const {
    CommandResult r = RunCommand("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" +
                                 std::to_string(HealthPort()) + path);
    return r.output;
  }
  // /metrics over HTTPS with `token` (the self-signed certificate is not
  // checked): the body, or with `code_only` the HTTP status.
  std::string Metrics(const std::string& token, bool code_only = false) const {
    std::string command = "curl -sk --max-time 10 ";
    if (code_only) command += "-o /dev/null -w '%{http_code}' ";
    if (!token.empty()) command += "-H 'Authorization: Bearer " + token + "' ";
    return RunCommand(command + "https://127.0.0.1:" + std::to_string(MetricsPort()) + "/metrics")
        .output;
  }
  std::string Metrics() const { return Metrics(reader_token); }
  static inline std::string reader_token;  // a service account bound to metrics-reader
  bool Leads() const { return Metrics().find("\norrery_leader 1") != std::string::npos; }

 private:
  std::string log_;
  std::optional<local::Process> process_;
};

class OperatorCommandTest : public orrery::testing::ControlPlaneTest {
 protected:
  static void SetUpTestSuite() {
    ControlPlaneTest::SetUpTestSuite();
    if (!plane()) return;
    if (!testutil::InstallJobCrd(*plane(), &setup_output_)) return;
    // The managed namespace exists before the chart puts its Role there; the
    // scraper's service account lives in a monitoring namespace.
    for (const std::string& command :
         {"create namespace " + std::string(kNamespace), std::string("create namespace monitoring"),
          std::string("-n monitoring create serviceaccount prometheus"),
          std::string("-n monitoring create serviceaccount stranger")}) {
      orrery::testing::CommandResult r = plane()->Kubectl(command);
      setup_output_ += r.output;
      if (r.exit_code != 0 && r.output.find("AlreadyExists") == std::string::npos) return;
    }
    // The chart's service account and RBAC. Its Deployment's pod never runs
    // here (no scheduler, no kubelet): the test runs the operator itself, under
    // that account's token.
    sa_kubeconfig_ = testutil::InstallChartAsServiceAccount(
        *plane(), kOperatorNamespace,
        "--set watchNamespaces={" + std::string(kNamespace) +
            "} --set metrics.readers[0].name=prometheus,metrics.readers[0].namespace=monitoring",
        &setup_output_);
    if (sa_kubeconfig_.empty()) return;
    for (auto [account, token] : {std::pair{"prometheus", &OperatorProcess::reader_token},
                                  std::pair{"stranger", &stranger_token_}}) {
      orrery::testing::CommandResult r =
          plane()->Kubectl("-n monitoring create token " + std::string(account) + " --duration 1h");
      setup_output_ += r.output;
      if (r.exit_code != 0) return;
      *token = r.output.substr(0, r.output.find('\n'));
    }
    ready_ = true;
  }
  static void TearDownTestSuite() {
    if (plane()) testutil::UninstallChart(*plane(), kOperatorNamespace);
    ControlPlaneTest::TearDownTestSuite();
  }

  void SetUp() override {
    ControlPlaneTest::SetUp();
    ASSERT_TRUE(ready_) << setup_output_;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    for (const char* ns : {kNamespace, kOperatorNamespace}) {
      ASSERT_TRUE(kube::testutil::CreateNamespace(*client_, ns).ok());
    }
    dir_ = std::filesystem::path(::testing::TempDir()) / "orrery_operator_command";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void CreateGpuNode(const std::string& name, int gpus) {
    ASSERT_TRUE(testutil::CreateReadyGpuNode(*client_, name, gpus, kGpu).ok());
  }

  void SeedProfilesAndApplyJob() {
    auto loaded = api::LoadJobText(kJob);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ProfileTable table = testutil::DdpProfiles(*loaded, {1, 2}, [](int g) { return 100.0 * g; });
    ASSERT_TRUE(testutil::StoreProfiles(*client_, table, kOperatorNamespace).ok());
    auto job = testutil::CreateJob(*client_, loaded->job, kNamespace);
    ASSERT_TRUE(job.ok()) << job.status();
  }

  std::vector<kube::Object> JobPods() {
    kube::ListOptions o;
    o.label_selector = std::string(kJobLabel) + "=" + LabelValue("sweep");
    auto list = client_->List(kube::Pods(), kNamespace, o);
    std::vector<kube::Object> pods;
    if (list.ok()) {
      for (const kube::Object& p : (*list)["items"]) pods.push_back(p);
    }
    return pods;
  }

  std::string LeaseHolder() {
    auto lease = client_->Get(kube::Leases(), kOperatorNamespace, "orrery-operator");
    if (!lease.ok()) return "<none>";
    return (*lease)["spec"].value("holderIdentity", "");
  }

  static bool ready_;
  static std::string setup_output_;
  static inline std::string stranger_token_;  // valid, but not bound to metrics-reader
  static std::string sa_kubeconfig_;
  std::unique_ptr<kube::RestClient> client_;
  std::filesystem::path dir_;
};
bool OperatorCommandTest::ready_ = false;
std::string OperatorCommandTest::setup_output_;
std::string OperatorCommandTest::sa_kubeconfig_;

TEST(OperatorFlagsTest, BadFlagsNameTheFlagAndTheFix) {
  using cli::testing::RunOrrery;
  auto r = RunOrrery("operator --lease-duration=soon");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--lease-duration=soon"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("15s"), std::string::npos) << r.output;

  r = RunOrrery("operator --leader-elect --lease-duration=5s --renew-deadline=10s");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--renew-deadline < --lease-duration"), std::string::npos) << r.output;

  r = RunOrrery("operator --health-probe-bind-address=nowhere");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--health-probe-bind-address"), std::string::npos) << r.output;

  r = RunOrrery("operator --cluster-shares=maybe");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--cluster-shares=maybe: expected true or false"), std::string::npos)
      << r.output;

  for (const char* bad : {"NVIDIA-L4", "NVIDIA-L4=0", "NVIDIA-L4=fast", "=2", "a=1,b=-1"}) {
    r = RunOrrery(std::string("operator --gpu-type-speeds=") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("is not TYPE=SPEED with a positive SPEED"), std::string::npos)
        << r.output;
  }

  r = RunOrrery("operator --gpu-memory-reserve=2GB");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--gpu-memory-reserve=2GB: \"2GB\" has no unit (Gi, Mi or %)"),
            std::string::npos)
      << r.output;

  r = RunOrrery("operator --frobnicate");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown flag --frobnicate"), std::string::npos) << r.output;

  r = RunOrrery("operator --kubeconfig=/nonexistent/kubeconfig");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--kubeconfig"), std::string::npos) << r.output;
}

TEST_F(OperatorCommandTest, LeaderReconcilesStandbyTakesOverWithoutDuplicatesAndStopsCleanly) {
  for (const char* node : {"gpu-a", "gpu-b"}) CreateGpuNode(node, 2);
  SeedProfilesAndApplyJob();

  OperatorProcess first(sa_kubeconfig_, (dir_ / "first.log").string(), "replica-1");
  ASSERT_TRUE(first.started());
  ASSERT_TRUE(WaitUntil([&] { return first.HealthPort() > 0 && first.MetricsPort() > 0; }))
      << first.Log();
  EXPECT_EQ(first.Probe("/healthz"), "200");
  ASSERT_TRUE(WaitUntil([&] { return first.Probe("/readyz") == "200" && first.Leads(); }))
      << first.Log();
  EXPECT_EQ(LeaseHolder(), "replica-1");

  // A second replica is a standby: healthy, ready to take over, not leading.
  OperatorProcess second(sa_kubeconfig_, (dir_ / "second.log").string(), "replica-2");
  ASSERT_TRUE(second.started());
  ASSERT_TRUE(WaitUntil([&] { return second.MetricsPort() > 0 && second.HealthPort() > 0; }))
      << second.Log();
  ASSERT_TRUE(WaitUntil([&] {
    return second.Metrics().find("\norrery_leader 0") != std::string::npos;
  })) << second.Log();
  EXPECT_EQ(second.Probe("/readyz"), "200");

  // The leader plans and launches gangs on the two nodes (4 GPUs, 3 tasks).
  ASSERT_TRUE(WaitUntil([&] { return !JobPods().empty(); })) << first.Log();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let it settle: nothing more to create
  std::vector<kube::Object> before = JobPods();
  std::map<std::string, int> per_node;
  std::set<std::string> names_before;
  for (const kube::Object& p : before) {
    names_before.insert(p["metadata"]["name"].get<std::string>());
    ++per_node[p["metadata"]["annotations"][kNodeAnnotation].get<std::string>()];
  }
  for (const auto& [node, n] : per_node) EXPECT_LE(n, 2) << "node " << node << " over-committed";
  std::string metrics = first.Metrics();
  EXPECT_NE(metrics.find("orrery_reconcile_total{controller=\"modelselectionjob\",result="),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("orrery_kube_requests_total{code=\"201\",verb=\"POST\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("orrery_cluster_gpus{state=\"allocatable\"} 4"), std::string::npos)
      << metrics;

  // /metrics is HTTPS and reviewed: no token, a bad token and a token whose
  // account may not get /metrics are all refused, plain HTTP gets no answer.
  EXPECT_EQ(first.Metrics("", /*code_only=*/true), "401");
  EXPECT_EQ(first.Metrics("not-a-token", /*code_only=*/true), "401");
  EXPECT_EQ(first.Metrics(stranger_token_, /*code_only=*/true), "403");
  EXPECT_EQ(first.Metrics(OperatorProcess::reader_token, /*code_only=*/true), "200");
  EXPECT_EQ(RunCommand("curl -s --max-time 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:" +
                       std::to_string(first.MetricsPort()) + "/metrics")
                .output,
            "000");

  // A real Prometheus scrapes both replicas over HTTPS with its service account
  // token: the dashboard's operator queries work.
  auto prometheus = orrery::testing::PrometheusServer::Start(
      {}, {{"127.0.0.1:" + std::to_string(first.MetricsPort()), OperatorProcess::reader_token},
           {"127.0.0.1:" + std::to_string(second.MetricsPort()), OperatorProcess::reader_token}});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  ASSERT_TRUE((*prometheus)->WaitForScrapes(2, 60).ok());
  auto leaders = (*prometheus)->Query("sum(orrery_leader)");
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  EXPECT_EQ((*leaders)["result"][0]["value"][1], "1") << leaders->dump();
  auto allocatable = (*prometheus)->Query("max(orrery_cluster_gpus{state=\"allocatable\"})");
  ASSERT_TRUE(allocatable.ok()) << allocatable.status();
  EXPECT_EQ((*allocatable)["result"][0]["value"][1], "4") << allocatable->dump();
  prometheus->reset();

  // The leader dies without releasing its lease: the standby takes over after
  // the lease expires and adopts the gangs; it creates nothing new.
  first.process().Signal(SIGKILL);
  first.process().WaitOrKill(10);
  ASSERT_TRUE(WaitUntil([&] { return LeaseHolder() == "replica-2"; })) << second.Log();
  ASSERT_TRUE(WaitUntil([&] { return second.Leads() && second.Probe("/readyz") == "200"; }))
      << second.Log();
  ASSERT_TRUE(WaitUntil([&] {
    return second.Metrics().find("orrery_reconcile_total{controller=\"modelselectionjob\"") !=
           std::string::npos;
  })) << second.Log();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::set<std::string> names_after;
  for (const kube::Object& p : JobPods())
    names_after.insert(p["metadata"]["name"].get<std::string>());
  EXPECT_EQ(names_after, names_before) << second.Log();

  // SIGTERM: a clean stop that hands the lease back at once.
  second.process().Signal(SIGTERM);
  EXPECT_EQ(second.process().WaitOrKill(30), 0) << second.Log();
  EXPECT_EQ(LeaseHolder(), "") << second.Log();
  EXPECT_NE(second.Log().find("Stopped"), std::string::npos);
  // Under the chart's RBAC nothing it tried was refused.
  for (const std::string& log : {first.Log(), second.Log()}) {
    EXPECT_EQ(log.find("Forbidden"), std::string::npos) << log;
    EXPECT_EQ(log.find("forbidden"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace orrery::controller
