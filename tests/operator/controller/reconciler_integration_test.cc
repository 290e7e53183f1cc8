// The reconciler on a real API server: the CRD is installed, two Ready nodes with
// two GPUs each exist (their allocatable set through the status subresource, as
// a kubelet would), a job of three tasks is applied with every profile it needs
// already in the shared ConfigMap, and Reconcile runs over informer caches.
// Gang pods appear on their planned nodes and never over-commit a node; a second
// Reconcile before the cache has seen the pods creates nothing; when the test
// marks the pods Succeeded (as the kubelet would), further Reconciles start the
// remaining tasks and finally move every task and the job to Succeeded.
#include <chrono>
#include <map>
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

  // The job's gang pods as the server holds them now.
  std::vector<kube::Object> ServerPods() {
    kube::ListOptions o;
    o.label_selector = std::string(kJobLabel) + "=" + LabelValue("small");
    auto list = client_->List(kube::Pods(), kNamespace, o);
    EXPECT_TRUE(list.ok()) << list.status();
    std::vector<kube::Object> pods;
    if (list.ok()) {
      for (const kube::Object& p : (*list)["items"]) pods.push_back(p);
    }
    return pods;
  }

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
  kube::InformerOptions in_job_ns, in_profile_ns;
  in_job_ns.ns = kNamespace;
  in_profile_ns.ns = kProfileNamespace;
  kube::Informer jobs(client_.get(), ModelSelectionJobs(), in_job_ns);
  kube::Informer pods(client_.get(), kube::Pods());
  kube::Informer nodes(client_.get(), kube::Nodes());
  kube::Informer configmaps(client_.get(), kube::ConfigMaps(), in_profile_ns);
  for (kube::Informer* i : {&jobs, &pods, &nodes, &configmaps}) i->Start();
  for (kube::Informer* i : {&jobs, &pods, &nodes, &configmaps}) {
    ASSERT_TRUE(i->WaitForSync(std::chrono::seconds(30)));
  }
  const std::string key = kube::KeyFor(kNamespace, "small");
  ASSERT_TRUE(CacheHas(jobs, key, ""));
  ASSERT_TRUE(WaitUntil([&] { return nodes.store().Size() >= 2; }));
  ASSERT_TRUE(CacheHas(configmaps, kube::KeyFor(kProfileNamespace, kProfileConfigMapName), ""));

  FakeClock clock;
  ReconcilerOptions options;
  options.profile_namespace = kProfileNamespace;
  options.engine.solver_time_limit_s = 2;
  options.now_rfc3339 = [] { return std::string("2026-01-01T00:00:00Z"); };
  kube::EventRecorderOptions event_options;
  event_options.reporting_instance = "reconciler-test";
  kube::EventRecorder recorder(client_.get(), event_options);
  options.events = &recorder;
  Reconciler reconciler(client_.get(),
                        {&jobs.store(), &pods.store(), &nodes.store(), &configmaps.store()},
                        options, &clock);

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
  EXPECT_TRUE(status.plan.has_value());

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

  for (kube::Informer* i : {&jobs, &pods, &nodes, &configmaps}) i->Stop();
}

}  // namespace
}  // namespace orrery::controller
