// `orrery run` end to end on this machine: the real orrery binary starting real
// orrery-worker processes on the repository's text corpus.
//   - a run completes every task, with falling losses, a report and a profile
//     cache that the next run reuses (profiling nothing);
//   - a run interrupted mid-training and run again ends with the same final
//     parameters as an uninterrupted run;
//   - a device lost mid-run: the task on it restarts from its checkpoint on what
//     remains, every task completes, and the report records the loss.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "operator/local/report.h"
#include "tests/operator/local/shell.h"
#include "tests/testing/png.h"
#include "worker/checkpoint/io.h"
#include "worker/checkpoint/reader.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kBin = std::string(ORRERY_BINARY_DIR) + "/bin";
const std::string kCorpus = std::string(ORRERY_SOURCE_DIR) + "/data/corpus/quickstart.txt";

using orrery::local::testing::Result;
using orrery::local::testing::Shell;

std::string Job(const std::string& name, int steps, int min_gpus, int max_gpus) {
  std::ostringstream os;
  os << "apiVersion: orrery.dev/v1alpha1\nkind: ModelSelectionJob\nmetadata: {name: " << name
     << "}\nspec:\n  tasks:\n  - name: gpt\n    model:\n      gpt: {layers: 2, hidden: 32, heads: "
        "2, "
        "seqLen: 32, vocab: 256}\n    data:\n      text: {path: "
     << kCorpus << "}\n    training: {steps: " << steps
     << ", batchSize: 8, optimizer: adamw, learningRate: 1e-3}\n"
        "    searchSpace:\n      grid: {learningRate: [1e-3, 3e-3]}\n"
        "  resources:\n    templates: [ddp]\n    gpusPerTask: {min: "
     << min_gpus << ", max: " << max_gpus
     << "}\n    gpuQuota: 2\n  scheduling: {solverTimeLimitSeconds: 2}\n"
        "  profiling: {trialSteps: 3}\n  checkpoints: {intervalSteps: 20, keep: 2}\n";
  return os.str();
}

class RunE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/run_e2e_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  Result Run(const std::string& job, const std::string& workdir, const std::string& extra = "") {
    return Shell(kBin + "/orrery run " + job + " --devices cpu:2 --workdir " + workdir +
                 " --profile-cache " + dir_ + "/profiles.json --progress plain " + extra);
  }
  static Json Report(const std::string& workdir) {
    std::ifstream in(workdir + "/report.json");
    return Json::parse(in, nullptr, false);
  }
  std::string dir_;
};

// The float32 parameters ("model/...") of a task's newest checkpoint.
std::map<std::string, std::vector<float>> FinalParameters(const std::string& checkpoints) {
  std::map<std::string, std::vector<float>> out;
  std::string newest;
  for (const auto& e : fs::directory_iterator(checkpoints)) {
    std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0 && fs::exists(e.path() / "metadata.json") && n > newest)
      newest = n;
  }
  if (newest.empty()) return out;
  auto reader = orrery::checkpoint::CheckpointReader::Open(checkpoints + "/" + newest);
  if (!reader.ok()) return out;
  for (const auto& [name, meta] : reader->metadata().tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    std::vector<float>& values = out[name];
    for (const auto& chunk : meta.chunks) {
      std::vector<float> part(chunk.bytes / sizeof(float));
      auto f = orrery::checkpoint::File::OpenRead(reader->FilePath(chunk.file));
      if (!f.ok() || !f->ReadAt(chunk.offset, part.data(), chunk.bytes).ok()) return {};
      values.insert(values.end(), part.begin(), part.end());
    }
  }
  return out;
}

// The real report in headless Chromium: the page renders and every task's colour
// covers a bar's worth of pixels (the Gantt chart drew a bar per task).
void ExpectReportRendersABarPerTask(const std::string& workdir, size_t tasks) {
  if (!fs::exists("/usr/bin/chromium")) {
    ADD_FAILURE() << "chromium is missing: scripts/setup installs it";
    return;
  }
  std::string png = workdir + "/report.png";
  Result r = Shell(
      "timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu "
      "--hide-scrollbars --user-data-dir=" +
      workdir +
      "/chromium-profile "
      "--screenshot=" +
      png + " --window-size=1280,2400 file://" + workdir + "/report.html");
  ASSERT_EQ(r.code, 0) << r.out;
  auto image = orrery::testing::ReadPng(png);
  ASSERT_TRUE(image.ok()) << image.status();
  size_t non_white = 0;
  for (const auto& p : image->pixels) non_white += !(p.r > 245 && p.g > 245 && p.b > 245);
  // Not blank: a blank render has almost no non-white pixels; the report fills
  // about 5% of this tall window (less when its curves are short), so 2% is the
  // bar. The per-task colours below are the specific checks.
  EXPECT_GT(non_white, image->pixels.size() / 50);
  for (size_t t = 0; t < tasks; ++t) {
    auto colour = orrery::testing::ParseHexColour(orrery::local::TaskColour(t));
    ASSERT_TRUE(colour.ok());
    size_t hits = 0;
    for (const auto& p : image->pixels) {
      hits += std::abs(p.r - colour->r) <= 8 && std::abs(p.g - colour->g) <= 8 &&
              std::abs(p.b - colour->b) <= 8;
    }
    EXPECT_GT(hits, 1000u) << "task " << t << " colour " << orrery::local::TaskColour(t);
  }
}

TEST_F(RunE2E, CompletesWithFallingLossReportAndCachedProfiles) {
  std::string job = Write("job.yaml", Job("e2e-complete", 60, 1, 2));
  Result r = Run(job, dir_ + "/work");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("all tasks completed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profiling"), std::string::npos) << r.out;
  Json report = Report(dir_ + "/work");
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["outcome"], "completed");
  ASSERT_EQ(report["tasks"].size(), 2u);
  for (const auto& t : report["tasks"]) {
    EXPECT_EQ(t["state"], "completed") << t.dump();
    EXPECT_EQ(t["steps_done"], 60) << t.dump();
    const auto& losses = t["losses"];
    ASSERT_GE(losses.size(), 3u) << t.dump();
    EXPECT_LT(losses.back()["loss"].get<double>(), losses.front()["loss"].get<double>())
        << t.dump();
  }
  // One actual bar per task, each completed; a plan was adopted.
  int completed = 0;
  for (const auto& b : report["actual"]) completed += b["ended_by"] == "completed";
  EXPECT_EQ(completed, 2) << report["actual"].dump();
  EXPECT_GE(report["plans"].size(), 1u);
  EXPECT_GE(report["profiles"].size(), 1u);
  EXPECT_TRUE(fs::exists(dir_ + "/work/report.html"));
  EXPECT_TRUE(fs::exists(dir_ + "/profiles.json"));
  ExpectReportRendersABarPerTask(dir_ + "/work", report["tasks"].size());

  // A second job with the same model profiles nothing: every profile is reused.
  std::string again = Write("again.yaml", Job("e2e-again", 30, 1, 2));
  r = Run(again, dir_ + "/work-again");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("profiling "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reused"), std::string::npos) << r.out;
  for (const auto& p : Report(dir_ + "/work-again")["profiles"])
    EXPECT_TRUE(p["from_cache"].get<bool>());
}

TEST_F(RunE2E, InterruptAndResumeEqualsAnUninterruptedRun) {
  // One device per task, so both runs use the same layout and the comparison is
  // about resuming alone.
  // Long enough that the SIGINT, sent at the first progress line (printed once
  // a second), lands mid-training on a fast idle machine too.
  std::string job = Write("job.yaml", Job("e2e-resume", 600, 1, 1));
  Result straight = Run(job, dir_ + "/straight");
  ASSERT_EQ(straight.code, 0) << straight.out;

  // Ctrl-C as a terminal sends it: SIGINT to orrery once training is under way.
  std::string log = dir_ + "/first.log";
  Result first =
      Shell(kBin + "/orrery run " + job + " --devices cpu:2 --workdir " + dir_ +
            "/resumed --profile-cache " + dir_ + "/profiles.json --progress plain >" + log +
            " 2>&1 & pid=$!; "
            "for i in $(seq 1200); do grep -qE ' [1-9][0-9]*/600 ' " +
            log + " && break; sleep 0.1; done; kill -INT $pid; wait $pid; code=$?; cat " + log +
            "; exit $code");
  ASSERT_EQ(first.code, 130) << first.out;
  EXPECT_NE(first.out.find("stopping: every running task checkpoints"), std::string::npos)
      << first.out;
  EXPECT_NE(first.out.find("run the same command again to resume"), std::string::npos) << first.out;
  Json mid = Report(dir_ + "/resumed");
  EXPECT_EQ(mid["outcome"], "interrupted");
  bool unfinished = false;
  for (const auto& t : mid["tasks"]) unfinished = unfinished || t["steps_done"].get<int>() < 600;
  EXPECT_TRUE(unfinished) << mid["tasks"].dump();

  Result second = Run(job, dir_ + "/resumed");
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_NE(second.out.find("resuming"), std::string::npos) << second.out;
  Json end = Report(dir_ + "/resumed");
  EXPECT_EQ(end["outcome"], "completed");
  int interrupted_bars = 0;
  for (const auto& b : end["actual"]) interrupted_bars += b["ended_by"] == "interrupted";
  EXPECT_GE(interrupted_bars, 1) << end["actual"].dump();

  for (const char* task : {"gpt-lr-1e-3", "gpt-lr-3e-3"}) {
    auto a = FinalParameters(dir_ + "/straight/checkpoints/" + task);
    auto b = FinalParameters(dir_ + "/resumed/checkpoints/" + task);
    ASSERT_FALSE(a.empty()) << task;
    ASSERT_EQ(a.size(), b.size()) << task;
    for (const auto& [name, values] : a) {
      const auto& other = b[name];
      ASSERT_EQ(values.size(), other.size()) << name;
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_NEAR(values[i], other[i], 1e-5 * (1 + std::abs(values[i])))
            << task << " " << name << "[" << i << "]";
      }
    }
  }
}

TEST_F(RunE2E, DeviceLostMidRunRestartsTheTaskOnWhatRemains) {
  // Two tasks, one device each; device 1 fails 1.5 s after the first start.
  std::string job = Write("job.yaml", Job("e2e-fail", 1000, 1, 1));
  Result r = Run(job, dir_ + "/work", "--fail-device-at 1.5:1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("device cpu:1 lost"), std::string::npos) << r.out;
  Json report = Report(dir_ + "/work");
  EXPECT_EQ(report["outcome"], "completed");
  for (const auto& t : report["tasks"]) EXPECT_EQ(t["state"], "completed") << t.dump();
  std::string lost_task;
  for (const auto& b : report["actual"]) {
    if (b["ended_by"] == "device-lost") {
      lost_task = b["task"];
      EXPECT_EQ(b["devices"], Json::array({1})) << b.dump();
    }
  }
  ASSERT_FALSE(lost_task.empty()) << report["actual"].dump();
  // It finished on device 0, after a restart.
  bool finished_on_0 = false;
  for (const auto& b : report["actual"]) {
    finished_on_0 = finished_on_0 || (b["task"] == lost_task && b["ended_by"] == "completed" &&
                                      b["devices"] == Json::array({0}));
  }
  EXPECT_TRUE(finished_on_0) << report["actual"].dump();
  for (const auto& t : report["tasks"]) {
    if (t["name"] == lost_task) {
      EXPECT_GE(t["restarts"].get<int>(), 1);
    }
  }
  EXPECT_GE(report["plans"].size(), 2u);  // re-planned for the smaller machine
}

TEST_F(RunE2E, ControlFileLosesAndRestoresADeviceOnALiveRun) {
  std::string job = Write("job.yaml", Job("e2e-control", 1000, 1, 1));
  std::string work = dir_ + "/work";
  std::string log = dir_ + "/run.log";
  // Lose device 1 once training is under way, give it back once the loss shows.
  Result r = Shell(kBin + "/orrery run " + job + " --devices cpu:2 --workdir " + work +
                   " --profile-cache " + dir_ + "/profiles.json --progress plain >" + log +
                   " 2>&1 & pid=$!; "
                   "for i in $(seq 1200); do grep -qE ' [1-9][0-9]*/1000 ' " +
                   log + " && break; sleep 0.1; done; echo 'fail 1' >> " + work +
                   "/control; "
                   "for i in $(seq 1200); do grep -q 'lost (control file)' " +
                   log + " && break; sleep 0.1; done; echo 'restore 1' >> " + work +
                   "/control; "
                   "wait $pid; code=$?; cat " +
                   log + "; exit $code");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("device cpu:1 lost (control file)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("device cpu:1 is back"), std::string::npos) << r.out;
  Json report = Report(work);
  EXPECT_EQ(report["outcome"], "completed");
  for (const auto& t : report["tasks"]) EXPECT_EQ(t["state"], "completed") << t.dump();
  int lost = 0;
  for (const auto& b : report["actual"]) lost += b["ended_by"] == "device-lost";
  EXPECT_EQ(lost, 1) << report["actual"].dump();
  EXPECT_GE(report["plans"].size(), 3u);  // start, the loss, the return
}

TEST_F(RunE2E, BadInputFailsWithClearErrors) {
  std::string job = Write("job.yaml", Job("e2e-bad", 10, 1, 1));
  Result r = Shell(kBin + "/orrery run " + job + " --devices gpu:2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("cpu:N"), std::string::npos) << r.out;
  r = Shell(kBin + "/orrery run " + job + " --devices cpu:2 --fail-device-at 1:5 --workdir " +
            dir_ + "/w");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("names device 5"), std::string::npos) << r.out;
  // A work directory of another job is not overwritten.
  std::string other = Write("other.yaml", Job("e2e-bad", 11, 1, 1));
  fs::create_directories(dir_ + "/w2");
  std::ofstream(dir_ + "/w2/job.json") << "{}";
  std::ofstream(dir_ + "/w2/report.json") << "{}";
  r = Shell(kBin + "/orrery run " + other + " --workdir " + dir_ + "/w2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("different job"), std::string::npos) << r.out;
}

}  // namespace
