// Overlap of regions against an element-by-element reference.
#include "worker/checkpoint/overlap.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace orrery::checkpoint {
namespace {

// Global flat index of element k of a region's flat range: the reference.
int64_t GlobalIndex(const Region& r, const std::vector<int64_t>& shape, int64_t k) {
  int64_t pos = r.flat_begin + k;
  int64_t g = 0, stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t i = pos % r.sizes[d];
    pos /= r.sizes[d];
    g += (r.offsets[d] + i) * stride;
    stride *= shape[d];
  }
  return g;
}

Region RandomRegion(std::mt19937& rng, const std::vector<int64_t>& shape) {
  Region r;
  for (int64_t s : shape) {
    const int64_t a = std::uniform_int_distribution<int64_t>(0, s - 1)(rng);
    const int64_t b = std::uniform_int_distribution<int64_t>(a + 1, s)(rng);
    r.offsets.push_back(a);
    r.sizes.push_back(b - a);
  }
  const int64_t n = r.RectNumel();
  r.flat_begin = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
  r.flat_end = std::uniform_int_distribution<int64_t>(r.flat_begin + 1, n)(rng);
  if (rng() % 3 == 0) {
    r.flat_begin = 0;
    r.flat_end = n;
  }
  return r;
}

TEST(OverlapTest, WholeTensorIsOneRun) {
  Region a = FullRegion({4, 5, 6});
  auto runs = Overlap(a, a);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (CopyRun{0, 0, 120}));
}

TEST(OverlapTest, ColumnSliceGivesOneRunPerRow) {
  Region need = FullRegion({3, 4});
  Region have{{0, 2}, {3, 2}, 0, 6};
  auto runs = Overlap(need, have);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1], (CopyRun{2, 6, 2}));
}

TEST(OverlapTest, ScalarsAndDisjointRegions) {
  Region s = FullRegion({});
  auto runs = Overlap(s, s);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].count, 1);
  EXPECT_TRUE(Overlap(Region{{0}, {2}, 0, 2}, Region{{2}, {2}, 0, 2}).empty());
  EXPECT_TRUE(Overlap(Region{{0}, {4}, 0, 2}, Region{{0}, {4}, 2, 4}).empty());
}

TEST(OverlapTest, MatchesElementwiseReferenceOnRandomRegions) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int64_t> shape;
    const int nd = static_cast<int>(rng() % 4);
    for (int d = 0; d < nd; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 6));
    Region need = RandomRegion(rng, shape);
    Region have = RandomRegion(rng, shape);
    // Reference: global index -> position in have.
    std::map<int64_t, int64_t> in_have;
    for (int64_t k = 0; k < have.Numel(); ++k) in_have[GlobalIndex(have, shape, k)] = k;
    std::map<int64_t, int64_t> expect;  // dst -> src
    for (int64_t k = 0; k < need.Numel(); ++k) {
      auto it = in_have.find(GlobalIndex(need, shape, k));
      if (it != in_have.end()) expect[k] = it->second;
    }
    std::map<int64_t, int64_t> got;
    int64_t last_src = -1;
    for (const CopyRun& run : Overlap(need, have)) {
      EXPECT_GT(run.count, 0);
      EXPECT_GT(run.src, last_src);
      last_src = run.src;
      for (int64_t i = 0; i < run.count; ++i)
        EXPECT_TRUE(got.emplace(run.dst + i, run.src + i).second);
    }
    ASSERT_EQ(got, expect) << "trial " << trial;
  }
}

}  // namespace
}  // namespace orrery::checkpoint
