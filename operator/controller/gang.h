// Builders for a task's gang on Kubernetes: one headless Service for rendezvous
// and one Pod per rank. Pure: JSON in the API server's wire form, no I/O; the
// reconciler creates what these return and treats AlreadyExists as success.
//
// One pod per rank, each with one GPU. The worker is one process per rank that
// reads its rank from RANK (worker/main/main.cc), so a pod holding several GPUs
// would need a launcher inside it; with one rank per pod the scheduler, the
// kubelet's GPU accounting and the node-loss logic all see ranks directly, and a
// node spanned by k ranks simply hosts k pods. The planned node is pinned with a
// required node affinity on metadata.name (as DaemonSets do) rather than
// spec.nodeName, so the scheduler still checks the GPUs are free and the pod
// stays Pending instead of failing with OutOfgpu when they are not.
//
// A task's own volumes (its spec's model.pretrained.volume and output.volume)
// are mounted into its pods beside the checkpoint volume: the model's claim
// read-only, in training and profile pods alike (both load the model), and the
// output's claim read-write in training pods only (profiles export nothing).
//
// Rank 0 is the rendezvous master: MASTER_ADDR is its stable DNS name through the
// headless Service (<pod>.<svc>.<ns>.svc, from the pod's hostname and subdomain),
// published before readiness so ranks can connect while starting.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/api/types.h"
#include "operator/api/yaml.h"
#include "operator/engine/worker_command.h"

namespace orrery::controller {

using api::Json;

inline constexpr int kRendezvousPort = 29500;
// Every worker serves Prometheus metrics here (ORRERY_METRICS_ADDRESS=:9400);
// the operator reads rank 0's for progress (progress.h), Prometheus scrapes all.
inline constexpr int kMetricsPort = 9400;
inline constexpr const char* kWorkerContainer = "worker";
inline constexpr const char* kTerminationMessagePath = "/dev/termination-log";
// The restricted profile's non-root identity, as the chart gives the operator.
inline constexpr int64_t kWorkerUid = 65532;

// What the planner chose for a task.
struct GangConfig {
  api::Template template_ = api::Template::kDdp;
  int gpus = 1;            // ranks, one pod and one GPU each
  int nodes = 1;           // distinct nodes spanned; 0 = not checked
  int64_t batch_size = 0;  // global; 0 = the task's own
  std::string recompute;   // --recompute: "none" | "unit"; "" = the template's default
};

struct GangOptions {
  // SIGTERM asks the worker to checkpoint and exit; this is how long it may take
  // before SIGKILL. Generous: a checkpoint of a large model writes gigabytes.
  int64_t termination_grace_seconds = 600;
  std::string backend = "nccl";
  int report_every = 10;
  int threads = 1;
  int64_t shm_size_mib = 1024;  // /dev/shm for the collectives' shared memory
};

struct GangRequest {
  const api::ModelSelectionJob* job = nullptr;  // metadata name, namespace and uid set
  const api::ExpandedTask* task = nullptr;
  GangConfig config;
  std::vector<std::string> placement;  // node per rank; size == config.gpus
  int generation = 0;                  // 0 at first launch, +1 per relaunch
  GangOptions options;
};

struct Gang {
  std::string service_name;
  Json service;
  std::vector<Json> pods;  // by rank
  std::vector<std::string> warnings;
};

// A digest of what of the job's spec shapes its gang pods beyond the task and
// the plan: spec.resources.image, nodeSelector, tolerations and
// gpuResourceName. Every gang pod carries it (kPodSettingsAnnotation); a
// running gang made under another digest restarts under the edited settings.
// Checkpoint settings are left out on purpose: a new checkpoint path would
// restart the task from nothing.
std::string PodSettingsDigest(const api::ResourcesSpec& resources);

// INVALID_ARGUMENT when the request is inconsistent (missing job metadata, a
// placement that does not match the ranks or the nodes spanned).
StatusOr<Gang> BuildGang(const GangRequest& request);

// The labels every pod of the gang carries (without the rank) and the selector of
// its Service: managed-by, job, task, gang.
Json GangSelector(const api::ModelSelectionJob& job, const std::string& task, int generation);

// The checkpoint folder of a job: <spec.checkpoints.path>/<name>-<uid>. Keyed by
// metadata.uid as well as the name, so a job deleted and created again under
// the same name starts fresh instead of resuming the old job's state from the
// same volume (the name keeps the folder readable).
std::string JobCheckpointDir(const api::ModelSelectionJob& job);

// The checkpoint folder of a task: <JobCheckpointDir(job)>/<task>. Every
// generation of a task uses the same folder, so a relaunch resumes from it.
std::string CheckpointDir(const api::ModelSelectionJob& job, const std::string& task);

// The note of the CheckpointLocation event a job's first launch records: the
// folder its tasks checkpoint into and the volume behind it, and that the
// folder is keyed by the job's uid so a job re-created under the same name
// starts fresh.
std::string CheckpointLocationNote(const api::ModelSelectionJob& job);

// ---- shared by the gang and profile builders ------------------------------
Json OwnerReference(const api::ModelSelectionJob& job);
// The restricted Pod Security profile (the chart's
// orrery.restrictedContainerSecurityContext).
Json RestrictedContainerSecurityContext();
Json RestrictedPodSecurityContext();
Json HeadlessService(const api::ModelSelectionJob& job, const std::string& name,
                     const Json& selector, const Json& labels);
// A pod of `image` running `args`, with the job's node selector and tolerations,
// the restricted security context, /tmp and /dev/shm as emptyDirs and the
// rendezvous environment. `node` "" leaves placement to the scheduler.
struct PodParts {
  std::string name;
  std::string service;
  Json labels;
  Json annotations = Json::object();
  std::vector<std::string> args;
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  std::string node;
  std::string gpu_resource;
  int64_t grace_seconds = 30;
  std::string backend = "nccl";
  int64_t shm_size_mib = 1024;
};
Json WorkerPod(const api::ModelSelectionJob& job, const PodParts& parts);
// Adds the task's model volume (read-only) and, with `with_output`, its output
// volume (read-write) to a worker pod: pod volumes "model" and "output".
void AddTaskVolumes(const api::TaskSpec& task, bool with_output, Json* pod);
// What a cluster needs of a valid spec beyond validation.h: a task's output
// must lie on a persistent volume of its pods (its output.volume, or
// spec.checkpoints.path on a claim), because the pods' root file system is
// read-only and their scratch space goes with them. Errors name the field.
std::vector<api::FieldError> ClusterSpecErrors(const api::ModelSelectionJob& job,
                                               const std::vector<api::ExpandedTask>& tasks);
// "<pod>.<svc>.<ns>.svc"
std::string PodDnsName(const std::string& pod, const std::string& service, const std::string& ns);
Status CheckJobMetadata(const api::ModelSelectionJob& job);

}  // namespace orrery::controller
