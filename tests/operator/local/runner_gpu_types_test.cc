// `orrery run --devices cpu:2=big+cpu:2=small`: the local world has one node per
// GPU type, a gang never spans the types, a task that lists gpuTypes runs only
// on devices of its type, and report.json names each bar's type. The worker is a
// shell script speaking the worker's line protocol (a profile document; start,
// progress and done lines for its --steps), so the test needs no LibTorch.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "operator/api/load.h"
#include "operator/local/runner.h"

namespace orrery::local {
namespace {

namespace fs = std::filesystem;

// Throughput grows with the ranks (so the planner wants two-device gangs);
// training takes 40 ms per step so that gangs overlap.
const char* kWorker = R"(#!/bin/sh
mode=$1
shift
batch=0
steps=0
for a in "$@"; do
  case $a in
    --batch=*) batch=${a#--batch=} ;;
    --steps=*) steps=${a#--steps=} ;;
  esac
done
if [ "$mode" = profile ]; then
  echo "{\"event\":\"profile\",\"world_size\":$WORLD_SIZE,\"global_batch\":$batch,\"samples_per_s\":$((100 * WORLD_SIZE)),\"step_time_s\":{\"median\":0.04,\"p90\":0.04}}"
  exit 0
fi
echo "{\"event\":\"start\",\"steps\":$steps,\"global_batch\":$batch,\"resumed_from_step\":null}"
sleep 0.3
echo "{\"event\":\"progress\",\"step\":$steps,\"steps\":$steps,\"samples\":$((steps * batch)),\"loss\":1.5,\"samples_per_s\":100}"
echo "{\"event\":\"done\",\"status\":\"completed\",\"step\":$steps,\"loss\":1.5}"
)";

// Four tasks; "pinned" may run on small devices only.
const char* kJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: typed}
spec:
  tasks:
  - name: free
    model: {mlp: {layers: 2, hidden: 8, inputs: 4, outputs: 2}}
    data: {synthetic: {seed: 1}}
    training: {steps: 8, batchSize: 8, optimizer: sgd, learningRate: 0.1}
    searchSpace: {grid: {learningRate: [0.1, 0.01, 0.001]}}
  - name: pinned
    model: {mlp: {layers: 2, hidden: 16, inputs: 4, outputs: 2}}
    data: {synthetic: {seed: 2}}
    training: {steps: 8, batchSize: 8, optimizer: sgd, learningRate: 0.1}
    gpuTypes: [TYPES]
  resources:
    templates: [ddp]
    gpusPerTask: {min: 1, max: 2}
    gpuQuota: 4
  profiling: {trialSteps: 3, gpuCounts: [1, 2]}
)";

class RunnerGpuTypesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/orrery-runner-types-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    worker_ = dir_ + "/fake-worker";
    std::ofstream(worker_) << kWorker;
    ASSERT_EQ(chmod(worker_.c_str(), 0755), 0);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // The job with gpuTypes `types`.
  static api::LoadedJob Job(const std::string& types) {
    std::string yaml = kJob;
    yaml.replace(yaml.find("TYPES"), 5, types);
    auto job = api::LoadJobText(yaml);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : api::LoadedJob{};
  }
  // Run options on `devices` with the fake worker, the work folder and the
  // profile cache in the test's folder.
  RunOptions Options(const std::string& devices) const {
    RunOptions o;
    auto parsed = ParseDevices(devices);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (parsed.ok()) o.devices = *parsed;
    o.workdir = dir_ + "/run";
    o.worker = worker_;
    o.profile_cache = dir_ + "/profiles.json";
    o.job_dir = dir_;
    o.tick_s = 0.02;
    return o;
  }
  // Runs the job with gpuTypes `types` on `devices`; returns the exit code.
  int Run(const std::string& types, const std::string& devices, std::string* err_text) {
    std::ostringstream out, err;
    int code = RunJob(Job(types), Options(devices), out, err);
    *err_text = out.str() + err.str();
    return code;
  }
  nlohmann::json Report() const {
    std::stringstream r;
    r << std::ifstream(dir_ + "/run/report.json").rdbuf();
    return nlohmann::json::parse(r.str(), nullptr, false);
  }
  // report.json of the last run: every bar on devices of one type, named in
  // the bar; "pinned" on `want` only; lanes labelled with their type.
  void ExpectTypedReport(const std::string& want) {
    nlohmann::json report = Report();
    ASSERT_FALSE(report.is_discarded());
    const std::vector<std::string> types = report["device_types"];
    ASSERT_EQ(types, (std::vector<std::string>{"big", "big", "small", "small"}));
    size_t pinned = 0, on_big = 0;
    for (const auto& bar : report["actual"]) {
      std::set<std::string> bar_types;
      for (int d : bar["devices"]) bar_types.insert(types[static_cast<size_t>(d)]);
      ASSERT_EQ(bar_types.size(), 1u) << "a gang spans types: " << bar.dump();
      EXPECT_EQ(bar.value("gpu_type", ""), *bar_types.begin()) << bar.dump();
      if (bar["task"] == "pinned") {
        ++pinned;
        EXPECT_EQ(bar.value("gpu_type", ""), want) << bar.dump();
      }
      on_big += bar.value("gpu_type", "") == "big" ? 1 : 0;
    }
    EXPECT_GE(pinned, 1u);
    EXPECT_GT(on_big, 0u) << "the big devices run gangs too";
    for (const auto& t : report["tasks"]) EXPECT_EQ(t["state"], "completed") << t.dump();
    std::stringstream html;
    html << std::ifstream(dir_ + "/run/report.html").rdbuf();
    EXPECT_NE(html.str().find(">small 2</text>"), std::string::npos) << "lanes name their type";
  }
  std::string dir_;
  std::string worker_;
};

// Run once with "pinned" on each type: the planner, free to put it on either
// node, must keep it to the one it lists each time.
TEST_F(RunnerGpuTypesTest, GangsKeepToOneTypeAndARestrictedTaskToItsOwn) {
  for (const std::string want : {"small", "big"}) {
    SCOPED_TRACE(want);
    std::error_code ec;
    fs::remove_all(dir_ + "/run", ec);
    std::string log;
    ASSERT_EQ(Run(want, "cpu:2=big+cpu:2=small", &log), 0) << log;
    ExpectTypedReport(want);
    // Every profiling trial on one type (devices 0-1 are big, 2-3 small);
    // the second run reuses the first's profiles.
    const nlohmann::json report = Report();
    for (const auto& e : report["events"]) {
      const std::string text = e.value("text", "");
      if (text.rfind("profiling ", 0) != 0) continue;
      const bool small = text.find(" on cpu:2") != std::string::npos ||
                         text.find(" on cpu:3") != std::string::npos;
      const bool big = text.find(" on cpu:0") != std::string::npos ||
                       text.find(" on cpu:1") != std::string::npos;
      EXPECT_NE(small, big) << "a trial on one type: " << text;
      if (text.find("×2") != std::string::npos) {
        EXPECT_TRUE(text.find("cpu:0,1") != std::string::npos ||
                    text.find("cpu:2,3") != std::string::npos)
            << text;
      }
    }
  }
}

// Trials of a task pinned to the small devices run there, even when the big
// ones come first.
TEST_F(RunnerGpuTypesTest, APinnedTasksTrialsRunOnItsType) {
  std::string log;
  ASSERT_EQ(Run("small", "cpu:2=big+cpu:2=small", &log), 0) << log;
  int pinned = 0;
  const nlohmann::json report = Report();
  for (const auto& e : report["events"]) {
    const std::string text = e.value("text", "");
    if (text.rfind("profiling ", 0) != 0) continue;
    // The pinned task's model (hidden 16) has its own signature; its trials
    // are the ones on the small devices.
    if (text.find(" on cpu:2") != std::string::npos) ++pinned;
    EXPECT_EQ(text.find("cpu:1,2"), std::string::npos) << "a trial spans types: " << text;
  }
  EXPECT_EQ(pinned, 2) << "x1 and x2 on small:\n" << report["events"].dump(1);
}

// A run interrupted while profiling (Ctrl-C) keeps every profile it measured
// before: each is saved as its trial ends, and the next run profiles only the
// rest.
TEST_F(RunnerGpuTypesTest, AnInterruptedRunKeepsTheProfilesItMeasured) {
  // Trials on two devices hang until interrupted.
  std::string script = kWorker;
  script.insert(script.find("if [ \"$mode\" = profile ]"),
                "if [ \"$mode\" = profile ] && [ \"$WORLD_SIZE\" = 2 ]; then sleep 60; fi\n");
  std::ofstream(worker_) << script;
  const api::LoadedJob job = Job("small");
  RunOptions o = Options("cpu:2");
  std::atomic<bool> stop{false};
  o.stop = &stop;
  std::ostringstream out, err;
  int code = -1;
  std::thread run([&] { code = RunJob(job, o, out, err); });
  // The first trial (one device) is measured and saved; the second hangs.
  auto cached = [&] {
    std::stringstream text;
    text << std::ifstream(o.profile_cache).rdbuf();
    return text.str();
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline &&
         cached().find("\"gpus\": 1") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  run.join();
  EXPECT_EQ(code, 130) << out.str() << err.str();
  EXPECT_NE(cached().find("\"gpus\": 1"), std::string::npos) << cached();
  EXPECT_EQ(cached().find("\"gpus\": 2"), std::string::npos) << cached();
}

TEST_F(RunnerGpuTypesTest, ATypeNoDeviceGroupHasIsAnErrorNamingTheField) {
  std::string log;
  EXPECT_EQ(Run("huge", "cpu:2=big+cpu:2=small", &log), 1);
  EXPECT_NE(log.find("spec.tasks[1].gpuTypes: none of huge"), std::string::npos) << log;
  EXPECT_NE(log.find("--devices cpu:2=huge"), std::string::npos) << log;
}

// Untyped devices ignore a task's gpuTypes: a cluster's job file runs here as is.
TEST_F(RunnerGpuTypesTest, UntypedDevicesIgnoreATasksGpuTypes) {
  std::string log;
  ASSERT_EQ(Run("small", "cpu:2", &log), 0) << log;
  nlohmann::json report = Report();
  EXPECT_FALSE(report.contains("device_types"));
  for (const auto& t : report["tasks"]) EXPECT_EQ(t["state"], "completed") << t.dump();
}

}  // namespace
}  // namespace orrery::local
