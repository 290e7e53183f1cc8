// Tests of the work queue's rate limiters with a FakeClock: the exponential
// per-item backoff, the token bucket, and their maximum.
#include "operator/kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace orrery::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ItemExponentialFailureRateLimiterTest, DoublesPerFailureUpToTheCap) {
  ItemExponentialFailureRateLimiter l(milliseconds(5), seconds(1));
  EXPECT_EQ(l.When("a"), milliseconds(5));
  EXPECT_EQ(l.When("a"), milliseconds(10));
  EXPECT_EQ(l.When("a"), milliseconds(20));
  EXPECT_EQ(l.NumRequeues("a"), 3);
  for (int i = 0; i < 20; ++i) (void)l.When("a");
  EXPECT_EQ(l.When("a"), seconds(1));
  // Other items keep their own history.
  EXPECT_EQ(l.When("b"), milliseconds(5));
}

TEST(ItemExponentialFailureRateLimiterTest, ForgetResetsTheBackoff) {
  ItemExponentialFailureRateLimiter l(milliseconds(5), seconds(1000));
  (void)l.When("a");
  (void)l.When("a");
  l.Forget("a");
  EXPECT_EQ(l.NumRequeues("a"), 0);
  EXPECT_EQ(l.When("a"), milliseconds(5));
}

TEST(ItemExponentialFailureRateLimiterTest, HugeExponentsSaturateInsteadOfOverflowing) {
  ItemExponentialFailureRateLimiter l(milliseconds(5), seconds(1000));
  Duration d;
  for (int i = 0; i < 2000; ++i) d = l.When("a");
  EXPECT_EQ(d, seconds(1000));
}

TEST(BucketRateLimiterTest, BurstIsFreeThenTokensArriveAtQps) {
  FakeClock clock;
  BucketRateLimiter l(&clock, 10.0, 3);
  EXPECT_EQ(l.When("x"), Duration::zero());
  EXPECT_EQ(l.When("y"), Duration::zero());
  EXPECT_EQ(l.When("z"), Duration::zero());
  // The 4th and 5th reservations queue behind each other at 100ms a token.
  EXPECT_NEAR(ToSeconds(l.When("x")), 0.1, 1e-9);
  EXPECT_NEAR(ToSeconds(l.When("x")), 0.2, 1e-9);
  clock.Advance(seconds(1));
  // 1s refills 10 tokens, minus the 2 owed, capped at the burst of 3.
  EXPECT_EQ(l.When("x"), Duration::zero());
  EXPECT_EQ(l.When("x"), Duration::zero());
  EXPECT_EQ(l.When("x"), Duration::zero());
  EXPECT_GT(l.When("x"), Duration::zero());
}

TEST(BucketRateLimiterTest, PartialRefill) {
  FakeClock clock;
  BucketRateLimiter l(&clock, 10.0, 1);
  EXPECT_EQ(l.When("a"), Duration::zero());
  clock.Advance(milliseconds(50));  // half a token
  EXPECT_NEAR(ToSeconds(l.When("a")), 0.05, 1e-9);
}

TEST(MaxOfRateLimiterTest, DefaultControllerLimiterTakesTheLongerWait) {
  FakeClock clock;
  auto l = DefaultControllerRateLimiter(&clock);
  // The per-item backoff dominates while the bucket has tokens.
  EXPECT_EQ(l->When("a"), milliseconds(5));
  EXPECT_EQ(l->When("a"), milliseconds(10));
  EXPECT_EQ(l->NumRequeues("a"), 2);
  // Exhaust the bucket (burst 100) with fresh items: the 101st waits for a token
  // (100ms at 10 qps) though its own backoff is only 5ms.
  for (int i = 0; i < 98; ++i) (void)l->When("item" + std::to_string(i));
  EXPECT_NEAR(ToSeconds(l->When("fresh")), 0.1, 1e-9);
  l->Forget("a");
  EXPECT_EQ(l->NumRequeues("a"), 0);
}

}  // namespace
}  // namespace orrery::kube
