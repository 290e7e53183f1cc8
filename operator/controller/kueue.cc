#include "operator/controller/kueue.h"

#include <algorithm>
#include <map>
#include <vector>

#include "common/log.h"
#include "operator/api/types.h"
#include "operator/controller/names.h"
#include "operator/kube/api_error.h"
#include "operator/kube/store.h"

namespace orrery::controller {

namespace {

using kube::Object;

// Kueue's v1beta2 API, its storage version since 0.15; the CRDs also serve
// v1beta1, but converting between them needs Kueue's conversion webhook.
constexpr const char* kKueueGroup = "kueue.x-k8s.io";
constexpr const char* kKueueVersion = "v1beta2";

const Object* FindCondition(const Object& wl, const std::string& type) {
  if (!wl.contains("status") || !wl["status"].is_object()) return nullptr;
  const Object& s = wl["status"];
  if (!s.contains("conditions") || !s["conditions"].is_array()) return nullptr;
  for (const Object& c : s["conditions"]) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

bool ConditionTrue(const Object& wl, const std::string& type) {
  const Object* c = FindCondition(wl, type);
  return c != nullptr && c->value("status", "") == "True";
}

// Sets condition `type` in the Workload's status as metav1.Condition wants it;
// lastTransitionTime changes only with the status.
void SetCondition(Object* wl, const std::string& type, const std::string& status,
                  const std::string& reason, const std::string& message, const std::string& now) {
  Object& conditions = (*wl)["status"]["conditions"];
  if (!conditions.is_array()) conditions = Object::array();
  const int64_t generation = (*wl)["metadata"].value("generation", int64_t{0});
  for (Object& c : conditions) {
    if (c.value("type", "") != type) continue;
    if (c.value("status", "") != status) c["lastTransitionTime"] = now;
    c["status"] = status;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = generation;
    return;
  }
  conditions.push_back({{"type", type},
                        {"status", status},
                        {"reason", reason},
                        {"message", message},
                        {"observedGeneration", generation},
                        {"lastTransitionTime", now}});
}

// A quantity of whole devices ("4", 4); anything else is 0.
int WholeQuantity(const Object& v) {
  if (v.is_number_integer()) return v.get<int>();
  if (!v.is_string()) return 0;
  const std::string s = v.get<std::string>();
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return 0;
  return std::stoi(s);
}

Object TolerationJson(const api::Toleration& t) {
  Object o = {{"key", t.key}, {"operator", t.operator_}};
  if (!t.value.empty()) o["value"] = t.value;
  if (!t.effect.empty()) o["effect"] = t.effect;
  if (t.toleration_seconds) o["tolerationSeconds"] = *t.toleration_seconds;
  return o;
}

// A Workload's priority as Kueue's job integrations set it: the class and its
// value, or (none) no class and the default priority 0.
void SetPriority(const std::optional<WorkloadPriority>& priority, Object* spec) {
  if (!priority) {
    spec->erase("priorityClassRef");
    (*spec)["priority"] = 0;
    return;
  }
  (*spec)["priorityClassRef"] = {
      {"group", kKueueGroup}, {"kind", "WorkloadPriorityClass"}, {"name", priority->class_name}};
  (*spec)["priority"] = priority->value;
}

}  // namespace

kube::Resource Workloads() { return {kKueueGroup, kKueueVersion, "workloads", true}; }
kube::Resource ResourceFlavors() { return {kKueueGroup, kKueueVersion, "resourceflavors", false}; }
kube::Resource WorkloadPriorityClasses() {
  return {kKueueGroup, kKueueVersion, "workloadpriorityclasses", false};
}

std::string KueueQueueName(const api::ModelSelectionJob& job) {
  auto it = job.metadata.labels.find(kKueueQueueLabel);
  return it == job.metadata.labels.end() ? "" : it->second;
}

Object WorkloadPodSets(const api::ModelSelectionJob& job) {
  const api::ResourcesSpec& r = job.spec.resources;
  Object container = {
      {"name", "worker"},
      {"image", r.image},
      {"resources",
       {{"requests", {{r.gpu_resource_name, "1"}}}, {"limits", {{r.gpu_resource_name, "1"}}}}}};
  Object pod_spec = {{"containers", Object::array({container})}, {"restartPolicy", "Never"}};
  if (!r.node_selector.empty()) pod_spec["nodeSelector"] = r.node_selector;
  if (!r.tolerations.empty()) {
    Object tolerations = Object::array();
    for (const api::Toleration& t : r.tolerations) tolerations.push_back(TolerationJson(t));
    pod_spec["tolerations"] = tolerations;
  }
  // One pod per GPU: Kueue counts quota in pods' requests, and any GPU count
  // from the smallest task's up to the quota is a layout the planner can use.
  Object pod_set = {
      {"name", kKueuePodSet}, {"count", r.gpu_quota}, {"template", {{"spec", pod_spec}}}};
  const int least = std::max(1, r.gpus_per_task.min);
  if (least < r.gpu_quota) pod_set["minCount"] = least;
  return Object::array({pod_set});
}

std::string WorkloadName(const api::ModelSelectionJob& job) {
  // A job name is at most 63 characters (names.h keeps it a label value), so
  // "msj-" + name + "-" + 5 + "-" + 5 characters stays a valid object name.
  return "msj-" + job.metadata.name + "-" + job.metadata.uid.substr(0, 5) + "-" +
         HashHex(WorkloadPodSets(job).dump(), 5);
}

Object BuildWorkload(const api::ModelSelectionJob& job, const std::string& queue,
                     const std::optional<WorkloadPriority>& priority) {
  Object wl = {{"apiVersion", std::string(kKueueGroup) + "/" + kKueueVersion},
               {"kind", "Workload"},
               {"metadata",
                {{"name", WorkloadName(job)},
                 {"namespace", job.metadata.namespace_},
                 {"labels",
                  {{kManagedByLabel, kManagedByValue}, {kJobLabel, LabelValue(job.metadata.name)}}},
                 {"ownerReferences", Object::array({{{"apiVersion", job.api_version},
                                                     {"kind", job.kind},
                                                     {"name", job.metadata.name},
                                                     {"uid", job.metadata.uid},
                                                     {"controller", true}}})}}},
               {"spec", {{"queueName", queue}, {"podSets", WorkloadPodSets(job)}}}};
  if (priority) SetPriority(priority, &wl["spec"]);
  return wl;
}

KueueAdmission ReadAdmission(const Object& wl, const std::string& gpu_resource) {
  KueueAdmission a;
  a.reserved = ConditionTrue(wl, "QuotaReserved");
  const Object* admission = nullptr;
  if (wl.contains("status") && wl["status"].is_object() && wl["status"].contains("admission") &&
      wl["status"]["admission"].is_object()) {
    admission = &wl["status"]["admission"];
    a.cluster_queue = admission->value("clusterQueue", "");
    if (admission->contains("podSetAssignments") && (*admission)["podSetAssignments"].is_array()) {
      for (const Object& psa : (*admission)["podSetAssignments"]) {
        if (psa.value("name", "") != kKueuePodSet) continue;
        if (psa.contains("flavors") && psa["flavors"].is_object()) {
          for (const auto& [resource, name] : psa["flavors"].items()) {
            if (!name.is_string()) continue;
            if (resource == gpu_resource) a.flavor = name.get<std::string>();
            a.flavors.push_back(name.get<std::string>());
          }
        }
        if (psa.contains("resourceUsage") && psa["resourceUsage"].contains(gpu_resource)) {
          a.gpus = WholeQuantity(psa["resourceUsage"][gpu_resource]);
        } else if (psa.contains("count") && psa["count"].is_number_integer()) {
          a.gpus = psa["count"].get<int>();
        }
      }
    }
  }
  std::sort(a.flavors.begin(), a.flavors.end());
  a.flavors.erase(std::unique(a.flavors.begin(), a.flavors.end()), a.flavors.end());
  if (wl.contains("status") && wl["status"].is_object() &&
      wl["status"].contains("reclaimablePods") && wl["status"]["reclaimablePods"].is_array()) {
    for (const Object& rp : wl["status"]["reclaimablePods"]) {
      if (rp.value("name", "") == kKueuePodSet) a.reclaimable = rp.value("count", 0);
    }
  }
  auto words = [&a](const Object* c) {
    if (c == nullptr) return;
    a.reason = c->value("reason", "");
    a.message = c->value("message", "");
  };
  if (ConditionTrue(wl, "Finished")) {
    a.state = KueueAdmission::State::kFinished;
    words(FindCondition(wl, "Finished"));
  } else if (ConditionTrue(wl, "Evicted")) {
    a.state = KueueAdmission::State::kEvicted;
    words(FindCondition(wl, "Evicted"));
  } else if (a.reserved && ConditionTrue(wl, "Admitted") && admission != nullptr) {
    a.state = KueueAdmission::State::kAdmitted;
    words(FindCondition(wl, "Admitted"));
  } else {
    a.state = KueueAdmission::State::kPending;
    words(FindCondition(wl, "QuotaReserved"));
  }
  return a;
}

namespace {

// Adds one flavor's node labels to the selector; `from` says, by key, which
// flavor set a label (empty: the job's own spec).
Status AddFlavorLabels(const Object& flavor, std::map<std::string, std::string>* from,
                       api::ResourcesSpec* resources) {
  const std::string name =
      flavor.contains("metadata") ? flavor["metadata"].value("name", "") : std::string();
  const Object& spec = flavor["spec"];
  if (!spec.contains("nodeLabels") || !spec["nodeLabels"].is_object()) return OkStatus();
  for (const auto& [key, value] : spec["nodeLabels"].items()) {
    if (!value.is_string()) continue;
    auto [it, added] = resources->node_selector.emplace(key, value.get<std::string>());
    if (added) {
      (*from)[key] = name;
      continue;
    }
    if (it->second == value.get<std::string>()) continue;
    const std::string other = (*from)[key];
    std::string message;
    if (other.empty()) {
      message = "spec.resources.nodeSelector[" + key + "] is \"";
    } else {
      message = "ResourceFlavor " + other;
      message += " sets " + key + "=\"";
    }
    message += it->second + "\" but Kueue admitted the job to ResourceFlavor ";
    message += name;
    message += ", whose nodes have " + key;
    message += "=" + value.get<std::string>();
    message += other.empty()
                   ? " (drop the key from nodeSelector or use a LocalQueue whose flavors match)"
                   : " (no node has both: give the ClusterQueue's resource groups flavors whose "
                     "nodeLabels agree)";
    return InvalidArgumentError(message);
  }
  return OkStatus();
}

void AddFlavorTolerations(const Object& spec, api::ResourcesSpec* resources) {
  if (!spec.contains("tolerations") || !spec["tolerations"].is_array()) return;
  for (const Object& t : spec["tolerations"]) {
    api::Toleration tol;
    tol.key = t.value("key", "");
    tol.operator_ = t.value("operator", "Equal");
    tol.value = t.value("value", "");
    tol.effect = t.value("effect", "");
    if (t.contains("tolerationSeconds") && t["tolerationSeconds"].is_number_integer()) {
      tol.toleration_seconds = t["tolerationSeconds"].get<int64_t>();
    }
    if (std::find(resources->tolerations.begin(), resources->tolerations.end(), tol) ==
        resources->tolerations.end()) {
      resources->tolerations.push_back(tol);
    }
  }
}

}  // namespace

Status ApplyAdmission(const KueueAdmission& admission, const std::vector<Object>& flavors,
                      api::ResourcesSpec* resources) {
  resources->gpu_quota =
      std::min(resources->gpu_quota, std::max(0, admission.gpus - admission.reclaimable));
  std::map<std::string, std::string> from;  // node label -> the flavor that set it
  for (const Object& flavor : flavors) {
    if (!flavor.contains("spec") || !flavor["spec"].is_object()) continue;
    ORRERY_RETURN_IF_ERROR(AddFlavorLabels(flavor, &from, resources));
    AddFlavorTolerations(flavor["spec"], resources);
  }
  return OkStatus();
}

api::Condition AdmissionCondition(const KueueAdmission& a, const std::string& queue,
                                  int64_t generation) {
  api::Condition c;
  c.type = kKueueCondition;
  c.observed_generation = generation;
  switch (a.state) {
    case KueueAdmission::State::kAdmitted:
    case KueueAdmission::State::kFinished:
      c.status = "True";
      c.reason = a.state == KueueAdmission::State::kFinished ? "Finished" : "Admitted";
      c.message = "Admitted to ClusterQueue " + a.cluster_queue + " with " +
                  std::to_string(a.gpus) + (a.gpus == 1 ? " GPU" : " GPUs") +
                  (a.flavor.empty() ? "" : " of ResourceFlavor " + a.flavor);
      break;
    case KueueAdmission::State::kEvicted:
      c.status = "False";
      c.reason = "Evicted";
      c.message = "Evicted by Kueue (" + (a.reason.empty() ? std::string("no reason") : a.reason) +
                  ")" + (a.message.empty() ? "" : ": " + a.message) +
                  "; its gangs checkpoint and it waits in LocalQueue " + queue;
      break;
    case KueueAdmission::State::kPending:
      c.status = "False";
      c.reason = "Pending";
      c.message = "Pending in LocalQueue " + queue + (a.message.empty() ? "" : ": " + a.message);
      break;
  }
  return c;
}

Object ClearedReservation(const Object& workload, const std::string& now) {
  Object wl = workload;
  const Object* evicted = FindCondition(workload, "Evicted");
  const std::string reason = evicted != nullptr ? evicted->value("reason", "") : "";
  const std::string message = evicted != nullptr ? evicted->value("message", "") : "";
  // Kueue sets Requeued=True only for these reasons (jobframework reconciler).
  const bool requeued = reason == "Preempted" || reason == "NodeFailures";
  SetCondition(&wl, "Requeued", requeued ? "True" : "False", reason, message, now);
  SetCondition(&wl, "QuotaReserved", "False", "Pending", message, now);
  if (ConditionTrue(workload, "Admitted") || FindCondition(workload, "Admitted") != nullptr) {
    SetCondition(&wl, "Admitted", "False", "NoReservation", "The workload has no reservation", now);
  }
  wl["status"].erase("admission");
  return wl;
}

int ReclaimableGpus(const KueueAdmission& admission, int usable_gpus) {
  if (usable_gpus < 0) return admission.reclaimable;
  const int beyond = std::clamp(admission.gpus - usable_gpus, 0, admission.gpus);
  return std::max(admission.reclaimable, beyond);
}

Object WithReclaimable(const Object& workload, int count) {
  Object wl = workload;
  wl["status"]["reclaimablePods"] = Object::array({{{"name", kKueuePodSet}, {"count", count}}});
  return wl;
}

Object FinishedWorkload(const Object& workload, bool succeeded, const std::string& message,
                        const std::string& now) {
  Object wl = workload;
  SetCondition(&wl, "Finished", "True", succeeded ? "Succeeded" : "Failed", message, now);
  return wl;
}

namespace {

// The priority of the WorkloadPriorityClass the job names, as Kueue's own job
// integrations give it to their Workloads; nullopt when it names none.
StatusOr<std::optional<WorkloadPriority>> PriorityOf(kube::Client* client,
                                                     const api::ModelSelectionJob& job) {
  auto it = job.metadata.labels.find(kKueuePriorityClassLabel);
  if (it == job.metadata.labels.end()) return std::optional<WorkloadPriority>();
  auto wpc = client->Get(WorkloadPriorityClasses(), "", it->second);
  if (!wpc.ok()) return wpc.status();
  WorkloadPriority p;
  p.class_name = it->second;
  p.value = wpc->value("value", 0);
  return std::optional<WorkloadPriority>(p);
}

// Carries an edit of the job's priority-class label to its Workload (Kueue's
// jobframework UpdateWorkloadPriority): when the class the label names is not
// the one the Workload's priorityClassRef names, the Workload gets the
// label's class and that class's value now. Nothing else is touched: a
// spec.priority edited by hand under the same class stays, as does a
// Workload whose priority comes from a scheduling PriorityClass. Returns a
// note for the job's condition when the label cannot be carried over.
StatusOr<std::string> SyncPriority(kube::Client* client, const api::ModelSelectionJob& job,
                                   Object* wl, KueueGateResult* out) {
  const Object& spec = (*wl)["spec"];
  std::string current;
  if (spec.contains("priorityClassRef") && spec["priorityClassRef"].is_object()) {
    const Object& ref = spec["priorityClassRef"];
    if (ref.value("kind", "") != "WorkloadPriorityClass") return std::string();
    current = ref.value("name", "");
  }
  auto label = job.metadata.labels.find(kKueuePriorityClassLabel);
  const std::string wanted = label == job.metadata.labels.end() ? "" : label->second;
  if (wanted == current) return std::string();
  // Kueue's CRD keeps priorityClassRef while the Workload holds quota; the
  // label's removal is carried once it no longer does.
  if (wanted.empty() && ConditionTrue(*wl, "QuotaReserved")) return std::string();
  auto priority = PriorityOf(client, job);
  if (!priority.ok()) {
    if (!kube::IsNotFound(priority.status())) return priority.status();
    return "metadata.labels[" + std::string(kKueuePriorityClassLabel) +
           "] names WorkloadPriorityClass " + wanted +
           ", which does not exist: the Workload keeps " +
           (current.empty() ? std::string("no priority class") : "priority class " + current) +
           " (create it or fix the label)";
  }
  const int64_t before = spec.value("priority", int64_t{0});
  Object updated = *wl;
  SetPriority(*priority, &updated["spec"]);
  auto stored = client->Update(Workloads(), job.metadata.namespace_, updated);
  if (!stored.ok()) return stored.status();
  *wl = *stored;
  const std::string name = (*wl)["metadata"].value("name", "");
  const int64_t after = (*wl)["spec"].value("priority", int64_t{0});
  Log(LogLevel::kInfo, "Updated the Workload's priority",
      {{"msj", job.metadata.namespace_ + "/" + job.metadata.name},
       {"workload", name},
       {"class", wanted},
       {"priority", std::to_string(after)}});
  if (out->event_reason.empty()) {
    out->event_reason = "WorkloadPriorityUpdated";
    out->event_message = "Workload " + name + " now has " +
                         (wanted.empty() ? "no priority class" : "priority class " + wanted) +
                         ", priority " + std::to_string(after) + " (was " +
                         (current.empty() ? "no class" : current) + ", " + std::to_string(before) +
                         ")";
  }
  return std::string();
}

// Moves a Workload that holds no quota to the LocalQueue the job's
// queue-name label names now, as Kueue's jobframework does for a job not yet
// admitted; one that holds quota keeps its queue (Kueue's CRD forbids the
// change then) until its reservation ends.
Status SyncQueue(kube::Client* client, const api::ModelSelectionJob& job, const std::string& queue,
                 Object* wl, KueueGateResult* out) {
  const std::string before = (*wl)["spec"].value("queueName", "");
  if (before == queue || ConditionTrue(*wl, "QuotaReserved")) return OkStatus();
  Object updated = *wl;
  updated["spec"]["queueName"] = queue;
  auto stored = client->Update(Workloads(), job.metadata.namespace_, updated);
  if (!stored.ok()) return stored.status();
  *wl = *stored;
  const std::string name = (*wl)["metadata"].value("name", "");
  Log(LogLevel::kInfo, "Moved the Workload to another LocalQueue",
      {{"msj", job.metadata.namespace_ + "/" + job.metadata.name},
       {"workload", name},
       {"queue", queue}});
  if (out->event_reason.empty()) {
    out->event_reason = "WorkloadQueueChanged";
    out->event_message = "Workload " + name + " now asks LocalQueue " + queue;
    out->event_message += " (was " + before + ")";
  }
  return OkStatus();
}

const api::Condition* StoredCondition(const api::ModelSelectionJob& job) {
  if (!job.status) return nullptr;
  for (const api::Condition& c : job.status->conditions) {
    if (c.type == kKueueCondition) return &c;
  }
  return nullptr;
}

// The job's Workload: from the cache, else created (or read, when another
// pass created it and the cache lags).
StatusOr<Object> EnsureWorkload(kube::Client* client, const KueueCaches& caches,
                                const api::ModelSelectionJob& job, const std::string& queue,
                                KueueGateResult* out) {
  const std::string& ns = job.metadata.namespace_;
  const std::string name = WorkloadName(job);
  if (kube::ObjectPtr cached = caches.workloads->Get(kube::KeyFor(ns, name))) return *cached;
  auto priority = PriorityOf(client, job);
  if (!priority.ok()) {
    if (!kube::IsNotFound(priority.status())) return priority.status();
    return InvalidArgumentError("metadata.labels[" + std::string(kKueuePriorityClassLabel) +
                                "] names WorkloadPriorityClass " +
                                job.metadata.labels.at(kKueuePriorityClassLabel) +
                                ", which does not exist (create it or fix the label)");
  }
  auto created = client->Create(Workloads(), ns, BuildWorkload(job, queue, *priority));
  if (created.ok()) {
    Log(LogLevel::kInfo, "Created Workload",
        {{"msj", ns + "/" + job.metadata.name}, {"workload", name}, {"queue", queue}});
    const std::string note = "created Workload " + name + " asking LocalQueue " + queue + " for " +
                             std::to_string(job.spec.resources.gpu_quota) + " GPUs";
    if (out->event_reason.empty()) {
      out->event_reason = "WorkloadCreated";
      out->event_message = note;
    } else {
      out->event_message += "; " + note;  // replacing an outdated one
    }
    return *created;
  }
  if (!kube::IsAlreadyExists(created.status())) return created.status();
  return client->Get(Workloads(), ns, name);
}

// The job's Workloads other than the one its spec asks for now: left by an
// edit of what the pod sets say (owned by this job object, another name).
std::vector<kube::ObjectPtr> OutdatedWorkloads(const kube::Store& workloads,
                                               const api::ModelSelectionJob& job) {
  const std::string current = WorkloadName(job);
  std::vector<kube::ObjectPtr> outdated;
  for (const kube::ObjectPtr& wl : workloads.List()) {
    const Object& meta = (*wl)["metadata"];
    if (meta.value("namespace", "") != job.metadata.namespace_ ||
        meta.value("name", "") == current || !meta.contains("ownerReferences")) {
      continue;
    }
    for (const Object& owner : meta["ownerReferences"]) {
      if (owner.value("uid", "") == job.metadata.uid) {
        outdated.push_back(wl);
        break;
      }
    }
  }
  return outdated;
}

// What of the job's request differs from the outdated Workload's, in the
// spec's words.
std::string RequestChange(const Object& outdated, const api::ModelSelectionJob& job) {
  const Object now = WorkloadPodSets(job)[0];
  Object before = Object::object();
  if (outdated["spec"].contains("podSets") && outdated["spec"]["podSets"].is_array() &&
      !outdated["spec"]["podSets"].empty()) {
    before = outdated["spec"]["podSets"][0];
  }
  if (before.value("count", 0) != now.value("count", 0)) {
    return "spec.resources.gpuQuota changed from " + std::to_string(before.value("count", 0)) +
           " to " + std::to_string(now.value("count", 0));
  }
  if (before.value("minCount", 0) != now.value("minCount", 0)) {
    return "spec.resources.gpusPerTask.min changed to " +
           std::to_string(std::max(1, job.spec.resources.gpus_per_task.min));
  }
  return "spec.resources changed (nodeSelector, tolerations, image or gpuResourceName)";
}

// Replaces the Workloads an edit left. One that holds quota while pods of the
// job live holds the job (false: its gangs stop as for an eviction, so they
// checkpoint); else it is deleted (its quota goes back to Kueue) and true says
// the gate goes on to create the one the spec asks for.
StatusOr<bool> ReplaceOutdated(kube::Client* client, const api::ModelSelectionJob& job,
                               const std::vector<kube::ObjectPtr>& outdated, int live_pods,
                               const std::string& queue, KueueGateResult* out) {
  const std::string& ns = job.metadata.namespace_;
  for (const kube::ObjectPtr& wl : outdated) {
    const std::string name = (*wl)["metadata"].value("name", "");
    const KueueAdmission a = ReadAdmission(*wl, job.spec.resources.gpu_resource_name);
    const std::string change = RequestChange(*wl, job);
    if (a.reserved && live_pods > 0) {
      out->condition.reason = "WorkloadOutdated";
      std::string& m = out->condition.message;
      m = change + ", but the pod sets of Workload ";
      m += name + " (admitted to ClusterQueue " + a.cluster_queue;
      m += " with " + std::to_string(a.gpus) + " GPUs) cannot change: its gangs checkpoint and ";
      m += "stop, then a new Workload asks LocalQueue " + queue + " again";
      return false;
    }
    Status deleted = client->Delete(Workloads(), ns, name, {});
    if (kube::IsNotFound(deleted)) continue;  // an earlier pass deleted it; the cache lags
    if (!deleted.ok()) return deleted;
    Log(LogLevel::kInfo, "Replaced an outdated Workload",
        {{"msj", ns + "/" + job.metadata.name}, {"workload", name}, {"change", change}});
    out->event_reason = "WorkloadReplaced";
    out->event_message = change + ": deleted Workload ";
    out->event_message += name;
    if (a.reserved)
      out->event_message += " (its quota goes back to ClusterQueue " + a.cluster_queue + ")";
  }
  return true;
}

// Reports the admitted GPUs the job's unfinished tasks cannot use as
// reclaimable pods, so Kueue frees their quota (with an event saying so).
Status GiveBackUnusable(kube::Client* client, const api::ModelSelectionJob& job, const Object& wl,
                        int usable_gpus, KueueAdmission* a, KueueGateResult* out) {
  const int reclaimable = ReclaimableGpus(*a, usable_gpus);
  if (reclaimable <= a->reclaimable) return OkStatus();
  auto stored =
      client->UpdateStatus(Workloads(), job.metadata.namespace_, WithReclaimable(wl, reclaimable));
  if (!stored.ok()) return stored.status();
  Log(LogLevel::kInfo, "Gave GPUs back to Kueue",
      {{"msj", job.metadata.namespace_ + "/" + job.metadata.name},
       {"workload", wl["metadata"].value("name", "")},
       {"reclaimable", std::to_string(reclaimable)}});
  a->reclaimable = reclaimable;
  if (out->event_reason.empty()) {
    out->event_reason = "GpusReclaimable";
    out->event_message = std::to_string(reclaimable) + " of the " + std::to_string(a->gpus) +
                         " GPUs admitted by ClusterQueue " + a->cluster_queue;
    out->event_message +=
        " go back to Kueue: the unfinished tasks use at most " + std::to_string(usable_gpus);
  }
  return OkStatus();
}

// Applies an admission to the job's resources with its flavors from the
// cache. A flavor the cache does not hold (yet) holds a job with no pod left
// (none may start without the flavor's selector and tolerations) and fails
// the pass of one whose gangs run, so they keep running while it is retried.
Status ApplyAdmittedFlavors(const KueueCaches& caches, const KueueAdmission& a, int live_pods,
                            api::ModelSelectionJob* job, KueueGateResult* out) {
  std::vector<Object> flavors;
  for (const std::string& name : a.flavors) {
    const kube::ObjectPtr flavor = caches.flavors != nullptr ? caches.flavors->Get(name) : nullptr;
    if (flavor) {
      flavors.push_back(*flavor);
      continue;
    }
    const std::string message = "Kueue admitted the job to ResourceFlavor " + name +
                                ", which the operator cannot read (yet): its pods need the "
                                "flavor's node labels and tolerations";
    if (live_pods > 0) return UnavailableError(message);
    out->run = false;
    out->condition.status = "False";
    out->condition.reason = "FlavorNotFound";
    out->condition.message =
        message +
        " (it waits; check that the ResourceFlavor exists and that the operator may "
        "list and watch resourceflavors)";
    out->warning = true;
    return OkStatus();
  }
  if (Status s = ApplyAdmission(a, flavors, &job->spec.resources); !s.ok()) {
    out->run = false;
    out->condition.status = "False";
    out->condition.reason = "FlavorConflict";
    out->condition.message = s.message();
    out->warning = true;
  }
  return OkStatus();
}

// Reads the job's Workload (creating it) and what Kueue decided: marks a
// finished job's Workload Finished, applies an admission to the job's
// resources and hands an evicted reservation back once `live_pods` is 0.
Status GateOnWorkload(kube::Client* client, const KueueCaches& caches, api::ModelSelectionJob* job,
                      int live_pods, int usable_gpus, const std::string& now,
                      KueueGateResult* out) {
  const std::string queue = KueueQueueName(*job);
  const auto outdated = OutdatedWorkloads(*caches.workloads, *job);
  if (!outdated.empty()) {
    ORRERY_ASSIGN_OR_RETURN(bool replaced,
                            ReplaceOutdated(client, *job, outdated, live_pods, queue, out));
    if (!replaced) return OkStatus();  // held until the gangs have stopped
  }
  auto wl = EnsureWorkload(client, caches, *job, queue, out);
  if (!wl.ok()) {
    if (wl.status().code() != StatusCode::kInvalidArgument) return wl.status();
    out->condition.reason = "InvalidPriorityClass";
    out->condition.message = wl.status().message();
    out->warning = true;
    return OkStatus();
  }
  ORRERY_RETURN_IF_ERROR(SyncQueue(client, *job, queue, &*wl, out));
  ORRERY_ASSIGN_OR_RETURN(const std::string priority_note, SyncPriority(client, *job, &*wl, out));
  KueueAdmission a = ReadAdmission(*wl, job->spec.resources.gpu_resource_name);
  const bool terminal = job->status && (job->status->phase == api::Phase::kSucceeded ||
                                        job->status->phase == api::Phase::kFailed);
  // A finished job's pods may still be exiting (the job is marked from its
  // workers' last reports, the pods from their processes' ends): the quota
  // goes back only once none of them holds a GPU, as Kueue's own job
  // integrations finish a Workload only when its pods have ended.
  if (terminal && a.state != KueueAdmission::State::kFinished && live_pods == 0) {
    const bool ok = job->status->phase == api::Phase::kSucceeded;
    auto stored = client->UpdateStatus(
        Workloads(), job->metadata.namespace_,
        FinishedWorkload(*wl, ok, ok ? "every task finished" : "the job failed", now));
    if (!stored.ok()) return stored.status();
    a.state = KueueAdmission::State::kFinished;
  }
  out->condition = AdmissionCondition(a, queue, job->metadata.generation);
  if (!priority_note.empty()) {
    out->condition.message += "; " + priority_note;
    out->warning = true;
  }
  out->run = terminal || a.state == KueueAdmission::State::kAdmitted;
  if (a.state == KueueAdmission::State::kAdmitted) {
    ORRERY_RETURN_IF_ERROR(GiveBackUnusable(client, *job, *wl, usable_gpus, &a, out));
    ORRERY_RETURN_IF_ERROR(ApplyAdmittedFlavors(caches, a, live_pods, job, out));
  } else if (a.state == KueueAdmission::State::kEvicted && a.reserved && live_pods == 0) {
    // Stopped: the reservation goes back to Kueue, which queues it again.
    auto stored =
        client->UpdateStatus(Workloads(), job->metadata.namespace_, ClearedReservation(*wl, now));
    if (!stored.ok()) return stored.status();
    Log(LogLevel::kInfo, "Cleared the evicted Workload's reservation",
        {{"msj", job->metadata.namespace_ + "/" + job->metadata.name},
         {"workload", WorkloadName(*job)}});
  }
  return OkStatus();
}

}  // namespace

StatusOr<KueueGateResult> KueueGate(kube::Client* client, const KueueCaches& caches,
                                    api::ModelSelectionJob* job, int live_pods, int usable_gpus,
                                    const std::string& now) {
  const std::string queue = KueueQueueName(*job);
  KueueGateResult out;
  out.condition.type = kKueueCondition;
  out.condition.status = "False";
  out.condition.observed_generation = job->metadata.generation;
  if (caches.workloads == nullptr) {
    out.condition.reason = "KueueNotServed";
    out.condition.message = "labelled " + std::string(kKueueQueueLabel) + "=" + queue +
                            " but the API server does not serve Kueue's Workloads "
                            "(kueue.x-k8s.io/v1beta2): install Kueue and restart the operator, "
                            "or remove the label to run without Kueue";
    out.warning = true;
  } else {
    ORRERY_RETURN_IF_ERROR(GateOnWorkload(client, caches, job, live_pods, usable_gpus, now, &out));
  }
  const api::Condition* before = StoredCondition(*job);
  if (out.event_reason.empty() && (before == nullptr || before->reason != out.condition.reason ||
                                   before->message != out.condition.message)) {
    out.event_reason = out.condition.reason == "Pending" ? "QueuedInKueue" : out.condition.reason;
    out.event_message = out.condition.message;
  }
  if (before != nullptr && before->status == out.condition.status) {
    out.condition.last_transition_time = before->last_transition_time;
  } else {
    out.condition.last_transition_time = now;
  }
  return out;
}

}  // namespace orrery::controller
