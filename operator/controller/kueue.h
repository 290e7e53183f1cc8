// Kueue admission (https://kueue.sigs.k8s.io): a ModelSelectionJob labelled
// kueue.x-k8s.io/queue-name is represented to Kueue by a Workload the operator
// creates and owns, and runs only inside what Kueue admits.
//
// - The Workload asks for the job's GPU quota as one pod set of one-GPU pods
//   (count = spec.resources.gpuQuota, minCount = gpusPerTask.min, so Kueue's
//   partial admission may give fewer), with the job's node selector and
//   tolerations, in the job's LocalQueue, at the priority of the
//   WorkloadPriorityClass named by kueue.x-k8s.io/priority-class.
// - Until Kueue admits it the job runs no pod (not even a profiling trial): the
//   reconciler treats it as suspended. Admitted, the admission is a cap on the
//   job's GPUs (its gpuQuota for this pass) and the node labels and
//   tolerations of every ResourceFlavor the admission assigns its pod set are
//   added to its pods' node selector and tolerations, so the planner places
//   gangs only on that flavor's nodes (node_filter.h) and the pods carry the
//   flavor's selector and tolerations. A flavor the operator cannot read yet
//   holds the job (no pod starts without the flavor's selector); an admission
//   to another flavor after an eviction applies the new flavor's, since it is
//   applied to the spec afresh on every pass.
// - The job's kueue.x-k8s.io/priority-class label, edited while the Workload
//   exists, is carried to the Workload's priorityClassRef and priority as
//   Kueue's own job integrations do (jobframework UpdateWorkloadPriority): a
//   waiting job is queued at its new priority. Only a change of the class name
//   does that; the Workload's spec.priority edited by hand, or the class's
//   value changed, stays as it is (Kueue's rule). Removing the label while the
//   Workload holds quota waits until it no longer does (Kueue's CRD forbids
//   dropping priorityClassRef then). An edited kueue.x-k8s.io/queue-name
//   label moves a Workload that holds no quota to the new LocalQueue (as
//   Kueue's integrations do); one that holds quota keeps its queue until its
//   reservation ends.
// - Evicted (preempted, its queue stopped, ...): its gangs are stopped as a
//   suspend stops them (SIGTERM: they checkpoint), and once no pod of the job is
//   left the Workload's quota reservation is cleared as Kueue expects of a job
//   integration (QuotaReserved=False "Pending", admission removed, Requeued), so
//   Kueue queues it again; admitted again, the job resumes from its checkpoints
//   in whatever layout the new admission allows.
// - Edited (spec.resources.gpuQuota, gpusPerTask.min, nodeSelector,
//   tolerations, image, gpuResourceName: what the pod sets say): a Workload's
//   pod sets cannot change, so the job's Workload is replaced. One that holds
//   no quota is deleted and a new one queued at once; an admitted one holds
//   the job (its gangs checkpoint and stop as for an eviction, status reason
//   WorkloadOutdated) until no pod of the job is left, then is deleted (its
//   quota goes back to Kueue) and a new one queues (event WorkloadReplaced).
// - Tasks finishing: once the unfinished tasks together (each at most
//   gpusPerTask.max) cannot use every admitted GPU, the rest are reported as
//   reclaimable pods (status.reclaimablePods), so Kueue frees their quota for
//   other workloads while the job runs on.
// - Succeeded or Failed: once no pod of the job is left running, the Workload
//   gets Finished=True, releasing its quota.
//   Deleting the job deletes the Workload by its owner reference.
//
// The pure pieces are free functions (tested without a cluster); KueueGate does
// the I/O of one pass.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/kube/client.h"
#include "operator/kube/store.h"

namespace orrery::controller {

inline constexpr const char* kKueueQueueLabel = "kueue.x-k8s.io/queue-name";
inline constexpr const char* kKueuePriorityClassLabel = "kueue.x-k8s.io/priority-class";
// The one pod set of a job's Workload.
inline constexpr const char* kKueuePodSet = "gpus";
// The job's condition saying what Kueue decided.
inline constexpr const char* kKueueCondition = "Admitted";

kube::Resource Workloads();                // kueue.x-k8s.io/v1beta2, namespaced
kube::Resource ResourceFlavors();          // kueue.x-k8s.io/v1beta2, cluster-scoped
kube::Resource WorkloadPriorityClasses();  // kueue.x-k8s.io/v1beta2, cluster-scoped

// The job's LocalQueue, "" when it is not labelled (Kueue is then not involved).
std::string KueueQueueName(const api::ModelSelectionJob& job);
// The Workload's pod sets for the job's spec now (see BuildWorkload).
kube::Object WorkloadPodSets(const api::ModelSelectionJob& job);
// The Workload's name: deterministic for one job object and one request (its
// uid's first characters tell a re-created job's Workload from its
// predecessor's; a digest of WorkloadPodSets, a Workload asking for an edited
// spec.resources from the one asking for the old, since Kueue's pod sets are
// immutable).
std::string WorkloadName(const api::ModelSelectionJob& job);

// The Workload that represents `job` in `queue`; `priority` (a
// WorkloadPriorityClass's name and value) when the job names one.
struct WorkloadPriority {
  std::string class_name;
  int32_t value = 0;
};
kube::Object BuildWorkload(const api::ModelSelectionJob& job, const std::string& queue,
                           const std::optional<WorkloadPriority>& priority);

// What Kueue decided about a Workload, from its status.
struct KueueAdmission {
  enum class State { kPending, kAdmitted, kEvicted, kFinished };
  State state = State::kPending;
  std::string cluster_queue;  // admitted (or evicted while still reserved)
  std::string flavor;         // the GPU resource's flavor
  // Every flavor the admission assigns the pod set (any resource), sorted,
  // each once: the ones whose node labels and tolerations the pods get.
  std::vector<std::string> flavors;
  int gpus = 0;           // GPUs admitted
  int reclaimable = 0;    // of those, given back (status.reclaimablePods)
  bool reserved = false;  // QuotaReserved=True (an evicted one still holds it)
  std::string reason;     // Kueue's condition reason ("Preempted", "Pending", ...)
  std::string message;    // Kueue's condition message
};
KueueAdmission ReadAdmission(const kube::Object& workload, const std::string& gpu_resource);

// The job's resources inside an admission: the quota capped at the admitted
// GPUs less those given back as reclaimable, the node labels of each of
// `flavors` (the admission's ResourceFlavor objects) added to the node
// selector and their tolerations to the tolerations. A flavor label the job's
// own selector, or another assigned flavor, sets to another value is an error
// naming both (no node could hold the pods).
Status ApplyAdmission(const KueueAdmission& admission, const std::vector<kube::Object>& flavors,
                      api::ResourcesSpec* resources);

// The job's Admitted condition for an admission ("Pending in LocalQueue q: ...",
// "Admitted to ClusterQueue cq with 4 GPUs of flavor f", "Evicted: ...").
api::Condition AdmissionCondition(const KueueAdmission& admission, const std::string& queue,
                                  int64_t generation);

// Kueue's contract with a job integration, as its jobframework reconciler keeps
// it: once an evicted job has stopped, the integration clears the reservation
// (QuotaReserved=False reason Pending, no admission, Admitted=False) and, for a
// preemption or node failures, sets Requeued=True. Returns the Workload with
// that status; `now` is RFC 3339.
kube::Object ClearedReservation(const kube::Object& workload, const std::string& now);
// GPUs of an admission the job can no longer use, to give back to Kueue as
// reclaimable pods of its one-GPU pod set: the admitted GPUs beyond
// `usable_gpus` (what its unfinished tasks may use together; -1: unknown),
// never fewer than already given back (Kueue only lets the count grow).
int ReclaimableGpus(const KueueAdmission& admission, int usable_gpus);
// The Workload with status.reclaimablePods saying `count` pods of its pod set.
kube::Object WithReclaimable(const kube::Object& workload, int count);
// The Workload with Finished=True (reason Succeeded or Failed).
kube::Object FinishedWorkload(const kube::Object& workload, bool succeeded,
                              const std::string& message, const std::string& now);

// One reconcile pass's dealings with Kueue for one job.
struct KueueCaches {
  const kube::Store* workloads = nullptr;  // null: Kueue's API is not served
  const kube::Store* flavors = nullptr;
};

struct KueueGateResult {
  bool run = false;  // admitted (or finished): the pass goes on; else the job is held
  api::Condition condition;
  std::string event_reason;  // set when the decision changed: the event to record
  std::string event_message;
  bool warning = false;
};

// Ensures the job's Workload exists, reads Kueue's decision, applies an
// admission to `job`'s resources, gives back admitted GPUs beyond
// `usable_gpus` (ReclaimableGpus), clears an evicted Workload's reservation
// once `live_pods` is 0 and marks a finished job's Workload. `client` writes
// the Workload; errors are API errors (retried by the caller).
StatusOr<KueueGateResult> KueueGate(kube::Client* client, const KueueCaches& caches,
                                    api::ModelSelectionJob* job, int live_pods, int usable_gpus,
                                    const std::string& now);

}  // namespace orrery::controller
