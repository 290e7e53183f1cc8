// Objects shared by the controller tests: a loaded job with a grid of tasks, and
// a builder for observed pods (what the informer cache would hold), so a test
// reads as MakePod(gang_pod).Phase("Failed").Terminated("OOMKilled", 137).
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "operator/api/load.h"
#include "operator/api/yaml.h"

namespace orrery::controller::testing {

using api::Json;

// Two spec tasks: "mlp" with a 2-point learning-rate grid, and "gpt".
inline const char* kJobYaml = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: sweep
  namespace: team-a
  uid: 6f1d2c3a-0000-4000-8000-000000000001
  generation: 2
spec:
  tasks:
  - name: mlp
    model:
      mlp: {layers: 2, hidden: 32, inputs: 16, outputs: 4}
    data:
      synthetic: {seed: 3}
    training:
      steps: 100
      batchSize: 16
      learningRate: 1e-3
    searchSpace:
      grid:
        learningRate: [1e-3, 3e-4]
  - name: gpt
    model:
      gpt: {layers: 2, hidden: 64, heads: 4, seqLen: 32, vocab: 256}
    data:
      synthetic: {seed: 1}
    training:
      steps: 50
      batchSize: 8
      learningRate: 1e-3
  resources:
    gpuQuota: 8
    nodeSelector: {orrery.dev/pool: gpu}
    tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  checkpoints:
    claimName: sweep-ckpt
    path: /ckpt
)";

// Fine-tunes (issue 19): "llama", a LoRA rank grid over a pre-trained model on
// the claim "models", exporting onto the claim "results"; "gpt2", a layer-wise
// fine-tune of a model in the image, exporting under the checkpoint claim.
inline const char* kFineTuneJobYaml = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: tune
  namespace: team-a
  uid: 6f1d2c3a-0000-4000-8000-000000000002
  generation: 1
spec:
  tasks:
  - name: llama
    model:
      pretrained: {path: llama-3.2-1b, seqLen: 512, volume: {claimName: models}}
    data:
      tokens: {path: /models/corpus.u32, dtype: uint32}
    training: {steps: 100, batchSize: 8, learningRate: 1e-4}
    fineTuning:
      lora: {targets: [q_proj, v_proj]}
    output:
      path: runs/{task}
      dtype: bfloat16
      volume: {claimName: results}
    searchSpace:
      grid: {loraRank: [4, 8]}
  - name: gpt2
    model:
      pretrained: {path: /opt/models/gpt2, seqLen: 1024}
    data:
      synthetic: {seed: 1}
    training: {steps: 50, batchSize: 8, learningRate: 1e-4}
    fineTuning: {freezeEmbeddings: true, freezeBlocks: 4}
    output:
      path: /ckpt/models/gpt2
  resources:
    gpuQuota: 8
  checkpoints:
    claimName: tune-ckpt
    path: /ckpt
)";

inline api::LoadedJob LoadJob(const std::string& yaml = kJobYaml) {
  auto json = api::YamlToJson(yaml);
  EXPECT_TRUE(json.ok()) << json.status();
  auto loaded = api::LoadJob(*json);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *loaded : api::LoadedJob{};
}

// A pod as observed: the built pod plus a status.
class MakePod {
 public:
  explicit MakePod(Json pod) : pod_(std::move(pod)) {}
  MakePod& Phase(const std::string& phase) {
    pod_["status"]["phase"] = phase;
    return *this;
  }
  MakePod& Node(const std::string& node) {
    pod_["spec"]["nodeName"] = node;
    return *this;
  }
  MakePod& Reason(const std::string& reason) {
    pod_["status"]["reason"] = reason;
    return *this;
  }
  MakePod& Deleting() {
    pod_["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    return *this;
  }
  MakePod& Terminated(const std::string& reason, int exit_code, const std::string& message = "",
                      const std::string& finished_at = "2026-01-02T03:04:05Z") {
    pod_["status"]["containerStatuses"] = Json::array({{{"name", "worker"},
                                                        {"state",
                                                         {{"terminated",
                                                           {{"reason", reason},
                                                            {"exitCode", exit_code},
                                                            {"message", message},
                                                            {"finishedAt", finished_at}}}}}}});
    return *this;
  }
  operator Json() const { return pod_; }  // NOLINT(google-explicit-constructor)
  Json json() const { return pod_; }

 private:
  Json pod_;
};

}  // namespace orrery::controller::testing
