// `orrery run` of spilled tasks sharing a device as an interleaved gang (Hydra;
// operator/planner/interleave.h): the real orrery binary starting a real
// `orrery-worker gang` process on the repository's text corpus.
//   - on one device the engine's plan puts the two tasks in one gang, one
//     process runs both, the shorter finishes and leaves while the other keeps
//     running, each checkpoints in its own directory, the report names the
//     gang, and each task's losses equal those of the same job on two devices,
//     where each runs alone;
//   - a gang stopped midway (as on Ctrl-C) resumes each task alone from its
//     own checkpoint, again with the same losses.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/operator/local/shell.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kBin = std::string(ORRERY_BINARY_DIR) + "/bin";
const std::string kCorpus = std::string(ORRERY_SOURCE_DIR) + "/data/corpus/quickstart.txt";

using orrery::local::testing::Result;
using orrery::local::testing::Shell;

// Two tasks whose only template is spill: "short" (40 steps) and "long" (120).
std::string Job(int short_steps = 40, int long_steps = 120) {
  std::ostringstream os;
  os << "apiVersion: orrery.dev/v1alpha1\nkind: ModelSelectionJob\nmetadata: {name: gang}\n"
        "spec:\n  tasks:\n";
  for (const auto& [name, steps, lr] :
       {std::tuple{"short", short_steps, "1e-3"}, std::tuple{"long", long_steps, "3e-3"}}) {
    os << "  - name: " << name
       << "\n    model:\n      gpt: {layers: 2, hidden: 32, heads: 2, seqLen: 32, vocab: 256}\n"
          "    data:\n      text: {path: "
       << kCorpus << "}\n    training: {steps: " << steps
       << ", batchSize: 8, optimizer: adamw, learningRate: " << lr << "}\n";
  }
  // A new plan is adopted only for a 95% gain: the gang these tests follow
  // runs on (to its end, or to the interrupt) whatever speed it measures on
  // this CPU, where gangs measure 0.66-0.82x and a split would pay; a slow
  // gang's split is runner_interleaved_test's.
  os << "  resources:\n    templates: [spill]\n    gpusPerTask: {min: 1, max: 1}\n"
        "    gpuQuota: 2\n  scheduling: {solverTimeLimitSeconds: 2, minSwitchGain: 0.95}\n"
        "  profiling: {trialSteps: 3}\n  checkpoints: {intervalSteps: 20, keep: 2}\n";
  return os.str();
}

class RunInterleavedE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/run_interleaved_e2e_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job_ = dir_ + "/job.yaml";
    std::ofstream(job_) << Job();
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  Result Run(const std::string& devices, const std::string& workdir,
             const std::string& extra = "") {
    return Shell(kBin + "/orrery run " + job_ + " --devices " + devices + " --workdir " + workdir +
                 " --profile-cache " + dir_ + "/profiles.json --progress plain " + extra);
  }
  static Json Report(const std::string& workdir) {
    std::ifstream in(workdir + "/report.json");
    return Json::parse(in, nullptr, false);
  }
  static Json Task(const Json& report, const std::string& name) {
    for (const auto& t : report["tasks"])
      if (t["name"] == name) return t;
    return Json();
  }
  // Each task completed all its steps, with the same loss at every reported
  // step as in `alone` (the same training, whatever shared its device).
  static void ExpectSameLosses(const Json& report, const Json& alone) {
    for (const char* name : {"short", "long"}) {
      const Json t = Task(report, name), a = Task(alone, name);
      ASSERT_TRUE(t.is_object() && a.is_object()) << name;
      EXPECT_EQ(t["state"], "completed") << t.dump();
      EXPECT_EQ(t["steps_done"], a["steps_done"]) << name;
      EXPECT_DOUBLE_EQ(t["final_loss"].get<double>(), a["final_loss"].get<double>()) << name;
      std::map<int64_t, double> by_step;
      for (const auto& p : a["losses"]) by_step[p["step"].get<int64_t>()] = p["loss"];
      size_t compared = 0;
      for (const auto& p : t["losses"]) {
        auto it = by_step.find(p["step"].get<int64_t>());
        if (it == by_step.end()) continue;
        EXPECT_DOUBLE_EQ(p["loss"].get<double>(), it->second) << name << " step " << p["step"];
        ++compared;
      }
      EXPECT_GE(compared, 3u) << name;  // an empty run cannot pass
    }
  }
  std::string dir_, job_;
};

TEST_F(RunInterleavedE2E, SpilledTasksShareOneDeviceAsAGangAndTrainAsAlone) {
  Result alone = Run("cpu:2", dir_ + "/alone");
  ASSERT_EQ(alone.code, 0) << alone.out;
  EXPECT_EQ(alone.out.find("interleaved gang"), std::string::npos) << alone.out;
  const Json alone_report = Report(dir_ + "/alone");

  Result r = Run("cpu:1", dir_ + "/gang");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("start short+long as an interleaved gang"), std::string::npos) << r.out;
  // Its speed measured against its members' profiled speeds alone.
  EXPECT_NE(r.out.find("interleaved gang short+long runs at"), std::string::npos) << r.out;
  const Json report = Report(dir_ + "/gang");
  EXPECT_EQ(report["outcome"], "completed");
  ExpectSameLosses(report, alone_report);
  // One bar each, both in the gang, ended by completion: short left the gang
  // first and long went on in it (no restart).
  std::map<std::string, Json> bar;
  for (const auto& b : report["actual"]) {
    EXPECT_EQ(bar.count(b["task"]), 0u) << report["actual"].dump();
    bar[b["task"]] = b;
  }
  ASSERT_EQ(bar.size(), 2u) << report["actual"].dump();
  for (const auto& [task, b] : bar) {
    EXPECT_EQ(b["gang"], "short+long") << b.dump();
    EXPECT_EQ(b["ended_by"], "completed") << b.dump();
    EXPECT_EQ(b["devices"], Json::array({0})) << b.dump();
  }
  EXPECT_LT(bar["short"]["end_s"].get<double>(), bar["long"]["end_s"].get<double>());
  for (const auto& b : report["planned"]) EXPECT_EQ(b["gang"], "short+long") << b.dump();
  // Each task's checkpoints in its own directory, ending at its own last step.
  EXPECT_TRUE(fs::exists(dir_ + "/gang/checkpoints/short/step-000000000040"));
  EXPECT_TRUE(fs::exists(dir_ + "/gang/checkpoints/long/step-000000000120"));
  EXPECT_FALSE(fs::exists(dir_ + "/gang/checkpoints/short/step-000000000120"));
}

TEST_F(RunInterleavedE2E, AGangStoppedMidwayResumesEachTaskAloneFromItsCheckpoint) {
  // Long enough that neither task finishes between the runner seeing step 20
  // and its SIGTERM arriving (a fast machine ran "short"'s 40 steps to the
  // end in that time: 20 steps in 0.1 s).
  constexpr int kShort = 200, kLong = 400;
  std::ofstream(job_) << Job(kShort, kLong);
  Result alone = Run("cpu:2", dir_ + "/alone");
  ASSERT_EQ(alone.code, 0) << alone.out;
  // Stopped as on Ctrl-C once a task reaches step 20: the gang's one process
  // checkpoints each task in its own directory.
  Result first = Run("cpu:1", dir_ + "/work", "--stop-at-step 20");
  ASSERT_EQ(first.code, 130) << first.out;
  EXPECT_NE(first.out.find("interleaved gang"), std::string::npos) << first.out;
  const Json mid = Report(dir_ + "/work");
  for (const char* name : {"short", "long"}) {
    const Json t = Task(mid, name);
    EXPECT_EQ(t["state"], "interrupted") << t.dump();
    EXPECT_GE(t["steps_done"].get<int>(), 20) << t.dump();
    EXPECT_LT(t["steps_done"].get<int>(), kShort) << t.dump();
  }
  // Resumed on two devices: each alone, from its own checkpoint.
  Result second = Run("cpu:2", dir_ + "/work");
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_NE(second.out.find("start short as spill"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("start long as spill"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find(" from step "), std::string::npos) << second.out;
  const Json end = Report(dir_ + "/work");
  EXPECT_EQ(end["outcome"], "completed");
  ExpectSameLosses(end, Report(dir_ + "/alone"));
  int interrupted_in_gang = 0, completed_alone = 0;
  for (const auto& b : end["actual"]) {
    interrupted_in_gang += b["ended_by"] == "interrupted" && b["gang"] == "short+long";
    completed_alone += b["ended_by"] == "completed" && b["gang"] == "";
  }
  EXPECT_EQ(interrupted_in_gang, 2) << end["actual"].dump();
  EXPECT_EQ(completed_alone, 2) << end["actual"].dump();
}

}  // namespace
