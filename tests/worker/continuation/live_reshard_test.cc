// Live sharded state (issue #18): a job trained under one layout, saved rank by
// rank, and relaunched under any other layout continues the uninterrupted
// one-process run, while every rank writes only what it owns and reads exactly
// the bytes its new layout needs. Every ordered pair of seven layouts at up to
// four ranks: ddp×4, fsdp×4, tp2×pp2, dp2×tp2, pp4, spill×1 (one shard a layer)
// and fsdp×2.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/continuation/run_under.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/store.h"
#include "worker/train/trainer.h"

namespace orrery::train {
namespace {

constexpr int64_t kFirstSteps = 3;  // steps under layout A before the checkpoint
constexpr int64_t kTotalSteps = 6;
constexpr double kRelTolerance = 1e-5;  // as continuation_test

TaskConfig TinyGpt() {
  TaskConfig t = testing::ContinuationGpt(kTotalSteps);
  // Spill: a shard per layer (the largest layer holds ~50 KB of parameters).
  t.strategy.spill_budget_bytes = 200 << 10;
  return t;
}

struct Layout {
  std::string label;
  testing::RunLayout run;
};

const std::vector<Layout>& Layouts() {
  static const auto* all = new std::vector<Layout>{
      {"ddp4", {"ddp", 4, {}}},
      {"fsdp4", {"fsdp", 4, {}}},
      {"tp2pp2", {"hybrid", 4, {1, 2, 2}}},
      {"dp2tp2", {"hybrid", 4, {2, 2, 1}}},
      {"pp4", {"pipeline", 4, {}}},
      {"spill1", {"spill", 1, {}}},
      {"fsdp2", {"fsdp", 2, {}}},
  };
  return *all;
}

StatusOr<TrainResult> RunUnder(const TaskConfig& task, const Layout& layout) {
  return testing::RunUnder(task, layout.run);
}

// The uninterrupted one-process run, computed once.
const TrainResult& Reference() {
  static const TrainResult* ref = [] {
    TaskConfig t = TinyGpt();
    t.strategy.name = "single";
    std::ostringstream sink;
    auto r = Train(t, nullptr, sink, nullptr);
    EXPECT_TRUE(r.ok()) << r.status();
    return new TrainResult(r.ok() ? *r : TrainResult());
  }();
  return *ref;
}

struct Pair {
  size_t from, to;
};

void PrintTo(const Pair& p, std::ostream* os) {
  *os << Layouts()[p.from].label << "_to_" << Layouts()[p.to].label;
}

class LiveReshardTest : public ::testing::TestWithParam<Pair> {};

TEST_P(LiveReshardTest, ResumesUnderTheOtherLayoutReadingExactlyItsBytes) {
  const Layout& a = Layouts()[GetParam().from];
  const Layout& b = Layouts()[GetParam().to];
  const TrainResult& full = Reference();
  ASSERT_EQ(full.losses.size(), static_cast<size_t>(kTotalSteps));

  testing_worker::TempDir dir;
  TaskConfig first = TinyGpt();
  first.steps = kFirstSteps;
  first.checkpoint_dir = dir.path();
  auto ra = RunUnder(first, a);
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_EQ(ra->saves.size(), 1u);

  // The save: each rank wrote only its own state, and together exactly one
  // copy of every tensor of the collection.
  auto reader = checkpoint::CheckpointReader::Open(ra->checkpoint);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const uint64_t state_bytes = reader->metadata().TotalTensorBytes();
  uint64_t written = 0;
  for (const StateIoStats& s : ra->saves[0]) {
    EXPECT_EQ(s.bytes, s.bytes_needed);
    written += s.bytes;
  }
  EXPECT_EQ(written, state_bytes);
  EXPECT_EQ(reader->metadata().files.size(), static_cast<size_t>(a.run.world));

  TaskConfig second = TinyGpt();
  second.checkpoint_dir = dir.path();
  auto rb = RunUnder(second, b);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(rb->resumed_from_step, kFirstSteps);

  // The load: every rank read exactly the bytes it needed, and the ranks
  // together needed the state once per replica, never less than once.
  ASSERT_EQ(rb->load.size(), static_cast<size_t>(b.run.world));
  uint64_t needed = 0;
  for (size_t r = 0; r < rb->load.size(); ++r) {
    EXPECT_EQ(rb->load[r].bytes, rb->load[r].bytes_needed) << "rank " << r;
    EXPECT_GT(rb->load[r].bytes_needed, 0u) << "rank " << r;
    needed += rb->load[r].bytes_needed;
  }
  EXPECT_GE(needed, state_bytes);

  ASSERT_EQ(rb->losses.size(), static_cast<size_t>(kTotalSteps - kFirstSteps));
  for (size_t i = 0; i < rb->losses.size(); ++i) {
    const double want = full.losses[i + kFirstSteps];
    EXPECT_NEAR(rb->losses[i], want, kRelTolerance * want) << "resumed step " << i;
  }
}

// A byte flipped in each shard of the newest checkpoint, wherever it lands (a
// block one rank reads whole, or one whose pieces several ranks read and check
// together): the load fails its checksum and every rank falls back to the
// previous checkpoint.
TEST(LiveReshardDamageTest, AFlippedByteFallsBackToThePreviousCheckpoint) {
  const Layout& a = Layouts()[1];  // fsdp4
  const Layout& b = Layouts()[2];  // tp2pp2
  testing_worker::TempDir dir;
  TaskConfig first = TinyGpt();
  first.steps = kFirstSteps;
  first.checkpoint_every = 1;
  first.keep = 2;
  first.checkpoint_dir = dir.path();
  auto ra = RunUnder(first, a);
  ASSERT_TRUE(ra.ok()) << ra.status();
  auto reader = checkpoint::CheckpointReader::Open(ra->checkpoint);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(reader->metadata().info.step, kFirstSteps);
  for (size_t f = 0; f < reader->metadata().files.size(); ++f) {
    const std::string path = reader->FilePath(static_cast<int>(f));
    std::FILE* file = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(file, nullptr) << path;
    const long middle = static_cast<long>(reader->metadata().files[f].size / 2);
    std::fseek(file, middle, SEEK_SET);
    const int c = std::fgetc(file);
    std::fseek(file, middle, SEEK_SET);
    std::fputc(c ^ 0x10, file);
    std::fclose(file);
  }
  TaskConfig second = TinyGpt();
  second.checkpoint_dir = dir.path();
  auto rb = RunUnder(second, b);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(rb->resumed_from_step, kFirstSteps - 1);
  const TrainResult& full = Reference();
  ASSERT_EQ(rb->losses.size(), static_cast<size_t>(kTotalSteps - kFirstSteps + 1));
  for (size_t i = 0; i < rb->losses.size(); ++i) {
    const double want = full.losses[i + kFirstSteps - 1];
    EXPECT_NEAR(rb->losses[i], want, kRelTolerance * want) << "resumed step " << i;
  }
}

std::vector<Pair> AllPairs() {
  std::vector<Pair> out;
  for (size_t i = 0; i < Layouts().size(); ++i)
    for (size_t j = 0; j < Layouts().size(); ++j)
      if (i != j) out.push_back({i, j});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, LiveReshardTest, ::testing::ValuesIn(AllPairs()),
                         [](const ::testing::TestParamInfo<Pair>& p) {
                           return Layouts()[p.param.from].label + "_to_" +
                                  Layouts()[p.param.to].label;
                         });

// Fine-tuned models (issue 19): LoRA and frozen blocks keep no optimizer state
// for what they freeze, in any layout. The checkpoint holds "optim/" entries
// for exactly the trained parameters, and a resume under another layout
// continues the uninterrupted run as before.
struct FineTuneCase {
  std::string what;  // lora | frozen
  size_t from, to;
};

void PrintTo(const FineTuneCase& c, std::ostream* os) {
  *os << c.what << "_" << Layouts()[c.from].label << "_to_" << Layouts()[c.to].label;
}

TaskConfig FineTuned(const std::string& what) {
  TaskConfig t = TinyGpt();
  if (what == "lora") {
    t.model.finetune.lora_rank = 2;
    t.model.finetune.lora_alpha = 4;
    t.model.finetune.lora_targets = {"c_attn", "c_fc"};
  } else {
    t.model.finetune.freeze_embeddings = true;
    t.model.finetune.freeze_blocks = 1;
  }
  return t;
}

class FineTunedReshardTest : public ::testing::TestWithParam<FineTuneCase> {};

TEST_P(FineTunedReshardTest, CheckpointsOnlyTrainedOptimizerStateAndResumesElsewhere) {
  const FineTuneCase& c = GetParam();
  const Layout& a = Layouts()[c.from];
  const Layout& b = Layouts()[c.to];
  TaskConfig single = FineTuned(c.what);
  single.strategy.name = "single";
  std::ostringstream sink;
  auto full = Train(single, nullptr, sink, nullptr);
  ASSERT_TRUE(full.ok()) << full.status();

  testing_worker::TempDir dir;
  TaskConfig first = FineTuned(c.what);
  first.steps = kFirstSteps;
  first.checkpoint_dir = dir.path();
  auto ra = RunUnder(first, a);
  ASSERT_TRUE(ra.ok()) << ra.status();
  auto reader = checkpoint::CheckpointReader::Open(ra->checkpoint);
  ASSERT_TRUE(reader.ok()) << reader.status();
  // Optimizer entries: both AdamW moments of every trained parameter, and
  // nothing for a frozen one.
  auto model = model::BuildModel(first.model);
  ASSERT_TRUE(model.ok()) << model.status();
  std::set<std::string> want, got;
  for (const auto& [name, p] : model->NamedParameters()) {
    if (!p.requires_grad()) continue;
    want.insert("optim/exp_avg/" + name);
    want.insert("optim/exp_avg_sq/" + name);
  }
  for (const auto& [name, meta] : reader->metadata().tensors) {
    if (name.rfind("optim/", 0) == 0 && name != "optim/step") got.insert(name);
  }
  EXPECT_EQ(got, want);
  ASSERT_FALSE(want.empty());

  TaskConfig second = FineTuned(c.what);
  second.checkpoint_dir = dir.path();
  auto rb = RunUnder(second, b);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(rb->resumed_from_step, kFirstSteps);
  ASSERT_EQ(rb->losses.size(), static_cast<size_t>(kTotalSteps - kFirstSteps));
  for (size_t i = 0; i < rb->losses.size(); ++i) {
    const double want_loss = full->losses[i + kFirstSteps];
    EXPECT_NEAR(rb->losses[i], want_loss, kRelTolerance * want_loss) << "resumed step " << i;
  }
  // Training moved the loss: the comparison is not vacuous.
  EXPECT_NE(full->losses.front(), full->losses.back());
}

// Each layout appears on both sides: ddp4 0, fsdp4 1, tp2pp2 2, dp2tp2 3,
// pp4 4, spill1 5, fsdp2 6.
INSTANTIATE_TEST_SUITE_P(FineTuning, FineTunedReshardTest,
                         ::testing::Values(FineTuneCase{"lora", 1, 2}, FineTuneCase{"lora", 2, 5},
                                           FineTuneCase{"lora", 5, 6}, FineTuneCase{"lora", 3, 0},
                                           FineTuneCase{"frozen", 1, 4},
                                           FineTuneCase{"frozen", 4, 5},
                                           FineTuneCase{"frozen", 5, 3},
                                           FineTuneCase{"frozen", 0, 1}),
                         [](const ::testing::TestParamInfo<FineTuneCase>& p) {
                           return p.param.what + "_" + Layouts()[p.param.from].label + "_to_" +
                                  Layouts()[p.param.to].label;
                         });

}  // namespace
}  // namespace orrery::train
