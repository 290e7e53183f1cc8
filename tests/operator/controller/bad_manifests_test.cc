// Bad specs that never wedge (issue 21), on a real API server. Every manifest
// in bad_manifests/ has one defect and says in its header where it must be
// caught:
//   # expect: crd <path>               the API server refuses it at apply, naming the path
//   # expect: validate <path>          the CRD admits it; `orrery validate`'s check
//                                      (api::AnalyzeJson) names the path, and the
//                                      operator fails the job with InvalidSpec
//   # expect: status <Reason> [<path>] validate admits it; the operator says so in
//                                      status (a Degraded condition) and an event
// The operator runs as `orrery operator` wires it (informers, a work queue of two
// workers, the Reconciler) while a test "kubelet" runs the pods it creates. A
// healthy job in the same namespace is edited again and again; the time from
// each edit to its status.observedGeneration catching up is measured without
// the bad jobs and with them, and both figures are printed. No bad job's pods
// may be created again and again: each rejection ends its job's retries.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/load.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/api_error.h"
#include "operator/kube/controller.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"
#include "tests/operator/controller/plane_setup.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"
#include "tests/testing/wait.h"

namespace orrery::controller {
namespace {

using orrery::testing::WaitUntil;
using testutil::PlaneCaches;
const char* kNamespace = "ctl-bad-specs";
const char* kProfileNamespace = "orrery-system";
const char* kGpu = "nvidia.com/gpu";
constexpr int kSamples = 7;

// ---- the corpus -----------------------------------------------------------

struct Manifest {
  std::string file;    // base name
  std::string where;   // crd, validate, status
  std::string reason;  // status only: InvalidSpec, PodRejected, TaskNeverFits
  std::string path;    // the field path named (empty for some status cases)
  std::string name;    // metadata.name
  api::Json json;
};

std::vector<Manifest> LoadCorpus() {
  const std::filesystem::path dir =
      std::filesystem::path(ORRERY_SOURCE_DIR) / "tests/operator/controller/bad_manifests";
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Manifest> corpus;
  for (const std::filesystem::path& f : files) {
    Manifest m;
    m.file = f.filename().string();
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line) && line.rfind('#', 0) == 0) {
      if (line.rfind("# expect: ", 0) != 0) continue;
      std::istringstream words(line.substr(10));
      words >> m.where;
      if (m.where == "status") words >> m.reason;
      words >> m.path;
    }
    auto docs = api::ReadManifests(f.string());
    EXPECT_TRUE(docs.ok() && docs->size() == 1) << m.file << ": one YAML document";
    if (!docs.ok() || docs->empty()) continue;
    m.json = docs->front();
    m.name = m.json["metadata"].value("name", "");
    corpus.push_back(std::move(m));
  }
  return corpus;
}

// ---- what the operator does, counted --------------------------------------

// The operator's client, counting the pod creates the API server refused, by
// the job they were for (orrery.dev/job).
class CountingClient final : public kube::Client {
 public:
  explicit CountingClient(kube::Client* inner) : inner_(inner) {}
  StatusOr<kube::Object> Get(const kube::Resource& r, const std::string& ns,
                             const std::string& name) override {
    return inner_->Get(r, ns, name);
  }
  StatusOr<kube::Object> List(const kube::Resource& r, const std::string& ns,
                              const kube::ListOptions& options) override {
    return inner_->List(r, ns, options);
  }
  StatusOr<kube::Object> Create(const kube::Resource& r, const std::string& ns,
                                const kube::Object& obj) override {
    auto created = inner_->Create(r, ns, obj);
    if (r.resource == "pods" && !created.ok() && kube::IsInvalid(created.status())) {
      std::lock_guard<std::mutex> lock(mu_);
      ++refused_[obj["metadata"]["labels"].value(kJobLabel, "")];
    }
    return created;
  }
  StatusOr<kube::Object> Update(const kube::Resource& r, const std::string& ns,
                                const kube::Object& obj) override {
    return inner_->Update(r, ns, obj);
  }
  StatusOr<kube::Object> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                      const kube::Object& obj) override {
    return inner_->UpdateStatus(r, ns, obj);
  }
  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                const kube::DeleteOptions& options) override {
    return inner_->Delete(r, ns, name, options);
  }
  StatusOr<kube::Object> Patch(const kube::Resource& r, const std::string& ns,
                               const std::string& name, kube::PatchType type,
                               const kube::Object& patch,
                               const kube::PatchOptions& options) override {
    return inner_->Patch(r, ns, name, type, patch, options);
  }
  StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource& r, const std::string& ns,
                                                     const kube::ListOptions& options) override {
    return inner_->Watch(r, ns, options);
  }
  int Refused(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_[LabelValue(job)];
  }

 private:
  kube::Client* inner_;
  std::mutex mu_;
  std::map<std::string, int> refused_;
};

// Reconciles per job key, and the time they took.
class ReconcileLog {
 public:
  void Add(const std::string& key, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_[key];
    seconds_[key] += seconds;
  }
  int Count(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return count_[key];
  }
  double MeanSeconds(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return count_[key] > 0 ? seconds_[key] / count_[key] : 0;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> count_;
  std::map<std::string, double> seconds_;
};

// The healthy job: two tasks whose profiles are cached, so it plans and
// launches at once, and steps enough to outlast the test.
const char* kHealthyJob = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: healthy
spec:
  tasks:
  - name: mlp
    model:
      mlp: {layers: 2, hidden: 32, inputs: 16, outputs: 4}
    data:
      synthetic: {seed: 3}
    training: {steps: 1000000, batchSize: 16, learningRate: 1e-3}
  - name: gpt
    model:
      gpt: {layers: 2, hidden: 64, heads: 4, seqLen: 32, vocab: 256}
    data:
      synthetic: {seed: 1}
    training: {steps: 1000000, batchSize: 8, learningRate: 1e-3}
  resources:
    gpuQuota: 4
    gpusPerTask: {min: 1, max: 2}
    templates: [ddp]
  profiling:
    gpuCounts: [1, 2]
)";

std::string Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof(buf), "median %.0f ms (min %.0f, max %.0f, %zu samples)",
                1e3 * v[v.size() / 2], 1e3 * v.front(), 1e3 * v.back(), v.size());
  return buf;
}

class BadManifestsTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    std::string out;
    ASSERT_TRUE(testutil::InstallJobCrd(*plane(), &out)) << out;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    for (const char* ns : {kNamespace, kProfileNamespace}) {
      ASSERT_TRUE(kube::testutil::CreateNamespace(*client_, ns).ok());
    }
    ASSERT_TRUE(testutil::InstallUntrustedImagePolicy(*plane(), kNamespace, &out)) << out;
    for (const char* node : {"gpu-a", "gpu-b"}) {
      ASSERT_TRUE(testutil::CreateReadyGpuNode(*client_, node, 4, kGpu).ok());
    }
    auto healthy = api::LoadJobText(kHealthyJob);
    ASSERT_TRUE(healthy.ok()) << healthy.status();
    healthy_ = *healthy;
    ProfileTable table = testutil::DdpProfiles(healthy_, {1, 2}, [](int g) { return 100.0 * g; });
    ASSERT_TRUE(testutil::StoreProfiles(*client_, table, kProfileNamespace).ok());
  }

  StatusOr<kube::Object> Apply(const api::Json& manifest) {
    api::Json body = manifest;
    body["metadata"]["namespace"] = kNamespace;
    return client_->Create(ModelSelectionJobs(), kNamespace, kube::Object::parse(body.dump()));
  }

  // The kubelet's part: every pending pod of the namespace runs.
  void RunPods() {
    auto list = client_->List(kube::Pods(), kNamespace, {});
    if (!list.ok()) return;
    for (const kube::Object& p : (*list)["items"]) {
      if (p["status"].value("phase", "") == "Running") continue;
      if (p["metadata"].contains("deletionTimestamp")) continue;
      kube::PatchOptions po;
      po.subresource = "status";
      (void)client_->Patch(kube::Pods(), kNamespace, p["metadata"]["name"], kube::PatchType::kMerge,
                           {{"status", {{"phase", "Running"}}}}, po);
    }
  }

  std::vector<kube::Object> Events(const std::string& job) {
    std::vector<kube::Object> out;
    auto events = client_->List(kube::Events(), kNamespace, {});
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return out;
    for (const kube::Object& e : (*events)["items"]) {
      if (e["regarding"].value("name", "") == job) out.push_back(e);
    }
    return out;
  }

  // The job's Degraded condition as the server holds it (empty when none).
  kube::Object Degraded(const std::string& job) {
    auto got = client_->Get(ModelSelectionJobs(), kNamespace, job);
    if (!got.ok() || !(*got).contains("status")) return kube::Object::object();
    for (const kube::Object& c : (*got)["status"].value("conditions", kube::Object::array())) {
      if (c.value("type", "") == "Degraded" && c.value("status", "") == "True") return c;
    }
    return kube::Object::object();
  }

  // Edits the healthy job (a new generation) and returns the seconds until the
  // operator's status says it has seen it, read from the job cache (a watch,
  // so waiting costs the server nothing).
  double EditAndWait(const kube::Informer& jobs, int i) {
    const auto start = std::chrono::steady_clock::now();
    auto patched = client_->Patch(
        ModelSelectionJobs(), kNamespace, "healthy", kube::PatchType::kMerge,
        {{"spec", {{"scheduling", {{"minSwitchGain", 0.05 + 0.001 * (i + 1)}}}}}}, {});
    EXPECT_TRUE(patched.ok()) << patched.status();
    if (!patched.ok()) return 1e9;
    const int64_t generation = (*patched)["metadata"].value("generation", int64_t{0});
    const std::string key = kube::KeyFor(kNamespace, "healthy");
    bool seen = WaitUntil(
        [&] {
          kube::ObjectPtr o = jobs.store().Get(key);
          return o && (*o).contains("status") &&
                 (*o)["status"].value("observedGeneration", int64_t{0}) >= generation;
        },
        std::chrono::seconds(60), std::chrono::milliseconds(5));
    EXPECT_TRUE(seen) << "the healthy job's edit " << i << " was never observed";
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::unique_ptr<kube::RestClient> client_;
  api::LoadedJob healthy_;
};

TEST_F(BadManifestsTest, EachIsRefusedOrReportedAndAHealthyJobStaysResponsive) {
  const std::vector<Manifest> corpus = LoadCorpus();
  ASSERT_GE(corpus.size(), 40u) << "the issue asks for at least 40 bad manifests";
  std::map<std::string, int> by_where;
  for (const Manifest& m : corpus) {
    ++by_where[m.where];
    ASSERT_TRUE(m.where == "crd" || m.where == "validate" || m.where == "status")
        << m.file << ": '# expect:' must say crd, validate or status";
    ASSERT_FALSE(m.name.empty()) << m.file;
  }

  // 1. What `orrery validate` says (the library function it calls), and what
  // the API server says at apply. Admitted ones are kept for the operator.
  std::vector<const Manifest*> admitted;
  for (const Manifest& m : corpus) {
    SCOPED_TRACE(m.file);
    const api::Analysis analysis = api::AnalyzeJson(m.json);
    std::string errors;
    bool names_path = false;
    for (const api::FieldError& e : analysis.errors) {
      errors += "\n  " + api::FormatFieldError(e);
      names_path |= e.path == m.path;
    }
    if (m.where == "crd") {
      // The operator's own check refuses it too, should an older CRD let it in.
      EXPECT_FALSE(analysis.ok()) << "orrery validate passed what the CRD must refuse";
    } else if (m.where == "validate") {
      EXPECT_TRUE(names_path) << "orrery validate does not name " << m.path << ":" << errors;
    } else {
      EXPECT_TRUE(analysis.ok()) << "orrery validate refused a status case:" << errors;
    }
    auto created = Apply(m.json);
    if (m.where == "crd") {
      ASSERT_FALSE(created.ok()) << "the CRD admitted it";
      EXPECT_TRUE(kube::IsInvalid(created.status())) << created.status();
      bool cause = false;
      for (const kube::StatusCause& c : kube::InvalidCauses(created.status())) {
        cause |= c.field == m.path;
      }
      EXPECT_TRUE(cause) << "the CRD's refusal does not name " << m.path << ": "
                         << created.status();
    } else {
      ASSERT_TRUE(created.ok()) << "the CRD refused it: " << created.status();
      admitted.push_back(&m);
      // Out again until the healthy job's baseline is measured.
      ASSERT_TRUE(client_->Delete(ModelSelectionJobs(), kNamespace, m.name, {}).ok());
    }
  }

  // 2. The operator, wired as `orrery operator` wires it.
  CountingClient counting(client_.get());
  auto recorder = testutil::Recorder(client_.get(), "bad-specs-test");
  FakeClock clock;
  ReconcilerOptions options = testutil::PlaneOptions(recorder.get());
  ReconcileLog log;
  std::unique_ptr<Reconciler> reconciler;
  kube::Controller controller(
      "modelselectionjob",
      [&](const std::string& key) -> StatusOr<kube::Result> {
        const auto start = std::chrono::steady_clock::now();
        auto r = reconciler->Reconcile(key);
        log.Add(key,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        return r;
      },
      2);
  // After the controller, so its informers stop (and call no handler) before
  // the controller goes.
  PlaneCaches cache(client_.get(), kNamespace, kProfileNamespace);
  // The healthy job first, alone.
  auto healthy = testutil::CreateJob(*client_, healthy_.job, kNamespace);
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  ASSERT_TRUE(cache.Start(kube::KeyFor(kNamespace, "healthy"), 2));
  reconciler = std::make_unique<Reconciler>(&counting, cache.caches(), options, &clock);
  cache.jobs.AddEventHandler(controller.EnqueueHandlers());
  cache.pods.AddEventHandler(controller.EnqueueOwnerHandlers(api::kKind));
  std::atomic<bool> stop{false};
  std::thread kubelet([&] {
    while (!stop.load()) {
      RunPods();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  struct Joiner {
    std::atomic<bool>* stop;
    std::thread* t;
    kube::Controller* c;
    ~Joiner() {
      stop->store(true);
      c->Stop();
      if (t->joinable()) t->join();
    }
  } joiner{&stop, &kubelet, &controller};
  controller.Start();
  ASSERT_TRUE(WaitUntil([&] {
    return !testutil::JobPods(*client_, kNamespace, "healthy").empty();
  })) << "the healthy job never launched";
  // 3. The healthy job's latency alone, once its gangs run and two edits
  // have warmed it up (the first passes after a launch do more).
  ASSERT_TRUE(WaitUntil([&] {
    kube::ObjectPtr o = cache.jobs.store().Get(kube::KeyFor(kNamespace, "healthy"));
    return o && (*o).contains("status") && (*o)["status"].value("phase", "") == "Running";
  })) << "the healthy job never ran";
  for (int i = 0; i < 2; ++i) EditAndWait(cache.jobs, 100 + i);
  std::vector<double> alone;
  alone.reserve(kSamples);
  for (int i = 0; i < kSamples; ++i) alone.push_back(EditAndWait(cache.jobs, i));

  // 4. The bad jobs applied again, and the same edits while they are handled:
  // before each edit of the healthy job, every bad job is edited too (a new
  // generation, as bad as before, as a user trying again would make), and the
  // CRD's refusals are tried again.
  for (const Manifest* m : admitted) {
    auto created = Apply(m->json);
    ASSERT_TRUE(created.ok()) << m->file << ": " << created.status();
  }
  std::vector<double> with_bad;
  with_bad.reserve(kSamples);
  for (int i = kSamples; i < 2 * kSamples; ++i) {
    for (const Manifest* m : admitted) {
      auto patched = client_->Patch(
          ModelSelectionJobs(), kNamespace, m->name, kube::PatchType::kMerge,
          {{"spec", {{"scheduling", {{"minSwitchGain", 0.05 + 0.001 * (i + 1)}}}}}}, {});
      ASSERT_TRUE(patched.ok()) << m->file << ": " << patched.status();
    }
    for (const Manifest& m : corpus) {
      if (m.where == "crd") {
        EXPECT_FALSE(Apply(m.json).ok()) << m.file;
      }
    }
    with_bad.push_back(EditAndWait(cache.jobs, i));
  }

  // 5. Each admitted bad job is reported: its condition, and an event.
  for (const Manifest* m : admitted) {
    SCOPED_TRACE(m->file);
    const std::string reason = m->where == "validate" ? "InvalidSpec" : m->reason;
    kube::Object degraded;
    ASSERT_TRUE(WaitUntil([&] {
      degraded = Degraded(m->name);
      return degraded.value("reason", "") == reason;
    })) << "no Degraded condition "
        << reason << "; has " << degraded.dump();
    const std::string message = degraded.value("message", "");
    if (!m->path.empty()) {
      EXPECT_NE(message.find(m->path), std::string::npos) << message;
    }
    auto job = client_->Get(ModelSelectionJobs(), kNamespace, m->name);
    ASSERT_TRUE(job.ok());
    // An unfixable spec fails the job; a task that cannot fit waits, saying so
    // in its own message too.
    const kube::Object& status = (*job)["status"];
    if (reason == "TaskNeverFits") {
      EXPECT_NE(status["tasks"][0].value("message", "").find("needs at least"), std::string::npos)
          << status.dump();
    } else {
      EXPECT_EQ(status.value("phase", ""), "Failed") << status.dump();
    }
    bool evented = false;
    ASSERT_TRUE(WaitUntil([&] {
      for (const kube::Object& e : Events(m->name)) {
        evented |= e.value("reason", "") == reason && e.value("type", "") == "Warning" &&
                   (m->path.empty() || e.value("note", "").find(m->path) != std::string::npos);
      }
      return evented;
    })) << "no Warning event "
        << reason << " naming " << m->path;
  }

  // 6. None of them loops: a few reconciles each, at most one refused create
  // (the rejection ends the job's retries), and no pod of theirs left.
  std::map<std::string, int> before, refused_before;
  for (const Manifest* m : admitted) {
    ASSERT_TRUE(cache.CatchUp(*client_, kNamespace, m->name));
    before[m->name] = log.Count(kube::KeyFor(kNamespace, m->name));
    refused_before[m->name] = counting.Refused(m->name);
  }
  for (int i = 2 * kSamples; i < 2 * kSamples + 2; ++i) EditAndWait(cache.jobs, i);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const Manifest* m : admitted) {
    SCOPED_TRACE(m->file);
    // Its generations: applied, then edited kSamples times. Each is checked
    // once, and once more for the status write it caused.
    const int generations = 1 + kSamples;
    const int reconciles = log.Count(kube::KeyFor(kNamespace, m->name));
    EXPECT_LE(reconciles, 3 * generations) << "reconciled again and again";
    EXPECT_LE(reconciles - before[m->name], 1) << "reconciled while nothing about it changed";
    EXPECT_EQ(counting.Refused(m->name), refused_before[m->name])
        << "pods the server refused were created again while the spec stood";
    if (m->reason == "PodRejected") {
      EXPECT_GE(counting.Refused(m->name), 1);
      EXPECT_LE(counting.Refused(m->name), generations) << "more than one refused create a spec";
    } else {
      EXPECT_EQ(counting.Refused(m->name), 0);
    }
    EXPECT_TRUE(testutil::JobPods(*client_, kNamespace, m->name).empty());
  }

  const std::string healthy_key = kube::KeyFor(kNamespace, "healthy");
  std::cout << "corpus: " << corpus.size() << " manifests: " << by_where["crd"]
            << " refused by the CRD, " << by_where["validate"]
            << " by orrery validate and the operator, " << by_where["status"]
            << " reported in status\n"
            << "healthy job, spec edit -> status.observedGeneration:\n"
            << "  without bad jobs: " << Median(alone) << "\n"
            << "  with " << admitted.size() << " bad jobs admitted and each edited before "
            << "every sample (and the " << by_where["crd"]
            << " the CRD refuses applied again): " << Median(with_bad) << "\n"
            << "  its reconciles: " << log.Count(healthy_key) << ", mean "
            << static_cast<int>(1e3 * log.MeanSeconds(healthy_key)) << " ms\n";
  for (double s : alone) EXPECT_LT(s, 30.0);
  for (double s : with_bad) EXPECT_LT(s, 30.0);
}

}  // namespace
}  // namespace orrery::controller
