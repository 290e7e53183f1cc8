// The estimate of a pre-trained model: config.json parsed without torch, the
// parameters counted as the architectures have them (checked against the sizes
// the models are published with), and what fine-tuning trains, computes and
// holds. The configs are the models' public config.json values, written inline.
#include "operator/engine/estimate.h"

#include <cmath>

#include <gtest/gtest.h>

#include "operator/api/load.h"

namespace orrery::engine {
namespace {

// openai-community/gpt2 (GPT-2 small).
const char* kGpt2Small = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
  "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
  "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
  "resid_pdrop": 0.1, "vocab_size": 50257})";

// meta-llama/Llama-2-7b-hf.
const char* kLlama2_7b = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16", "vocab_size": 32000})";

// Qwen/Qwen2-0.5B.
const char* kQwen2_05b = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
  "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 131072,
  "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

PretrainedShape Parse(const char* json) {
  auto s = ParsePretrainedConfig(json, "config.json");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : PretrainedShape{};
}

// A task fine-tuning the model at /models/m with `fine_tuning` (YAML), or none.
api::TaskSpec Task(const std::string& fine_tuning = "", int seq = 512) {
  std::string yaml = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: e}
spec:
  tasks:
  - name: t
    model: {pretrained: {path: /models/m, seqLen: )" +
                     std::to_string(seq) + R"(}}
    data: {synthetic: {}}
    training: {steps: 10, batchSize: 4, learningRate: 1e-4}
)" + (fine_tuning.empty() ? "" : "    fineTuning: " + fine_tuning + "\n") +
                     "  resources: {gpuQuota: 8}\n";
  auto job = api::LoadJobText(yaml);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? job->tasks[0].task : api::TaskSpec{};
}

TEST(PretrainedConfig, ParsesTheFieldsThatSizeTheModel) {
  PretrainedShape g = Parse(kGpt2Small);
  EXPECT_EQ(g.model_type, "gpt2");
  EXPECT_EQ(g.Family(), "gpt2");
  EXPECT_EQ(g.layers, 12);
  EXPECT_EQ(g.intermediate, 3072);  // n_inner absent: 4 x n_embd
  EXPECT_EQ(g.positions, 1024);
  EXPECT_TRUE(g.tie_embeddings);  // GPT-2's default
  PretrainedShape q = Parse(kQwen2_05b);
  EXPECT_EQ(q.Family(), "llama");
  EXPECT_EQ(q.kv_heads, 2);
  EXPECT_EQ(q.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.out_bias);
  EXPECT_TRUE(q.tie_embeddings);
  // model_type may be left to `architectures`.
  auto from_arch = ParsePretrainedConfig(
      R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
          "vocab_size": 100})",
      "c");
  ASSERT_TRUE(from_arch.ok()) << from_arch.status();
  EXPECT_EQ(from_arch->model_type, "mistral");
}

TEST(PretrainedConfig, ErrorsNameTheFileAndTheField) {
  auto not_json = ParsePretrainedConfig("{", "/m/config.json");
  EXPECT_NE(not_json.status().message().find("/m/config.json: not a JSON object"),
            std::string::npos);
  auto bert = ParsePretrainedConfig(R"({"model_type": "bert"})", "/m/config.json");
  EXPECT_NE(bert.status().message().find("model_type 'bert' is not supported"), std::string::npos);
  auto missing = ParsePretrainedConfig(R"({"model_type": "gpt2", "n_embd": 8})", "c");
  EXPECT_NE(missing.status().message().find("n_layer is missing"), std::string::npos);
  auto bad = ParsePretrainedConfig(
      R"({"model_type": "llama", "num_hidden_layers": "2", "hidden_size": 8})", "c");
  EXPECT_NE(bad.status().message().find("num_hidden_layers must be a non-negative integer"),
            std::string::npos);
}

TEST(CountParameters, MatchesThePublishedSizes) {
  const api::TaskSpec t = Task();
  const PretrainedShape gpt2 = Parse(kGpt2Small), llama = Parse(kLlama2_7b),
                        qwen = Parse(kQwen2_05b);
  // GPT-2 small's 124,439,808 count its tied head once.
  EXPECT_EQ(ModelParameters(t, &gpt2), 124439808.0);
  EXPECT_EQ(ModelParameters(t, &llama), 6738415616.0);
  EXPECT_EQ(ModelParameters(t, &qwen), 494032768.0);
  // The worker keeps a tied head as a second tensor (its gradient summed into
  // the embedding's): memory counts it twice.
  ParameterCount g = CountParameters(t, &gpt2);
  EXPECT_EQ(g.stored, 124439808.0 + 50257.0 * 768);
  EXPECT_EQ(g.stored_trainable, g.stored);
  EXPECT_EQ(g.trainable, g.total);
  EXPECT_EQ(g.backward, g.total);
  EXPECT_EQ(CountParameters(t, &llama).stored, 6738415616.0);
  EXPECT_NE(g.label.find("gpt2 config.json: 124.44M parameters, all trained"), std::string::npos)
      << g.label;
}

TEST(CountParameters, LoraTrainsOnlyItsAdapters) {
  const PretrainedShape llama = Parse(kLlama2_7b), gpt2 = Parse(kGpt2Small),
                        qwen = Parse(kQwen2_05b);
  // PEFT's print_trainable_parameters for Llama-2-7B, r=8 on q_proj and v_proj:
  // 8 x (4096 + 4096) x 2 x 32 = 4,194,304.
  ParameterCount l = CountParameters(Task("{lora: {rank: 8, targets: [q_proj, v_proj]}}"), &llama);
  EXPECT_EQ(l.trainable, 4194304.0);
  EXPECT_EQ(l.total, 6738415616.0 + 4194304.0);
  // Activation gradients flow back to the first block (the embedding is a
  // lookup that needs none).
  EXPECT_EQ(l.backward, l.total - 32000.0 * 4096);
  EXPECT_NE(l.label.find("4.19M trained (LoRA r=8)"), std::string::npos) << l.label;
  // PEFT's defaults: q_proj, v_proj for Llama; GPT-2's c_attn, one A for the
  // fused projection: 8 x (768 + 3 x 768) x 12 = 294,912.
  EXPECT_EQ(CountParameters(Task("{lora: {rank: 8}}"), &llama).trainable, 4194304.0);
  EXPECT_EQ(CountParameters(Task("{lora: {rank: 8}}"), &gpt2).trainable, 294912.0);
  // GPT-2's c_proj is two projections; attn.c_proj picks one.
  EXPECT_EQ(CountParameters(Task("{lora: {rank: 4, targets: [c_proj]}}"), &gpt2).trainable,
            12 * 4 * ((768.0 + 768) + (3072.0 + 768)));
  EXPECT_EQ(CountParameters(Task("{lora: {rank: 4, targets: [attn.c_proj]}}"), &gpt2).trainable,
            12 * 4 * (768.0 + 768));
  // Grouped-query attention: k and v project to kv_heads x head_dim = 128 rows.
  EXPECT_EQ(CountParameters(Task("{lora: {rank: 2, targets: [k_proj, o_proj, down_proj]}}"), &qwen)
                .trainable,
            24 * 2 * ((896.0 + 128) + (896.0 + 896) + (4864.0 + 896)));
}

TEST(CountParameters, FrozenEmbeddingsAndBlocks) {
  const PretrainedShape gpt2 = Parse(kGpt2Small), llama = Parse(kLlama2_7b);
  const double gpt2_block = 7087872, gpt2_embedding = 50257.0 * 768 + 1024.0 * 768;
  ParameterCount g = CountParameters(Task("{freezeEmbeddings: true, freezeBlocks: 4}"), &gpt2);
  EXPECT_EQ(g.trainable, 124439808.0 - gpt2_embedding - 4 * gpt2_block);
  // Backward starts at block 5; the tied head's matmul is on the way.
  EXPECT_EQ(g.backward,
            124439808.0 - 1024.0 * 768 - 50257.0 * 768 - 4 * gpt2_block + 50257.0 * 768);
  // The tied head is frozen with the embedding: neither copy has a gradient.
  EXPECT_EQ(g.stored_trainable, g.trainable);
  // Blocks alone: the embedding still trains, so backward runs everywhere.
  ParameterCount b = CountParameters(Task("{freezeBlocks: 30}"), &llama);
  const double llama_block = 202383360;
  EXPECT_EQ(b.trainable, 6738415616.0 - 30 * llama_block);
  EXPECT_EQ(b.backward, b.total);
  EXPECT_NE(b.label.find("(first 30 blocks frozen)"), std::string::npos) << b.label;
}

TEST(EstimateConfig, FineTuningSplitsTheSixFlopsAndTheBytes) {
  const PretrainedShape llama = Parse(kLlama2_7b);
  DeviceModel gpu = DefaultDevice("cuda");
  const api::TaskSpec full = Task("", 512), lora = Task("{lora: {rank: 8}}", 512);
  auto f = EstimateConfig(full, "fsdp", 8, gpu, &llama);
  auto l = EstimateConfig(lora, "fsdp", 8, gpu, &llama);
  ASSERT_TRUE(f && l);
  const double n = 6738415616.0, efficiency = std::pow(0.9, 3);
  // Full training: 6N per token.
  EXPECT_NEAR(f->throughput, gpu.flops * 8 * efficiency / (6 * n * 512), 1e-9 * f->throughput);
  // LoRA: 2N forward, 2N' backward through the blocks, 2 x adapters of weight
  // gradients; under fsdp 8 bytes per frozen parameter (its weight and its
  // share of the flat gradient shard; no optimizer slots), 16 per trained one.
  const ParameterCount c = CountParameters(lora, &llama);
  EXPECT_NEAR(l->throughput,
              gpu.flops * 8 * efficiency / ((2 * c.total + 2 * c.backward + 2 * c.trainable) * 512),
              1e-9 * l->throughput);
  EXPECT_GT(l->throughput, 1.4 * f->throughput);
  // Each on a GPU also holds cuBLAS's workspaces (kCudaWorkspaceBytes); the
  // model's bytes carry its headroom (kModelHeadroom).
  const double gib = 1ull << 30, workspace = kCudaWorkspaceBytes / gib, k = kModelHeadroom;
  EXPECT_NEAR(f->memory_gib, k * 16 * n / 8 / gib + workspace, 1e-9);
  EXPECT_NEAR(l->memory_gib,
              k * (8 * (c.total - c.trainable) + 16 * c.trainable) / 8 / gib + workspace, 1e-9);
  // Templates that hold parameters whole keep nothing but the frozen weight:
  // LoRA on 7B fits one 80 GB device (4 bytes a parameter), full training does not.
  auto l1 = EstimateConfig(lora, "ddp", 1, gpu, &llama);
  auto f1 = EstimateConfig(full, "ddp", 1, gpu, &llama);
  ASSERT_TRUE(l1 && f1);
  EXPECT_NEAR(l1->memory_gib,
              k * (4 * (c.total - c.trainable) + 16 * c.trainable) / gib + workspace, 1e-9);
  EXPECT_LT(l1->memory_gib, 80);
  EXPECT_GT(f1->memory_gib, 80);
  // Tensor parallelism must split heads, kv heads and the MLP: Qwen2-0.5B's two
  // kv heads do not split four ways.
  const PretrainedShape qwen = Parse(kQwen2_05b);
  EXPECT_TRUE(EstimateConfig(full, "tensor", 2, gpu, &qwen));
  EXPECT_FALSE(EstimateConfig(full, "tensor", 4, gpu, &qwen));
  EXPECT_TRUE(EstimateConfig(full, "pipeline", 8, gpu, &qwen));
  EXPECT_FALSE(EstimateConfig(full, "pipeline", 32, gpu, &qwen));  // 24 blocks
}

TEST(EstimateConfig, UnknownSizeWaitsForAProfile) {
  const api::TaskSpec t = Task();
  ParameterCount c = CountParameters(t, nullptr, "is not readable here (it is on volume models)");
  EXPECT_EQ(c.total, 0);
  EXPECT_EQ(c.label,
            "size unknown: /models/m/config.json is not readable here (it is on volume models); "
            "only profiles measure this model");
  EXPECT_FALSE(EstimateConfig(t, "ddp", 1, DefaultDevice("cuda")));
}

api::TaskSpec Gpt(int layers, int hidden, int heads, int seq, int vocab, int64_t batch) {
  api::TaskSpec t;
  t.model.gpt = api::GptModel{layers, hidden, heads, seq, vocab};
  t.training.batch_size = batch;
  return t;
}

TEST(ActivationBytes, AddTheBackwardsPeakBeyondTheStepsNotEveryActivationToEveryGradient) {
  // One block of GPT-2's width on 8 tokens, one sample: its activations are
  // far smaller than its gradients, so the step's peak (every gradient and
  // the optimizer's temporary, in EstimateConfig's bytes) is the device's,
  // and the activations add nothing to it.
  EXPECT_EQ(*ActivationBytes(Gpt(1, 768, 12, 8, 256, 1), "ddp", 1, 1, "none"), 0);
  // Long sequences: the activations outweigh the gradients. The backward
  // starts with none of them; at its last block it holds the other block's
  // activations, the block's own with its working set (the probabilities'
  // and scores' gradients, 4·(a·s·s + 3·s·h) bytes a sample) and the
  // gradients outside the blocks (the head's); the loss's buffers are gone.
  const double s = 256, h = 64, a = 4, b = 4;
  const api::TaskSpec t = Gpt(2, 64, 4, 256, 128, 4);
  const double block = s * h * 2 * (32 + 2 * a * s / h) * b;  // float32, no dropout
  const double working = 4 * (a * s * s + 3 * s * h) * b;
  const ParameterCount c = CountParameters(t);
  const double outside = 4 * c.stored_trainable_outside_blocks, grads = 4 * c.stored_trainable;
  const double step = grads + 4 * 4 * h * h;  // AdamW's temporary: the 4h x h matrix
  EXPECT_NEAR(*ActivationBytes(t, "ddp", 1, 4, "none"),
              kModelHeadroom * (2 * block + working + outside - step), 1);
  // Recomputing keeps each block's input, and recomputes one block at a time.
  const double input = 4 * s * h * b;
  EXPECT_NEAR(*ActivationBytes(t, "ddp", 1, 4, "unit"),
              kModelHeadroom * (2 * input + block + working + outside - step), 1);
  // A vocabulary of 8192 on 32 tokens: the peak is the loss's backward, with
  // the log-softmax's output, its gradient and the logits' gradient of every
  // sample, before any block's gradient.
  const double v = 8192, s2 = 32, b2 = 8;
  const api::TaskSpec wide = Gpt(2, 64, 4, 32, 8192, 8);
  const double block2 = s2 * h * 2 * (32 + 2 * a * s2 / h) * b2;
  const double step2 = 4 * CountParameters(wide).stored_trainable + 4 * v * h;
  EXPECT_NEAR(*ActivationBytes(wide, "ddp", 1, 8, "none"),
              kModelHeadroom * (2 * block2 + 3 * s2 * v * 4 * b2 - step2), 1);
}

TEST(CountParameters, OrrerysOwnGptCountsItsHead) {
  // model.gpt is the worker's family "gpt": learned positions, biases, and an
  // untied vocab x hidden head with its final LayerNorm.
  const double h = 768, v = 50257, s = 1024;
  const ParameterCount c = CountParameters(Gpt(12, 768, 12, 1024, 50257, 8));
  const double embedding = v * h + s * h, block = 12 * h * h + 13 * h, head = 2 * h + v * h;
  EXPECT_EQ(c.total, embedding + 12 * block + head);
  EXPECT_EQ(c.total, 163037184.0);
  EXPECT_EQ(c.stored, c.total);
  EXPECT_EQ(c.stored_outside_blocks, embedding + head);
}

TEST(EstimateConfig, APipelineHoldsItsFullestStageNotAnEvenShare) {
  // GPT-2 small's shape cut in two by FLOPs: the embedding and 8 blocks, then
  // 4 blocks and the head. The first stage is the fuller.
  const double h = 768, v = 50257, s = 1024;
  const api::TaskSpec t = Gpt(12, 768, 12, 1024, 50257, 8);
  const double embedding = v * h + s * h, block = 12 * h * h + 13 * h;
  const double first = 16 * (embedding + 8 * block);
  const double temporary = 4 * v * h;  // AdamW's, of the largest tensor
  auto c = EstimateConfig(t, "pipeline", 2, DefaultDevice("cpu"));
  ASSERT_TRUE(c);
  EXPECT_NEAR(c->memory_gib * (1 << 30), kModelHeadroom * (first + temporary), 64);
  // An even share would have planned 15% less.
  const double even = 16 * CountParameters(t).stored / 2;
  EXPECT_GT(first, 1.15 * even);
  EXPECT_EQ(*ParameterStateBytes(t, "pipeline", 2), first);
  // One rank runs the plain loop and holds everything.
  EXPECT_EQ(*ParameterStateBytes(t, "pipeline", 1), 16 * CountParameters(t).stored);
}

TEST(ActivationBytes, APipelineCountsTheLogitsOnItsLastStageOnly) {
  // A vocabulary of 8192 on 2 small blocks: the head outweighs both blocks'
  // FLOPs, so the last stage is the head alone. Its peak is the loss's
  // backward: the input it received and every sample's log-softmax output,
  // and two more of one micro-batch (4 micro-batches of 2), beside its
  // weights and moments; the first stage holds the embedding and the blocks.
  const double h = 64, v = 8192, s = 32, b = 8;
  const api::TaskSpec t = Gpt(2, 64, 4, 32, 8192, 8);
  const double head = 2 * h + v * h;
  const double logits = s * v * 4;
  const double head_stage = 16 * head - 4 * head + 4 * s * h * b + logits * (b + 2 * 2);
  const double first_state = 16 * (v * h + s * h + 2 * (12 * h * h + 13 * h));
  const double temporary = 4 * v * h;
  auto c = EstimateConfig(t, "pipeline", 2, DefaultDevice("cpu"));
  ASSERT_TRUE(c);
  EXPECT_NEAR(c->memory_gib * (1 << 30), kModelHeadroom * (first_state + temporary), 64);
  EXPECT_NEAR(*ActivationBytes(t, "pipeline", 2, 8, "none"),
              kModelHeadroom * (head_stage - first_state - temporary), 64);
  // Its blocks' activations stay on the first stage: recomputing them
  // changes nothing on the last.
  EXPECT_EQ(*ActivationBytes(t, "pipeline", 2, 8, "unit"),
            *ActivationBytes(t, "pipeline", 2, 8, "none"));
}

TEST(CheckAgainstPretrained, WhatValidationCouldNotKnow) {
  const PretrainedShape qwen = Parse(kQwen2_05b), gpt2 = Parse(kGpt2Small);
  auto errors = CheckAgainstPretrained(Task("{freezeBlocks: 30}"), qwen, "spec.tasks[0]");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.tasks[0].fineTuning.freezeBlocks");
  EXPECT_EQ(errors[0].message, "must be at most the model's 24 blocks (/models/m/config.json)");
  errors = CheckAgainstPretrained(Task("{lora: {rank: 8, targets: [q_proj, c_attn]}}"), qwen,
                                  "spec.tasks[0]");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.tasks[0].fineTuning.lora.targets[1]");
  EXPECT_EQ(errors[0].message,
            "'c_attn' is not a module of qwen2 (q_proj, k_proj, v_proj, o_proj, gate_proj, "
            "up_proj, down_proj)");
  errors = CheckAgainstPretrained(Task("", 2048), gpt2, "spec.tasks[0]");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.tasks[0].model.pretrained.seqLen");
  EXPECT_TRUE(
      CheckAgainstPretrained(Task("{lora: {rank: 8, targets: [c_attn]}}"), gpt2, "spec.tasks[0]")
          .empty());
}

// What a GPU gives a configuration's peak: the device's memory less the
// reserve, parsed from the operator's and orrery plan's flag.
TEST(GpuMemoryReserveTest, ParsesSizesAndSharesAndSaysWhatIsWrong) {
  EXPECT_NEAR(UsableGpuMemoryGib(80), (80 - 1.5) * 0.95, 1e-12);
  EXPECT_EQ(UsableGpuMemoryGib(1), 0) << "never below zero";
  auto r = ParseGpuMemoryReserve("2Gi+10%", "--gpu-memory-reserve");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->fixed_gib, 2);
  EXPECT_NEAR(r->fraction, 0.10, 1e-12);
  EXPECT_NEAR(UsableGpuMemoryGib(24, *r), 22 * 0.9, 1e-12);
  EXPECT_EQ(GpuMemoryReserveText(*r), "2Gi+10%");
  r = ParseGpuMemoryReserve("512Mi", "--gpu-memory-reserve");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->fixed_gib, 0.5);
  EXPECT_EQ(r->fraction, 0);
  r = ParseGpuMemoryReserve("7.5%", "--gpu-memory-reserve");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->fixed_gib, 0);
  EXPECT_NEAR(r->fraction, 0.075, 1e-12);
  r = ParseGpuMemoryReserve("0", "--gpu-memory-reserve");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(UsableGpuMemoryGib(24, *r), 24);
  EXPECT_EQ(GpuMemoryReserveText(GpuMemoryReserve{}), "1.5Gi+5%");
  for (const char* bad :
       {"", "2", "2GB", "-1Gi", "100%", "1Gi+", "1Gi+2Gi", "5%+6%", "x%", "1Gi+5%+"}) {
    auto e = ParseGpuMemoryReserve(bad, "--gpu-memory-reserve");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("--gpu-memory-reserve=" + std::string(bad) + ": "),
              std::string::npos)
        << e.status().message();
    EXPECT_NE(e.status().message().find("e.g. 1.5Gi+5%"), std::string::npos);
  }
}

}  // namespace
}  // namespace orrery::engine
