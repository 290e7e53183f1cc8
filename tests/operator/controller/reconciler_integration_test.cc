// The reconciler on a real API server: the CRD is installed, two Ready nodes with
// two GPUs each exist (their allocatable set through the status subresource, as
// a kubelet would), a job of three tasks is applied with every profile it needs
// already in the shared ConfigMap, and Reconcile runs over informer caches.
// Gang pods appear on their planned nodes and never over-commit a node; a second
// Reconcile before the cache has seen the pods creates nothing; when the test
// marks the pods Succeeded (as the kubelet would), further Reconciles start the
// remaining tasks and finally move every task and the job to Succeeded.
// QuotaEditTest: a running job's gpuQuota edited 16 -> 8 stops what exceeds it
// within one pass, with an event; 8 -> 24 launches within the next.
// KueueQuotaEditTest and KueueReclaimTest: the same with a real Kueue manager,
// an edited gpuQuota replacing the job's Workload and finished tasks' GPUs
// given back to the ClusterQueue (kueue.h).
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/profile_pod.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/api_error.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"
#include "tests/operator/controller/plane_setup.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"
#include "tests/testing/wait.h"

namespace orrery::controller {
namespace {

using orrery::testing::WaitUntil;
const char* kNamespace = "ctl-reconcile";
const char* kProfileNamespace = "orrery-system";
const char* kGpu = "nvidia.com/gpu";

const char* kSmallJob = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: small
  namespace: ctl-reconcile
spec:
  tasks:
  - name: mlp
    model:
      mlp: {layers: 2, hidden: 32, inputs: 16, outputs: 4}
    data:
      synthetic: {seed: 3}
    training: {steps: 100, batchSize: 16, learningRate: 1e-3}
    searchSpace:
      grid:
        learningRate: [1e-3, 3e-4]
  - name: gpt
    model:
      gpt: {layers: 2, hidden: 64, heads: 4, seqLen: 32, vocab: 256}
    data:
      synthetic: {seed: 1}
    training: {steps: 50, batchSize: 8, learningRate: 1e-3}
  resources:
    gpuQuota: 4
    gpusPerTask: {min: 1, max: 2}
    templates: [ddp]
  profiling:
    gpuCounts: [1, 2]
)";

using testutil::Edited;
using testutil::JobPods;
using testutil::PlaneCaches;
using testutil::PlaneOptions;
using testutil::Recorder;
using testutil::RemovePodPolicy;

class ReconcilerIntegrationTest : public orrery::testing::ControlPlaneTest {
 protected:
  static void SetUpTestSuite() {
    ControlPlaneTest::SetUpTestSuite();
    if (!plane()) return;
    ready_ = testutil::InstallJobCrd(*plane(), &setup_output_);
  }

  void SetUp() override {
    ControlPlaneTest::SetUp();
    ASSERT_TRUE(ready_) << setup_output_;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    for (const char* ns : {kNamespace, kProfileNamespace}) {
      ASSERT_TRUE(kube::testutil::CreateNamespace(*client_, ns).ok());
    }
    for (const char* node : {"gpu-a", "gpu-b"}) CreateGpuNode(node, 2);
    auto loaded = api::LoadJobText(kSmallJob);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = *loaded;
    // Every (signature, ddp, 1 or 2 GPUs) the job needs, so nothing is profiled.
    ProfileTable table = testutil::DdpProfiles(loaded_, {1, 2}, [](int g) { return 100.0 * g; });
    ASSERT_TRUE(testutil::StoreProfiles(*client_, table, kProfileNamespace).ok());
    auto created = testutil::CreateJob(*client_, loaded_.job, kNamespace);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  void CreateGpuNode(const std::string& name, int gpus) {
    ASSERT_TRUE(testutil::CreateReadyGpuNode(*client_, name, gpus, kGpu).ok());
  }

  std::vector<kube::Object> ServerPods() { return JobPods(*client_, kNamespace, "small"); }

  // Waits until `informer` holds `rv` of `key` (or any version when rv is "").
  static bool CacheHas(const kube::Informer& informer, const std::string& key,
                       const std::string& rv) {
    return WaitUntil([&] {
      kube::ObjectPtr o = informer.store().Get(key);
      return o && (rv.empty() || kube::ResourceVersionOf(*o) == rv);
    });
  }

  static bool ready_;
  static std::string setup_output_;
  std::unique_ptr<kube::RestClient> client_;
  api::LoadedJob loaded_;
};
bool ReconcilerIntegrationTest::ready_ = false;
std::string ReconcilerIntegrationTest::setup_output_;

TEST_F(ReconcilerIntegrationTest, GangsRunOnPlannedNodesAndTheJobSucceeds) {
  const std::string key = kube::KeyFor(kNamespace, "small");
  PlaneCaches cache(client_.get(), kNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 2));
  kube::Informer& jobs = cache.jobs;
  kube::Informer& pods = cache.pods;

  auto recorder = Recorder(client_.get(), "reconciler-test");
  FakeClock clock;
  Reconciler reconciler(client_.get(), cache.caches(), PlaneOptions(recorder.get()), &clock);

  auto first = reconciler.Reconcile(key);
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<kube::Object> created = ServerPods();
  ASSERT_FALSE(created.empty());
  // Straight away, before the pod cache has seen them: nothing more is created.
  auto second = reconciler.Reconcile(key);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(ServerPods().size(), created.size());

  std::set<std::string> succeeded_tasks;
  std::set<std::string> all_tasks;
  for (const api::ExpandedTask& t : loaded_.tasks) all_tasks.insert(LabelValue(t.name));
  api::ModelSelectionJobStatus status;
  for (int round = 0; round < 8; ++round) {
    std::vector<kube::Object> server = ServerPods();
    // No node over-committed, every pod on its planned node, one gang per task.
    std::map<std::string, int> live_per_node;
    std::map<std::string, std::set<std::string>> gangs_per_task;
    for (const kube::Object& p : server) {
      const kube::Object& meta = p["metadata"];
      std::string planned = meta["annotations"][kNodeAnnotation];
      const kube::Object& terms =
          p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
           ["nodeSelectorTerms"];
      EXPECT_EQ(terms.dump().find("\"" + planned + "\"") != std::string::npos, true)
          << "pod " << meta["name"] << " is not pinned to its planned node " << planned;
      gangs_per_task[meta["labels"][kTaskLabel]].insert(meta["labels"][kGangLabel]);
      if (p["status"].value("phase", "") != "Succeeded") ++live_per_node[planned];
    }
    for (const auto& [node, n] : live_per_node) {
      EXPECT_LE(n, 2) << "node " << node << " over-committed in round " << round;
    }
    for (const auto& [task, gangs] : gangs_per_task) {
      EXPECT_EQ(gangs.size(), 1u) << "task " << task << " has several gangs";
    }

    // The kubelet's part: every live pod runs and succeeds.
    for (const kube::Object& p : server) {
      if (p["status"].value("phase", "") == "Succeeded") continue;
      kube::PatchOptions po;
      po.subresource = "status";
      auto patched =
          client_->Patch(kube::Pods(), kNamespace, p["metadata"]["name"], kube::PatchType::kMerge,
                         {{"status", {{"phase", "Succeeded"}}}}, po);
      ASSERT_TRUE(patched.ok()) << patched.status();
      succeeded_tasks.insert(p["metadata"]["labels"][kTaskLabel].get<std::string>());
    }
    // Let the caches catch up with the server before the next level-triggered pass.
    for (const kube::Object& p : ServerPods()) {
      ASSERT_TRUE(CacheHas(pods, kube::KeyOf(p), kube::ResourceVersionOf(p)));
    }
    auto job = client_->Get(ModelSelectionJobs(), kNamespace, "small");
    ASSERT_TRUE(job.ok());
    ASSERT_TRUE(CacheHas(jobs, key, kube::ResourceVersionOf(*job)));

    auto result = reconciler.Reconcile(key);
    ASSERT_TRUE(result.ok()) << result.status();
    job = client_->Get(ModelSelectionJobs(), kNamespace, "small");
    ASSERT_TRUE(job.ok());
    ASSERT_TRUE(CacheHas(jobs, key, kube::ResourceVersionOf(*job)));
    std::vector<api::FieldError> errors;
    status = {};
    api::DecodeStatus(Json::parse((*job)["status"].dump()), "status", &status, &errors);
    ASSERT_TRUE(errors.empty());
    if (status.phase == api::Phase::kSucceeded) break;
  }
  EXPECT_EQ(succeeded_tasks, all_tasks);
  EXPECT_EQ(status.phase, api::Phase::kSucceeded);
  ASSERT_EQ(status.tasks.size(), loaded_.tasks.size());
  for (const api::TaskStatus& t : status.tasks) {
    EXPECT_EQ(t.state, api::TaskState::kSucceeded) << t.name;
  }
  EXPECT_EQ(status.task_summary, "3/3");
  ASSERT_TRUE(status.plan.has_value());
  // The status says why the plan in force was made (a re-plan on a finish or
  // an interval, or the first plan).
  EXPECT_FALSE(status.plan->trigger.empty());
  EXPECT_GT(status.plan->revision, 0);

  // Once done, another pass changes nothing: no pod, no status write.
  size_t pods_before = ServerPods().size();
  auto job_before = client_->Get(ModelSelectionJobs(), kNamespace, "small");
  ASSERT_TRUE(job_before.ok());
  auto again = reconciler.Reconcile(key);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ServerPods().size(), pods_before);
  auto job_after = client_->Get(ModelSelectionJobs(), kNamespace, "small");
  ASSERT_TRUE(job_after.ok());
  EXPECT_EQ(kube::ResourceVersionOf(*job_after), kube::ResourceVersionOf(*job_before));

  // Each launch is an event on the job for kubectl describe.
  auto events = client_->List(kube::Events(), kNamespace, {});
  ASSERT_TRUE(events.ok()) << events.status();
  int launches = 0;
  std::vector<std::string> locations;
  for (const kube::Object& e : (*events)["items"]) {
    if (e["regarding"].value("name", "") != "small") continue;
    if (e.value("reason", "") == "GangCreated") ++launches;
    if (e.value("reason", "") == "CheckpointLocation") locations.push_back(e.value("note", ""));
  }
  EXPECT_EQ(launches, 3);
  // The first launch said where the job's checkpoints live: a folder keyed by
  // the uid the API server gave the job.
  ASSERT_EQ(locations.size(), 1u);
  const std::string uid = (*job_after)["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty());
  EXPECT_NE(locations[0].find("/small-" + uid + "/<task>"), std::string::npos) << locations[0];
}

// A platform engineer edits a running job's gpuQuota (held out by the issue
// that asked for it: 16 -> 8 -> 24 on a real API server). Down: one pass stops
// the gangs over the new quota (gracefully: deleted, to checkpoint) and says
// so in an event; up: the next pass re-plans and launches onto the room.
// kSmallJob (three tasks) made longer and wider: up to 8 GPUs a task, profiled
// at 1, 2, 4 and 8, a quota of 16, and steps enough to outlast the test.
const char* kQuotaNamespace = "ctl-quota";
std::string QuotaJobYaml() {
  return Edited(kSmallJob,
                {{"name: small\n  namespace: ctl-reconcile", "name: sweep\n  namespace: ctl-quota"},
                 {"steps: 100,", "steps: 1000000,"},
                 {"steps: 50,", "steps: 1000000,"},
                 {"gpuQuota: 4", "gpuQuota: 16"},
                 {"max: 2}", "max: 8}"},
                 {"gpuCounts: [1, 2]", "gpuCounts: [1, 2, 4, 8]"}});
}

class QuotaEditTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    std::string out;
    ASSERT_TRUE(testutil::InstallJobCrd(*plane(), &out)) << out;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    for (const char* ns : {kQuotaNamespace, kProfileNamespace}) {
      ASSERT_TRUE(kube::testutil::CreateNamespace(*client_, ns).ok());
    }
    for (const char* node : {"pool-a", "pool-b", "pool-c"}) {
      ASSERT_TRUE(testutil::CreateReadyGpuNode(*client_, node, 8, kGpu).ok());
    }
    auto loaded = api::LoadJobText(QuotaJobYaml());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = *loaded;
    // Linear speed-up: more GPUs always shorten a task, so the plan uses the quota.
    ProfileTable table =
        testutil::DdpProfiles(loaded_, {1, 2, 4, 8}, [](int g) { return 100.0 * g; });
    ASSERT_TRUE(testutil::StoreProfiles(*client_, table, kProfileNamespace).ok());
    auto created = testutil::CreateJob(*client_, loaded_.job, kQuotaNamespace);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  // GPUs the job's pods hold on the server: every pod not finished and not
  // being deleted (one GPU per rank).
  int HeldOnServer() {
    int gpus = 0;
    for (const kube::Object& p : ServerPods()) {
      if (p["metadata"].contains("deletionTimestamp")) continue;
      std::string phase = p["status"].value("phase", "");
      if (phase != "Succeeded" && phase != "Failed") ++gpus;
    }
    return gpus;
  }
  std::vector<kube::Object> ServerPods() { return JobPods(*client_, kQuotaNamespace, "sweep"); }
  // The kubelet's part: every pod of the job runs.
  void RunPods() {
    for (const kube::Object& p : ServerPods()) {
      if (p["status"].value("phase", "") == "Running") continue;
      kube::PatchOptions po;
      po.subresource = "status";
      auto patched =
          client_->Patch(kube::Pods(), kQuotaNamespace, p["metadata"]["name"],
                         kube::PatchType::kMerge, {{"status", {{"phase", "Running"}}}}, po);
      ASSERT_TRUE(patched.ok()) << patched.status();
    }
  }
  void SetQuota(int gpus) {
    auto patched =
        client_->Patch(ModelSelectionJobs(), kQuotaNamespace, "sweep", kube::PatchType::kMerge,
                       {{"spec", {{"resources", {{"gpuQuota", gpus}}}}}}, {});
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  std::vector<std::string> EventNotes(const std::string& reason) {
    std::vector<std::string> notes;
    auto events = client_->List(kube::Events(), kQuotaNamespace, {});
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return notes;
    for (const kube::Object& e : (*events)["items"]) {
      if (e.value("reason", "") == reason) notes.push_back(e.value("note", ""));
    }
    return notes;
  }

  std::unique_ptr<kube::RestClient> client_;
  api::LoadedJob loaded_;
};

TEST_F(QuotaEditTest, SixteenToEightFreesTheExcessInOnePassAndEightToTwentyFourLaunches) {
  const std::string key = kube::KeyFor(kQuotaNamespace, "sweep");
  PlaneCaches cache(client_.get(), kQuotaNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 3));

  auto recorder = Recorder(client_.get(), "quota-test");
  FakeClock clock;
  ReconcilerOptions options = PlaneOptions(recorder.get());
  options.engine.switch_cost_s = 1;
  Reconciler reconciler(client_.get(), cache.caches(), options, &clock);

  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  const int first = HeldOnServer();
  EXPECT_GT(first, 8) << "the plan should use more than the later quota";
  EXPECT_LE(first, 16);
  RunPods();
  ASSERT_TRUE(cache.CatchUp(*client_, kQuotaNamespace, "sweep"));
  clock.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());  // the gangs run
  ASSERT_EQ(HeldOnServer(), first);

  // 16 -> 8: within one pass, what exceeds the quota is stopped.
  SetQuota(8);
  ASSERT_TRUE(cache.CatchUp(*client_, kQuotaNamespace, "sweep"));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  EXPECT_LE(HeldOnServer(), 8) << "the gangs left hold at most the new quota";
  std::vector<std::string> rescales = EventNotes("Rescale");
  ASSERT_FALSE(rescales.empty()) << "a stop for the quota is an event on the job";
  bool names_quota = false;
  for (const std::string& n : rescales) names_quota |= n.find("quota of 8") != std::string::npos;
  EXPECT_TRUE(names_quota) << rescales.back();
  // The stopped ranks checkpoint and go; a pass launches nothing over the quota.
  ASSERT_TRUE(cache.CatchUp(*client_, kQuotaNamespace, "sweep"));
  clock.Advance(std::chrono::seconds(10));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  EXPECT_LE(HeldOnServer(), 8);

  // 8 -> 24: the next pass re-plans and launches onto the room.
  RunPods();
  ASSERT_TRUE(cache.CatchUp(*client_, kQuotaNamespace, "sweep"));
  const int before = HeldOnServer();
  SetQuota(24);
  ASSERT_TRUE(cache.CatchUp(*client_, kQuotaNamespace, "sweep"));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  const int after = HeldOnServer();
  EXPECT_GT(after, before) << "a higher quota launches within one pass";
  EXPECT_GT(after, 8);
  EXPECT_LE(after, 24);
  std::cout << "GPUs held: " << first << " at quota 16, " << before << " at 8, " << after
            << " at 24\n";
}

// The same edits of a job Kueue admits (kueue.h), with a real Kueue manager:
// a Workload's pod sets are immutable, so an edit of gpuQuota replaces the
// job's Workload. Pending, it is deleted and a new one queued within the pass;
// admitted, the job is held while its gangs stop (they checkpoint), then the
// old Workload is deleted (its quota released), a new one asks for the new
// quota, and the job runs again within what Kueue admits of it.
const char* kKueueQueuesYaml = R"(apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: std}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: std
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 16}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ctl-quota}
spec: {clusterQueue: cq}
)";

class KueueQuotaEditTest : public QuotaEditTest {
 protected:
  static void SetUpTestSuite() { StartShared({.kueue = true}); }

  // The job's Workloads on the server, by name.
  std::map<std::string, kube::Object> ServerWorkloads() {
    std::map<std::string, kube::Object> named;
    auto list = client_->List(Workloads(), kQuotaNamespace, {});
    EXPECT_TRUE(list.ok()) << list.status();
    if (!list.ok()) return named;
    for (const kube::Object& wl : (*list)["items"]) named[wl["metadata"]["name"]] = wl;
    return named;
  }
  // Waits for the job's one Workload to ask for `gpus` and, when `admitted`,
  // for Kueue to admit it and `cache` to hold it so; returns its name.
  std::string OneWorkload(const kube::Informer& cache, int gpus, bool admitted) {
    std::string name;
    EXPECT_TRUE(WaitUntil([&] {
      auto wls = ServerWorkloads();
      if (wls.size() != 1) return false;
      const kube::Object& wl = wls.begin()->second;
      if (wl["spec"]["podSets"][0]["count"] != gpus) return false;
      KueueAdmission a = ReadAdmission(wl, kGpu);
      if (admitted && a.state != KueueAdmission::State::kAdmitted) return false;
      name = wls.begin()->first;
      kube::ObjectPtr cached = cache.store().Get(kube::KeyFor(kQuotaNamespace, name));
      return cached && kube::ResourceVersionOf(*cached) == kube::ResourceVersionOf(wl);
    })) << "no single Workload for "
        << gpus << " GPUs (admitted: " << admitted << ")";
    return name;
  }
  // Labels the job for LocalQueue "lq" and starts the informers (Kueue's too)
  // and a reconciler over them.
  void StartReconciler() {
    auto labelled =
        client_->Patch(ModelSelectionJobs(), kQuotaNamespace, "sweep", kube::PatchType::kMerge,
                       {{"metadata", {{"labels", {{kKueueQueueLabel, "lq"}}}}}}, {});
    ASSERT_TRUE(labelled.ok()) << labelled.status();
    cache_ = std::make_unique<PlaneCaches>(client_.get(), kQuotaNamespace, kProfileNamespace);
    ASSERT_TRUE(cache_->Start(kube::KeyFor(kQuotaNamespace, "sweep"), 3));
    workloads_ = std::make_unique<kube::Informer>(client_.get(), Workloads(),
                                                  PlaneCaches::In(kQuotaNamespace));
    flavors_ = std::make_unique<kube::Informer>(client_.get(), ResourceFlavors());
    for (kube::Informer* i : {workloads_.get(), flavors_.get()}) i->Start();
    for (kube::Informer* i : {workloads_.get(), flavors_.get()}) {
      ASSERT_TRUE(i->WaitForSync(std::chrono::seconds(30)));
    }
    Caches caches = cache_->caches();
    caches.kueue = {&workloads_->store(), &flavors_->store()};
    recorder_ = Recorder(client_.get(), "kueue-quota-test");
    reconciler_ =
        std::make_unique<Reconciler>(client_.get(), caches, PlaneOptions(recorder_.get()), &clock_);
  }
  // One pass once the caches hold what the server does, 10 s later.
  void Pass() {
    ASSERT_TRUE(cache_->CatchUp(*client_, kQuotaNamespace, "sweep"));
    clock_.Advance(std::chrono::seconds(10));
    auto r = reconciler_->Reconcile(kube::KeyFor(kQuotaNamespace, "sweep"));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  void TearDown() override {
    reconciler_.reset();
    for (auto* i : {workloads_.get(), flavors_.get()}) {
      if (i != nullptr) i->Stop();
    }
  }

  std::string KueueReason() {
    auto job = client_->Get(ModelSelectionJobs(), kQuotaNamespace, "sweep");
    if (!job.ok()) return job.status().ToString();
    for (const kube::Object& c : (*job)["status"]["conditions"]) {
      if (c["type"] == kKueueCondition) return c.value("reason", "");
    }
    return "";
  }

  std::unique_ptr<PlaneCaches> cache_;
  std::unique_ptr<kube::Informer> workloads_, flavors_;
  std::unique_ptr<kube::EventRecorder> recorder_;
  FakeClock clock_;
  std::unique_ptr<Reconciler> reconciler_;
};

TEST_F(KueueQuotaEditTest, AnEditedQuotaReplacesTheWorkloadPendingAtOnceAdmittedOnceStopped) {
  ASSERT_NO_FATAL_FAILURE(StartReconciler());
  kube::Informer& workloads = *workloads_;
  auto pass = [&] { ASSERT_NO_FATAL_FAILURE(Pass()); };

  // Its LocalQueue does not exist yet: a Workload for 16 waits, no pod.
  pass();
  const std::string pending = OneWorkload(workloads, 16, false);
  EXPECT_EQ(KueueReason(), "Pending");
  // 16 -> 12 while pending: replaced within the pass, still no pod.
  SetQuota(12);
  pass();
  EXPECT_EQ(ServerWorkloads().count(pending), 0u) << "the outdated Workload is deleted";
  const std::string asked = OneWorkload(workloads, 12, false);
  EXPECT_NE(asked, pending);
  EXPECT_EQ(HeldOnServer(), 0);
  std::vector<std::string> replaced = EventNotes("WorkloadReplaced");
  ASSERT_EQ(replaced.size(), 1u);
  EXPECT_NE(replaced[0].find("gpuQuota changed from 16 to 12"), std::string::npos) << replaced[0];

  // The queues: Kueue admits the 12, the job runs within them.
  auto applied = plane()->Kubectl("apply -f -", kKueueQueuesYaml);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const std::string admitted = OneWorkload(workloads, 12, true);
  pass();
  const int first = HeldOnServer();
  EXPECT_GT(first, 8) << "the plan should use more than the later quota";
  EXPECT_LE(first, 12);
  RunPods();

  // 12 -> 8 while admitted: the job is held and its gangs stop (gracefully:
  // deleted, to checkpoint); the admitted Workload stays until they are gone.
  SetQuota(8);
  pass();
  EXPECT_EQ(KueueReason(), "WorkloadOutdated");
  EXPECT_EQ(ServerWorkloads().count(admitted), 1u);
  EXPECT_EQ(HeldOnServer(), 0) << "every gang stops";
  // Gone: the next pass replaces the Workload; Kueue admits the 8.
  pass();
  EXPECT_EQ(ServerWorkloads().count(admitted), 0u);
  replaced = EventNotes("WorkloadReplaced");
  ASSERT_EQ(replaced.size(), 2u);
  bool said = false;
  for (const std::string& n : replaced) {
    said |= n.find("gpuQuota changed from 12 to 8") != std::string::npos &&
            n.find("quota goes back to ClusterQueue cq") != std::string::npos;
  }
  EXPECT_TRUE(said) << replaced.back();
  OneWorkload(workloads, 8, true);
  pass();
  EXPECT_EQ(KueueReason(), "Admitted");
  const int after = HeldOnServer();
  EXPECT_GT(after, 0) << "the job runs again";
  EXPECT_LE(after, 8);
  std::cout << "GPUs held: " << first << " admitted 12, " << after << " admitted 8\n";
}

// GPUs the unfinished tasks cannot use go back to Kueue (reclaimablePods):
// admitted 16, three tasks of at most 8 GPUs; once two have finished, the one
// left can use 8, so 8 are reported reclaimable and Kueue's ClusterQueue
// counts 8 in use. (A suite of its own: SetUp makes the nodes once a plane.)
class KueueReclaimTest : public KueueQuotaEditTest {};

TEST_F(KueueReclaimTest, GpusOfFinishedTasksGoBackToTheClusterQueue) {
  ASSERT_NO_FATAL_FAILURE(StartReconciler());
  auto applied = plane()->Kubectl("apply -f -", kKueueQueuesYaml);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  ASSERT_NO_FATAL_FAILURE(Pass());
  const std::string name = OneWorkload(*workloads_, 16, true);
  auto cq_usage = [&] {
    auto cq = client_->Get({"kueue.x-k8s.io", "v1beta2", "clusterqueues", false}, "", "cq");
    if (!cq.ok()) return std::string("?");
    for (const kube::Object& f : (*cq)["status"].value("flavorsUsage", kube::Object::array())) {
      for (const kube::Object& r : f.value("resources", kube::Object::array())) {
        if (r.value("name", "") == kGpu) return r["total"].dump();
      }
    }
    return std::string("none");
  };
  // The kubelet's part, pass after pass: every live pod succeeds, until two
  // tasks have finished and one is left.
  std::string reclaimable;
  for (int round = 0; round < 8 && reclaimable.empty(); ++round) {
    ASSERT_NO_FATAL_FAILURE(Pass());
    auto wl = client_->Get(Workloads(), kQuotaNamespace, name);
    ASSERT_TRUE(wl.ok()) << wl.status();
    KueueAdmission a = ReadAdmission(*wl, kGpu);
    if (a.reclaimable > 0) {
      reclaimable = std::to_string(a.reclaimable);
      break;
    }
    // One task a round: every live pod of the first task that has any.
    std::string task;
    for (const kube::Object& p : ServerPods()) {
      if (p["status"].value("phase", "") == "Succeeded") continue;
      const std::string t = p["metadata"]["labels"].value(kTaskLabel, "");
      if (task.empty()) task = t;
      if (t != task) continue;
      kube::PatchOptions po;
      po.subresource = "status";
      auto patched =
          client_->Patch(kube::Pods(), kQuotaNamespace, p["metadata"]["name"],
                         kube::PatchType::kMerge, {{"status", {{"phase", "Succeeded"}}}}, po);
      ASSERT_TRUE(patched.ok()) << patched.status();
    }
  }
  EXPECT_EQ(reclaimable, "8");
  EXPECT_TRUE(WaitUntil([&] { return cq_usage() == "\"8\""; })) << cq_usage();
  std::vector<std::string> notes = EventNotes("GpusReclaimable");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("8 of the 16 GPUs"), std::string::npos) << notes[0];
}

// GPU pools as platform teams run them, on a real API server: nodes tainted
// for another team, a cordoned node, a node of another pool (the job's
// nodeSelector excludes it), and two nodes the job may use (one untainted, one
// whose taint it tolerates). No gang is ever pinned where kube-scheduler would
// refuse it, and the job finishes on the nodes it may use.
const char* kPlacementNamespace = "ctl-placement";
std::string PlacementJobYaml() {
  return Edited(kSmallJob, {{"namespace: ctl-reconcile", "namespace: ctl-placement"},
                            {"    templates: [ddp]\n", R"(    templates: [ddp]
    nodeSelector: {orrery.dev/pool: gpu}
    tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
)"}});
}

class PlacementTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    std::string out;
    ASSERT_TRUE(testutil::InstallJobCrd(*plane(), &out)) << out;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    for (const char* ns : {kPlacementNamespace, kProfileNamespace}) {
      ASSERT_TRUE(kube::testutil::CreateNamespace(*client_, ns).ok());
    }
    const std::map<std::string, std::string> pool = {{"orrery.dev/pool", "gpu"}};
    auto taint = [](const std::string& key, const std::string& value, const std::string& effect) {
      return kube::Object::array({{{"key", key}, {"value", value}, {"effect", effect}}});
    };
    struct Shape {
      const char* name;
      std::map<std::string, std::string> labels;
      kube::Object taints;
      bool cordoned;
    };
    const std::vector<Shape> shapes = {
        {"team-b-0", pool, taint("dedicated", "team-b", "NoSchedule"), false},
        {"team-b-1", pool, taint("dedicated", "team-b", "NoExecute"), false},
        {"cordoned", pool, kube::Object::array(), true},
        {"cpu-pool", {{"orrery.dev/pool", "cpu"}}, kube::Object::array(), false},
        {"gpu-plain", pool, kube::Object::array(), false},
        {"gpu-tainted", pool, taint("nvidia.com/gpu", "present", "NoSchedule"), false}};
    for (const Shape& n : shapes) {
      ASSERT_TRUE(testutil::CreateReadyGpuNode(*client_, n.name, 2, kGpu).ok());
      ASSERT_TRUE(testutil::ShapeNode(*client_, n.name, n.labels, n.taints, n.cordoned).ok());
    }
    auto loaded = api::LoadJobText(PlacementJobYaml());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = *loaded;
    ProfileTable table = testutil::DdpProfiles(loaded_, {1, 2}, [](int g) { return 100.0 * g; });
    ASSERT_TRUE(testutil::StoreProfiles(*client_, table, kProfileNamespace).ok());
    auto created = testutil::CreateJob(*client_, loaded_.job, kPlacementNamespace);
    ASSERT_TRUE(created.ok()) << created.status();
  }
  std::vector<kube::Object> ServerPods() { return JobPods(*client_, kPlacementNamespace, "small"); }
  void SetPhase(const kube::Object& p, const char* phase) {
    kube::PatchOptions po;
    po.subresource = "status";
    auto patched = client_->Patch(kube::Pods(), kPlacementNamespace, p["metadata"]["name"],
                                  kube::PatchType::kMerge, {{"status", {{"phase", phase}}}}, po);
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  std::unique_ptr<kube::RestClient> client_;
  api::LoadedJob loaded_;
};

TEST_F(PlacementTest, GangsGoOnlyWhereTheSchedulerWouldAdmitThemAndTheJobFinishes) {
  const std::string key = kube::KeyFor(kPlacementNamespace, "small");
  PlaneCaches cache(client_.get(), kPlacementNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 6));
  auto recorder = Recorder(client_.get(), "placement-test");
  FakeClock clock;
  Reconciler reconciler(client_.get(), cache.caches(), PlaneOptions(recorder.get()), &clock);
  const std::set<std::string> admitting = {"gpu-plain", "gpu-tainted"};
  std::set<std::string> used;
  bool succeeded = false;
  for (int round = 0; round < 10 && !succeeded; ++round) {
    ASSERT_TRUE(reconciler.Reconcile(key).ok());
    ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
    std::map<std::string, int> live_per_node;
    for (const kube::Object& p : ServerPods()) {
      const std::string planned = p["metadata"]["annotations"][kNodeAnnotation];
      EXPECT_EQ(admitting.count(planned), 1u)
          << p["metadata"]["name"] << " is pinned to " << planned
          << ", where kube-scheduler would refuse it";
      used.insert(planned);
      const std::string phase = p["status"].value("phase", "");
      if (phase != "Succeeded") ++live_per_node[planned];
    }
    for (const auto& [node, n] : live_per_node) EXPECT_LE(n, 2) << node << " over-committed";
    for (const kube::Object& p : ServerPods()) {
      if (p["status"].value("phase", "") != "Succeeded") SetPhase(p, "Succeeded");
    }
    ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
    clock.Advance(std::chrono::seconds(30));
    auto job = client_->Get(ModelSelectionJobs(), kPlacementNamespace, "small");
    ASSERT_TRUE(job.ok());
    succeeded = (*job)["status"].value("phase", "") == "Succeeded";
  }
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  auto job = client_->Get(ModelSelectionJobs(), kPlacementNamespace, "small");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"].value("phase", ""), "Succeeded") << (*job)["status"].dump();
  EXPECT_EQ(used, admitting) << "both admitting nodes are used";
}

// A node that blips NotReady for less than the grace period keeps its gangs;
// one NotReady longer loses them (torn down, planned again elsewhere). Its own
// suite: a fresh control plane with the same pools.
class NodeGraceTest : public PlacementTest {};

TEST_F(NodeGraceTest, ANotReadyBlipTearsNothingDownAndALongOutageDoes) {
  const std::string key = kube::KeyFor(kPlacementNamespace, "small");
  PlaneCaches cache(client_.get(), kPlacementNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 6));
  auto recorder = Recorder(client_.get(), "blip-test");
  FakeClock clock;
  ReconcilerOptions options = PlaneOptions(recorder.get());  // wall time 2026-01-01T00:00:00Z
  options.node_lost_grace_s = 300;
  Reconciler reconciler(client_.get(), cache.caches(), options, &clock);
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
  for (const kube::Object& p : ServerPods()) SetPhase(p, "Running");
  ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  const size_t before = ServerPods().size();
  ASSERT_GT(before, 0u);
  std::string victim = ServerPods().front()["metadata"]["annotations"][kNodeAnnotation];
  std::set<std::string> on_victim;
  for (const kube::Object& p : ServerPods()) {
    if (p["metadata"]["annotations"][kNodeAnnotation] == victim)
      on_victim.insert(p["metadata"]["name"]);
  }

  // NotReady for 10 s: within the grace.
  ASSERT_TRUE(testutil::SetNodeReady(*client_, victim, "Unknown", "2025-12-31T23:59:50Z").ok());
  ASSERT_TRUE(WaitUntil([&] {
    kube::ObjectPtr n = cache.nodes.store().Get(victim);
    return n && (*n)["status"]["conditions"][0].value("status", "") == "Unknown";
  }));
  clock.Advance(std::chrono::seconds(10));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  int deleting = 0;
  for (const kube::Object& p : ServerPods())
    deleting += p["metadata"].contains("deletionTimestamp");
  EXPECT_EQ(ServerPods().size(), before);
  EXPECT_EQ(deleting, 0) << "a blip shorter than the grace period tears nothing down";

  // NotReady for 10 minutes: its gangs are lost.
  ASSERT_TRUE(testutil::SetNodeReady(*client_, victim, "Unknown", "2025-12-31T23:50:00Z").ok());
  ASSERT_TRUE(WaitUntil([&] {
    kube::ObjectPtr n = cache.nodes.store().Get(victim);
    return n && (*n)["status"]["conditions"][0].value("lastTransitionTime", "") ==
                    "2025-12-31T23:50:00Z";
  }));
  clock.Advance(std::chrono::seconds(10));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  // Its gang's pods are gone or going (deleted; a new generation may run
  // elsewhere already), and nothing new is pinned to it.
  for (const kube::Object& p : ServerPods()) {
    const std::string name = p["metadata"]["name"];
    EXPECT_TRUE(on_victim.count(name) == 0 || p["metadata"].contains("deletionTimestamp"))
        << name << " still runs on " << victim << ", NotReady past the grace period";
    if (on_victim.count(name) == 0) {
      EXPECT_NE(p["metadata"]["annotations"][kNodeAnnotation], victim) << name;
    }
  }
}

// A namespace ResourceQuota on GPUs that the job's plan does not know of: the
// gang the quota has no room for is forbidden (403) at create. Nothing of it is
// left behind (a part of a gang would hold GPUs and never start), its task says
// it waits for the quota (a QuotaExceeded event), the job comes back every 30 s,
// and once the quota is raised the gang launches.
class ResourceQuotaTest : public PlacementTest {
 protected:
  void TearDown() override {
    plane()->Kubectl(std::string("delete resourcequota gpus --ignore-not-found -n ") +
                     kPlacementNamespace);
    PlacementTest::TearDown();
  }
  // The quota, with the status the quota controller would give it (this plane
  // runs no controller-manager; admission counts usage from there on).
  void SetQuota(int gpus, int used) {
    const std::string g = std::to_string(gpus);
    auto applied = plane()->Kubectl(
        "apply -f -", std::string("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: gpus, "
                                  "namespace: ") +
                          kPlacementNamespace + "}\nspec:\n  hard: {requests.nvidia.com/gpu: \"" +
                          g + "\"}\n");
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    auto status = plane()->Kubectl(
        std::string("patch resourcequota gpus --subresource=status --type=merge -n ") +
        kPlacementNamespace + " -p '{\"status\":{\"hard\":{\"requests.nvidia.com/gpu\":\"" + g +
        "\"},\"used\":{\"requests.nvidia.com/gpu\":\"" + std::to_string(used) + "\"}}}'");
    ASSERT_EQ(status.exit_code, 0) << status.output;
  }
  int Events(const std::string& reason) {
    auto events = client_->List(kube::Events(), kPlacementNamespace, {});
    int n = 0;
    if (events.ok()) {
      for (const kube::Object& e : (*events)["items"]) n += e.value("reason", "") == reason;
    }
    return n;
  }
};

TEST_F(ResourceQuotaTest, AGangTheQuotaHasNoRoomForWaitsWholeAndLaunchesOnceItHas) {
  const std::string key = kube::KeyFor(kPlacementNamespace, "small");
  ASSERT_NO_FATAL_FAILURE(SetQuota(2, 0));
  PlaneCaches cache(client_.get(), kPlacementNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 6));
  auto recorder = Recorder(client_.get(), "quota-test");
  FakeClock clock;
  Reconciler reconciler(client_.get(), cache.caches(), PlaneOptions(recorder.get()), &clock);
  kube::Result last;
  for (int pass = 0; pass < 3; ++pass) {
    ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
    auto r = reconciler.Reconcile(key);
    ASSERT_TRUE(r.ok()) << r.status();
    last = *r;
  }
  // Whole gangs only, within the quota: ranks by gang add up to world sizes.
  std::map<std::string, int> ranks, world;
  int gpus = 0;
  for (const kube::Object& p : ServerPods()) {
    const std::string gang = p["metadata"]["labels"].value(kGangLabel, "");
    ++ranks[gang];
    world[gang] = std::stoi(p["metadata"]["annotations"].value(kWorldSizeAnnotation, "0"));
    ++gpus;
  }
  EXPECT_EQ(ranks, world) << "a part of a gang was left behind";
  EXPECT_LE(gpus, 2);
  EXPECT_GE(Events("QuotaExceeded"), 1);
  EXPECT_EQ(last.requeue_after, std::chrono::seconds(30));
  auto job = client_->Get(ModelSelectionJobs(), kPlacementNamespace, "small");
  ASSERT_TRUE(job.ok());
  int waiting = 0;
  for (const kube::Object& t : (*job)["status"]["tasks"]) {
    waiting += t.value("message", "").rfind("waiting for the namespace's ResourceQuota", 0) == 0;
  }
  EXPECT_GE(waiting, 1) << (*job)["status"].dump();
  EXPECT_NE((*job)["status"].value("phase", ""), "Failed");
  // Raised: the next pass launches what waited.
  ASSERT_NO_FATAL_FAILURE(SetQuota(16, gpus));
  ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  EXPECT_GT(static_cast<int>(ServerPods().size()), gpus);
}

// A spec that passes the CRD and validation but whose pods the API server
// rejects (an image the cluster's admission policy refuses) fails the job with
// the server's message and an event, is not tried again while the spec stands,
// and runs once the spec is fixed. (A toleration key that is no label key, the
// first such case found, is now refused by the CRD already.)
class RejectedPodTest : public PlacementTest {
 protected:
  void TearDown() override {
    RemovePodPolicy(*plane(), "orrery-test-trusted-images");
    RemovePodPolicy(*plane(), "orrery-test-one-task");
    PlacementTest::TearDown();
  }
  std::string Phase(const std::string& job) {
    auto got = client_->Get(ModelSelectionJobs(), kPlacementNamespace, job);
    if (!got.ok() || !got->contains("status")) return "";
    return (*got)["status"].value("phase", "");
  }
  int RejectionEvents() {
    auto events = client_->List(kube::Events(), kPlacementNamespace, {});
    int n = 0;
    if (events.ok()) {
      for (const kube::Object& e : (*events)["items"]) n += e.value("reason", "") == "PodRejected";
    }
    return n;
  }
};

TEST_F(RejectedPodTest, APodTheServerRejectsFailsTheJobUntilTheSpecIsFixed) {
  const std::string key = kube::KeyFor(kPlacementNamespace, "small");
  auto refused = client_->Patch(
      ModelSelectionJobs(), kPlacementNamespace, "small", kube::PatchType::kMerge,
      {{"spec",
        {{"resources",
          {{"tolerations",
            kube::Object::array({{{"key", "bad key!"}, {"operator", "Exists"}}})}}}}}},
      {});
  ASSERT_FALSE(refused.ok()) << "the CRD let a toleration key with a space through";
  EXPECT_TRUE(kube::IsInvalid(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("spec.resources.tolerations[0].key"), std::string::npos)
      << refused.status();
  std::string out;
  ASSERT_TRUE(testutil::InstallUntrustedImagePolicy(*plane(), kPlacementNamespace, &out)) << out;
  auto bad = client_->Patch(
      ModelSelectionJobs(), kPlacementNamespace, "small", kube::PatchType::kMerge,
      {{"spec",
        {{"resources", {{"image", std::string(testutil::kUntrustedRegistry) + "worker:1"}}}}}},
      {});
  ASSERT_TRUE(bad.ok()) << "the CRD refused an image only admission refuses: " << bad.status();
  PlaneCaches cache(client_.get(), kPlacementNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 6));
  auto recorder = Recorder(client_.get(), "rejected-test");
  FakeClock clock;
  Reconciler reconciler(client_.get(), cache.caches(), PlaneOptions(recorder.get()), &clock);
  // Each task's pods are refused as it is launched: each fails for this spec,
  // and with all of them the job.
  for (int pass = 0; pass < 4 && Phase("small") != "Failed"; ++pass) {
    ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
    auto r = reconciler.Reconcile(key);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  auto job = client_->Get(ModelSelectionJobs(), kPlacementNamespace, "small");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"].value("phase", ""), "Failed") << (*job)["status"].dump();
  std::string reason, message;
  for (const kube::Object& c : (*job)["status"].value("conditions", kube::Object::array())) {
    if (c.value("type", "") == "Degraded") {
      reason = c.value("reason", "");
      message = c.value("message", "");
    }
  }
  EXPECT_EQ(reason, "PodRejected");
  EXPECT_NE(message.find("are not allowed in this cluster"), std::string::npos) << message;
  EXPECT_EQ(message.find("k8s-error"), std::string::npos) << "the server's words, not ours";
  const size_t tasks = (*job)["status"]["tasks"].size();
  for (const kube::Object& t : (*job)["status"]["tasks"]) {
    EXPECT_EQ(t.value("state", ""), "Failed") << t.dump();
  }
  EXPECT_EQ(RejectionEvents(), static_cast<int>(tasks)) << "one per task";
  // While the spec stands nothing is tried again, and nothing is left behind.
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
    auto again = reconciler.Reconcile(key);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(again->requeue);
    EXPECT_EQ(again->requeue_after.count(), 0);
  }
  EXPECT_TRUE(ServerPods().empty());
  EXPECT_EQ(RejectionEvents(), static_cast<int>(tasks));
  // A restarted operator knows it from the status: it tries nothing either.
  Reconciler restarted(client_.get(), cache.caches(), PlaneOptions(recorder.get()), &clock);
  ASSERT_TRUE(restarted.Reconcile(key).ok());
  EXPECT_TRUE(ServerPods().empty());
  EXPECT_EQ(RejectionEvents(), static_cast<int>(tasks));
  // Fixed: the next pass launches.
  auto fixed =
      client_->Patch(ModelSelectionJobs(), kPlacementNamespace, "small", kube::PatchType::kMerge,
                     {{"spec", {{"resources", {{"image", api::kDefaultWorkerImage}}}}}}, {});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
  ASSERT_TRUE(reconciler.Reconcile(key).ok());
  EXPECT_FALSE(ServerPods().empty());
}

// A refusal that hits one task's pods fails that task only: the others run to
// the end, the job ends Failed (one task of three), and an edited spec (once the
// policy is gone) launches the refused task again.
class OneTaskRejectedTest : public RejectedPodTest {};  // its own plane: fresh nodes and job

TEST_F(OneTaskRejectedTest, APodRefusalOfOneTaskFailsThatTaskAndTheOthersFinish) {
  const std::string key = kube::KeyFor(kPlacementNamespace, "small");
  const std::string refused_task = "gpt";
  const std::string probe = "apiVersion: v1\nkind: Pod\nmetadata: {name: probe, namespace: " +
                            std::string(kPlacementNamespace) + ", labels: {" + kTaskLabel + ": " +
                            LabelValue(refused_task) +
                            "}}\nspec:\n  automountServiceAccountToken: false\n  containers:\n"
                            "  - {name: c, image: busybox}\n";
  std::string out;
  ASSERT_TRUE(
      testutil::InstallPodPolicy(*plane(), "orrery-test-one-task",
                                 "!has(object.metadata.labels) || !('" + std::string(kTaskLabel) +
                                     "' in object.metadata.labels) || object.metadata.labels['" +
                                     kTaskLabel + "'] != '" + LabelValue(refused_task) + "'",
                                 "this task may not run here", probe, &out))
      << out;
  PlaneCaches cache(client_.get(), kPlacementNamespace, kProfileNamespace);
  ASSERT_TRUE(cache.Start(key, 6));
  auto recorder = Recorder(client_.get(), "rejected-one-test");
  FakeClock clock;
  Reconciler reconciler(client_.get(), cache.caches(), PlaneOptions(recorder.get()), &clock);
  auto run_to_end = [&] {
    for (int round = 0; round < 10; ++round) {
      ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
      ASSERT_TRUE(reconciler.Reconcile(key).ok());
      ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
      for (const kube::Object& p : ServerPods()) {
        if (p["status"].value("phase", "") != "Succeeded") SetPhase(p, "Succeeded");
      }
      clock.Advance(std::chrono::seconds(30));
      const std::string phase = Phase("small");
      if (phase == "Succeeded" || phase == "Failed") break;
    }
    ASSERT_TRUE(cache.CatchUp(*client_, kPlacementNamespace, "small"));
    ASSERT_TRUE(reconciler.Reconcile(key).ok());
  };
  run_to_end();
  auto job = client_->Get(ModelSelectionJobs(), kPlacementNamespace, "small");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"].value("phase", ""), "Failed") << (*job)["status"].dump();
  EXPECT_EQ((*job)["status"].value("taskSummary", ""), "2/3");
  for (const kube::Object& t : (*job)["status"]["tasks"]) {
    const bool refused = t.value("name", "") == refused_task;
    EXPECT_EQ(t.value("state", ""), refused ? "Failed" : "Succeeded") << t.dump();
    if (refused) {
      EXPECT_NE(t.value("message", "").find("this task may not run here"), std::string::npos)
          << t.dump();
    }
  }
  EXPECT_EQ(RejectionEvents(), 1);
  // The policy goes and the spec is edited: the refused task runs, the job succeeds.
  RemovePodPolicy(*plane(), "orrery-test-one-task");
  ASSERT_TRUE(WaitUntil(
      [&] { return plane()->Kubectl("create --dry-run=server -f -", probe).exit_code == 0; }));
  auto edited =
      client_->Patch(ModelSelectionJobs(), kPlacementNamespace, "small", kube::PatchType::kMerge,
                     {{"spec", {{"scheduling", {{"minSwitchGain", 0.07}}}}}}, {});
  ASSERT_TRUE(edited.ok()) << edited.status();
  run_to_end();
  auto after = client_->Get(ModelSelectionJobs(), kPlacementNamespace, "small");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(Phase("small"), "Succeeded") << (*after)["status"].dump();
}

}  // namespace
}  // namespace orrery::controller
