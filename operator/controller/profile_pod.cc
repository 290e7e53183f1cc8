#include "operator/controller/profile_pod.h"

#include <algorithm>

#include "operator/controller/names.h"
#include "operator/engine/worker_command.h"
#include "worker/contract/templates.h"

namespace orrery::controller {
namespace {

// Termination messages under FallbackToLogsOnError are log tails; status keeps
// the last part, which holds the error.
std::string Tail(const std::string& s, size_t n = 512) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

StatusOr<contract::ProfileEntry> KeyFromAnnotation(const Json& pod) {
  const Json* meta = pod.contains("metadata") ? &pod["metadata"] : nullptr;
  std::string name = meta != nullptr ? meta->value("name", "") : "";
  if (meta == nullptr || !meta->contains("annotations") || !(*meta)["annotations"].is_object() ||
      !(*meta)["annotations"].contains(kProfileEntryAnnotation) ||
      !(*meta)["annotations"][kProfileEntryAnnotation].is_string()) {
    return InvalidArgumentError("pod " + name + ": no " + std::string(kProfileEntryAnnotation) +
                                " annotation; not a profile pod");
  }
  Json j = Json::parse((*meta)["annotations"][kProfileEntryAnnotation].get<std::string>(), nullptr,
                       /*allow_exceptions=*/false);
  return contract::ProfileKeyFromJson(
      j, "pod " + name + ": annotation " + std::string(kProfileEntryAnnotation));
}

const Json* WorkerTerminated(const Json& pod) {
  // Points into `pod`, so it walks the pod itself, never a copy.
  if (!pod.contains("status") || !pod["status"].contains("containerStatuses")) return nullptr;
  const Json& statuses = pod["status"]["containerStatuses"];
  if (!statuses.is_array()) return nullptr;
  for (const Json& cs : statuses) {
    if (!cs.is_object() || cs.value("name", "") != kWorkerContainer) continue;
    if (cs.contains("state") && cs["state"].contains("terminated")) {
      return &cs["state"]["terminated"];
    }
  }
  return nullptr;
}

}  // namespace

contract::ProfileEntry ProfileKey(const ProfileRequest& r) {
  contract::ProfileEntry e;
  e.signature = engine::ModelSignature(r.task->task);
  // The template the worker runs (contract::WorkerTemplate: one rank of ddp,
  // fsdp or tensor is the single-process loop), as the local world keys its
  // cache file: one trial serves every template that runs alike, and an entry
  // either world writes is found by the other.
  e.template_name = contract::WorkerTemplate(api::EnumName(r.template_), r.gpus);
  e.gpus = r.gpus;
  e.batch_size = r.batch_size > 0 ? r.batch_size : r.task->task.training.batch_size;
  e.device = r.device;
  return e;
}

StatusOr<ProfileGang> BuildProfileGang(const ProfileRequest& r) {
  if (r.job == nullptr || r.task == nullptr) return InvalidArgumentError("profile: job and task");
  ORRERY_RETURN_IF_ERROR(CheckJobMetadata(*r.job));
  const api::ModelSelectionJob& job = *r.job;
  std::string what =
      "profile " + job.metadata.namespace_ + "/" + job.metadata.name + " task " + r.task->name;
  if (r.gpus < 1) return InvalidArgumentError(what + ": gpus must be at least 1");
  if (!r.placement.empty() && r.placement.size() != static_cast<size_t>(r.gpus)) {
    return InvalidArgumentError(what + ": placement names " + std::to_string(r.placement.size()) +
                                " nodes for " + std::to_string(r.gpus) + " ranks");
  }
  if (r.deadline_seconds < 1) return InvalidArgumentError(what + ": deadline must be positive");

  ProfileGang g;
  g.key = ProfileKey(r);
  std::string key = g.key.Key();
  g.key_hash = ProfileKeyHash(key);
  g.service_name = ProfileServiceName(job.metadata.name, key);
  Json selector = {{kManagedByLabel, kManagedByValue},
                   {kJobLabel, LabelValue(job.metadata.name)},
                   {kProfileLabel, g.key_hash}};
  Json labels = selector;
  labels[kTaskLabel] = LabelValue(r.task->name);
  g.service = HeadlessService(job, g.service_name, selector, labels);

  engine::LaunchConfig launch;
  launch.template_name = g.key.template_name;
  launch.gpus = r.gpus;
  launch.batch_size = g.key.batch_size;
  launch.device = r.backend == "nccl" ? "cuda" : "cpu";
  std::vector<std::string> args = {"profile"};
  for (std::string& f : engine::ProfileFlags(*r.task, launch, job.spec.profiling.trial_steps)) {
    args.push_back(std::move(f));
  }
  Json entry_note = {{"signature", g.key.signature},
                     {"template", g.key.template_name},
                     {"gpus", g.key.gpus},
                     {"batchSize", g.key.batch_size},
                     {"device", g.key.device}};
  std::string master = PodDnsName(ProfilePodName(job.metadata.name, key, 0), g.service_name,
                                  job.metadata.namespace_);
  for (int rank = 0; rank < r.gpus; ++rank) {
    PodParts p;
    p.name = ProfilePodName(job.metadata.name, key, rank);
    p.service = g.service_name;
    p.labels = labels;
    p.labels[kRankLabel] = std::to_string(rank);
    p.annotations[kProfileEntryAnnotation] = entry_note.dump();
    p.annotations[kWorldSizeAnnotation] = std::to_string(r.gpus);
    p.args = args;
    p.rank = rank;
    p.world_size = r.gpus;
    p.master_addr = master;
    if (!r.placement.empty()) p.node = r.placement[static_cast<size_t>(rank)];
    p.gpu_resource = job.spec.resources.gpu_resource_name;
    p.grace_seconds = 30;  // nothing to save
    p.backend = r.backend;
    Json pod = WorkerPod(job, p);
    pod["spec"]["activeDeadlineSeconds"] = r.deadline_seconds;
    AddTaskVolumes(r.task->task, /*with_output=*/false, &pod);
    g.pods.push_back(std::move(pod));
  }
  return g;
}

StatusOr<ProfileOutcome> ParseProfilePod(const Json& pod) {
  ProfileOutcome out;
  ORRERY_ASSIGN_OR_RETURN(out.entry, KeyFromAnnotation(pod));
  std::string name = pod["metadata"].value("name", "");
  const Json status = pod.value("status", Json::object());
  std::string phase = status.value("phase", "");
  const Json* term = WorkerTerminated(pod);
  if (phase == "Succeeded") {
    std::string message = term != nullptr ? term->value("message", "") : "";
    auto doc = contract::ParseProfileDocument(message);
    if (!doc.ok()) {
      return InvalidArgumentError("profile pod " + name +
                                  " succeeded without a profile document in its termination "
                                  "message: " +
                                  doc.status().message());
    }
    contract::ProfileEntry key = out.entry;
    out.entry = *doc;
    out.entry.signature = key.signature;
    out.entry.template_name = key.template_name;
    out.entry.device = key.device;
    // The cache is keyed by what was asked for; the document agrees unless the
    // worker was started wrongly, which is worth an error.
    if (out.entry.gpus != key.gpus ||
        (out.entry.batch_size != 0 && out.entry.batch_size != key.batch_size)) {
      return InvalidArgumentError("profile pod " + name + " measured " +
                                  std::to_string(out.entry.gpus) + " ranks, batch " +
                                  std::to_string(out.entry.batch_size) + "; asked for " +
                                  std::to_string(key.gpus) + ", " + std::to_string(key.batch_size));
    }
    out.entry.batch_size = key.batch_size;
    out.entry.measured_at = term != nullptr ? term->value("finishedAt", "") : "";
    out.state = ProfileOutcome::State::kMeasured;
    return out;
  }
  if (phase == "Failed") {
    out.state = ProfileOutcome::State::kInfeasible;
    std::string pod_reason = status.value("reason", "");
    if (pod_reason == "DeadlineExceeded") {
      out.reason = "DeadlineExceeded";
      out.message = status.value("message", "");
    } else if (term != nullptr) {
      out.reason = term->value("reason", "Error");
      if (out.reason.empty()) out.reason = "Error";
      out.message = "exit code " + std::to_string(term->value("exitCode", -1));
      std::string m = term->value("message", "");
      if (!m.empty()) out.message += ": " + Tail(m);
    } else {
      out.reason = pod_reason.empty() ? "Error" : pod_reason;
      out.message = status.value("message", "");
    }
    return out;
  }
  return out;
}

StatusOr<ProfileOutcome> ParseProfileGang(const std::vector<Json>& pods) {
  if (pods.empty()) return InvalidArgumentError("profile gang: no pods");
  std::optional<ProfileOutcome> rank0;
  ProfileOutcome running;
  for (const Json& pod : pods) {
    // Only rank 0 writes the profile document; another rank that succeeded
    // has nothing to read.
    std::string pod_rank = pod["metadata"].value("labels", Json::object()).value(kRankLabel, "");
    if (pod_rank != "0" && pod.value("status", Json::object()).value("phase", "") == "Succeeded") {
      continue;
    }
    ORRERY_ASSIGN_OR_RETURN(ProfileOutcome o, ParseProfilePod(pod));
    if (o.state == ProfileOutcome::State::kInfeasible) {
      std::string rank = pod["metadata"].value("labels", Json::object()).value(kRankLabel, "?");
      o.message = "rank " + rank + ": " + o.message;
      return o;
    }
    running.entry = o.entry;
    std::string rank = pod["metadata"].value("labels", Json::object()).value(kRankLabel, "");
    if (rank == "0") rank0 = o;
  }
  if (rank0 && rank0->state == ProfileOutcome::State::kMeasured) return *rank0;
  return running;
}

}  // namespace orrery::controller
