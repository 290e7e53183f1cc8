// A fake orrery-worker for the runner's interleaved-gang tests (a shell script
// speaking the worker's line protocol) and the job of spilled tasks they run:
// runner_interleaved_test and gang_conformance_test.
#pragma once

#include <string>

namespace orrery::local::testing {

// The start of every fake worker: `profile` reports 100 samples/s and exits;
// otherwise $mode is train or gang, $tasks lists each task as name:steps (its
// part of the line after a "--", named by --task; one unnamed task for train)
// and $stopfile is --stop-file's path (empty without one).
inline const char* kFakeWorkerPrelude = R"sh(#!/bin/sh
mode=$1
shift
if [ "$mode" = profile ]; then
  echo "{\"event\":\"profile\",\"world_size\":1,\"global_batch\":8,\"samples_per_s\":100,\"step_time_s\":{\"median\":0.08,\"p90\":0.08}}"
  exit 0
fi
stopfile=
task=
steps=0
tasks=
for a in "$@" --; do
  case $a in
    --stop-file=*) stopfile=${a#--stop-file=} ;;
    --task=*) task=${a#--task=} ;;
    --steps=*) steps=${a#--steps=} ;;
    --) if [ "$steps" -gt 0 ]; then tasks="$tasks $task:$steps"; fi; task=; steps=0 ;;
  esac
done
tag() { if [ -n "$1" ]; then echo "\"task\":\"$1\","; fi; }
)sh";

// profile: 100 samples/s. train: its --steps at 100 samples/s. gang: each
// task reports twice at GANG_SPEED samples/s and completes, `pause_s` seconds
// after the one before it.
inline std::string FakeGangWorker(int gang_speed, const std::string& pause_s = "0") {
  return std::string(kFakeWorkerPrelude) + R"sh(speed=100
if [ "$mode" = gang ]; then speed=)sh" +
         std::to_string(gang_speed) + R"sh(; fi
for t in $tasks; do
  sleep )sh" +
         pause_s + R"sh(
  name=${t%%:*}
  steps=${t##*:}
  echo "{$(tag "$name")\"event\":\"start\",\"steps\":$steps,\"global_batch\":8,\"resumed_from_step\":null}"
  echo "{$(tag "$name")\"event\":\"progress\",\"step\":$((steps / 2)),\"steps\":$steps,\"loss\":1.5,\"samples_per_s\":$speed}"
  echo "{$(tag "$name")\"event\":\"progress\",\"step\":$steps,\"steps\":$steps,\"loss\":1.5,\"samples_per_s\":$speed}"
  echo "{$(tag "$name")\"event\":\"done\",\"status\":\"completed\",\"step\":$steps,\"loss\":1.5}"
done
)sh";
}

// Spilled MLP tasks on one device, one per learning rate of `grid` (a YAML
// list), named `name`.
inline std::string SpilledSweepJob(const std::string& name,
                                   const std::string& grid = "[0.1, 0.2, 0.3, 0.4]") {
  return R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: )" +
         name + R"(}
spec:
  tasks:
  - name: mlp
    model: {mlp: {layers: 2, hidden: 8, inputs: 4, outputs: 2}}
    data: {synthetic: {seed: 1, samples: 1000}}
    training: {steps: 100, batchSize: 8, optimizer: sgd, learningRate: 0.1}
    searchSpace:
      grid: {learningRate: )" +
         grid + R"(}
  resources:
    templates: [spill]
    gpusPerTask: {min: 1, max: 1}
    gpuQuota: 1
  profiling: {trialSteps: 3}
)";
}

}  // namespace orrery::local::testing
