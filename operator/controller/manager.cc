#include "operator/controller/manager.h"

#include <chrono>
#include <map>

#include "common/log.h"
#include "operator/api/codec.h"
#include "operator/api/schema.h"
#include "operator/controller/names.h"
#include "operator/kube/api_error.h"

namespace orrery::controller {

// ---- InstrumentedClient ------------------------------------------------------

void InstrumentedClient::Count(const char* verb, const Status& status) {
  if (metrics_ == nullptr) return;
  std::string code = std::string(verb) == "POST" ? "201" : "200";
  if (!status.ok()) {
    int http = kube::HttpCodeOf(status);
    code = http > 0 ? std::to_string(http) : "<error>";
  }
  metrics_->api_requests.Add({{"verb", verb}, {"code", code}}).Increment();
}

StatusOr<kube::Object> InstrumentedClient::Get(const kube::Resource& r, const std::string& ns,
                                               const std::string& name) {
  auto out = inner_->Get(r, ns, name);
  Count("GET", out.status());
  return out;
}
StatusOr<kube::Object> InstrumentedClient::List(const kube::Resource& r, const std::string& ns,
                                                const kube::ListOptions& options) {
  auto out = inner_->List(r, ns, options);
  Count("LIST", out.status());
  return out;
}
StatusOr<kube::Object> InstrumentedClient::Create(const kube::Resource& r, const std::string& ns,
                                                  const kube::Object& obj) {
  auto out = inner_->Create(r, ns, obj);
  Count("POST", out.status());
  return out;
}
StatusOr<kube::Object> InstrumentedClient::Update(const kube::Resource& r, const std::string& ns,
                                                  const kube::Object& obj) {
  auto out = inner_->Update(r, ns, obj);
  Count("PUT", out.status());
  return out;
}
StatusOr<kube::Object> InstrumentedClient::UpdateStatus(const kube::Resource& r,
                                                        const std::string& ns,
                                                        const kube::Object& obj) {
  auto out = inner_->UpdateStatus(r, ns, obj);
  Count("PUT", out.status());
  return out;
}
Status InstrumentedClient::Delete(const kube::Resource& r, const std::string& ns,
                                  const std::string& name, const kube::DeleteOptions& options) {
  Status out = inner_->Delete(r, ns, name, options);
  Count("DELETE", out);
  return out;
}
StatusOr<kube::Object> InstrumentedClient::Patch(const kube::Resource& r, const std::string& ns,
                                                 const std::string& name, kube::PatchType type,
                                                 const kube::Object& patch,
                                                 const kube::PatchOptions& options) {
  auto out = inner_->Patch(r, ns, name, type, patch, options);
  Count("PATCH", out.status());
  return out;
}
StatusOr<std::unique_ptr<kube::WatchStream>> InstrumentedClient::Watch(
    const kube::Resource& r, const std::string& ns, const kube::ListOptions& options) {
  auto out = inner_->Watch(r, ns, options);
  Count("WATCH", out.status());
  return out;
}

// ---- Manager -----------------------------------------------------------------

namespace {

constexpr const char* kJobKind = "ModelSelectionJob";

// Reconcile durations: milliseconds when nothing changes, seconds when a solve runs.
const prometheus::Histogram::BucketBoundaries& ReconcileBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return kBuckets;
}

// What about a node changes what a job may plan.
std::string NodePlanningState(const kube::Object& node, const std::string& gpu_resource) {
  std::string s = NodeReady(node) ? "ready" : "notready";
  s += node["spec"].value("unschedulable", false) ? "/cordoned" : "";
  const kube::Object& alloc = node["status"]["allocatable"];
  if (alloc.is_object() && alloc.contains(gpu_resource)) s += "/" + alloc[gpu_resource].dump();
  return s;
}

// Label values in lower case, as the dashboard queries them ("succeeded").
std::string Lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Manager::Manager(kube::Client* client, ManagerOptions options, metrics::OperatorMetrics* metrics,
                 const Clock* clock)
    : client_(client),
      options_(std::move(options)),
      metrics_(metrics),
      clock_(clock),
      namespaces_(options_.namespaces.begin(), options_.namespaces.end()) {}

Manager::~Manager() { Stop(); }

bool Manager::Watched(const std::string& ns) const {
  if (!namespaces_.empty()) return namespaces_.count(ns) > 0;
  // Watching every namespace still leaves the system ones alone: no worker pod
  // is ever created there (as Kueue's default namespace selector does).
  return !IsSystemNamespace(ns);
}

bool IsSystemNamespace(const std::string& ns) {
  return ns == "kube-system" || ns == "kube-public" || ns == "kube-node-lease";
}

std::vector<kube::Informer*> Manager::Informers() const {
  std::vector<kube::Informer*> all;
  for (const auto& j : jobs_) all.push_back(j.get());
  for (const auto* i : {&pods_, &nodes_, &configmaps_, &workloads_, &flavors_}) {
    if (*i) all.push_back(i->get());
  }
  return all;
}

void Manager::EnqueueAllJobs() {
  if (!controller_) return;
  for (const auto& informer : jobs_) {
    for (const std::string& key : informer->store().Keys()) {
      std::string ns = key.substr(0, key.find('/'));
      if (Watched(ns)) controller_->queue().Add(key);
    }
  }
}

// Kueue's Workloads (a job's own wakes the job) and ResourceFlavors (a flavor's
// labels and tolerations go into admitted jobs' pods), when Kueue is served.
Status Manager::StartKueueInformers(Clock* clock) {
  if (options_.kueue == "false") return OkStatus();
  kube::ListOptions probe;
  probe.limit = 1;
  auto listed = client_->List(Workloads(), "", probe);
  if (!listed.ok()) {
    if (options_.kueue == "auto" && kube::IsNotFound(listed.status())) {
      Log(LogLevel::kInfo, "Kueue is not served: jobs labelled for a queue will wait",
          {{"resource", Workloads().Name() + "/" + Workloads().version}});
      return OkStatus();
    }
    return Status(listed.status().code(),
                  "--kueue=" + options_.kueue + ": cannot list " + Workloads().Name() + " (" +
                      listed.status().message() +
                      "): install Kueue, grant the operator list/watch on workloads, "
                      "or run with --kueue=false");
  }
  workloads_ =
      std::make_unique<kube::Informer>(client_, Workloads(), kube::InformerOptions{}, clock);
  flavors_ =
      std::make_unique<kube::Informer>(client_, ResourceFlavors(), kube::InformerOptions{}, clock);
  Log(LogLevel::kInfo, "Watching Kueue's Workloads and ResourceFlavors", {});
  return OkStatus();
}

// The informers: MSJs (one per named namespace, or one over all), pods,
// nodes and the shared profile ConfigMap.
void Manager::MakeInformers(Clock* clock) {
  // Named namespaces: one job informer each, so a Role in each suffices; none:
  // one informer over all namespaces, filtered by Watched().
  kube::InformerOptions job_options;
  job_options.resync_period = options_.resync_period;
  kube::InformerOptions profile_options;
  profile_options.ns = options_.reconciler.profile_namespace;
  profile_options.field_selector = std::string("metadata.name=") + kProfileConfigMapName;
  std::vector<std::string> job_namespaces(namespaces_.begin(), namespaces_.end());
  if (job_namespaces.empty()) job_namespaces.emplace_back();
  jobs_.clear();
  for (const std::string& ns : job_namespaces) {
    job_options.ns = ns;
    jobs_.push_back(
        std::make_unique<kube::Informer>(client_, ModelSelectionJobs(), job_options, clock));
  }
  pods_ = std::make_unique<kube::Informer>(client_, kube::Pods(), kube::InformerOptions{}, clock);
  nodes_ = std::make_unique<kube::Informer>(client_, kube::Nodes(), kube::InformerOptions{}, clock);
  configmaps_ =
      std::make_unique<kube::Informer>(client_, kube::ConfigMaps(), profile_options, clock);
}

// The reconciler over the informers' caches, with the event recorder, the
// progress board, the metrics and the re-enqueue hook wired in.
Status Manager::MakeReconciler(Clock* clock) {
  kube::EventRecorderOptions event_options;
  event_options.reporting_instance = options_.identity;
  events_ = std::make_unique<kube::EventRecorder>(client_, event_options, clock);
  ReconcilerOptions ro = options_.reconciler;
  ro.events = events_.get();
  ro.progress = &progress_;
  ro.metrics = metrics_;
  // A job whose cluster share another job's pass changed plans again now.
  ro.enqueue = [this](const std::string& key) {
    if (controller_) controller_->queue().Add(key);
  };
  Caches caches{&jobs_.front()->store(), &pods_->store(), &nodes_->store(), &configmaps_->store()};
  for (size_t i = 1; i < jobs_.size(); ++i) caches.more_jobs.push_back(&jobs_[i]->store());
  ORRERY_RETURN_IF_ERROR(StartKueueInformers(clock));
  if (workloads_) caches.kueue = {&workloads_->store(), &flavors_->store()};
  reconciler_ = std::make_unique<Reconciler>(client_, caches, ro, clock_);
  return OkStatus();
}

// One reconcile of a watched job, timed and counted.
StatusOr<kube::Result> Manager::ReconcileOne(const std::string& key) {
  std::string ns = key.substr(0, key.find('/'));
  if (!Watched(ns)) return kube::Result{};
  auto start = std::chrono::steady_clock::now();
  StatusOr<kube::Result> r = reconciler_->Reconcile(key);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics_ != nullptr) {
    std::string result = r.ok()
                             ? (r->requeue || r->requeue_after.count() > 0 ? "requeue" : "success")
                             : (kube::IsConflict(r.status()) ? "conflict" : "error");
    metrics_->reconciles.Add({{"controller", "modelselectionjob"}, {"result", result}}).Increment();
    metrics_->reconcile_seconds.Add({{"controller", "modelselectionjob"}}, ReconcileBuckets())
        .Observe(seconds);
  }
  if (!r.ok() && !kube::IsConflict(r.status())) {
    Log(LogLevel::kWarning, "Reconcile failed", {{"msj", key}, {"error", r.status().ToString()}});
  }
  return r;
}

// What enqueues a job: its own events and its pods' and Workloads'; every job
// on a node's planning change, a ResourceFlavor's or the profile ConfigMap's.
void Manager::AddEventHandlers() {
  kube::EventHandlers job_handlers = controller_->EnqueueHandlers();
  for (const auto& informer : jobs_) informer->AddEventHandler(job_handlers);
  pods_->AddEventHandler(controller_->EnqueueOwnerHandlers(kJobKind));
  std::string gpu = options_.gpu_resource;
  nodes_->AddEventHandler({[this](const kube::ObjectPtr&) { EnqueueAllJobs(); },
                           [this, gpu](const kube::ObjectPtr& old_obj, const kube::ObjectPtr& obj) {
                             if (NodePlanningState(*old_obj, gpu) != NodePlanningState(*obj, gpu))
                               EnqueueAllJobs();
                           },
                           [this](const kube::ObjectPtr&, bool) { EnqueueAllJobs(); }});
  kube::EventHandlers every_job = {
      [this](const kube::ObjectPtr&) { EnqueueAllJobs(); },
      [this](const kube::ObjectPtr&, const kube::ObjectPtr&) { EnqueueAllJobs(); },
      [this](const kube::ObjectPtr&, bool) { EnqueueAllJobs(); }};
  if (workloads_) {
    workloads_->AddEventHandler(controller_->EnqueueOwnerHandlers(kJobKind));
    flavors_->AddEventHandler(every_job);
  }
  configmaps_->AddEventHandler(every_job);
}

// Starts every informer and waits for their caches (or `stop`, or the sync
// timeout with an error naming the cache and the RBAC it needs).
Status Manager::SyncInformers(const std::atomic<bool>& stop) {
  for (kube::Informer* i : Informers()) i->Start();
  auto deadline = std::chrono::steady_clock::now() + options_.sync_timeout;
  for (kube::Informer* i : Informers()) {
    while (!i->HasSynced()) {
      if (stop.load()) return OkStatus();
      if (std::chrono::steady_clock::now() > deadline) {
        return DeadlineExceededError("the " + i->resource().Name() +
                                     " cache did not sync; check the API server and the "
                                     "operator's RBAC (list and watch " +
                                     i->resource().Name() + ")");
      }
      i->WaitForSync(std::chrono::milliseconds(200));
    }
  }
  return OkStatus();
}

Status Manager::Run(const std::atomic<bool>& stop) {
  Clock* mutable_clock = const_cast<Clock*>(clock_);
  MakeInformers(mutable_clock);
  ORRERY_RETURN_IF_ERROR(MakeReconciler(mutable_clock));
  controller_ = std::make_unique<kube::Controller>(
      "modelselectionjob", [this](const std::string& key) { return ReconcileOne(key); },
      options_.workers, mutable_clock);
  AddEventHandlers();
  ORRERY_RETURN_IF_ERROR(SyncInformers(stop));
  if (stop.load()) return OkStatus();
  controller_->Start();
  scraper_ = std::make_unique<ProgressScraper>(
      &pods_->store(), &progress_,
      [this](const std::string& job) { controller_->queue().Add(job); }, options_.progress);
  scraper_->Start();
  EnqueueAllJobs();
  running_.store(true);
  if (metrics_ != nullptr) metrics_thread_ = std::thread([this] { MetricsLoop(); });
  return OkStatus();
}

void Manager::Stop() {
  if (stopped_.exchange(true)) return;
  running_.store(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (metrics_thread_.joinable()) metrics_thread_.join();
  if (scraper_) scraper_->Stop();
  if (controller_) controller_->Stop();
  for (kube::Informer* i : Informers()) i->Stop();
}

std::string Manager::NotReadyReason() const {
  if (running_.load()) return "";
  if (jobs_.empty()) return "starting";
  for (const kube::Informer* i : Informers()) {
    if (!i->HasSynced()) return "waiting for the " + i->resource().Name() + " cache to sync";
  }
  return stopped_.load() ? "stopping" : "starting workers";
}

void Manager::MetricsLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_.load()) {
    lock.unlock();
    SampleMetrics();
    lock.lock();
    cv_.wait_for(lock, options_.metrics_period, [this] { return stopped_.load(); });
  }
}

void Manager::SampleMetrics() {
  metrics::OperatorMetrics& m = *metrics_;
  kube::WorkQueue& queue = controller_->queue();
  m.queue_depth.Add({{"queue", "modelselectionjob"}})
      .Set(static_cast<double>(queue.Len() + queue.NumWaiting()));

  // Cluster GPUs: allocatable on Ready nodes, held by live pods there.
  std::map<std::string, int> allocatable;
  for (const kube::ObjectPtr& n : nodes_->store().List()) {
    if (!NodeReady(*n)) continue;
    const kube::Object& a = (*n)["status"]["allocatable"];
    if (!a.is_object() || !a.contains(options_.gpu_resource)) continue;
    const kube::Object& v = a[options_.gpu_resource];
    int gpus = 0;
    try {
      gpus = v.is_string() ? std::stoi(v.get<std::string>()) : v.get<int>();
    } catch (const std::exception&) {
      gpus = 0;
    }
    allocatable[(*n)["metadata"].value("name", "")] = gpus;
  }
  int total = 0;
  for (const auto& entry : allocatable) total += entry.second;
  int held = 0;
  std::map<std::string, int> held_by_job;
  for (const kube::ObjectPtr& p : pods_->store().List()) {
    if (PodFinished(*p)) continue;
    int g = PodGpuRequest(*p, options_.gpu_resource);
    if (g == 0) continue;
    if (allocatable.count(PodNode(*p)) > 0) held += g;
    std::string owner = kube::ControllerOwnerKey(*p, kJobKind);
    if (!owner.empty()) held_by_job[owner] += g;
  }
  m.cluster_gpus.Add({{"state", "allocatable"}}).Set(total);
  m.cluster_gpus.Add({{"state", "held"}}).Set(held);
  m.cluster_gpus.Add({{"state", "idle"}}).Set(total > held ? total - held : 0);

  // Jobs by phase; per job: tasks by state, GPUs planned and held, the plan.
  std::map<std::string, int> phases;
  for (std::string_view p : api::EnumNames<api::Phase>::kNames) phases[Lower(p)] = 0;
  std::set<std::string> seen;
  std::vector<kube::ObjectPtr> jobs;
  for (const auto& informer : jobs_) {
    for (kube::ObjectPtr& j : informer->store().List()) jobs.push_back(std::move(j));
  }
  for (const kube::ObjectPtr& j : jobs) {
    std::string key = kube::KeyOf(*j);
    if (!Watched(key.substr(0, key.find('/')))) continue;
    seen.insert(key);
    api::ModelSelectionJobStatus status;
    std::vector<api::FieldError> errors;
    if (j->contains("status")) {
      api::DecodeStatus(Json::parse((*j)["status"].dump()), "status", &status, &errors);
    }
    ++phases[Lower(api::EnumName(status.phase))];
    std::map<std::string, int> states;
    for (std::string_view s : api::EnumNames<api::TaskState>::kNames) states[Lower(s)] = 0;
    int planned = 0;
    for (const api::TaskStatus& t : status.tasks) {
      ++states[Lower(api::EnumName(t.state))];
      bool active = t.state == api::TaskState::kRunning || t.state == api::TaskState::kRescaling ||
                    t.state == api::TaskState::kQueued;
      if (active && t.config) planned += t.config->gpus;
    }
    for (const auto& [state, n] : states) m.tasks.Add({{"msj", key}, {"state", state}}).Set(n);
    m.gpus_planned.Add({{"msj", key}}).Set(planned);
    m.gpus_held.Add({{"msj", key}}).Set(held_by_job[key]);
    if (status.plan) {
      m.plan_gap.Add({{"msj", key}}).Set(status.plan->gap);
      m.plan_makespan_seconds.Add({{"msj", key}}).Set(status.plan->makespan_seconds);
      m.plan_lower_bound_seconds.Add({{"msj", key}}).Set(status.plan->lower_bound_seconds);
    }
  }
  for (const auto& [phase, n] : phases) m.jobs.Add({{"phase", phase}}).Set(n);
  // A deleted job's series go away rather than report its last values forever.
  for (const std::string& gone : sampled_jobs_) {
    if (seen.count(gone) > 0) continue;
    for (std::string_view s : api::EnumNames<api::TaskState>::kNames) {
      m.tasks.Remove(&m.tasks.Add({{"msj", gone}, {"state", Lower(s)}}));
    }
    m.gpus_planned.Remove(&m.gpus_planned.Add({{"msj", gone}}));
    m.gpus_held.Remove(&m.gpus_held.Add({{"msj", gone}}));
    m.gpu_share.Remove(&m.gpu_share.Add({{"msj", gone}}));
    m.plan_gap.Remove(&m.plan_gap.Add({{"msj", gone}}));
    m.plan_makespan_seconds.Remove(&m.plan_makespan_seconds.Add({{"msj", gone}}));
    m.plan_lower_bound_seconds.Remove(&m.plan_lower_bound_seconds.Add({{"msj", gone}}));
  }
  sampled_jobs_ = seen;
}

}  // namespace orrery::controller
