#include "tests/testing/node_agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/time_text.h"
#include "operator/kube/api_error.h"
#include "operator/kube/rest_client.h"
#include "operator/local/process.h"

namespace orrery::testing {

namespace fs = std::filesystem;
using kube::Object;

struct NodeAgent::PodRun {
  std::string ns, name, uid, node, ip;
  std::string dir;        // ROOT/pods/<uid>
  std::string term_file;  // the local termination message file
  std::string first_seen_text;
  TimePoint first_seen{};
  std::optional<local::Process> process;
  std::string container;  // container mode: the container's name
  std::string started_at, finished_at;
  std::optional<int> exit_status;  // code, or 128 + signal
  std::string start_error;         // the container could not start
  uintmax_t log_offset = 0;        // where this run's output begins in the log
  bool deadline_exceeded = false;
  bool reported_pending = false, reported_running = false, reported_final = false;
  bool terminating = false;  // SIGTERM sent for a deletion
  TimePoint kill_at{};
  bool frozen = false;   // its node died: nothing is reported any more
  bool deleted = false;  // the agent deleted the object (grace 0)
  // Restarts (restartPolicy Always or OnFailure), as the kubelet's.
  int restarts = 0;
  bool restart_pending = false;
  TimePoint restart_at{};
  Object last_state = Object::object();  // the last container's "terminated"
  // Probes of the running container.
  struct Probe {
    TimePoint next{};
    int successes = 0, failures = 0;
  };
  Probe readiness, liveness;
  TimePoint started_steady{};  // when the running container started
  bool ready = false;
  std::optional<bool> reported_ready;  // as last reported while Running
};

namespace {

std::string Now() { return Rfc3339Utc(std::time(nullptr)); }

TimePoint Steady() {
  return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
}

std::string Str(const Object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

// The first `max` bytes of a file ("" when it cannot be read).
std::string ReadHead(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  std::string s(max, '\0');
  f.read(s.data(), static_cast<std::streamsize>(max));
  s.resize(static_cast<size_t>(std::max<std::streamsize>(f.gcount(), 0)));
  return s;
}

// The bytes of a file from max(`from`, size - max) to its end.
std::string ReadTail(const std::string& path, uintmax_t from, size_t max) {
  std::error_code ec;
  uintmax_t size = fs::file_size(path, ec);
  if (ec || size <= from) return "";
  uintmax_t start = std::max<uintmax_t>(from, size > max ? size - max : 0);
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(start));
  std::string s(static_cast<size_t>(size - start), '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(std::max<std::streamsize>(f.gcount(), 0)));
  return s;
}

// A TCP port free on every interface now (c10d's store binds them all).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool PathChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '/';
}

// Replaces each container path (longest first) where it stands as a whole path or
// a path prefix: at the start of a word ("/ckpt/x", "--dir=/ckpt", "cd /ckpt") and
// followed by '/' or a non-path character, so "/tmpfoo" and "/var/tmp" stay.
std::string RewritePaths(const std::string& s,
                         const std::vector<std::pair<std::string, std::string>>& mappings) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    bool replaced = false;
    if (s[i] == '/' && (i == 0 || !PathChar(s[i - 1]))) {
      for (const auto& [from, to] : mappings) {
        size_t end = i + from.size();
        if (s.compare(i, from.size(), from) != 0) continue;
        if (end < s.size() && s[end] != '/' && PathChar(s[end])) continue;
        out += to;
        i = end;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += s[i++];
  }
  return out;
}

// Kubernetes' $(VAR) expansion in env values, command and args: defined names are
// replaced, $$ escapes, anything else stays as written.
std::string ExpandVars(const std::string& s, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '(') {
      size_t close = s.find(')', i + 2);
      if (close != std::string::npos) {
        auto it = env.find(s.substr(i + 2, close - i - 2));
        if (it != env.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string p;
  while (std::getline(ss, p, sep)) parts.push_back(p);
  return parts;
}

void SignalGroup(const local::Process& p, int sig) {
  if (p.pid() <= 0) return;
  kill(-p.pid(), sig);  // the child leads its own process group
  p.Signal(sig);
}

// Kills and removes a container by name: a container outlives its killed client.
void RemoveContainer(const std::string& runtime, const std::string& name) {
  std::string quiet = " >/dev/null 2>&1";
  std::string command =
      runtime + " kill " + name + quiet + "; " + runtime + " rm -f " + name + quiet;
  int ignored = std::system(command.c_str());
  (void)ignored;
}

// The port a probe names: a number, or the name of one of the container's ports.
int ProbePort(const Object& container, const Object& port) {
  if (port.is_number_integer()) return port.get<int>();
  if (!port.is_string()) return 0;
  for (const Object& p : container.value("ports", Object::array())) {
    if (p.value("name", "") == port.get<std::string>()) return p.value("containerPort", 0);
  }
  return 0;
}

// A probe the agent can run (httpGet over HTTP, tcpSocket, a port it can resolve),
// else why not, naming the field.
Status CheckProbe(const Object& container, const char* kind) {
  if (!container.contains(kind)) return OkStatus();
  const Object& probe = container[kind];
  std::string where = std::string("containers[0].") + kind;
  const char* handler = probe.contains("httpGet")     ? "httpGet"
                        : probe.contains("tcpSocket") ? "tcpSocket"
                                                      : nullptr;
  if (handler == nullptr) {
    return InvalidArgumentError(where +
                                ": the test node agent runs httpGet and tcpSocket probes only");
  }
  if (probe[handler].value("scheme", "HTTP") != "HTTP") {
    return InvalidArgumentError(where + ".httpGet.scheme: only HTTP is run by the test node agent");
  }
  if (ProbePort(container, probe[handler].value("port", Object())) <= 0) {
    return InvalidArgumentError(where + "." + handler + ".port " +
                                probe[handler].value("port", Object()).dump() +
                                ": neither a number nor a named port of the container");
  }
  return OkStatus();
}

// One run of a probe (CheckProbe passed) against `ip`: a connection for
// tcpSocket; for httpGet a GET whose status is in [200, 400), as the kubelet's.
bool ProbeOnce(const Object& container, const Object& probe, const std::string& ip) {
  const bool http = probe.contains("httpGet");
  const Object& h = http ? probe["httpGet"] : probe["tcpSocket"];
  std::string host = h.value("host", ip);
  int port = ProbePort(container, h.value("port", Object()));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval tv{probe.value("timeoutSeconds", 1), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1 &&
            connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (ok && http) {
    std::string request = "GET " + h.value("path", std::string("/")) +
                          " HTTP/1.0\r\nHost: " + host + "\r\nUser-Agent: kube-probe\r\n\r\n";
    ok = send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(request.size());
    char buf[32] = {};
    ssize_t n = ok ? recv(fd, buf, sizeof(buf) - 1, 0) : 0;
    // "HTTP/1.1 200 OK": the code at [9, 12).
    int code = n >= 12 ? std::atoi(std::string(buf + 9, 3).c_str()) : 0;
    ok = code >= 200 && code < 400;
  }
  close(fd);
  return ok;
}

// Writes `text` to `dir`/`rel` with `mode`; `rel` stays inside `dir`.
Status WriteVolumeFile(const std::string& dir, const std::string& rel, const std::string& text,
                       int mode) {
  if (rel.empty() || rel[0] == '/' || rel.find("..") != std::string::npos) {
    return InvalidArgumentError("volume file path '" + rel + "' must be relative, without '..'");
  }
  fs::path path = fs::path(dir) / rel;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << text;
  out.close();
  if (!out || chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return UnavailableError("cannot write " + path.string());
  }
  return OkStatus();
}

Object Condition(const std::string& type, const std::string& status, const std::string& since,
                 const std::string& reason = "") {
  Object c = {{"type", type}, {"status", status}, {"lastTransitionTime", since}};
  if (!reason.empty()) c["reason"] = reason;
  return c;
}

}  // namespace

NodeAgent::NodeAgent(std::unique_ptr<kube::Client> client, NodeAgentOptions options)
    : client_(std::move(client)), options_(std::move(options)) {}

StatusOr<std::unique_ptr<NodeAgent>> NodeAgent::Start(const kube::ClientConfig& config,
                                                      NodeAgentOptions options) {
  if (options.nodes.empty()) return InvalidArgumentError("node agent: no nodes");
  if (options.root.empty()) return InvalidArgumentError("node agent: no root folder");
  std::error_code ec;
  fs::create_directories(options.root + "/pods", ec);
  fs::create_directories(options.root + "/pvc", ec);
  if (ec)
    return UnavailableError("node agent: cannot create " + options.root + ": " + ec.message());
  auto client = kube::RestClient::Create(config);
  if (!client.ok()) return client.status();
  std::unique_ptr<NodeAgent> agent(new NodeAgent(std::move(*client), std::move(options)));
  agent->registered_at_ = Now();
  // "https://HOST:PORT" (HOST maybe "[v6]"), what a pod's in-cluster config dials.
  std::string server = config.server.substr(config.server.find("://") + 3);
  server = server.substr(0, server.find('/'));
  size_t colon = server.rfind(':');
  if (colon != std::string::npos && server.back() != ']') {
    agent->api_host_ = server.substr(0, colon);
    agent->api_port_ = server.substr(colon + 1);
  } else {
    agent->api_host_ = server;
    agent->api_port_ = "443";
  }
  if (agent->api_host_.size() > 1 && agent->api_host_[0] == '[') {
    agent->api_host_ = agent->api_host_.substr(1, agent->api_host_.size() - 2);
  }
  for (const std::string& node : agent->options_.nodes) {
    ORRERY_RETURN_IF_ERROR(agent->RegisterNode(node));
  }
  agent->informer_ = std::make_unique<kube::Informer>(agent->client_.get(), kube::Pods());
  NodeAgent* self = agent.get();
  auto wake = [self] {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->dirty_ = true;
    self->cv_.notify_all();
  };
  agent->informer_->AddEventHandler(
      {[wake](const kube::ObjectPtr&) { wake(); },
       [wake](const kube::ObjectPtr&, const kube::ObjectPtr&) { wake(); },
       [wake](const kube::ObjectPtr&, bool) { wake(); }});
  agent->informer_->Start();
  if (!agent->informer_->WaitForSync(std::chrono::seconds(60))) {
    return DeadlineExceededError("node agent: the pod informer did not sync");
  }
  agent->thread_ = std::thread([self] { self->Run(); });
  return agent;
}

NodeAgent::~NodeAgent() { (void)Stop(); }

Status NodeAgent::RegisterNode(const std::string& node) {
  Object labels = {{"kubernetes.io/hostname", node},
                   {"kubernetes.io/os", "linux"},
                   {"kubernetes.io/arch", "amd64"}};
  for (const auto& [k, v] : options_.labels) labels[k] = v;
  if (auto own = options_.labels_by_node.find(node); own != options_.labels_by_node.end()) {
    for (const auto& [k, v] : own->second) labels[k] = v;
  }
  Object taints = nullptr;  // null: none (a merge patch removes them)
  if (auto own = options_.taints_by_node.find(node); own != options_.taints_by_node.end()) {
    taints = Object::array();
    for (const NodeTaint& t : own->second) {
      Object taint = {{"key", t.key}, {"effect", t.effect}};
      if (!t.value.empty()) taint["value"] = t.value;
      taints.push_back(taint);
    }
  }
  Object obj = {{"apiVersion", "v1"},
                {"kind", "Node"},
                {"metadata", {{"name", node}, {"labels", labels}}},
                {"spec", Object::object()}};
  auto created = client_->Create(kube::Nodes(), "", obj);
  if (!created.ok() && kube::IsAlreadyExists(created.status())) {
    // Left by an earlier run: take it over, with only the configured taints.
    Object patch = {{"metadata", {{"labels", labels}}},
                    {"spec", {{"taints", taints}, {"unschedulable", nullptr}}}};
    auto patched = client_->Patch(kube::Nodes(), "", node, kube::PatchType::kMerge, patch);
    if (!patched.ok()) return patched.status();
  } else if (!created.ok()) {
    return created.status();
  }
  ORRERY_RETURN_IF_ERROR(PatchNodeStatus(node, "True", "KubeletReady",
                                         "orrery test node agent is posting ready status"));
  // The API server taints every new node not-ready; the node lifecycle controller
  // (absent from the test plane) lifts the taint once the node reports Ready.
  // The configured taints replace it.
  auto untainted = client_->Patch(kube::Nodes(), "", node, kube::PatchType::kMerge,
                                  {{"spec", {{"taints", taints}}}});
  if (!untainted.ok()) return untainted.status();
  Log(LogLevel::kInfo, "Registered Node", {{"node", node}});
  return OkStatus();
}

Status NodeAgent::PatchNodeStatus(const std::string& node, const std::string& ready,
                                  const std::string& reason, const std::string& message) {
  std::string now = Now();
  Object resources = {{"cpu", options_.cpu}, {"memory", options_.memory}, {"pods", "110"}};
  auto own = options_.gpus_by_node.find(node);
  int gpus = own != options_.gpus_by_node.end() ? own->second : options_.gpus_per_node;
  if (gpus > 0) {
    resources[options_.gpu_resource] = std::to_string(gpus);
  }
  Object conditions = Object::array();
  for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure"}) {
    Object c = Condition(type, "False", registered_at_,
                         std::string("KubeletHas") + (type[0] == 'M'   ? "SufficientMemory"
                                                      : type[0] == 'D' ? "NoDiskPressure"
                                                                       : "SufficientPID"));
    c["lastHeartbeatTime"] = now;
    conditions.push_back(c);
  }
  Object r = Condition("Ready", ready, ready == "True" ? registered_at_ : now, reason);
  r["message"] = message;
  r["lastHeartbeatTime"] = now;
  conditions.push_back(r);
  Object status = {{"capacity", resources},
                   {"allocatable", resources},
                   {"conditions", conditions},
                   {"addresses", Object::array({{{"type", "InternalIP"}, {"address", "127.0.0.1"}},
                                                {{"type", "Hostname"}, {"address", node}}})},
                   {"nodeInfo", {{"operatingSystem", "linux"}, {"architecture", "amd64"}}}};
  kube::PatchOptions po;
  po.subresource = "status";
  auto r2 =
      client_->Patch(kube::Nodes(), "", node, kube::PatchType::kMerge, {{"status", status}}, po);
  return r2.ok() ? OkStatus() : r2.status();
}

Status NodeAgent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return OkStatus();
    stopped_ = stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (informer_) informer_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [uid, run] : runs_) {
      if (run->process && !run->exit_status) KillLocked(*run);
    }
    runs_.clear();
  }
  Status first;
  for (const std::string& node : options_.nodes) {
    Status s = client_->Delete(kube::Nodes(), "", node);
    if (!s.ok() && !kube::IsNotFound(s) && first.ok()) first = s;
  }
  std::set<std::string> volumes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    volumes = volumes_;
  }
  for (const std::string& pv : volumes) {
    Status s = client_->Delete({"", "v1", "persistentvolumes", false}, "", pv);
    if (!s.ok() && !kube::IsNotFound(s) && first.ok()) first = s;
  }
  return first;
}

Status NodeAgent::CreateBoundClaim(const std::string& ns, const std::string& claim) {
  kube::Resource pvs{"", "v1", "persistentvolumes", false};
  kube::Resource pvcs{"", "v1", "persistentvolumeclaims", true};
  std::string dir = PvcDir(ns, claim);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError("cannot create " + dir + ": " + ec.message());
  std::string pv = "agent-" + ns + "-" + claim;
  Object storage = {{"storage", "1Gi"}};
  // The claim first: the volume's claimRef carries its uid, as the volume
  // controller's binding does, so a controller-manager's volume controller
  // (when the plane runs one) keeps the pair bound instead of releasing it.
  Object pvc = {{"apiVersion", "v1"},
                {"kind", "PersistentVolumeClaim"},
                {"metadata",
                 {{"name", claim},
                  {"namespace", ns},
                  {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}}}},
                {"spec",
                 {{"accessModes", Object::array({"ReadWriteMany"})},
                  {"storageClassName", ""},
                  {"volumeName", pv},
                  {"resources", {{"requests", storage}}}}}};
  auto created = client_->Create(pvcs, ns, pvc);
  if (!created.ok() && kube::IsAlreadyExists(created.status())) {
    created = client_->Get(pvcs, ns, claim);
  }
  if (!created.ok()) return created.status();
  const std::string claim_uid = (*created)["metadata"].value("uid", "");
  Object volume = {{"apiVersion", "v1"},
                   {"kind", "PersistentVolume"},
                   {"metadata", {{"name", pv}}},
                   {"spec",
                    {{"capacity", storage},
                     {"accessModes", Object::array({"ReadWriteMany"})},
                     {"persistentVolumeReclaimPolicy", "Retain"},
                     {"storageClassName", ""},
                     {"hostPath", {{"path", dir}}},
                     {"claimRef",
                      {{"apiVersion", "v1"},
                       {"kind", "PersistentVolumeClaim"},
                       {"namespace", ns},
                       {"name", claim},
                       {"uid", claim_uid}}}}}};
  created = client_->Create(pvs, "", volume);
  if (!created.ok() && !kube::IsAlreadyExists(created.status())) return created.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    volumes_.insert(pv);
  }
  kube::PatchOptions po;
  po.subresource = "status";
  Object bound = {{"status", {{"phase", "Bound"}}}};
  auto r = client_->Patch(pvs, "", pv, kube::PatchType::kMerge, bound, po);
  if (!r.ok()) return r.status();
  bound["status"]["accessModes"] = Object::array({"ReadWriteMany"});
  bound["status"]["capacity"] = storage;
  r = client_->Patch(pvcs, ns, claim, kube::PatchType::kMerge, bound, po);
  return r.ok() ? OkStatus() : r.status();
}

Status NodeAgent::StopNode(const std::string& node) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ServesLocked(node)) return NotFoundError("node agent does not serve node " + node);
    dead_nodes_.insert(node);
    for (auto& [uid, run] : runs_) {
      if (run->node != node) continue;
      run->frozen = true;
      if (run->process && !run->exit_status) KillLocked(*run);
    }
  }
  Log(LogLevel::kInfo, "Stopped Node", {{"node", node}});
  ORRERY_RETURN_IF_ERROR(PatchNodeStatus(node, "Unknown", "NodeStatusUnknown",
                                         "Kubelet stopped posting node status."));
  // The taints the node lifecycle controller would add (it evicts nothing here).
  Object unreachable = Object::array(
      {{{"key", "node.kubernetes.io/unreachable"}, {"effect", "NoSchedule"}},
       {{"key", "node.kubernetes.io/unreachable"}, {"effect", "NoExecute"}, {"timeAdded", Now()}}});
  auto tainted = client_->Patch(kube::Nodes(), "", node, kube::PatchType::kMerge,
                                {{"spec", {{"taints", unreachable}}}});
  return tainted.ok() ? OkStatus() : tainted.status();
}

Status NodeAgent::DeleteNode(const std::string& node) {
  ORRERY_RETURN_IF_ERROR(StopNode(node));
  Status s = client_->Delete(kube::Nodes(), "", node);
  return s.ok() || kube::IsNotFound(s) ? OkStatus() : s;
}

Status NodeAgent::SignalContainer(const std::string& ns, const std::string& name, int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uid, run] : runs_) {
    if (run->ns != ns || run->name != name || !run->process || run->exit_status) continue;
    if (run->container.empty()) {
      SignalGroup(*run->process, sig);
      return OkStatus();
    }
    std::string command = options_.container_runtime + " kill --signal " + std::to_string(sig) +
                          " " + run->container + " >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) {
      return UnavailableError("'" + command + "' failed");
    }
    return OkStatus();
  }
  return NotFoundError("no running container of pod " + ns + "/" + name);
}

std::string NodeAgent::LogPath(const std::string& ns, const std::string& name) const {
  return options_.root + "/pods/" + ns + "_" + name + ".log";
}

std::string NodeAgent::LogTail(const std::string& ns, const std::string& name,
                               size_t max_bytes) const {
  return ReadTail(LogPath(ns, name), 0, max_bytes);
}

std::string NodeAgent::PvcDir(const std::string& ns, const std::string& claim) const {
  return options_.root + "/pvc/" + ns + "/" + claim;
}

std::string NodeAgent::PodIp(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [uid, run] : runs_) {
    if (run->ns == ns && run->name == name) return run->ip;
  }
  return "";
}

std::string NodeAgent::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream out;
  for (const auto& [uid, run] : runs_) {
    out << run->ns << "/" << run->name << " uid=" << uid << " node=" << run->node
        << " ip=" << run->ip << " pid=" << (run->process ? run->process->pid() : -1)
        << " exit=" << (run->exit_status ? std::to_string(*run->exit_status) : "-")
        << " restarts=" << run->restarts << (run->ready ? " ready" : "")
        << (run->frozen ? " frozen" : "") << (run->terminating ? " terminating" : "")
        << (run->start_error.empty() ? "" : " start_error=" + run->start_error) << "\n";
    if (run->exit_status.value_or(0) != 0 || !run->start_error.empty()) {
      out << "--- log tail of " << run->name << ":\n" << LogTail(run->ns, run->name, 2048) << "\n";
    }
  }
  return out.str();
}

bool NodeAgent::ServesLocked(const std::string& node) const {
  return std::find(options_.nodes.begin(), options_.nodes.end(), node) != options_.nodes.end();
}

std::string NodeAgent::AllocateIpLocked() {
  int n = next_ip_++;
  return "127.0." + std::to_string(options_.first_ip_block + n / 254) + "." +
         std::to_string(1 + n % 254);
}

int NodeAgent::GangPortLocked(const std::string& key) {
  auto it = gang_ports_.find(key);
  if (it != gang_ports_.end()) return it->second;
  int port = 0;
  for (int attempt = 0; attempt < 100 && port == 0; ++attempt) {
    int p = FreePort();
    bool used = false;
    for (const auto& [k, v] : gang_ports_) used = used || v == p;
    if (p > 0 && !used) port = p;
  }
  gang_ports_[key] = port;
  return port;
}

void NodeAgent::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait_for(lock, options_.poll_period, [this] { return stop_ || dirty_; });
    if (stop_) return;
    dirty_ = false;
    SyncOnceLocked();
    if (Steady() >= next_heartbeat_) {
      next_heartbeat_ = Steady() + options_.heartbeat_period;
      for (const std::string& node : options_.nodes) {
        if (dead_nodes_.count(node) > 0) continue;
        Status s = PatchNodeStatus(node, "True", "KubeletReady",
                                   "orrery test node agent is posting ready status");
        if (!s.ok())
          Log(LogLevel::kWarning, "Heartbeat failed", {{"node", node}, {"error", s.ToString()}});
      }
    }
  }
}

void NodeAgent::SyncOnceLocked() {
  // First every pod bound here gets its run (and IP), so that a rank can find its
  // master's address in the same pass, whatever the order.
  std::vector<std::pair<kube::ObjectPtr, PodRun*>> work;
  std::set<std::string> seen;
  for (const kube::ObjectPtr& pod : informer_->store().List()) {
    const Object& meta = (*pod)["metadata"];
    std::string node = (*pod)["spec"].value("nodeName", "");
    if (!ServesLocked(node)) continue;
    std::string uid = Str(meta, "uid");
    seen.insert(uid);
    auto it = runs_.find(uid);
    if (it == runs_.end()) {
      if (dead_nodes_.count(node) > 0) continue;
      auto run = std::make_unique<PodRun>();
      run->ns = Str(meta, "namespace");
      run->name = Str(meta, "name");
      run->uid = uid;
      run->node = node;
      run->ip = AllocateIpLocked();
      run->dir = options_.root + "/pods/" + uid;
      run->first_seen = Steady();
      run->first_seen_text = Now();
      it = runs_.emplace(uid, std::move(run)).first;
    }
    work.emplace_back(pod, it->second.get());
  }
  for (auto& [pod, run] : work) {
    if (!run->frozen) SyncPodLocked(*pod, *run);
  }
  // Pods gone from the API (force-deleted, or deleted by us): nothing may run on.
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (seen.count(it->first) > 0) {
      ++it;
      continue;
    }
    PodRun& run = *it->second;
    if (run.process && !run.exit_status) KillLocked(run);
    it = runs_.erase(it);
  }
}

void NodeAgent::ReapLocked(PodRun& run) {
  if (!run.process || run.exit_status) return;
  std::optional<int> code = run.process->Poll();
  if (!code) return;
  run.exit_status = code;
  run.finished_at = Now();
  SignalGroup(*run.process, SIGKILL);  // what the main process left behind goes with it
}

void NodeAgent::KillLocked(PodRun& run) {
  if (!run.process) return;
  SignalGroup(*run.process, SIGKILL);
  if (!run.exit_status) run.exit_status = run.process->WaitOrKill(5);
  if (!run.container.empty()) RemoveContainer(options_.container_runtime, run.container);
}

void NodeAgent::SyncPodLocked(const Object& pod, PodRun& run) {
  const Object& spec = pod["spec"];
  ReapLocked(run);
  bool running = run.process && !run.exit_status;
  if (pod["metadata"].contains("deletionTimestamp")) {
    if (running) {
      if (!run.terminating) {
        int64_t grace = pod["metadata"].value(
            "deletionGracePeriodSeconds", spec.value("terminationGracePeriodSeconds", int64_t{30}));
        run.terminating = true;
        run.kill_at = Steady() + std::chrono::seconds(grace);
        SignalGroup(*run.process, SIGTERM);
        Log(LogLevel::kInfo, "Killing container",
            {{"pod", run.ns + "/" + run.name}, {"grace", std::to_string(grace) + "s"}});
      } else if (Steady() >= run.kill_at) {
        SignalGroup(*run.process, SIGKILL);
        if (!run.container.empty()) RemoveContainer(options_.container_runtime, run.container);
      }
      return;
    }
    if (run.deleted) return;
    if (run.exit_status && !run.reported_final) FinishLocked(run, &pod);
    kube::DeleteOptions options;
    options.grace_period_seconds = 0;
    options.precondition_uid = run.uid;
    Status s = client_->Delete(kube::Pods(), run.ns, run.name, options);
    if (s.ok() || kube::IsNotFound(s) || kube::IsConflict(s)) run.deleted = true;
    return;
  }
  if (run.reported_final) return;
  std::optional<int64_t> deadline;
  if (spec.contains("activeDeadlineSeconds") && spec["activeDeadlineSeconds"].is_number()) {
    deadline = spec["activeDeadlineSeconds"].get<int64_t>();
  }
  bool past_deadline = deadline && Steady() - run.first_seen >= std::chrono::seconds(*deadline);
  if (!run.process && run.start_error.empty()) {
    if (past_deadline) {
      run.deadline_exceeded = true;
      FinishLocked(run, &pod);
      return;
    }
    Status started = StartPodLocked(pod, run);
    if (!started.ok() && started.code() != StatusCode::kUnavailable) {
      run.start_error = started.message();
      run.finished_at = Now();
      Log(LogLevel::kWarning, "Failed to start container",
          {{"pod", run.ns + "/" + run.name}, {"error", started.ToString()}});
    } else if (!started.ok()) {
      if (!run.reported_pending) {
        Object waiting = {
            {"name", pod["spec"]["containers"][0].value("name", "")},
            {"image", pod["spec"]["containers"][0].value("image", "")},
            {"imageID", ""},
            {"ready", false},
            {"started", false},
            {"restartCount", 0},
            {"state",
             {{"waiting", {{"reason", "ContainerCreating"}, {"message", started.message()}}}}}};
        Object status = {{"phase", "Pending"},
                         {"hostIP", "127.0.0.1"},
                         {"hostIPs", Object::array({{{"ip", "127.0.0.1"}}})},
                         {"podIP", run.ip},
                         {"podIPs", Object::array({{{"ip", run.ip}}})},
                         {"startTime", run.first_seen_text},
                         {"containerStatuses", Object::array({waiting})}};
        run.reported_pending = ReportLocked(run, status).ok();
      }
      return;
    }
    running = run.process.has_value() && !run.exit_status;
  }
  if (running && past_deadline) {
    KillLocked(run);
    run.finished_at = Now();
    run.deadline_exceeded = true;
    Log(LogLevel::kInfo, "Killed container past its deadline", {{"pod", run.ns + "/" + run.name}});
  }
  if (run.exit_status && run.start_error.empty() && !run.deadline_exceeded &&
      RestartLocked(pod, run)) {
    return;
  }
  if (run.process && !run.exit_status) ProbeLocked(spec["containers"][0], run);
  if (run.process && (!run.reported_running || run.reported_ready != run.ready)) {
    ReportRunningLocked(pod, run);
  }
  if (run.exit_status || !run.start_error.empty()) FinishLocked(run, &pod);
}

void NodeAgent::ReportRunningLocked(const Object& pod, PodRun& run) {
  const Object& c = pod["spec"]["containers"][0];
  std::string since = run.started_at;
  Object cs = {{"name", c.value("name", "")},
               {"image", c.value("image", "")},
               {"imageID", ""},
               {"containerID", "orrery-agent://" + std::to_string(run.process->pid())},
               {"ready", run.ready},
               {"started", true},
               {"restartCount", run.restarts},
               {"state", {{"running", {{"startedAt", since}}}}}};
  if (!run.last_state.empty()) cs["lastState"] = run.last_state;
  std::string ready = run.ready ? "True" : "False";
  std::string reason = run.ready ? "" : "ContainersNotReady";
  Object status = {
      {"phase", "Running"},
      {"hostIP", "127.0.0.1"},
      {"hostIPs", Object::array({{{"ip", "127.0.0.1"}}})},
      {"podIP", run.ip},
      {"podIPs", Object::array({{{"ip", run.ip}}})},
      {"startTime", run.first_seen_text},
      {"conditions", Object::array({Condition("PodScheduled", "True", run.first_seen_text),
                                    Condition("Initialized", "True", run.first_seen_text),
                                    Condition("ContainersReady", ready, Now(), reason),
                                    Condition("Ready", ready, Now(), reason)})},
      {"containerStatuses", Object::array({cs})}};
  if (ReportLocked(run, status).ok()) {
    run.reported_running = true;
    run.reported_ready = run.ready;
  }
}

// The container's probes, each when due: readiness sets `ready` (after
// successThreshold successes, or failureThreshold failures); failureThreshold
// liveness failures kill the container, which the restart policy then restarts.
// A probe runs on the agent's thread (at most its timeoutSeconds).
void NodeAgent::ProbeLocked(const Object& container, PodRun& run) {
  if (!container.contains("readinessProbe")) run.ready = true;
  for (const char* kind : {"readinessProbe", "livenessProbe"}) {
    if (!container.contains(kind)) continue;
    const Object& probe = container[kind];
    const bool readiness = kind[0] == 'r';
    PodRun::Probe& state = readiness ? run.readiness : run.liveness;
    TimePoint now = Steady();
    if (state.next == TimePoint{}) {
      state.next = run.started_steady + std::chrono::seconds(probe.value("initialDelaySeconds", 0));
    }
    if (now < state.next) continue;
    state.next = now + std::chrono::seconds(probe.value("periodSeconds", 10));
    bool ok = ProbeOnce(container, probe, run.ip);
    state.successes = ok ? state.successes + 1 : 0;
    state.failures = ok ? 0 : state.failures + 1;
    if (readiness) {
      if (ok && state.successes >= probe.value("successThreshold", 1)) run.ready = true;
      if (!ok && state.failures >= probe.value("failureThreshold", 3)) run.ready = false;
    } else if (!ok && state.failures >= probe.value("failureThreshold", 3)) {
      Log(LogLevel::kInfo, "Liveness probe failed: killing the container",
          {{"pod", run.ns + "/" + run.name}});
      KillLocked(run);
      run.finished_at = Now();
      return;
    }
  }
}

// restartPolicy Always, or OnFailure after a failure: the container starts again
// in the same pod (its IP, volumes and log), at once the first time, then after
// the kubelet's back-off (10 s, doubling, at most 5 min). Returns whether it
// restarts (then the run is reset once it is due, and the next pass starts it).
bool NodeAgent::RestartLocked(const Object& pod, PodRun& run) {
  std::string policy = pod["spec"].value("restartPolicy", "Always");
  if (policy == "Never" || (policy == "OnFailure" && *run.exit_status == 0)) return false;
  if (!run.restart_pending) {
    run.restart_pending = true;
    int code = *run.exit_status;
    run.last_state = {{"terminated",
                       {{"exitCode", code},
                        {"reason", code == 0 ? "Completed" : "Error"},
                        {"startedAt", run.started_at},
                        {"finishedAt", run.finished_at.empty() ? Now() : run.finished_at},
                        {"containerID", "orrery-agent://" + std::to_string(run.process->pid())}}}};
    int backoff = run.restarts == 0 ? 0 : std::min(300, 10 << std::min(run.restarts - 1, 5));
    run.restart_at = Steady() + std::chrono::seconds(backoff);
    if (backoff > 0) {  // what the kubelet reports while it waits
      const Object& c = pod["spec"]["containers"][0];
      Object waiting = {
          {"reason", "CrashLoopBackOff"},
          {"message", "back-off " + std::to_string(backoff) + "s restarting failed container"}};
      Object cs = {{"name", c.value("name", "")},
                   {"image", c.value("image", "")},
                   {"imageID", ""},
                   {"ready", false},
                   {"started", false},
                   {"restartCount", run.restarts},
                   {"state", {{"waiting", waiting}}},
                   {"lastState", run.last_state}};
      Object status = {
          {"phase", "Running"},
          {"podIP", run.ip},
          {"conditions",
           Object::array({Condition("PodScheduled", "True", run.first_seen_text),
                          Condition("Initialized", "True", run.first_seen_text),
                          Condition("ContainersReady", "False", Now(), "ContainersNotReady"),
                          Condition("Ready", "False", Now(), "ContainersNotReady")})},
          {"containerStatuses", Object::array({cs})}};
      (void)ReportLocked(run, status);
    }
    Log(LogLevel::kInfo, "Restarting container",
        {{"pod", run.ns + "/" + run.name},
         {"exit", std::to_string(code)},
         {"backoff", std::to_string(backoff) + "s"}});
  }
  if (Steady() < run.restart_at) return true;
  if (!run.container.empty()) RemoveContainer(options_.container_runtime, run.container);
  run.process.reset();
  run.exit_status.reset();
  run.finished_at.clear();
  run.restart_pending = false;
  ++run.restarts;
  run.reported_running = false;
  run.reported_ready.reset();
  run.ready = false;
  run.readiness = run.liveness = {};
  return true;
}

Status NodeAgent::StartPodLocked(const Object& pod, PodRun& run) {
  const Object& spec = pod["spec"];
  if (!spec.contains("containers") || spec["containers"].empty()) {
    return InvalidArgumentError("the pod has no container");
  }
  const Object& c = spec["containers"][0];
  for (const char* kind : {"readinessProbe", "livenessProbe"}) {
    ORRERY_RETURN_IF_ERROR(CheckProbe(c, kind));
  }
  const bool in_container = !options_.container_runtime.empty();
  std::error_code ec;
  // Volumes and the mount paths that name them.
  std::map<std::string, std::string> volume_dirs;
  for (const Object& v : spec.value("volumes", Object::array())) {
    std::string name = Str(v, "name");
    if (v.contains("persistentVolumeClaim")) {
      volume_dirs[name] = PvcDir(run.ns, Str(v["persistentVolumeClaim"], "claimName"));
    } else if (v.contains("hostPath")) {
      volume_dirs[name] = Str(v["hostPath"], "path");
    } else {  // emptyDir, and the content-less stand-in for every other kind
      volume_dirs[name] = run.dir + "/volumes/" + name;
      if (v.contains("projected") || v.contains("configMap") || v.contains("downwardAPI")) {
        fs::create_directories(volume_dirs[name], ec);
        ORRERY_RETURN_IF_ERROR(FillVolumeLocked(pod, run, v, volume_dirs[name]));
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> mappings;
  for (const Object& m : c.value("volumeMounts", Object::array())) {
    auto it = volume_dirs.find(Str(m, "name"));
    if (it == volume_dirs.end())
      return InvalidArgumentError("mount of unknown volume " + Str(m, "name"));
    std::string local = it->second;
    if (!Str(m, "subPath").empty()) local += "/" + Str(m, "subPath");
    std::string path = Str(m, "mountPath");
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    fs::create_directories(local, ec);
    // The kubelet's fsGroup: the volume's group, writable by it, inherited by
    // what is created in it (a container runs as the pod's user, not root).
    const Object& pod_security = spec.value("securityContext", Object::object());
    if (in_container && pod_security.contains("fsGroup") && !m.value("readOnly", false)) {
      gid_t group = static_cast<gid_t>(pod_security["fsGroup"].get<int64_t>());
      if (chown(local.c_str(), static_cast<uid_t>(-1), group) != 0 ||
          chmod(local.c_str(), 02775) != 0) {
        // Not retried: a start error the pod's status reports (an agent not root?).
        return FailedPreconditionError("cannot give " + local + " to fsGroup " +
                                       std::to_string(group) + ": " + std::strerror(errno));
      }
    }
    mappings.emplace_back(path, local);
  }
  std::string term_path = c.value("terminationMessagePath", "/dev/termination-log");
  run.term_file = run.dir + "/termination-log";
  fs::create_directories(run.dir + "/tmp", ec);
  if (ec) return UnavailableError("cannot create " + run.dir + ": " + ec.message());
  std::ofstream(run.term_file, std::ios::trunc).close();
  // Writable by the container's user, whoever it is.
  if (in_container && chmod(run.term_file.c_str(), 0666) != 0) {
    return FailedPreconditionError("cannot open " + run.term_file +
                                   " to the container's user: " + std::strerror(errno));
  }
  mappings.emplace_back(term_path, run.term_file);
  std::sort(mappings.begin(), mappings.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  // The environment, in order, with Kubernetes' $(VAR) expansion, after what the
  // kubelet gives every container: the address of the `kubernetes` Service, here
  // the API server's own (no kube-proxy), as in-cluster clients expect.
  std::map<std::string, std::string> env;
  if (!api_host_.empty()) {
    env["KUBERNETES_SERVICE_HOST"] = api_host_;
    env["KUBERNETES_SERVICE_PORT"] = env["KUBERNETES_SERVICE_PORT_HTTPS"] = api_port_;
    env["KUBERNETES_PORT"] = "tcp://" + api_host_ + ":" + api_port_;
  }
  for (const Object& e : c.value("env", Object::array())) {
    std::string name = Str(e, "name");
    if (e.contains("valueFrom")) {
      const Object& from = e["valueFrom"];
      std::string field = from.contains("fieldRef") ? Str(from["fieldRef"], "fieldPath") : "";
      if (field == "metadata.name")
        env[name] = run.name;
      else if (field == "metadata.namespace")
        env[name] = run.ns;
      else if (field == "metadata.uid")
        env[name] = run.uid;
      else if (field == "status.podIP")
        env[name] = run.ip;
      else if (field == "status.hostIP")
        env[name] = "127.0.0.1";
      else if (field == "spec.nodeName")
        env[name] = run.node;
      else if (field == "spec.serviceAccountName")
        env[name] = spec.value("serviceAccountName", "");
      else
        return InvalidArgumentError("env " + name + ": unsupported valueFrom " + from.dump());
    } else {
      // Rewritten before expansion: a local path never passes through twice. A
      // container sees its volumes at their mount paths: nothing to rewrite.
      env[name] =
          ExpandVars(in_container ? Str(e, "value") : RewritePaths(Str(e, "value"), mappings), env);
    }
  }
  // Rendezvous without DNS: the master's pod IP and a port of the gang's own.
  if (env.count("MASTER_ADDR") > 0 || env.count("MASTER_PORT") > 0) {
    std::string addr = env.count("MASTER_ADDR") > 0 ? env["MASTER_ADDR"] : "";
    std::vector<std::string> parts = Split(addr, '.');
    if (parts.size() >= 4 && parts[3] == "svc" &&
        (parts.size() == 4 ||
         (parts.size() == 6 && parts[4] == "cluster" && parts[5] == "local"))) {
      kube::ObjectPtr master = informer_->store().Get(kube::KeyFor(parts[2], parts[0]));
      auto it = master ? runs_.find(Str((*master)["metadata"], "uid")) : runs_.end();
      if (it == runs_.end()) return UnavailableError("waiting for the master pod " + addr);
      env["MASTER_ADDR"] = it->second->ip;
    }
    std::string subdomain = spec.value("subdomain", "");
    env["MASTER_PORT"] =
        std::to_string(GangPortLocked(run.ns + "/" + (subdomain.empty() ? addr : subdomain)));
  }
  env["ORRERY_BIND_HOST"] = run.ip;
  auto metrics = env.find("ORRERY_METRICS_ADDRESS");
  if (metrics != env.end() && !metrics->second.empty() && metrics->second[0] == ':') {
    metrics->second = run.ip + metrics->second;
  }
  if (!in_container) {
    env["HOME"] = run.dir;
    if (env.count("TMPDIR") == 0) env["TMPDIR"] = run.dir + "/tmp";
  }

  std::string log = LogPath(run.ns, run.name);
  if (in_container) {
    // A restarted container is a new one, beside the old one podman may still remove.
    run.container = "orrery-agent-" + run.uid +
                    (run.restarts > 0 ? "-" + std::to_string(run.restarts) : std::string());
    std::vector<std::string> argv;
    ORRERY_RETURN_IF_ERROR(ContainerArgvLocked(pod, run, mappings, env, &argv));
    // The runtime's client runs in the foreground, its output (the container's)
    // into the log; SIGTERM reaches the container through it (podman's
    // --sig-proxy), and its exit status is the container's.
    std::vector<std::string> wrapped = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\" 1>&2", run.dir};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    run.log_offset = fs::exists(log, ec) ? fs::file_size(log, ec) : 0;
    auto process = local::Process::Spawn(wrapped, {}, log, false);
    if (!process.ok()) return InvalidArgumentError(process.status().ToString());
    run.process.emplace(std::move(*process));
    run.started_at = Now();
    run.started_steady = Steady();
    Log(LogLevel::kInfo, "Started container",
        {{"pod", run.ns + "/" + run.name},
         {"node", run.node},
         {"ip", run.ip},
         {"container", run.container},
         {"image", c.value("image", "")}});
    return OkStatus();
  }

  // The program: the command, else the binary standing in for the image.
  std::vector<std::string> argv;
  for (const Object& a : c.value("command", Object::array())) argv.push_back(a.get<std::string>());
  if (argv.empty()) {
    auto it = options_.image_binaries.find(c.value("image", ""));
    std::string binary = it != options_.image_binaries.end() ? it->second : options_.default_binary;
    if (binary.empty()) return InvalidArgumentError("no binary for image " + c.value("image", ""));
    argv.push_back(binary);
  }
  for (const Object& a : c.value("args", Object::array())) argv.push_back(a.get<std::string>());
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i > 0) argv[i] = RewritePaths(argv[i], mappings);
    argv[i] = ExpandVars(argv[i], env);
  }
  std::string workdir =
      c.contains("workingDir") ? RewritePaths(Str(c, "workingDir"), mappings) : run.dir;
  // Process sends stdout nowhere; a shell puts it into the log, then becomes the program.
  std::vector<std::string> wrapped = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\" 1>&2", workdir};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  run.log_offset = fs::exists(log, ec) ? fs::file_size(log, ec) : 0;
  auto process = local::Process::Spawn(wrapped, env, log, false);
  if (!process.ok()) return InvalidArgumentError(process.status().ToString());
  run.process.emplace(std::move(*process));
  run.started_at = Now();
  run.started_steady = Steady();
  Log(LogLevel::kInfo, "Started container",
      {{"pod", run.ns + "/" + run.name},
       {"node", run.node},
       {"ip", run.ip},
       {"pid", std::to_string(run.process->pid())}});
  return OkStatus();
}

// What the kubelet writes into a volume before the container starts: a projected
// volume's serviceAccountToken (a TokenRequest for the pod's service account,
// bound to the pod), configMap and downwardAPI sources, and a configMap volume.
// A ConfigMap that is missing (and not optional) keeps the pod waiting.
Status NodeAgent::FillVolumeLocked(const Object& pod, const PodRun& run, const Object& volume,
                                   const std::string& dir) {
  const Object& spec = pod["spec"];
  Object sources = Object::array();
  int mode = 0644;
  if (volume.contains("projected")) {
    sources = volume["projected"].value("sources", Object::array());
    mode = volume["projected"].value("defaultMode", mode);
  } else if (volume.contains("configMap")) {
    sources.push_back({{"configMap", volume["configMap"]}});
    mode = volume["configMap"].value("defaultMode", mode);
  } else if (volume.contains("downwardAPI")) {
    sources.push_back({{"downwardAPI", volume["downwardAPI"]}});
    mode = volume["downwardAPI"].value("defaultMode", mode);
  }
  for (const Object& source : sources) {
    if (source.contains("serviceAccountToken")) {
      const Object& t = source["serviceAccountToken"];
      std::string sa = spec.value("serviceAccountName", std::string("default"));
      Object request = {
          {"apiVersion", "authentication.k8s.io/v1"},
          {"kind", "TokenRequest"},
          {"spec",
           {{"audiences",
             t.contains("audience") ? Object::array({t["audience"]}) : Object::array()},
            {"expirationSeconds", t.value("expirationSeconds", int64_t{3600})},
            {"boundObjectRef",
             {{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", run.name}, {"uid", run.uid}}}}}};
      // POST .../serviceaccounts/<sa>/token: the subresource as a collection.
      auto token =
          client_->Create({"", "v1", "serviceaccounts/" + sa + "/token", true}, run.ns, request);
      if (!token.ok()) {
        return UnavailableError("token of service account " + sa + ": " +
                                token.status().ToString());
      }
      ORRERY_RETURN_IF_ERROR(WriteVolumeFile(dir, t.value("path", std::string("token")),
                                             Str((*token)["status"], "token"), mode));
    } else if (source.contains("configMap")) {
      const Object& c = source["configMap"];
      auto cm = client_->Get(kube::ConfigMaps(), run.ns, Str(c, "name"));
      if (!cm.ok()) {
        if (c.value("optional", false) && kube::IsNotFound(cm.status())) continue;
        return UnavailableError("configmap " + Str(c, "name") + ": " + cm.status().ToString());
      }
      const Object data = cm->value("data", Object::object());
      if (c.contains("items")) {
        for (const Object& item : c["items"]) {
          ORRERY_RETURN_IF_ERROR(WriteVolumeFile(dir, Str(item, "path"),
                                                 data.value(Str(item, "key"), std::string()),
                                                 item.value("mode", mode)));
        }
      } else {
        for (const auto& [key, value] : data.items()) {
          ORRERY_RETURN_IF_ERROR(WriteVolumeFile(dir, key, value.get<std::string>(), mode));
        }
      }
    } else if (source.contains("downwardAPI")) {
      for (const Object& item : source["downwardAPI"].value("items", Object::array())) {
        std::string field = item.contains("fieldRef") ? Str(item["fieldRef"], "fieldPath") : "";
        std::string value = field == "metadata.namespace" ? run.ns
                            : field == "metadata.name"    ? run.name
                            : field == "metadata.uid"     ? run.uid
                                                          : std::string();
        if (value.empty()) {
          return InvalidArgumentError("downwardAPI item " + Str(item, "path") +
                                      ": unsupported field " + item.dump());
        }
        ORRERY_RETURN_IF_ERROR(
            WriteVolumeFile(dir, Str(item, "path"), value, item.value("mode", mode)));
      }
    } else {
      return InvalidArgumentError("volume " + Str(volume, "name") +
                                  ": the test node agent projects serviceAccountToken, "
                                  "configMap and downwardAPI sources only");
    }
  }
  return OkStatus();
}

// `podman run` for the pod's first container, as a kubelet would create it. The
// pod's $(VAR) references are expanded here (the kubelet does it, not the
// runtime); volumes and the termination-log file come from `mappings`.
Status NodeAgent::ContainerArgvLocked(
    const Object& pod, const PodRun& run,
    const std::vector<std::pair<std::string, std::string>>& mappings,
    const std::map<std::string, std::string>& env, std::vector<std::string>* argv) {
  const Object& spec = pod["spec"];
  const Object& c = spec["containers"][0];
  std::string image = c.value("image", "");
  auto mapped = options_.images.find(image);
  if (mapped != options_.images.end()) image = mapped->second;
  if (image.empty()) return InvalidArgumentError("the container has no image");
  std::vector<std::string>& a = *argv;
  a = {options_.container_runtime, "run", "--rm", "--name", run.container};
  a.insert(a.end(), {"--network", "host", "--pull", "never"});
  // The container's securityContext over the pod's, field by field.
  const Object& pod_security = spec.value("securityContext", Object::object());
  const Object& security = c.value("securityContext", Object::object());
  auto field = [&](const char* key) -> const Object* {
    if (security.contains(key)) return &security[key];
    if (pod_security.contains(key)) return &pod_security[key];
    return nullptr;
  };
  const Object* user = field("runAsUser");
  const Object* group = field("runAsGroup");
  if (user != nullptr) {
    a.push_back("--user");
    a.push_back(std::to_string(user->get<int64_t>()) +
                (group != nullptr ? ":" + std::to_string(group->get<int64_t>()) : ""));
  }
  if (pod_security.contains("fsGroup")) {
    a.push_back("--group-add");
    a.push_back(std::to_string(pod_security["fsGroup"].get<int64_t>()));
  }
  if (security.value("readOnlyRootFilesystem", false)) {
    // Only the pod's volumes are writable: none of podman's own tmpfs mounts.
    a.insert(a.end(), {"--read-only", "--read-only-tmpfs=false"});
  }
  if (security.contains("allowPrivilegeEscalation") && !security["allowPrivilegeEscalation"]) {
    a.insert(a.end(), {"--security-opt", "no-new-privileges"});
  }
  if (security.contains("capabilities")) {
    for (const Object& cap : security["capabilities"].value("drop", Object::array())) {
      a.insert(a.end(), {"--cap-drop", cap.get<std::string>()});
    }
    for (const Object& cap : security["capabilities"].value("add", Object::array())) {
      a.insert(a.end(), {"--cap-add", cap.get<std::string>()});
    }
  }
  std::map<std::string, bool> read_only;
  for (const Object& m : c.value("volumeMounts", Object::array())) {
    std::string path = Str(m, "mountPath");
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    read_only[path] = m.value("readOnly", false);
  }
  // Shortest mount path first, so a mount inside another one lands on top of it.
  std::vector<std::pair<std::string, std::string>> mounts(mappings.rbegin(), mappings.rend());
  for (const auto& [path, local] : mounts) {
    a.push_back("--volume");
    a.push_back(local);
    a.back() += ":" + path;
    if (read_only[path]) a.back() += ":ro";
  }
  for (const std::string& folder : options_.host_folders) {
    a.push_back("--volume");
    a.push_back(folder);
    a.back() += ":" + folder + ":ro";
  }
  for (const auto& [name, value] : env) {
    a.push_back("--env");
    a.push_back(name);
    a.back() += "=" + value;
  }
  if (c.contains("workingDir")) {
    a.push_back("--workdir");
    a.push_back(Str(c, "workingDir"));
  }
  std::vector<std::string> command;
  for (const Object& x : c.value("command", Object::array())) {
    command.push_back(ExpandVars(x.get<std::string>(), env));
  }
  if (!command.empty()) {
    // The pod's command replaces the image's entrypoint (and its args the CMD).
    a.push_back("--entrypoint");
    a.push_back(Object(command).dump());
  }
  a.push_back(image);
  for (const Object& x : c.value("args", Object::array())) {
    a.push_back(ExpandVars(x.get<std::string>(), env));
  }
  return OkStatus();
}

Status NodeAgent::ReportLocked(PodRun& run, const Object& status) {
  kube::PatchOptions po;
  po.subresource = "status";
  // metadata.uid in the patch is a precondition: a pod recreated under the same
  // name is never given this run's status.
  Object patch = {{"metadata", {{"uid", run.uid}}}, {"status", status}};
  auto r = client_->Patch(kube::Pods(), run.ns, run.name, kube::PatchType::kMerge, patch, po);
  if (!r.ok() && !kube::IsNotFound(r.status())) {
    Log(LogLevel::kWarning, "Pod status update failed",
        {{"pod", run.ns + "/" + run.name}, {"error", r.status().ToString()}});
  }
  return r.ok() ? OkStatus() : r.status();
}

void NodeAgent::FinishLocked(PodRun& run, const Object* pod) {
  const Object& c = (*pod)["spec"]["containers"][0];
  bool started = run.process.has_value();
  int code = run.exit_status.value_or(started ? 137 : 128);
  bool ok = started && code == 0 && !run.deadline_exceeded;
  std::string message = ReadHead(run.term_file, 4096);
  if (message.empty() && !ok &&
      c.value("terminationMessagePolicy", "File") == "FallbackToLogsOnError") {
    // The kubelet's fallback: the log's last 80 lines, at most 2 KiB.
    std::string tail = ReadTail(LogPath(run.ns, run.name), run.log_offset, 2048);
    size_t pos = tail.size() > 0 && tail.back() == '\n' ? tail.size() - 1 : tail.size();
    for (int lines = 0; lines < 80 && pos != std::string::npos && pos > 0; ++lines) {
      pos = tail.rfind('\n', pos - 1);
    }
    message = pos == std::string::npos || pos == 0 ? tail : tail.substr(pos + 1);
  }
  if (!run.start_error.empty()) message = run.start_error;
  if (run.finished_at.empty()) run.finished_at = Now();
  Object status = {{"phase", ok ? "Succeeded" : "Failed"},
                   {"hostIP", "127.0.0.1"},
                   {"hostIPs", Object::array({{{"ip", "127.0.0.1"}}})},
                   {"podIP", run.ip},
                   {"podIPs", Object::array({{{"ip", run.ip}}})},
                   {"startTime", run.first_seen_text}};
  status["conditions"] =
      Object::array({Condition("PodScheduled", "True", run.first_seen_text),
                     Condition("Initialized", "True", run.first_seen_text),
                     Condition("ContainersReady", "False", run.finished_at, "PodCompleted"),
                     Condition("Ready", "False", run.finished_at, "PodCompleted")});
  if (started || !run.start_error.empty()) {
    Object terminated = {{"exitCode", code},
                         {"reason", !run.start_error.empty() ? "StartError"
                                    : code == 0              ? "Completed"
                                                             : "Error"},
                         {"startedAt", run.started_at.empty() ? run.finished_at : run.started_at},
                         {"finishedAt", run.finished_at}};
    if (code > 128 && started) terminated["signal"] = code - 128;
    if (!message.empty()) terminated["message"] = message;
    if (started) terminated["containerID"] = "orrery-agent://" + std::to_string(run.process->pid());
    status["containerStatuses"] = Object::array({{{"name", c.value("name", "")},
                                                  {"image", c.value("image", "")},
                                                  {"imageID", ""},
                                                  {"ready", false},
                                                  {"started", false},
                                                  {"restartCount", 0},
                                                  {"state", {{"terminated", terminated}}}}});
  }
  if (run.deadline_exceeded) {
    status["reason"] = "DeadlineExceeded";
    status["message"] = "Pod was active on the node longer than the specified deadline";
  }
  Status s = ReportLocked(run, status);
  run.reported_final = s.ok() || kube::IsNotFound(s);
  if (run.reported_final) {
    Log(LogLevel::kInfo, "Pod finished",
        {{"pod", run.ns + "/" + run.name},
         {"phase", status["phase"].get<std::string>()},
         {"exit", std::to_string(code)}});
  }
}

}  // namespace orrery::testing
