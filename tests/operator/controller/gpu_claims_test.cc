// The ledger that lets reconciles of different jobs run in parallel: claims
// other jobs made count until a snapshot shows their pods, a claim is refused
// when GPUs counted free were taken since the snapshot, and many threads
// claiming the same GPUs never claim more than there are.
#include "operator/controller/gpu_claims.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace orrery::controller {
namespace {

TimePoint At(double s) {
  return TimePoint(
      std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(s)));
}

TEST(GpuClaims, OthersCountUntilTheSnapshotShowsTheirPods) {
  GpuClaims claims(300);
  std::map<std::string, int> free = {{"n0", 8}, {"n1", 8}};
  GpuClaims::View a = claims.Others("ns/a", {}, At(0));
  ASSERT_TRUE(
      claims.TryClaim("ns/a", GangKey("a", "t0-g0"), {"n0", "n0", "n0"}, &free, a.seq, At(0)));
  EXPECT_EQ(free["n0"], 5);
  // Job b's pass does not see a's pods yet: a's claim counts.
  GpuClaims::View b = claims.Others("ns/b", {}, At(1));
  EXPECT_EQ(b.by_node["n0"], 3);
  // Its own claims never count against itself.
  EXPECT_TRUE(claims.Others("ns/a", {}, At(1)).by_node.empty());
  // A snapshot that shows part of a's gang (its pods are created one by one)
  // counts the rest of the claim.
  GpuClaims::View part = claims.Others("ns/b", {{GangKey("a", "t0-g0"), {{"n0", 2}}}}, At(2));
  EXPECT_EQ(part.by_node["n0"], 1);
  EXPECT_EQ(claims.size(), 1u);
  // A snapshot that shows all of a's gang ends the claim: its pods count there now.
  GpuClaims::View c = claims.Others("ns/b", {{GangKey("a", "t0-g0"), {{"n0", 3}}}}, At(2));
  EXPECT_TRUE(c.by_node.empty());
  EXPECT_EQ(claims.size(), 0u);
}

// A pass whose snapshot is older than the one that showed a gang's pods still
// needs the gang's claim: it ends only once every pass in flight began later.
TEST(GpuClaims, AClaimOutlivesEveryOlderSnapshotInFlight) {
  GpuClaims claims(300);
  std::map<std::string, int> free = {{"n0", 8}};
  ASSERT_TRUE(
      claims.TryClaim("ns/a", GangKey("a", "g0"), {"n0", "n0", "n0", "n0"}, &free, 0, At(0)));
  const uint64_t c = claims.Begin([] {});  // C's snapshot: before a's pods reach the cache
  const uint64_t b = claims.Begin([] {});  // B's snapshot shows them
  EXPECT_TRUE(claims.Others("ns/b", {{GangKey("a", "g0"), {{"n0", 4}}}}, At(1), b).by_node.empty());
  EXPECT_EQ(claims.Others("ns/c", {}, At(1), c).by_node["n0"], 4) << "C's snapshot lacks a's pods";
  claims.End(b);
  EXPECT_EQ(claims.Others("ns/c", {}, At(1), c).by_node["n0"], 4);
  claims.End(c);
  EXPECT_EQ(claims.size(), 0u) << "every pass in flight now sees a's pods";
}

TEST(GpuClaims, RefusesGpusAnotherJobTookSinceTheSnapshot) {
  GpuClaims claims(300);
  // Both passes take their snapshot first: each sees node n0's 4 GPUs free.
  GpuClaims::View a = claims.Others("ns/a", {}, At(0));
  GpuClaims::View b = claims.Others("ns/b", {}, At(0));
  std::map<std::string, int> free_a = {{"n0", 4}, {"n1", 4}};
  std::map<std::string, int> free_b = free_a;
  ASSERT_TRUE(
      claims.TryClaim("ns/a", GangKey("a", "x-g0"), {"n0", "n0", "n0"}, &free_a, a.seq, At(1)));
  // b counted 4 free on n0, but a took 3 since: 2 more do not fit, 1 does.
  EXPECT_FALSE(claims.TryClaim("ns/b", GangKey("b", "y-g0"), {"n0", "n0"}, &free_b, b.seq, At(1)));
  EXPECT_EQ(free_b["n0"], 4);  // a refused claim takes nothing
  EXPECT_TRUE(claims.TryClaim("ns/b", GangKey("b", "z-g0"), {"n0"}, &free_b, b.seq, At(1)));
  // Another node is untouched by a's claim.
  EXPECT_TRUE(claims.TryClaim("ns/b", GangKey("b", "y-g0"), {"n1", "n1"}, &free_b, b.seq, At(1)));
  // A later snapshot of b counts a's claim in `free` already: only newer ones
  // are subtracted again.
  GpuClaims::View b2 = claims.Others("ns/b", {}, At(2));
  EXPECT_EQ(b2.by_node["n0"], 3);
  std::map<std::string, int> free_b2 = {{"n0", 0}, {"n1", 2}};
  EXPECT_TRUE(claims.TryClaim("ns/b", GangKey("b", "w-g0"), {"n1"}, &free_b2, b2.seq, At(2)));
}

TEST(GpuClaims, ReleaseForgetAndExpiry) {
  GpuClaims claims(10);
  std::map<std::string, int> free = {{"n0", 8}};
  ASSERT_TRUE(claims.TryClaim("ns/a", "a/x", {"n0"}, &free, 0, At(0)));
  ASSERT_TRUE(claims.TryClaim("ns/a", "a/y", {"n0"}, &free, 0, At(0)));
  ASSERT_TRUE(claims.TryClaim("ns/b", "b/z", {"n0"}, &free, 0, At(0)));
  claims.Release("ns/b", "a/x");  // not b's: kept
  EXPECT_EQ(claims.size(), 3u);
  claims.Release("ns/a", "a/x");
  EXPECT_EQ(claims.size(), 2u);
  claims.Forget("ns/a");
  EXPECT_EQ(claims.size(), 1u);
  // Pods that never appeared: the claim ends after its time to live.
  EXPECT_EQ(claims.Others("ns/c", {}, At(5)).by_node["n0"], 1);
  EXPECT_TRUE(claims.Others("ns/c", {}, At(11)).by_node.empty());
}

// Eight jobs' passes race for one 8-GPU node from the same snapshot, over and
// over: the GPUs claimed never exceed the node's.
TEST(GpuClaims, ParallelPassesNeverOvercommit) {
  for (int round = 0; round < 50; ++round) {
    GpuClaims claims(300);
    std::vector<GpuClaims::View> views;
    for (int j = 0; j < 8; ++j)
      views.push_back(claims.Others("ns/j" + std::to_string(j), {}, At(0)));
    std::atomic<int> claimed{0};
    std::vector<std::thread> threads;
    for (int j = 0; j < 8; ++j) {
      threads.emplace_back([&, j] {
        std::map<std::string, int> free = {{"n0", 8}};
        const std::string owner = "ns/j" + std::to_string(j);
        for (int g = 0; g < 3; ++g) {
          const std::string gang = "j" + std::to_string(j) + "/g" + std::to_string(g);
          if (claims.TryClaim(owner, gang, {"n0", "n0"}, &free, views[static_cast<size_t>(j)].seq,
                              At(0))) {
            claimed += 2;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(claimed.load(), 8) << "round " << round;
  }
}

}  // namespace
}  // namespace orrery::controller
