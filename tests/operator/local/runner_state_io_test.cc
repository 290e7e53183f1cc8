// `orrery run` records what a task's gangs save and restore: a fake
// orrery-worker (a shell script speaking the worker's line protocol) saves on
// SIGTERM with per-rank bytes and peak memory, and a relaunch on more devices
// restores from that checkpoint into its new layout. The runner prints a line
// for the re-shard and report.json keeps every save and restore of the task,
// across the interrupted invocation and the resumed one.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "operator/api/load.h"
#include "operator/local/runner.h"

namespace orrery::local {
namespace {

namespace fs = std::filesystem;

// Throughput grows with the ranks, so a second device is always taken. One
// step per 20 ms; on SIGTERM or at the end rank 0 saves "step layout" to
// $checkpoint-dir.state and prints a "checkpoint" line; a start with that file
// prints a "restore" line from the saved layout into its own.
const char* kStateWorker = R"(#!/bin/sh
mode=$1
shift
batch=0
steps=0
ckpt=
for a in "$@"; do
  case $a in
    --batch=*) batch=${a#--batch=} ;;
    --steps=*) steps=${a#--steps=} ;;
    --checkpoint-dir=*) ckpt=${a#--checkpoint-dir=} ;;
    --export-dir=*) export_dir=${a#--export-dir=} ;;
    --export-dtype=*) export_dtype=${a#--export-dtype=} ;;
  esac
done
if [ "$mode" = profile ]; then
  echo "{\"event\":\"profile\",\"world_size\":$WORLD_SIZE,\"global_batch\":$batch,\"samples_per_s\":$((100 * WORLD_SIZE)),\"step_time_s\":{\"median\":0.01,\"p90\":0.01}}"
  exit 0
fi
layout="dp=$WORLD_SIZE,tp=1,pp=1"
step=0
resumed=null
from=
if [ -f "$ckpt.state" ]; then
  read step from < "$ckpt.state"
  resumed=$step
fi
term=0
trap 'term=1' TERM
echo "{\"event\":\"start\",\"steps\":$steps,\"global_batch\":$batch,\"layout\":\"$layout\",\"resumed_from_step\":$resumed}"
if [ "$resumed" != null ]; then
  echo "{\"event\":\"restore\",\"step\":$step,\"path\":\"$ckpt/step-$step\",\"from_layout\":\"$from\",\"layout\":\"$layout\",\"seconds\":0.08,\"bytes_read\":4000,\"bytes_needed\":4000,\"ranks\":[{\"bytes\":2000,\"bytes_needed\":2000,\"reads\":1,\"seconds\":0.08,\"peak_rss_bytes\":210000000,\"rss_before_bytes\":100},{\"bytes\":2000,\"bytes_needed\":2000,\"reads\":1,\"seconds\":0.07,\"peak_rss_bytes\":190000000,\"rss_before_bytes\":100}]}"
fi
first=$step
while [ "$step" -lt "$steps" ] && [ "$term" = 0 ]; do
  sleep 0.02
  step=$((step + 1))
  echo "{\"event\":\"progress\",\"step\":$step,\"steps\":$steps,\"samples\":$((step * batch)),\"loss\":1.5,\"samples_per_s\":100}"
done
status=completed
reason=final
if [ "$term" = 1 ]; then status=preempted; reason=signal; fi
if [ "$step" -gt "$first" ] && [ "$RANK" = 0 ]; then
  echo "$step $layout" > "$ckpt.state"
  echo "{\"event\":\"checkpoint\",\"step\":$step,\"path\":\"$ckpt/step-$step\",\"reason\":\"$reason\",\"seconds\":0.02,\"bytes\":4000,\"ranks\":[{\"bytes\":4000,\"bytes_needed\":4000,\"reads\":0,\"seconds\":0.02,\"peak_rss_bytes\":150000000,\"rss_before_bytes\":100}]}"
fi
exported=null
if [ "$status" = completed ] && [ -n "$export_dir" ]; then
  echo "{\"event\":\"export\",\"path\":\"$export_dir\",\"dtype\":\"$export_dtype\",\"seconds\":0.5}"
  exported="\"$export_dir\""
fi
echo "{\"event\":\"done\",\"status\":\"$status\",\"step\":$step,\"loss\":1.5,\"export\":$exported}"
)";

const char* kJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: state-io}
spec:
  tasks:
  - name: mlp
    model: {mlp: {layers: 2, hidden: 8, inputs: 4, outputs: 2}}
    data: {synthetic: {seed: 1, samples: 1000}}
    training: {steps: 40, batchSize: 8, optimizer: sgd, learningRate: 0.1}
  resources:
    templates: [ddp]
    gpusPerTask: {min: 1, max: 2}
    gpuQuota: 2
  profiling: {trialSteps: 3}
)";

class RunnerStateIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/orrery-runner-state-io-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    worker_ = dir_ + "/fake-worker";
    std::ofstream(worker_) << kStateWorker;
    ASSERT_EQ(chmod(worker_.c_str(), 0755), 0);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
  std::string worker_;
};

// Interrupted on one device, resumed on two: the restore is a re-shard from
// dp=1 into dp=2, announced with the bytes read against the bytes needed, and
// report.json lists the signal save, the restore and the final save in order.
TEST_F(RunnerStateIoTest, SavesAndTheReshardOnResumeAreRecorded) {
  auto job = api::LoadJobText(kJob);
  ASSERT_TRUE(job.ok()) << job.status();
  RunOptions o;
  o.workdir = dir_ + "/run";
  o.worker = worker_;
  o.profile_cache = dir_ + "/profiles.json";
  o.job_dir = dir_;
  o.tick_s = 0.02;
  o.report_every = 1;
  std::ostringstream out1, err1, out2, err2;
  o.devices = *ParseDevices("cpu:1");
  o.stop_at_step = 5;
  ASSERT_EQ(RunJob(*job, o, out1, err1), 130) << out1.str() << err1.str();
  o.devices = *ParseDevices("cpu:2");
  o.stop_at_step = -1;
  ASSERT_EQ(RunJob(*job, o, out2, err2), 0) << out2.str() << err2.str();

  const std::regex line(
      R"(mlp re-sharded step ([0-9]+) from dp=1,tp=1,pp=1 into dp=2,tp=1,pp=1: read 4.00 kB of )"
      R"(4.00 kB needed in 0.08 s \(peak RSS 210 MB\))");
  std::smatch said;
  const std::string printed = out2.str();
  ASSERT_TRUE(std::regex_search(printed, said, line)) << printed;
  const int64_t resumed_at = std::stoll(said[1].str());
  EXPECT_GE(resumed_at, 5);

  std::stringstream text;
  text << std::ifstream(o.workdir + "/report.json").rdbuf();
  const nlohmann::json report = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(report.is_object()) << text.str();
  const nlohmann::json& io = report["tasks"][0]["state_io"];
  ASSERT_EQ(io.size(), 3u) << io.dump(1);
  EXPECT_EQ(io[0]["op"], "save");
  EXPECT_EQ(io[0]["reason"], "signal");
  EXPECT_EQ(io[0]["step"], resumed_at);
  EXPECT_EQ(io[0]["layout"], "dp=1,tp=1,pp=1");  // from its gang's "start" line
  EXPECT_EQ(io[0]["bytes"], 4000);
  EXPECT_EQ(io[0]["bytes_needed"], 4000);
  EXPECT_EQ(io[0]["peak_rss_bytes"], 150000000);
  EXPECT_EQ(io[1]["op"], "restore");
  EXPECT_EQ(io[1]["step"], resumed_at);
  EXPECT_EQ(io[1]["from_layout"], "dp=1,tp=1,pp=1");
  EXPECT_EQ(io[1]["layout"], "dp=2,tp=1,pp=1");
  EXPECT_EQ(io[1]["bytes"], 4000);
  EXPECT_EQ(io[1]["bytes_needed"], 4000);
  EXPECT_EQ(io[1]["peak_rss_bytes"], 210000000);  // the larger of the two ranks
  EXPECT_EQ(io[1]["ranks"], 2);
  EXPECT_EQ(io[2]["op"], "save");
  EXPECT_EQ(io[2]["reason"], "final");
  EXPECT_EQ(io[2]["step"], 40);
  // The events of the report carry the line too, and the page shows the table.
  EXPECT_NE(report["events"].dump().find("mlp re-sharded step"), std::string::npos);
  std::stringstream html;
  html << std::ifstream(o.workdir + "/report.html").rdbuf();
  EXPECT_NE(html.str().find("<h2>Checkpoints and re-shards</h2>"), std::string::npos);
  EXPECT_NE(html.str().find("<td>re-shard</td>"), std::string::npos);
}

// A fine-tune with an output: the worker is told where to export (resolved
// against the job's folder like its other paths), and its "export" line puts
// the folder into the events and into report.json.
TEST_F(RunnerStateIoTest, TheExportedModelIsReported) {
  auto job = api::LoadJobText(R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: export}
spec:
  tasks:
  - name: tune
    model: {pretrained: {path: models/gpt2, seqLen: 64}}
    data: {synthetic: {seed: 1, samples: 1000}}
    training: {steps: 6, batchSize: 8, learningRate: 0.1}
    fineTuning: {lora: {rank: 4}}
    output: {path: "out/{task}", dtype: bfloat16}
  resources:
    templates: [ddp]
    gpusPerTask: {min: 1, max: 1}
    gpuQuota: 1
  profiling: {trialSteps: 3}
)");
  ASSERT_TRUE(job.ok()) << job.status();
  RunOptions o;
  o.workdir = dir_ + "/run";
  o.worker = worker_;
  o.profile_cache = dir_ + "/profiles.json";
  o.job_dir = dir_;
  o.tick_s = 0.02;
  o.report_every = 1;
  o.devices = *ParseDevices("cpu:1");
  std::ostringstream out, err;
  ASSERT_EQ(RunJob(*job, o, out, err), 0) << out.str() << err.str();
  const std::string where = dir_ + "/out/tune";
  EXPECT_NE(out.str().find("tune: exported the model to " + where + " (bfloat16) in 0.5 s"),
            std::string::npos)
      << out.str();
  std::stringstream text;
  text << std::ifstream(o.workdir + "/report.json").rdbuf();
  const nlohmann::json report = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(report.is_object()) << text.str();
  EXPECT_EQ(report["tasks"][0]["export"], where);
}

}  // namespace
}  // namespace orrery::local
