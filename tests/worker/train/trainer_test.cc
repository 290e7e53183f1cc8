// The training loop: loss falls on the shipped corpus, progress lines parse,
// a checkpointed and resumed run equals an uninterrupted one, a stop request
// checkpoints and returns "preempted", and a checkpoint written under one layout
// resumes under another.
#include "worker/train/trainer.h"

#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"

namespace orrery::train {
namespace {

using Json = nlohmann::json;

TaskConfig SmallGpt() {
  TaskConfig t;
  t.model.kind = "gpt";
  t.model.gpt = {2, 32, 4, 16, 64};
  t.optimizer.kind = "adamw";
  t.optimizer.lr = 3e-3;
  t.global_batch = 8;
  t.steps = 12;
  t.report_every = 4;
  return t;
}

std::vector<Json> Lines(const std::string& out) {
  std::vector<Json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) lines.push_back(Json::parse(line));
  return lines;
}

TEST(TrainerTest, LossFallsOnTheShippedCorpus) {
  TaskConfig t = SmallGpt();
  t.data.kind = "text";
  t.data.path = std::string(ORRERY_SOURCE_DIR) + "/data/corpus/quickstart.txt";
  t.model.gpt.seq = 32;
  t.steps = 60;
  t.report_every = 20;
  std::ostringstream out;
  auto r = Train(t, nullptr, out, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, "completed");
  double first = r->losses.front(), last = r->losses.back();
  EXPECT_NEAR(first, std::log(256.0), 0.5);
  EXPECT_LT(last, first - 1.5) << first << " -> " << last;  // learns byte statistics fast
  auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 5u);  // start, 3 progress, done
  EXPECT_EQ(lines[0]["event"], "start");
  EXPECT_EQ(lines[1]["event"], "progress");
  EXPECT_EQ(lines[1]["step"], 20);
  EXPECT_EQ(lines[1]["samples"], 160);
  EXPECT_GT(lines[1]["samples_per_s"].get<double>(), 0.0);
  EXPECT_EQ(lines[4]["event"], "done");
  EXPECT_EQ(lines[4]["status"], "completed");
}

TEST(TrainerTest, ResumedRunEqualsUninterruptedRun) {
  testing_worker::TempDir dir;
  TaskConfig t = SmallGpt();
  t.optimizer.kind = "sgd";    // momentum rides in the checkpoint, so the resumed
  t.optimizer.momentum = 0.9;  // run continues the same trajectory
  t.optimizer.lr = 0.1;
  std::ostringstream full_out;
  auto full = Train(t, nullptr, full_out, nullptr);
  ASSERT_TRUE(full.ok()) << full.status();

  TaskConfig first = t;
  first.steps = 5;
  first.checkpoint_dir = dir.path();
  std::ostringstream o1;
  auto a = Train(first, nullptr, o1, nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->checkpoint.empty());

  TaskConfig second = t;
  second.checkpoint_dir = dir.path();
  std::ostringstream o2;
  auto b = Train(second, nullptr, o2, nullptr);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->resumed_from_step, 5);
  ASSERT_EQ(b->losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i)
    EXPECT_NEAR(b->losses[i], full->losses[i + 5], 1e-5 * full->losses[i + 5]);
  EXPECT_EQ(Lines(o2.str())[0]["resumed_from_step"], 5);
}

TEST(TrainerTest, StopRequestCheckpointsAndPreempts) {
  testing_worker::TempDir dir;
  TaskConfig t = SmallGpt();
  t.checkpoint_dir = dir.path();
  std::atomic<bool> stop{true};  // asked to stop before the first step: nothing to save
  std::ostringstream o;
  auto r = Train(t, nullptr, o, &stop);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, "preempted");
  EXPECT_EQ(r->step, 0);
}

TEST(TrainerTest, CheckpointFromOneRankResumesUnderDataParallelism) {
  testing_worker::TempDir dir;
  TaskConfig t = SmallGpt();
  t.steps = 4;
  t.checkpoint_dir = dir.path();
  t.checkpoint_every = 2;
  std::ostringstream o;
  auto first = Train(t, nullptr, o, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  auto events = Lines(o.str());
  int checkpoints = 0;
  for (const auto& e : events) checkpoints += e["event"] == "checkpoint" ? 1 : 0;
  EXPECT_EQ(checkpoints, 2);  // periodic at 2, final at 4

  TaskConfig more = t;
  more.steps = 6;
  std::vector<TrainResult> results(2);
  auto statuses = testing_worker::RunRanks(2, [&](int rank, dist::Rendezvous* rdv) -> Status {
    TaskConfig mine = more;
    mine.strategy.name = "fsdp";
    std::ostringstream sink;
    ORRERY_ASSIGN_OR_RETURN(results[static_cast<size_t>(rank)], Train(mine, rdv, sink, nullptr));
    return OkStatus();
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(results[0].resumed_from_step, 4);
  EXPECT_EQ(results[0].step, 6);
  EXPECT_EQ(results[0].losses, results[1].losses);
}

}  // namespace
}  // namespace orrery::train
