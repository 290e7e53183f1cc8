#include "worker/contract/stages.h"

#include <gtest/gtest.h>

namespace orrery::contract {
namespace {

TEST(BalanceStagesTest, MinimisesTheSlowestStage) {
  auto s = BalanceStages({1, 1, 1, 1, 4}, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, std::vector<int>{4});  // 4 | 4
  s = BalanceStages({3, 1, 1, 1, 3}, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int>{1, 4}));  // 3 | 3 | 3
  s = BalanceStages({1, 2, 3}, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int>{1, 2}));
  EXPECT_FALSE(BalanceStages({1, 2}, 3).ok());
  EXPECT_FALSE(BalanceStages({1, 2}, 0).ok());
}

TransformerShape Gpt2Small() {
  TransformerShape t;
  t.blocks = 12;
  t.hidden = t.q_out = t.kv_out = 768;
  t.ff = 4 * 768;
  t.seq = 1024;
  t.vocab = 50257;
  return t;
}

TEST(LayerFlopsTest, CountsTheProductsOfEachLayer) {
  TransformerShape t = Gpt2Small();
  const std::vector<double> f = LayerFlops(t);
  ASSERT_EQ(f.size(), 14u);
  // A block: 2 FLOPs per weight per token (12h²) and the attention's 4·s·h.
  const double h = 768, s = 1024;
  EXPECT_DOUBLE_EQ(f[1], s * (24 * h * h + 4 * s * h));
  EXPECT_DOUBLE_EQ(f[12], f[1]);
  EXPECT_DOUBLE_EQ(f[13], s * 2 * h * 50257);  // the head
  EXPECT_LT(f[0], f[1] / 1000);                // the embedding's lookup
  // Grouped-query attention and a gated MLP count their own widths.
  t.kv_out = 192;
  t.gated = true;
  t.ff = 2048;
  EXPECT_DOUBLE_EQ(LayerFlops(t)[1],
                   s * (2 * (2 * h * h + 2 * h * 192 + 3 * h * 2048) + 4 * s * h));
}

TEST(TransformerStageStartsTest, BalancesGpt2SmallsHeadAgainstItsBlocks) {
  // The head costs about four and a half blocks: 8 blocks and 4 plus the head.
  auto starts = TransformerStageStarts(Gpt2Small(), 2);
  ASSERT_TRUE(starts.ok());
  EXPECT_EQ(*starts, std::vector<int>{9});
  starts = TransformerStageStarts(Gpt2Small(), 4);
  ASSERT_TRUE(starts.ok());
  ASSERT_EQ(starts->size(), 3u);
  // Every stage keeps a layer, and the same shape always cuts the same way.
  EXPECT_LT(0, (*starts)[0]);
  EXPECT_LT((*starts)[0], (*starts)[1]);
  EXPECT_LT((*starts)[1], (*starts)[2]);
  EXPECT_LT((*starts)[2], 14);
  EXPECT_EQ(*starts, *TransformerStageStarts(Gpt2Small(), 4));
  // A small vocabulary: the blocks dominate, an even split.
  TransformerShape small = Gpt2Small();
  small.vocab = 64;
  starts = TransformerStageStarts(small, 2);
  ASSERT_TRUE(starts.ok());
  EXPECT_EQ(*starts, std::vector<int>{7});
  EXPECT_FALSE(TransformerStageStarts(Gpt2Small(), 15).ok());
}

}  // namespace
}  // namespace orrery::contract
