// Tests of the work queue's contract (client-go semantics) with a FakeClock:
// de-duplication, dirty re-queue after Done, delays, rate-limited adds, shutdown
// and draining, and several workers never holding the same item at once.
#include "operator/kube/work_queue.h"

#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>

namespace orrery::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<RateLimiter> Exponential() {
  return std::make_unique<ItemExponentialFailureRateLimiter>(milliseconds(5), seconds(1000));
}

TEST(WorkQueueTest, DeduplicatesQueuedItemsAndKeepsOrder) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.Get(), "a");
  EXPECT_EQ(q.Get(), "b");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, ItemReaddedWhileProcessingIsRequeuedOnlyAfterDone) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("a");
  ASSERT_EQ(q.Get(), "a");
  q.Add("a");
  q.Add("a");
  // Not handed to a second worker while the first holds it.
  EXPECT_EQ(q.Len(), 0u);
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(q.Get(), "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, DoneWithoutReaddDoesNotRequeue) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("a");
  ASSERT_EQ(q.Get(), "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, AddAfterWaitsForTheClockAndEarliestDelayWins) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddAfter("a", seconds(10));
  q.AddAfter("a", seconds(3));   // earlier: replaces
  q.AddAfter("a", seconds(20));  // later: ignored
  q.AddAfter("b", seconds(5));
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.NumWaiting(), 2u);
  clock.Advance(seconds(2));
  EXPECT_EQ(q.Len(), 0u);
  clock.Advance(seconds(1));
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(q.Get(), "a");
  clock.Advance(seconds(2));
  EXPECT_EQ(q.Get(), "b");
  EXPECT_EQ(q.NumWaiting(), 0u);
}

TEST(WorkQueueTest, AddAfterNonPositiveDelayIsAnAdd) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddAfter("a", Duration::zero());
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, DelayedItemAlreadyQueuedIsNotDuplicated) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("a");
  q.AddAfter("a", seconds(1));
  clock.Advance(seconds(1));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, BlockedGetWakesWhenTheFakeClockPassesTheDelay) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddAfter("a", seconds(30));
  auto got = std::async(std::launch::async, [&] { return q.Get(); });
  EXPECT_EQ(got.wait_for(milliseconds(50)), std::future_status::timeout);
  clock.Advance(seconds(30));
  ASSERT_EQ(got.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(got.get(), "a");
}

TEST(WorkQueueTest, AddRateLimitedBacksOffExponentiallyAndForgetResets) {
  FakeClock clock;
  WorkQueue q(&clock, Exponential());
  q.AddRateLimited("a");  // 5ms
  EXPECT_EQ(q.Len(), 0u);
  clock.Advance(milliseconds(5));
  ASSERT_EQ(q.Get(), "a");
  q.AddRateLimited("a");  // 10ms, queued after Done
  q.Done("a");
  clock.Advance(milliseconds(9));
  EXPECT_EQ(q.Len(), 0u);
  clock.Advance(milliseconds(1));
  ASSERT_EQ(q.Get(), "a");
  EXPECT_EQ(q.NumRequeues("a"), 2);
  q.Forget("a");
  q.Done("a");
  EXPECT_EQ(q.NumRequeues("a"), 0);
  q.AddRateLimited("a");
  clock.Advance(milliseconds(5));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, ShutDownHandsOutQueuedItemsThenNullopt) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("a");
  q.AddAfter("late", seconds(1));
  q.ShutDown();
  q.Add("b");  // dropped
  EXPECT_TRUE(q.ShuttingDown());
  EXPECT_EQ(q.Get(), "a");
  EXPECT_EQ(q.Get(), std::nullopt);
  EXPECT_EQ(q.NumWaiting(), 0u);
}

TEST(WorkQueueTest, ShutDownWakesBlockedWorkers) {
  FakeClock clock;
  WorkQueue q(&clock);
  auto got = std::async(std::launch::async, [&] { return q.Get(); });
  EXPECT_EQ(got.wait_for(milliseconds(20)), std::future_status::timeout);
  q.ShutDown();
  ASSERT_EQ(got.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(got.get(), std::nullopt);
}

TEST(WorkQueueTest, ShutDownWithDrainWaitsForItemsInProcessing) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("a");
  ASSERT_EQ(q.Get(), "a");
  auto drained = std::async(std::launch::async, [&] { q.ShutDownWithDrain(); });
  EXPECT_EQ(drained.wait_for(milliseconds(50)), std::future_status::timeout);
  q.Done("a");
  EXPECT_EQ(drained.wait_for(seconds(5)), std::future_status::ready);
}

TEST(WorkQueueTest, SeveralWorkersNeverProcessTheSameItemAtOnce) {
  FakeClock clock;
  WorkQueue q(&clock);
  constexpr int kItems = 20;
  std::atomic<int> in_flight[kItems] = {};
  std::atomic<bool> overlap{false};
  std::atomic<int> processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto item = q.Get()) {
        int i = std::stoi(*item);
        if (in_flight[i].fetch_add(1) != 0) overlap = true;
        std::this_thread::yield();
        in_flight[i].fetch_sub(1);
        ++processed;
        q.Done(*item);
      }
    });
  }
  for (int round = 0; round < 200; ++round) q.Add(std::to_string(round % kItems));
  // Everything added is eventually processed; then drain and stop.
  while (q.Len() > 0) std::this_thread::yield();
  q.ShutDownWithDrain();
  for (auto& t : workers) t.join();
  EXPECT_FALSE(overlap.load());
  EXPECT_GE(processed.load(), kItems);
  EXPECT_LE(processed.load(), 200);
}

}  // namespace
}  // namespace orrery::kube
