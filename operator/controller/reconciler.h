// The ModelSelectionJob reconciler: level-triggered, one job key at a time. It
// reads only the informer caches (jobs, pods, nodes, the profile ConfigMap),
// writes through a kube::Client, and converges the cluster on what the engine
// decides. It mirrors the local runner (operator/local/runner.cc) with pods in
// place of processes: profiles become planner configurations, the engine plans
// over a WorldView of the cluster, gangs start in planned order on planned nodes
// that are free, finished and failed gangs are read back from their pods.
//
// Everything a restarted operator needs is in the cluster: gang names and
// generations are deterministic, a gang's configuration and planned nodes are
// pod annotations, progress is in the job status. What lives only in memory
// (one Engine per job, its adopted plan, create expectations) is rebuilt on the
// first reconcile after a restart: running gangs are observed and kept running.
//
// The pure pieces (node capacities, planner configurations from profiles, the
// world view, launch selection) are free functions below so they are tested
// without a cluster.
#pragma once

#include <algorithm>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics/metrics.h"
#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/api/types.h"
#include "operator/controller/gang.h"
#include "operator/controller/gpu_claims.h"
#include "operator/controller/kueue.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/profile_pod.h"
#include "operator/controller/progress.h"
#include "operator/controller/status.h"
#include "operator/engine/cluster_share.h"
#include "operator/engine/engine.h"
#include "operator/engine/estimate.h"
#include "operator/engine/profile_configs.h"
#include "operator/engine/profile_step.h"
#include "operator/kube/client.h"
#include "operator/kube/controller.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/store.h"

namespace orrery::controller {

kube::Resource ModelSelectionJobs();
kube::Resource Services();

// ---- pure pieces -----------------------------------------------------------

// The node label that names a node's GPU type, as NVIDIA's GPU feature
// discovery sets it (e.g. NVIDIA-H100-80GB-HBM3); the operator's
// --gpu-type-label picks another.
inline constexpr const char* kDefaultGpuTypeLabel = "nvidia.com/gpu.product";
// Each GPU's memory in MiB, as GPU feature discovery sets it.
inline constexpr const char* kGpuMemoryLabel = "nvidia.com/gpu.memory";

// A Ready node's GPUs as one job sees them.
struct NodeCapacity {
  std::string name;
  int allocatable = 0;  // status.allocatable[gpu resource]
  int foreign = 0;      // requested by live pods that are not this job's training gangs
  int Free() const { return allocatable > foreign ? allocatable - foreign : 0; }
  std::string gpu_type = {};  // its GPU type label's value; "" = unlabelled
  // What each GPU gives a configuration's peak: kGpuMemoryLabel's memory less
  // the reserve (engine::UsableGpuMemoryGib); 0 = unlabelled (not modelled).
  double gpu_memory_gib = 0;
  double gpu_device_gib = 0;  // kGpuMemoryLabel's memory itself
  // Held by this job's own gang pods on their way out (a gang stopped or of a
  // stale generation): the job's to plan on, not yet to launch on.
  int stopping = 0;
  int FreeNow() const { return std::max(0, Free() - stopping); }
};

// A node's GPU type (the value of `type_label`, "" without it) and each GPU's
// memory in GiB (kGpuMemoryLabel, 0 without a positive whole number of MiB).
struct NodeGpu {
  std::string type;
  double memory_gib = 0;
};
NodeGpu NodeGpuOf(const Json& node, const std::string& type_label);

// GPUs of `resource` a pod requests (per container, the larger of requests and
// limits; extended resources usually set only limits).
int PodGpuRequest(const Json& pod, const std::string& resource);
// The node a pod holds GPUs on: spec.nodeName, else for an Orrery pod not yet
// bound its planned node (a gang pod's annotation, a pinned profile pod's node
// affinity), so a gang just created is counted before the scheduler binds it;
// "" when none.
std::string PodNode(const Json& pod);
bool PodFinished(const Json& pod);  // Succeeded or Failed
bool NodeReady(const Json& node);

// Ready nodes with allocatable `resource` > 0, sorted by name, with what every
// live pod outside `own_job` (the job's label value) requests subtracted;
// `own_job` "" subtracts every pod. Profile pods of the job count as foreign:
// they hold GPUs the planner cannot give to gangs. With `admit`, only nodes
// that admit the job's pods (node_filter.h: not cordoned, nodeSelector,
// tolerated taints) are counted, each one refused is said in `refusals`; a
// refused or NotReady node where the job's gangs run stays with just the GPUs
// they hold (they keep running; nothing new goes there).
std::vector<NodeCapacity> NodeCapacities(const std::vector<Json>& nodes,
                                         const std::vector<Json>& pods, const std::string& resource,
                                         const std::string& own_job,
                                         const api::ResourcesSpec* admit = nullptr,
                                         std::vector<std::string>* refusals = nullptr,
                                         const std::string& gpu_type_label = kDefaultGpuTypeLabel,
                                         const engine::GpuMemoryReserve& reserve = {});
// Names of nodes the job should treat as lost: nodes not Ready for `grace_s` or
// longer at `now` (from the Ready condition's lastTransitionTime), and nodes
// named by `pods` that are not in `nodes` at all (deleted: at once).
std::set<std::string> LostNodes(const std::vector<Json>& nodes, const std::vector<Json>& pods,
                                std::time_t now = 0, double grace_s = 0);

// What the planner may choose for a task, from the profile cache: what
// engine::BuildTaskConfigs builds (as the local runner does) over a lookup in
// `table` for this device. An elastic job gets several global batches per task;
// `missing` lists (template, gpus, batch) the cache lacks. Infeasible entries
// give no configuration and are not missing.
//
// GPU types: with `nodes` of labelled types, the task is profiled on one type
// (ProfiledGpuType), its profiles keyed by that type (TypedProfileDevice); a
// profile keyed by `device` alone (measured before types, or on unlabelled
// nodes) stands in for a typed one the cache lacks. With `speeds` (relative
// throughput by type, the operator's --gpu-type-speeds) naming the profiled
// type, every configuration is tagged with it and the other types the task may
// use get estimates scaled by their speed over its (planner::EstimateMissingTypes,
// as workload files estimate a pool's profiles; a type without a speed counts
// as fast as the profiled one). Without `speeds`, the speeds are measured: the
// task's first profiled key (in build order: its narrowest configuration) is
// profiled again on each other type it may use (`type_probes` lists those not
// measured yet), and once every such type has its figure the configurations
// are tagged and estimated by the measured ratios; a type where that key is
// infeasible (out of memory, too slow) gets no configuration. Until then the
// configurations stay typeless: the profile stands for every type.
using TaskConfigs = engine::TaskConfigs;
TaskConfigs ConfigsFromProfiles(const api::ModelSelectionJobSpec& spec,
                                const api::ExpandedTask& task, const ProfileTable& table,
                                const std::string& device, int max_gpus,
                                const std::vector<NodeCapacity>& nodes = {},
                                const std::map<std::string, double>& speeds = {});
// The GPU type a task is profiled on: the first (by name) labelled type among
// `nodes` that the task allows; "" when the nodes carry none.
std::string ProfiledGpuType(const api::TaskSpec& task, const std::vector<NodeCapacity>& nodes);
// The profile cache's device for a trial on `gpu_type`: "cuda/NVIDIA-L4"; the
// device alone for "".
std::string TypedProfileDevice(const std::string& device, const std::string& gpu_type);

// A live gang of the job (observed, or created and not yet in the cache).
struct LiveGang {
  int generation = 0;
  api::TaskConfig config;    // nodes by rank
  std::string pod_settings;  // PodSettingsDigest it was made with ("" unknown)
};

struct WorldInput {
  double now = 0;
  const std::vector<api::ExpandedTask>* tasks = nullptr;
  const std::vector<TaskConfigs>* configs = nullptr;  // by task
  const std::vector<NodeCapacity>* nodes = nullptr;
  // Steps done per task (from status), finished tasks, tasks waiting for profiles.
  std::map<std::string, int64_t> steps_done;
  // An elastic job's work is each task's samples (engine::SampleBudget), at
  // whatever batches it ran: remaining work is the budget less `samples_done`
  // (SamplesDone of its status), as the local runner counts it.
  bool elastic = false;
  std::map<std::string, int64_t> samples_done;
  std::set<std::string> done;
  std::set<std::string> profiling;
  std::map<std::string, LiveGang> live;  // by task
  // The job's pod settings now (PodSettingsDigest): a live gang made under
  // other ones is outdated (engine::TaskView::outdated).
  std::string pod_settings;
};
// A duration as `kubectl get` shows ages: "45s", "12m", "1h20m", "2d3h".
std::string HumanDuration(double seconds);

// Samples a task has consumed, from its status: exact at its last checkpoint
// (when the worker reported them) plus the steps since at the batch it runs at
// now (its configuration's, else `task_batch`).
int64_t SamplesDone(const api::TaskStatus& status, int64_t task_batch);

// The engine's view: nodes by index as in `nodes`, with GPUs = what the job may
// use (its own gangs included); tasks in `tasks` order; a live gang whose
// configuration is among the task's configurations and whose nodes all exist is
// running. Tasks still profiling have not arrived, nor has a task whose
// gpuTypes no node carries (its message says so: GpuTypesMissing). Each node
// carries its GPU type and memory (NodeCapacity), each task its gpuTypes.
engine::WorldView BuildWorldView(const WorldInput& in);

// Why a task restricted to `types` (spec.tasks[].gpuTypes) can run on none of
// `nodes`, naming the types they have; "" when one of them has a listed type
// (or the task lists none).
std::string GpuTypesMissing(const std::vector<std::string>& types,
                            const std::vector<NodeCapacity>& nodes);

// Why none of a task's profiled configurations can run on any of `nodes`, for
// the GPU memory each needs per device against what the nodes' GPUs have
// (kGpuMemoryLabel; an unlabelled node holds any), naming the smallest need
// and the fix; "" when one fits some node (its GPUs, type and memory), or the
// task has no configuration yet. Such a task stays out of the plan, which
// would otherwise be refused for every task of the job.
std::string ConfigsNeverFit(const engine::TaskConfigs& tc, const api::TaskSpec& task,
                            const std::vector<NodeCapacity>& nodes);

// A live gang's measured throughput over its configuration's profiled one:
// rank 0's samples/s (its data-parallel share) times the replicas the
// template's ranks form; nullopt until gang `generation` has reported past
// its first steps.
std::optional<double> MeasuredSpeedFactor(const TaskProgress& progress, int generation,
                                          const planner::Config& config);

// ---- the reconciler ---------------------------------------------------------

struct ReconcilerOptions {
  std::string profile_namespace = "orrery-system";  // where orrery-profiles lives
  engine::EngineOptions engine;
  GangOptions gang;
  std::string device = "cuda";  // cpu for CPU-only nodes (and backend gloo)
  std::string worker_image;     // used when the spec keeps the default image
  double gang_timeout_s = 600;  // a gang Pending longer is torn down and re-planned
  // A node NotReady or unreachable this long loses its gangs (they are torn
  // down and re-planned); a shorter blip tears nothing down. Kubernetes' own
  // default eviction after a node goes NotReady is 300 s.
  double node_lost_grace_s = 300;
  double expectation_timeout_s = 300;
  int max_restarts = 5;
  int64_t profile_deadline_s = engine::kProfileDeadlineS;
  // Wall time for condition transitions, RFC 3339; injectable for tests.
  std::function<std::string()> now_rfc3339;
  // Events on the job for `kubectl describe` (launches, teardowns, plans,
  // profiles); null records none. Must outlive the reconciler.
  kube::EventRecorder* events = nullptr;
  // Running gangs' progress as their workers report it (progress.h); null: the
  // status carries progress over unchanged. Must outlive the reconciler.
  const ProgressBoard* progress = nullptr;
  // Solver time, re-plans, profiling runs and rescales (metrics.h); null records
  // none. Must outlive the reconciler.
  metrics::OperatorMetrics* metrics = nullptr;
  // The cluster-wide allocation across jobs (engine/cluster_share.h): each job
  // plans and launches within its share of the cluster; false: each job takes
  // what is free, first come first served.
  bool cluster_shares = true;
  engine::ClusterShareOptions shares;
  // Asks for a reconcile of another job (its share changed); the manager sets
  // it to its work queue. Empty: other jobs see their new share on their next
  // pass.
  std::function<void(const std::string&)> enqueue;
  // The node label whose value is a node's GPU type (NodeGpuOf): the planner's
  // pools, and what spec.tasks[].gpuTypes names.
  std::string gpu_type_label = kDefaultGpuTypeLabel;
  // Relative throughput by GPU type (e.g. {"NVIDIA-H100-80GB-HBM3": 3,
  // "NVIDIA-L4": 1}): a task profiled on one type is estimated on the others
  // (ConfigsFromProfiles). Empty: measured, one trial per task and other type.
  std::map<std::string, double> gpu_type_speeds = {};
  // What of a labelled GPU's memory the planner leaves to CUDA's context,
  // NCCL and the caching allocator (NodeCapacity::gpu_memory_gib).
  engine::GpuMemoryReserve gpu_memory_reserve = {};
};

struct Caches {
  const kube::Store* jobs = nullptr;
  const kube::Store* pods = nullptr;
  const kube::Store* nodes = nullptr;
  const kube::Store* configmaps = nullptr;
  // Several watched namespaces, one job informer each (namespaced RBAC); a job
  // is looked up in `jobs` first, then in these.
  std::vector<const kube::Store*> more_jobs = {};
  // Kueue's Workloads and ResourceFlavors (kueue.h); null workloads: Kueue's
  // API is not served, and a job labelled for a queue waits with a condition.
  KueueCaches kueue = {};

  kube::ObjectPtr Job(const std::string& key) const;
};

class Reconciler {
 public:
  // `client`, the caches and `clock` must outlive the reconciler. The clock gives
  // the engine's time, gang timeouts and expectation expiry.
  Reconciler(kube::Client* client, Caches caches, ReconcilerOptions options, const Clock* clock);
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;

  // Converges one job ("ns/name"). Safe to call from several workers at once
  // for different keys (they run in parallel); the work queue never hands one
  // key to two workers.
  StatusOr<kube::Result> Reconcile(const std::string& key);

  // How many solves the job's engine ran (0 when unknown), for tests and metrics.
  int Solves(const std::string& key) const;
  // The job's engine journal (engine/journal.h): every launch and stop its
  // steps issued and what this reconciler did; empty when unknown. Call it
  // while no reconcile of the job runs (tests).
  engine::ActionJournal Journal(const std::string& key) const;

 private:
  struct Expected {
    LiveGang gang;
    TimePoint created;
    std::string job_label;   // orrery.dev/job of its pods
    std::string gang_label;  // orrery.dev/gang of its pods
  };
  struct JobState {
    std::string uid;
    // The engine holds the adopted plan and what the job looked like when it
    // last planned (its triggers are what differs now).
    std::unique_ptr<engine::Engine> engine;
    bool replan_now = false;  // a gang's placement failed: the next step plans again
    // Measured over profiled throughput by task, kept across the task's gangs.
    std::map<std::string, double> speed;
    std::map<std::string, Expected> expected;        // by task
    std::map<std::string, TimePoint> pending_since;  // gang label -> first seen Pending
    std::map<std::string, int> last_generation;      // by task: newest created
    // Tasks torn down for a rescale: when, and the generation torn down; the
    // rescale ends when a newer generation of the task runs.
    std::map<std::string, std::pair<TimePoint, int>> rescaling;
    // Gangs (labels) this reconciler stopped because a plan moved them: their
    // ranks end as "deleted", which is neither a failure nor a restart to limit.
    std::set<std::string> replanned;
    // The cluster share's last decision applied, and the gangs it stopped (task
    // -> generation): gone from the plan's world until their ranks are gone.
    int applied_share_decision = 0;
    std::map<std::string, int> share_stopped;
    std::optional<api::PlanStatus> plan_status;
    double plan_ends_at = 0;  // the adopted plan's makespan, engine time (for the ETA)
    // Tasks whose pods the API server rejected (422), with the generation of
    // the spec rejected and the server's message: not launched again until the
    // spec changes. Rebuilt from the status after a restart.
    std::map<std::string, std::pair<int64_t, std::string>> pod_rejected;
    // Profiles this reconciler wrote that the ConfigMap cache may not show yet:
    // without them a pass could start the same trial again.
    ProfileTable harvested;
    // The last Kueue decision told in an event (reason, message): a pass that
    // reads the job's status from a cache older than its own write would tell
    // it again.
    std::pair<std::string, std::string> kueue_event;
  };
  struct JobContext;

  JobState* StateFor(const std::string& key, const api::ModelSelectionJob& job);
  void Drop(const std::string& key);  // deleted: its state, claims and share go
  void LeaveShares(const std::string& key);
  std::string NowText() const;
  void Event(const JobContext& ctx, kube::EventType type, const std::string& reason,
             const std::string& action, const std::string& note);
  void Event(const api::ObjectMeta& job, kube::EventType type, const std::string& reason,
             const std::string& action, const std::string& note);
  double NowSeconds() const;

  Status HarvestProfiles(JobContext& ctx, ProfileTable* table);
  Status TimeOutPendingTrial(JobContext& ctx, const std::string& hash,
                             const std::vector<Json>& pods);
  Status EnsureProfileGangs(JobContext& ctx, const ProfileTable& table);
  Status MergeIntoConfigMap(const std::vector<CachedProfile>& profiles, ProfileTable* table);
  Status DeleteGang(const std::string& ns, const std::string& service,
                    const std::vector<std::string>& pods);
  Status DeleteRefusedGang(const std::string& ns, const Gang& gang);
  Status CreateObjects(const std::string& ns, const Json& service, const std::vector<Json>& pods);
  Status WriteStatus(JobContext& ctx, const std::map<std::string, TaskObservation>& observed,
                     const std::set<std::string>& profiling);
  StatusOr<kube::Result> Suspend(JobContext& ctx);
  // A job labelled for a Kueue queue (kueue.h): false when Kueue has not
  // admitted it (the pass then holds it as suspended); admitted, the job's
  // resources in ctx are those of the admission.
  StatusOr<bool> AdmittedByKueue(JobContext& ctx);
  // Creates the gang of task `task_index` in `config` on `placement` (a node
  // per rank) with the next generation, and records the expectation.
  Status ForbiddenLaunch(JobContext& ctx, const std::string& task, const Gang& gang,
                         const Status& refused);
  Status LaunchGang(JobContext& ctx, size_t task_index, const TaskConfigs& configs, int config,
                    const std::vector<std::string>& placement,
                    const std::map<std::string, TaskObservation>& observed, bool* launched_before);

  // Reconcile's phases, in order; each reads and extends the pass's JobContext.
  StatusOr<kube::Result> RejectInvalid(const std::string& key, const kube::Object& object,
                                       const Status& why, const char* reason = "InvalidSpec");
  StatusOr<kube::Result> RejectPods(JobContext& ctx, const kube::Object& object, const Status& why);
  void ReadCluster(JobContext& ctx);
  bool RefusedForThisSpec(JobContext& ctx, const std::string& task);
  Status ReadProfiles(JobContext& ctx, ProfileTable* table);
  void CountCapacity(JobContext& ctx);
  engine::ProfileRoom TrialRoom(JobContext& ctx, std::map<std::string, int>* trial_free,
                                int* trial_gpus);
  std::vector<engine::ProfileWant> ProfileWants(JobContext& ctx, const ProfileTable& table,
                                                std::map<std::string, ProfileRequest>* requests);
  Status RequestProfiles(JobContext& ctx, const ProfileTable& table);
  void ObserveGangs(JobContext& ctx);
  Status ObserveTask(JobContext& ctx, size_t task_index);
  Status TearDownFailedGang(JobContext& ctx, const std::string& task, const GangObservation& g);
  void SettleStoppedGangs(JobContext& ctx);
  void BuildWorld(JobContext& ctx);
  Status ApplyClusterShare(JobContext& ctx);
  Status StopShrunkGangs(JobContext& ctx, const engine::JobShare& share,
                         const std::vector<engine::StopAction>& stops);
  void StepEngine(JobContext& ctx);
  Status ApplyStops(JobContext& ctx);
  Status ApplyLaunches(JobContext& ctx);
  StatusOr<kube::Result> FinishPass(JobContext& ctx);
  void RescaleStarted(JobContext& ctx, const std::string& task, int generation, const char* reason);
  Status StopForRescale(JobContext& ctx, const std::string& task, const GangObservation& g,
                        const char* reason);

  kube::Client* client_;
  Caches caches_;
  ReconcilerOptions options_;
  const Clock* clock_;
  mutable std::mutex mu_;  // guards jobs_ (the map, not each state)
  std::map<std::string, std::unique_ptr<JobState>> jobs_;
  // Reconciles of different jobs run in parallel. Each plans over its own
  // snapshot of the caches plus the GPUs other jobs claimed for gangs the
  // snapshot does not show yet; a launch claims its GPUs before it creates
  // pods, so two jobs never take the same free GPUs (gpu_claims.h).
  GpuClaims claims_;
  std::mutex shares_mu_;          // guards shares_
  engine::ClusterShares shares_;  // the cluster-wide allocation across jobs
};

}  // namespace orrery::controller
