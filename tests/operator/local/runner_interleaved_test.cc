// `orrery run` measuring an interleaved gang's speed, through the runner with a
// fake orrery-worker (a shell script speaking the worker's line protocol):
// spilled tasks profile at 100 samples/s alone; in a gang each reports 40
// samples/s, so the gang runs at 0.8x its members one after the other. The
// runner measures that, the engine plans again with it, and the gang not yet
// started is dropped: its tasks run alone; of a running gang the re-plan
// splits, the member moved later is stopped alone (the gang's stop file) and
// the other runs on in the gang. A gang member that fails is named with its
// own error (not another member's log line), and a worker a signal killed is
// said to be so.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "operator/api/load.h"
#include "operator/local/runner.h"
#include "tests/operator/local/fake_gang_worker.h"

namespace orrery::local {
namespace {

namespace fs = std::filesystem;

using testing::FakeGangWorker;
using testing::kFakeWorkerPrelude;
using testing::SpilledSweepJob;

// A temporary folder holding the fake worker `script`, and run options on one
// CPU device with the profile cache and work folder in it; removed after.
class RunnerInterleavedTest : public ::testing::Test {
 protected:
  void UseWorker(const std::string& script) {
    char pattern[] = "/tmp/orrery-runner-interleaved-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    const std::string worker = dir_ + "/fake-worker";
    std::ofstream(worker) << script;
    ASSERT_EQ(chmod(worker.c_str(), 0755), 0);
    auto devices = ParseDevices("cpu:1");
    ASSERT_TRUE(devices.ok()) << devices.status();
    o_.devices = *devices;
    o_.workdir = dir_ + "/work";
    o_.worker = worker;
    o_.profile_cache = dir_ + "/profiles.json";
    o_.job_dir = dir_;
    o_.tick_s = 0.02;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  // The report.json of the run in `o_.workdir`.
  nlohmann::json Report() const {
    std::stringstream text;
    text << std::ifstream(o_.workdir + "/report.json").rdbuf();
    return nlohmann::json::parse(text.str(), nullptr, false);
  }
  std::string dir_;
  RunOptions o_;
};

TEST_F(RunnerInterleavedTest, AGangMeasuredSlowerThanAloneEndsTheGangsNotYetStarted) {
  ASSERT_NO_FATAL_FAILURE(UseWorker(FakeGangWorker(40)));
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-fake"));
  ASSERT_TRUE(job.ok()) << job.status();
  std::ostringstream out, err;
  ASSERT_EQ(RunJob(*job, o_, out, err), 0) << out.str() << err.str();
  EXPECT_NE(out.str().find("runs at 0.80x its members one after the other (planned with 1.22x)"),
            std::string::npos)
      << out.str();
  // The plan made with the measured figure says so (not "spec-changed": no
  // one edited the job).
  EXPECT_NE(out.str().find("(gang-speed-measured"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("spec-changed"), std::string::npos) << out.str();
  const nlohmann::json report = Report();
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["outcome"], "completed");
  // The first plan had two gangs; one ran. After the measurement, the other
  // two tasks ran alone.
  ASSERT_GE(report["plans"].size(), 2u) << report["plans"].dump();
  int in_gang = 0, alone = 0;
  std::map<std::string, int> bars;
  for (const auto& b : report["actual"]) {
    EXPECT_EQ(b["ended_by"], "completed") << b.dump();
    ++bars[b["task"]];
    (b["gang"] == "" ? alone : in_gang) += 1;
  }
  EXPECT_EQ(in_gang, 2) << report["actual"].dump();
  EXPECT_EQ(alone, 2) << report["actual"].dump();
  EXPECT_EQ(bars.size(), 4u) << report["actual"].dump();
}

// The speedup a gang measured is kept in the profile cache: the next run on
// the same devices times its first gangs with it (0.8x: it forms none).
// Members whose lines come in different reads (the first completes and leaves
// the gang before the second reports) are still measured together: the gang's
// speedup is the sum of what each measured.
TEST_F(RunnerInterleavedTest, MembersThatFinishApartAreMeasuredTogether) {
  ASSERT_NO_FATAL_FAILURE(UseWorker(FakeGangWorker(40, "0.3")));
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-apart", "[0.1, 0.2]"));
  ASSERT_TRUE(job.ok()) << job.status();
  std::ostringstream out, err;
  ASSERT_EQ(RunJob(*job, o_, out, err), 0) << out.str() << err.str();
  EXPECT_NE(out.str().find("runs at 0.80x its members one after the other"), std::string::npos)
      << out.str();
}

TEST_F(RunnerInterleavedTest, TheNextRunStartsFromTheMeasuredSpeedup) {
  ASSERT_NO_FATAL_FAILURE(UseWorker(FakeGangWorker(40)));
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-fake"));
  ASSERT_TRUE(job.ok()) << job.status();
  std::map<std::string, int> gang_bars;
  for (const std::string run : {"first", "second"}) {
    o_.workdir = dir_ + "/" + run;
    std::ostringstream out, err;
    ASSERT_EQ(RunJob(*job, o_, out, err), 0) << out.str() << err.str();
    if (run == "second") {
      EXPECT_NE(out.str().find("gangs timed at 0.80x, as measured on cpu before"),
                std::string::npos)
          << out.str();
    }
    const nlohmann::json report = Report();
    ASSERT_FALSE(report.is_discarded());
    EXPECT_EQ(report["outcome"], "completed");
    for (const auto& b : report["actual"]) gang_bars[run] += b["gang"] != "";
  }
  EXPECT_EQ(gang_bars["first"], 2);   // one gang, then measured
  EXPECT_EQ(gang_bars["second"], 0);  // none: 0.8x is no gain
}

// A worker whose gang reads its --stop-file: each task reports twice (at 40
// samples/s in a gang, 0.8x its members one after the other; 100 alone),
// then runs two more seconds, in which a task named in the stop file ends
// "preempted" at once while the others run on and complete.
std::string StoppableWorker() {
  return std::string(kFakeWorkerPrelude) + R"sh(speed=100
if [ "$mode" = gang ]; then speed=40; fi
for t in $tasks; do
  name=${t%%:*}
  steps=${t##*:}
  echo "{$(tag "$name")\"event\":\"start\",\"steps\":$steps,\"global_batch\":8,\"resumed_from_step\":null}"
  echo "{$(tag "$name")\"event\":\"progress\",\"step\":1,\"steps\":$steps,\"loss\":1.5,\"samples_per_s\":$speed}"
  echo "{$(tag "$name")\"event\":\"progress\",\"step\":2,\"steps\":$steps,\"loss\":1.5,\"samples_per_s\":$speed}"
done
live=$tasks
i=0
while [ $i -lt 20 ] && [ -n "$live" ]; do
  sleep 0.1
  i=$((i + 1))
  left=
  for t in $live; do
    name=${t%%:*}
    if [ -n "$stopfile" ] && [ -f "$stopfile" ] && grep -qx "$name" "$stopfile"; then
      echo "{$(tag "$name")\"event\":\"done\",\"status\":\"preempted\",\"step\":2,\"loss\":1.5}"
    else
      left="$left $t"
    fi
  done
  live=$left
done
for t in $live; do
  name=${t%%:*}
  steps=${t##*:}
  echo "{$(tag "$name")\"event\":\"progress\",\"step\":$steps,\"steps\":$steps,\"loss\":1.5,\"samples_per_s\":$speed}"
  echo "{$(tag "$name")\"event\":\"done\",\"status\":\"completed\",\"step\":$steps,\"loss\":1.5}"
done
)sh";
}

// A gang measured at 0.8x: the re-plan runs its two members one after the
// other, so the member it moves is stopped alone (a line in the gang's stop
// file) while the one it keeps runs on in the gang's process and completes
// there; the stopped one runs alone afterwards.
TEST_F(RunnerInterleavedTest, AMemberStoppedAloneLeavesTheOtherRunningInTheGang) {
  ASSERT_NO_FATAL_FAILURE(UseWorker(StoppableWorker()));
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-stop", "[0.1, 0.2]"));
  ASSERT_TRUE(job.ok()) << job.status();
  std::ostringstream out, err;
  ASSERT_EQ(RunJob(*job, o_, out, err), 0) << out.str() << err.str();
  EXPECT_NE(out.str().find("runs at 0.80x its members one after the other"), std::string::npos)
      << out.str();
  EXPECT_EQ(out.str().find("did not stop alone"), std::string::npos) << out.str();
  const nlohmann::json report = Report();
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["outcome"], "completed");
  std::map<std::string, std::vector<std::string>> bars;  // task -> "ended_by/gang|alone"
  for (const auto& b : report["actual"]) {
    bars[b["task"]].push_back(b["ended_by"].get<std::string>() + "/" +
                              (b["gang"] == "" ? "alone" : "gang"));
  }
  ASSERT_EQ(bars.size(), 2u) << report["actual"].dump();
  std::vector<std::vector<std::string>> shapes;
  shapes.reserve(bars.size());
  for (const auto& [task, b] : bars) shapes.push_back(b);
  std::sort(shapes.begin(), shapes.end());
  EXPECT_EQ(shapes, (std::vector<std::vector<std::string>>{{"completed/gang"},
                                                           {"rescaled/gang", "completed/alone"}}))
      << report["actual"].dump() << "\n"
      << out.str() << err.str();
}

// The first gang of each test run fails as `$FAKE_FAILURE` says ("member": the
// first task's "done" says failed with its own error, the process's last
// stderr line is another's, it exits 1; "kill": the process kills itself with
// SIGKILL); every later gang completes.
const char* kFailingWorker = R"sh(#!/bin/sh
mode=$1
shift
if [ "$mode" = profile ]; then
  echo "{\"event\":\"profile\",\"world_size\":1,\"global_batch\":8,\"samples_per_s\":100,\"step_time_s\":{\"median\":0.08,\"p90\":0.08}}"
  exit 0
fi
tasks=
for a in "$@"; do
  case $a in --task=*) tasks="$tasks ${a#--task=}" ;; esac
done
if [ -z "$tasks" ]; then tasks=-; fi  # train: one task, its lines untagged
first=true
if [ -e "$0.ran" ]; then first=false; fi
touch "$0.ran"
code=0
for name in $tasks; do
  tag="\"task\":\"$name\","
  if [ "$name" = - ]; then tag=; fi
  echo "{${tag}\"event\":\"start\",\"steps\":100,\"global_batch\":8,\"resumed_from_step\":null}"
  if [ $first = true ] && [ "$FAKE_FAILURE" = kill ]; then kill -9 $$; fi
  if [ $first = true ] && [ "$FAKE_FAILURE" = member ]; then
    echo "{${tag}\"event\":\"done\",\"status\":\"failed\",\"error\":\"INTERNAL: $name's own error\"}"
    first=done
    code=1
    continue
  fi
  echo "{${tag}\"event\":\"progress\",\"step\":100,\"steps\":100,\"loss\":1.5,\"samples_per_s\":100}"
  echo "{${tag}\"event\":\"done\",\"status\":\"completed\",\"step\":100,\"loss\":1.5}"
done
if [ $code -ne 0 ]; then echo "another member's last line" >&2; fi
exit $code
)sh";

// Runs a gang of two with kFailingWorker under `failure`; the runner's output.
class RunnerFailingGangTest : public RunnerInterleavedTest {
 protected:
  std::string RunFailingGang(const std::string& failure) {
    UseWorker(kFailingWorker);
    auto job = api::LoadJobText(SpilledSweepJob("interleaved-fake", "[0.1, 0.2]"));
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok() || dir_.empty()) return "";
    setenv("FAKE_FAILURE", failure.c_str(), 1);
    std::ostringstream out, err;
    EXPECT_EQ(RunJob(*job, o_, out, err), 0) << out.str() << err.str();
    unsetenv("FAKE_FAILURE");
    return out.str();
  }
};

TEST_F(RunnerFailingGangTest, AFailedMemberIsNamedWithItsOwnError) {
  const std::string out = RunFailingGang("member");
  EXPECT_NE(out.find("exited with 1: INTERNAL: mlp-lr-1e-1's own error; restarting from step 0"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("another member's last line"), std::string::npos) << out;
  EXPECT_NE(out.find("all tasks completed"), std::string::npos) << out;
}

TEST_F(RunnerFailingGangTest, AKilledGangSaysBySignal) {
  const std::string out = RunFailingGang("kill");
  EXPECT_NE(out.find("was killed by signal 9"), std::string::npos) << out;
  EXPECT_EQ(out.find("exited with 137"), std::string::npos) << out;
  EXPECT_NE(out.find("all tasks completed"), std::string::npos) << out;
}

}  // namespace
}  // namespace orrery::local
