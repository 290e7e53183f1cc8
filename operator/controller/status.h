// What the controller reads back from the cluster: the pods of a job grouped into
// gangs and tasks (which generation runs, whether all its ranks are up, which
// ranks a lost node took), and the job status written from that. Pure: pods come
// in as JSON from the informer cache, time comes in as a string, so a restarted
// operator derives the same status from the same cluster.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "operator/api/expand.h"
#include "operator/api/types.h"
#include "operator/api/yaml.h"
#include "operator/controller/progress.h"

namespace orrery::controller {

using api::Json;

enum class GangPhase {
  kPending,    // every rank exists, some not yet running
  kRunning,    // every rank running (or rank done while others finish)
  kSucceeded,  // every rank succeeded
  kFailed,     // every rank failed or lost
  kPartial     // some ranks missing, failed or lost while others live: tear down
};
const char* GangPhaseName(GangPhase phase);

struct GangObservation {
  std::string task;
  int generation = 0;
  int world_size = 0;  // from the pods' annotation
  int ranks_seen = 0;
  int pending = 0, running = 0, succeeded = 0, failed = 0, lost = 0;
  int gpus_held = 0;  // ranks bound to a node and not finished (one GPU each)
  GangPhase phase = GangPhase::kPending;
  std::optional<api::TaskConfig> config;  // from the pods' annotation, nodes by rank
  std::vector<std::string> lost_nodes;    // nodes whose loss took a rank (sorted)
  std::string reason;                     // first failure: "rank 2: OOMKilled (exit code 137)"
  std::string pod_settings;               // kPodSettingsAnnotation ("" on older pods)
  std::vector<std::string> pod_names;     // sorted
};

struct TaskObservation {
  std::string task;
  std::optional<GangObservation> gang;  // the newest generation present
  int restarts = 0;                     // the newest generation: each relaunch adds one
  std::vector<std::string> stale_pods;  // pods of older generations, to delete
};

// Groups a job's gang pods (orrery.dev/task and orrery.dev/gang labels, generation
// and world-size annotations; profile pods and foreign pods are skipped) by task.
// A pod is lost when its node is in `lost_nodes` (NotReady or deleted, as the
// reconciler sees nodes), or the kubelet/taint manager marked it (status reason
// NodeLost or Evicted, or a DisruptionTarget condition), or it is being deleted
// while its gang lives on.
std::map<std::string, TaskObservation> ObserveTasks(const std::vector<Json>& pods,
                                                    const std::set<std::string>& lost_nodes = {});

struct StatusInput {
  const api::ModelSelectionJob* job = nullptr;
  const std::vector<api::ExpandedTask>* tasks = nullptr;
  const std::map<std::string, TaskObservation>* observed = nullptr;
  std::string now;  // RFC 3339, for condition transitions
  // Relaunches after which a failing task is Failed instead of Rescaling.
  int max_restarts = 5;
  // What the reconciler itself knows and pods do not: tasks waiting for profiles
  // (Profiling) or for a plan slot (Queued).
  std::set<std::string> profiling;
  // Gangs (labels) stopped because an adopted plan moved them: Rescaling while
  // their ranks go, and not a degradation.
  std::set<std::string> replanned;
  // What running gangs' rank 0 reported (progress.h), by task label value; a
  // report of an older gang generation is ignored. Null: carry progress over.
  const std::map<std::string, TaskProgress>* progress = nullptr;
  // Tasks that can never run on the nodes their pods may use, and why (the
  // task's message, and a Degraded condition TaskNeverFits).
  std::map<std::string, std::string> never_fits;
  // Tasks whose pods the API server rejected for this spec, and its message:
  // Failed, with a Degraded condition PodRejected, until the spec changes.
  std::map<std::string, std::string> pod_rejected;
  // Tasks whose pods the API server forbade at create this pass (a used-up
  // ResourceQuota): Pending, with why as the message; not a degradation.
  std::map<std::string, std::string> forbidden;
  // Each node's GPU type (NodeGpuOf), by name: a task's status names its
  // gang's type (TaskConfig::gpu_type). Nodes without one are left out.
  std::map<std::string, std::string> node_gpu_types;
};

// How a task's message starts when the API server rejected its pods: a status
// written for the same generation says the task is not to be launched again.
inline constexpr char kPodRejectedMessage[] = "the API server rejected its pods: ";

// A Rescaling task's message while the gang an adopted plan (or an edit) moved
// goes: "stopping gang g<generation> for a new plan (it checkpoints first)". A
// restarted operator reads the generation back (StoppingForPlanGeneration), so
// that gang's end counts as the stop it is, not as a failure.
std::string StoppingForPlanMessage(int generation);
std::optional<int> StoppingForPlanGeneration(const std::string& message);

// The job status: phase, observedGeneration, conditions (Progressing, Degraded,
// Complete; a condition keeps its lastTransitionTime while its status holds),
// per-task state, configuration and restarts. Progress fields (steps, throughput,
// the last checkpoint and the last restore) and the plan are carried over from
// the job's current status: they come from the workers' reports, not from pods.
api::ModelSelectionJobStatus BuildJobStatus(const StatusInput& input);

// The object to send to the /status subresource: apiVersion, kind, metadata
// (name, namespace, resourceVersion for optimistic concurrency) and status.
Json StatusUpdateObject(const api::ModelSelectionJob& job,
                        const api::ModelSelectionJobStatus& status);

}  // namespace orrery::controller
