#include "operator/controller/reconciler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "common/log.h"
#include "common/time_text.h"
#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/node_filter.h"
#include "operator/controller/profile_pod.h"
#include "operator/engine/job_options.h"
#include "operator/engine/profile_step.h"
#include "operator/engine/worker_command.h"
#include "operator/kube/api_error.h"
#include "worker/contract/templates.h"

namespace orrery::controller {

kube::ObjectPtr Caches::Job(const std::string& key) const {
  if (jobs != nullptr) {
    if (kube::ObjectPtr found = jobs->Get(key)) return found;
  }
  for (const kube::Store* store : more_jobs) {
    if (kube::ObjectPtr found = store->Get(key)) return found;
  }
  return nullptr;
}

namespace {

constexpr double kGpuMemoryGib = 1e6;  // unlabelled nodes: memory is checked by profiling

constexpr auto kRequeueWhileActive = std::chrono::seconds(30);
constexpr auto kRetryForbiddenAfter = std::chrono::seconds(30);  // pods forbidden at create
// The Degraded reason of a job whose pods the API server rejected.
constexpr const char* kPodRejected = "PodRejected";

Json ToApi(const kube::Object& o) { return Json::parse(o.dump()); }
kube::Object ToKube(const Json& o) { return kube::Object::parse(o.dump()); }

std::string Str(const Json& j, const char* a, const char* b) {
  if (!j.contains(a) || !j[a].is_object() || !j[a].contains(b) || !j[a][b].is_string()) return "";
  return j[a][b].get<std::string>();
}

std::string Label(const Json& pod, const char* key) {
  if (!pod.contains("metadata") || !pod["metadata"].contains("labels")) return "";
  const Json& l = pod["metadata"]["labels"];
  if (!l.is_object() || !l.contains(key) || !l[key].is_string()) return "";
  return l[key].get<std::string>();
}

std::string Annotation(const Json& pod, const char* key) {
  if (!pod.contains("metadata") || !pod["metadata"].contains("annotations")) return "";
  const Json& a = pod["metadata"]["annotations"];
  if (!a.is_object() || !a.contains(key) || !a[key].is_string()) return "";
  return a[key].get<std::string>();
}

// A Kubernetes quantity of whole devices ("8"); anything else counts as 0.
int Quantity(const Json& v) {
  if (v.is_number_integer()) return v.get<int>();
  if (!v.is_string()) return 0;
  const std::string s = v.get<std::string>();
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return 0;
  return std::stoi(s);
}

bool IsOrreryGangPod(const Json& pod) {
  return Label(pod, kManagedByLabel) == kManagedByValue && !Label(pod, kGangLabel).empty();
}

}  // namespace

kube::Resource ModelSelectionJobs() {
  return {"orrery.dev", "v1alpha1", "modelselectionjobs", true};
}
kube::Resource Services() { return {"", "v1", "services", true}; }

// ---- pure pieces -----------------------------------------------------------

int PodGpuRequest(const Json& pod, const std::string& resource) {
  if (!pod.contains("spec") || !pod["spec"].contains("containers")) return 0;
  int total = 0;
  for (const Json& c : pod["spec"]["containers"]) {
    if (!c.contains("resources") || !c["resources"].is_object()) continue;
    const Json& r = c["resources"];
    int req = 0;
    for (const char* kind : {"requests", "limits"}) {
      if (r.contains(kind) && r[kind].is_object() && r[kind].contains(resource)) {
        req = std::max(req, Quantity(r[kind][resource]));
      }
    }
    total += req;
  }
  return total;
}

std::string PodNode(const Json& pod) {
  std::string node = Str(pod, "spec", "nodeName");
  if (!node.empty()) return node;
  if (Label(pod, kManagedByLabel) != kManagedByValue) return "";
  node = Annotation(pod, kNodeAnnotation);
  if (!node.empty()) return node;
  // A pinned profile pod: required node affinity on metadata.name (gang.h).
  const Json* terms = &pod;
  for (const char* k : {"spec", "affinity", "nodeAffinity",
                        "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"}) {
    if (!terms->is_object() || !terms->contains(k)) return "";
    terms = &(*terms)[k];
  }
  if (!terms->is_array() || terms->size() != 1 || !(*terms)[0].contains("matchFields")) return "";
  for (const Json& f : (*terms)[0]["matchFields"]) {
    if (f.value("key", "") == "metadata.name" && f.value("operator", "") == "In" &&
        f.contains("values") && f["values"].size() == 1 && f["values"][0].is_string()) {
      return f["values"][0].get<std::string>();
    }
  }
  return "";
}

bool PodFinished(const Json& pod) {
  std::string phase = Str(pod, "status", "phase");
  return phase == "Succeeded" || phase == "Failed";
}

bool NodeReady(const Json& node) {
  if (!node.contains("status") || !node["status"].contains("conditions")) return false;
  for (const Json& c : node["status"]["conditions"]) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

NodeGpu NodeGpuOf(const Json& node, const std::string& type_label) {
  NodeGpu gpu;
  const Json* labels = nullptr;
  if (node.contains("metadata") && node["metadata"].contains("labels") &&
      node["metadata"]["labels"].is_object()) {
    labels = &node["metadata"]["labels"];
  }
  if (labels == nullptr) return gpu;
  if (!type_label.empty() && labels->contains(type_label) && (*labels)[type_label].is_string()) {
    gpu.type = (*labels)[type_label].get<std::string>();
  }
  if (labels->contains(kGpuMemoryLabel) && (*labels)[kGpuMemoryLabel].is_string()) {
    // GPU feature discovery writes MiB as a decimal integer, e.g. "81559".
    const std::string mib = (*labels)[kGpuMemoryLabel].get<std::string>();
    const bool digits =
        !mib.empty() && mib.size() <= 9 &&
        std::all_of(mib.begin(), mib.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && std::stol(mib) > 0) gpu.memory_gib = static_cast<double>(std::stol(mib)) / 1024.0;
  }
  return gpu;
}

std::string GpuTypesMissing(const std::vector<std::string>& types,
                            const std::vector<NodeCapacity>& nodes) {
  if (types.empty() || nodes.empty()) return "";
  std::set<std::string> have;
  for (const NodeCapacity& n : nodes) have.insert(n.gpu_type);
  for (const std::string& t : types) {
    if (have.count(t) > 0) return "";
  }
  std::string listed, present;
  for (const std::string& t : types) listed += (listed.empty() ? "" : ", ") + t;
  for (const std::string& t : have)
    present += (present.empty() ? "" : ", ") + (t.empty() ? "(unlabelled)" : t);
  return "no node its pods may use has a GPU type it allows (spec.tasks[].gpuTypes: " + listed +
         "; the nodes have: " + present +
         "): add nodes of one of those types, or list one of the nodes' types";
}

std::string ConfigsNeverFit(const engine::TaskConfigs& tc, const api::TaskSpec& task,
                            const std::vector<NodeCapacity>& nodes) {
  if (tc.configs.empty() || nodes.empty()) return "";
  planner::Problem problem;
  double most = 0;         // the most usable memory per GPU of a node the task may use
  double most_device = 0;  // that node's label
  for (const NodeCapacity& n : nodes) {
    const double gib = n.gpu_memory_gib > 0 ? n.gpu_memory_gib : kGpuMemoryGib;
    problem.nodes.push_back({n.name, n.allocatable, gib, n.gpu_type});
    const bool typed_out = !planner::AllowsGpuType(task.gpu_types, n.gpu_type);
    if (!typed_out && n.allocatable > 0 && gib > most) {
      most = gib;
      most_device = n.gpu_device_gib;
    }
  }
  planner::Task t;
  t.gpu_types = task.gpu_types;
  const planner::Config* least = nullptr;  // the configuration needing the least memory
  for (const planner::Config& c : tc.configs) {
    if (planner::ConfigFits(problem, t, c)) return "";
    if (least == nullptr || c.memory_gib < least->memory_gib) least = &c;
  }
  // Not memory (too few GPUs on one node, or no node of its types): said elsewhere.
  if (least == nullptr || most <= 0 || least->memory_gib <= most) return "";
  char buf[768];
  std::snprintf(buf, sizeof(buf),
                "every configuration profiled needs more GPU memory than a node its pods may use "
                "has: the least is %s on %d GPU%s (recompute %s) at %.1f GiB per GPU, and the "
                "nodes' GPUs give a configuration at most %.1f GiB (%.1f GiB by label %s, less "
                "the reserve for CUDA's context, NCCL and the allocator: the operator's "
                "--gpu-memory-reserve): allow a template that shards or "
                "spills the model (spec.resources.templates: fsdp, spill), more GPUs per task "
                "(spec.resources.gpusPerTask.max), a smaller batch, or nodes with larger GPUs",
                least->template_name.c_str(), least->gpus, least->gpus == 1 ? "" : "s",
                least->recompute.empty() ? "none" : least->recompute.c_str(), least->memory_gib,
                most, most_device, kGpuMemoryLabel);
  return buf;
}

std::vector<NodeCapacity> NodeCapacities(
    const std::vector<Json>& nodes, const std::vector<Json>& pods, const std::string& resource,
    const std::string& own_job, const api::ResourcesSpec* admit, std::vector<std::string>* refusals,
    const std::string& gpu_type_label, const engine::GpuMemoryReserve& reserve) {
  // GPUs the job's own unfinished gang pods hold, by node.
  std::map<std::string, int> own_held;
  for (const Json& p : pods) {
    if (!own_job.empty() && !PodFinished(p) && IsOrreryGangPod(p) &&
        Label(p, kJobLabel) == own_job) {
      own_held[PodNode(p)] += PodGpuRequest(p, resource);
    }
  }
  std::map<std::string, NodeCapacity> by_name;
  for (const Json& n : nodes) {
    std::string name = Str(n, "metadata", "name");
    int gpus = 0;
    if (n.contains("status") && n["status"].contains("allocatable") &&
        n["status"]["allocatable"].contains(resource)) {
      gpus = Quantity(n["status"]["allocatable"][resource]);
    }
    if (name.empty() || gpus <= 0) continue;
    std::string refusal = NodeReady(n) ? "" : "node " + name + " is not Ready";
    if (refusal.empty() && admit != nullptr) refusal = NodeRefusal(n, *admit);
    if (!refusal.empty()) {
      if (refusals != nullptr) refusals->push_back(refusal);
      // The job's gangs already there keep running (a cordon, a new taint
      // without NoExecute or a short NotReady does not end them): the node
      // stays in its world with just the GPUs they hold, so nothing new is
      // placed there.
      auto own = own_held.find(name);
      if (own == own_held.end() || own->second <= 0) continue;
      gpus = std::min(gpus, own->second);
    }
    const NodeGpu gpu = NodeGpuOf(n, gpu_type_label);
    // A labelled GPU the reserve leaves nothing of gives nothing (not 0: that
    // means unlabelled, not modelled).
    const double usable = gpu.memory_gib > 0
                              ? std::max(1e-9, engine::UsableGpuMemoryGib(gpu.memory_gib, reserve))
                              : 0;
    by_name[name] = NodeCapacity{name, gpus, 0, gpu.type, usable, gpu.memory_gib};
  }
  for (const Json& p : pods) {
    if (PodFinished(p)) continue;
    if (!own_job.empty() && IsOrreryGangPod(p) && Label(p, kJobLabel) == own_job) continue;
    auto it = by_name.find(PodNode(p));
    if (it == by_name.end()) continue;
    it->second.foreign += PodGpuRequest(p, resource);
  }
  std::vector<NodeCapacity> out;
  out.reserve(by_name.size());
  for (auto& [name, n] : by_name) out.push_back(n);
  return out;
}

std::set<std::string> LostNodes(const std::vector<Json>& nodes, const std::vector<Json>& pods,
                                std::time_t now, double grace_s) {
  std::set<std::string> known, lost;
  for (const Json& n : nodes) {
    std::string name = Str(n, "metadata", "name");
    known.insert(name);
    auto unready = UnreadySeconds(n, now);
    if (unready && *unready >= grace_s) lost.insert(name);
  }
  for (const Json& p : pods) {
    std::string node = Str(p, "spec", "nodeName");
    if (!node.empty() && known.count(node) == 0) lost.insert(node);
  }
  return lost;
}

std::string ProfiledGpuType(const api::TaskSpec& task, const std::vector<NodeCapacity>& nodes) {
  std::set<std::string> types;
  for (const NodeCapacity& n : nodes) {
    if (n.gpu_type.empty()) continue;
    if (planner::AllowsGpuType(task.gpu_types, n.gpu_type)) types.insert(n.gpu_type);
  }
  return types.empty() ? "" : *types.begin();
}

std::string TypedProfileDevice(const std::string& device, const std::string& gpu_type) {
  return gpu_type.empty() ? device : device + "/" + gpu_type;
}

namespace {
// `tc`'s configurations, all measured on `profiled`, tagged with it and
// estimated on every other type of `nodes` by `speeds` (EstimateMissingTypes);
// a type without a speed runs as `profiled` with `unlisted_as_profiled`, else
// gets none.
void EstimateOtherTypes(TaskConfigs& tc, const std::string& profiled,
                        const std::vector<NodeCapacity>& nodes,
                        const std::map<std::string, double>& speeds,
                        bool unlisted_as_profiled = true) {
  const double base = speeds.at(profiled);
  planner::Problem problem;
  std::map<std::string, double> speed;
  for (const NodeCapacity& n : nodes) {
    if (n.gpu_type.empty()) continue;
    problem.nodes.push_back({n.name, n.allocatable, 1, n.gpu_type});
    auto it = speeds.find(n.gpu_type);
    if (it != speeds.end() && it->second > 0) {
      speed[n.gpu_type] = it->second;
    } else if (unlisted_as_profiled) {
      speed[n.gpu_type] = base;
    }
  }
  planner::Task task;
  task.configs = tc.configs;
  for (planner::Config& c : task.configs) c.gpu_type = profiled;
  problem.tasks.push_back(std::move(task));
  planner::EstimateMissingTypes(problem, speed);
  tc.configs = problem.tasks.front().configs;
  tc.memory_basis.clear();
  tc.templates.clear();
  for (const planner::Config& c : tc.configs)
    tc.templates.push_back(
        api::ParseEnum<api::Template>(c.template_name).value_or(api::Template::kDdp));
}
}  // namespace

TaskConfigs ConfigsFromProfiles(const api::ModelSelectionJobSpec& spec,
                                const api::ExpandedTask& task, const ProfileTable& table,
                                const std::string& device, int max_gpus,
                                const std::vector<NodeCapacity>& nodes,
                                const std::map<std::string, double>& speeds) {
  const std::string profiled = ProfiledGpuType(task.task, nodes);
  ProfileRequest request;
  request.task = &task;
  // The cached profile of a key on `type`, or one from before types.
  auto find = [&](const engine::ProfileKeyRef& key,
                  const std::string& type) -> const CachedProfile* {
    request.template_ = key.template_;
    request.gpus = key.gpus;
    request.batch_size = key.batch_size;
    request.device = TypedProfileDevice(device, type);
    auto it = table.find(ProfileDataKey(ProfileKey(request)));
    if (it == table.end() && !type.empty()) {  // a profile from before types
      request.device = device;
      it = table.find(ProfileDataKey(ProfileKey(request)));
    }
    return it == table.end() ? nullptr : &it->second;
  };
  // The first key measured on the profiled type (build order: the narrowest
  // configuration first), which measures the other types' speeds.
  std::optional<std::pair<engine::ProfileKeyRef, double>> reference;
  auto lookup = [&](api::Template tmpl, int gpus, int64_t batch) {
    const engine::ProfileKeyRef key{tmpl, gpus, batch};
    const CachedProfile* hit = find(key, profiled);
    engine::ProfilePoint p;
    if (hit == nullptr) return p;  // missing
    if (hit->infeasible) {
      p.state = engine::ProfilePoint::State::kInfeasible;
      return p;
    }
    if (!reference && hit->entry.samples_per_s > 0)
      reference.emplace(key, hit->entry.samples_per_s);
    return engine::PointFromProfile(hit->entry);
  };
  // Each point in every recomputation mode worth planning (as the local runner
  // and `orrery plan` offer them): a model that fits keeping its activations
  // runs without recomputation, one that does not recomputes.
  TaskConfigs tc =
      engine::BuildTaskConfigs(spec, task.task, lookup, max_gpus, /*recompute_modes=*/true);
  if (profiled.empty() || tc.configs.empty()) return tc;
  auto known = speeds.find(profiled);
  if (known != speeds.end() && known->second > 0) {
    EstimateOtherTypes(tc, profiled, nodes, speeds);
    return tc;
  }
  if (!speeds.empty() || !reference) return tc;
  // Measured speeds: the reference key on every other type the task may use.
  std::set<std::string> others;
  for (const NodeCapacity& n : nodes) {
    if (n.gpu_type.empty() || n.gpu_type == profiled) continue;
    if (planner::AllowsGpuType(task.task.gpu_types, n.gpu_type)) others.insert(n.gpu_type);
  }
  if (others.empty()) return tc;
  std::map<std::string, double> measured = {{profiled, 1.0}};
  for (const std::string& type : others) {
    const CachedProfile* hit = find(reference->first, type);
    if (hit == nullptr) {
      tc.type_probes.emplace_back(type, reference->first);
    } else if (!hit->infeasible && hit->entry.samples_per_s > 0) {
      measured[type] = hit->entry.samples_per_s / reference->second;
    }  // infeasible there: the type gets no configuration
  }
  if (tc.type_probes.empty())
    EstimateOtherTypes(tc, profiled, nodes, measured, /*unlisted_as_profiled=*/false);
  return tc;
}

std::string HumanDuration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 86400) {
    const int64_t m = (s % 3600) / 60;
    return std::to_string(s / 3600) + "h" + (m > 0 ? std::to_string(m) + "m" : "");
  }
  const int64_t h = (s % 86400) / 3600;
  return std::to_string(s / 86400) + "d" + (h > 0 ? std::to_string(h) + "h" : "");
}

int64_t SamplesDone(const api::TaskStatus& status, int64_t task_batch) {
  const int64_t batch =
      status.config && status.config->batch_size > 0 ? status.config->batch_size : task_batch;
  int64_t samples = 0;
  int64_t from_step = 0;
  if (status.last_checkpoint && status.last_checkpoint->samples > 0 &&
      status.last_checkpoint->step <= status.steps_done) {
    samples = status.last_checkpoint->samples;
    from_step = status.last_checkpoint->step;
  }
  return samples + std::max<int64_t>(0, status.steps_done - from_step) * batch;
}

namespace {
// Whether planned configuration `c` runs in a live gang's recomputation mode
// (its config annotation's; "" from a gang made before the plan chose one: the
// template's default mode).
bool SameRecompute(const planner::Config& c, const std::string& live) {
  return c.recompute == (live.empty() ? engine::DefaultRecompute(c.template_name) : live);
}
}  // namespace

engine::WorldView BuildWorldView(const WorldInput& in) {
  engine::WorldView w;
  w.now = in.now;
  std::map<std::string, int> index;
  for (const NodeCapacity& n : *in.nodes) {
    index[n.name] = static_cast<int>(w.nodes.size());
    w.nodes.push_back({n.name, n.Free(), n.gpu_memory_gib > 0 ? n.gpu_memory_gib : kGpuMemoryGib,
                       true, n.gpu_type});
  }
  std::vector<int> next_slot(w.nodes.size(), 0);
  std::map<std::string, std::string> type_of;  // node -> GPU type
  for (const NodeCapacity& n : *in.nodes) type_of[n.name] = n.gpu_type;
  for (size_t t = 0; t < in.tasks->size(); ++t) {
    const api::ExpandedTask& task = (*in.tasks)[t];
    const TaskConfigs& tc = (*in.configs)[t];
    engine::TaskView v;
    v.name = task.name;
    v.weight = task.task.weight;
    int64_t total = engine::TotalSteps(task.task);
    auto sd = in.steps_done.find(task.name);
    int64_t done_steps = sd == in.steps_done.end() ? 0 : sd->second;
    v.remaining_work = static_cast<double>(std::max<int64_t>(0, total - done_steps)) *
                       static_cast<double>(task.task.training.batch_size);
    if (in.elastic) {
      auto sa = in.samples_done.find(task.name);
      const int64_t samples = sa == in.samples_done.end() ? 0 : sa->second;
      v.remaining_work =
          static_cast<double>(std::max<int64_t>(0, engine::SampleBudget(task.task) - samples));
    }
    v.profile = tc.configs;
    v.gpu_types = task.task.gpu_types;
    v.done = in.done.count(task.name) > 0;
    // A task no node's type serves stays out of the plan (the planner refuses
    // a problem with a task that fits nowhere); its status says why.
    v.arrived = in.profiling.count(task.name) == 0 && !tc.configs.empty() &&
                GpuTypesMissing(task.task.gpu_types, *in.nodes).empty() &&
                ConfigsNeverFit(tc, task.task, *in.nodes).empty();
    v.arrival = in.now;
    auto live = in.live.find(task.name);
    if (live != in.live.end() && !v.done) {
      // Pods from before the annotation existed ("") are left as they are.
      v.outdated = !live->second.pod_settings.empty() && !in.pod_settings.empty() &&
                   live->second.pod_settings != in.pod_settings;
      const api::TaskConfig& c = live->second.config;
      // With configurations per GPU type, the one of the gang's nodes' type.
      const std::string live_type = c.nodes.empty() ? "" : type_of[c.nodes.front()];
      int config = -1;
      for (size_t k = 0; k < tc.configs.size(); ++k) {
        // A live gang's batch is part of its configuration (0: the task's own;
        // a configuration without a batch matches any).
        int64_t live_batch = c.batch_size > 0 ? c.batch_size : task.task.training.batch_size;
        if (tc.templates[k] == c.template_ && tc.configs[k].gpus == c.gpus &&
            (tc.configs[k].batch_size == 0 || tc.configs[k].batch_size == live_batch) &&
            SameRecompute(tc.configs[k], c.recompute) &&
            (tc.configs[k].gpu_type.empty() || tc.configs[k].gpu_type == live_type)) {
          config = static_cast<int>(k);
          break;
        }
      }
      engine::RunningView r;
      r.config = config;
      bool placed = config >= 0 && static_cast<int>(c.nodes.size()) == c.gpus;
      for (size_t k = 0; placed && k < c.nodes.size(); ++k) {
        auto it = index.find(c.nodes[k]);
        if (it == index.end()) {
          placed = false;
          break;
        }
        r.gpus.push_back({it->second, next_slot[static_cast<size_t>(it->second)]++});
      }
      std::sort(r.gpus.begin(), r.gpus.end());
      if (placed) v.running = r;
    }
    w.tasks.push_back(std::move(v));
  }
  return w;
}

std::optional<double> MeasuredSpeedFactor(const TaskProgress& p, int generation,
                                          const planner::Config& config) {
  // The first report covers warm-up (compilation, allocator): wait for more.
  if (p.generation != generation || p.step < 2 || p.samples_per_second <= 0 ||
      config.throughput <= 0) {
    return std::nullopt;
  }
  // Each rank reports its data-parallel share of every global batch.
  const contract::TemplateTraits* traits = contract::FindTemplate(config.template_name);
  const int replicas =
      traits != nullptr && traits->axis == contract::WorldAxis::kData ? config.gpus : 1;
  return p.samples_per_second * replicas / config.throughput;
}

// ---- the reconciler ---------------------------------------------------------

// One reconcile pass of one job: what it read of the cluster, and what each
// phase of Reconcile builds for the next (profiles -> observed gangs -> the
// engine's world and step -> stops, launches, status). Rebuilt every pass.
struct Reconciler::JobContext {
  std::string key;
  api::LoadedJob loaded;
  JobState* state = nullptr;
  std::string job_label;
  std::vector<Json> job_pods;  // every pod of the job (gangs and profile gangs)
  std::vector<Json> all_pods, nodes;
  std::string ns, resource;  // the job's namespace, its GPU resource name
  // 1. Capacity and profiles.
  std::vector<NodeCapacity> capacity;
  int total_gpus = 0;
  std::vector<TaskConfigs> configs;
  std::set<std::string> profiling;                // tasks still waiting for a profile
  std::map<std::string, std::string> never_fits;  // tasks no admitting node can hold, and why
  // 2. The job's gangs as the cache shows them.
  std::set<std::string> lost;  // nodes gone
  std::vector<Json> gang_pods;
  std::map<std::string, TaskObservation> observed;
  TimePoint now_tp;
  double now = 0;
  std::map<std::string, int64_t> steps_done, samples_done;
  std::set<std::string> done, prior_done;
  std::map<std::string, LiveGang> live;
  std::set<std::string> blocked;  // tasks that must not launch now
  std::set<std::string> pending_seen;
  std::optional<api::Condition> kueue_condition;  // what Kueue decided (kueue.h)
  bool kueue_admitted = false;  // spec.resources.gpuQuota is Kueue's admitted GPUs
  // 3. The engine's world and step.
  WorldInput wi;
  engine::WorldView world;
  int quota = 0, launch_cap = 0;
  bool share_stopped_now = false;  // a running gang was stopped for the share: plan again
  engine::StepResult step;
  // 4. Claims (gpu_claims.h): the snapshot the pass counted claims at, the GPUs
  // free for its launches by node, and whether a claim was refused (another
  // job took the GPUs since: the next pass plans on a fresh snapshot).
  uint64_t claims_seq = 0;
  std::map<std::string, int> launch_free;
  bool claim_refused = false;
  // Tasks whose pods the API server forbade this pass (ForbiddenLaunch): why.
  std::map<std::string, std::string> forbidden;
  uint64_t ticket = 0;  // the pass's snapshot in the ledger (0: none yet)
  GpuClaims* claims = nullptr;
  JobContext() = default;
  JobContext(const JobContext&) = delete;
  JobContext& operator=(const JobContext&) = delete;
  ~JobContext() {
    if (claims != nullptr && ticket != 0) claims->End(ticket);
  }
};

Reconciler::Reconciler(kube::Client* client, Caches caches, ReconcilerOptions options,
                       const Clock* clock)
    : client_(client),
      caches_(std::move(caches)),
      options_(std::move(options)),
      clock_(clock),
      claims_(options_.expectation_timeout_s),
      shares_([this] {
        // A change of share costs what a re-plan's move of a running gang does.
        engine::ClusterShareOptions o = options_.shares;
        o.autoscaler.rescale_cost_s = options_.engine.switch_cost_s;
        return o;
      }()) {}

std::string Reconciler::NowText() const {
  if (options_.now_rfc3339) return options_.now_rfc3339();
  return Rfc3339Utc(std::time(nullptr));
}

void Reconciler::Event(const JobContext& ctx, kube::EventType type, const std::string& reason,
                       const std::string& action, const std::string& note) {
  Event(ctx.loaded.job.metadata, type, reason, action, note);
}

void Reconciler::Event(const api::ObjectMeta& job, kube::EventType type, const std::string& reason,
                       const std::string& action, const std::string& note) {
  if (options_.events == nullptr) return;
  kube::Object regarding = {
      {"apiVersion", ModelSelectionJobs().ApiVersion()},
      {"kind", "ModelSelectionJob"},
      {"metadata", {{"name", job.name}, {"namespace", job.namespace_}, {"uid", job.uid}}}};
  Status s = options_.events->Record(regarding, type, reason, action, note);
  // An event is for people; failing to record one must not stop the work.
  if (!s.ok()) {
    Log(LogLevel::kWarning, "Could not record event",
        {{"job", job.namespace_ + "/" + job.name}, {"error", s.ToString()}});
  }
}

double Reconciler::NowSeconds() const { return ToSeconds(clock_->Now().time_since_epoch()); }

Reconciler::JobState* Reconciler::StateFor(const std::string& key,
                                           const api::ModelSelectionJob& job) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<JobState>& s = jobs_[key];
  // The job's scheduling spec, as the local runner and the simulator apply it.
  engine::EngineOptions wanted = engine::JobEngineOptions(job.spec.scheduling, options_.engine);
  if (!s || s->uid != job.metadata.uid) {
    s = std::make_unique<JobState>();
    s->uid = job.metadata.uid;
    s->engine = std::make_unique<engine::Engine>(std::move(wanted), clock_);
  } else if (s->engine->UpdateOptions(wanted)) {
    // Edited on a running job: the next step solves again under the new settings.
    Log(LogLevel::kInfo, "Scheduling settings changed",
        {{"msj", key}, {"generation", std::to_string(job.metadata.generation)}});
  }
  return s.get();
}

void Reconciler::Drop(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.erase(key);
  }
  claims_.Forget(key);
  std::lock_guard<std::mutex> lock(shares_mu_);
  shares_.Remove(key);
}

void Reconciler::LeaveShares(const std::string& key) {
  std::lock_guard<std::mutex> lock(shares_mu_);
  shares_.Remove(key);
}

int Reconciler::Solves(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(key);
  return it == jobs_.end() ? 0 : it->second->engine->solves();
}

engine::ActionJournal Reconciler::Journal(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(key);
  return it == jobs_.end() ? engine::ActionJournal{} : it->second->engine->journal();
}

Status Reconciler::CreateObjects(const std::string& ns, const Json& service,
                                 const std::vector<Json>& pods) {
  auto s = client_->Create(Services(), ns, ToKube(service));
  if (!s.ok() && !kube::IsAlreadyExists(s.status())) return s.status();
  for (const Json& pod : pods) {
    auto p = client_->Create(kube::Pods(), ns, ToKube(pod));
    if (!p.ok() && !kube::IsAlreadyExists(p.status())) return p.status();
  }
  return OkStatus();
}

Status Reconciler::DeleteGang(const std::string& ns, const std::string& service,
                              const std::vector<std::string>& pods) {
  for (const std::string& name : pods) {
    Status s = client_->Delete(kube::Pods(), ns, name);
    if (!s.ok() && !kube::IsNotFound(s)) return s;
  }
  if (!service.empty()) {
    Status s = client_->Delete(Services(), ns, service);
    if (!s.ok() && !kube::IsNotFound(s)) return s;
  }
  return OkStatus();
}

// What was created of a gang the API server refused part of: its pods and
// Service, by the names BuildGang gave them (those never created are NotFound).
Status Reconciler::DeleteRefusedGang(const std::string& ns, const Gang& gang) {
  std::vector<std::string> names;
  for (const Json& p : gang.pods) names.push_back(Str(p, "metadata", "name"));
  return DeleteGang(ns, Str(gang.service, "metadata", "name"), names);
}

Status Reconciler::MergeIntoConfigMap(const std::vector<CachedProfile>& profiles,
                                      ProfileTable* table) {
  const std::string& ns = options_.profile_namespace;
  return kube::RetryOnConflict([&]() -> Status {
    auto current = client_->Get(kube::ConfigMaps(), ns, kProfileConfigMapName);
    ProfileTable stored;
    if (current.ok()) {
      std::vector<api::FieldError> errors;
      stored = DecodeProfileConfigMap(ToApi(*current), &errors);
    } else if (!kube::IsNotFound(current.status())) {
      return current.status();
    }
    for (const CachedProfile& p : profiles) MergeProfile(&stored, p);
    BoundProfiles(&stored);
    Json encoded = EncodeProfileConfigMap(stored, ns);
    *table = stored;
    if (!current.ok()) return client_->Create(kube::ConfigMaps(), ns, ToKube(encoded)).status();
    kube::Object updated = *current;
    updated["data"] = ToKube(encoded["data"]);
    return client_->Update(kube::ConfigMaps(), ns, updated).status();
  });
}

// A profile trial that no node takes (every pod Pending past the gang timeout:
// the scheduler refuses its node, or the GPUs it was pinned to went to others)
// is torn down; a later pass pins it again to GPUs free then.
Status Reconciler::TimeOutPendingTrial(JobContext& ctx, const std::string& hash,
                                       const std::vector<Json>& pods) {
  bool all_pending = !pods.empty();
  for (const Json& p : pods) {
    const std::string phase = Str(p, "status", "phase");
    all_pending = all_pending && (phase.empty() || phase == "Pending");
  }
  if (!all_pending) return OkStatus();
  const std::string label = "profile-" + hash;
  ctx.pending_seen.insert(label);
  auto [since, inserted] = ctx.state->pending_since.emplace(label, clock_->Now());
  const double waited = ToSeconds(clock_->Now() - since->second);
  if (inserted || waited <= options_.gang_timeout_s) return OkStatus();
  std::vector<std::string> names;
  names.reserve(pods.size());
  for (const Json& p : pods) names.push_back(Str(p, "metadata", "name"));
  ORRERY_RETURN_IF_ERROR(DeleteGang(ctx.ns, Str(pods.front(), "spec", "subdomain"), names));
  ctx.state->pending_since.erase(since);
  char note[256];
  std::snprintf(note, sizeof(note),
                "profile trial %s waited %.0f s Pending (no node took its pods); torn down, it "
                "is tried again on GPUs free later",
                hash.c_str(), waited);
  Log(LogLevel::kWarning, "Tore down profile trial pending too long",
      {{"job", ctx.key}, {"profile", hash}});
  Event(ctx, kube::EventType::kWarning, "ProfileTimedOut", "Profile", note);
  return OkStatus();
}

Status Reconciler::HarvestProfiles(JobContext& ctx, ProfileTable* table) {
  std::map<std::string, std::vector<Json>> gangs;  // profile key hash -> pods
  for (const Json& p : ctx.job_pods) {
    std::string key = Label(p, kProfileLabel);
    if (!key.empty()) gangs[key].push_back(p);
  }
  const std::string& ns = ctx.loaded.job.metadata.namespace_;
  for (const auto& [hash, pods] : gangs) {
    auto outcome = ParseProfileGang(pods);
    if (!outcome.ok()) {
      Log(LogLevel::kWarning, "Could not read profile gang",
          {{"job", ctx.key}, {"profile", hash}, {"error", outcome.status().ToString()}});
      continue;
    }
    if (outcome->state == ProfileOutcome::State::kRunning) {
      ORRERY_RETURN_IF_ERROR(TimeOutPendingTrial(ctx, hash, pods));
      continue;
    }
    CachedProfile cp;
    cp.entry = outcome->entry;
    cp.infeasible = outcome->state == ProfileOutcome::State::kInfeasible;
    cp.reason = outcome->reason;
    if (cp.entry.measured_at.empty()) cp.entry.measured_at = NowText();
    ORRERY_RETURN_IF_ERROR(MergeIntoConfigMap({cp}, table));
    ctx.state->harvested[ProfileDataKey(cp.entry)] = cp;
    std::vector<std::string> names;
    for (const Json& p : pods) names.push_back(Str(p, "metadata", "name"));
    ORRERY_RETURN_IF_ERROR(
        DeleteGang(ns, ProfileServiceName(ctx.loaded.job.metadata.name, cp.entry.Key()), names));
    if (options_.metrics != nullptr) {
      options_.metrics->profiling_runs.Add({{"result", cp.infeasible ? "infeasible" : "measured"}})
          .Increment();
    }
    Log(LogLevel::kInfo, cp.infeasible ? "Recorded infeasible profile" : "Recorded profile",
        {{"job", ctx.key}, {"key", cp.entry.Key()}, {"reason", cp.reason}});
    Event(ctx, cp.infeasible ? kube::EventType::kWarning : kube::EventType::kNormal,
          cp.infeasible ? "ProfileInfeasible" : "Profiled", "Profile",
          cp.entry.Key() + (cp.infeasible ? ": " + cp.reason + " " + outcome->message : ""));
  }
  return OkStatus();
}

Status Reconciler::WriteStatus(JobContext& ctx,
                               const std::map<std::string, TaskObservation>& observed,
                               const std::set<std::string>& profiling) {
  StatusInput in;
  in.job = &ctx.loaded.job;
  in.tasks = &ctx.loaded.tasks;
  in.observed = &observed;
  in.now = NowText();
  in.max_restarts = options_.max_restarts;
  in.profiling = profiling;
  in.never_fits = ctx.never_fits;
  in.forbidden = ctx.forbidden;
  for (const Json& n : ctx.nodes) {
    NodeGpu gpu = NodeGpuOf(n, options_.gpu_type_label);
    if (!gpu.type.empty()) in.node_gpu_types[Str(n, "metadata", "name")] = gpu.type;
  }
  if (ctx.state != nullptr) {
    in.replanned = ctx.state->replanned;
    for (const auto& [task, rejected] : ctx.state->pod_rejected) {
      if (rejected.first == ctx.loaded.job.metadata.generation) {
        in.pod_rejected[task] = rejected.second;
      }
    }
  }
  std::map<std::string, TaskProgress> progress;
  if (options_.progress != nullptr) {
    progress = options_.progress->ForJob(ctx.key);
    in.progress = &progress;
  }
  api::ModelSelectionJobStatus status = BuildJobStatus(in);
  if (ctx.kueue_condition) status.conditions.push_back(*ctx.kueue_condition);
  if (ctx.state != nullptr && ctx.state->plan_status) status.plan = ctx.state->plan_status;
  // The printer column's ETA: until the adopted plan's makespan.
  if (ctx.state != nullptr && ctx.state->plan_ends_at > 0 &&
      status.phase != api::Phase::kSucceeded && status.phase != api::Phase::kFailed &&
      status.phase != api::Phase::kSuspended) {
    status.eta = HumanDuration(ctx.state->plan_ends_at - ctx.now);
  }
  if (ctx.loaded.job.status && *ctx.loaded.job.status == status) return OkStatus();
  auto stored = client_->UpdateStatus(ModelSelectionJobs(), ctx.loaded.job.metadata.namespace_,
                                      ToKube(StatusUpdateObject(ctx.loaded.job, status)));
  if (!stored.ok()) return stored.status();
  // Progress moves every few seconds; a phase or task count change is news.
  const api::ModelSelectionJobStatus* before =
      ctx.loaded.job.status ? &*ctx.loaded.job.status : nullptr;
  // A task that can never fit is said once, when the condition first says so.
  auto never_fits = [](const api::ModelSelectionJobStatus* s) -> const api::Condition* {
    if (s == nullptr) return nullptr;
    for (const api::Condition& c : s->conditions) {
      if (c.type == "Degraded" && c.status == "True" && c.reason == "TaskNeverFits") return &c;
    }
    return nullptr;
  };
  if (const api::Condition* c = never_fits(&status);
      c != nullptr && never_fits(before) == nullptr) {
    Event(ctx, kube::EventType::kWarning, "TaskNeverFits", "Plan", c->message);
  }
  bool news = before == nullptr || before->phase != status.phase ||
              before->task_summary != status.task_summary;
  Log(news ? LogLevel::kInfo : LogLevel::kDebug, "Updated status",
      {{"job", ctx.key},
       {"phase", std::string(api::EnumName(status.phase))},
       {"tasks", status.task_summary}});
  return OkStatus();
}

StatusOr<kube::Result> Reconciler::Suspend(JobContext& ctx) {
  const std::string& ns = ctx.loaded.job.metadata.namespace_;
  std::map<std::string, std::vector<std::string>> by_service;
  for (const Json& p : ctx.job_pods) {
    if (PodFinished(p) && Label(p, kProfileLabel).empty()) continue;  // keep finished gangs
    by_service[Str(p, "spec", "subdomain")].push_back(Str(p, "metadata", "name"));
  }
  for (const auto& [service, pods] : by_service)
    ORRERY_RETURN_IF_ERROR(DeleteGang(ns, service, pods));
  ctx.state->expected.clear();
  ctx.state->engine->Forget();  // resumed, it plans afresh
  std::vector<Json> kept;
  for (const Json& p : ctx.job_pods) {
    if (PodFinished(p) && Label(p, kProfileLabel).empty()) kept.push_back(p);
  }
  auto observed = ObserveTasks(kept);
  ORRERY_RETURN_IF_ERROR(WriteStatus(ctx, observed, {}));
  return kube::Result{};
}

// The API server forbids the gang's pods now (403 at create: a ResourceQuota
// of the namespace is used up, or an admission policy says no for now). What
// was created of the gang goes (a part of a gang would hold GPUs and never
// start); the task waits, its status and an event say why, and the job comes
// back to try again (a quota frees without any event Orrery watches).
Status Reconciler::ForbiddenLaunch(JobContext& ctx, const std::string& task, const Gang& gang,
                                   const Status& refused) {
  ORRERY_RETURN_IF_ERROR(DeleteRefusedGang(ctx.loaded.job.metadata.namespace_, gang));
  const std::string message = kube::HumanMessage(refused);
  const bool quota = message.find("quota") != std::string::npos;
  ctx.forbidden[task] = (quota ? "waiting for the namespace's ResourceQuota: "
                               : "waiting: the API server forbids its pods now: ") +
                        message;
  Log(LogLevel::kWarning, "Pods forbidden", {{"job", ctx.key}, {"task", task}, {"error", message}});
  Event(
      ctx, kube::EventType::kWarning, quota ? "QuotaExceeded" : "PodsForbidden", "Launch",
      "task " + task + ": " + message +
          (quota ? " (it launches once the namespace's ResourceQuota has room: raise the quota "
                   "or lower spec.resources.gpuQuota; tried again every " +
                       std::to_string(kRetryForbiddenAfter.count()) + " s)"
                 : " (tried again every " + std::to_string(kRetryForbiddenAfter.count()) + " s)"));
  return OkStatus();
}

StatusOr<bool> Reconciler::AdmittedByKueue(JobContext& ctx) {
  int live_pods = 0;
  std::set<std::string> holding;  // tasks a pod of which is still alive
  for (const Json& p : ctx.job_pods) {
    if (PodFinished(p)) continue;
    ++live_pods;
    holding.insert(Label(p, kTaskLabel));
  }
  // What the unfinished tasks may use together (each at most gpusPerTask.max),
  // from the states the status last recorded; the rest of an admission goes
  // back to Kueue. A task is finished once its status says so and no pod of
  // it is left (its workers report before their pods end, and until then the
  // pods hold their GPUs).
  const api::ModelSelectionJob& job = ctx.loaded.job;
  std::set<std::string> finished;
  if (job.status) {
    for (const api::TaskStatus& t : job.status->tasks) {
      if ((t.state == api::TaskState::kSucceeded || t.state == api::TaskState::kFailed) &&
          holding.count(t.name) == 0) {
        finished.insert(t.name);
      }
    }
  }
  int unfinished = 0;
  for (const api::ExpandedTask& t : ctx.loaded.tasks) unfinished += finished.count(t.name) ? 0 : 1;
  const int per_task = job.spec.resources.gpus_per_task.max;
  const int usable = per_task > 0 ? unfinished * per_task : -1;
  ORRERY_ASSIGN_OR_RETURN(KueueGateResult gate, KueueGate(client_, caches_.kueue, &ctx.loaded.job,
                                                          live_pods, usable, NowText()));
  ctx.kueue_condition = gate.condition;
  ctx.kueue_admitted = gate.run;
  std::pair<std::string, std::string> told{gate.event_reason, gate.event_message};
  if (!gate.event_reason.empty() && told != ctx.state->kueue_event) {
    ctx.state->kueue_event = std::move(told);
    Log(LogLevel::kInfo, "Kueue decided",
        {{"job", ctx.key}, {"reason", gate.event_reason}, {"message", gate.event_message}});
    Event(ctx, gate.warning ? kube::EventType::kWarning : kube::EventType::kNormal,
          gate.event_reason, "Admit", gate.event_message);
  }
  return gate.run;
}

Status Reconciler::LaunchGang(JobContext& ctx, size_t task_index, const TaskConfigs& tc, int config,
                              const std::vector<std::string>& placement,
                              const std::map<std::string, TaskObservation>& observed,
                              bool* launched_before) {
  JobState& st = *ctx.state;
  const api::ModelSelectionJob& job = ctx.loaded.job;
  const api::ExpandedTask& task = ctx.loaded.tasks[task_index];
  const planner::Config& c = tc.configs[static_cast<size_t>(config)];
  // The next generation: past every one created, seen, or in the status.
  int generation = 0;
  auto lg = st.last_generation.find(task.name);
  if (lg != st.last_generation.end()) generation = lg->second + 1;
  auto obs = observed.find(task.name);
  if (obs != observed.end() && obs->second.gang) {
    generation = std::max(generation, obs->second.gang->generation + 1);
  }
  if (job.status) {
    for (const api::TaskStatus& ts : job.status->tasks) {
      if (ts.name == task.name && ts.config) generation = std::max(generation, ts.restarts + 1);
    }
  }
  GangRequest r;
  r.job = &job;
  r.task = &task;
  r.config.template_ = tc.templates[static_cast<size_t>(config)];
  r.config.gpus = c.gpus;
  r.config.nodes = 0;
  r.config.batch_size = c.batch_size;
  r.config.recompute = c.recompute;
  r.placement = placement;
  r.generation = generation;
  r.options = options_.gang;
  ORRERY_ASSIGN_OR_RETURN(Gang gang, BuildGang(r));
  // The GPUs are claimed before the create: a pass of another job that counted
  // them free since this pass's snapshot may have taken them already.
  const std::string claim = GangKey(ctx.job_label, GangLabelValue(task.name, generation));
  if (!claims_.TryClaim(ctx.key, claim, placement, &ctx.launch_free, ctx.claims_seq,
                        clock_->Now())) {
    Log(LogLevel::kInfo, "Launch waits: another job took its GPUs",
        {{"job", ctx.key}, {"task", task.name}});
    ctx.claim_refused = true;
    return OkStatus();
  }
  if (Status s = CreateObjects(job.metadata.namespace_, gang.service, gang.pods); !s.ok()) {
    claims_.Release(ctx.key, claim);
    if (kube::IsForbidden(s)) return ForbiddenLaunch(ctx, task.name, gang, s);
    if (!kube::IsInvalid(s)) return s;
    // The API server refuses this task's pods (422): what was created of the
    // gang goes, and the task fails for this spec; the others carry on.
    ORRERY_RETURN_IF_ERROR(DeleteRefusedGang(job.metadata.namespace_, gang));
    const std::string message = kube::HumanMessage(s);
    st.pod_rejected[task.name] = {job.metadata.generation, message};
    ctx.done.insert(task.name);
    Log(LogLevel::kWarning, "Pods rejected",
        {{"job", ctx.key}, {"task", task.name}, {"error", message}});
    Event(ctx, kube::EventType::kWarning, kPodRejected, "Launch",
          "task " + task.name + ": the API server rejected its pods: " + message +
              " (fix the spec field it names, e.g. spec.resources.nodeSelector, tolerations, "
              "image or gpuResourceName, and apply the job again)");
    return OkStatus();
  }
  st.engine->journal().Launched(task.name, config);
  LiveGang created;
  created.generation = generation;
  created.config.template_ = r.config.template_;
  created.config.gpus = c.gpus;
  created.config.batch_size = c.batch_size;
  created.config.recompute = c.recompute;
  created.config.nodes = placement;
  created.pod_settings = PodSettingsDigest(job.spec.resources);
  st.expected[task.name] =
      Expected{created, clock_->Now(), ctx.job_label, GangLabelValue(task.name, generation)};
  st.last_generation[task.name] = generation;
  std::string where;
  for (const std::string& n : placement) where += (where.empty() ? "" : ",") + n;
  const std::string config_text = c.template_name + "x" + std::to_string(c.gpus);
  Log(LogLevel::kInfo, "Created gang",
      {{"job", ctx.key},
       {"task", task.name},
       {"generation", std::to_string(generation)},
       {"config", config_text},
       {"nodes", where}});
  Event(ctx, kube::EventType::kNormal, generation == 0 ? "GangCreated" : "GangRelaunched", "Launch",
        task.name + " as " + config_text + " on " + where + " (generation " +
            std::to_string(generation) + ")");
  if (!*launched_before) {
    *launched_before = true;
    Event(ctx, kube::EventType::kNormal, "CheckpointLocation", "Launch",
          CheckpointLocationNote(job));
  }
  for (const std::string& w : gang.warnings) {
    Event(ctx, kube::EventType::kWarning, "NoCheckpointClaim", "Launch", w);
  }
  return OkStatus();
}

StatusOr<kube::Result> Reconciler::Reconcile(const std::string& key) {
  kube::ObjectPtr object = caches_.Job(key);
  if (!object) {
    Drop(key);  // deleted: its children go by owner reference
    return kube::Result{};
  }
  JobContext ctx;
  ctx.key = key;
  ctx.claims = &claims_;  // the pass ends in the ledger when ctx goes
  auto loaded = api::LoadJob(ToApi(*object));
  if (loaded.ok()) {
    // What only a cluster requires of a job (gang.h) is as final as the rest.
    Status cluster = api::FieldErrorsToStatus(
        ClusterSpecErrors(loaded->job, loaded->tasks),
        "invalid ModelSelectionJob " + loaded->job.metadata.name + " for a cluster");
    if (!cluster.ok()) loaded = cluster;
  }
  if (!loaded.ok()) return RejectInvalid(key, *object, loaded.status());
  ctx.loaded = std::move(*loaded);
  api::ModelSelectionJob& job = ctx.loaded.job;
  // Pods of this spec were rejected by the API server: only a new spec (a new
  // generation) can fix that, so this one is not tried again.
  if (job.status && job.status->phase == api::Phase::kFailed) {
    for (const api::Condition& c : job.status->conditions) {
      if (c.type == "Degraded" && c.status == "True" && c.reason == kPodRejected &&
          c.observed_generation == job.metadata.generation) {
        return kube::Result{};
      }
    }
  }
  if (!options_.worker_image.empty() && job.spec.resources.image == api::kDefaultWorkerImage) {
    job.spec.resources.image = options_.worker_image;
  }
  ctx.state = StateFor(key, job);
  ctx.ns = job.metadata.namespace_;
  ctx.resource = job.spec.resources.gpu_resource_name;
  ctx.job_label = LabelValue(job.metadata.name);
  ReadCluster(ctx);
  if (!job.spec.suspend && !KueueQueueName(job).empty()) {
    ORRERY_ASSIGN_OR_RETURN(bool admitted, AdmittedByKueue(ctx));
    if (!admitted) job.spec.suspend = true;  // held as a suspended job is: no pod runs
  }
  if (job.spec.suspend) {
    LeaveShares(key);  // a suspended job holds nothing and asks for nothing
    return Suspend(ctx);
  }
  // 1. Profiles: harvest finished profile gangs, then start the missing ones.
  ProfileTable table;
  ORRERY_RETURN_IF_ERROR(ReadProfiles(ctx, &table));
  CountCapacity(ctx);
  if (Status s = RequestProfiles(ctx, table); !s.ok()) {
    return kube::IsInvalid(s) ? RejectPods(ctx, *object, s) : s;
  }
  // 2. Observe the job's gangs; tear down the failed and the timed out.
  ObserveGangs(ctx);
  for (size_t t = 0; t < ctx.loaded.tasks.size(); ++t) ORRERY_RETURN_IF_ERROR(ObserveTask(ctx, t));
  SettleStoppedGangs(ctx);
  // 3. The engine's step over the job's world (and the cluster share above it).
  BuildWorld(ctx);
  ORRERY_RETURN_IF_ERROR(ApplyClusterShare(ctx));
  StepEngine(ctx);
  ORRERY_RETURN_IF_ERROR(ApplyStops(ctx));
  // 4. Launch the gangs the step chose, on the nodes it chose.
  ORRERY_RETURN_IF_ERROR(ApplyLaunches(ctx));
  // 5. Status, and when to come back.
  return FinishPass(ctx);
}

// A pod the API server rejects (422: a field the CRD and validation let
// through, such as a label key with a space in nodeSelector) fails the job with
// the server's message and an event; it is not retried until the spec changes.
StatusOr<kube::Result> Reconciler::RejectPods(JobContext& ctx, const kube::Object& object,
                                              const Status& why) {
  const std::string message =
      "the API server rejected this job's pods: " + kube::HumanMessage(why) +
      " (fix the spec field it names, e.g. spec.resources.nodeSelector, tolerations, image or "
      "gpuResourceName, and apply the job again)";
  Event(ctx, kube::EventType::kWarning, kPodRejected, "Launch", message);
  return RejectInvalid(ctx.key, object, InvalidArgumentError(message), kPodRejected);
}

// An invalid spec is recorded, not retried: only a new spec can fix it.
StatusOr<kube::Result> Reconciler::RejectInvalid(const std::string& key, const kube::Object& object,
                                                 const Status& why, const char* reason) {
  LeaveShares(key);
  Log(LogLevel::kWarning, "Rejected invalid job", {{"job", key}, {"error", why.ToString()}});
  std::vector<api::FieldError> errors;
  api::ModelSelectionJob job;
  api::DecodeJob(ToApi(object), &job, &errors);
  api::ModelSelectionJobStatus status = job.status.value_or(api::ModelSelectionJobStatus{});
  api::ModelSelectionJobStatus next = status;
  next.phase = api::Phase::kFailed;
  next.observed_generation = job.metadata.generation;
  const std::string& message = why.message();
  bool found = false;
  for (api::Condition& c : next.conditions) {
    if (c.type != "Degraded") continue;
    found = true;
    if (c.status != "True") c.last_transition_time = NowText();
    c.status = "True";
    c.reason = reason;
    c.message = message;
    c.observed_generation = job.metadata.generation;
  }
  if (!found) {
    api::Condition c;
    c.type = "Degraded";
    c.status = "True";
    c.reason = reason;
    c.message = message;
    c.observed_generation = job.metadata.generation;
    c.last_transition_time = NowText();
    next.conditions.push_back(c);
  }
  if (job.status && next == status) return kube::Result{};
  auto stored = client_->UpdateStatus(ModelSelectionJobs(), job.metadata.namespace_,
                                      ToKube(StatusUpdateObject(job, next)));
  if (!stored.ok()) return stored.status();
  // Once per spec, when the status first says so (RejectPods records its own).
  if (std::string_view(reason) != kPodRejected) {
    Event(job.metadata, kube::EventType::kWarning, reason, "Validate", message);
  }
  return kube::Result{};
}

void Reconciler::ReadCluster(JobContext& ctx) {
  // The snapshot is taken through the claims ledger, which orders it among
  // other passes' (gpu_claims.h); converting it happens outside its lock.
  std::vector<kube::ObjectPtr> pods, nodes;
  ctx.ticket = claims_.Begin([&] {
    pods = caches_.pods->List();
    nodes = caches_.nodes->List();
  });
  for (const kube::ObjectPtr& p : pods) {
    Json pod = ToApi(*p);
    if (Str(pod, "metadata", "namespace") == ctx.ns && Label(pod, kJobLabel) == ctx.job_label &&
        Label(pod, kManagedByLabel) == kManagedByValue) {
      ctx.job_pods.push_back(pod);
    }
    ctx.all_pods.push_back(std::move(pod));
  }
  for (const kube::ObjectPtr& n : nodes) ctx.nodes.push_back(ToApi(*n));
}

// The shared profile cache, plus what this operator harvested that the cache
// does not show yet, plus the job's finished profile gangs.
Status Reconciler::ReadProfiles(JobContext& ctx, ProfileTable* table_out) {
  ProfileTable& table = *table_out;
  JobState& st = *ctx.state;
  if (caches_.configmaps != nullptr) {
    kube::ObjectPtr cm =
        caches_.configmaps->Get(kube::KeyFor(options_.profile_namespace, kProfileConfigMapName));
    if (cm) {
      std::vector<api::FieldError> errors;
      table = DecodeProfileConfigMap(ToApi(*cm), &errors);
      for (const api::FieldError& e : errors) {
        Log(LogLevel::kWarning, "Skipped a bad profile cache entry",
            {{"path", e.path}, {"error", e.message}});
      }
    }
  }
  for (auto it = st.harvested.begin(); it != st.harvested.end();) {
    if (table.count(it->first) > 0) {  // the cache has caught up
      it = st.harvested.erase(it);
    } else {
      MergeProfile(&table, it->second);
      ++it;
    }
  }
  ORRERY_RETURN_IF_ERROR(HarvestProfiles(ctx, &table));
  return OkStatus();
}

// Every node's GPUs as this job sees them: what other pods hold, and the gangs
// other jobs created that the cache does not show yet.
void Reconciler::CountCapacity(JobContext& ctx) {
  const std::string& key = ctx.key;
  std::vector<NodeCapacity>& capacity = ctx.capacity;
  const std::vector<Json>& all_pods = ctx.all_pods;
  // Only the nodes the job's pods can run on (node_filter.h).
  std::vector<std::string> refusals;
  capacity = NodeCapacities(ctx.nodes, all_pods, ctx.resource, ctx.job_label,
                            &ctx.loaded.job.spec.resources, &refusals, options_.gpu_type_label,
                            options_.gpu_memory_reserve);
  if (capacity.empty() && !refusals.empty()) {
    std::string why;
    for (size_t i = 0; i < refusals.size() && i < 3; ++i) why += (i > 0 ? "; " : "") + refusals[i];
    if (refusals.size() > 3) why += "; and " + std::to_string(refusals.size() - 3) + " more";
    Log(LogLevel::kWarning, "No node admits the job's pods", {{"job", key}, {"why", why}});
    Event(ctx, kube::EventType::kWarning, "NoAdmittingNode", "Plan",
          "no node with GPUs can run this job's pods: " + why +
              " (fix spec.resources.nodeSelector or tolerations, or uncordon a node)");
  }
  // Gangs and trials other jobs created that the pod cache does not show yet
  // hold their GPUs too (gpu_claims.h: passes of other jobs run alongside).
  GpuClaims::Shown cached_gangs;
  for (const Json& p : all_pods) {
    const std::string job = Label(p, kJobLabel);
    if (!Label(p, kGangLabel).empty()) {
      ++cached_gangs[GangKey(job, Label(p, kGangLabel))][PodNode(p)];
    }
    if (!Label(p, kProfileLabel).empty()) {
      ++cached_gangs[ProfileGangKey(job, Label(p, kProfileLabel))][PodNode(p)];
    }
  }
  GpuClaims::View others = claims_.Others(key, cached_gangs, clock_->Now(), ctx.ticket);
  ctx.claims_seq = others.seq;
  for (NodeCapacity& n : capacity) {
    auto it = others.by_node.find(n.name);
    if (it != others.by_node.end()) n.foreign += it->second;
  }
  // Configurations are bounded by the cluster's size, not by what is free now, so
  // a busy cluster does not hide a running gang's configuration from the planner.
  ctx.total_gpus = 0;
  for (const NodeCapacity& n : capacity) ctx.total_gpus += n.allocatable;
}

// The GPUs trials may use now, for the engine's profile step: free now (not
// used by others, nor by the job's own gangs), so a trial never crowds out a
// planned gang; under a Kueue admission, within what its gangs and trials leave
// of it. `trial_free` is the free GPUs by node the claims are checked against;
// `trial_gpus` the GPUs the job's trials hold now.
engine::ProfileRoom Reconciler::TrialRoom(JobContext& ctx, std::map<std::string, int>* trial_free,
                                          int* trial_gpus) {
  const api::ModelSelectionJob& job = ctx.loaded.job;
  const JobState& st = *ctx.state;
  engine::ProfileRoom room;
  for (const NodeCapacity& n : ctx.capacity) (*trial_free)[n.name] = n.Free();
  for (const Json& p : ctx.job_pods) {
    const bool trial = !Label(p, kProfileLabel).empty();
    // A trial whose pods are still there (finished ones until harvested) is
    // not started again; its GPUs are counted with the claims (CountCapacity).
    if (trial) room.running.insert(Label(p, kProfileLabel));
    if (PodFinished(p)) continue;
    if (trial) {
      *trial_gpus += PodGpuRequest(p, ctx.resource);
    } else {
      (*trial_free)[PodNode(p)] -= PodGpuRequest(p, ctx.resource);
    }
  }
  for (const auto& [task, e] : st.expected) {
    for (const std::string& node : e.gang.config.nodes) --(*trial_free)[node];
  }
  std::map<std::string, std::string> type_of;
  for (const NodeCapacity& n : ctx.capacity) type_of[n.name] = n.gpu_type;
  for (const auto& [node, free] : *trial_free) {  // by name: the order a placement fills
    room.nodes.push_back({node, type_of[node], free});
  }
  // Under a Kueue admission trials count against the admitted GPUs as gangs
  // do: the job's live pods plus a new trial stay within them, and the gangs
  // planned below get what the trials leave.
  if (ctx.kueue_admitted) {
    int budget = job.spec.resources.gpu_quota;
    for (const Json& p : ctx.job_pods)
      budget -= PodFinished(p) ? 0 : PodGpuRequest(p, ctx.resource);
    for (const auto& [task, e] : st.expected)
      budget -= static_cast<int>(e.gang.config.nodes.size());
    room.budget = std::max(0, budget);
  }
  return room;
}

// Each task's configurations from the profiles (ctx.configs), the keys they
// lack as the profile step's wants (their requests by key in `requests`), and
// why a task can never run here (ctx.never_fits).
std::vector<engine::ProfileWant> Reconciler::ProfileWants(
    JobContext& ctx, const ProfileTable& table, std::map<std::string, ProfileRequest>* requests) {
  const api::ModelSelectionJob& job = ctx.loaded.job;
  const std::vector<NodeCapacity>& capacity = ctx.capacity;
  int widest = 0;  // the most GPUs one node the job may use has
  for (const NodeCapacity& n : capacity) widest = std::max(widest, n.allocatable);
  std::vector<engine::ProfileWant> wants;
  for (const api::ExpandedTask& task : ctx.loaded.tasks) {
    ctx.configs.push_back(ConfigsFromProfiles(job.spec, task, table, options_.device,
                                              ctx.total_gpus, capacity, options_.gpu_type_speeds));
    const std::string profiled_type = ProfiledGpuType(task.task, capacity);
    // A gang lives on one node (BuildTaskConfigs never spans nodes): a task
    // whose narrowest choice is wider than every node never runs.
    const int least = job.spec.resources.gpus_per_task.min;
    if (!capacity.empty() && least > widest) {
      ctx.never_fits[task.name] =
          "needs at least " + std::to_string(least) +
          " GPUs on one node (spec.resources.gpusPerTask.min), and the largest node its pods may "
          "use has " +
          std::to_string(widest) + ": lower gpusPerTask.min or add larger nodes";
    }
    // A trial of key `m` on `type` ("" untyped), placed on nodes of `types`.
    auto want = [&](const engine::ProfileKeyRef& m, const std::string& type,
                    std::vector<std::string> types, const std::string& what) {
      ProfileRequest r;
      r.job = &job;
      r.task = &task;
      r.template_ = m.template_;
      r.gpus = m.gpus;
      r.batch_size = m.batch_size;
      r.device = TypedProfileDevice(options_.device, type);
      r.deadline_seconds = options_.profile_deadline_s;
      r.backend = options_.gang.backend;
      engine::ProfileWant w;
      w.task = task.name;
      w.key = ProfileKeyHash(ProfileKey(r).Key());
      w.what = what;
      w.gpus = m.gpus;
      w.gpu_types = std::move(types);
      requests->emplace(w.key, r);
      wants.push_back(std::move(w));
    };
    // Trials that measure another GPU type's speed (ConfigsFromProfiles): the
    // task plans meanwhile on its profiled type's figures, so they hold
    // nothing back.
    for (const auto& [type, m] : ctx.configs.back().type_probes)
      want(m, type, {type}, engine::TrialText(m) + " on " + type);
    if (std::string why = GpuTypesMissing(task.task.gpu_types, capacity); !why.empty()) {
      // Allowed (a pool may come later), but said: the task waits for it.
      if (!ctx.never_fits.count(task.name)) ctx.never_fits[task.name] = why;
      continue;
    }
    if (ctx.configs.back().missing.empty()) {
      if (std::string why = ConfigsNeverFit(ctx.configs.back(), task.task, capacity);
          !why.empty() && !ctx.never_fits.count(task.name)) {
        ctx.never_fits[task.name] = why;
      }
      continue;
    }
    ctx.profiling.insert(task.name);
    for (const engine::ProfileKeyRef& m : ctx.configs.back().missing) {
      // On the type the task's profiles are keyed by.
      want(m, profiled_type,
           profiled_type.empty() ? task.task.gpu_types : std::vector<std::string>{profiled_type},
           engine::TrialText(m));
    }
  }
  return wants;
}

// The engine's profile step over the keys the job's tasks lack, and a profile
// gang for each trial it starts, on the GPUs it chose.
Status Reconciler::RequestProfiles(JobContext& ctx, const ProfileTable& table) {
  api::ModelSelectionJob& job = ctx.loaded.job;
  JobState& st = *ctx.state;
  std::map<std::string, int> trial_free;
  int trial_gpus = 0;
  const engine::ProfileRoom room = TrialRoom(ctx, &trial_free, &trial_gpus);
  std::map<std::string, ProfileRequest> requests;
  const std::vector<engine::ProfileWant> wants = ProfileWants(ctx, table, &requests);
  const engine::ProfileStep step = engine::StepProfiles(wants, room);
  st.engine->journal().IssuedProfiles(step, ctx.now);
  for (const engine::ProfileAction& a : step.start) {
    ProfileRequest r = requests.at(a.key);
    r.placement = a.placement;
    const std::string claim = ProfileGangKey(ctx.job_label, a.key);
    if (!claims_.TryClaim(ctx.key, claim, r.placement, &trial_free, ctx.claims_seq,
                          clock_->Now())) {
      ctx.claim_refused = true;  // another job took these GPUs since the snapshot
      continue;
    }
    for (const std::string& node : r.placement) {
      for (NodeCapacity& n : ctx.capacity) n.foreign += n.name == node ? 1 : 0;
    }
    auto pg = BuildProfileGang(r);
    Status created = pg.ok() ? CreateObjects(ctx.ns, pg->service, pg->pods) : pg.status();
    if (!created.ok()) {
      claims_.Release(ctx.key, claim);
      return created;
    }
    st.engine->journal().Profiling(a.key);
    Log(LogLevel::kInfo, "Created profile gang",
        {{"job", ctx.key}, {"task", a.task}, {"key", pg->key.Key()}});
    trial_gpus += a.gpus;
  }
  if (ctx.kueue_admitted) {
    job.spec.resources.gpu_quota = std::max(0, job.spec.resources.gpu_quota - trial_gpus);
  }
  return OkStatus();
}

void Reconciler::ObserveGangs(JobContext& ctx) {
  const api::ModelSelectionJob& job = ctx.loaded.job;
  // NotReady or unreachable nodes keep their gangs for a grace period.
  ctx.lost =
      LostNodes(ctx.nodes, ctx.job_pods, ParseRfc3339(NowText()).value_or(std::time(nullptr)),
                options_.node_lost_grace_s);
  for (const Json& p : ctx.job_pods) {
    if (Label(p, kProfileLabel).empty()) ctx.gang_pods.push_back(p);
  }
  ctx.observed = ObserveTasks(ctx.gang_pods, ctx.lost);
  ctx.now_tp = clock_->Now();
  ctx.now = NowSeconds();

  if (job.status) {
    std::map<std::string, int64_t> batch_of;
    for (const api::ExpandedTask& t : ctx.loaded.tasks)
      batch_of[t.name] = t.task.training.batch_size;
    for (const api::TaskStatus& t : job.status->tasks) {
      ctx.steps_done[t.name] = t.steps_done;
      ctx.samples_done[t.name] = SamplesDone(t, batch_of[t.name]);
      if (t.state == api::TaskState::kFailed && t.message.rfind(kPodRejectedMessage, 0) == 0) {
        // Rejected pods fail the task for that spec only: an edited spec
        // launches it again. What a restarted operator knows from the status.
        if (job.status->observed_generation == job.metadata.generation &&
            ctx.state->pod_rejected.count(t.name) == 0) {
          ctx.state->pod_rejected[t.name] = {
              job.metadata.generation,
              t.message.substr(std::string_view(kPodRejectedMessage).size())};
        }
        continue;
      }
      if (t.state == api::TaskState::kSucceeded || t.state == api::TaskState::kFailed) {
        ctx.prior_done.insert(t.name);
      }
      // A gang this operator (or the one before it) stopped for a plan: its
      // ranks going is that stop, not a failure to count against restarts.
      if (auto g = StoppingForPlanGeneration(t.message);
          t.state == api::TaskState::kRescaling && g &&
          ctx.state->replanned.insert(GangLabelValue(t.name, *g)).second) {
        ctx.state->rescaling.emplace(t.name, std::make_pair(ctx.now_tp, *g));
      }
    }
  }
}

// A rescale starts when a gang is torn down (counted once per generation) and
// ends when a newer generation of the task runs.
void Reconciler::RescaleStarted(JobContext& ctx, const std::string& task, int generation,
                                const char* reason) {
  JobState& st = *ctx.state;
  auto it = st.rescaling.find(task);
  if (it != st.rescaling.end() && it->second.second >= generation) return;
  st.rescaling[task] = {clock_->Now(), generation};
  if (options_.metrics != nullptr) {
    options_.metrics->rescales.Add({{"msj", ctx.key}, {"reason", reason}}).Increment();
  }
}

// Stops a running gang for a rescale (a re-plan moved it, or the cluster share
// shrank it): its ranks get SIGTERM and checkpoint, end as deleted rather than
// failed, and keep their GPUs until they are gone.
Status Reconciler::StopForRescale(JobContext& ctx, const std::string& task,
                                  const GangObservation& g, const char* reason) {
  JobState& st = *ctx.state;
  ORRERY_RETURN_IF_ERROR(DeleteGang(
      ctx.ns, GangServiceName(ctx.loaded.job.metadata.name, task, g.generation), g.pod_names));
  RescaleStarted(ctx, task, g.generation, reason);
  st.replanned.insert(GangLabelValue(task, g.generation));
  st.last_generation[task] = std::max(st.last_generation[task], g.generation);
  ctx.blocked.insert(task);
  return OkStatus();
}

// Whether the API server refused the task's pods for the job's current spec
// (it is then not launched); a refusal of an older spec is forgotten.
bool Reconciler::RefusedForThisSpec(JobContext& ctx, const std::string& task) {
  auto pr = ctx.state->pod_rejected.find(task);
  if (pr == ctx.state->pod_rejected.end()) return false;
  if (pr->second.first == ctx.loaded.job.metadata.generation) return true;
  ctx.state->pod_rejected.erase(pr);  // a new spec: try it
  return false;
}

// What one task's gang is doing now, and what follows: a finished task is done,
// a live gang is the world's, a failed or timed-out gang is torn down.
Status Reconciler::ObserveTask(JobContext& ctx, size_t task_index) {
  const api::ExpandedTask& task = ctx.loaded.tasks[task_index];
  const std::string& key = ctx.key;
  const std::string& ns = ctx.ns;
  const api::ModelSelectionJob& job = ctx.loaded.job;
  JobState& st = *ctx.state;
  const TimePoint now_tp = ctx.now_tp;
  std::map<std::string, TaskObservation>& observed = ctx.observed;
  std::map<std::string, LiveGang>& live = ctx.live;
  std::set<std::string>& blocked = ctx.blocked;
  std::set<std::string>& done = ctx.done;
  const std::set<std::string>& prior_done = ctx.prior_done;
  const std::string& name = task.name;
  auto it = observed.find(name);
  const GangObservation* g = it != observed.end() && it->second.gang ? &*it->second.gang : nullptr;
  if (it != observed.end() && !it->second.stale_pods.empty()) {
    ORRERY_RETURN_IF_ERROR(DeleteGang(ns, "", it->second.stale_pods));
  }
  int newest = g != nullptr ? g->generation : -1;
  auto ex = st.expected.find(name);
  if (ex != st.expected.end() &&
      (newest >= ex->second.gang.generation ||
       ToSeconds(now_tp - ex->second.created) > options_.expectation_timeout_s)) {
    st.expected.erase(ex);
    ex = st.expected.end();
  }
  if (ex != st.expected.end()) {  // created, not yet in the cache
    live[name] = ex->second.gang;
    blocked.insert(name);
    return OkStatus();
  }
  if (prior_done.count(name) > 0 || RefusedForThisSpec(ctx, name)) {
    done.insert(name);
    blocked.insert(name);
    return OkStatus();
  }
  if (g == nullptr) return OkStatus();
  std::string gang_label = GangLabelValue(name, g->generation);
  switch (g->phase) {
    case GangPhase::kSucceeded:
      done.insert(name);
      blocked.insert(name);
      break;
    case GangPhase::kPending: {
      ctx.pending_seen.insert(gang_label);
      auto [since, inserted] = st.pending_since.emplace(gang_label, now_tp);
      if (!inserted && ToSeconds(now_tp - since->second) > options_.gang_timeout_s) {
        Log(LogLevel::kWarning, "Tore down gang pending too long",
            {{"job", key}, {"task", name}, {"gang", gang_label}});
        Event(ctx, kube::EventType::kWarning, "GangTimedOut", "TearDown",
              "gang " + gang_label + " did not start within " +
                  std::to_string(static_cast<int>(options_.gang_timeout_s)) + " s");
        ORRERY_RETURN_IF_ERROR(
            DeleteGang(ns, GangServiceName(job.metadata.name, name, g->generation), g->pod_names));
        RescaleStarted(ctx, name, g->generation, "timeout");
        st.last_generation[name] = std::max(st.last_generation[name], g->generation);
        st.replan_now = true;  // its placement did not work out: plan again
        blocked.insert(name);
        break;
      }
      [[fallthrough]];
    }
    case GangPhase::kRunning:
      if (auto rs = st.rescaling.find(name); g->phase == GangPhase::kRunning &&
                                             rs != st.rescaling.end() &&
                                             rs->second.second < g->generation) {
        if (options_.metrics != nullptr) {
          static const prometheus::Histogram::BucketBoundaries kRescaleBuckets = {
              1, 5, 10, 30, 60, 120, 300, 600, 1800};
          options_.metrics->rescale_seconds.Add({{"msj", key}}, kRescaleBuckets)
              .Observe(ToSeconds(now_tp - rs->second.first));
        }
        st.rescaling.erase(rs);
      }
      // A gang this reconciler already stopped (the cache has not seen its
      // ranks go yet) is not outdated again: its settings count as unknown.
      if (g->config) {
        live[name] = LiveGang{g->generation, *g->config,
                              st.replanned.count(gang_label) > 0 ? "" : g->pod_settings};
      }
      blocked.insert(name);
      break;
    case GangPhase::kFailed:
    case GangPhase::kPartial:
      st.last_generation[name] = std::max(st.last_generation[name], g->generation);
      if (g->generation >= options_.max_restarts && st.replanned.count(gang_label) == 0) {
        done.insert(name);  // Failed for good: its pods stay as the record
        blocked.insert(name);
        break;
      }
      if (st.replanned.count(gang_label) == 0 &&
          !(st.rescaling.count(name) > 0 && st.rescaling[name].second >= g->generation)) {
        // Once per gang: later passes only wait for its ranks to go.
        Log(LogLevel::kInfo, "Tore down gang",
            {{"job", key},
             {"task", name},
             {"gang", gang_label},
             {"phase", GangPhaseName(g->phase)},
             {"reason", g->reason}});
        Event(ctx, kube::EventType::kWarning, "GangFailed", "TearDown",
              "gang " + gang_label + " " + GangPhaseName(g->phase) + ": " + g->reason);
      }
      ORRERY_RETURN_IF_ERROR(TearDownFailedGang(ctx, name, *g));
      break;
  }
  return OkStatus();
}

// A failed gang's ranks on lost nodes are deleted at once: no kubelet will
// confirm a graceful delete there. Ranks still alive elsewhere get SIGTERM and
// checkpoint on their way out; the task waits for them, so its next gang
// resumes from that checkpoint rather than an older one.
Status Reconciler::TearDownFailedGang(JobContext& ctx, const std::string& name,
                                      const GangObservation& g) {
  const std::string& ns = ctx.ns;
  const api::ModelSelectionJob& job = ctx.loaded.job;
  const std::string gang_label = GangLabelValue(name, g.generation);
  // Ranks on lost nodes are deleted at once: no kubelet will confirm a
  // graceful delete there. Ranks still alive elsewhere get SIGTERM and
  // checkpoint on their way out; the task waits for them, so its next
  // gang resumes from that checkpoint rather than an older one.
  bool alive = false;
  for (const Json& p : ctx.gang_pods) {
    if (Label(p, kGangLabel) != gang_label || PodFinished(p)) continue;
    if (ctx.lost.count(PodNode(p)) > 0) {
      kube::DeleteOptions force;
      force.grace_period_seconds = 0;
      Status s = client_->Delete(kube::Pods(), ns, Str(p, "metadata", "name"), force);
      if (!s.ok() && !kube::IsNotFound(s)) return s;
    } else {
      alive = true;
    }
  }
  ORRERY_RETURN_IF_ERROR(
      DeleteGang(ns, GangServiceName(job.metadata.name, name, g.generation), g.pod_names));
  RescaleStarted(ctx, name, g.generation, g.lost_nodes.empty() ? "failure" : "node_lost");
  if (alive) ctx.blocked.insert(name);
  return OkStatus();
}

// Pending timers of gangs no longer pending go; gangs the share stopped leave
// the world; and pods of gangs torn down or of stale generations keep their
// GPUs out of everyone's reach until they are gone.
void Reconciler::SettleStoppedGangs(JobContext& ctx) {
  JobState& st = *ctx.state;
  std::map<std::string, LiveGang>& live = ctx.live;
  const std::string& resource = ctx.resource;
  std::vector<NodeCapacity>& capacity = ctx.capacity;
  for (auto it = st.pending_since.begin(); it != st.pending_since.end();) {
    it = ctx.pending_seen.count(it->first) > 0 ? std::next(it) : st.pending_since.erase(it);
  }
  // Gangs the cluster share stopped are on their way out, whatever the cache
  // still shows: not running in the plan's world, not relaunched until gone.
  for (auto it = st.share_stopped.begin(); it != st.share_stopped.end();) {
    // Over once the task is done or relaunched, or once no rank of the stopped
    // gang is left but on a lost node (it never ends there by itself).
    bool going = false;
    for (const Json& p : ctx.gang_pods) {
      if (PodFinished(p) || Label(p, kTaskLabel) != it->first ||
          Annotation(p, kGenerationAnnotation) != std::to_string(it->second)) {
        continue;
      }
      going = going || ctx.lost.count(PodNode(p)) == 0;
    }
    if (ctx.done.count(it->first) > 0 || st.last_generation[it->first] > it->second || !going) {
      it = st.share_stopped.erase(it);
      continue;
    }
    auto lv = live.find(it->first);
    if (lv != live.end() && lv->second.generation == it->second) live.erase(lv);
    ctx.blocked.insert(it->first);
    ++it;
  }
  // Pods of gangs torn down (now or earlier) or of stale generations hold their
  // GPUs until they are gone (a running rank checkpoints first): a launch may
  // not count on those GPUs yet. The plan does: they are the job's own, free
  // in moments, as a stopped task's are in the simulator (so a stop does not
  // shrink the cluster the next plan sees, and its ranks leaving grow it back).
  for (const Json& p : ctx.gang_pods) {
    if (PodFinished(p)) continue;
    auto lv = live.find(Label(p, kTaskLabel));
    if (lv != live.end() &&
        Annotation(p, kGenerationAnnotation) == std::to_string(lv->second.generation)) {
      continue;
    }
    std::string node = PodNode(p);
    for (NodeCapacity& n : capacity) {
      if (n.name == node) n.stopping += PodGpuRequest(p, resource);
    }
  }
}

// The cluster as the job sees it, in the engine's terms.
void Reconciler::BuildWorld(JobContext& ctx) {
  WorldInput& wi = ctx.wi;
  wi.now = ctx.now;
  wi.tasks = &ctx.loaded.tasks;
  wi.configs = &ctx.configs;
  wi.nodes = &ctx.capacity;
  wi.steps_done = ctx.steps_done;
  wi.elastic = ctx.loaded.job.spec.elasticity.enabled;
  wi.samples_done = ctx.samples_done;
  wi.done = ctx.done;
  wi.profiling = ctx.profiling;
  wi.live = ctx.live;
  wi.pod_settings = PodSettingsDigest(ctx.loaded.job.spec.resources);
  ctx.world = BuildWorldView(wi);
  ctx.quota = ctx.loaded.job.spec.resources.gpu_quota;
  ctx.world.gpu_cap = ctx.quota;
  ctx.launch_cap = ctx.quota;
}

// The level above the job: its share of the GPUs every job's tasks compete for
// (engine/cluster_share.h). Launches keep within the share's cap; the plan too,
// except that it never cuts under what the job's gangs hold now or under the
// narrowest configuration of any of its tasks (a cap a task cannot fit in makes
// no plan at all; such a task waits at launch instead).
Status Reconciler::ApplyClusterShare(JobContext& ctx) {
  if (!options_.cluster_shares) return OkStatus();
  const std::string& key = ctx.key;
  const std::string& resource = ctx.resource;
  const int quota = ctx.quota;
  int& launch_cap = ctx.launch_cap;
  engine::WorldView& world = ctx.world;
  std::vector<Json> untrained;  // pods other than training gangs: theirs are shared out
  for (const Json& p : ctx.all_pods) {
    if (!IsOrreryGangPod(p)) untrained.push_back(p);
  }
  // A node NotReady for less than the grace period still holds its gangs: its
  // GPUs stay in what the shares divide, so a blip shrinks no share.
  std::vector<Json> counted;  // a copy only when some node is in its grace
  for (size_t i = 0; i < ctx.nodes.size(); ++i) {
    const Json& n = ctx.nodes[i];
    if (NodeReady(n) || ctx.lost.count(Str(n, "metadata", "name")) > 0) continue;
    if (counted.empty()) counted = ctx.nodes;
    counted[i]["status"]["conditions"] = Json::array({{{"type", "Ready"}, {"status", "True"}}});
  }
  // By GPU type: the shares are decided per type (a task never spans types).
  std::map<std::string, int> cluster_gpus;
  for (const NodeCapacity& n :
       NodeCapacities(counted.empty() ? ctx.nodes : counted, untrained, resource, "", nullptr,
                      nullptr, options_.gpu_type_label)) {
    cluster_gpus[n.gpu_type] += n.Free();
  }
  StatusOr<engine::ShareUpdate> update = [&] {
    std::lock_guard<std::mutex> lock(shares_mu_);
    // No room (a Kueue admission its trials fill): it asks the share for
    // nothing now (a demand's quota 0 would mean no cap).
    return shares_.Update(quota > 0 ? engine::DemandFromWorld(key, quota, world, ctx.loaded.tasks)
                                    : engine::JobDemand{key, 0, {}},
                          cluster_gpus, ctx.now);
  }();
  if (!update.ok()) {
    Log(LogLevel::kWarning, "Cluster share failed",
        {{"job", key}, {"error", update.status().ToString()}});
  } else {
    // A new decision may give other jobs GPUs (or take them back): they plan
    // again now rather than at their next periodic pass.
    for (const auto& [other, share] : update->shares) {
      if (update->decided && other != key && options_.enqueue) options_.enqueue(other);
    }
    auto mine = update->shares.find(key);
    if (mine != update->shares.end()) {
      const engine::JobShare& share = mine->second;
      const engine::ShareStep step =
          engine::StepShare(share, quota, world, ctx.state->applied_share_decision);
      ctx.state->applied_share_decision =
          std::max(ctx.state->applied_share_decision, share.decision);
      launch_cap = step.launch_cap;
      ORRERY_RETURN_IF_ERROR(StopShrunkGangs(ctx, share, step.stops));
      world.gpu_cap = step.plan_cap;
      if (options_.metrics != nullptr) {
        options_.metrics->gpu_share.Add({{"msj", key}}).Set(launch_cap);
      }
      if (std::find(update->changed.begin(), update->changed.end(), key) != update->changed.end()) {
        Log(LogLevel::kInfo, "Cluster share",
            {{"job", key}, {"cap", std::to_string(launch_cap)}, {"reason", share.reason}});
        Event(ctx, kube::EventType::kNormal, "ClusterShare", "Share",
              "may hold " + std::to_string(launch_cap) + " GPUs: " + share.reason);
      }
    }
  }
  return OkStatus();
}

// A running gang the share's decision shrinks to give its GPUs to other jobs
// (engine::StepShare says which) is stopped gracefully (its ranks checkpoint),
// and the job plans it again within its share when its ranks are gone.
Status Reconciler::StopShrunkGangs(JobContext& ctx, const engine::JobShare& share,
                                   const std::vector<engine::StopAction>& stops) {
  JobState& st = *ctx.state;
  const std::string& key = ctx.key;
  std::map<std::string, LiveGang>& live = ctx.live;
  std::map<std::string, TaskObservation>& observed = ctx.observed;
  std::vector<NodeCapacity>& capacity = ctx.capacity;
  for (const engine::StopAction& stop : stops) {
    const std::string& task = ctx.world.tasks[stop.task].name;
    auto lv = live.find(task);
    auto ob = observed.find(task);
    if (lv == live.end() || ob == observed.end() || !ob->second.gang ||
        ob->second.gang->generation != lv->second.generation) {
      continue;  // its gang is not observed as the view has it
    }
    const GangObservation& g = *ob->second.gang;
    const std::string gang_label = GangLabelValue(task, g.generation);
    int to_gpus = 0;
    for (const engine::ShareShrink& shrink : share.shrinks) {
      if (shrink.task == task) to_gpus = shrink.to_gpus;
    }
    const std::string to = to_gpus > 0 ? std::to_string(to_gpus) + " GPUs" : "the queue";
    const int from_gpus = static_cast<int>(lv->second.config.nodes.size());
    Log(LogLevel::kInfo, "Stopping gang the cluster share shrinks",
        {{"job", key}, {"task", task}, {"gang", gang_label}, {"to", to}});
    std::string note = "stopping " + gang_label;
    note += " (" + std::to_string(from_gpus) + " GPUs) to " + to;
    note += ": the cluster share gives its GPUs to other jobs; it checkpoints first";
    Event(ctx, kube::EventType::kNormal, "Rescale", "Rescale", note);
    // The cluster share (engine/cluster_share.h) decided this stop: it goes in
    // the job's journal as an engine action.
    ctx.state->engine->journal().IssuedShareStop(task, ctx.now);
    ctx.state->engine->journal().Stopped(task);
    ORRERY_RETURN_IF_ERROR(StopForRescale(ctx, task, g, "share"));
    st.share_stopped[task] = g.generation;
    for (const Json& p : ctx.gang_pods) {  // its ranks hold their GPUs until gone
      if (Label(p, kGangLabel) != gang_label || PodFinished(p)) continue;
      for (NodeCapacity& n : capacity) {
        if (n.name == PodNode(p)) n.stopping += PodGpuRequest(p, ctx.resource);
      }
    }
    live.erase(lv);
    ctx.share_stopped_now = true;
  }
  if (ctx.share_stopped_now) {
    ctx.wi.live = live;
    ctx.world = BuildWorldView(ctx.wi);
    ctx.world.gpu_cap = ctx.quota;
  }
  return OkStatus();
}

// The engine's step over the job's world: it finds what changed since it last
// planned (capacity, the cap, arrivals, finishes, measured speed, the interval),
// re-plans when that calls for it, and says which gangs stop and which launch.
// This reconciler applies exactly that.
void Reconciler::StepEngine(JobContext& ctx) {
  const std::string& key = ctx.key;
  JobState& st = *ctx.state;
  const engine::WorldView& world = ctx.world;
  const std::map<std::string, LiveGang>& live = ctx.live;
  const std::vector<TaskConfigs>& configs = ctx.configs;
  const std::vector<NodeCapacity>& capacity = ctx.capacity;
  const double now = ctx.now;
  engine::StepInput in;
  in.world = world;
  // Measured speed: what a live gang reports against its configuration's
  // profile, kept across the task's gangs (a new gang has not reported yet).
  const std::map<std::string, TaskProgress> reported = options_.progress != nullptr
                                                           ? options_.progress->ForJob(key)
                                                           : std::map<std::string, TaskProgress>{};
  for (size_t t = 0; t < in.world.tasks.size(); ++t) {
    engine::TaskView& v = in.world.tasks[t];
    auto lv = live.find(v.name);
    auto rp = reported.find(LabelValue(v.name));
    if (v.running && v.running->config >= 0 && lv != live.end() && rp != reported.end()) {
      const planner::Config& c = configs[t].configs[static_cast<size_t>(v.running->config)];
      if (auto f = MeasuredSpeedFactor(rp->second, lv->second.generation, c)) st.speed[v.name] = *f;
    }
    if (auto it = st.speed.find(v.name); it != st.speed.end()) v.speed_factor = it->second;
  }
  for (size_t t = 0; t < world.tasks.size(); ++t) {
    if (ctx.blocked.count(world.tasks[t].name) > 0) in.blocked.insert(t);
  }
  // GPUs free for launches now: each node's, less what the job's live gangs
  // hold there (the world counts them as the job's own).
  in.free_gpus.assign(world.nodes.size(), 0);
  for (size_t n = 0; n < capacity.size() && n < in.free_gpus.size(); ++n) {
    in.free_gpus[n] = capacity[n].FreeNow();
    for (const auto& [task, g] : live) {
      for (const std::string& node : g.config.nodes) {
        if (node == capacity[n].name) --in.free_gpus[n];
      }
    }
    ctx.launch_free[capacity[n].name] = in.free_gpus[n];
  }
  // Every GPU the job's gang pods hold (until they are gone) or will hold
  // (created, not yet in the cache) counts against its cap.
  int held = 0;
  for (const Json& p : ctx.gang_pods) {
    if (!PodFinished(p)) held += PodGpuRequest(p, ctx.resource);
  }
  for (const auto& [task, e] : st.expected) held += static_cast<int>(e.gang.config.nodes.size());
  in.launch_budget = std::max(0, ctx.launch_cap - held);
  if (ctx.share_stopped_now || st.replan_now) in.also = engine::Trigger::kCapacityChanged;
  st.replan_now = false;
  ctx.step = st.engine->Step(in);
  const engine::StepResult& step = ctx.step;
  const char* trigger = step.trigger ? engine::TriggerName(*step.trigger) : "none";
  if (!step.error.ok()) {
    Log(LogLevel::kWarning, "Planning failed",
        {{"job", key}, {"trigger", trigger}, {"error", step.error.ToString()}});
  }
  if (step.decision && step.decision->solved && options_.metrics != nullptr) {
    static const prometheus::Histogram::BucketBoundaries kSolveBuckets = {
        0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120};
    const engine::Decision& d = *step.decision;
    std::string planner = d.adopted ? d.plan.planner : std::string("orrery");
    options_.metrics->solve_seconds.Add({{"planner", planner}}, kSolveBuckets)
        .Observe(d.solver_seconds);
    options_.metrics->replans.Add({{"msj", key}, {"adopted", d.adopted ? "true" : "false"}})
        .Increment();
  }
  if (step.status && step.status->adopted) {
    const engine::PlanStatusUpdate& u = *step.status;
    api::PlanStatus ps;
    // Whole seconds from now: a printer column shows the number as stored.
    // Without a bound on the finish (weightedCompletionTime: the bound is on
    // that objective) lowerBoundSeconds is 0, as the CRD says.
    ps.makespan_seconds = std::round(std::max(0.0, u.ends_at - now));
    ps.lower_bound_seconds =
        u.ends_at_bound ? std::round(std::max(0.0, *u.ends_at_bound - now)) : 0;
    st.plan_ends_at = u.ends_at;
    ps.gap = u.plan_gap;
    ps.solve_seconds = u.solver_seconds;
    ps.revision = u.revision;
    ps.trigger = u.trigger;
    st.plan_status = ps;
    Log(LogLevel::kInfo, "Adopted plan",
        {{"job", key}, {"trigger", u.trigger}, {"planner", u.planner}});
    char note[200];
    std::snprintf(note, sizeof(note), "plan %lld (%s): makespan %.0f s, gap %.1f%%",
                  static_cast<long long>(ps.revision), u.trigger.c_str(), ps.makespan_seconds,
                  100 * ps.gap);
    Event(ctx, kube::EventType::kNormal, "PlanAdopted", "Plan", note);
  }
}

Status Reconciler::ApplyStops(JobContext& ctx) {
  const std::string& key = ctx.key;
  JobState& st = *ctx.state;
  const engine::WorldView& world = ctx.world;
  const std::map<std::string, LiveGang>& live = ctx.live;
  const std::map<std::string, TaskObservation>& observed = ctx.observed;
  const std::vector<TaskConfigs>& configs = ctx.configs;
  const double now = ctx.now;
  const int quota = ctx.quota;
  const std::optional<planner::Plan>& plan = st.engine->current_plan();
  // The running gangs the engine stops (the plan moves them, or the job holds
  // more GPUs than its quota or share allows) are stopped gracefully: their
  // ranks checkpoint on SIGTERM and each task waits for them, then relaunches
  // as planned from that checkpoint.
  for (const engine::StopAction& stop : ctx.step.stops) {
    if (stop.task >= world.tasks.size() || !plan || stop.task >= plan->assignments.size()) continue;
    const engine::TaskView& v = world.tasks[stop.task];
    auto lv = live.find(v.name);
    auto ob = observed.find(v.name);
    if (lv == live.end() || ob == observed.end() || !ob->second.gang ||
        ob->second.gang->generation != lv->second.generation) {
      continue;  // created and not yet in the cache
    }
    const planner::Assignment& a = plan->assignments[stop.task];
    const GangObservation& g = *ob->second.gang;
    const TaskConfigs& tc = configs[stop.task];
    std::string to = "queued";
    if (a.config >= 0 && static_cast<size_t>(a.config) < tc.configs.size()) {
      const planner::Config& c = tc.configs[static_cast<size_t>(a.config)];
      to = c.template_name + "x" + std::to_string(c.gpus);
      if (a.start > now) to += " later";
    }
    const char* why = engine::StopReasonName(stop.reason);
    Log(LogLevel::kInfo, "Stopping gang the plan moves",
        {{"job", key},
         {"task", v.name},
         {"generation", std::to_string(g.generation)},
         {"to", to},
         {"reason", why}});
    std::string stop_note = "stopping " + GangLabelValue(v.name, g.generation) + " to run it as " +
                            to + " (plan " + std::to_string(st.engine->adoptions()) + ")";
    const char* event_reason = "Rescale";
    if (stop.reason == engine::StopReason::kQuota) {
      stop_note +=
          ": the job holds more GPUs than its quota of " + std::to_string(quota) + " allows";
    } else if (stop.reason == engine::StopReason::kSpec) {
      event_reason = "SpecChanged";
      stop_note = "restarting " + GangLabelValue(v.name, g.generation) +
                  ": spec.resources (image, nodeSelector, tolerations or gpuResourceName) was "
                  "edited since its pods were made; it runs again as " +
                  to + " under the new settings";
    }
    Event(ctx, kube::EventType::kNormal, event_reason, "Rescale",
          stop_note + "; it checkpoints first");
    st.engine->journal().Stopped(v.name);
    ORRERY_RETURN_IF_ERROR(StopForRescale(ctx, v.name, g, why));
  }
  return OkStatus();
}

Status Reconciler::ApplyLaunches(JobContext& ctx) {
  const api::ModelSelectionJob& job = ctx.loaded.job;
  JobState& st = *ctx.state;
  const std::map<std::string, TaskObservation>& observed = ctx.observed;
  // The job's first gang says where its state lives, once: a gang seen, made,
  // or recorded in the status (a restarted operator, a resumed suspend) means
  // an earlier pass said it already.
  bool launched_before = !st.last_generation.empty() || !st.expected.empty();
  for (const auto& [name, o] : observed) launched_before = launched_before || o.gang.has_value();
  if (job.status) {
    for (const api::TaskStatus& ts : job.status->tasks) {
      launched_before = launched_before || ts.config.has_value() || ts.restarts > 0;
    }
  }
  for (const engine::LaunchAction& l : ctx.step.launches) {
    const TaskConfigs& tc = ctx.configs[l.task];
    if (l.config < 0 || static_cast<size_t>(l.config) >= tc.configs.size()) continue;
    std::vector<std::string> placement;
    for (const planner::GpuSlot& g : l.gpus) {
      placement.push_back(ctx.world.nodes[static_cast<size_t>(g.node)].name);
    }
    ORRERY_RETURN_IF_ERROR(
        LaunchGang(ctx, l.task, tc, l.config, placement, observed, &launched_before));
  }
  return OkStatus();
}

// Status from what the cache shows now (the next reconcile sees new pods), and
// when to come back.
StatusOr<kube::Result> Reconciler::FinishPass(JobContext& ctx) {
  // 5. Status from what the cache shows now (the next reconcile sees new pods).
  // A Conflict means the cache is behind our own last write: a quiet requeue.
  kube::Result result;
  Status written = WriteStatus(ctx, ctx.observed, ctx.profiling);
  if (kube::IsConflict(written)) {
    result.requeue = true;
  } else if (!written.ok()) {
    return written;
  }
  bool finished = true;
  for (const api::ExpandedTask& t : ctx.loaded.tasks)
    finished = finished && ctx.done.count(t.name) > 0;
  if (!finished && ctx.claim_refused) {
    result.requeue_after = std::chrono::seconds(1);  // plan again on a fresh snapshot
  } else if (!finished && !ctx.forbidden.empty()) {
    result.requeue_after = kRetryForbiddenAfter;  // a quota may have room by then
  } else if (!finished) {
    // Back when the engine wants to be asked again (its next periodic
    // re-plan), and at least every kRequeueWhileActive for progress.
    result.requeue_after = kRequeueWhileActive;
    const double wait_s = ctx.step.next_step_at - ctx.now;
    if (wait_s >= 0 && wait_s < ToSeconds(kRequeueWhileActive)) {
      result.requeue_after = std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::duration<double>(std::ceil(std::max(1.0, wait_s))));
    }
  }
  return result;
}

}  // namespace orrery::controller
