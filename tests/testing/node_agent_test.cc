// The test node agent against a real API server and kube-scheduler: the scheduler
// binds pods to the agent's nodes, shell-command pods run as local processes and
// report Running, Succeeded or Failed with their termination messages, the
// environment is rewritten for a gang's rendezvous, deletion is graceful, deadlines
// and dead nodes behave as on a cluster, and a real two-rank orrery-worker gang
// built by the controller's BuildGang trains to completion, as processes and, in
// container mode, as containers of the worker image (scripts/images).
#include "tests/testing/node_agent.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "operator/api/load.h"
#include "operator/api/schema.h"
#include "operator/api/yaml.h"
#include "operator/controller/gang.h"
#include "operator/controller/names.h"
#include "operator/kube/api_error.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"

namespace orrery::testing {
namespace {

using kube::Object;
using kube::testutil::Eventually;
namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// KEY=VALUE lines of `env` output.
std::map<std::string, std::string> ParseEnv(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

Object FieldEnv(const std::string& name, const std::string& path) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", path}}}}}};
}

class NodeAgentTest : public ControlPlaneTestWith<false, true, false> {
 protected:
  void SetUp() override {
    ControlPlaneTestWith::SetUp();
    if (HasFatalFailure()) return;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    static int counter = 0;
    ns_ = "agent-" + std::to_string(++counter);
    ASSERT_TRUE(kube::testutil::CreateNamespace(*client_, ns_).ok());
    nodes_ = {ns_ + "-a", ns_ + "-b"};
    NodeAgentOptions o;
    o.nodes = nodes_;
    o.root = plane()->dir() + "/" + ns_;
    o.heartbeat_period = std::chrono::seconds(1);
    o.default_binary = Worker();
    auto agent = NodeAgent::Start(kube::testutil::PlaneConfig(*plane()), o);
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    ASSERT_TRUE(agent_->CreateBoundClaim(ns_, "shared").ok());
  }
  void TearDown() override {
    if (agent_) {
      EXPECT_TRUE(agent_->Stop().ok());
    }
  }

  static std::string Worker() {
    std::string built = ORRERY_WORKER_BINARY;
    if (!built.empty()) return built;
    const char* env = std::getenv("ORRERY_WORKER");  // as `orrery run` reads it
    return env != nullptr ? env : "";
  }

  // A pod running `script` with /bin/sh, the claim "shared" at /data.
  Object ShellPod(const std::string& name, const std::string& script,
                  Object env = Object::array()) {
    Object container = {
        {"name", "main"},
        {"image", "shell"},
        {"command", {"/bin/sh", "-c", script}},
        {"env", env},
        {"terminationMessagePolicy", "FallbackToLogsOnError"},
        {"volumeMounts", Object::array({{{"name", "data"}, {"mountPath", "/data"}}})}};
    return {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", ns_}}},
        {"spec",
         {{"restartPolicy", "Never"},
          {"terminationGracePeriodSeconds", 30},
          {"containers", Object::array({container})},
          {"volumes", Object::array({{{"name", "data"},
                                      {"persistentVolumeClaim", {{"claimName", "shared"}}}}})}}}};
  }

  void Create(const Object& pod) {
    auto r = client_->Create(kube::Pods(), ns_, pod);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  Object Pod(const std::string& name) {
    auto r = client_->Get(kube::Pods(), ns_, name);
    return r.ok() ? *r : Object::object();
  }
  static std::string Phase(const Object& pod) {
    return pod.contains("status") ? pod["status"].value("phase", "") : "";
  }
  // Waits for the pod's phase; the failure message tells what the agent saw.
  // A pod that ends in the other terminal phase fails the wait at once.
  void WaitPhase(const std::string& name, const std::string& phase,
                 Duration timeout = std::chrono::seconds(60)) {
    std::string other = phase == "Succeeded" ? "Failed" : phase == "Failed" ? "Succeeded" : "";
    bool ok = Eventually(
        [&] {
          std::string now = Phase(Pod(name));
          return now == phase || (!other.empty() && now == other);
        },
        timeout);
    ok = ok && Phase(Pod(name)) == phase;
    NodeAgent* agent = serving_ != nullptr ? serving_ : agent_.get();
    ASSERT_TRUE(ok) << "pod " << name << " never " << phase << ": " << Pod(name).dump(1) << "\n"
                    << agent->Describe() << "log: " << agent->LogTail(ns_, name);
  }
  Object Terminated(const std::string& name) {
    Object pod = Pod(name);
    return pod["status"]["containerStatuses"][0]["state"]["terminated"];
  }
  Object ReadyCondition(const std::string& node) {
    auto n = client_->Get(kube::Nodes(), "", node);
    if (!n.ok()) return Object::object();
    for (const Object& c : (*n)["status"]["conditions"]) {
      if (c.value("type", "") == "Ready") return c;
    }
    return Object::object();
  }
  // Waits until `node`'s heartbeat has moved on `beats` times: the agent's loop has
  // made at least that many passes since.
  void WaitHeartbeats(const std::string& node, int beats) {
    for (int i = 0; i < beats; ++i) {
      std::string last = ReadyCondition(node).value("lastHeartbeatTime", "");
      ASSERT_TRUE(Eventually([&] {
        return ReadyCondition(node).value("lastHeartbeatTime", "") != last;
      })) << "no heartbeat of "
          << node;
    }
  }

  // A two-rank gang of the controller's worker pods (BuildGang) on `agent`'s
  // nodes trains a tiny MLP to completion, both ranks checkpointing into a claim.
  void TinyGangTrains(NodeAgent& agent) {
    serving_ = &agent;
    std::string yaml = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: tiny, namespace: )" +
                       ns_ + R"(, uid: 6f1d2c3a-0000-4000-8000-00000000a9e7}
spec:
  tasks:
  - name: mlp
    model:
      mlp: {layers: 2, hidden: 16, inputs: 8, outputs: 2}
    data:
      synthetic: {seed: 1}
    training: {steps: 12, batchSize: 8, learningRate: 1e-3}
  resources: {gpuQuota: 2}
  checkpoints: {claimName: ckpt, path: /ckpt, intervalSteps: 6}
)";
    auto json = api::YamlToJson(yaml);
    ASSERT_TRUE(json.ok()) << json.status();
    auto loaded = api::LoadJob(*json);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_TRUE(agent.CreateBoundClaim(ns_, "ckpt").ok());
    controller::GangRequest r;
    r.job = &loaded->job;
    r.task = &loaded->tasks[0];
    r.config.gpus = 2;
    r.config.nodes = 2;
    r.placement = agent.nodes();
    r.options.backend = "gloo";
    r.options.termination_grace_seconds = 30;
    r.options.report_every = 4;
    auto gang = controller::BuildGang(r);
    ASSERT_TRUE(gang.ok()) << gang.status();
    // The builders speak ordered JSON, the client plain JSON.
    auto service =
        client_->Create({"", "v1", "services", true}, ns_, Object::parse(gang->service.dump()));
    ASSERT_TRUE(service.ok()) << service.status();
    for (const api::Json& pod : gang->pods) Create(Object::parse(pod.dump()));
    for (const api::Json& pod : gang->pods) {
      std::string name = pod["metadata"]["name"];
      WaitPhase(name, "Succeeded", std::chrono::seconds(240));
      EXPECT_EQ(Pod(name)["spec"]["nodeName"],
                pod["metadata"]["annotations"][controller::kNodeAnnotation].get<std::string>());
    }
    // Rank 0 reports (on stdout, into its log) that it trained in a world of two.
    std::string rank0 = gang->pods[0]["metadata"]["name"];
    std::string log = ReadFile(agent.LogPath(ns_, rank0));
    EXPECT_NE(log.find("\"world_size\":2"), std::string::npos) << log;
    EXPECT_NE(log.find("\"event\":\"done\""), std::string::npos) << log;
    // Both ranks met at rank 0's address and checkpointed into the claim, under
    // the job's name and uid (controller::CheckpointDir).
    std::string ckpt = agent.PvcDir(ns_, "ckpt") + "/tiny-6f1d2c3a-0000-4000-8000-00000000a9e7/mlp";
    EXPECT_EQ(controller::CheckpointDir(loaded->job, "mlp"),
              "/ckpt/tiny-6f1d2c3a-0000-4000-8000-00000000a9e7/mlp");
    ASSERT_TRUE(fs::exists(ckpt)) << agent.Describe();
    EXPECT_FALSE(fs::is_empty(ckpt));
  }

  std::unique_ptr<kube::RestClient> client_;
  std::string ns_;
  std::vector<std::string> nodes_;
  std::unique_ptr<NodeAgent> agent_;
  NodeAgent* serving_ = nullptr;  // the agent whose pods WaitPhase describes
};

TEST_F(NodeAgentTest, NodesAreReadyAndHeartbeat) {
  auto node = client_->Get(kube::Nodes(), "", nodes_[0]);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)["metadata"]["labels"]["kubernetes.io/hostname"], nodes_[0]);
  EXPECT_EQ((*node)["status"]["allocatable"]["nvidia.com/gpu"], "2");
  EXPECT_EQ((*node)["status"]["capacity"]["pods"], "110");
  EXPECT_EQ((*node)["status"]["addresses"][0]["address"], "127.0.0.1");
  EXPECT_FALSE((*node)["spec"].contains("taints")) << node->dump(1);
  Object ready = ReadyCondition(nodes_[0]);
  EXPECT_EQ(ready["status"], "True") << ready.dump();
  WaitHeartbeats(nodes_[0], 1);
}

TEST_F(NodeAgentTest, ShellPodRunsThenSucceedsWithItsTerminationMessage) {
  // The pod waits for a file the test writes, so Running is seen for certain.
  Create(ShellPod("hello",
                  "echo started; while [ ! -e /data/go ]; do sleep 0.05; done;"
                  " printf 'all done' > \"$ORRERY_TERMINATION_MESSAGE_PATH\"",
                  Object::array({{{"name", "ORRERY_TERMINATION_MESSAGE_PATH"},
                                  {"value", "/dev/termination-log"}}})));
  WaitPhase("hello", "Running");
  Object pod = Pod("hello");
  std::string node = pod["spec"].value("nodeName", "");
  EXPECT_TRUE(node == nodes_[0] || node == nodes_[1]) << "bound to " << node;
  std::string ip = pod["status"].value("podIP", "");
  EXPECT_EQ(ip, agent_->PodIp(ns_, "hello"));
  EXPECT_EQ(ip.rfind("127.0.1.", 0), 0u) << ip;
  EXPECT_EQ(pod["status"]["hostIP"], "127.0.0.1");
  EXPECT_EQ(pod["status"]["containerStatuses"][0]["ready"], true);
  EXPECT_TRUE(pod["status"]["containerStatuses"][0]["state"].contains("running"));
  bool ready = false;
  for (const Object& c : pod["status"]["conditions"]) {
    if (c["type"] == "Ready") ready = c["status"] == "True";
  }
  EXPECT_TRUE(ready) << pod["status"].dump(1);

  std::ofstream(agent_->PvcDir(ns_, "shared") + "/go").close();
  WaitPhase("hello", "Succeeded");
  Object t = Terminated("hello");
  EXPECT_EQ(t["exitCode"], 0);
  EXPECT_EQ(t["reason"], "Completed");
  EXPECT_EQ(t["message"], "all done");
  EXPECT_NE(ReadFile(agent_->LogPath(ns_, "hello")).find("started"), std::string::npos);
}

TEST_F(NodeAgentTest, FailedPodReportsItsExitCodeAndLogTail) {
  Create(ShellPod("broken", "echo to-stdout; echo to-stderr >&2; exit 3"));
  WaitPhase("broken", "Failed");
  Object t = Terminated("broken");
  EXPECT_EQ(t["exitCode"], 3);
  EXPECT_EQ(t["reason"], "Error");
  std::string message = t.value("message", "");
  EXPECT_NE(message.find("to-stdout"), std::string::npos) << message;
  EXPECT_NE(message.find("to-stderr"), std::string::npos) << message;
}

// What a Deployment's pod needs of its kubelet: the API server's address in the
// environment, the service-account token volume (a TokenRequest the API server
// authenticates as the pod's service account, the cluster CA, the namespace), a
// restart in the same pod after a failure, and readiness from a probe.
TEST_F(NodeAgentTest, PodGetsItsTokenVolumeRestartsAndFollowsItsReadinessProbe) {
  ASSERT_EQ(plane()->Kubectl("-n " + ns_ + " create serviceaccount runner").exit_code, 0);
  ASSERT_EQ(
      plane()
          ->Kubectl("-n " + ns_ + " create configmap kube-root-ca.crt --from-literal=ca.crt=the-ca")
          .exit_code,
      0);
  // The readiness probe's target: a socket the test listens on, then closes.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  // Fails once (exit 7), then waits for /data/go; each run copies what it sees.
  Object pod = ShellPod(
      "deployed",
      "sa=/var/run/secrets/kubernetes.io/serviceaccount; cp $sa/token $sa/ca.crt $sa/namespace "
      "/data/; echo \"$KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT\" > /data/api;"
      " if [ ! -e /data/failed ]; then touch /data/failed; exit 7; fi;"
      " while [ ! -e /data/go ]; do sleep 0.05; done");
  pod["spec"]["restartPolicy"] = "OnFailure";
  pod["spec"]["serviceAccountName"] = "runner";
  Object sources = Object::array(
      {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
       {{"configMap",
         {{"name", "kube-root-ca.crt"},
          {"items", Object::array({{{"key", "ca.crt"}, {"path", "ca.crt"}}})}}}},
       {{"downwardAPI",
         {{"items", Object::array({{{"path", "namespace"},
                                    {"fieldRef", {{"fieldPath", "metadata.namespace"}}}}})}}}}});
  pod["spec"]["volumes"].push_back({{"name", "api"}, {"projected", {{"sources", sources}}}});
  Object& c = pod["spec"]["containers"][0];
  c["volumeMounts"].push_back({{"name", "api"},
                               {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
                               {"readOnly", true}});
  c["readinessProbe"] = {{"tcpSocket", {{"host", "127.0.0.1"}, {"port", port}}},
                         {"periodSeconds", 1},
                         {"failureThreshold", 1}};
  Create(pod);
  auto container = [&] {
    Object p = Pod("deployed");
    return p.contains("status") ? p["status"].value("containerStatuses", Object::array())
                                : Object::array();
  };
  auto ready = [&] {
    Object cs = container();
    return !cs.empty() && cs[0].value("ready", false) && cs[0].value("restartCount", 0) == 1;
  };
  ASSERT_TRUE(Eventually(ready, std::chrono::seconds(60)))
      << Pod("deployed").dump(1) << agent_->Describe();
  Object cs = container()[0];
  EXPECT_EQ(cs["lastState"]["terminated"].value("exitCode", 0), 7) << cs.dump();
  EXPECT_TRUE(cs["state"].contains("running")) << cs.dump();

  const std::string data = agent_->PvcDir(ns_, "shared");
  EXPECT_EQ(ReadFile(data + "/namespace"), ns_);
  EXPECT_EQ(ReadFile(data + "/ca.crt"), "the-ca");
  std::string server = plane()->server();  // https://127.0.0.1:PORT
  std::string host_port = server.substr(server.find("://") + 3);
  host_port[host_port.rfind(':')] = ' ';
  EXPECT_EQ(ReadFile(data + "/api"), host_port + "\n");
  // The token is the service account's, bound to this pod.
  Object review = {{"apiVersion", "authentication.k8s.io/v1"},
                   {"kind", "TokenReview"},
                   {"spec", {{"token", ReadFile(data + "/token")}}}};
  auto reviewed =
      client_->Create({"authentication.k8s.io", "v1", "tokenreviews", false}, "", review);
  ASSERT_TRUE(reviewed.ok()) << reviewed.status();
  EXPECT_TRUE((*reviewed)["status"].value("authenticated", false)) << reviewed->dump();
  EXPECT_EQ((*reviewed)["status"]["user"].value("username", ""),
            "system:serviceaccount:" + ns_ + ":runner");
  Object extra = (*reviewed)["status"]["user"].value("extra", Object::object());
  EXPECT_EQ(extra.value("authentication.kubernetes.io/pod-name", Object::array()),
            Object::array({"deployed"}))
      << reviewed->dump();

  // The probe's target gone: not ready, still running.
  close(listener);
  EXPECT_TRUE(Eventually([&] {
    Object now = container();
    return !now.empty() && !now[0].value("ready", true);
  })) << Pod("deployed").dump(1);
  EXPECT_EQ(Phase(Pod("deployed")), "Running");
  // A success is not restarted under OnFailure.
  std::ofstream(data + "/go").close();
  WaitPhase("deployed", "Succeeded");
  EXPECT_EQ(Terminated("deployed")["exitCode"], 0);
}

TEST_F(NodeAgentTest, EnvironmentIsRewrittenForRendezvous) {
  // env > /data/<pod>.env: the script's own /data is rewritten too.
  auto gang_pod = [&](const std::string& name, const std::string& subdomain,
                      const std::string& master) {
    Object env = Object::array({{{"name", "MASTER_ADDR"}, {"value", master}},
                                {{"name", "MASTER_PORT"}, {"value", "29500"}},
                                {{"name", "DATA"}, {"value", "/data/sub"}},
                                {{"name", "ORRERY_METRICS_ADDRESS"}, {"value", ":9400"}},
                                FieldEnv("POD_NAME", "metadata.name"),
                                FieldEnv("POD_NAMESPACE", "metadata.namespace"),
                                FieldEnv("POD_UID", "metadata.uid"),
                                FieldEnv("POD_IP", "status.podIP"),
                                FieldEnv("NODE", "spec.nodeName")});
    Object pod =
        ShellPod(name, "env > /data/$POD_NAME.env; printf %s \"$1\" > /data/$POD_NAME.arg", env);
    pod["spec"]["containers"][0]["command"].push_back("sh");
    pod["spec"]["containers"][0]["command"].push_back("--out=/data/out");
    pod["spec"]["hostname"] = name;
    pod["spec"]["subdomain"] = subdomain;
    return pod;
  };
  // Rank 1 comes first: it waits for its master's address instead of failing.
  Create(gang_pod("w1", "gang", "w0.gang." + ns_ + ".svc.cluster.local"));
  Create(gang_pod("w0", "gang", "w0.gang." + ns_ + ".svc"));
  Create(gang_pod("v0", "other", "v0.other." + ns_ + ".svc"));
  for (const char* name : {"w0", "w1", "v0"}) WaitPhase(name, "Succeeded");
  std::string pvc = agent_->PvcDir(ns_, "shared");
  std::map<std::string, std::map<std::string, std::string>> env;
  for (const char* name : {"w0", "w1", "v0"}) {
    env[name] = ParseEnv(ReadFile(pvc + "/" + name + ".env"));
    Object pod = Pod(name);
    const auto& e = env[name];
    std::string ip = pod["status"].value("podIP", "");
    EXPECT_EQ(e.at("POD_IP"), ip) << name;
    EXPECT_EQ(e.at("ORRERY_BIND_HOST"), ip) << name;
    EXPECT_EQ(e.at("ORRERY_METRICS_ADDRESS"), ip + ":9400") << name;
    EXPECT_EQ(e.at("POD_NAME"), name);
    EXPECT_EQ(e.at("POD_NAMESPACE"), ns_);
    EXPECT_EQ(e.at("POD_UID"), pod["metadata"]["uid"]);
    EXPECT_EQ(e.at("NODE"), pod["spec"]["nodeName"]);
    EXPECT_EQ(e.at("DATA"), pvc + "/sub");
    EXPECT_EQ(ReadFile(pvc + "/" + name + ".arg"), "--out=" + pvc + "/out");
    EXPECT_NE(e.at("MASTER_PORT"), "29500") << name;
  }
  std::string w0_ip = Pod("w0")["status"].value("podIP", "");
  EXPECT_EQ(env["w1"].at("MASTER_ADDR"), w0_ip);
  EXPECT_EQ(env["w0"].at("MASTER_ADDR"), w0_ip);
  EXPECT_EQ(env["v0"].at("MASTER_ADDR"), Pod("v0")["status"].value("podIP", ""));
  EXPECT_NE(env["v0"].at("MASTER_ADDR"), w0_ip);
  EXPECT_EQ(env["w1"].at("MASTER_PORT"), env["w0"].at("MASTER_PORT"));
  EXPECT_NE(env["v0"].at("MASTER_PORT"), env["w0"].at("MASTER_PORT"));
}

TEST_F(NodeAgentTest, GracefulDeletionDeliversSigtermThenRemovesThePod) {
  Create(ShellPod("sleeper",
                  "trap 'echo bye > /data/term; exit 0' TERM; touch /data/trapped;"
                  " while :; do sleep 0.1; done"));
  WaitPhase("sleeper", "Running");
  std::string pvc = agent_->PvcDir(ns_, "shared");
  ASSERT_TRUE(Eventually([&] { return fs::exists(pvc + "/trapped"); })) << agent_->Describe();
  kube::DeleteOptions options;
  options.grace_period_seconds = 30;
  ASSERT_TRUE(client_->Delete(kube::Pods(), ns_, "sleeper", options).ok());
  ASSERT_TRUE(Eventually([&] {
    auto r = client_->Get(kube::Pods(), ns_, "sleeper");
    return !r.ok() && kube::IsNotFound(r.status());
  })) << Pod("sleeper").dump(1)
      << agent_->Describe();
  EXPECT_EQ(ReadFile(pvc + "/term"), "bye\n");
}

TEST_F(NodeAgentTest, ActiveDeadlineFailsThePod) {
  Object pod = ShellPod("slow", "sleep 600");
  pod["spec"]["activeDeadlineSeconds"] = 1;
  Create(pod);
  WaitPhase("slow", "Failed");
  Object status = Pod("slow")["status"];
  EXPECT_EQ(status.value("reason", ""), "DeadlineExceeded") << status.dump(1);
  EXPECT_EQ(status["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137);
}

TEST_F(NodeAgentTest, StopNodeKillsItsPodsAndMarksItUnknown) {
  // $$$$: Kubernetes reduces $$ to $ in commands, as the agent does.
  Object pod = ShellPod("victim", "echo $$$$ > /data/pid; while :; do sleep 0.1; done");
  pod["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", nodes_[1]}};
  Create(pod);
  WaitPhase("victim", "Running");
  EXPECT_EQ(Pod("victim")["spec"]["nodeName"], nodes_[1]);
  std::string pid_file = agent_->PvcDir(ns_, "shared") + "/pid";
  ASSERT_TRUE(Eventually([&] {  // the whole line: the shell may not have written it yet
    std::string text = ReadFile(pid_file);
    return !text.empty() && text.back() == '\n';
  }));
  pid_t pid = std::stoi(ReadFile(pid_file));
  ASSERT_EQ(kill(pid, 0), 0);

  ASSERT_TRUE(agent_->StopNode(nodes_[1]).ok());
  EXPECT_EQ(kill(pid, 0), -1);  // killed and reaped before StopNode returned
  EXPECT_EQ(errno, ESRCH);
  Object ready = ReadyCondition(nodes_[1]);
  EXPECT_EQ(ready["status"], "Unknown");
  EXPECT_EQ(ready["reason"], "NodeStatusUnknown");
  auto dead = client_->Get(kube::Nodes(), "", nodes_[1]);
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ((*dead)["spec"]["taints"][0]["key"], "node.kubernetes.io/unreachable");

  // A pod bound to the dead node afterwards is never started.
  Object late = ShellPod("late", "true");
  late["spec"]["nodeName"] = nodes_[1];
  Create(late);
  // The live node heartbeats twice: the agent's loop has passed over both pods
  // since, and a dead kubelet reports nothing.
  WaitHeartbeats(nodes_[0], 2);
  EXPECT_EQ(Phase(Pod("victim")), "Running");
  EXPECT_EQ(Phase(Pod("late")), "Pending");
  EXPECT_FALSE(Pod("late")["status"].contains("podIP"));
  EXPECT_EQ(ReadyCondition(nodes_[1])["status"], "Unknown");
}

TEST_F(NodeAgentTest, GangOfOrreryWorkersRendezvousesAndSucceeds) {
  if (Worker().empty()) GTEST_SKIP() << "orrery-worker is built only with ORRERY_WITH_TORCH";
  TinyGangTrains(*agent_);
}

// Container mode: a second agent, on nodes of its own, running pods as containers
// of the CPU worker image (scripts/images; ORRERY_WORKER_IMAGE names another).
// Null, with the test skipped, without podman or the image.
std::unique_ptr<NodeAgent> StartContainerAgent(const ControlPlane& plane, const std::string& ns,
                                               std::string* skip) {
  const char* env = std::getenv("ORRERY_WORKER_IMAGE");
  std::string image = env != nullptr ? env : "orrery/worker:latest";
  CommandResult exists = RunCommand("podman image exists '" + image + "' 2>&1");
  if (exists.exit_code != 0) {
    *skip = "needs podman and the image " + image +
            " (scripts/setup installs podman, scripts/images builds the image)";
    return nullptr;
  }
  NodeAgentOptions o;
  o.nodes = {ns + "-c", ns + "-d"};
  o.root = plane.dir() + "/" + ns + "-containers";
  o.heartbeat_period = std::chrono::seconds(1);
  o.first_ip_block = 2;
  o.container_runtime = "podman";
  o.images = {{api::kDefaultWorkerImage, image}, {"shell", image}};
  auto agent = NodeAgent::Start(kube::testutil::PlaneConfig(plane), o);
  if (!agent.ok()) {
    *skip = "";
    ADD_FAILURE() << agent.status();
    return nullptr;
  }
  return std::move(*agent);
}

// A kubelet's container: the pod's user (not root), a read-only root filesystem,
// the claim writable through the fsGroup, the exit code and the termination
// message reported.
TEST_F(NodeAgentTest, ContainerRunsAsThePodsUserOnAReadOnlyRoot) {
  std::string skip;
  std::unique_ptr<NodeAgent> agent = StartContainerAgent(*plane(), ns_, &skip);
  if (agent == nullptr) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    return;
  }
  serving_ = agent.get();
  ASSERT_TRUE(agent->CreateBoundClaim(ns_, "shared").ok());
  Object pod = ShellPod("confined",
                        "id -u > /data/uid; if touch /probe 2>/dev/null; then exit 4; fi;"
                        " printf 'read-only root' > /dev/termination-log; exit 3");
  pod["spec"]["securityContext"] = {
      {"runAsUser", 65532}, {"runAsGroup", 65532}, {"fsGroup", 65532}};
  pod["spec"]["containers"][0]["securityContext"] = {
      {"readOnlyRootFilesystem", true},
      {"allowPrivilegeEscalation", false},
      {"capabilities", {{"drop", Object::array({"ALL"})}}}};
  pod["spec"]["nodeName"] = agent->nodes()[0];  // bound, as the scheduler would
  Create(pod);
  WaitPhase("confined", "Failed");
  Object t = Terminated("confined");
  EXPECT_EQ(t["exitCode"], 3) << t.dump();
  EXPECT_EQ(t["reason"], "Error");
  EXPECT_EQ(t["message"], "read-only root");
  EXPECT_EQ(ReadFile(agent->PvcDir(ns_, "shared") + "/uid"), "65532\n");
  serving_ = nullptr;
  EXPECT_TRUE(agent->Stop().ok());
}

// The gang above as containers of the worker image, run as their pod specs say
// (uid 65532, read-only root, no capabilities, the claim and emptyDirs as bind
// mounts), on the second agent's two nodes.
TEST_F(NodeAgentTest, GangOfOrreryWorkerContainersRendezvousesAndSucceeds) {
  std::string skip;
  std::unique_ptr<NodeAgent> agent = StartContainerAgent(*plane(), ns_, &skip);
  if (agent == nullptr) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    return;
  }
  TinyGangTrains(*agent);
  // The checkpoints were written by the pods' user, through the fsGroup.
  std::string ckpt = agent->PvcDir(ns_, "ckpt") + "/tiny-6f1d2c3a-0000-4000-8000-00000000a9e7";
  struct stat st {};
  ASSERT_EQ(stat(ckpt.c_str(), &st), 0) << ckpt;
  EXPECT_EQ(st.st_uid, 65532u);
  serving_ = nullptr;
  EXPECT_TRUE(agent->Stop().ok());
}

}  // namespace
}  // namespace orrery::testing
