// The global sample order and cursor: seeded permutations, balanced shares, and
// exact re-partitioning across changes of data-parallel degree and batch size.
#include "worker/data/order.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

#include "common/random.h"

namespace orrery::data {
namespace {

TEST(OrderTest, SplitMix64MatchesReferenceValues) {
  // First outputs of splitmix64 seeded with 1234567 (Vigna's reference implementation).
  uint64_t s = 1234567;
  EXPECT_EQ(SplitMix64Next(s), 6457827717110365317ull);
  EXPECT_EQ(SplitMix64Next(s), 3203168211198807973ull);
}

TEST(OrderTest, EpochsArePermutationsThatDifferAndRepeatWithTheSeed) {
  GlobalOrder a(11, 1000), b(11, 1000), c(12, 1000);
  std::vector<int64_t> p0 = a.Permutation(0);
  std::vector<int64_t> sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(p0, b.Permutation(0));
  EXPECT_NE(p0, a.Permutation(1));
  EXPECT_NE(p0, c.Permutation(0));
  EXPECT_EQ(a.SampleAt(1000 + 5), a.Permutation(1)[5]);
}

TEST(OrderTest, SharesAreContiguousBalancedAndCoverTheBatch) {
  for (int64_t b : {0, 1, 7, 12, 13}) {
    for (int dp = 1; dp <= 5; ++dp) {
      int64_t next = 0;
      for (int r = 0; r < dp; ++r) {
        Share s = RankShare(b, dp, r);
        EXPECT_EQ(s.begin, next);
        EXPECT_LE(s.end - s.begin, b / dp + 1);
        EXPECT_GE(s.end - s.begin, b / dp);
        next = s.end;
      }
      EXPECT_EQ(next, b);
    }
  }
}

// Runs `steps` steps of a global batch over dp ranks from `cursor`, recording every
// sample any rank reads, and returns the cursor after.
Cursor RunSteps(GlobalOrder& order, Cursor cursor, int dp, int64_t batch, int steps,
                std::map<int64_t, int>& seen) {
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < dp; ++r) {
      auto samples = SamplesForRank(order, cursor, batch, dp, r);
      EXPECT_TRUE(samples.ok());
      for (int64_t x : *samples) seen[x]++;
    }
    cursor = Advance(cursor, batch);
  }
  return cursor;
}

TEST(OrderTest, ChangingDpFourToTwoToThreeSeesOnePassWithoutRepeats) {
  constexpr int64_t kN = 960;
  GlobalOrder order(2026, kN);
  Cursor c{2026, kN, 0, 0};
  std::map<int64_t, int> seen;
  // dp=4 with batch 32, then dp=2 with batch 16 (elastic), then dp=3 with batch 30
  // (not divisible by dp: local batches 10/10/10) and 31 (11/10/10).
  c = RunSteps(order, c, 4, 32, 10, seen);  // 320
  c = RunSteps(order, c, 2, 16, 10, seen);  // 160
  c = RunSteps(order, c, 3, 30, 12, seen);  // 360
  c = RunSteps(order, c, 3, 31, 3, seen);   // 93
  c = RunSteps(order, c, 3, 27, 1, seen);   // 27 -> 960
  EXPECT_EQ(c.epoch, 1);
  EXPECT_EQ(c.consumed, 0);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kN));
  for (const auto& [sample, count] : seen) ASSERT_EQ(count, 1) << "sample " << sample;
}

std::vector<int64_t> Take(GlobalOrder& order, const Cursor& c, int64_t batch, int dp, int rank) {
  auto samples = SamplesForRank(order, c, batch, dp, rank);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<int64_t>{};
}

TEST(OrderTest, ResumingFromASavedCursorContinuesTheSameStream) {
  GlobalOrder order(3, 100);
  Cursor c{3, 100, 0, 0};
  std::vector<int64_t> uninterrupted;
  Cursor u = c;
  for (int s = 0; s < 30; ++s) {
    for (int64_t x : Take(order, u, 8, 1, 0)) uninterrupted.push_back(x);
    u = Advance(u, 8);
  }
  // Same 240 samples read by dp=2 for 10 steps, then "restarted" with dp=4.
  std::vector<int64_t> elastic;
  for (int s = 0; s < 10; ++s) {
    for (int r = 0; r < 2; ++r)
      for (int64_t x : Take(order, c, 8, 2, r)) elastic.push_back(x);
    c = Advance(c, 8);
  }
  Cursor saved = c;  // what a checkpoint keeps
  GlobalOrder fresh(3, 100);
  for (int s = 0; s < 20; ++s) {
    for (int r = 0; r < 4; ++r)
      for (int64_t x : Take(fresh, saved, 8, 4, r)) elastic.push_back(x);
    saved = Advance(saved, 8);
  }
  EXPECT_EQ(elastic, uninterrupted);  // crosses two epoch boundaries
  EXPECT_EQ(saved.epoch, 2);
  EXPECT_EQ(saved.consumed, 40);
}

TEST(OrderTest, MismatchedCursorIsRefused) {
  GlobalOrder order(1, 10);
  EXPECT_FALSE(SamplesForRank(order, Cursor{2, 10, 0, 0}, 4, 1, 0).ok());
  EXPECT_FALSE(SamplesForRank(order, Cursor{1, 10, 0, 0}, 4, 2, 2).ok());
}

}  // namespace
}  // namespace orrery::data
