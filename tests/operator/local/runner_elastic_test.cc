// `orrery run` on an elastic job, end to end through the runner with a fake
// orrery-worker: a shell script that speaks the worker's line protocol (a
// profile document whose throughput grows with --batch; start, progress and
// done lines for the --steps or --epochs it is given) and records its flags. The
// runner profiles every batch choice, the planner picks the largest (it moves
// the most samples per second), and the launch carries that batch, the steps
// that keep the task's sample budget and the learning rate scaled by the rule.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

// Throughput: batch x ranks samples/s, a peak of batch MiB measured without
// recomputation. Train: one progress line at the end. Rank 0 appends its
// subcommand and flags to $checkpoint-dir.args.
const char* kFakeWorker = R"(#!/bin/sh
mode=$1
shift
batch=0
steps=0
epochs=0
samples=0
ckpt=
for a in "$@"; do
  case $a in
    --batch=*) batch=${a#--batch=} ;;
    --steps=*) steps=${a#--steps=} ;;
    --epochs=*) epochs=${a#--epochs=} ;;
    --data-samples=*) samples=${a#--data-samples=} ;;
    --checkpoint-dir=*) ckpt=${a#--checkpoint-dir=} ;;
  esac
done
if [ "$mode" = profile ]; then
  echo "{\"event\":\"profile\",\"world_size\":$WORLD_SIZE,\"global_batch\":$batch,\"samples_per_s\":$((batch * WORLD_SIZE)),\"step_time_s\":{\"median\":0.01,\"p90\":0.01},\"peak_memory_bytes\":{\"device_parameters\":4096,\"device_allocated\":$((batch * 1048576))},\"knobs\":{\"recompute\":\"none\"}}"
  exit 0
fi
if [ "$epochs" -gt 0 ]; then steps=$((epochs * samples / batch)); fi
if [ "$RANK" = 0 ]; then echo "$mode $*" >> "$ckpt.args"; fi
echo "{\"event\":\"start\",\"steps\":$steps,\"global_batch\":$batch,\"resumed_from_step\":null}"
echo "{\"event\":\"progress\",\"step\":$steps,\"steps\":$steps,\"samples\":$((steps * batch)),\"loss\":1.5,\"samples_per_s\":100}"
echo "{\"event\":\"done\",\"status\":\"completed\",\"step\":$steps,\"loss\":1.5}"
)";

// A worker that takes time and checkpoints: one step per 20 ms; on SIGTERM it
// saves "step samples" to $checkpoint-dir.state (its checkpoint) and stops
// preempted; a start with that file resumes from it. Throughput: the cost of a
// sample grows with the per-rank batch (memory pressure) and two ranks pay
// 50 ms of synchronisation per step, so one rank is fastest at batch 4 (71
// samples/s) and two ranks at batch 16 (82 samples/s).
const char* kResumableWorker = R"(#!/bin/sh
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
  esac
done
if [ "$mode" = profile ]; then
  sps=$(awk -v b=$batch -v g=$WORLD_SIZE 'BEGIN { p = b / g; s = p * (0.01 + 0.001 * p) + (g > 1 ? 0.05 : 0); printf "%.3f", b / s }')
  echo "{\"event\":\"profile\",\"world_size\":$WORLD_SIZE,\"global_batch\":$batch,\"samples_per_s\":$sps,\"step_time_s\":{\"median\":0.01,\"p90\":0.01}}"
  exit 0
fi
step=0
samples=0
resumed=null
if [ -f "$ckpt.state" ]; then
  read step samples < "$ckpt.state"
  resumed=$step
fi
if [ "$RANK" = 0 ]; then echo "$mode $*" >> "$ckpt.args"; fi
term=0
trap 'term=1' TERM
echo "{\"event\":\"start\",\"steps\":$steps,\"global_batch\":$batch,\"resumed_from_step\":$resumed}"
first=$step
while [ "$step" -lt "$steps" ] && [ "$term" = 0 ]; do
  sleep 0.02
  step=$((step + 1))
  samples=$((samples + batch))
  echo "{\"event\":\"progress\",\"step\":$step,\"steps\":$steps,\"samples\":$samples,\"loss\":1.5,\"samples_per_s\":100}"
done
status=completed
if [ "$term" = 1 ]; then status=preempted; fi
if [ "$step" -gt "$first" ] && [ "$RANK" = 0 ]; then
  echo "$step $samples" > "$ckpt.state"
  echo "{\"event\":\"checkpoint\",\"step\":$step}"
fi
echo "{\"event\":\"done\",\"status\":\"$status\",\"step\":$step,\"loss\":1.5}"
)";

// One task: 3 epochs of 1000 samples at batch 8 (375 steps, 3000 samples).
const char* kJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: elastic-fake}
spec:
  tasks:
  - name: mlp
    model: {mlp: {layers: 2, hidden: 8, inputs: 4, outputs: 2}}
    data: {synthetic: {seed: 1, samples: 1000}}
    training: {epochs: 3, batchSize: 8, optimizer: sgd, learningRate: 0.1}
  resources:
    templates: [ddp]
    gpusPerTask: {min: 1, max: 2}
    gpuQuota: 2
  profiling: {trialSteps: 3}
  elasticity: {enabled: ELASTIC, minBatchSize: 4, maxBatchSize: 64, learningRateScaling: linear}
)";

class RunnerElasticTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/orrery-runner-elastic-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    worker_ = dir_ + "/fake-worker";
    std::ofstream(worker_) << kFakeWorker;
    ASSERT_EQ(chmod(worker_.c_str(), 0755), 0);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs the job to the end; returns report.json and the train flags.
  std::pair<nlohmann::json, std::string> Run(bool elastic) {
    std::string yaml = kJob;
    yaml.replace(yaml.find("ELASTIC"), 7, elastic ? "true" : "false");
    auto job = api::LoadJobText(yaml);
    EXPECT_TRUE(job.ok()) << job.status();
    RunOptions o;
    auto devices = ParseDevices("cpu:2");
    EXPECT_TRUE(devices.ok());
    o.devices = *devices;
    o.workdir = dir_ + (elastic ? "/elastic" : "/fixed");
    o.worker = worker_;
    o.profile_cache = dir_ + "/profiles.json";
    o.job_dir = dir_;
    o.tick_s = 0.02;
    std::ostringstream out, err;
    EXPECT_EQ(RunJob(*job, o, out, err), 0) << out.str() << err.str();
    std::ifstream report(o.workdir + "/report.json");
    std::stringstream r, a;
    r << report.rdbuf();
    a << std::ifstream(o.workdir + "/checkpoints/mlp.args").rdbuf();
    return {nlohmann::json::parse(r.str(), nullptr, false), a.str()};
  }

  std::string dir_;
  std::string worker_;
};

const char* kStepsJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: elastic-resume}
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
  elasticity: {enabled: true, minBatchSize: 4, maxBatchSize: 16, learningRateScaling: linear}
)";

// Interrupted on one device at batch 4, resumed on two at batch 16: the task
// consumes its budget of 40 x 8 = 320 samples, not the steps of either batch.
// The second invocation has not seen the first's checkpoint, so its first
// launch assumes the wrong resume point; the runner restarts it with the steps
// left from where the worker actually resumed.
TEST_F(RunnerElasticTest, ResumeAtAnotherBatchConsumesTheSampleBudget) {
  std::ofstream(worker_) << kResumableWorker;
  auto job = api::LoadJobText(kStepsJob);
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

  std::stringstream args;
  args << std::ifstream(o.workdir + "/checkpoints/mlp.args").rdbuf();
  EXPECT_NE(args.str().find("--batch=4 "), std::string::npos) << args.str();
  EXPECT_NE(args.str().find("--batch=16 "), std::string::npos) << args.str();
  int64_t step = 0, samples = 0;
  std::ifstream(o.workdir + "/checkpoints/mlp.state") >> step >> samples;
  EXPECT_GE(samples, 320) << out1.str() << out2.str();
  EXPECT_LT(samples, 320 + 16) << out1.str() << out2.str();
}

TEST_F(RunnerElasticTest, NotElasticRunsTheTasksOwnBatchAndBudget) {
  auto [report, args] = Run(false);
  ASSERT_TRUE(report.is_object());
  const nlohmann::json& task = report["tasks"][0];
  EXPECT_EQ(task.value("batch_size", 0), 8) << task.dump();
  EXPECT_EQ(report["profiles"].size(), 2u);  // ddp x1, x2 at batch 8
  // Each profile's measured peak and its mode, in the report and the cache.
  for (const nlohmann::json& p : report["profiles"]) {
    EXPECT_EQ(p.value("device_allocated_mib", 0.0), 8) << p.dump();
    EXPECT_EQ(p.value("recompute", ""), "none") << p.dump();
  }
  std::stringstream text;
  text << std::ifstream(dir_ + "/profiles.json").rdbuf();
  const nlohmann::json cache = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(cache.contains("entries")) << text.str();
  for (const nlohmann::json& e : cache["entries"]) {
    EXPECT_EQ(e.value("deviceAllocatedBytes", 0.0), 8 * 1048576.0) << e.dump();
    EXPECT_EQ(e.value("recompute", ""), "none") << e.dump();
  }
  EXPECT_NE(args.find("--batch=8 "), std::string::npos) << args;
  EXPECT_NE(args.find("--epochs=3 "), std::string::npos) << args;
  EXPECT_NE(args.find("--lr=0.1 "), std::string::npos) << args;
}

TEST_F(RunnerElasticTest, ElasticPicksTheFasterBatchAndKeepsTheSamples) {
  auto [report, args] = Run(true);
  ASSERT_TRUE(report.is_object());
  // Profiled: batches 4, 8, 16 (nearest powers of two) on 1 and 2 ranks.
  EXPECT_EQ(report["profiles"].size(), 6u) << report["profiles"].dump();
  const nlohmann::json& task = report["tasks"][0];
  EXPECT_EQ(task.value("batch_size", 0), 16) << task.dump();
  EXPECT_EQ(task.value("gpus", 0), 2) << task.dump();
  // 3000 samples at 16: 187.5 steps, rounded up; the rate doubles (linear).
  EXPECT_NE(args.find("--batch=16 "), std::string::npos) << args;
  EXPECT_NE(args.find("--steps=188 "), std::string::npos) << args;
  EXPECT_EQ(args.find("--epochs"), std::string::npos) << args;
  EXPECT_NE(args.find("--lr=0.2 "), std::string::npos) << args;
  EXPECT_NE(args.find("--lr-scaling=linear"), std::string::npos) << args;
}

}  // namespace
}  // namespace orrery::local
