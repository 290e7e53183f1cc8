// One engine, three worlds. The same scenarios run through the simulator, the
// local runner (real orrery-worker processes) and the controller (a real API
// server, with this test as the kubelet) and each world's engine journal
// (engine/journal.h) is compared: the same launches and stops, in the same
// order, up to timing (task names aside: which of two equal tasks goes first
// is timing). Every world reports each launch and stop it carries out to the
// journal, and a test fails when a world acts without the engine saying so.
//
// Scenarios (one node of four GPUs unless said; two equal tasks profiled at 1
// and 2 GPUs with a linear speed-up, so the plan runs both at two GPUs):
//   - arrivals: both launch, both finish;
//   - quota: the job's gpuQuota edited 4 -> 2 while both run (one is stopped
//     for the quota), then 2 -> 4 (it is launched again);
//   - elastic batch: the job elastic (batch 16 or 32) under a quota of 2, each
//     task on one GPU at 16; the quota raised to 4: each is stopped for the new
//     plan and relaunched on two GPUs at batch 32, where a GPU works best;
//   - drift (simulator and controller): under a quota of 3 the task on one GPU
//     trains at half its profiled speed; the re-plan swaps the two tasks;
//   - node loss: two nodes of two GPUs, the second lost while both run (the
//     local world: its devices 2 and 3 fail together); its task waits for the
//     first and runs after it.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "common/clock.h"
#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/progress.h"
#include "operator/controller/reconciler.h"
#include "operator/engine/job_options.h"
#include "operator/engine/journal.h"
#include "operator/engine/profile_configs.h"
#include "operator/local/profile_cache.h"
#include "operator/local/report.h"
#include "operator/local/runner.h"
#include "operator/sim/simulator.h"
#include "tests/operator/controller/plane_setup.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"
#include "tests/testing/wait.h"

namespace orrery::controller {
namespace {

namespace fs = std::filesystem;
using orrery::testing::WaitUntil;

const char* kGpu = "nvidia.com/gpu";
constexpr double kSwitchCostS = 5;  // every world's, so they weigh a switch alike

// Two equal tasks (a grid of two learning rates) that run long enough for the
// edits to land while they train, in every world.
std::string JobYaml(int quota, bool elastic = false) {
  return std::string(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: conform
  namespace: conform
spec:
  tasks:
  - name: mlp
    model:
      mlp: {layers: 4, hidden: 256, inputs: 32, outputs: 8}
    data:
      synthetic: {seed: 3}
    training: {steps: 6000, batchSize: 16, learningRate: 1e-3}
    searchSpace:
      grid:
        learningRate: [1e-3, 3e-4]
  resources:
    gpuQuota: )") +
         std::to_string(quota) + R"(
    gpusPerTask: {min: 1, max: 2}
    templates: [ddp]
  profiling:
    gpuCounts: [1, 2]
  scheduling: {solverTimeLimitSeconds: 2}
  checkpoints: {intervalSteps: 50, keep: 2}
)" +
         std::string(elastic ? "  elasticity: {enabled: true, minBatchSize: 16, maxBatchSize: 32}\n"
                             : "");
}

// A second job on the cluster (the share scenario): one task of the same
// model, so the profiles the worlds hold serve it too.
std::string OtherJobYaml() {
  std::string y = JobYaml(4);
  y.replace(y.find("name: conform"), 13, "name: other");
  y.replace(y.find("learningRate: [1e-3, 3e-4]"), 26, "learningRate: [1e-4]");
  return y;
}

double Linear(int gpus) { return 100.0 * gpus; }

// samples/s of a (GPUs, global batch) configuration.
using Speed = std::function<double(int gpus, int64_t batch)>;
const Speed kLinear = [](int gpus, int64_t) { return Linear(gpus); };
// A second GPU adds 60%: two tasks side by side (two GPUs and one under a
// quota of 3) beat one after the other on two.
const Speed kSublinear = [](int gpus, int64_t) { return gpus == 1 ? 100.0 : 160.0; };
// A second GPU adds 20%: a GPU given to another job's waiting task gains the
// cluster far more than it costs the task it is taken from.
const Speed kFlat = [](int gpus, int64_t) { return gpus == 1 ? 100.0 : 120.0; };

// Elastic: each GPU is at its best with 16 samples of the batch; 8 runs it at
// half speed, 32 at 0.8, and a second GPU costs 10% in communication. One GPU
// prefers the task's batch of 16, two prefer 32; under a quota of 2 two tasks
// on a GPU each beat one after the other on two.
double PerGpuBatchSpeed(int gpus, int64_t batch) {
  const int64_t per_gpu = batch / gpus;
  const double efficiency = per_gpu == 16 ? 1.0 : per_gpu < 16 ? 0.5 : 0.8;
  return 100.0 * gpus * efficiency * (gpus > 1 ? 0.9 : 1.0);
}

// A journal as the worlds are compared: "stop <reason>" and "launch <config>"
// in order, the actions of one step sorted (stops first), task names left out.
std::vector<std::string> Canonical(const std::vector<engine::JournalEntry>& entries) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < entries.size()) {
    std::vector<std::string> step;
    const int n = entries[i].step;
    for (; i < entries.size() && entries[i].step == n; ++i) {
      step.push_back((entries[i].kind == "stop" ? "0 " : "1 ") + entries[i].kind + " " +
                     entries[i].detail);
    }
    std::sort(step.begin(), step.end());
    for (const std::string& s : step) out.push_back(s.substr(2));
  }
  return out;
}

std::string Lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& l : v) s += "  " + l + "\n";
  return s;
}

struct WorldRun {
  std::vector<engine::JournalEntry> actions;
  std::vector<std::string> violations;
};

// ---- the simulator ------------------------------------------------------------

struct SimEdit {
  double at = 0;
  planner::ClusterEvent::Kind kind = planner::ClusterEvent::Kind::kQuota;
  int value = 0;  // quota: the new cap; node lost: the node
};

// The planner's tasks of `job` over `total` GPUs, from the profiles the other
// worlds plan on.
std::vector<planner::Task> SimTasks(const api::LoadedJob& job, const Speed& speed, int total) {
  ProfileTable table = testutil::DdpBatchProfiles(job, {1, 2}, speed);
  std::vector<planner::Task> out;
  for (const api::ExpandedTask& t : job.tasks) {
    planner::Task task;
    task.name = t.name;
    task.work = static_cast<double>(engine::SampleBudget(t.task));
    task.configs = ConfigsFromProfiles(job.job.spec, t, table, "cuda", total).configs;
    out.push_back(task);
  }
  return out;
}

WorldRun RunSim(const api::LoadedJob& job, const std::vector<int>& nodes,
                const std::vector<SimEdit>& edits, const Speed& speed = kLinear,
                const std::map<std::string, double>& true_speed = {},
                const std::vector<planner::OtherJob>& other_jobs = {}) {
  planner::Workload w;
  w.name = "conformance";
  w.other_jobs = other_jobs;
  w.gpus_per_node = nodes.front();
  w.gpu_memory_gib = 80;
  int total = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    w.problem.nodes.push_back({"node-" + std::to_string(n), nodes[n], 80});
    total += nodes[n];
  }
  w.problem.gpu_cap = job.job.spec.resources.gpu_quota;
  w.problem.tasks = SimTasks(job, speed, total);
  for (const planner::Task& t : w.problem.tasks) {
    auto ts = true_speed.find(t.name);
    w.true_speed.push_back(ts == true_speed.end() ? 1.0 : ts->second);
  }
  for (const SimEdit& e : edits) {
    planner::ClusterEvent ev;
    ev.time = e.at;
    ev.kind = e.kind;
    if (e.kind == planner::ClusterEvent::Kind::kQuota) ev.gpus = e.value;
    if (e.kind == planner::ClusterEvent::Kind::kNodeLost) ev.node = e.value;
    w.events.push_back(ev);
  }
  sim::SimOptions o;
  engine::EngineOptions world;
  world.switch_cost_s = kSwitchCostS;
  o.engine = engine::JobEngineOptions(job.job.spec.scheduling, world);
  o.measure_after_s = 60;  // a gang's speed is known a minute in, as its rank 0's reports
  auto r = sim::Simulate(w, o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return {r->actions, r->violations};
}

// ---- the controller -------------------------------------------------------------

// The control plane is shared by the suite: each scenario has its own
// namespaces and nodes, and removes them when done.
class Controller {
 public:
  Controller(const orrery::testing::ControlPlane& plane, const api::LoadedJob& job,
             const std::vector<int>& nodes, const std::string& tag, const Speed& speed = kLinear)
      : kNs("conform-" + tag),
        kProfileNs("profiles-" + tag),
        key_(kube::KeyFor(kNs, "conform")),
        speed_(speed) {
    client_ = kube::testutil::PlaneClient(plane);
    std::string out;
    EXPECT_TRUE(testutil::InstallJobCrd(plane, &out)) << out;
    for (const std::string& ns : {kNs, kProfileNs}) {
      EXPECT_TRUE(kube::testutil::CreateNamespace(*client_, ns).ok());
    }
    for (size_t n = 0; n < nodes.size(); ++n) {
      node_names_.push_back(tag + "-" + std::to_string(n));
      EXPECT_TRUE(testutil::CreateReadyGpuNode(*client_, node_names_.back(), nodes[n], kGpu).ok());
    }
    EXPECT_TRUE(testutil::StoreProfiles(*client_, testutil::DdpBatchProfiles(job, {1, 2}, speed),
                                        kProfileNs)
                    .ok());
    api::ModelSelectionJob in_ns = job.job;
    in_ns.metadata.namespace_ = kNs;
    auto created = testutil::CreateJob(*client_, in_ns, kNs);
    EXPECT_TRUE(created.ok()) << created.status();
    cache_ = std::make_unique<testutil::PlaneCaches>(client_.get(), kNs, kProfileNs);
    EXPECT_TRUE(cache_->Start(key_, nodes.size()));
    recorder_ = testutil::Recorder(client_.get(), "conformance");
    ReconcilerOptions options = testutil::PlaneOptions(recorder_.get(), kProfileNs);
    options.engine.switch_cost_s = kSwitchCostS;
    options.progress = &board_;
    reconciler_ = std::make_unique<Reconciler>(client_.get(), cache_->caches(), options, &clock_);
  }
  ~Controller() {
    reconciler_.reset();
    cache_.reset();
    for (const std::string& n : node_names_) (void)client_->Delete(kube::Nodes(), "", n);
    for (const std::string& ns : {kNs, kProfileNs}) {
      (void)client_->Delete(kube::Namespaces(), "", ns);
    }
  }

  // One pass over caches that hold what the server holds.
  void Pass() {
    CatchUp();
    clock_.Advance(std::chrono::seconds(10));
    for (const std::string& name : jobs_) {
      auto r = reconciler_->Reconcile(kube::KeyFor(kNs, name));
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    }
    CatchUp();
  }
  // Another job in the namespace, reconciled after the first each pass.
  void AddJob(const api::LoadedJob& job) {
    api::ModelSelectionJob in_ns = job.job;
    in_ns.metadata.namespace_ = kNs;
    auto created = testutil::CreateJob(*client_, in_ns, kNs);
    ASSERT_TRUE(created.ok()) << created.status();
    const std::string key = kube::KeyFor(kNs, job.job.metadata.name);
    ASSERT_TRUE(WaitUntil([&] { return cache_->jobs.store().Get(key) != nullptr; }));
    jobs_.push_back(job.job.metadata.name);
  }
  // The pods of the first job's tasks that run on `ranks` GPUs end Succeeded.
  void FinishTasksOn(int ranks) {
    std::map<std::string, std::vector<std::string>> pods;  // task -> running pods
    for (const kube::Object& p : testutil::JobPods(*client_, kNs, "conform")) {
      if (p["status"].value("phase", "") != "Running") continue;
      pods[p["metadata"]["labels"].value(kTaskLabel, "")].push_back(p["metadata"]["name"]);
    }
    for (const auto& [task, names] : pods) {
      if (static_cast<int>(names.size()) != ranks) continue;
      for (const std::string& name : names) ASSERT_NO_FATAL_FAILURE(SetPhase(name, "Succeeded"));
    }
  }
  // The kubelet: pods created run; pods deleted go at once; pods of a node
  // that is gone are removed (the pod garbage collector's part).
  void Kubelet(const char* phase = "Running") {
    std::set<std::string> nodes;
    auto listed = client_->List(kube::Nodes(), "", {});
    ASSERT_TRUE(listed.ok()) << listed.status();
    for (const kube::Object& n : (*listed)["items"]) nodes.insert(n["metadata"].value("name", ""));
    std::vector<kube::Object> all;
    for (const std::string& job : jobs_) {
      for (kube::Object& p : testutil::JobPods(*client_, kNs, job)) all.push_back(std::move(p));
    }
    for (const kube::Object& p : all) {
      const std::string name = p["metadata"]["name"];
      const std::string node = PodNode(Json::parse(p.dump()));
      if (p["metadata"].contains("deletionTimestamp") || nodes.count(node) == 0) {
        kube::DeleteOptions now;
        now.grace_period_seconds = 0;
        (void)client_->Delete(kube::Pods(), kNs, name, now);
        continue;
      }
      const std::string current = p["status"].value("phase", "");
      if (current == "Succeeded" || current == "Failed" || current == phase) continue;
      ASSERT_NO_FATAL_FAILURE(SetPhase(name, phase));
    }
  }
  // Pod `name` of the namespace reaches `phase`, as its kubelet would say.
  void SetPhase(const std::string& name, const char* phase) {
    kube::PatchOptions po;
    po.subresource = "status";
    auto patched = client_->Patch(kube::Pods(), kNs, name, kube::PatchType::kMerge,
                                  {{"status", {{"phase", phase}}}}, po);
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  int Running() {
    int n = 0;
    for (const kube::Object& p : testutil::JobPods(*client_, kNs, "conform")) {
      n += p["status"].value("phase", "") == "Running" &&
                   !p["metadata"].contains("deletionTimestamp")
               ? 1
               : 0;
    }
    return n;
  }
  // Each running gang's rank 0 reports (as the progress scraper would read
  // it): its data-parallel share of `fraction` of the profiled speed, a few
  // steps in. Returns the tasks (names) running on one GPU.
  std::set<std::string> Report(const std::map<std::string, double>& fraction) {
    std::set<std::string> on_one;
    std::map<std::string, int> ranks;
    std::map<std::string, int> generation;
    for (const kube::Object& p : testutil::JobPods(*client_, kNs, "conform")) {
      if (p["status"].value("phase", "") != "Running") continue;
      const std::string task = p["metadata"]["labels"].value(kTaskLabel, "");
      ++ranks[task];
      generation[task] = std::stoi(p["metadata"]["annotations"].value(kGenerationAnnotation, "0"));
    }
    for (const auto& [task, n] : ranks) {
      auto f = fraction.find(task);
      TaskProgress progress;
      progress.generation = generation[task];
      progress.step = 20;
      progress.samples_per_second = speed_(n, 16) / n * (f == fraction.end() ? 1.0 : f->second);
      board_.Set(key_, task, progress);
      if (n == 1) on_one.insert(task);
    }
    return on_one;
  }
  // The expanded task whose pods carry task label `label`.
  static std::string TaskNamed(const api::LoadedJob& job, const std::string& label) {
    for (const api::ExpandedTask& t : job.tasks) {
      if (LabelValue(t.name) == label) return t.name;
    }
    return label;
  }
  void SetQuota(int gpus) {
    auto patched = client_->Patch(ModelSelectionJobs(), kNs, "conform", kube::PatchType::kMerge,
                                  {{"spec", {{"resources", {{"gpuQuota", gpus}}}}}}, {});
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  void LoseNode(size_t n) {
    ASSERT_TRUE(client_->Delete(kube::Nodes(), "", node_names_[n]).ok());
    ASSERT_TRUE(WaitUntil([&] { return !cache_->nodes.store().Get(node_names_[n]); }));
  }
  // Runs what runs to the end, pass after pass, until the job succeeded.
  void Finish() {
    for (int round = 0; round < 12 && !Succeeded(); ++round) {
      Kubelet("Running");
      Pass();
      Kubelet("Succeeded");
      Pass();
    }
    EXPECT_TRUE(Succeeded());
  }
  bool Succeeded() {
    auto job = client_->Get(ModelSelectionJobs(), kNs, "conform");
    return job.ok() && (*job)["status"].value("phase", "") == "Succeeded";
  }
  WorldRun Journal() const {
    engine::ActionJournal j = reconciler_->Journal(key_);
    return {j.entries(), j.violations()};
  }

 private:
  void CatchUp() {
    for (const std::string& name : jobs_) ASSERT_TRUE(cache_->CatchUp(*client_, kNs, name));
  }

  const std::string kNs, kProfileNs;  // NOLINT(readability-identifier-naming): as constants
  const std::string key_;
  const Speed speed_;
  std::unique_ptr<kube::RestClient> client_;
  std::vector<std::string> node_names_;
  std::unique_ptr<testutil::PlaneCaches> cache_;
  std::unique_ptr<kube::EventRecorder> recorder_;
  FakeClock clock_;
  ProgressBoard board_;
  std::unique_ptr<Reconciler> reconciler_;
  std::vector<std::string> jobs_ = {"conform"};  // in the order each pass reconciles them
};

// ---- the local runner -------------------------------------------------------------

// `orrery run` in-process over cpu:4 with real orrery-worker processes, its
// profile cache seeded with the profiles the other worlds plan on; `drive`
// runs beside it with the work directory and edits the live run.
WorldRun RunLocal(const api::LoadedJob& job, const std::string& dir,
                  const std::function<void(const std::string& workdir)>& drive,
                  const Speed& speed = kLinear) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto cache = local::ProfileCache::Load(dir + "/profiles.json");
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return {};
  for (const auto& [key, p] : testutil::DdpBatchProfiles(job, {1, 2}, speed, "cpu")) {
    cache->Put(p.entry);
  }
  EXPECT_TRUE(cache->Save().ok());
  local::RunOptions o;
  auto devices = local::ParseDevices("cpu:4");
  EXPECT_TRUE(devices.ok());
  o.devices = *devices;
  o.workdir = dir + "/work";
  o.worker = std::string(ORRERY_BINARY_DIR) + "/bin/orrery-worker";
  o.profile_cache = dir + "/profiles.json";
  o.job_dir = dir;
  o.switch_cost_s = kSwitchCostS;
  o.report_every = 20;
  std::ostringstream out, err;
  int code = -1;
  std::thread run([&] { code = local::RunJob(job, o, out, err); });
  drive(o.workdir);
  run.join();
  EXPECT_EQ(code, 0) << err.str() << out.str();
  std::ifstream in(o.workdir + "/report.json");
  std::stringstream text;
  text << in.rdbuf();
  auto report = local::ReportFromJson(text.str());
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return {};
  WorldRun r;
  int step = 0;
  double last = -1;
  std::string last_trigger;
  for (const local::ReportAction& a : report->actions) {
    // The report keeps each action's time and trigger: a new step starts where
    // either changes (the journal's step numbers are not in the report).
    if (a.time_s != last || a.trigger != last_trigger) ++step;
    last = a.time_s;
    last_trigger = a.trigger;
    r.actions.push_back({step, a.time_s, a.trigger, a.kind, a.task, a.detail});
  }
  r.violations = report->violations;
  return r;
}

// The report as the run rewrites it; empty until it exists.
nlohmann::json ReadReport(const std::string& workdir) {
  std::ifstream in(workdir + "/report.json");
  if (!in) return nlohmann::json::object();
  return nlohmann::json::parse(in, nullptr, false);
}
int LocalCount(const nlohmann::json& report, const std::string& what, const std::string& value) {
  int n = 0;
  if (!report.is_object()) return 0;
  if (what == "running") {
    for (const auto& t : report.value("tasks", nlohmann::json::array())) {
      n += t.value("state", "") == value ? 1 : 0;
    }
  } else {
    for (const auto& a : report.value("actions", nlohmann::json::array())) {
      n += a.value("kind", "") == what ? 1 : 0;
    }
  }
  return n;
}
void Control(const std::string& workdir, const std::string& line) {
  std::ofstream c(workdir + "/control", std::ios::app);
  c << line << "\n";
}

// ---- the suite ---------------------------------------------------------------------

class ConformanceTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    auto loaded = api::LoadJobText(JobYaml(4));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    job_ = *loaded;
    dir_ = ::testing::TempDir() + "/conformance_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
    ControlPlaneTest::TearDown();
  }
  // Each world acted only on the engine's word, and all did the same.
  void Compare(const std::map<std::string, WorldRun>& worlds) {
    const std::string& first = worlds.begin()->first;
    const std::vector<std::string> want = Canonical(worlds.begin()->second.actions);
    EXPECT_FALSE(want.empty());
    for (const auto& [name, run] : worlds) {
      EXPECT_TRUE(run.violations.empty()) << name << ": " << run.violations.front();
      std::vector<std::string> got = Canonical(run.actions);
      EXPECT_EQ(got, want) << name << " did:\n" << Lines(got) << first << " did:\n" << Lines(want);
      std::cout << "[conformance] " << name << ": " << got.size() << " actions\n" << Lines(got);
    }
  }

  api::LoadedJob job_;
  std::string dir_;
};

TEST_F(ConformanceTest, ArrivalsLaunchAndFinishAlikeInEveryWorld) {
  std::map<std::string, WorldRun> worlds;
  worlds["simulator"] = RunSim(job_, {4}, {});
  {
    Controller c(*plane(), job_, {4}, "arrivals");
    c.Pass();
    c.Finish();
    worlds["controller"] = c.Journal();
  }
  worlds["local"] = RunLocal(job_, dir_ + "/local", [](const std::string&) {});
  Compare(worlds);
}

TEST_F(ConformanceTest, QuotaEditedDownThenUpStopsAndRelaunchesAlikeInEveryWorld) {
  std::map<std::string, WorldRun> worlds;
  worlds["simulator"] = RunSim(job_, {4},
                               {{100, planner::ClusterEvent::Kind::kQuota, 2},
                                {200, planner::ClusterEvent::Kind::kQuota, 4}});
  {
    Controller c(*plane(), job_, {4}, "quota");
    c.Pass();
    c.Kubelet();
    c.Pass();
    ASSERT_EQ(c.Running(), 4);
    c.SetQuota(2);
    c.Pass();     // stops what exceeds the quota
    c.Kubelet();  // its ranks go
    c.Pass();
    c.SetQuota(4);
    c.Pass();  // launches it again
    c.Finish();
    worlds["controller"] = c.Journal();
  }
  worlds["local"] = RunLocal(job_, dir_ + "/local", [](const std::string& workdir) {
    // Both run: the quota goes down; once the stop is issued and applied, up.
    ASSERT_TRUE(
        WaitUntil([&] { return LocalCount(ReadReport(workdir), "running", "running") == 2; },
                  std::chrono::seconds(120)));
    Control(workdir, "quota 2");
    ASSERT_TRUE(WaitUntil([&] { return LocalCount(ReadReport(workdir), "stop", "") >= 1; },
                          std::chrono::seconds(60)));
    ASSERT_TRUE(
        WaitUntil([&] { return LocalCount(ReadReport(workdir), "running", "running") == 1; },
                  std::chrono::seconds(60)));
    Control(workdir, "quota 4");
  });
  Compare(worlds);
}

TEST_F(ConformanceTest, NodeLostWhileRunningReplansAlikeInEveryWorld) {
  std::map<std::string, WorldRun> worlds;
  worlds["simulator"] = RunSim(job_, {2, 2}, {{100, planner::ClusterEvent::Kind::kNodeLost, 1}});
  {
    Controller c(*plane(), job_, {2, 2}, "node");
    c.Pass();
    c.Kubelet();
    c.Pass();
    ASSERT_EQ(c.Running(), 4);
    c.LoseNode(1);
    c.Pass();  // the gang on the lost node is torn down; the engine plans again
    c.Kubelet();
    c.Pass();
    c.Finish();
    worlds["controller"] = c.Journal();
  }
  // The local world has one machine: the second node is its devices 2 and 3,
  // lost in one control-file write (as a node's GPUs go together). Its gang
  // dies with them; the engine plans again on the two left.
  worlds["local"] = RunLocal(job_, dir_ + "/local", [](const std::string& workdir) {
    ASSERT_TRUE(
        WaitUntil([&] { return LocalCount(ReadReport(workdir), "running", "running") == 2; },
                  std::chrono::seconds(120)));
    Control(workdir, "fail 2\nfail 3");
  });
  Compare(worlds);
}

// A throughput drift: under a quota of 3 (a second GPU adds 60%, so side by
// side beats one after the other) one task runs on two GPUs and the
// other on one; the one on one GPU turns out to train at half its profiled
// speed. The engine plans again on the measured speed and swaps them (the slow
// task gets the two GPUs). The local world is left out: its speeds are the
// real processes' on this machine's CPUs, not a scenario's.
TEST_F(ConformanceTest, AThroughputDriftReplansAlikeInSimulatorAndController) {
  auto loaded = api::LoadJobText(JobYaml(3));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const api::LoadedJob job = *loaded;
  // Which task the plan puts on one GPU (the simulator is deterministic).
  std::string slow;
  for (const engine::JournalEntry& e : RunSim(job, {4}, {}, kSublinear).actions) {
    if (e.kind == "launch" && e.detail.find("x1") != std::string::npos && slow.empty()) {
      slow = e.task;
    }
  }
  ASSERT_FALSE(slow.empty());
  std::map<std::string, WorldRun> worlds;
  worlds["simulator"] = RunSim(job, {4}, {}, kSublinear, {{slow, 0.5}});
  {
    Controller c(*plane(), job, {4}, "drift", kSublinear);
    c.Pass();
    c.Kubelet();
    c.Pass();
    ASSERT_EQ(c.Running(), 3);
    // The gang on one GPU reports half its profiled speed; the other its own.
    std::set<std::string> on_one = c.Report({});
    ASSERT_EQ(on_one.size(), 1u);
    const std::string label = *on_one.begin();
    EXPECT_EQ(Controller::TaskNamed(job, label), slow) << "the same task in both worlds";
    c.Report({{label, 0.5}});
    c.Pass();     // plans again on the measured speed: both stop for the swap
    c.Kubelet();  // their ranks go
    c.Pass();     // and run again, swapped
    c.Finish();
    worlds["controller"] = c.Journal();
  }
  Compare(worlds);
  const std::vector<std::string> done = Canonical(worlds["simulator"].actions);
  EXPECT_NE(std::find(done.begin(), done.end(), "stop replan"), done.end()) << Lines(done);
  // The drift re-plan is journalled as such, and in each world the slow task
  // ends on the two GPUs.
  for (const auto& [name, run] : worlds) {
    bool drift = false;
    std::string last_slow;
    for (const engine::JournalEntry& e : run.actions) {
      drift = drift || e.trigger == "throughput-drift";
      if (e.kind == "launch" && e.task == slow) last_slow = e.detail;
    }
    EXPECT_TRUE(drift) << name;
    EXPECT_EQ(last_slow, "ddp x2 b16") << name;
  }
}

TEST_F(ConformanceTest, ElasticBatchChangesWithTheQuotaAlikeInEveryWorld) {
  auto loaded = api::LoadJobText(JobYaml(2, /*elastic=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const api::LoadedJob job = *loaded;
  std::map<std::string, WorldRun> worlds;
  worlds["simulator"] =
      RunSim(job, {4}, {{100, planner::ClusterEvent::Kind::kQuota, 4}}, PerGpuBatchSpeed);
  {
    Controller c(*plane(), job, {4}, "elastic", PerGpuBatchSpeed);
    c.Pass();
    c.Kubelet();
    c.Pass();
    ASSERT_EQ(c.Running(), 2);
    c.SetQuota(4);
    c.Pass();     // stops both for the plan at two GPUs
    c.Kubelet();  // their ranks go
    c.Pass();     // and relaunches them there
    c.Finish();
    worlds["controller"] = c.Journal();
  }
  worlds["local"] = RunLocal(
      job, dir_ + "/local",
      [](const std::string& workdir) {
        ASSERT_TRUE(
            WaitUntil([&] { return LocalCount(ReadReport(workdir), "running", "running") == 2; },
                      std::chrono::seconds(120)));
        Control(workdir, "quota 4");
      },
      PerGpuBatchSpeed);
  Compare(worlds);
  // What they all did: one GPU at 16 each, then two GPUs at 32 each.
  const std::vector<std::string> done = Canonical(worlds["simulator"].actions);
  EXPECT_NE(std::find(done.begin(), done.end(), "launch ddp x2 b32"), done.end()) << Lines(done);
}

// A share shrink: a second job arrives while both tasks of the first run on
// two GPUs each; the cluster share gives it one of them (a second GPU adds
// little), so one task of the first job stops for the share and runs again on
// one GPU.
TEST_F(ConformanceTest, AShareShrinkStopsAndReplansAlikeInSimulatorAndController) {
  // No periodic re-plan: on the progress the simulator knows it would swap
  // the tasks (the one further on to one GPU), which the controller's
  // progress, scripted here, does not show.
  std::string yaml = JobYaml(4);
  yaml.replace(yaml.find("solverTimeLimitSeconds: 2"), 25,
               "solverTimeLimitSeconds: 2, replanIntervalSeconds: 86400");
  auto loaded = api::LoadJobText(yaml);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const api::LoadedJob job = *loaded;
  auto other = api::LoadJobText(OtherJobYaml());
  ASSERT_TRUE(other.ok()) << other.status();
  planner::OtherJob o;
  o.name = "other";  // after the first job, as in the controller
  o.arrival = 100;
  o.quota = other->job.spec.resources.gpu_quota;
  o.tasks = SimTasks(*other, kFlat, 4);
  std::map<std::string, WorldRun> worlds;
  worlds["simulator"] = RunSim(job, {4}, {}, kFlat, {}, {o});
  {
    Controller c(*plane(), job, {4}, "share", kFlat);
    c.Pass();
    c.Kubelet();
    c.Pass();
    ASSERT_EQ(c.Running(), 4);
    c.AddJob(*other);
    c.Pass();     // the other job's demand: the share gives it a GPU of the first's
    c.Pass();     // one task of the first job stops for it
    c.Kubelet();  // its ranks go
    c.Pass();     // it runs again on one GPU, the other job's task on the GPU it freed
    c.Kubelet();
    ASSERT_EQ(c.Running(), 3);
    c.FinishTasksOn(2);  // the task on two GPUs completes first, as in the simulator
    c.Pass();            // its GPUs: the task on one GPU is planned on two again
    c.Kubelet();
    c.Pass();
    c.Finish();
    worlds["controller"] = c.Journal();
  }
  Compare(worlds);
  const std::vector<std::string> done = Canonical(worlds["simulator"].actions);
  EXPECT_NE(std::find(done.begin(), done.end(), "stop share"), done.end()) << Lines(done);
  EXPECT_NE(std::find(done.begin(), done.end(), "launch ddp x1 b16"), done.end()) << Lines(done);
}

}  // namespace
}  // namespace orrery::controller
