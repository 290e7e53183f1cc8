// Layout parsing and the rank order of dp × tp × pp groups.
#include "worker/dist/topology.h"

#include <set>

#include <gtest/gtest.h>

namespace orrery::dist {
namespace {

TEST(LayoutTest, ParsesBothForms) {
  auto a = ParseLayout("dp=2,pp=3");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Layout{2, 1, 3}));
  auto b = ParseLayout("2x2x1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (Layout{2, 2, 1}));
  EXPECT_EQ(LayoutToString(*b), "dp=2,tp=2,pp=1");
  EXPECT_FALSE(ParseLayout("dp=0").ok());
  EXPECT_FALSE(ParseLayout("xp=2").ok());
  EXPECT_FALSE(ParseLayout("2x2").ok());
  EXPECT_FALSE(ParseLayout("dp=two").ok());
}

TEST(LayoutTest, TensorIsInnermostAndCoordinatesRoundTrip) {
  Layout l{2, 2, 2};
  EXPECT_EQ(CoordinatesOf(l, 1).tp, 1);
  EXPECT_EQ(CoordinatesOf(l, 2).dp, 1);
  EXPECT_EQ(CoordinatesOf(l, 4).pp, 1);
  for (int r = 0; r < l.world_size(); ++r) EXPECT_EQ(RankOf(l, CoordinatesOf(l, r)), r);
}

TEST(LayoutTest, GroupsPartitionTheWorld) {
  Layout l{2, 2, 2};
  for (auto group_of : {&DataGroup, &TensorGroup, &PipelineGroup}) {
    std::set<std::vector<int>> groups;
    for (int r = 0; r < l.world_size(); ++r) {
      auto g = group_of(l, r);
      EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
      groups.insert(g);
    }
    EXPECT_EQ(groups.size(), 4u);  // 8 ranks in groups of 2
  }
  EXPECT_EQ(TensorGroup(l, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(DataGroup(l, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(PipelineGroup(l, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(TensorGroupName(l, 4), TensorGroupName(l, 5));
  EXPECT_NE(TensorGroupName(l, 4), TensorGroupName(l, 6));
}

}  // namespace
}  // namespace orrery::dist
