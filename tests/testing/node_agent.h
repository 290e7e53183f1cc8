// A test node agent: a tiny kubelet for end-to-end tests on a machine without a
// container runtime. It registers Node objects (Ready, with GPUs of a
// configurable resource name, labels and taints as configured: none by
// default), heartbeats them, and runs the first container of
// every pod bound to one of them as a local process group, reporting the pod's
// phase, IP and termination message through pods/status as a kubelet does.
//
// Each pod gets its own loopback address (127.0.1.1, 127.0.1.2, ...) as its pod IP,
// volumes become folders under the agent's root (emptyDir per pod, a
// persistentVolumeClaim shared by every pod naming it, like an RWX volume), and the
// mount paths in args and env values are rewritten to those folders. A gang's
// rendezvous works without DNS: MASTER_ADDR "<pod>.<subdomain>.<ns>.svc" becomes
// that pod's IP and MASTER_PORT a free port per gang, since c10d's store binds all
// interfaces.
//
// Container mode (NodeAgentOptions::container_runtime, "podman"): the container
// runs as a container of its image instead, the way a kubelet runs it: host
// network (the pod's loopback IP still names it), the pod's command, args, env
// and working dir, its securityContext's user and group, read-only root,
// capabilities and no-new-privileges, every volume bind-mounted from its host
// folder at its mountPath (nothing is rewritten: the paths are the pod's), the
// fsGroup given to the volume folders, and the termination-log file at its path.
//
// As a kubelet, for what a Deployment's pod needs (the operator's, from the
// chart): every container gets KUBERNETES_SERVICE_HOST/PORT naming the API
// server the agent talks to (there is no kube-proxy: not a Service IP); a
// projected volume gets its serviceAccountToken (a TokenRequest for the pod's
// service account, bound to the pod), configMap and downwardAPI files, so a
// container's in-cluster config works where the ServiceAccount admission plugin
// (or the test, standing in for it) mounted them; httpGet (HTTP) and tcpSocket
// readiness probes set the Ready condition, liveness probes kill the container;
// restartPolicy Always and OnFailure restart it in the same pod (restartCount,
// lastState, the kubelet's back-off).
//
// What it does not do: run init or sidecar containers, exec or HTTPS probes,
// resource limits, configMap/secret env, secret volume contents (configMap and
// projected volumes only), token rotation; user ids only in container mode.
//
// One thread runs a level-triggered loop: an informer on pods wakes it, and it
// re-reads the cache, starts, reaps and reports, heartbeating the nodes on its way.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/informer.h"

namespace orrery::testing {

// A taint a node is registered with (a Node's spec.taints entry).
struct NodeTaint {
  std::string key;
  std::string value;
  std::string effect = "NoSchedule";
};

struct NodeAgentOptions {
  std::vector<std::string> nodes;  // node names to register and serve
  // State folder: pods/<uid>/ (volumes, termination message), pods/<ns>_<name>.log
  // and pvc/<ns>/<claim>/. Created when missing.
  std::string root;
  std::string cpu = "8";
  std::string memory = "32Gi";
  std::string gpu_resource = "nvidia.com/gpu";
  int gpus_per_node = 2;                      // 0: no GPU resource on the nodes
  std::map<std::string, int> gpus_by_node;    // overrides gpus_per_node by node name
  std::map<std::string, std::string> labels;  // extra node labels
  // More labels (over `labels`) and taints by node name, as a pool of
  // dedicated nodes has them.
  std::map<std::string, std::map<std::string, std::string>> labels_by_node;
  std::map<std::string, std::vector<NodeTaint>> taints_by_node;
  // The program of a container without `command`: by image, else the default.
  std::map<std::string, std::string> image_binaries;
  std::string default_binary;
  // Container mode: the runtime ("podman") that runs each pod's container from its
  // image; empty runs local processes. `images` maps a pod's image to the local
  // image that stands for it (a pod's image not in it is used as it is).
  std::string container_runtime;
  std::map<std::string, std::string> images;
  // Container mode: host folders every container sees, read-only, at the same
  // path (what a node's disk or an image would hold, such as a test's corpus).
  std::vector<std::string> host_folders;
  // Pod IPs are 127.0.<block>.1, .2, ... from this block on; agents running at the
  // same time on one machine (say, two test binaries) need distinct blocks.
  int first_ip_block = 1;
  Duration heartbeat_period = std::chrono::seconds(2);
  Duration poll_period = std::chrono::milliseconds(50);  // process exits, deadlines
};

class NodeAgent {
 public:
  // Registers the nodes and starts serving them. `config` reaches the API server.
  static StatusOr<std::unique_ptr<NodeAgent>> Start(const kube::ClientConfig& config,
                                                    NodeAgentOptions options);
  ~NodeAgent();  // Stop()
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Kills every process, stops the threads and deletes the Node objects. Pod
  // statuses are not updated. Idempotent; returns the first API error.
  Status Stop();
  // The node dies: its processes are SIGKILLed, its heartbeat stops and its Ready
  // condition becomes Unknown (NodeStatusUnknown) and it gets the unreachable
  // NoSchedule and NoExecute taints, as the node lifecycle controller would give
  // it (nothing evicts pods in the test plane); its pods' statuses are never
  // written again and new pods bound to it are never started.
  Status StopNode(const std::string& node);
  // Sends `sig` to the main process of the pod's running container (container
  // mode: `podman kill`), as an OOM kill or a crash would end it; the pod's
  // restartPolicy says what follows. NotFound when no container of it runs.
  Status SignalContainer(const std::string& ns, const std::string& name, int sig);
  // StopNode, then the Node object is deleted.
  Status DeleteNode(const std::string& node);

  // Creates claim `claim` in `ns` and a PersistentVolume (a hostPath of PvcDir)
  // bound to it, both as the volume controller would leave them (there is none in
  // the test plane), so the scheduler's volume binding admits pods naming the
  // claim. Existing ones are kept. Stop() deletes the volume.
  Status CreateBoundClaim(const std::string& ns, const std::string& claim);

  const std::vector<std::string>& nodes() const { return options_.nodes; }
  // The pod's stdout and stderr (a pod recreated under the same name appends).
  std::string LogPath(const std::string& ns, const std::string& name) const;
  // The last `max_bytes` of that log ("" when there is none).
  std::string LogTail(const std::string& ns, const std::string& name,
                      size_t max_bytes = 4096) const;
  // The folder behind persistentVolumeClaim `claim` of namespace `ns`.
  std::string PvcDir(const std::string& ns, const std::string& claim) const;
  // The loopback IP of the pod the agent knows by that name ("" when none).
  std::string PodIp(const std::string& ns, const std::string& name) const;
  // One line per pod the agent tracks (name, uid, node, IP, pid, state, exit) and
  // the log tails of failed ones: for test failure messages.
  std::string Describe() const;

  struct PodRun;  // per pod (by uid): defined in node_agent.cc

 private:
  NodeAgent(std::unique_ptr<kube::Client> client, NodeAgentOptions options);
  Status RegisterNode(const std::string& node);
  Status PatchNodeStatus(const std::string& node, const std::string& ready,
                         const std::string& reason, const std::string& message);
  void Run();
  void SyncOnceLocked();
  void SyncPodLocked(const kube::Object& pod, PodRun& run);
  Status StartPodLocked(const kube::Object& pod, PodRun& run);
  void ReapLocked(PodRun& run);
  Status FillVolumeLocked(const kube::Object& pod, const PodRun& run, const kube::Object& volume,
                          const std::string& dir);
  void ReportRunningLocked(const kube::Object& pod, PodRun& run);
  void ProbeLocked(const kube::Object& container, PodRun& run);
  bool RestartLocked(const kube::Object& pod, PodRun& run);
  // SIGKILLs the run's process group and, in container mode, removes its container
  // (which outlives a killed client); returns once the process is gone.
  void KillLocked(PodRun& run);
  Status ContainerArgvLocked(const kube::Object& pod, const PodRun& run,
                             const std::vector<std::pair<std::string, std::string>>& mappings,
                             const std::map<std::string, std::string>& env,
                             std::vector<std::string>* argv);
  Status ReportLocked(PodRun& run, const kube::Object& status);
  void FinishLocked(PodRun& run, const kube::Object* pod);
  std::string AllocateIpLocked();
  int GangPortLocked(const std::string& key);
  bool ServesLocked(const std::string& node) const;

  std::unique_ptr<kube::Client> client_;
  NodeAgentOptions options_;
  std::unique_ptr<kube::Informer> informer_;
  std::string registered_at_;
  std::string api_host_, api_port_;  // the API server, from the client's config

  mutable std::mutex mu_;  // guards everything below; held by each loop pass
  std::condition_variable cv_;
  bool stop_ = false;
  bool stopped_ = false;
  bool dirty_ = false;
  std::set<std::string> dead_nodes_;
  std::set<std::string> volumes_;  // PersistentVolumes created by CreateBoundClaim
  std::map<std::string, std::unique_ptr<PodRun>> runs_;  // by pod uid
  int next_ip_ = 0;
  std::map<std::string, int> gang_ports_;  // "ns/subdomain" -> port
  TimePoint next_heartbeat_{};
  std::thread thread_;
};

}  // namespace orrery::testing
