#include "operator/controller/status.h"

#include <algorithm>
#include <charconv>

#include "operator/api/codec.h"
#include "operator/controller/gang.h"
#include "operator/controller/names.h"
#include "operator/engine/worker_command.h"

namespace orrery::controller {
namespace {

std::string Str(const Json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return "";
  return obj[key].get<std::string>();
}

int IntAnnotation(const Json& annotations, const char* key, int fallback) {
  std::string v = Str(annotations, key);
  int out = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size()) return fallback;
  return out;
}

// Whether the node's loss (or an eviction) took the pod.
bool PodLost(const Json& pod, const std::set<std::string>& lost_nodes, std::string* node) {
  const Json status = pod.value("status", Json::object());
  *node = Str(pod.value("spec", Json::object()), "nodeName");
  if (node->empty())
    *node = Str(pod["metadata"].value("annotations", Json::object()), kNodeAnnotation);
  std::string phase = Str(status, "phase");
  if (phase == "Succeeded") return false;
  // A bound pod on a lost node is gone; an unbound one pinned there never starts.
  if (!node->empty() && lost_nodes.count(*node) > 0) return true;
  std::string reason = Str(status, "reason");
  if (reason == "NodeLost" || reason == "Evicted" || reason == "Terminated") return true;
  for (const Json& c : status.value("conditions", Json::array())) {
    if (Str(c, "type") == "DisruptionTarget" && Str(c, "status") == "True") return true;
  }
  return false;
}

std::string FailureReason(const Json& pod) {
  const Json status = pod.value("status", Json::object());
  for (const Json& cs : status.value("containerStatuses", Json::array())) {
    if (!cs.contains("state") || !cs["state"].contains("terminated")) continue;
    const Json& t = cs["state"]["terminated"];
    std::string reason = Str(t, "reason");
    if (reason.empty()) reason = "Error";
    return reason + " (exit code " + std::to_string(t.value("exitCode", -1)) + ")";
  }
  std::string reason = Str(status, "reason");
  return reason.empty() ? "Failed" : reason;
}

std::optional<api::TaskConfig> ConfigOf(const Json& annotations) {
  std::string note = Str(annotations, kConfigAnnotation);
  if (note.empty()) return std::nullopt;
  Json j = Json::parse(note, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto t = api::ParseEnum<api::Template>(j.value("template", ""));
  if (!t) return std::nullopt;
  api::TaskConfig c;
  c.template_ = *t;
  c.gpus = j.value("gpus", 0);
  c.batch_size = j.value("batchSize", int64_t{0});
  c.recompute = j.value("recompute", "");
  return c;
}

void Classify(GangObservation* g) {
  int live = g->pending + g->running + g->succeeded;
  int bad = g->failed + g->lost;
  if (g->ranks_seen < g->world_size || (bad > 0 && live > 0)) {
    g->phase = bad > 0 && live == 0 ? GangPhase::kFailed : GangPhase::kPartial;
  } else if (bad > 0) {
    g->phase = GangPhase::kFailed;
  } else if (g->succeeded == g->world_size) {
    g->phase = GangPhase::kSucceeded;
  } else if (g->pending > 0) {
    g->phase = GangPhase::kPending;
  } else {
    g->phase = GangPhase::kRunning;
  }
  if (g->ranks_seen < g->world_size && g->reason.empty()) {
    g->reason = std::to_string(g->world_size - g->ranks_seen) + " of " +
                std::to_string(g->world_size) + " ranks missing";
  }
}

api::Condition MakeCondition(const api::ModelSelectionJobStatus* previous, const std::string& type,
                             bool value, const std::string& reason, const std::string& message,
                             int64_t generation, const std::string& now) {
  api::Condition c;
  c.type = type;
  c.status = value ? "True" : "False";
  c.observed_generation = generation;
  c.reason = reason;
  c.message = message;
  c.last_transition_time = now;
  if (previous != nullptr) {
    for (const api::Condition& p : previous->conditions) {
      if (p.type == type && p.status == c.status && !p.last_transition_time.empty()) {
        c.last_transition_time = p.last_transition_time;
      }
    }
  }
  return c;
}

}  // namespace

const char* GangPhaseName(GangPhase phase) {
  switch (phase) {
    case GangPhase::kPending: return "Pending";
    case GangPhase::kRunning: return "Running";
    case GangPhase::kSucceeded: return "Succeeded";
    case GangPhase::kFailed: return "Failed";
    case GangPhase::kPartial: return "Partial";
  }
  return "Unknown";
}

std::map<std::string, TaskObservation> ObserveTasks(const std::vector<Json>& pods,
                                                    const std::set<std::string>& lost_nodes) {
  // task -> generation -> gang
  std::map<std::string, std::map<int, GangObservation>> gangs;
  std::map<std::string, std::map<int, std::vector<std::string>>> names;
  std::map<std::string, std::map<int, std::set<int>>> ranks;
  for (const Json& pod : pods) {
    if (!pod.is_object() || !pod.contains("metadata")) continue;
    const Json& meta = pod["metadata"];
    const Json labels = meta.value("labels", Json::object());
    const Json annotations = meta.value("annotations", Json::object());
    std::string task = Str(labels, kTaskLabel);
    if (task.empty() || Str(labels, kGangLabel).empty() || !Str(labels, kProfileLabel).empty()) {
      continue;
    }
    int generation = IntAnnotation(annotations, kGenerationAnnotation, -1);
    int rank = IntAnnotation(labels, kRankLabel, -1);
    if (generation < 0 || rank < 0) continue;
    GangObservation& g = gangs[task][generation];
    g.task = task;
    g.generation = generation;
    g.world_size = std::max(g.world_size, IntAnnotation(annotations, kWorldSizeAnnotation, 0));
    if (g.pod_settings.empty()) g.pod_settings = Str(annotations, kPodSettingsAnnotation);
    if (!g.config) {
      g.config = ConfigOf(annotations);
      if (g.config) g.config->nodes.assign(static_cast<size_t>(std::max(0, g.config->gpus)), "");
    }
    if (g.config && rank < static_cast<int>(g.config->nodes.size())) {
      g.config->nodes[static_cast<size_t>(rank)] = Str(annotations, kNodeAnnotation);
    }
    if (!ranks[task][generation].insert(rank).second) continue;  // a duplicate rank: count once
    ++g.ranks_seen;
    names[task][generation].push_back(Str(meta, "name"));
    std::string node;
    std::string phase = Str(pod.value("status", Json::object()), "phase");
    // A rank being deleted is gone whatever its last phase: a worker stopped by
    // SIGTERM checkpoints and exits 0, and that is a preemption, not a success.
    bool deleting = meta.contains("deletionTimestamp");
    if (PodLost(pod, lost_nodes, &node)) {
      ++g.lost;
      if (!node.empty() &&
          std::find(g.lost_nodes.begin(), g.lost_nodes.end(), node) == g.lost_nodes.end()) {
        g.lost_nodes.push_back(node);
      }
      if (g.reason.empty()) g.reason = "rank " + std::to_string(rank) + ": node " + node + " lost";
    } else if (phase == "Failed" || deleting) {
      ++g.failed;
      if (g.reason.empty()) {
        g.reason =
            "rank " + std::to_string(rank) + ": " + (deleting ? "deleted" : FailureReason(pod));
      }
    } else if (phase == "Succeeded") {
      ++g.succeeded;
    } else if (phase == "Running") {
      ++g.running;
      ++g.gpus_held;
    } else {
      ++g.pending;
      if (!Str(pod.value("spec", Json::object()), "nodeName").empty()) ++g.gpus_held;
    }
  }
  std::map<std::string, TaskObservation> out;
  for (auto& [task, by_gen] : gangs) {
    TaskObservation& t = out[task];
    t.task = task;
    auto newest = std::prev(by_gen.end());
    for (auto it = by_gen.begin(); it != newest; ++it) {
      for (const std::string& n : names[task][it->first]) t.stale_pods.push_back(n);
    }
    std::sort(t.stale_pods.begin(), t.stale_pods.end());
    GangObservation g = newest->second;
    if (g.world_size == 0) g.world_size = g.ranks_seen;
    std::sort(g.lost_nodes.begin(), g.lost_nodes.end());
    g.pod_names = names[task][g.generation];
    std::sort(g.pod_names.begin(), g.pod_names.end());
    Classify(&g);
    t.restarts = g.generation;
    t.gang = std::move(g);
  }
  return out;
}

namespace {

// A task's state, message and progress from its newest gang.
void TaskFromGang(const StatusInput& in, const api::ExpandedTask& task, const GangObservation& g,
                  api::TaskStatus& t, std::vector<std::string>* degraded) {
  const api::ModelSelectionJob& job = *in.job;
  if ((g.phase == GangPhase::kRunning || g.phase == GangPhase::kPending) &&
      in.replanned.count(GangLabelValue(task.name, g.generation)) > 0) {
    // Stopped by this pass (the cache does not show its ranks going yet): said
    // at once, so that an operator restarted before they go knows the stop.
    t.state = api::TaskState::kRescaling;
    t.message = StoppingForPlanMessage(g.generation);
    return;
  }
  switch (g.phase) {
    case GangPhase::kPending:
      t.state = g.generation == 0 ? api::TaskState::kQueued : api::TaskState::kRescaling;
      t.message = std::to_string(g.ranks_seen - g.pending) + "/" + std::to_string(g.world_size) +
                  " ranks running";
      break;
    case GangPhase::kRunning: {
      t.state = api::TaskState::kRunning;
      if (in.progress == nullptr) break;
      auto reported = in.progress->find(LabelValue(task.name));
      if (reported == in.progress->end() || reported->second.generation != g.generation) {
        break;
      }
      const TaskProgress& p = reported->second;
      t.steps_done = std::min(p.step, t.steps_total);
      t.progress = t.steps_total > 0
                       ? static_cast<double>(t.steps_done) / static_cast<double>(t.steps_total)
                       : 0;
      t.samples_per_second = p.samples_per_second;
      int64_t batch = g.config && g.config->batch_size > 0 ? g.config->batch_size
                                                           : task.task.training.batch_size;
      t.eta_seconds = p.samples_per_second > 0
                          ? static_cast<double>(t.steps_total - t.steps_done) *
                                static_cast<double>(batch) / p.samples_per_second
                          : 0;
      t.last_checkpoint =
          LastCheckpoint(t.last_checkpoint, p, CheckpointDir(job, task.name), in.now);
      t.last_restore = LastRestore(t.last_restore, p, in.now);
      break;
    }
    case GangPhase::kSucceeded:
      t.state = api::TaskState::kSucceeded;
      t.progress = 1;
      t.steps_done = t.steps_total;
      t.eta_seconds = 0;
      // The worker exits 0 only after the export is written (--export-dir
      // fails the run otherwise), so the folder it was given now holds it.
      t.export_path = engine::ExportDir(task, "");
      break;
    case GangPhase::kFailed:
    case GangPhase::kPartial:
      if (in.replanned.count(GangLabelValue(task.name, g.generation)) > 0) {
        t.state = api::TaskState::kRescaling;
        t.message = StoppingForPlanMessage(g.generation);
        break;
      }
      t.state =
          g.generation >= in.max_restarts ? api::TaskState::kFailed : api::TaskState::kRescaling;
      t.message = std::string(GangPhaseName(g.phase)) + " gang g" + std::to_string(g.generation) +
                  ": " + g.reason;
      degraded->push_back(task.name + ": " + g.reason);
      break;
  }
}

}  // namespace

std::string StoppingForPlanMessage(int generation) {
  return "stopping gang g" + std::to_string(generation) + " for a new plan (it checkpoints first)";
}

std::optional<int> StoppingForPlanGeneration(const std::string& message) {
  const std::string head = "stopping gang g";
  const std::string tail = " for a new plan (it checkpoints first)";
  if (message.size() <= head.size() + tail.size() || message.rfind(head, 0) != 0 ||
      message.compare(message.size() - tail.size(), tail.size(), tail) != 0) {
    return std::nullopt;
  }
  const std::string digits =
      message.substr(head.size(), message.size() - head.size() - tail.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int generation = std::stoi(digits);
  if (StoppingForPlanMessage(generation) != message) return std::nullopt;  // no leading zeros
  return generation;
}

namespace {
// One task's status: its previous status carried over, then its newest gang
// (or, without one, what the reconciler knows: rejected pods, profiling,
// never fits, forbidden). Adds the gang's GPUs to `gpus_held` and what
// degrades the job to `degraded`.
api::TaskStatus TaskStatusOf(const StatusInput& in, const api::ExpandedTask& task,
                             const api::ModelSelectionJobStatus* previous, int* gpus_held,
                             std::vector<std::string>* degraded) {
  api::TaskStatus t;
  if (previous != nullptr) {
    for (const api::TaskStatus& p : previous->tasks) {
      if (p.name == task.name) t = p;
    }
  }
  t.name = task.name;
  t.steps_total = engine::TotalSteps(task.task);
  t.message.clear();
  bool was_done = t.state == api::TaskState::kSucceeded;
  auto it = in.observed->find(task.name);
  const GangObservation* g =
      it != in.observed->end() && it->second.gang ? &*it->second.gang : nullptr;
  if (g != nullptr) {
    *gpus_held += g->gpus_held;
    t.restarts = it->second.restarts;
    if (g->config) {
      t.config = g->config;
      // A gang never spans GPU types (the planner keeps to it): its first
      // node's type is the gang's.
      auto type = t.config->nodes.empty() ? in.node_gpu_types.end()
                                          : in.node_gpu_types.find(t.config->nodes.front());
      if (type != in.node_gpu_types.end()) t.config->gpu_type = type->second;
    }
    TaskFromGang(in, task, *g, t, degraded);
  } else if (auto pr = in.pod_rejected.find(task.name); pr != in.pod_rejected.end()) {
    t.state = api::TaskState::kFailed;
    t.message = kPodRejectedMessage + pr->second;
    degraded->push_back(task.name + ": pods rejected: " + pr->second);
  } else if (!was_done) {
    t.state =
        in.profiling.count(task.name) > 0 ? api::TaskState::kProfiling : api::TaskState::kPending;
    if (auto nf = in.never_fits.find(task.name); nf != in.never_fits.end()) {
      t.message = nf->second;
      degraded->push_back(task.name + ": " + nf->second);
    } else if (auto fb = in.forbidden.find(task.name); fb != in.forbidden.end()) {
      t.message = fb->second;
    }
  }
  return t;
}
}  // namespace

api::ModelSelectionJobStatus BuildJobStatus(const StatusInput& in) {
  const api::ModelSelectionJob& job = *in.job;
  const api::ModelSelectionJobStatus* previous = job.status ? &*job.status : nullptr;
  api::ModelSelectionJobStatus s;
  if (previous != nullptr) s.plan = previous->plan;
  s.observed_generation = job.metadata.generation;
  int done = 0, failed = 0, active = 0, rescaling = 0, waiting = 0, profiling = 0;
  std::vector<std::string> degraded;
  for (const api::ExpandedTask& task : *in.tasks) {
    api::TaskStatus t = TaskStatusOf(in, task, previous, &s.gpus_held, &degraded);
    switch (t.state) {
      case api::TaskState::kSucceeded: ++done; break;
      case api::TaskState::kFailed: ++failed; break;
      case api::TaskState::kRunning: ++active; break;
      case api::TaskState::kRescaling: ++rescaling; break;
      case api::TaskState::kProfiling: ++profiling; break;
      default: ++waiting; break;
    }
    s.tasks.push_back(std::move(t));
  }
  int total = static_cast<int>(in.tasks->size());
  s.task_summary = std::to_string(done) + "/" + std::to_string(total);
  if (previous != nullptr) s.eta = previous->eta;

  std::string complete_reason = "InProgress";
  std::string complete_message;
  if (job.spec.suspend) {
    s.phase = api::Phase::kSuspended;
  } else if (total > 0 && done == total) {
    s.phase = api::Phase::kSucceeded;
    complete_reason = "AllTasksSucceeded";
    complete_message = "all " + std::to_string(total) + " tasks succeeded";
    s.eta.clear();
  } else if (failed > 0 && active + rescaling + waiting + profiling == 0) {
    s.phase = api::Phase::kFailed;
    complete_reason = "TasksFailed";
    complete_message = std::to_string(failed) + " of " + std::to_string(total) + " tasks failed";
  } else if (active + rescaling > 0) {
    s.phase = api::Phase::kRunning;
  } else if (profiling > 0) {
    s.phase = api::Phase::kProfiling;
  } else if (done + failed > 0 || waiting > 0) {
    // Tasks wait for a plan slot (or were never launched): the planner's turn.
    s.phase = previous != nullptr && previous->phase == api::Phase::kPlanning
                  ? api::Phase::kPlanning
                  : (done + failed > 0 ? api::Phase::kRunning : api::Phase::kPending);
  }
  int64_t gen = job.metadata.generation;
  bool progressing = s.phase == api::Phase::kRunning || s.phase == api::Phase::kProfiling ||
                     s.phase == api::Phase::kPlanning;
  std::string prog_reason = job.spec.suspend                  ? "Suspended"
                            : rescaling > 0                   ? "Rescaling"
                            : active > 0                      ? "TasksRunning"
                            : profiling > 0                   ? "Profiling"
                            : progressing                     ? "Planning"
                            : s.phase == api::Phase::kPending ? "Pending"
                                                              : "Finished";
  std::string prog_message = std::to_string(active) + " running, " + std::to_string(rescaling) +
                             " rescaling, " + std::to_string(done) + "/" + std::to_string(total) +
                             " done";
  s.conditions.push_back(
      MakeCondition(previous, "Progressing", progressing, prog_reason, prog_message, gen, in.now));
  std::string deg_message;
  for (const std::string& d : degraded) deg_message += (deg_message.empty() ? "" : "; ") + d;
  bool any_lost = false;
  for (const auto& [name, obs] : *in.observed) {
    if (obs.gang && !obs.gang->lost_nodes.empty()) any_lost = true;
  }
  const bool only_never_fits = !degraded.empty() && degraded.size() == in.never_fits.size();
  const bool only_rejected = !degraded.empty() && degraded.size() == in.pod_rejected.size();
  std::string deg_reason = degraded.empty()  ? "AllGangsHealthy"
                           : any_lost        ? "NodeLost"
                           : only_never_fits ? "TaskNeverFits"
                           : only_rejected   ? "PodRejected"
                                             : "GangFailed";
  s.conditions.push_back(
      MakeCondition(previous, "Degraded", !degraded.empty(), deg_reason, deg_message, gen, in.now));
  bool complete = s.phase == api::Phase::kSucceeded || s.phase == api::Phase::kFailed;
  s.conditions.push_back(MakeCondition(previous, "Complete", complete, complete_reason,
                                       complete_message, gen, in.now));
  return s;
}

Json StatusUpdateObject(const api::ModelSelectionJob& job,
                        const api::ModelSelectionJobStatus& status) {
  Json meta = {{"name", job.metadata.name}, {"namespace", job.metadata.namespace_}};
  if (!job.metadata.resource_version.empty())
    meta["resourceVersion"] = job.metadata.resource_version;
  return Json{{"apiVersion", api::kApiVersion},
              {"kind", api::kKind},
              {"metadata", meta},
              {"status", api::EncodeStatus(status)}};
}

}  // namespace orrery::controller
