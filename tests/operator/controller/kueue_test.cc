// Kueue admission's pure pieces (the Workload a job asks with, what Kueue's
// status says, an admission applied to the job's resources, the reservation
// cleared after an eviction) and one pass of KueueGate over an in-memory API.
#include "operator/controller/kueue.h"

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "operator/controller/names.h"
#include "tests/operator/controller/test_objects.h"

namespace orrery::controller {
namespace {

using kube::Object;

api::ModelSelectionJob LabelledJob(const std::string& queue = "team-a-gpus") {
  api::ModelSelectionJob job = testing::LoadJob().job;
  job.metadata.labels[kKueueQueueLabel] = queue;
  return job;
}

// A Workload as Kueue leaves it once admitted with `gpus` of flavor `flavor`.
Object Admitted(Object wl, int gpus, const std::string& flavor) {
  wl["metadata"]["generation"] = 1;
  wl["status"]["conditions"] =
      Object::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
                     {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}});
  wl["status"]["admission"] = {
      {"clusterQueue", "cq-a"},
      {"podSetAssignments",
       Object::array({{{"name", kKueuePodSet},
                       {"count", gpus},
                       {"flavors", {{"nvidia.com/gpu", flavor}}},
                       {"resourceUsage", {{"nvidia.com/gpu", std::to_string(gpus)}}}}})}};
  return wl;
}

Object Evicted(Object wl, const std::string& reason) {
  wl["status"]["conditions"].push_back({{"type", "Evicted"},
                                        {"status", "True"},
                                        {"reason", reason},
                                        {"message", "Preempted to accommodate a workload"}});
  return wl;
}

const Object* Condition(const Object& wl, const std::string& type) {
  for (const Object& c : wl["status"]["conditions"]) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST(KueueTest, WorkloadAsksForTheQuotaAsOneGpuPodsOwnedByTheJob) {
  api::ModelSelectionJob job = LabelledJob();
  Object wl = BuildWorkload(job, "team-a-gpus", WorkloadPriority{"high", 1000});
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(wl["kind"], "Workload");
  EXPECT_EQ(wl["metadata"]["name"], WorkloadName(job));
  EXPECT_EQ(WorkloadName(job).rfind("msj-sweep-6f1d2-", 0), 0u);
  EXPECT_EQ(wl["metadata"]["namespace"], "team-a");
  const Object& owner = wl["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "ModelSelectionJob");
  EXPECT_EQ(owner["uid"], job.metadata.uid);
  EXPECT_TRUE(owner["controller"].get<bool>());
  EXPECT_EQ(wl["spec"]["queueName"], "team-a-gpus");
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["name"], "high");
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["kind"], "WorkloadPriorityClass");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 1u);
  const Object& ps = wl["spec"]["podSets"][0];
  EXPECT_EQ(ps["name"], kKueuePodSet);
  EXPECT_EQ(ps["count"], 8);     // spec.resources.gpuQuota
  EXPECT_EQ(ps["minCount"], 1);  // gpusPerTask.min: partial admission down to one task
  const Object& pod = ps["template"]["spec"];
  EXPECT_EQ(pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(pod["nodeSelector"]["orrery.dev/pool"], "gpu");
  EXPECT_EQ(pod["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(pod["tolerations"][0]["operator"], "Exists");
  // No priority class named: Kueue's default priority (none set here).
  EXPECT_FALSE(BuildWorkload(job, "q", std::nullopt)["spec"].contains("priority"));
}

TEST(KueueTest, ReadsPendingAdmittedEvictedAndFinished) {
  api::ModelSelectionJob job = LabelledJob();
  Object wl = BuildWorkload(job, "q", std::nullopt);
  KueueAdmission pending = ReadAdmission(wl, "nvidia.com/gpu");
  EXPECT_EQ(pending.state, KueueAdmission::State::kPending);
  EXPECT_FALSE(pending.reserved);
  wl["status"]["conditions"] = Object::array({{{"type", "QuotaReserved"},
                                               {"status", "False"},
                                               {"reason", "Pending"},
                                               {"message", "couldn't assign flavors"}}});
  pending = ReadAdmission(wl, "nvidia.com/gpu");
  EXPECT_EQ(pending.message, "couldn't assign flavors");
  api::Condition c = AdmissionCondition(pending, "q", 2);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "Pending");
  EXPECT_EQ(c.message, "Pending in LocalQueue q: couldn't assign flavors");

  Object admitted = Admitted(wl, 4, "a100");
  KueueAdmission a = ReadAdmission(admitted, "nvidia.com/gpu");
  EXPECT_EQ(a.state, KueueAdmission::State::kAdmitted);
  EXPECT_EQ(a.gpus, 4);
  EXPECT_EQ(a.flavor, "a100");
  EXPECT_EQ(a.cluster_queue, "cq-a");
  c = AdmissionCondition(a, "q", 2);
  EXPECT_EQ(c.status, "True");
  EXPECT_EQ(c.message, "Admitted to ClusterQueue cq-a with 4 GPUs of ResourceFlavor a100");

  KueueAdmission e = ReadAdmission(Evicted(admitted, "Preempted"), "nvidia.com/gpu");
  EXPECT_EQ(e.state, KueueAdmission::State::kEvicted);
  EXPECT_TRUE(e.reserved);  // until the job clears it
  EXPECT_EQ(e.reason, "Preempted");
  EXPECT_NE(AdmissionCondition(e, "q", 2).message.find("Evicted by Kueue (Preempted)"),
            std::string::npos);

  Object finished = FinishedWorkload(admitted, true, "done", "2026-11-27T00:00:00Z");
  EXPECT_EQ(ReadAdmission(finished, "nvidia.com/gpu").state, KueueAdmission::State::kFinished);
  EXPECT_EQ((*Condition(finished, "Finished"))["reason"], "Succeeded");
}

TEST(KueueTest, AdmissionCapsTheQuotaAndAddsTheFlavorsLabelsAndTolerations) {
  api::ModelSelectionJob job = LabelledJob();
  KueueAdmission a;
  a.state = KueueAdmission::State::kAdmitted;
  a.gpus = 3;
  a.flavor = "a100";
  Object flavor = {{"metadata", {{"name", "a100"}}},
                   {"spec",
                    {{"nodeLabels", {{"gpu.example/model", "a100"}, {"orrery.dev/pool", "gpu"}}},
                     {"tolerations", Object::array({{{"key", "reserved"},
                                                     {"operator", "Equal"},
                                                     {"value", "ml"},
                                                     {"effect", "NoSchedule"}}})}}}};
  api::ResourcesSpec r = job.spec.resources;
  ASSERT_TRUE(ApplyAdmission(a, {flavor}, &r).ok());
  EXPECT_EQ(r.gpu_quota, 3);  // 8 asked, 3 admitted
  EXPECT_EQ(r.node_selector.at("gpu.example/model"), "a100");
  EXPECT_EQ(r.node_selector.at("orrery.dev/pool"), "gpu");
  ASSERT_EQ(r.tolerations.size(), 2u);
  EXPECT_EQ(r.tolerations[1].key, "reserved");
  EXPECT_EQ(r.tolerations[1].value, "ml");
  // Applied twice (every pass), nothing is added twice.
  ASSERT_TRUE(ApplyAdmission(a, {flavor}, &r).ok());
  EXPECT_EQ(r.tolerations.size(), 2u);
  // More admitted than asked never raises the quota.
  a.gpus = 16;
  r = job.spec.resources;
  ASSERT_TRUE(ApplyAdmission(a, {}, &r).ok());
  EXPECT_EQ(r.gpu_quota, 8);
  // A flavor whose nodes the job's own selector excludes is an error naming both.
  flavor["spec"]["nodeLabels"]["orrery.dev/pool"] = "cpu";
  r = job.spec.resources;
  Status s = ApplyAdmission(a, {flavor}, &r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("spec.resources.nodeSelector[orrery.dev/pool]"), std::string::npos);
  EXPECT_NE(s.message().find("ResourceFlavor a100"), std::string::npos);
}

TEST(KueueTest, ClearedReservationFollowsKueuesJobIntegrationContract) {
  Object wl =
      Evicted(Admitted(BuildWorkload(LabelledJob(), "q", std::nullopt), 4, "a100"), "Preempted");
  Object cleared = ClearedReservation(wl, "2026-11-27T01:00:00Z");
  EXPECT_FALSE(cleared["status"].contains("admission"));
  const Object* reserved = Condition(cleared, "QuotaReserved");
  ASSERT_NE(reserved, nullptr);
  EXPECT_EQ((*reserved)["status"], "False");
  EXPECT_EQ((*reserved)["reason"], "Pending");
  EXPECT_EQ((*reserved)["lastTransitionTime"], "2026-11-27T01:00:00Z");
  EXPECT_EQ((*Condition(cleared, "Admitted"))["status"], "False");
  EXPECT_EQ((*Condition(cleared, "Requeued"))["status"], "True");
  EXPECT_EQ((*Condition(cleared, "Evicted"))["status"], "True");  // Kueue's own to clear
  KueueAdmission after = ReadAdmission(cleared, "nvidia.com/gpu");
  EXPECT_EQ(after.state, KueueAdmission::State::kEvicted);
  EXPECT_FALSE(after.reserved);
  // Evicted because its LocalQueue stopped: not requeued.
  Object stopped = ClearedReservation(
      Evicted(Admitted(BuildWorkload(LabelledJob(), "q", std::nullopt), 4, "a100"),
              "LocalQueueStopped"),
      "t");
  EXPECT_EQ((*Condition(stopped, "Requeued"))["status"], "False");
}

// Workloads and priority classes in memory; the store plays the informer.
class MemoryApi : public kube::Client {
 public:
  StatusOr<Object> Get(const kube::Resource& r, const std::string& ns,
                       const std::string& name) override {
    auto it = objects.find(r.resource + "/" + kube::KeyFor(ns, name));
    if (it == objects.end()) return NotFoundError(r.resource + " " + name + " not found");
    return it->second;
  }
  StatusOr<Object> List(const kube::Resource&, const std::string&,
                        const kube::ListOptions&) override {
    return UnimplementedError("list");
  }
  StatusOr<Object> Create(const kube::Resource& r, const std::string& ns,
                          const Object& obj) override {
    const std::string key = r.resource + "/" + kube::KeyFor(ns, obj["metadata"]["name"]);
    if (objects.count(key) > 0) return AlreadyExistsError(key + " already exists");
    return objects[key] = obj;
  }
  StatusOr<Object> Update(const kube::Resource& r, const std::string& ns,
                          const Object& obj) override {
    updates++;
    return objects[r.resource + "/" + kube::KeyFor(ns, obj["metadata"]["name"])] = obj;
  }
  StatusOr<Object> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                const Object& obj) override {
    status_writes++;
    return objects[r.resource + "/" + kube::KeyFor(ns, obj["metadata"]["name"])] = obj;
  }
  Status Delete(const kube::Resource&, const std::string&, const std::string&,
                const kube::DeleteOptions&) override {
    return UnimplementedError("delete");
  }
  StatusOr<Object> Patch(const kube::Resource&, const std::string&, const std::string&,
                         kube::PatchType, const Object&, const kube::PatchOptions&) override {
    return UnimplementedError("patch");
  }
  StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource&, const std::string&,
                                                     const kube::ListOptions&) override {
    return UnimplementedError("watch");
  }
  std::map<std::string, Object> objects;
  int status_writes = 0;
  int updates = 0;
};

// Kueue's pod sets are immutable: an edit of what they say names another
// Workload (the gate replaces the old one); an edit of anything else does not.
TEST(KueueTest, AnEditedRequestNamesAnotherWorkload) {
  api::ModelSelectionJob job = LabelledJob();
  const std::string before = WorkloadName(job);
  api::ModelSelectionJob suspended = job;
  suspended.spec.suspend = true;
  EXPECT_EQ(WorkloadName(suspended), before);
  for (const auto& edit : std::vector<std::function<void(api::ResourcesSpec&)>>{
           [](api::ResourcesSpec& r) { r.gpu_quota = 4; },
           [](api::ResourcesSpec& r) { r.gpus_per_task.min = 2; },
           [](api::ResourcesSpec& r) { r.node_selector["zone"] = "b"; },
           [](api::ResourcesSpec& r) { r.tolerations.clear(); }}) {
    api::ModelSelectionJob edited = job;
    edit(edited.spec.resources);
    EXPECT_NE(WorkloadName(edited), before);
    EXPECT_EQ(WorkloadName(edited).rfind("msj-sweep-6f1d2-", 0), 0u);
  }
}

TEST(KueueTest, GateHoldsTheJobUntilAdmittedThenCapsItAndReleasesAfterEviction) {
  MemoryApi api;
  kube::Store workloads, flavors;
  KueueCaches caches{&workloads, &flavors};
  api::ModelSelectionJob job = LabelledJob("q");
  job.metadata.labels[kKueuePriorityClassLabel] = "high";
  // A priority class that does not exist: the job waits, saying which.
  auto gate = KueueGate(&api, caches, &job, 0, -1, "t0");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_FALSE(gate->run);
  EXPECT_EQ(gate->condition.reason, "InvalidPriorityClass");
  EXPECT_NE(gate->condition.message.find("WorkloadPriorityClass high"), std::string::npos);
  api.objects["workloadpriorityclasses/high"] = {{"metadata", {{"name", "high"}}}, {"value", 100}};

  gate = KueueGate(&api, caches, &job, 0, -1, "t1");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_FALSE(gate->run);
  EXPECT_EQ(gate->event_reason, "WorkloadCreated");
  EXPECT_EQ(gate->condition.reason, "Pending");
  const std::string key = "workloads/team-a/" + WorkloadName(job);
  ASSERT_EQ(api.objects.count(key), 1u);
  EXPECT_EQ(api.objects[key]["spec"]["priority"], 100);

  // Admitted with 2 GPUs of a flavor: the job runs, capped, on the flavor's nodes.
  workloads.Upsert(std::make_shared<Object>(Admitted(api.objects[key], 2, "a100")));
  flavors.Upsert(std::make_shared<Object>(
      Object{{"metadata", {{"name", "a100"}}}, {"spec", {{"nodeLabels", {{"model", "a100"}}}}}}));
  api::ModelSelectionJob admitted = job;
  gate = KueueGate(&api, caches, &admitted, 0, -1, "t2");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(gate->condition.status, "True");
  EXPECT_EQ(gate->event_reason, "Admitted");
  EXPECT_EQ(gate->condition.last_transition_time, "t2");
  EXPECT_EQ(admitted.spec.resources.gpu_quota, 2);
  EXPECT_EQ(admitted.spec.resources.node_selector.at("model"), "a100");

  // Evicted: held; the reservation stays while pods of the job are alive and
  // is cleared once they are gone.
  workloads.Upsert(std::make_shared<Object>(
      Evicted(*workloads.Get("team-a/" + WorkloadName(job)), "Preempted")));
  int writes = api.status_writes;
  gate = KueueGate(&api, caches, &job, 3, -1, "t3");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_FALSE(gate->run);
  EXPECT_EQ(gate->condition.reason, "Evicted");
  EXPECT_EQ(api.status_writes, writes);
  api::ModelSelectionJob pass = job;  // an admitted pass edits the job's resources
  gate = KueueGate(&api, caches, &pass, 0, -1, "t4");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(api.status_writes, writes + 1);
  EXPECT_FALSE(api.objects[key]["status"].contains("admission"));
  EXPECT_EQ((*Condition(api.objects[key], "QuotaReserved"))["status"], "False");

  // A finished job marks its Workload Finished (Kueue releases the quota),
  // but not while one of its pods is still exiting and holds a GPU.
  api::ModelSelectionJob done = job;
  done.status = api::ModelSelectionJobStatus{};
  done.status->phase = api::Phase::kSucceeded;
  workloads.Upsert(std::make_shared<Object>(api.objects[key]));
  writes = api.status_writes;
  gate = KueueGate(&api, caches, &done, 1, -1, "t5");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(api.status_writes, writes);
  EXPECT_EQ(Condition(api.objects[key], "Finished"), nullptr);
  gate = KueueGate(&api, caches, &done, 0, -1, "t5");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ((*Condition(api.objects[key], "Finished"))["reason"], "Succeeded");
}

// Admitted GPUs the unfinished tasks cannot use go back to Kueue as
// reclaimable pods; the count only grows, and the job's cap shrinks with it.
TEST(KueueTest, GpusTheUnfinishedTasksCannotUseAreReclaimable) {
  KueueAdmission a;
  a.state = KueueAdmission::State::kAdmitted;
  a.gpus = 6;
  EXPECT_EQ(ReclaimableGpus(a, -1), 0);  // unknown: nothing
  EXPECT_EQ(ReclaimableGpus(a, 8), 0);
  EXPECT_EQ(ReclaimableGpus(a, 4), 2);
  EXPECT_EQ(ReclaimableGpus(a, 0), 6);
  a.reclaimable = 3;
  EXPECT_EQ(ReclaimableGpus(a, 4), 3);  // never fewer than reported
  api::ResourcesSpec r = LabelledJob().spec.resources;
  ASSERT_TRUE(ApplyAdmission(a, {}, &r).ok());
  EXPECT_EQ(r.gpu_quota, 3);

  MemoryApi api;
  kube::Store workloads, flavors;
  flavors.Upsert(std::make_shared<Object>(Object{{"metadata", {{"name", "std"}}}}));
  api::ModelSelectionJob job = LabelledJob("q");
  Object wl = Admitted(BuildWorkload(job, "q", std::nullopt), 4, "std");
  workloads.Upsert(std::make_shared<Object>(wl));
  auto gate = KueueGate(&api, KueueCaches{&workloads, &flavors}, &job, 2, 2, "t");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(job.spec.resources.gpu_quota, 2);
  EXPECT_EQ(gate->event_reason, "GpusReclaimable");
  const Object& stored = api.objects["workloads/team-a/" + WorkloadName(LabelledJob("q"))];
  ASSERT_TRUE(stored["status"].contains("reclaimablePods")) << stored.dump();
  EXPECT_EQ(stored["status"]["reclaimablePods"][0]["name"], kKueuePodSet);
  EXPECT_EQ(stored["status"]["reclaimablePods"][0]["count"], 2);
}

Object Flavor(const std::string& name, const std::map<std::string, std::string>& labels,
              const std::string& taint_key = "") {
  Object f = {{"metadata", {{"name", name}}}, {"spec", {{"nodeLabels", labels}}}};
  if (!taint_key.empty()) {
    f["spec"]["nodeTaints"] =
        Object::array({{{"key", taint_key}, {"value", name}, {"effect", "NoSchedule"}}});
    f["spec"]["tolerations"] = Object::array(
        {{{"key", taint_key}, {"operator", "Equal"}, {"value", name}, {"effect", "NoSchedule"}}});
  }
  return f;
}

// A pod set can be assigned a flavor per resource (one resource group for the
// GPUs, another for CPU and memory): the pods get every assigned flavor's node
// labels and tolerations, each once, and two flavors that disagree on a label
// are an error naming both.
TEST(KueueTest, EveryFlavorOfThePodSetsAssignmentGoesIntoThePods) {
  Object wl = Admitted(BuildWorkload(LabelledJob(), "q", std::nullopt), 2, "a100");
  wl["status"]["admission"]["podSetAssignments"][0]["flavors"] = {
      {"nvidia.com/gpu", "a100"}, {"cpu", "spot"}, {"memory", "spot"}};
  KueueAdmission a = ReadAdmission(wl, "nvidia.com/gpu");
  EXPECT_EQ(a.flavor, "a100");
  EXPECT_EQ(a.flavors, (std::vector<std::string>{"a100", "spot"}));

  api::ResourcesSpec r = LabelledJob().spec.resources;
  ASSERT_TRUE(ApplyAdmission(a,
                             {Flavor("a100", {{"gpu.example/model", "a100"}}, "dedicated"),
                              Flavor("spot", {{"lifecycle", "spot"}}, "spot")},
                             &r)
                  .ok());
  EXPECT_EQ(r.node_selector.at("gpu.example/model"), "a100");
  EXPECT_EQ(r.node_selector.at("lifecycle"), "spot");
  EXPECT_EQ(r.node_selector.at("orrery.dev/pool"), "gpu");  // the job's own stays
  ASSERT_EQ(r.tolerations.size(), 3u);                      // the job's and one a flavor
  EXPECT_EQ(r.tolerations[1].key, "dedicated");
  EXPECT_EQ(r.tolerations[1].value, "a100");
  EXPECT_EQ(r.tolerations[1].effect, "NoSchedule");
  EXPECT_EQ(r.tolerations[2].key, "spot");

  r = LabelledJob().spec.resources;
  Status s =
      ApplyAdmission(a, {Flavor("a100", {{"zone", "a"}}), Flavor("spot", {{"zone", "b"}})}, &r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ResourceFlavor a100 sets zone=\"a\""), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("ResourceFlavor spot, whose nodes have zone=b"), std::string::npos)
      << s.message();
}

// The flavor is applied afresh on every pass: re-admitted to another flavor
// after an eviction, the job's pods get the new flavor's labels and
// tolerations and none of the old one's. A flavor the cache does not hold
// holds a job with no pod, and fails (retries) the pass of one whose pods run.
TEST(KueueTest, GateFollowsTheFlavorOfEachAdmissionAndWaitsForAnUnknownOne) {
  MemoryApi api;
  kube::Store workloads, flavors;
  KueueCaches caches{&workloads, &flavors};
  const api::ModelSelectionJob job = LabelledJob("q");
  const std::string key = "team-a/" + WorkloadName(job);
  const Object wl = BuildWorkload(job, "q", std::nullopt);
  flavors.Upsert(std::make_shared<Object>(Flavor("std", {{"pool", "std"}})));

  workloads.Upsert(std::make_shared<Object>(Admitted(wl, 4, "fast")));
  api::ModelSelectionJob pass = job;
  auto gate = KueueGate(&api, caches, &pass, 0, -1, "t0");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_FALSE(gate->run);
  EXPECT_EQ(gate->condition.reason, "FlavorNotFound");
  EXPECT_NE(gate->condition.message.find("ResourceFlavor fast"), std::string::npos);
  EXPECT_TRUE(gate->warning);
  EXPECT_EQ(pass.spec.resources.node_selector.count("pool"), 0u);
  pass = job;
  gate = KueueGate(&api, caches, &pass, 2, -1, "t1");  // pods run: the pass is retried
  ASSERT_FALSE(gate.ok());
  EXPECT_EQ(gate.status().code(), StatusCode::kUnavailable);

  flavors.Upsert(std::make_shared<Object>(Flavor("fast", {{"pool", "fast"}}, "dedicated")));
  pass = job;
  gate = KueueGate(&api, caches, &pass, 0, -1, "t2");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(gate->condition.message,
            "Admitted to ClusterQueue cq-a with 4 GPUs of ResourceFlavor fast");
  EXPECT_EQ(pass.spec.resources.node_selector.at("pool"), "fast");
  ASSERT_EQ(pass.spec.resources.tolerations.size(), 2u);
  EXPECT_EQ(pass.spec.resources.tolerations[1].key, "dedicated");

  // Evicted, stopped, re-admitted to the other flavor.
  workloads.Upsert(std::make_shared<Object>(Evicted(*workloads.Get(key), "Preempted")));
  pass = job;
  ASSERT_TRUE(KueueGate(&api, caches, &pass, 0, -1, "t3").ok());
  workloads.Upsert(std::make_shared<Object>(Admitted(api.objects["workloads/" + key], 2, "std")));
  pass = job;
  gate = KueueGate(&api, caches, &pass, 0, -1, "t4");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(gate->condition.message,
            "Admitted to ClusterQueue cq-a with 2 GPUs of ResourceFlavor std");
  EXPECT_EQ(pass.spec.resources.gpu_quota, 2);
  EXPECT_EQ(pass.spec.resources.node_selector.at("pool"), "std");
  EXPECT_EQ(pass.spec.resources.tolerations, job.spec.resources.tolerations);
}

// Editing the job's priority-class label carries the new class and its value
// to the Workload, as Kueue's own integrations do; a hand-edited
// spec.priority under the same class stays; a class that does not exist is
// named in the condition and changes nothing; removing the label drops the
// class once the Workload holds no quota.
TEST(KueueTest, AnEditedPriorityClassLabelReachesTheWaitingWorkload) {
  MemoryApi api;
  kube::Store workloads, flavors;
  KueueCaches caches{&workloads, &flavors};
  api.objects["workloadpriorityclasses/low"] = {{"metadata", {{"name", "low"}}}, {"value", 10}};
  api.objects["workloadpriorityclasses/high"] = {{"metadata", {{"name", "high"}}}, {"value", 1000}};
  api::ModelSelectionJob job = LabelledJob("q");
  job.metadata.labels[kKueuePriorityClassLabel] = "low";
  const std::string key = "workloads/team-a/" + WorkloadName(job);
  ASSERT_TRUE(KueueGate(&api, caches, &job, 0, -1, "t0").ok());
  EXPECT_EQ(api.objects[key]["spec"]["priority"], 10);
  auto cache = [&] { workloads.Upsert(std::make_shared<Object>(api.objects[key])); };
  cache();

  job.metadata.labels[kKueuePriorityClassLabel] = "high";
  auto gate = KueueGate(&api, caches, &job, 0, -1, "t1");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_FALSE(gate->run);
  EXPECT_EQ(api.updates, 1);
  EXPECT_EQ(api.objects[key]["spec"]["priority"], 1000);
  EXPECT_EQ(api.objects[key]["spec"]["priorityClassRef"]["name"], "high");
  EXPECT_EQ(api.objects[key]["spec"]["queueName"], "q");
  EXPECT_EQ(gate->event_reason, "WorkloadPriorityUpdated");
  EXPECT_NE(gate->event_message.find("priority class high, priority 1000 (was low, 10)"),
            std::string::npos)
      << gate->event_message;
  cache();

  // Kueue's priority edited on the Workload itself, under the same class: kept.
  api.objects[key]["spec"]["priority"] = 5;
  cache();
  gate = KueueGate(&api, caches, &job, 0, -1, "t2");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(api.updates, 1);
  EXPECT_EQ(api.objects[key]["spec"]["priority"], 5);

  // A class that does not exist: named, the Workload keeps its class.
  job.metadata.labels[kKueuePriorityClassLabel] = "urgent";
  gate = KueueGate(&api, caches, &job, 0, -1, "t3");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(api.updates, 1);
  EXPECT_EQ(gate->condition.reason, "Pending");
  EXPECT_NE(gate->condition.message.find("names WorkloadPriorityClass urgent, which does not "
                                         "exist: the Workload keeps priority class high"),
            std::string::npos)
      << gate->condition.message;
  EXPECT_TRUE(gate->warning);

  // The label removed while the Workload holds quota: kept until it does not.
  job.metadata.labels.erase(kKueuePriorityClassLabel);
  workloads.Upsert(std::make_shared<Object>(Admitted(api.objects[key], 2, "std")));
  flavors.Upsert(std::make_shared<Object>(Flavor("std", {})));
  api::ModelSelectionJob pass = job;  // an admitted pass edits the job's resources
  gate = KueueGate(&api, caches, &pass, 0, -1, "t4");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(api.updates, 1);
  cache();  // the stored one: pending
  gate = KueueGate(&api, caches, &job, 0, -1, "t5");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(api.updates, 2);
  EXPECT_FALSE(api.objects[key]["spec"].contains("priorityClassRef"));
  EXPECT_EQ(api.objects[key]["spec"]["priority"], 0);
}

// An edited queue-name label moves a Workload holding no quota to the new
// LocalQueue (Kueue's integrations do the same); one holding quota keeps its
// queue until its reservation ends.
TEST(KueueTest, AnEditedQueueLabelMovesTheWorkloadOnlyWhileItHoldsNoQuota) {
  MemoryApi api;
  kube::Store workloads, flavors;
  KueueCaches caches{&workloads, &flavors};
  flavors.Upsert(std::make_shared<Object>(Flavor("std", {})));
  api::ModelSelectionJob job = LabelledJob("q");
  const std::string key = "workloads/team-a/" + WorkloadName(job);
  ASSERT_TRUE(KueueGate(&api, caches, &job, 0, -1, "t0").ok());
  workloads.Upsert(std::make_shared<Object>(api.objects[key]));

  job.metadata.labels[kKueueQueueLabel] = "q2";
  auto gate = KueueGate(&api, caches, &job, 0, -1, "t1");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(api.updates, 1);
  EXPECT_EQ(api.objects[key]["spec"]["queueName"], "q2");
  EXPECT_EQ(gate->event_reason, "WorkloadQueueChanged");
  EXPECT_EQ(gate->condition.message, "Pending in LocalQueue q2");

  workloads.Upsert(std::make_shared<Object>(Admitted(api.objects[key], 2, "std")));
  job.metadata.labels[kKueueQueueLabel] = "q3";
  api::ModelSelectionJob pass = job;
  gate = KueueGate(&api, caches, &pass, 0, -1, "t2");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_TRUE(gate->run);
  EXPECT_EQ(api.updates, 1);
  EXPECT_EQ(api.objects[key]["spec"]["queueName"], "q2");
}

TEST(KueueTest, WithoutKueueServedALabelledJobWaitsSayingWhy) {
  MemoryApi api;
  api::ModelSelectionJob job = LabelledJob("q");
  auto gate = KueueGate(&api, KueueCaches{}, &job, 0, -1, "t");
  ASSERT_TRUE(gate.ok());
  EXPECT_FALSE(gate->run);
  EXPECT_EQ(gate->condition.reason, "KueueNotServed");
  EXPECT_TRUE(gate->warning);
  EXPECT_TRUE(api.objects.empty());
}

}  // namespace
}  // namespace orrery::controller
