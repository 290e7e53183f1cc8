// Layouts, rank coordinates and the piece each rank holds.
#include "worker/checkpoint/layout.h"

#include <set>

#include <gtest/gtest.h>

namespace orrery::checkpoint {
namespace {

TEST(LayoutTest, ParseAndValidate) {
  auto l = Layout::Parse("dp=2,tp=2,pp=1");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, (Layout{2, 2, 1, 1}));
  EXPECT_EQ(l->World(), 4);
  EXPECT_EQ(l->ToString(), "dp=2,tp=2,pp=1,fsdp=1");
  EXPECT_FALSE(Layout::Parse("dp=4,fsdp=3").ok());  // fsdp must divide dp
  EXPECT_FALSE(Layout::Parse("dp=x").ok());
  EXPECT_FALSE(Layout::Parse("ep=2").ok());
  EXPECT_FALSE(Layout::Parse("tp=0").ok());
}

TEST(LayoutTest, CoordsAreABijectionWithTpFastest) {
  Layout l{4, 2, 3, 2};
  std::set<std::tuple<int, int, int>> seen;
  for (int r = 0; r < l.World(); ++r) {
    RankCoords c = l.Coords(r);
    EXPECT_EQ(l.RankOf(c.dp, c.tp, c.pp), r);
    EXPECT_EQ(c.fsdp, c.dp % 2);
    EXPECT_EQ(c.replica, c.dp / 2);
    seen.insert({c.dp, c.tp, c.pp});
  }
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_EQ(l.Coords(1).tp, 1);
  EXPECT_EQ(l.Coords(2).dp, 1);
  EXPECT_EQ(l.Coords(8).pp, 1);
}

TEST(LayoutTest, ColumnAndRowParallelSplits) {
  TensorSpec col{"w", {10, 6}, DType::kFloat32, 0, 0, false};
  TensorSpec row{"w", {10, 6}, DType::kFloat32, 0, 1, false};
  Layout l{1, 4, 1, 1};
  auto stages = BalancedStages(1);
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) {
    auto p = LocalPieceOf(col, l, r, stages);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->present && p->writer);
    EXPECT_EQ(p->region.sizes[1], 6);
    total += p->region.sizes[0];
    auto q = LocalPieceOf(row, l, r, stages);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->region.sizes[0], 10);
    EXPECT_EQ(q->region.offsets[1], 6 * r / 4);
  }
  EXPECT_EQ(total, 10);  // 10 rows over 4 ranks: 2,3,2,3
}

TEST(LayoutTest, FsdpRangesArePaddedAndOnlyOneCopyIsWritten) {
  TensorSpec t{"w", {7, 3}, DType::kFloat32, 0, -1, true};
  Layout l{4, 2, 1, 2};  // 2 replicas of 2 fsdp shards, tp=2 replicated tensor
  auto stages = BalancedStages(1);
  int writers = 0;
  for (int r = 0; r < l.World(); ++r) {
    auto p = LocalPieceOf(t, l, r, stages);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->buffer_elements, 11);  // ceil(21 / 2)
    EXPECT_TRUE(p->flat);
    const RankCoords c = l.Coords(r);
    EXPECT_EQ(p->region.flat_begin, c.fsdp == 0 ? 0 : 11);
    EXPECT_EQ(p->region.flat_end, c.fsdp == 0 ? 11 : 21);
    writers += p->writer ? 1 : 0;
    EXPECT_EQ(p->writer, c.tp == 0 && c.replica == 0);
  }
  EXPECT_EQ(writers, 2);
}

TEST(LayoutTest, PipelineStagesOwnWholeTensors) {
  auto stages = BalancedStages(4);
  Layout l{1, 1, 2, 1};
  TensorSpec early{"a", {3}, DType::kFloat32, 1, -1, false};
  TensorSpec late{"b", {3}, DType::kFloat32, 2, -1, false};
  EXPECT_TRUE(LocalPieceOf(early, l, 0, stages)->present);
  EXPECT_FALSE(LocalPieceOf(early, l, 1, stages)->present);
  EXPECT_TRUE(LocalPieceOf(late, l, 1, stages)->present);
  TensorSpec bad{"c", {3}, DType::kFloat32, 0, 1, false};
  EXPECT_FALSE(LocalPieceOf(bad, l, 0, stages).ok());
  EXPECT_FALSE(LocalPieceOf(early, l, 2, stages).ok());
}

}  // namespace
}  // namespace orrery::checkpoint
