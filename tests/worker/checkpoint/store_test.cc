// Step directories, retention of the last K, fallback to an older checkpoint, and
// crash safety: a save killed with SIGKILL at random moments never damages the
// last committed checkpoint.
#include "worker/checkpoint/store.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/checkpoint/io.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {
namespace {

using testing::TempDir;

constexpr Layout kLayout{1, 2, 1, 1};
const TensorSpec kSpec{"model/w", {64, 32}, DType::kInt32, 0, 0, true};

// The tensor's value at a step: every element depends on the step.
std::vector<int32_t> ValueAt(int64_t step) {
  std::vector<int32_t> v(64 * 32);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<int32_t>(step * 100003 + static_cast<int64_t>(i));
  return v;
}

Status SaveStep(const CheckpointStore& store, int64_t step) {
  const std::vector<int32_t> v = ValueAt(step);
  auto stages = BalancedStages(1);
  for (int r = 0; r < kLayout.World(); ++r) {
    ORRERY_ASSIGN_OR_RETURN(auto w,
                            ShardWriter::Create(store.StepDir(step), kLayout, r, stages, 512));
    ORRERY_ASSIGN_OR_RETURN(LocalPiece p, LocalPieceOf(kSpec, kLayout, r, stages));
    std::vector<int32_t> local(static_cast<size_t>(p.buffer_elements));
    SliceRegion(v.data(), kSpec.shape, 4, p.region, local.data());
    ORRERY_RETURN_IF_ERROR(w->Add(kSpec, local.data(), local.size() * 4));
    ORRERY_RETURN_IF_ERROR(w->AddBlob("rng", "state-" + std::to_string(step)));
    ORRERY_RETURN_IF_ERROR(w->Finish());
  }
  CheckpointInfo info;
  info.step = step;
  info.layout = kLayout;
  info.lr_schedule = {{"lr", 0.001 * static_cast<double>(step)}};
  info.dataset = {5, 1000, step / 10, step % 10};
  return const_cast<CheckpointStore&>(store).Commit(info);
}

// Loads the checkpoint whole and checks it holds exactly the state of its step.
void ExpectHoldsItsStep(const CheckpointReader& reader) {
  const int64_t step = reader.metadata().info.step;
  std::vector<int32_t> got(64 * 32);
  Status s = LoadRank(reader, {{kSpec, got.data(), got.size() * 4}}, {1, 1, 1, 1}, 0,
                      BalancedStages(1), {});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, ValueAt(step));
  EXPECT_EQ(reader.metadata().blobs.at(BlobKey(1, "rng")), "state-" + std::to_string(step));
  EXPECT_EQ(reader.metadata().info.dataset.consumed, step % 10);
}

TEST(StoreTest, KeepsTheLastKAndRemovesStaleUnfinishedSaves) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), 2);
  for (int64_t step : {10, 20}) ASSERT_TRUE(SaveStep(store, step).ok());
  // An unfinished save older than the newest and one newer (in progress).
  ASSERT_TRUE(MakeDirs(store.StepDir(15)).ok());
  ASSERT_TRUE(MakeDirs(store.StepDir(99)).ok());
  for (int64_t step : {30, 40}) ASSERT_TRUE(SaveStep(store, step).ok());
  auto steps = store.CommittedSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{30, 40}));
  EXPECT_FALSE(PathExists(store.StepDir(10)));
  EXPECT_FALSE(PathExists(store.StepDir(15)));
  EXPECT_TRUE(PathExists(store.StepDir(99)));
  auto latest = store.OpenLatest(VerifyLevel::kChecksums, false);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->metadata().info.step, 40);
  ExpectHoldsItsStep(*latest);
  EXPECT_DOUBLE_EQ(latest->metadata().info.lr_schedule.at("lr"), 0.04);
}

TEST(StoreTest, FallsBackToThePreviousCommittedCheckpointWhenAsked) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), 3);
  ASSERT_TRUE(SaveStep(store, 1).ok());
  ASSERT_TRUE(SaveStep(store, 2).ok());
  {
    std::fstream f(store.StepDir(2) + "/" + ShardFileName(0),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(17);
    f.put('\x7F');
  }
  auto strict = store.OpenLatest(VerifyLevel::kChecksums, false);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("shard-00000.bin"), std::string::npos)
      << strict.status();
  auto lenient = store.OpenLatest(VerifyLevel::kChecksums, true);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->metadata().info.step, 1);
  ExpectHoldsItsStep(*lenient);
  // A missing shard is caught by the cheap file check too.
  std::remove((store.StepDir(2) + "/" + ShardFileName(1)).c_str());
  auto files = store.OpenLatest(VerifyLevel::kFiles, false);
  EXPECT_EQ(files.status().code(), StatusCode::kNotFound);
  EXPECT_NE(files.status().message().find("shard-00001.bin"), std::string::npos) << files.status();
  auto previous = store.OpenLatest(VerifyLevel::kFiles, true);
  ASSERT_TRUE(previous.ok());
  EXPECT_EQ(previous->metadata().info.step, 1);
}

TEST(StoreTest, CommitRefusesWhenARankHasNotFinished) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), 2);
  auto w = ShardWriter::Create(store.StepDir(5), kLayout, 0, BalancedStages(1));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Finish().ok());
  CheckpointInfo info;
  info.step = 5;
  info.layout = kLayout;
  Status s = store.Commit(info);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
  EXPECT_FALSE(PathExists(store.StepDir(5) + "/metadata.json"));
}

TEST(StoreTest, SigkillDuringSavesAlwaysLeavesTheLastCommitLoadable) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), 2);
  ASSERT_TRUE(SaveStep(store, 0).ok());
  std::mt19937 rng(2024);
  int64_t next_step = 1;
  int64_t last_seen = 0;
  int progressed = 0;
  constexpr int kTrials = 60;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int64_t first = next_step;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t s = first;; ++s) {
        if (!SaveStep(store, s).ok()) ::_exit(3);
      }
    }
    const auto delay_us = std::uniform_int_distribution<int>(0, 80000)(rng);
    ::usleep(static_cast<useconds_t>(delay_us));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saver exited on its own: status " << status;

    auto latest = store.OpenLatest(VerifyLevel::kChecksums, /*fallback=*/false);
    ASSERT_TRUE(latest.ok()) << "trial " << trial << ": " << latest.status();
    const int64_t step = latest->metadata().info.step;
    EXPECT_GE(step, last_seen) << "a committed checkpoint went backwards";
    if (step > last_seen) ++progressed;
    last_seen = step;
    ExpectHoldsItsStep(*latest);
    if (HasFailure()) return;
    // Continue numbering past anything the child may have started.
    next_step = step + 1000;
    ASSERT_TRUE(store.Prune().ok());
  }
  // Most trials should have committed something new (else the kill points were all trivial).
  EXPECT_GT(progressed, kTrials / 4);
}

}  // namespace
}  // namespace orrery::checkpoint
