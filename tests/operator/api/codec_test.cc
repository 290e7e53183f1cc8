// Codec: round-trips of every field, strict decoding with field paths.
#include "operator/api/codec.h"

#include <gtest/gtest.h>

#include "tests/operator/api/test_jobs.h"

namespace orrery::api {
namespace {

std::vector<FieldError> DecodeErrors(const std::string& yaml) {
  auto json = YamlToJson(yaml);
  EXPECT_TRUE(json.ok()) << json.status();
  ModelSelectionJob job;
  std::vector<FieldError> errors;
  DecodeJob(*json, &job, &errors);
  return errors;
}

bool HasError(const std::vector<FieldError>& errors, const std::string& path,
              const std::string& text) {
  for (const auto& e : errors) {
    if (e.path == path && FormatFieldError(e).find(text) != std::string::npos) return true;
  }
  return false;
}

std::string Dump(const std::vector<FieldError>& errors) {
  std::string s;
  for (const auto& e : errors) s += FormatFieldError(e) + "\n";
  return s;
}

TEST(CodecTest, FullJobRoundTripsThroughJson) {
  ModelSelectionJob job = testing::FullJob();
  auto back = JobFromJsonText(JobToJson(job));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, job);
}

TEST(CodecTest, FullJobRoundTripsThroughYaml) {
  ModelSelectionJob job = testing::FullJob();
  std::string yaml = JobToYaml(job);
  auto back = JobFromYaml(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, job) << yaml;
  // And the text is stable: encoding the decoded job gives the same YAML.
  EXPECT_EQ(JobToYaml(*back), yaml);
}

TEST(CodecTest, DecodesTheMinimalManifestWithDefaults) {
  auto job = JobFromYaml(testing::kMinimalYaml);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata.name, "small");
  ASSERT_EQ(job->spec.tasks.size(), 1u);
  const TaskSpec& t = job->spec.tasks[0];
  ASSERT_TRUE(t.model.mlp.has_value());
  EXPECT_EQ(t.model.mlp->hidden, 32);
  EXPECT_FALSE(t.model.gpt.has_value());
  EXPECT_EQ(t.data.synthetic->seed, 3);
  EXPECT_EQ(t.data.synthetic->vocab_size, kDefaultSyntheticVocabSize);
  EXPECT_EQ(*t.training.steps, 100);
  EXPECT_FALSE(t.training.epochs.has_value());
  EXPECT_DOUBLE_EQ(t.training.learning_rate, 1e-3);
  EXPECT_EQ(t.training.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(job->spec.resources.gpu_quota, 4);
  EXPECT_EQ(job->spec.resources.templates.size(), 5u);
  EXPECT_EQ(job->spec.resources.gpu_resource_name, "nvidia.com/gpu");
  EXPECT_FALSE(job->status.has_value());
}

TEST(CodecTest, UnknownFieldsAreErrorsWithPathAndSuggestion) {
  auto errors = DecodeErrors(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: x}
spec:
  tasks:
  - name: a
    model: {mlp: {layers: 1, hidden: 1, inputs: 1, outputs: 1, dropout: 0.1}}
    data: {synthetic: {}}
    training: {steps: 1, batchSize: 1, learningRate: 0.1, learningrate: 0.2}
  resources: {gpuQuota: 1}
  extra: true
)");
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].model.mlp.dropout", "unknown field \"dropout\""))
      << Dump(errors);
  EXPECT_TRUE(
      HasError(errors, "spec.tasks[0].training.learningrate", "did you mean \"learningRate\"?"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.extra", "unknown field")) << Dump(errors);
  EXPECT_EQ(errors.size(), 3u) << Dump(errors);
}

TEST(CodecTest, WrongTypesAndMissingRequiredFields) {
  auto errors = DecodeErrors(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: x}
spec:
  tasks:
  - name: 7
    model: {gpt: {layers: two, hidden: 1, heads: 1, seqLen: 1}}
    data: {tokens: {path: p, dtype: int8}}
    training: {steps: 1.5, batchSize: "8"}
  resources: {gpuQuota: 1, templates: ddp, nodeSelector: {a: 1}}
  suspend: "no"
)");
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].name", "must be a string")) << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].model.gpt.layers", "must be an integer"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].model.gpt.vocab", "required value")) << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].data.tokens.dtype", "use one of: uint16, uint32"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].training.steps", "must be an integer"))
      << Dump(errors);
  EXPECT_TRUE(
      HasError(errors, "spec.tasks[0].training.batchSize", "must be an integer, not a string"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].training.learningRate", "required value"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.resources.templates", "must be a list")) << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.resources.nodeSelector[a]", "must be a string"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.suspend", "must be a boolean")) << Dump(errors);
}

TEST(CodecTest, IntegralFloatsAreIntegersAsTheServerAccepts) {
  auto json = YamlToJson(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: x}
spec:
  tasks:
  - name: a
    model: {mlp: {layers: 1, hidden: 1, inputs: 1, outputs: 1}}
    data: {synthetic: {}}
    training: {steps: 1e5, batchSize: 32.0, learningRate: 1}
  resources: {gpuQuota: 1}
)");
  auto job = JobFromJson(*json);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(*job->spec.tasks[0].training.steps, 100000);
  EXPECT_EQ(job->spec.tasks[0].training.batch_size, 32);
  EXPECT_DOUBLE_EQ(job->spec.tasks[0].training.learning_rate, 1.0);
}

TEST(CodecTest, OutOfRangeIntegersAreErrors) {
  auto errors = DecodeErrors(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: x}
spec:
  tasks: []
  resources: {gpuQuota: 99999999999}
)");
  EXPECT_TRUE(HasError(errors, "spec.resources.gpuQuota", "too large")) << Dump(errors);
}

TEST(CodecTest, NullMeansUnset) {
  auto json = YamlToJson(std::string(testing::kMinimalYaml) + "  scheduling: ~\n");
  auto job = JobFromJson(*json);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.scheduling, SchedulingSpec{});
}

TEST(CodecTest, MetadataFromTheServerIsKept) {
  auto json = Json::parse(R"({"apiVersion": "orrery.dev/v1alpha1", "kind": "ModelSelectionJob",
    "metadata": {"name": "j", "namespace": "ns", "generation": 4, "uid": "u",
                 "managedFields": [{"manager": "kubectl"}], "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"tasks": [], "resources": {"gpuQuota": 1}}})");
  auto job = JobFromJson(json);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata.generation, 4);
  EXPECT_EQ(job->metadata.namespace_, "ns");
  Json out = EncodeJob(*job);
  EXPECT_EQ(out["metadata"]["managedFields"][0]["manager"], "kubectl");
  EXPECT_EQ(out["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
}

TEST(CodecTest, StatusDecodesStrictly) {
  Json status = EncodeStatus(testing::FullJob().status.value());
  ModelSelectionJobStatus decoded;
  std::vector<FieldError> errors;
  DecodeStatus(status, "status", &decoded, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_EQ(decoded, *testing::FullJob().status);
  status["tasks"][0]["state"] = "Sleeping";
  status["bogus"] = 1;
  errors.clear();
  DecodeStatus(status, "status", &decoded, &errors);
  EXPECT_TRUE(HasError(errors, "status.tasks[0].state", "unsupported value \"Sleeping\""))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "status.bogus", "unknown field")) << Dump(errors);
}

TEST(CodecTest, LastCheckpointSamplesRoundTripAndAreZeroWhenAbsent) {
  ModelSelectionJobStatus status = *testing::FullJob().status;
  ASSERT_TRUE(status.tasks[0].last_checkpoint.has_value());
  status.tasks[0].last_checkpoint->samples = 5120;
  Json json = EncodeStatus(status);
  EXPECT_EQ(json["tasks"][0]["lastCheckpoint"]["samples"], 5120);
  ModelSelectionJobStatus decoded;
  std::vector<FieldError> errors;
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_EQ(decoded, status);

  // A status an older operator wrote has no samples: 0, "not reported".
  json["tasks"][0]["lastCheckpoint"].erase("samples");
  decoded = {};
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  ASSERT_TRUE(decoded.tasks[0].last_checkpoint.has_value());
  EXPECT_EQ(decoded.tasks[0].last_checkpoint->samples, 0);
  EXPECT_EQ(decoded.tasks[0].last_checkpoint->step, 10);

  json["tasks"][0]["lastCheckpoint"]["samples"] = "many";
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(HasError(errors, "status.tasks[0].lastCheckpoint.samples", "")) << Dump(errors);
}

TEST(CodecTest, SaveAndRestoreFiguresRoundTripAndAreZeroWhenAbsent) {
  ModelSelectionJobStatus status = *testing::FullJob().status;
  Json json = EncodeStatus(status);
  const Json& t = json["tasks"][0];
  EXPECT_EQ(t["lastCheckpoint"]["bytesWritten"], 6100000);
  EXPECT_EQ(t["lastCheckpoint"]["peakRssBytes"], 230000000);
  EXPECT_EQ(t["lastRestore"]["step"], 8);
  EXPECT_EQ(t["lastRestore"]["bytesRead"], 6150000);
  EXPECT_EQ(t["lastRestore"]["generation"], 1);
  EXPECT_EQ(t["lastRestore"]["fromLayout"], "fsdp dp=4,tp=1,pp=1,fsdp=4");
  EXPECT_EQ(t["lastRestore"]["layout"], "hybrid dp=1,tp=2,pp=2,fsdp=1");
  ModelSelectionJobStatus decoded;
  std::vector<FieldError> errors;
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_EQ(decoded, status);

  // A restore whose step no scrape caught has none: absent, and -1 read back.
  status.tasks[0].last_restore->step = -1;
  json = EncodeStatus(status);
  EXPECT_FALSE(json["tasks"][0]["lastRestore"].contains("step"));
  decoded = {};
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_EQ(decoded, status);

  // A status an older operator wrote: no figures (0) and no restore.
  json["tasks"][0].erase("lastRestore");
  for (const char* k : {"seconds", "bytesWritten", "bytesNeeded", "peakRssBytes"}) {
    json["tasks"][0]["lastCheckpoint"].erase(k);
  }
  decoded = {};
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_FALSE(decoded.tasks[0].last_restore.has_value());
  EXPECT_EQ(decoded.tasks[0].last_checkpoint->bytes_written, 0);
  EXPECT_EQ(decoded.tasks[0].last_checkpoint->seconds, 0);

  json["tasks"][0]["lastRestore"] = {{"bytesRead", "lots"}};
  DecodeStatus(json, "status", &decoded, &errors);
  EXPECT_TRUE(HasError(errors, "status.tasks[0].lastRestore.bytesRead", "")) << Dump(errors);
}

TEST(CodecTest, DecodesPretrainedFineTuningAndOutput) {
  auto job = JobFromYaml(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: ft}
spec:
  tasks:
  - name: llama
    model:
      pretrained:
        path: llama-3.2-1b
        seqLen: 1024
        volume: {claimName: models}
    data:
      text: {path: /models/corpus.txt, tokenizer: /models/llama-3.2-1b}
    training: {steps: 10, batchSize: 8, learningRate: 1e-4}
    fineTuning:
      lora: {rank: 8, targets: [q_proj, v_proj]}
    output:
      path: /outputs/{task}
      dtype: bfloat16
      mergeLora: true
      volume: {claimName: results, mountPath: /results}
    searchSpace:
      grid: {loraRank: [4, 8], freezeBlocks: [0]}
  resources: {gpuQuota: 1}
)");
  ASSERT_TRUE(job.ok()) << job.status();
  const TaskSpec& t = job->spec.tasks[0];
  ASSERT_TRUE(t.model.pretrained);
  EXPECT_EQ(t.model.pretrained->path, "llama-3.2-1b");
  EXPECT_EQ(t.model.pretrained->seq_len, 1024);
  ASSERT_TRUE(t.model.pretrained->volume);
  EXPECT_EQ(t.model.pretrained->volume->claim_name, "models");
  EXPECT_EQ(t.model.pretrained->volume->mount_path, kDefaultModelMountPath);  // defaulted
  EXPECT_EQ(t.data.text->tokenizer, "/models/llama-3.2-1b");
  ASSERT_TRUE(t.fine_tuning && t.fine_tuning->lora);
  EXPECT_EQ(t.fine_tuning->lora->rank, 8);
  EXPECT_DOUBLE_EQ(t.fine_tuning->lora->alpha, kDefaultLoraAlpha);
  EXPECT_EQ(t.fine_tuning->lora->targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_FALSE(t.fine_tuning->freeze_embeddings);
  EXPECT_EQ(t.fine_tuning->freeze_blocks, 0);
  ASSERT_TRUE(t.output);
  EXPECT_EQ(t.output->path, "/outputs/{task}");
  EXPECT_EQ(t.output->dtype, ExportDtype::kBfloat16);
  EXPECT_TRUE(t.output->merge_lora);
  EXPECT_EQ(t.output->volume->mount_path, "/results");
  EXPECT_EQ(t.search_space->grid->lora_rank, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(t.search_space->grid->freeze_blocks, (std::vector<int64_t>{0}));
  // And back: the encoding decodes to the same job.
  auto back = JobFromJsonText(JobToJson(*job));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *job);
}

TEST(CodecTest, FineTuningFieldsDecodeStrictly) {
  auto errors = DecodeErrors(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: ft}
spec:
  tasks:
  - name: llama
    model: {pretrained: {path: m, volume: {mountPath: /m}}}
    data: {synthetic: {}}
    training: {steps: 10, batchSize: 8, learningRate: 1e-4}
    fineTuning: {freezeBlock: 2, lora: {rank: "8", targets: q_proj}}
    output: {path: o, dtype: fp16}
  resources: {gpuQuota: 1}
)");
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].model.pretrained.seqLen", "required value"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].model.pretrained.volume.claimName", "required value"))
      << Dump(errors);
  EXPECT_TRUE(
      HasError(errors, "spec.tasks[0].fineTuning.freezeBlock", "did you mean \"freezeBlocks\"?"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].fineTuning.lora.rank", "must be an integer"))
      << Dump(errors);
  EXPECT_TRUE(HasError(errors, "spec.tasks[0].fineTuning.lora.targets", "must be a list"))
      << Dump(errors);
  EXPECT_TRUE(
      HasError(errors, "spec.tasks[0].output.dtype", "use one of: float32, bfloat16, float16"))
      << Dump(errors);
}

TEST(CodecTest, ExportPathRoundTripsAndIsAbsentWhenEmpty) {
  ModelSelectionJobStatus st;
  TaskStatus t;
  t.name = "a";
  st.tasks = {t};
  EXPECT_FALSE(EncodeStatus(st)["tasks"][0].contains("exportPath"));
  st.tasks[0].export_path = "/outputs/a";
  Json j = EncodeStatus(st);
  EXPECT_EQ(j["tasks"][0]["exportPath"], "/outputs/a");
  ModelSelectionJobStatus back;
  std::vector<FieldError> errors;
  DecodeStatus(j, "status", &back, &errors);
  EXPECT_TRUE(errors.empty()) << Dump(errors);
  EXPECT_EQ(back, st);
}

TEST(CodecTest, TopLevelMustBeAnObject) {
  ModelSelectionJob job;
  std::vector<FieldError> errors;
  DecodeJob(Json::array(), &job, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].message, "must be an object, not a list");
}

}  // namespace
}  // namespace orrery::api
