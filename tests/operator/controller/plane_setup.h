// Setting up a real control plane for the operator's integration and e2e tests:
// the ModelSelectionJob CRD, the Helm chart with a token of its service account,
// GPU nodes, seeded profiles and jobs. One implementation, so every suite runs
// the operator against the same objects a user's cluster would hold.
#pragma once

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/profile_pod.h"
#include "operator/controller/reconciler.h"
#include "operator/engine/profile_configs.h"
#include "operator/kube/client.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"
#include "tests/testing/control_plane.h"
#include "tests/testing/wait.h"

namespace orrery::controller::testutil {

inline std::string SourceDir() { return ORRERY_SOURCE_DIR; }

// Applies the repository's ModelSelectionJob CRD and waits until the server
// has established it (ControlPlane::WaitEstablished). The commands' output goes to `output`.
inline bool InstallJobCrd(const orrery::testing::ControlPlane& plane, std::string* output) {
  auto r = plane.Kubectl("apply --server-side -f " + SourceDir() +
                         "/crds/orrery.dev_modelselectionjobs.yaml");
  *output += r.output;
  if (r.exit_code != 0) return false;
  r = plane.WaitEstablished("modelselectionjobs.orrery.dev");
  *output += r.output;
  return r.exit_code == 0;
}

// `helm install orrery` from the repository's chart into `ns` (created), with
// `helm_flags` added, then a kubeconfig that authenticates with a token of the
// chart's service account (TokenRequest), so a permission the chart's RBAC
// lacks fails the test. Returns the kubeconfig's path, or "" on failure.
inline std::string InstallChartAsServiceAccount(const orrery::testing::ControlPlane& plane,
                                                const std::string& ns,
                                                const std::string& helm_flags,
                                                std::string* output) {
  auto r = orrery::testing::RunCommand(
      plane.bin_dir() + "/helm --kubeconfig " + plane.kubeconfig() + " install orrery " +
      SourceDir() + "/helm/orrery --namespace " + ns + " --create-namespace " + helm_flags);
  *output += r.output;
  if (r.exit_code != 0) return "";
  r = plane.Kubectl("-n " + ns + " create token orrery --duration 1h");
  *output += r.output;
  if (r.exit_code != 0) return "";
  const std::string token = r.output.substr(0, r.output.find('\n'));
  const std::string path = plane.dir() + "/orrery-sa.kubeconfig";
  std::ofstream(path) << "apiVersion: v1\nkind: Config\n"
                      << "clusters:\n- name: plane\n  cluster:\n    server: " << plane.server()
                      << "\n    certificate-authority: " << plane.ca_file() << "\n"
                      << "users:\n- name: orrery\n  user:\n    token: " << token
                      << "\ncontexts:\n- name: orrery\n  context:\n    cluster: plane\n"
                      << "    user: orrery\n    namespace: " << ns << "\ncurrent-context: orrery\n";
  return path;
}

inline void UninstallChart(const orrery::testing::ControlPlane& plane, const std::string& ns) {
  orrery::testing::RunCommand(plane.bin_dir() + "/helm --kubeconfig " + plane.kubeconfig() +
                              " uninstall orrery --namespace " + ns + " --wait");
}

// A Node with `gpus` of `resource` whose status says Ready. No kubelet keeps
// it so: the status is written once, which is all the reconciler reads.
inline Status CreateReadyGpuNode(kube::Client& client, const std::string& name, int gpus,
                                 const std::string& resource = "nvidia.com/gpu") {
  kube::Object node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  auto created = client.Create(kube::Nodes(), "", node);
  if (!created.ok()) return created.status();
  kube::Object with_status = *created;
  kube::Object resources = {
      {resource, std::to_string(gpus)}, {"cpu", "16"}, {"memory", "64Gi"}, {"pods", "110"}};
  with_status["status"] = {
      {"capacity", resources},
      {"allocatable", resources},
      {"conditions", kube::Object::array({{{"type", "Ready"},
                                           {"status", "True"},
                                           {"reason", "KubeletReady"},
                                           {"message", "test node"},
                                           {"lastHeartbeatTime", "2026-01-01T00:00:00Z"},
                                           {"lastTransitionTime", "2026-01-01T00:00:00Z"}}})}};
  auto updated = client.UpdateStatus(kube::Nodes(), "", with_status);
  return updated.ok() ? OkStatus() : updated.status();
}

// Gives node `name` labels, taints and a cordon, as a platform team would.
inline Status ShapeNode(kube::Client& client, const std::string& name,
                        const std::map<std::string, std::string>& labels,
                        const kube::Object& taints = kube::Object::array(), bool cordoned = false) {
  kube::Object patch = {{"metadata", {{"labels", kube::Object::object()}}},
                        {"spec", {{"unschedulable", cordoned}}}};
  for (const auto& [k, v] : labels) patch["metadata"]["labels"][k] = v;
  if (!taints.empty()) patch["spec"]["taints"] = taints;
  auto patched = client.Patch(kube::Nodes(), "", name, kube::PatchType::kMerge, patch, {});
  return patched.ok() ? OkStatus() : patched.status();
}

// Sets node `name`'s Ready condition to `status` ("True", "False", "Unknown")
// since `since` (RFC 3339), as the node lifecycle controller would.
inline Status SetNodeReady(kube::Client& client, const std::string& name, const std::string& status,
                           const std::string& since) {
  kube::PatchOptions po;
  po.subresource = "status";
  kube::Object patch = {
      {"status",
       {{"conditions",
         kube::Object::array({{{"type", "Ready"},
                               {"status", status},
                               {"reason", status == "True" ? "KubeletReady" : "NodeStatusUnknown"},
                               {"lastHeartbeatTime", since},
                               {"lastTransitionTime", since}}})}}}};
  auto patched = client.Patch(kube::Nodes(), "", name, kube::PatchType::kStrategicMerge, patch, po);
  return patched.ok() ? OkStatus() : patched.status();
}

// A measured ddp profile of every task of `job` at each of `gpus`, as if
// profiling had run: samples/s from `samples_per_s(g)`, the step time that
// follows from the task's batch.
// ddp profiles at every GPU count in `gpus` and every batch size the job
// offers its tasks (engine::CandidateBatches: the task's own unless elastic),
// `samples_per_s(gpus, batch)` each.
inline ProfileTable DdpBatchProfiles(const api::LoadedJob& job, const std::vector<int>& gpus,
                                     const std::function<double(int, int64_t)>& samples_per_s,
                                     const std::string& device = "cuda") {
  ProfileTable table;
  for (const api::ExpandedTask& task : job.tasks) {
    for (int64_t batch : engine::CandidateBatches(job.job.spec, task.task.training.batch_size)) {
      for (int g : gpus) {
        ProfileRequest r;
        r.job = &job.job;
        r.task = &task;
        r.template_ = api::Template::kDdp;
        r.gpus = g;
        r.batch_size = batch;
        r.device = device;
        CachedProfile p;
        p.entry = ProfileKey(r);
        p.entry.samples_per_s = samples_per_s(g, batch);
        p.entry.step_time_s = static_cast<double>(batch) / p.entry.samples_per_s;
        p.entry.measured_at = "2026-01-01T00:00:00Z";
        table[ProfileDataKey(p.entry)] = p;
      }
    }
  }
  return table;
}

inline ProfileTable DdpProfiles(const api::LoadedJob& job, const std::vector<int>& gpus,
                                const std::function<double(int)>& samples_per_s,
                                const std::string& device = "cuda") {
  return DdpBatchProfiles(
      job, gpus, [&](int g, int64_t) { return samples_per_s(g); }, device);
}

// Stores `table` as the profile ConfigMap of namespace `ns`.
inline Status StoreProfiles(kube::Client& client, const ProfileTable& table,
                            const std::string& ns) {
  auto created = client.Create(kube::ConfigMaps(), ns,
                               kube::Object::parse(EncodeProfileConfigMap(table, ns).dump()));
  return created.ok() ? OkStatus() : created.status();
}

// Creates `job` in `ns` as `kubectl apply` would: the spec, no status.
inline StatusOr<kube::Object> CreateJob(kube::Client& client, const api::ModelSelectionJob& job,
                                        const std::string& ns) {
  Json body = api::EncodeJob(job);
  body.erase("status");
  return client.Create(ModelSelectionJobs(), ns, kube::Object::parse(body.dump()));
}

// The job's pods (gangs and profile gangs) as the server holds them now.
inline std::vector<kube::Object> JobPods(kube::Client& client, const std::string& ns,
                                         const std::string& job) {
  kube::ListOptions o;
  o.label_selector = std::string(kJobLabel) + "=" + LabelValue(job);
  auto list = client.List(kube::Pods(), ns, o);
  if (!list.ok()) ADD_FAILURE() << list.status();
  std::vector<kube::Object> pods;
  if (list.ok()) {
    for (const kube::Object& p : (*list)["items"]) pods.push_back(p);
  }
  return pods;
}

// The reconciler's four caches over a real API server, started and synced.
struct PlaneCaches {
  PlaneCaches(kube::Client* client, const std::string& job_ns, const std::string& profile_ns)
      : profile_ns_(profile_ns),
        jobs(client, ModelSelectionJobs(), In(job_ns)),
        pods(client, kube::Pods()),
        nodes(client, kube::Nodes()),
        configmaps(client, kube::ConfigMaps(), In(profile_ns)) {}
  ~PlaneCaches() {
    for (kube::Informer* i : {&jobs, &pods, &nodes, &configmaps}) i->Stop();
  }
  static kube::InformerOptions In(const std::string& ns) {
    kube::InformerOptions o;
    o.ns = ns;
    return o;
  }
  // Starts them; true once each has listed, the job is in, and `min_nodes`
  // nodes and the profile ConfigMap are seen.
  bool Start(const std::string& job_key, size_t min_nodes) {
    for (kube::Informer* i : {&jobs, &pods, &nodes, &configmaps}) i->Start();
    for (kube::Informer* i : {&jobs, &pods, &nodes, &configmaps}) {
      if (!i->WaitForSync(std::chrono::seconds(30))) return false;
    }
    using orrery::testing::WaitUntil;
    return WaitUntil([&] { return jobs.store().Get(job_key) != nullptr; }) &&
           WaitUntil([&] { return nodes.store().Size() >= min_nodes; }) && WaitUntil([&] {
             return configmaps.store().Get(kube::KeyFor(profile_ns_, kProfileConfigMapName)) !=
                    nullptr;
           });
  }
  Caches caches() { return {&jobs.store(), &pods.store(), &nodes.store(), &configmaps.store()}; }
  // Waits until the caches hold what the server holds of job `name` in `ns`:
  // as many of its pods, each at the server's resource version, and the job
  // at its. False when they do not within the wait.
  bool CatchUp(kube::Client& client, const std::string& ns, const std::string& name) {
    using orrery::testing::WaitUntil;
    const std::vector<kube::Object> server = JobPods(client, ns, name);
    const std::string label = LabelValue(name);
    bool ok = WaitUntil([&] {
      size_t cached = 0;
      for (const kube::ObjectPtr& p : pods.store().List()) {
        const kube::Object& meta = (*p)["metadata"];
        cached += meta.value("namespace", "") == ns &&
                          meta.value("labels", kube::Object::object()).value(kJobLabel, "") == label
                      ? 1
                      : 0;
      }
      return cached == server.size();
    });
    for (const kube::Object& p : server) {
      ok = ok && WaitUntil([&] {
             kube::ObjectPtr o = pods.store().Get(kube::KeyOf(p));
             return o && kube::ResourceVersionOf(*o) == kube::ResourceVersionOf(p);
           });
    }
    auto job = client.Get(ModelSelectionJobs(), ns, name);
    return ok && job.ok() && WaitUntil([&] {
             kube::ObjectPtr o = jobs.store().Get(kube::KeyFor(ns, name));
             return o && kube::ResourceVersionOf(*o) == kube::ResourceVersionOf(*job);
           });
  }
  std::string profile_ns_;
  kube::Informer jobs, pods, nodes, configmaps;
};

// `yaml` with each `from` replaced by its `to`; a `from` that is not there
// fails the test (the text it edits changed).
inline std::string Edited(std::string yaml,
                          const std::vector<std::pair<std::string, std::string>>& swaps) {
  for (const auto& [from, to] : swaps) {
    const size_t at = yaml.find(from);
    if (at == std::string::npos) {
      ADD_FAILURE() << "no '" << from << "' to replace";
      continue;
    }
    yaml.replace(at, from.size(), to);
  }
  return yaml;
}

// The registry kUntrustedImagePolicy refuses: a pod with an image from it
// passes the CRD and validation, and only its create fails (422).
inline constexpr const char* kUntrustedRegistry = "untrusted.example.com/";

// A ValidatingAdmissionPolicy `name` (and its binding, every namespace) that
// refuses pod creates where the CEL `expression` is false, with `message`; true
// once the server enforces it (a policy is compiled asynchronously, so a
// server-side dry run of `probe_pod`, a pod it must refuse, is retried until
// refused). RemovePodPolicy takes it away again.
inline bool InstallPodPolicy(const orrery::testing::ControlPlane& plane, const std::string& name,
                             const std::string& expression, const std::string& message,
                             const std::string& probe_pod, std::string* output) {
  const std::string policy =
      "apiVersion: admissionregistration.k8s.io/v1\n"
      "kind: ValidatingAdmissionPolicy\n"
      "metadata: {name: " +
      name +
      "}\n"
      "spec:\n"
      "  failurePolicy: Fail\n"
      "  matchConstraints:\n"
      "    resourceRules:\n"
      "    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
      "  validations:\n"
      "  - expression: \"" +
      expression +
      "\"\n"
      "    message: " +
      message +
      "\n"
      "---\n"
      "apiVersion: admissionregistration.k8s.io/v1\n"
      "kind: ValidatingAdmissionPolicyBinding\n"
      "metadata: {name: " +
      name +
      "}\n"
      "spec:\n"
      "  policyName: " +
      name +
      "\n"
      "  validationActions: [Deny]\n";
  auto r = plane.Kubectl("apply -f -", policy);
  *output += r.output;
  if (r.exit_code != 0) return false;
  return orrery::testing::WaitUntil(
      [&] {
        auto dry = plane.Kubectl("create --dry-run=server -f -", probe_pod);
        *output += dry.output;
        return dry.exit_code != 0 && dry.output.find(message) != std::string::npos;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(500));
}

inline void RemovePodPolicy(const orrery::testing::ControlPlane& plane, const std::string& name) {
  plane.Kubectl("delete validatingadmissionpolicybinding " + name + " --ignore-not-found");
  plane.Kubectl("delete validatingadmissionpolicy " + name + " --ignore-not-found");
}

// A platform team's "approved registries only" policy: pods with an image
// from kUntrustedRegistry are refused.
inline bool InstallUntrustedImagePolicy(const orrery::testing::ControlPlane& plane,
                                        const std::string& ns, std::string* output) {
  const std::string registry = kUntrustedRegistry;
  const std::string probe = "apiVersion: v1\nkind: Pod\nmetadata: {name: probe, namespace: " + ns +
                            "}\nspec:\n  automountServiceAccountToken: false\n  containers:\n"
                            "  - {name: c, image: " +
                            registry + "probe:1}\n";
  return InstallPodPolicy(plane, "orrery-test-trusted-images",
                          "object.spec.containers.all(c, !c.image.startsWith('" + registry + "'))",
                          "images from " + registry + " are not allowed in this cluster", probe,
                          output);
}

// Events on the server, as the operator's recorder writes them.
inline std::unique_ptr<kube::EventRecorder> Recorder(kube::Client* client,
                                                     const std::string& instance) {
  kube::EventRecorderOptions o;
  o.reporting_instance = instance;
  return std::make_unique<kube::EventRecorder>(client, o);
}

// What both tests configure: the profile namespace, a short solver limit, a
// fixed clock text, events through `recorder`.
inline ReconcilerOptions PlaneOptions(kube::EventRecorder* recorder,
                                      const std::string& profile_ns = "orrery-system") {
  ReconcilerOptions options;
  options.profile_namespace = profile_ns;
  options.engine.solver_time_limit_s = 2;
  options.now_rfc3339 = [] { return std::string("2026-01-01T00:00:00Z"); };
  options.events = recorder;
  return options;
}

}  // namespace orrery::controller::testutil
