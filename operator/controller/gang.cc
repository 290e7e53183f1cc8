#include "operator/controller/gang.h"

#include <set>

#include "operator/api/paths.h"
#include "operator/controller/names.h"
#include "operator/engine/profile_configs.h"

namespace orrery::controller {
namespace {

Json Env(const std::string& name, const std::string& value) {
  return Json{{"name", name}, {"value", value}};
}

Json Tolerations(const std::vector<api::Toleration>& tolerations) {
  Json out = Json::array();
  for (const api::Toleration& t : tolerations) {
    Json j = Json::object();
    if (!t.key.empty()) j["key"] = t.key;
    j["operator"] = t.operator_;
    if (!t.value.empty()) j["value"] = t.value;
    if (!t.effect.empty()) j["effect"] = t.effect;
    if (t.toleration_seconds) j["tolerationSeconds"] = *t.toleration_seconds;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

Status CheckJobMetadata(const api::ModelSelectionJob& job) {
  if (job.metadata.name.empty() || job.metadata.namespace_.empty() || job.metadata.uid.empty()) {
    return InvalidArgumentError("job metadata needs name, namespace and uid (got '" +
                                job.metadata.namespace_ + "/" + job.metadata.name + "' uid '" +
                                job.metadata.uid + "')");
  }
  return OkStatus();
}

std::string PodDnsName(const std::string& pod, const std::string& service, const std::string& ns) {
  return pod + "." + service + "." + ns + ".svc";
}

std::string JobCheckpointDir(const api::ModelSelectionJob& job) {
  std::string base = job.spec.checkpoints.path;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/" + job.metadata.name + "-" + job.metadata.uid;
}

std::string CheckpointDir(const api::ModelSelectionJob& job, const std::string& task) {
  return JobCheckpointDir(job) + "/" + task;
}

std::string CheckpointLocationNote(const api::ModelSelectionJob& job) {
  const std::string& claim = job.spec.checkpoints.claim_name;
  return "Checkpoints of each task go to " + JobCheckpointDir(job) + "/<task> (" +
         (claim.empty() ? "an emptyDir, lost with each pod" : "claim " + claim) +
         "). The folder is keyed by the job's UID " + job.metadata.uid +
         ", so a job created again under the name " + job.metadata.name +
         " starts fresh instead of resuming this one's state.";
}

Json OwnerReference(const api::ModelSelectionJob& job) {
  return Json{{"apiVersion", api::kApiVersion}, {"kind", api::kKind}, {"name", job.metadata.name},
              {"uid", job.metadata.uid},        {"controller", true}, {"blockOwnerDeletion", true}};
}

Json RestrictedContainerSecurityContext() {
  return Json{{"allowPrivilegeEscalation", false},
              {"readOnlyRootFilesystem", true},
              {"runAsNonRoot", true},
              {"capabilities", {{"drop", Json::array({"ALL"})}}},
              {"seccompProfile", {{"type", "RuntimeDefault"}}}};
}

Json RestrictedPodSecurityContext() {
  // fsGroup makes the checkpoint volume writable by the non-root worker.
  return Json{{"runAsNonRoot", true},
              {"runAsUser", kWorkerUid},
              {"runAsGroup", kWorkerUid},
              {"fsGroup", kWorkerUid},
              {"seccompProfile", {{"type", "RuntimeDefault"}}}};
}

Json GangSelector(const api::ModelSelectionJob& job, const std::string& task, int generation) {
  return Json{{kManagedByLabel, kManagedByValue},
              {kJobLabel, LabelValue(job.metadata.name)},
              {kTaskLabel, LabelValue(task)},
              {kGangLabel, GangLabelValue(task, generation)}};
}

Json HeadlessService(const api::ModelSelectionJob& job, const std::string& name,
                     const Json& selector, const Json& labels) {
  return Json{{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata",
               {{"name", name},
                {"namespace", job.metadata.namespace_},
                {"labels", labels},
                {"ownerReferences", Json::array({OwnerReference(job)})}}},
              {"spec",
               {{"clusterIP", "None"},
                {"publishNotReadyAddresses", true},
                {"selector", selector},
                {"ports", Json::array({{{"name", "rendezvous"},
                                        {"port", kRendezvousPort},
                                        {"targetPort", kRendezvousPort},
                                        {"protocol", "TCP"}}})}}}};
}

Json WorkerPod(const api::ModelSelectionJob& job, const PodParts& p) {
  const api::ResourcesSpec& res = job.spec.resources;
  Json env = Json::array(
      {Env("RANK", std::to_string(p.rank)), Env("WORLD_SIZE", std::to_string(p.world_size)),
       Env("MASTER_ADDR", p.master_addr), Env("MASTER_PORT", std::to_string(kRendezvousPort)),
       Env("ORRERY_BACKEND", p.backend),
       Env("ORRERY_METRICS_ADDRESS", ":" + std::to_string(kMetricsPort)),
       Env("ORRERY_MSJ", job.metadata.namespace_ + "/" + job.metadata.name),
       Env("ORRERY_TASK", p.labels.value(kTaskLabel, "")),
       Env("ORRERY_TERMINATION_MESSAGE_PATH", kTerminationMessagePath), Env("TMPDIR", "/tmp")});
  Json gpu = Json{{p.gpu_resource, 1}};
  Json container = {
      {"name", kWorkerContainer},
      {"image", res.image},
      {"args", p.args},
      {"env", env},
      {"ports",
       Json::array(
           {{{"name", "rendezvous"}, {"containerPort", kRendezvousPort}, {"protocol", "TCP"}},
            {{"name", "metrics"}, {"containerPort", kMetricsPort}, {"protocol", "TCP"}}})},
      {"resources", {{"limits", gpu}, {"requests", gpu}}},
      {"securityContext", RestrictedContainerSecurityContext()},
      {"terminationMessagePath", kTerminationMessagePath},
      {"terminationMessagePolicy", "FallbackToLogsOnError"},
      {"volumeMounts", Json::array({{{"name", "tmp"}, {"mountPath", "/tmp"}},
                                    {{"name", "shm"}, {"mountPath", "/dev/shm"}}})}};
  Json volumes = Json::array(
      {{{"name", "tmp"}, {"emptyDir", Json::object()}},
       {{"name", "shm"},
        {"emptyDir",
         {{"medium", "Memory"}, {"sizeLimit", std::to_string(p.shm_size_mib) + "Mi"}}}}});
  Json spec = {{"restartPolicy", "Never"},
               {"hostname", p.name},
               {"subdomain", p.service},
               {"enableServiceLinks", false},
               {"automountServiceAccountToken", false},
               {"terminationGracePeriodSeconds", p.grace_seconds},
               {"securityContext", RestrictedPodSecurityContext()},
               {"containers", Json::array({container})},
               {"volumes", volumes}};
  if (!p.node.empty()) {
    Json term = {{"matchFields", Json::array({{{"key", "metadata.name"},
                                               {"operator", "In"},
                                               {"values", Json::array({p.node})}}})}};
    spec["affinity"] = {{"nodeAffinity",
                         {{"requiredDuringSchedulingIgnoredDuringExecution",
                           {{"nodeSelectorTerms", Json::array({term})}}}}}};
  }
  if (!res.node_selector.empty()) {
    Json sel = Json::object();
    for (const auto& [k, v] : res.node_selector) sel[k] = v;
    spec["nodeSelector"] = sel;
  }
  if (!res.tolerations.empty()) spec["tolerations"] = Tolerations(res.tolerations);
  Json meta = {{"name", p.name},
               {"namespace", job.metadata.namespace_},
               {"labels", p.labels},
               {"annotations", p.annotations},
               {"ownerReferences", Json::array({OwnerReference(job)})}};
  return Json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
}

void AddTaskVolumes(const api::TaskSpec& task, bool with_output, Json* pod) {
  Json& container = (*pod)["spec"]["containers"][0];
  auto mount = [&](const std::string& name, const std::string& claim, const std::string& path,
                   bool read_only) {
    Json volume_mount = {{"name", name}, {"mountPath", path}};
    Json source = {{"claimName", claim}};
    if (read_only) volume_mount["readOnly"] = source["readOnly"] = true;
    container["volumeMounts"].push_back(std::move(volume_mount));
    (*pod)["spec"]["volumes"].push_back({{"name", name}, {"persistentVolumeClaim", source}});
  };
  if (task.model.pretrained && task.model.pretrained->volume) {
    const api::ModelVolume& v = *task.model.pretrained->volume;
    mount("model", v.claim_name, v.mount_path, true);
  }
  if (with_output && task.output && task.output->volume) {
    const api::OutputVolume& v = *task.output->volume;
    mount("output", v.claim_name, v.mount_path, false);
  }
}

std::vector<api::FieldError> ClusterSpecErrors(const api::ModelSelectionJob& job,
                                               const std::vector<api::ExpandedTask>& tasks) {
  std::vector<api::FieldError> errors;
  std::set<size_t> reported;  // one error per spec task, not per expanded one
  const api::CheckpointSpec& ck = job.spec.checkpoints;
  for (const api::ExpandedTask& e : tasks) {
    if (!e.task.output || reported.count(e.source_index) > 0) continue;
    const api::OutputSpec& o = *e.task.output;
    const std::string dir = engine::ExportDir(e, "");
    const bool on_output_volume = o.volume && api::PathUnder(dir, o.volume->mount_path);
    const bool on_checkpoints = !ck.claim_name.empty() && api::PathUnder(dir, ck.path);
    if (on_output_volume || on_checkpoints) continue;
    reported.insert(e.source_index);
    errors.push_back(
        {api::IndexPath("spec.tasks", e.source_index) + ".output.path",
         "\"" + dir +
             "\" is on no persistent volume of the worker pods: their root file system is "
             "read-only and their scratch space goes with them, so the model could not be kept",
         "set output.volume (a claim mounted read-write), or write under spec.checkpoints.path "
         "with spec.checkpoints.claimName set"});
  }
  return errors;
}

std::string PodSettingsDigest(const api::ResourcesSpec& resources) {
  // A canonical text of the settings (the selector map is sorted; the
  // tolerations keep the spec's order, which is what the pods get).
  Json tolerations = Json::array();
  for (const api::Toleration& t : resources.tolerations) {
    tolerations.push_back({t.key, t.operator_, t.value, t.effect,
                           t.toleration_seconds ? std::to_string(*t.toleration_seconds) : ""});
  }
  const Json settings = {{"image", resources.image},
                         {"gpuResourceName", resources.gpu_resource_name},
                         {"nodeSelector", resources.node_selector},
                         {"tolerations", tolerations}};
  return HashHex(settings.dump(), 16);
}

namespace {
// What the gang's workers are told to run (engine/worker_command.h): the
// template, GPUs, batch, checkpoints, device and the task's budget.
engine::LaunchConfig LaunchFor(const api::ModelSelectionJob& job, const GangRequest& r) {
  const GangConfig& c = r.config;
  const std::string& task = r.task->name;
  engine::LaunchConfig launch;
  launch.template_name = std::string(api::EnumName(c.template_));
  launch.gpus = c.gpus;
  launch.batch_size = c.batch_size;
  launch.recompute = c.recompute;
  launch.checkpoint_dir = CheckpointDir(job, task);
  launch.checkpoint_every = job.spec.checkpoints.interval_steps;
  launch.keep = job.spec.checkpoints.keep;
  launch.report_every = r.options.report_every;
  launch.threads = r.options.threads;
  // NCCL talks between GPUs: a gang on the nccl backend computes on CUDA.
  launch.device = r.options.backend == "nccl" ? "cuda" : "cpu";
  launch.lr_scaling = job.spec.elasticity.enabled ? job.spec.elasticity.learning_rate_scaling
                                                  : api::LrScaling::kNone;
  // An elastic task's budget is its samples, whatever batches it runs at: the
  // worker counts the steps that finish them from its checkpoint's exact
  // cursor. The operator's own view of that checkpoint may lag (a gang stopped
  // for a rescale writes its last one on SIGTERM, after the last progress poll),
  // and a task back at its own batch after another one must not run its own
  // step count again. An epoch budget on data of unknown size stays --epochs:
  // the worker converts it at each batch from the samples it has consumed.
  const api::TaskSpec& spec = r.task->task;
  if (job.spec.elasticity.enabled && (!spec.training.epochs || spec.data.synthetic)) {
    launch.samples = engine::SampleBudget(spec);
  }
  return launch;
}
}  // namespace

StatusOr<Gang> BuildGang(const GangRequest& r) {
  if (r.job == nullptr || r.task == nullptr) return InvalidArgumentError("gang: job and task");
  ORRERY_RETURN_IF_ERROR(CheckJobMetadata(*r.job));
  const api::ModelSelectionJob& job = *r.job;
  const std::string& task = r.task->name;
  const GangConfig& c = r.config;
  std::string what = "gang " + job.metadata.namespace_ + "/" + job.metadata.name + " task " + task;
  if (c.gpus < 1) return InvalidArgumentError(what + ": gpus must be at least 1");
  if (r.generation < 0) return InvalidArgumentError(what + ": negative generation");
  if (r.placement.size() != static_cast<size_t>(c.gpus)) {
    return InvalidArgumentError(what + ": placement names " + std::to_string(r.placement.size()) +
                                " nodes for " + std::to_string(c.gpus) + " ranks");
  }
  std::set<std::string> distinct;
  for (const std::string& n : r.placement) {
    if (n.empty()) return InvalidArgumentError(what + ": placement has an empty node name");
    distinct.insert(n);
  }
  if (c.nodes > 0 && distinct.size() != static_cast<size_t>(c.nodes)) {
    return InvalidArgumentError(what + ": placement spans " + std::to_string(distinct.size()) +
                                " nodes, the configuration says " + std::to_string(c.nodes));
  }

  Gang gang;
  gang.service_name = GangServiceName(job.metadata.name, task, r.generation);
  Json selector = GangSelector(job, task, r.generation);
  gang.service = HeadlessService(job, gang.service_name, selector, selector);

  const engine::LaunchConfig launch = LaunchFor(job, r);
  std::vector<std::string> args = {"train"};
  for (std::string& f : engine::TrainFlags(*r.task, launch)) args.push_back(std::move(f));

  Json config_note = {{"template", launch.template_name},
                      {"gpus", c.gpus},
                      {"nodes", static_cast<int>(distinct.size())},
                      {"batchSize", c.batch_size},
                      {"recompute", launch.recompute}};
  std::string rank0 = GangPodName(job.metadata.name, task, r.generation, 0);
  std::string master = PodDnsName(rank0, gang.service_name, job.metadata.namespace_);
  bool has_claim = !job.spec.checkpoints.claim_name.empty();
  if (!has_claim) {
    gang.warnings.push_back(
        "spec.checkpoints.claimName is empty: checkpoints of task " + task +
        " live in an emptyDir and are lost with the pod, so a rescale restarts from step 0");
  }
  for (int rank = 0; rank < c.gpus; ++rank) {
    PodParts p;
    p.name = GangPodName(job.metadata.name, task, r.generation, rank);
    p.service = gang.service_name;
    p.labels = selector;
    p.labels[kRankLabel] = std::to_string(rank);
    p.annotations[kWorldSizeAnnotation] = std::to_string(c.gpus);
    p.annotations[kGenerationAnnotation] = std::to_string(r.generation);
    p.annotations[kConfigAnnotation] = config_note.dump();
    p.annotations[kNodeAnnotation] = r.placement[static_cast<size_t>(rank)];
    p.annotations[kPodSettingsAnnotation] = PodSettingsDigest(job.spec.resources);
    if (!has_claim) p.annotations[kCheckpointWarningAnnotation] = gang.warnings.front();
    p.args = args;
    p.rank = rank;
    p.world_size = c.gpus;
    p.master_addr = master;
    p.node = r.placement[static_cast<size_t>(rank)];
    p.gpu_resource = job.spec.resources.gpu_resource_name;
    p.grace_seconds = r.options.termination_grace_seconds;
    p.backend = r.options.backend;
    p.shm_size_mib = r.options.shm_size_mib;
    Json pod = WorkerPod(job, p);
    Json& container = pod["spec"]["containers"][0];
    container["volumeMounts"].push_back(
        {{"name", "checkpoints"}, {"mountPath", job.spec.checkpoints.path}});
    if (has_claim) {
      pod["spec"]["volumes"].push_back(
          {{"name", "checkpoints"},
           {"persistentVolumeClaim", {{"claimName", job.spec.checkpoints.claim_name}}}});
    } else {
      pod["spec"]["volumes"].push_back({{"name", "checkpoints"}, {"emptyDir", Json::object()}});
    }
    AddTaskVolumes(r.task->task, /*with_output=*/true, &pod);
    gang.pods.push_back(std::move(pod));
  }
  return gang;
}

}  // namespace orrery::controller
