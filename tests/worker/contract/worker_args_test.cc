// The worker's command line: what the launchers write is what the worker
// reads, every flag, and bad command lines name the flag and the fix.
#include "worker/contract/worker_args.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace orrery::contract {
namespace {

WorkerArgs Everything() {
  WorkerArgs a;
  a.model = "gpt";
  a.layers = 4, a.hidden = 64, a.heads = 4, a.seq = 32, a.vocab = 256;
  a.family = "llama", a.kv_heads = 2, a.head_dim = 16, a.intermediate = 172;
  a.tie_embeddings = true;
  a.pretrained = "/models/llama";
  a.mlp_input = 16, a.mlp_hidden = 32, a.mlp_layers = 3, a.classes = 4;
  a.torchscript = "m.pt", a.torchscript_like = "mlp";
  a.seed = 7;
  a.freeze_embeddings = true;
  a.freeze_blocks = 2, a.lora_rank = 8;
  a.lora_alpha = 16.5;
  a.lora_targets = std::vector<std::string>{"q_proj", "v_proj"};
  a.template_name = "hybrid", a.layout = "dp=2,tp=2,pp=1";
  a.micro_batches = 4;
  a.stage_starts = std::vector<int64_t>{0, 2};
  a.pipeline_schedule = "1f1b";
  a.bucket_bytes = 1 << 20, a.spill_budget_bytes = 1 << 24;
  a.no_double_buffer = true;
  a.recompute = "unit";
  a.precision = "bf16", a.device = "cuda";
  a.optimizer = "adamw";
  a.lr = 3e-4, a.momentum = 0.9, a.weight_decay = 0.01;
  a.warmup_steps = 10;
  a.decay = "cosine", a.lr_scaling = "sqrt";
  a.min_lr_ratio = 0.1;
  a.data = "text", a.data_path = "/data/train.txt", a.tokenizer = "/models/llama";
  a.token_bytes = 4, a.data_samples = 1000, a.batch = 32;
  a.steps = 100, a.epochs = 2, a.samples = 3200, a.report_every = 5;
  a.checkpoint_dir = "/ckpt/a", a.checkpoint_every = 20, a.keep = 3;
  a.no_resume = true;
  a.export_dir = "/out/a", a.export_dtype = "bfloat16";
  a.export_merged = true;
  a.profile_warmup = 1, a.profile_steps = 3;
  a.tune = true;
  a.termination_message_path = "/dev/termination-log";
  a.threads = 2;
  a.metrics_address = ":9400", a.msj = "ns/sweep", a.task = "lr-1e-3";
  return a;
}

TEST(WorkerArgs, EveryFlagRoundTrips) {
  const WorkerArgs a = Everything();
  auto back = ParseWorkerArgs(ToArgs(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
  // Every field of Everything() is set, so every row of the table was written:
  // the help lists as many flags as the command line holds.
  const std::string help = WorkerFlagsHelp();
  EXPECT_EQ(static_cast<size_t>(std::count(help.begin(), help.end(), '\n')), ToArgs(a).size());
}

TEST(WorkerArgs, UnsetFieldsAreNotWritten) {
  WorkerArgs a;
  EXPECT_TRUE(ToArgs(a).empty());
  a.lr = 0.1;
  a.keep = 2;
  EXPECT_EQ(ToArgs(a), (std::vector<std::string>{"--lr=0.1", "--keep=2"}));
}

TEST(WorkerArgs, ValuesMayFollowAsTheNextArgument) {
  auto a =
      ParseWorkerArgs({"--steps", "5", "--template=ddp", "--tune", "--lora-targets", "c_attn"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->steps, 5);
  EXPECT_EQ(a->template_name, "ddp");
  EXPECT_TRUE(a->tune);
  EXPECT_EQ(a->lora_targets, std::vector<std::string>{"c_attn"});
}

void ExpectError(const std::vector<std::string>& argv, const std::string& says) {
  auto a = ParseWorkerArgs(argv);
  ASSERT_FALSE(a.ok()) << "accepted " << ::testing::PrintToString(argv);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find(says), std::string::npos) << a.status();
}

TEST(WorkerArgs, BadCommandLinesNameTheFlag) {
  ExpectError({"--stepz=3"}, "unknown flag --stepz");
  ExpectError({"steps"}, "unexpected argument 'steps'");
  ExpectError({"--tune=1"}, "--tune takes no value");
  ExpectError({"--steps"}, "--steps needs a value");
  ExpectError({"--steps=-1"}, "--steps must not be negative");
  ExpectError({"--steps=ten"}, "--steps: 'ten' is not an integer");
  ExpectError({"--lr=fast"}, "--lr: 'fast' is not a number");
  ExpectError({"--lr=nan"}, "--lr: 'nan' is not a number");
  ExpectError({"--stage-starts=0,x"}, "--stage-starts: 'x' is not an integer");
  ExpectError({"--precision=fp16"}, "--precision must be fp32 or bf16, not 'fp16'");
  ExpectError({"--recompute=full"}, "--recompute must be none or unit, not 'full'");
  ExpectError({"--token-bytes=3"}, "--token-bytes must be 2 or 4, not '3'");
  ExpectError({"--decay=step"}, "--decay must be constant, cosine or linear, not 'step'");
  ExpectError({"--export-dtype=int8"}, "--export-dtype must be float32, bfloat16 or float16");
  ExpectError({"--template=zero3"},
              "--template must be one of single, ddp, fsdp, pipeline, tensor, hybrid, spill");
}

TEST(WorkerArgs, TheLastOfARepeatedFlagWins) {
  auto a = ParseWorkerArgs({"--steps=1", "--steps=9"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->steps, 9);
}

}  // namespace
}  // namespace orrery::contract
