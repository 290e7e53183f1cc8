// `orrery run` measuring an interleaved gang's speed, through the runner with a
// fake orrery-worker (a shell script speaking the worker's line protocol):
// spilled tasks profile at 100 samples/s alone; in a gang each reports 40
// samples/s, so the gang runs at 0.8x its members one after the other. The
// runner measures that, the engine plans again with it, and the gang not yet
// started is dropped: its tasks run alone. A gang member that fails is named
// with its own error (not another member's log line), and a worker a signal
// killed is said to be so.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

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
using testing::SpilledSweepJob;

TEST(RunnerInterleavedTest, AGangMeasuredSlowerThanAloneEndsTheGangsNotYetStarted) {
  char pattern[] = "/tmp/orrery-runner-interleaved-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const std::string worker = dir + "/fake-worker";
  std::ofstream(worker) << FakeGangWorker(40);
  ASSERT_EQ(chmod(worker.c_str(), 0755), 0);
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-fake"));
  ASSERT_TRUE(job.ok()) << job.status();
  RunOptions o;
  auto devices = ParseDevices("cpu:1");
  ASSERT_TRUE(devices.ok());
  o.devices = *devices;
  o.workdir = dir + "/work";
  o.worker = worker;
  o.profile_cache = dir + "/profiles.json";
  o.job_dir = dir;
  o.tick_s = 0.02;
  std::ostringstream out, err;
  ASSERT_EQ(RunJob(*job, o, out, err), 0) << out.str() << err.str();
  EXPECT_NE(out.str().find("runs at 0.80x its members one after the other (planned with 1.22x)"),
            std::string::npos)
      << out.str();
  // The plan made with the measured figure says so (not "spec-changed": no
  // one edited the job).
  EXPECT_NE(out.str().find("(gang-speed-measured"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("spec-changed"), std::string::npos) << out.str();
  std::stringstream text;
  text << std::ifstream(o.workdir + "/report.json").rdbuf();
  const nlohmann::json report = nlohmann::json::parse(text.str(), nullptr, false);
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
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The speedup a gang measured is kept in the profile cache: the next run on
// the same devices times its first gangs with it (0.8x: it forms none).
TEST(RunnerInterleavedTest, TheNextRunStartsFromTheMeasuredSpeedup) {
  char pattern[] = "/tmp/orrery-runner-interleaved-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const std::string worker = dir + "/fake-worker";
  std::ofstream(worker) << FakeGangWorker(40);
  ASSERT_EQ(chmod(worker.c_str(), 0755), 0);
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-fake"));
  ASSERT_TRUE(job.ok()) << job.status();
  RunOptions o;
  o.devices = *ParseDevices("cpu:1");
  o.worker = worker;
  o.profile_cache = dir + "/profiles.json";
  o.job_dir = dir;
  o.tick_s = 0.02;
  std::map<std::string, int> gang_bars;
  for (const std::string run : {"first", "second"}) {
    o.workdir = dir + "/" + run;
    std::ostringstream out, err;
    ASSERT_EQ(RunJob(*job, o, out, err), 0) << out.str() << err.str();
    if (run == "second") {
      EXPECT_NE(out.str().find("gangs timed at 0.80x, as measured on cpu before"),
                std::string::npos)
          << out.str();
    }
    std::stringstream text;
    text << std::ifstream(o.workdir + "/report.json").rdbuf();
    const nlohmann::json report = nlohmann::json::parse(text.str(), nullptr, false);
    ASSERT_FALSE(report.is_discarded());
    EXPECT_EQ(report["outcome"], "completed");
    for (const auto& b : report["actual"]) gang_bars[run] += b["gang"] != "";
  }
  EXPECT_EQ(gang_bars["first"], 2);   // one gang, then measured
  EXPECT_EQ(gang_bars["second"], 0);  // none: 0.8x is no gain
  std::error_code ec;
  fs::remove_all(dir, ec);
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
std::string RunFailingGang(const std::string& failure) {
  char pattern[] = "/tmp/orrery-runner-interleaved-XXXXXX";
  EXPECT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const std::string worker = dir + "/fake-worker";
  std::ofstream(worker) << kFailingWorker;
  EXPECT_EQ(chmod(worker.c_str(), 0755), 0);
  auto job = api::LoadJobText(SpilledSweepJob("interleaved-fake", "[0.1, 0.2]"));
  EXPECT_TRUE(job.ok()) << job.status();
  setenv("FAKE_FAILURE", failure.c_str(), 1);
  RunOptions o;
  o.devices = *ParseDevices("cpu:1");
  o.workdir = dir + "/work";
  o.worker = worker;
  o.profile_cache = dir + "/profiles.json";
  o.job_dir = dir;
  o.tick_s = 0.02;
  std::ostringstream out, err;
  EXPECT_EQ(RunJob(*job, o, out, err), 0) << out.str() << err.str();
  unsetenv("FAKE_FAILURE");
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out.str();
}

TEST(RunnerInterleavedTest, AFailedMemberIsNamedWithItsOwnError) {
  const std::string out = RunFailingGang("member");
  EXPECT_NE(out.find("exited with 1: INTERNAL: mlp-lr-1e-1's own error; restarting from step 0"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("another member's last line"), std::string::npos) << out;
  EXPECT_NE(out.find("all tasks completed"), std::string::npos) << out;
}

TEST(RunnerInterleavedTest, AKilledGangSaysBySignal) {
  const std::string out = RunFailingGang("kill");
  EXPECT_NE(out.find("was killed by signal 9"), std::string::npos) << out;
  EXPECT_EQ(out.find("exited with 137"), std::string::npos) << out;
  EXPECT_NE(out.find("all tasks completed"), std::string::npos) << out;
}

}  // namespace
}  // namespace orrery::local
