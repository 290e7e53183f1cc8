// Shard writing: only designated writers store bytes, sizes are checked, and a
// commit needs every rank's index.
#include "worker/checkpoint/writer.h"

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/checkpoint/reader.h"

namespace orrery::checkpoint {
namespace {

using testing::TempDir;

TEST(WriterTest, ReplicatedDataIsWrittenOnceAndPaddingNever) {
  TempDir tmp;
  const Layout l{2, 1, 1, 2};  // fsdp over 2 ranks
  const TensorSpec sharded{"model/w", {5}, DType::kFloat32, 0, -1, true};
  const TensorSpec replicated{"model/b", {3}, DType::kFloat32, 0, -1, false};
  for (int r = 0; r < 2; ++r) {
    auto w = ShardWriter::Create(tmp.path(), l, r, BalancedStages(1));
    ASSERT_TRUE(w.ok());
    std::vector<float> w_local(3,
                               static_cast<float>(r));  // ceil(5/2) = 3, rank 1 holds 2 + padding
    std::vector<float> b(3, 9.f);
    ASSERT_TRUE((*w)->Add(sharded, w_local.data(), 12).ok());
    ASSERT_TRUE((*w)->Add(replicated, b.data(), 12).ok());
    EXPECT_EQ((*w)->bytes_written(), r == 0 ? 24u : 8u);
    EXPECT_EQ((*w)->Add(sharded, w_local.data(), 12).code(),
              StatusCode::kInvalidArgument);  // twice
    EXPECT_EQ((*w)->Add(TensorSpec{"x", {4}, DType::kFloat32, 0, -1, false}, b.data(), 12).code(),
              StatusCode::kInvalidArgument);  // wrong size
    ASSERT_TRUE((*w)->Finish().ok());
  }
  CheckpointInfo info;
  info.layout = l;
  ASSERT_TRUE(CommitCheckpoint(tmp.path(), info).ok());
  auto reader = CheckpointReader::Open(tmp.path());
  ASSERT_TRUE(reader.ok());
  std::vector<float> whole(5);
  ASSERT_TRUE(reader->Load({{"model/w", FullRegion({5}), whole.data(), 20}}, {}).ok());
  EXPECT_EQ(whole, (std::vector<float>{0, 0, 0, 1, 1}));
  EXPECT_EQ(reader->metadata().Find("model/b")->chunks.size(), 1u);
  EXPECT_FALSE(PathExists(tmp.path() + "/" + ShardIndexName(0)));  // indexes cleaned up
}

TEST(WriterTest, RefusesATensorTheRankDoesNotHold) {
  TempDir tmp;
  auto w = ShardWriter::Create(tmp.path(), {1, 1, 2, 1}, 1, BalancedStages(2));
  ASSERT_TRUE(w.ok());
  float x = 0;
  EXPECT_EQ((*w)->Add(TensorSpec{"layer0", {1}, DType::kFloat32, 0, -1, false}, &x, 4).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(ShardWriter::Create(tmp.path(), {1, 1, 2, 1}, 2, BalancedStages(2)).ok());
}

TEST(WriterTest, CommitRefusesMismatchedSpecsAcrossRanks) {
  TempDir tmp;
  const Layout l{1, 2, 1, 1};
  for (int r = 0; r < 2; ++r) {
    auto w = ShardWriter::Create(tmp.path(), l, r, BalancedStages(1));
    ASSERT_TRUE(w.ok());
    std::vector<float> v(r == 0 ? 4 : 6);
    TensorSpec s{"t", {r == 0 ? int64_t{8} : int64_t{12}}, DType::kFloat32, 0, 0, false};
    ASSERT_TRUE((*w)->Add(s, v.data(), v.size() * 4).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  CheckpointInfo info;
  info.layout = l;
  EXPECT_EQ(CommitCheckpoint(tmp.path(), info).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(PathExists(tmp.path() + "/metadata.json"));
}

TEST(WriterTest, SliceRegionCopiesAFlatRangeOfARectangle) {
  std::vector<int32_t> g(12);
  for (int i = 0; i < 12; ++i) g[static_cast<size_t>(i)] = i;
  std::vector<int32_t> out(3);
  SliceRegion(g.data(), {3, 4}, 4, Region{{0, 2}, {3, 2}, 1, 4}, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{3, 6, 7}));
}

}  // namespace
}  // namespace orrery::checkpoint
