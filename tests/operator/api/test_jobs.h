// Jobs shared by the API tests: a small valid manifest, and a job with every
// optional field set (so a walk over its JSON visits every field the codec knows).
#pragma once

#include <string>

#include "operator/api/types.h"

namespace orrery::api::testing {

inline const char* kMinimalYaml = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata:
  name: small
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
  resources:
    gpuQuota: 4
)";

inline ModelSelectionJob FullJob() {
  ModelSelectionJob job;
  job.metadata.name = "full";
  job.metadata.namespace_ = "team-a";
  job.metadata.uid = "0b7c";
  job.metadata.resource_version = "42";
  job.metadata.generation = 3;
  job.metadata.labels = {{"app", "sweep"}};
  job.metadata.annotations = {{"note", "x"}};
  job.metadata.extra_json = R"({"creationTimestamp":"2026-01-01T00:00:00Z"})";

  TaskSpec t;
  t.name = "gpt";
  t.weight = 2.5;
  t.model.gpt = GptModel{4, 256, 8, 128, 1000};
  t.model.mlp = MlpModel{2, 64, 32, 10};
  t.model.torchscript = TorchScriptModel{"models/m.pt"};
  t.model.pretrained = PretrainedModel{"llama-3.2-1b", 2048, ModelVolume{"models", "/models"}};
  t.data.tokens = TokenData{"/data/a.u32", TokenDtype::kUint32};
  t.data.text = TextData{"data/corpus/quickstart.txt", "/models/llama-3.2-1b"};
  t.data.synthetic = SyntheticData{9, 512, 1000};
  t.training.steps = 1000;
  t.training.epochs = 2;
  t.training.batch_size = 64;
  t.training.optimizer = Optimizer::kSgd;
  t.training.learning_rate = 3e-4;
  t.training.weight_decay = 0.01;
  t.training.momentum = 0.8;
  t.training.schedule = LrSchedule::kCosine;
  t.training.warmup_steps = 10;
  t.fine_tuning = FineTuningSpec{true, 2, LoraSpec{8, 32, {"q_proj", "v_proj"}}};
  t.output = OutputSpec{"/outputs/{task}", ExportDtype::kBfloat16, true,
                        OutputVolume{"results", "/outputs"}};
  SearchSpace s;
  s.grid =
      GridSpace{{1e-4, 3e-4}, {32, 64}, {0.0, 0.1}, {0, 100}, {Optimizer::kAdam, Optimizer::kAdamW},
                {4, 8},       {0, 2}};
  Distribution d;
  d.min = 1e-5;
  d.max = 1e-3;
  d.log_scale = true;
  d.values = {1e-4, 2e-4};
  s.random = RandomSpace{7, 5, d, d, d, d, d, d};
  t.search_space = s;
  t.gpu_types = {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"};
  job.spec.tasks.push_back(t);

  ResourcesSpec& r = job.spec.resources;
  r.templates = {Template::kDdp, Template::kSpill};
  r.gpus_per_task = {2, 4};
  r.gpu_quota = 16;
  r.gpu_resource_name = "amd.com/gpu";
  r.node_selector = {{"pool", "a100"}};
  r.tolerations = {Toleration{"gpu", "Equal", "yes", "NoSchedule", 30}};
  r.image = "worker:dev";
  job.spec.scheduling = {Objective::kWeightedCompletionTime, 60, 120, 0.2, 90, true};
  job.spec.profiling = {5, {2, 4}, false};
  job.spec.elasticity = {true, 16, 256, LrScaling::kSqrt};
  job.spec.checkpoints = {"ckpt", "/ck", 50, 4};
  job.spec.suspend = true;

  ModelSelectionJobStatus st;
  st.phase = Phase::kRunning;
  st.observed_generation = 3;
  st.conditions = {
      Condition{"Ready", "True", 3, "2026-01-01T00:00:00Z", "Planned", "plan adopted"}};
  st.plan = PlanStatus{3600, 3000, 0.1667, 1.5, 2, "throughput-drift"};
  TaskStatus ts;
  ts.name = "gpt-r0";
  ts.state = TaskState::kRunning;
  ts.config =
      TaskConfig{Template::kFsdp, 4, 64, {"node-a", "node-b"}, "unit", "NVIDIA-H100-80GB-HBM3"};
  ts.steps_done = 10;
  ts.steps_total = 100;
  ts.progress = 0.1;
  ts.samples_per_second = 123.5;
  ts.eta_seconds = 900;
  ts.last_checkpoint = CheckpointRef{10, "/ck/gpt-r0/10", "2026-01-01T00:10:00Z"};
  ts.last_checkpoint->seconds = 0.25;
  ts.last_checkpoint->bytes_written = 6100000;
  ts.last_checkpoint->bytes_needed = 6100000;
  ts.last_checkpoint->peak_rss_bytes = 230000000;
  RestoreRef restore;
  restore.generation = 1;
  restore.step = 8;
  restore.time = "2026-01-01T00:09:00Z";
  restore.seconds = 0.125;
  restore.bytes_read = 6150000;
  restore.bytes_needed = 6150000;
  restore.peak_rss_bytes = 210000000;
  restore.from_layout = "fsdp dp=4,tp=1,pp=1,fsdp=4";
  restore.layout = "hybrid dp=1,tp=2,pp=2,fsdp=1";
  ts.last_restore = restore;
  ts.export_path = "/outputs/gpt-r0";
  ts.restarts = 1;
  ts.message = "rescaled from 2 to 4 GPUs";
  st.tasks = {ts};
  st.task_summary = "0/5";
  st.gpus_held = 4;
  st.eta = "15m";
  job.status = st;
  return job;
}

}  // namespace orrery::api::testing
