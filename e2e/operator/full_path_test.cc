// The full path of issue #8, small: a real control plane (API server and
// scheduler), the Helm chart's RBAC, `orrery operator` running under a token of
// the chart's service account, two nodes (two GPUs and one) whose pods a test
// node agent runs as real `orrery-worker` processes, and `kubectl apply` of the
// quickstart job (one grid point, trained longer so there is time to break it).
// The shared profile cache already says two ranks run far faster than one (as
// on a GPU node; on this CPU they do not), so the one-rank configuration is
// really profiled by a trial pod and the planner puts the task on both GPUs of
// node-a. Once a checkpoint is committed node-a is stopped (its processes
// killed, its heartbeat gone); the operator tears the gang down and relaunches
// the task on node-b's one GPU, which resumes from the checkpoint on fewer
// ranks; the job reaches Succeeded, and its final loss equals an uninterrupted
// single-process run of the same task. A real Prometheus scrapes the operator
// and the worker: every dashboard query returns data.
// Container mode: where podman and the images of scripts/images are present
// (ORRERY_WORKER_IMAGE names another worker image), the operator runs from its
// image as the chart's Deployment says: its pod (the Deployment's template, as
// its ReplicaSet would make it, with the service-account token volume the
// ServiceAccount admission plugin adds) runs on a third node of the agent, with
// the chart's args, env, probes and security context, the token a TokenRequest
// for the chart's ServiceAccount, ca.crt the plane's CA, and the API server as
// KUBERNETES_SERVICE_HOST/PORT, so its in-cluster config is what it uses. Its
// "restart" is a SIGKILL of the container, which the agent restarts in the same
// pod (restartPolicy Always). The worker pods run as containers of the CPU
// worker image (uid 65532, read-only root, the claim bind-mounted). Else the
// operator and the workers run as processes. The log says which.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/profile_pod.h"
#include "operator/controller/reconciler.h"
#include "operator/local/process.h"
#include "tests/operator/controller/plane_setup.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"
#include "tests/testing/node_agent.h"
#include "tests/testing/prometheus.h"
#include "tests/testing/wait.h"

namespace orrery::e2e {
namespace {

using orrery::testing::CommandResult;
using orrery::testing::RunCommand;
using orrery::testing::WaitUntil;
using Json = nlohmann::json;
const std::string kSource = ORRERY_SOURCE_DIR;
const std::string kOrrery = std::string(ORRERY_BINARY_DIR) + "/bin/orrery";
const std::string kWorker = ORRERY_WORKER_BINARY;
const char* kNamespace = "e2e-full";
const char* kOperatorNamespace = "orrery-system";
constexpr int kSteps = 1000;
// Polls read the job through a new API client each time: four a second is plenty.
constexpr std::chrono::milliseconds kPoll{250};

const char* kOperatorNode = "node-ops";  // container mode: where the operator's pod runs
const char* kOperatorPod = "orrery-e2e";

// A TCP port free on loopback now (the operator's container binds the chart's
// ports on the host's network).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string DataPath() { return "/var/tmp/orrery-e2e-" + std::to_string(getpid()) + "/corpus.txt"; }

std::string JobYaml() {
  return R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: quickstart
  namespace: e2e-full
spec:
  tasks:
  - name: tiny-gpt
    model:
      gpt: {layers: 2, hidden: 64, heads: 4, seqLen: 64, vocab: 256}
    data:
      text: {path: )" +
         DataPath() + R"(}
    training:
      steps: )" +
         std::to_string(kSteps) + R"(
      batchSize: 8
      optimizer: adamw
      learningRate: 1e-3
      schedule: cosine
      warmupSteps: 20
  resources:
    templates: [ddp]
    gpusPerTask: {min: 1, max: 2}
    gpuQuota: 2
  scheduling:
    solverTimeLimitSeconds: 5
  profiling:
    trialSteps: 5
  checkpoints:
    claimName: checkpoints
    path: /checkpoints
    intervalSteps: 50
    keep: 2
)";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last {"event":"done",...} line of a worker log.
// The last progress line of `event` ("done", "restore", ...) in a worker log.
std::optional<Json> LastEvent(const std::string& log, const std::string& event) {
  std::optional<Json> found;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"" + event + "\"") == std::string::npos) continue;
    try {
      found = Json::parse(line);
    } catch (const std::exception&) {
    }
  }
  return found;
}

std::optional<Json> DoneEvent(const std::string& log) { return LastEvent(log, "done"); }

class FullPathTest : public orrery::testing::ControlPlaneTestWith<false, true, false> {
 protected:
  static void SetUpTestSuite() {
    ControlPlaneTestWith::SetUpTestSuite();
    if (!plane()) return;
    if (!controller::testutil::InstallJobCrd(*plane(), &setup_output_)) return;
    // The chart's service account and RBAC.
    // Prometheus scrapes the operator's HTTPS /metrics with the token of its own
    // service account, bound to the chart's metrics-reader role.
    for (const char* command :
         {"create namespace monitoring", "-n monitoring create serviceaccount prometheus",
          // Before the chart: it binds the operator's role in the namespaces it watches.
          "create namespace e2e-full"}) {
      CommandResult r = plane()->Kubectl(command);
      setup_output_ += r.output;
      if (r.exit_code != 0 && r.output.find("AlreadyExists") == std::string::npos) return;
    }
    // The images scripts/images builds: the chart's default names.
    CommandResult names = RunCommand(kSource + "/scripts/images --print");
    std::istringstream lines(names.output);
    std::getline(lines, operator_image_);
    std::getline(lines, chart_worker_image_);
    const char* image_env = std::getenv("ORRERY_WORKER_IMAGE");
    worker_image_ = image_env != nullptr ? image_env : chart_worker_image_;
    containers_ =
        names.exit_code == 0 && RunCommand("podman image exists '" + operator_image_ +
                                           "' && podman image exists '" + worker_image_ + "' 2>&1")
                                        .exit_code == 0;
    std::string flags =
        "--set metrics.readers[0].name=prometheus,metrics.readers[0].namespace=monitoring";
    if (containers_) {
      // The chart's operator, on node-ops, with the test's timings: the image
      // and worker image stay the chart's defaults.
      metrics_port_ = FreePort();
      do health_port_ = FreePort();
      while (health_port_ == metrics_port_);
      flags +=
          " --set-json 'nodeSelector={\"kubernetes.io/hostname\":\"" + std::string(kOperatorNode) +
          "\"}' --set metrics.port=" + std::to_string(metrics_port_) +
          " --set health.port=" + std::to_string(health_port_) +
          " --set leaderElection.leaseDuration=4s,leaderElection.renewDeadline=3s,"
          "leaderElection.retryPeriod=1s --set watchNamespaces[0]=" +
          kNamespace +
          " --set-json 'extraArgs=[\"--device=cpu\",\"--profile-namespace=" + kOperatorNamespace +
          "\",\"--solver-time-limit=5s\",\"--progress-period=1s\","
          "\"--node-lost-grace=5s\"]'";
    } else {
      // Its own operator pod is not needed (the test runs the operator as a
      // process), so it is pinned to no node.
      flags += " --set nodeSelector.orrery-e2e=no-such-node";
    }
    sa_kubeconfig_ = controller::testutil::InstallChartAsServiceAccount(
        *plane(), kOperatorNamespace, flags, &setup_output_);
    if (sa_kubeconfig_.empty()) return;
    // What the root-CA publisher of a controller-manager puts in every namespace.
    CommandResult ca = plane()->Kubectl(
        std::string("-n ") + kOperatorNamespace +
        " create configmap kube-root-ca.crt --from-file=ca.crt=" + plane()->ca_file());
    setup_output_ += ca.output;
    if (ca.exit_code != 0) return;
    CommandResult token = plane()->Kubectl("-n monitoring create token prometheus --duration 1h");
    setup_output_ += token.output;
    if (token.exit_code != 0) return;
    prometheus_token_ = token.output.substr(0, token.output.find('\n'));
    ready_ = true;
  }

  // Reads through the API (not kubectl: a poll every 250 ms should be cheap).
  Json Job() const {
    auto client = kube::testutil::PlaneClient(*plane());
    auto job = client->Get(controller::ModelSelectionJobs(), kNamespace, "quickstart");
    return job.ok() ? Json::parse(job->dump()) : Json::object();
  }
  std::vector<Json> GangPods() const {
    auto client = kube::testutil::PlaneClient(*plane());
    kube::ListOptions o;
    o.label_selector = controller::kGangLabel;
    auto list = client->List(kube::Pods(), kNamespace, o);
    std::vector<Json> out;
    if (!list.ok()) return out;
    for (const kube::Object& p : (*list)["items"]) out.push_back(Json::parse(p.dump()));
    return out;
  }

  // The chart's Deployment (as `helm install` left it) as its ReplicaSet would
  // make its pod, completed as the ServiceAccount admission plugin would (it is
  // off in the test plane): the projected volume with the service account's
  // token, the cluster's CA and the namespace, mounted where in-cluster clients
  // read them.
  static StatusOr<Json> OperatorPod() {
    CommandResult d = plane()->Kubectl(std::string("-n ") + kOperatorNamespace +
                                       " get deployment -l app.kubernetes.io/component=operator"
                                       " -o jsonpath='{.items[0].spec.template}'");
    if (d.exit_code != 0) return UnavailableError("the chart's Deployment: " + d.output);
    Json tmpl = Json::parse(d.output);
    Json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", kOperatorPod},
                  {"namespace", kOperatorNamespace},
                  {"labels", tmpl["metadata"].value("labels", Json::object())}}},
                {"spec", tmpl["spec"]}};
    Json sources = Json::array(
        {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
         {{"configMap",
           {{"name", "kube-root-ca.crt"},
            {"items", Json::array({{{"key", "ca.crt"}, {"path", "ca.crt"}}})}}}},
         {{"downwardAPI",
           {{"items",
             Json::array({{{"path", "namespace"},
                           {"fieldRef",
                            {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}})}}}}});
    pod["spec"]["volumes"].push_back(
        {{"name", "kube-api-access"}, {"projected", {{"sources", sources}, {"defaultMode", 420}}}});
    for (Json& c : pod["spec"]["containers"]) {
      c["volumeMounts"].push_back({{"name", "kube-api-access"},
                                   {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
                                   {"readOnly", true}});
    }
    return pod;
  }
  static Json OperatorPodNow() {
    auto client = kube::testutil::PlaneClient(*plane());
    auto pod = client->Get(kube::Pods(), kOperatorNamespace, kOperatorPod);
    return pod.ok() ? Json::parse(pod->dump()) : Json::object();
  }
  // The pod's Ready condition and its container's restarts.
  static bool OperatorReady(int restarts) {
    Json pod = OperatorPodNow();
    if (!pod.contains("status")) return false;
    bool ready = false;
    for (const Json& c : pod["status"].value("conditions", Json::array())) {
      ready = ready || (c.value("type", "") == "Ready" && c.value("status", "") == "True");
    }
    Json cs = pod["status"].value("containerStatuses", Json::array());
    return ready && !cs.empty() && cs[0].value("restartCount", -1) == restarts;
  }

  static bool ready_;
  static std::string setup_output_;
  static std::string sa_kubeconfig_;
  static inline std::string prometheus_token_;
  static inline bool containers_ = false;  // the operator and workers from their images
  static inline std::string operator_image_, chart_worker_image_, worker_image_;
  static inline int metrics_port_ = 0, health_port_ = 0;
};
bool FullPathTest::ready_ = false;
std::string FullPathTest::setup_output_;
std::string FullPathTest::sa_kubeconfig_;

TEST_F(FullPathTest, QuickstartSurvivesANodeLossAndMatchesAnUninterruptedRun) {
  ASSERT_TRUE(ready_) << setup_output_;
  const std::filesystem::path dir = std::filesystem::path(plane()->dir()) / "full-path";
  std::filesystem::create_directories(dir);

  // node-a has two GPUs, node-b one: the task runs on both of node-a's, and
  // when node-a dies it can only go on, on one rank, on node-b.
  orrery::testing::NodeAgentOptions ao;
  ao.nodes = {"node-a", "node-b"};
  ao.gpus_by_node = {{"node-a", 2}, {"node-b", 1}};
  ao.root = (dir / "agent").string();
  ao.default_binary = kWorker;
  ao.first_ip_block = 7;
  const bool containers = containers_;
  if (containers) {
    ao.nodes.push_back(kOperatorNode);  // no GPUs: only the operator's pod fits
    ao.gpus_by_node[kOperatorNode] = 0;
    ao.container_runtime = "podman";
    ao.images = {{chart_worker_image_, worker_image_}};
    // The corpus, which the job names by a path on the node.
    ao.host_folders = {std::filesystem::path(DataPath()).parent_path().string()};
  }
  std::printf("%s\n", containers ? ("operator pod runs as a container of " + operator_image_ +
                                    ", worker pods of " + worker_image_)
                                       .c_str()
                                 : "operator and worker pods run as processes (no podman or no "
                                   "images: scripts/images)");
  std::fflush(stdout);  // before any fork: a child must not print it again
  auto agent = orrery::testing::NodeAgent::Start(kube::testutil::PlaneConfig(*plane()), ao);
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->CreateBoundClaim(kNamespace, "checkpoints").ok());
  // The corpus at a path no pod mounts over (a pod's /tmp is its own emptyDir,
  // and the source tree may sit under /tmp); profile pods mount no volume.
  const std::string data_dir = std::filesystem::path(DataPath()).parent_path().string();
  std::filesystem::create_directories(data_dir);
  std::filesystem::copy_file(kSource + "/data/corpus/quickstart.txt", data_dir + "/corpus.txt",
                             std::filesystem::copy_options::overwrite_existing);
  struct RemoveDataDir {
    std::string dir;
    ~RemoveDataDir() { std::filesystem::remove_all(dir); }
  } remove_data_dir{data_dir};

  // The cache knows two ranks (fast); one rank is left to profile.
  {
    auto loaded = api::LoadJobText(JobYaml());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto client = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(
        controller::testutil::StoreProfiles(*client,
                                            controller::testutil::DdpProfiles(
                                                *loaded, {2}, [](int) { return 1e6; }, "cpu"),
                                            kOperatorNamespace)
            .ok());
  }

  // The operator. Process mode: started again after a SIGKILL on the same
  // metrics port (so Prometheus keeps its target) and with the same identity, as
  // a restarted container of the same pod would be. Container mode: the chart's
  // pod, whose container the agent restarts after the SIGKILL.
  std::string op_log = containers ? (*agent)->LogPath(kOperatorNamespace, kOperatorPod)
                                  : (dir / "operator.log").string();
  size_t op_log_from = 0;  // where the running operator's output begins in op_log
  auto op_output = [&] {
    std::string log = ReadFile(op_log);
    return log.substr(std::min(op_log_from, log.size()));
  };
  auto start_operator = [&](const std::string& log, int port) {
    return local::Process::Spawn(
        {kOrrery, "operator", "--kubeconfig=" + sa_kubeconfig_, "--leader-elect=true",
         std::string("--leader-election-namespace=") + kOperatorNamespace,
         std::string("--profile-namespace=") + kOperatorNamespace,
         std::string("--namespace=") + kNamespace, "--device=cpu", "--worker-image=orrery-worker",
         "--metrics-bind-address=127.0.0.1:" + std::to_string(port),
         "--health-probe-bind-address=127.0.0.1:0", "--lease-duration=4s", "--renew-deadline=3s",
         "--retry-period=1s", "--solver-time-limit=5s", "--progress-period=1s",
         // The stopped node is a real loss: no need to wait out the 5 m default.
         "--node-lost-grace=5s"},
        {{"POD_NAME", "e2e-operator"}}, log, /*capture_stdout=*/false);
  };
  auto describe = [&] {
    return "operator log:\n" + ReadFile(op_log) + "\nagent:\n" + (*agent)->Describe() +
           "\noperator pod:\n" + OperatorPodNow().value("status", Json::object()).dump(1) +
           "\njob:\n" + Job().value("status", Json::object()).dump(1);
  };
  auto serving_port = [&](int* port) {
    std::smatch m;
    std::string log = op_output();
    if (!std::regex_search(log, m, std::regex(R"(Serving metrics address=[0-9.]+:([0-9]+))")))
      return false;
    *port = std::stoi(m[1]);
    return true;
  };
  // Ready (the chart's readiness probe passed) after `restarts` restarts, and
  // serving its metrics.
  auto operator_pod_serving = [&](int restarts) {
    return OperatorReady(restarts) && op_output().find("Serving metrics") != std::string::npos;
  };
  std::optional<local::Process> op;
  int metrics_port = 0;
  if (containers) {
    auto pod = OperatorPod();
    ASSERT_TRUE(pod.ok()) << pod.status();
    auto client = kube::testutil::PlaneClient(*plane());
    auto created = client->Create(kube::Pods(), kOperatorNamespace, *pod);
    ASSERT_TRUE(created.ok()) << created.status();
    metrics_port = metrics_port_;
    ASSERT_TRUE(WaitUntil([&] { return operator_pod_serving(0); }, std::chrono::seconds(90), kPoll))
        << describe();
    EXPECT_EQ(OperatorPodNow()["spec"].value("nodeName", ""), kOperatorNode);
  } else {
    auto started = start_operator(op_log, 0);
    ASSERT_TRUE(started.ok()) << started.status();
    op.emplace(std::move(*started));
    ASSERT_TRUE(
        WaitUntil([&] { return serving_port(&metrics_port); }, std::chrono::seconds(30), kPoll))
        << describe();
  }

  CommandResult applied = plane()->Kubectl("apply -f -", JobYaml());
  ASSERT_EQ(applied.exit_code, 0) << applied.output;

  // Profiling runs for real, then the planner puts the task on both nodes.
  ASSERT_TRUE(WaitUntil(
      [&] {
        int running = 0;
        for (const Json& p : GangPods()) running += p["status"].value("phase", "") == "Running";
        return running == 2;
      },
      std::chrono::seconds(240), kPoll))
      << describe();
  std::string rank0_ip;
  for (const Json& p : GangPods()) {
    EXPECT_EQ(p["spec"].value("nodeName", ""), "node-a");
    if (p["metadata"]["labels"].value(controller::kRankLabel, "") == "0") {
      rank0_ip = p["status"].value("podIP", "");
    }
  }
  ASSERT_FALSE(rank0_ip.empty());
  const std::string lost_node = "node-a";
  auto profiles = plane()->Kubectl(std::string("-n ") + kOperatorNamespace +
                                   " get configmap orrery-profiles -o json");
  ASSERT_EQ(profiles.exit_code, 0) << profiles.output;
  EXPECT_GE(Json::parse(profiles.output)["data"].size(), 2u) << profiles.output;

  // Prometheus scrapes the operator (HTTPS, with its token: an unauthenticated
  // scrape is refused) and the gang's rank 0.
  CommandResult refused =
      RunCommand("curl -sk --max-time 10 -o /dev/null -w '%{http_code}' https://127.0.0.1:" +
                 std::to_string(metrics_port) + "/metrics");
  EXPECT_EQ(refused.output, "401");
  auto prometheus = orrery::testing::PrometheusServer::Start(
      {rank0_ip + ":9400"}, {{"127.0.0.1:" + std::to_string(metrics_port), prometheus_token_}});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();

  // A checkpoint reaches the status (progress is scraped from rank 0).
  ASSERT_TRUE(WaitUntil(
      [&] {
        Json t = Job()["status"]["tasks"][0];
        return t.contains("lastCheckpoint") && t["lastCheckpoint"].value("step", 0) >= 100;
      },
      std::chrono::seconds(120), kPoll))
      << describe();
  Json before = Job()["status"]["tasks"][0];
  EXPECT_GT(before.value("stepsDone", 0), 0);
  EXPECT_GT(before.value("samplesPerSecond", 0.0), 0);
  EXPECT_LT(before.value("stepsDone", 0), kSteps) << "trained too fast to break it mid-run";

  // Worker panels: queried while the worker runs.
  const Json dashboard = Json::parse(ReadFile(kSource + "/deploy/grafana/orrery.json"));
  std::vector<std::string> queries = orrery::testing::DashboardQueries(dashboard);
  ASSERT_TRUE((*prometheus)->WaitForScrapes(3, 60).ok()) << describe();
  for (const std::string& q : queries) {
    if (q.find("orrery_worker_") == std::string::npos) continue;
    auto data = (*prometheus)->Query(q);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_FALSE((*data)["result"].empty()) << "no data for: " << q;
  }

  // The operator is killed mid-training (no lease release, no cleanup) and
  // started again: it adopts the running gang, the same pods, and creates none.
  auto pod_uids = [&] {
    std::map<std::string, std::string> uids;
    for (const Json& p : GangPods()) {
      uids[p["metadata"].value("name", "")] = p["metadata"].value("uid", "");
    }
    return uids;
  };
  const std::map<std::string, std::string> gang_before = pod_uids();
  ASSERT_EQ(gang_before.size(), 2u);
  const int steps_at_kill = Job()["status"]["tasks"][0].value("stepsDone", 0);
  if (containers) {
    op_log_from = ReadFile(op_log).size();
    ASSERT_TRUE((*agent)->SignalContainer(kOperatorNamespace, kOperatorPod, SIGKILL).ok());
    ASSERT_TRUE(WaitUntil([&] { return operator_pod_serving(1); }, std::chrono::seconds(90), kPoll))
        << describe();
    Json last = OperatorPodNow()["status"]["containerStatuses"][0]["lastState"];
    EXPECT_EQ(last["terminated"].value("exitCode", 0), 137) << last.dump();
  } else {
    op->Signal(SIGKILL);
    (void)op->WaitOrKill(10);
    op_log = (dir / "operator-restarted.log").string();
    auto restarted = start_operator(op_log, metrics_port);
    ASSERT_TRUE(restarted.ok()) << restarted.status();
    op.emplace(std::move(*restarted));
    int restarted_port = 0;
    ASSERT_TRUE(
        WaitUntil([&] { return serving_port(&restarted_port); }, std::chrono::seconds(30), kPoll))
        << describe();
    EXPECT_EQ(restarted_port, metrics_port);
  }
  // Progress moving again in the status shows the new leader reconciles the job.
  ASSERT_TRUE(
      WaitUntil([&] { return Job()["status"]["tasks"][0].value("stepsDone", 0) > steps_at_kill; },
                std::chrono::seconds(60), kPoll))
      << describe();
  EXPECT_EQ(pod_uids(), gang_before) << "the restarted operator replaced the running gang";
  EXPECT_EQ(op_output().find("Created gang"), std::string::npos) << op_output();

  // node-a dies with both ranks.
  ASSERT_TRUE((*agent)->StopNode(lost_node).ok());

  // The task resumes on the node left, on one rank, and the job succeeds.
  ASSERT_TRUE(WaitUntil([&] { return Job()["status"].value("phase", "") == "Succeeded"; },
                        std::chrono::seconds(600), kPoll))
      << describe();
  Json status = Job()["status"];
  Json task = status["tasks"][0];
  EXPECT_GE(task.value("restarts", 0), 1) << status.dump(1);
  EXPECT_EQ(task["config"].value("gpus", 0), 1) << status.dump(1);
  EXPECT_EQ(task.value("stepsDone", 0), kSteps);

  std::vector<Json> pods = GangPods();
  const Json* last = nullptr;
  for (const Json& p : pods) {
    if (p["status"].value("phase", "") != "Succeeded") continue;
    if (last == nullptr ||
        std::stoi(p["metadata"]["annotations"].value(controller::kGenerationAnnotation, "0")) >
            std::stoi(
                (*last)["metadata"]["annotations"].value(controller::kGenerationAnnotation, "0"))) {
      last = &p;
    }
  }
  ASSERT_NE(last, nullptr) << describe();
  EXPECT_EQ((*last)["metadata"]["annotations"].value(controller::kWorldSizeAnnotation, ""), "1");
  EXPECT_EQ((*last)["spec"].value("nodeName", ""), "node-b");
  std::string resumed_log =
      ReadFile((*agent)->LogPath(kNamespace, (*last)["metadata"]["name"].get<std::string>()));
  EXPECT_TRUE(std::regex_search(resumed_log, std::regex(R"("resumed_from_step":[1-9][0-9]*)")))
      << resumed_log.substr(0, 2000);
  // The one rank left read exactly the bytes of its state out of the two
  // ranks' shards (issue #18).
  std::optional<Json> restore = LastEvent(resumed_log, "restore");
  ASSERT_TRUE(restore.has_value()) << resumed_log.substr(0, 2000);
  EXPECT_EQ((*restore)["bytes_read"], (*restore)["bytes_needed"]) << restore->dump();
  EXPECT_GT((*restore)["bytes_needed"].get<uint64_t>(), 0u);
  EXPECT_EQ((*restore)["ranks"].size(), 1u);
  // Two ranks wrote it, one loaded it: a re-shard, and the line names both.
  EXPECT_NE((*restore)["from_layout"], (*restore)["layout"]) << restore->dump();
  std::optional<Json> done = DoneEvent(resumed_log);
  ASSERT_TRUE(done.has_value()) << resumed_log;
  const double loss = (*done)["loss"].get<double>();

  // Events tell the story.
  CommandResult events = plane()->Kubectl(std::string("-n ") + kNamespace + " get events -o json");
  for (const char* reason :
       {"Profiled", "PlanAdopted", "GangCreated", "GangFailed", "CheckpointLocation"}) {
    EXPECT_NE(events.output.find(std::string("\"reason\": \"") + reason + "\""), std::string::npos)
        << reason;
  }

  // Operator panels: rescales, re-plans and profiling happened by now.
  // (The worker target is gone now; Prometheus scrapes the operator every second.)
  for (const std::string& q : queries) {
    if (q.find("orrery_worker_") != std::string::npos) continue;
    Json last_answer;
    bool has_data = WaitUntil(
        [&] {
          auto data = (*prometheus)->Query(q);
          if (!data.ok()) return false;
          last_answer = *data;
          return !(*data)["result"].empty();
        },
        std::chrono::seconds(60), kPoll);
    EXPECT_TRUE(has_data) << "no data for: " << q << "\n" << last_answer.dump();
  }

  // The same task uninterrupted, in one process: the same final loss.
  std::vector<std::string> argv = {kWorker};
  for (const Json& a : (*last)["spec"]["containers"][0]["args"]) {
    std::string arg = a.get<std::string>();
    if (arg.rfind("--checkpoint-dir=", 0) == 0) {
      arg = "--checkpoint-dir=" + (dir / "solo").string();
    }
    argv.push_back(arg);
  }
  auto solo = local::Process::Spawn(argv, {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
                                    (dir / "solo.err").string(), /*capture_stdout=*/true);
  ASSERT_TRUE(solo.ok()) << solo.status();
  std::string solo_out;
  while (solo->Running()) {
    for (const std::string& line : solo->ReadLines()) solo_out += line + "\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const std::string& line : solo->ReadLines()) solo_out += line + "\n";
  ASSERT_EQ(solo->WaitOrKill(1), 0) << ReadFile((dir / "solo.err").string());
  std::optional<Json> solo_done = DoneEvent(solo_out);
  ASSERT_TRUE(solo_done.has_value()) << solo_out;
  const double solo_loss = (*solo_done)["loss"].get<double>();
  std::printf(
      "final loss: interrupted (2 ranks, then 1 after the node loss) %.6f, "
      "uninterrupted %.6f, relative difference %.2e\n",
      loss, solo_loss, std::fabs(loss - solo_loss) / std::fabs(solo_loss));
  EXPECT_NEAR(loss, solo_loss, 1e-3 * std::fabs(solo_loss));

  // A clean stop on SIGTERM: exit 0 (in a pod: the container's last state,
  // reported while the agent backs off restarting it).
  if (containers) {
    ASSERT_TRUE((*agent)->SignalContainer(kOperatorNamespace, kOperatorPod, SIGTERM).ok());
    Json cs;
    EXPECT_TRUE(WaitUntil(
        [&] {
          Json all = OperatorPodNow()["status"].value("containerStatuses", Json::array());
          if (all.empty()) return false;
          cs = all[0];
          return cs["state"].contains("waiting");
        },
        std::chrono::seconds(30), kPoll))
        << describe();
    EXPECT_EQ(cs["lastState"]["terminated"].value("exitCode", -1), 0) << describe();
    plane()->Kubectl(std::string("-n ") + kOperatorNamespace + " delete pod " + kOperatorPod +
                     " --wait=false");
  } else {
    op->Signal(SIGTERM);
    EXPECT_EQ(op->WaitOrKill(30), 0) << ReadFile(op_log);
  }
  EXPECT_EQ(ReadFile(op_log).find("orbidden"), std::string::npos) << ReadFile(op_log);
  prometheus->reset();
  EXPECT_TRUE((*agent)->Stop().ok());
  plane()->Kubectl(std::string("delete namespace ") + kNamespace + " --wait=false");
}

}  // namespace
}  // namespace orrery::e2e
