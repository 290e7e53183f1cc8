// Tests of the controller runtime's retry contract with a FakeClock: failures
// back off exponentially and are forgotten on success, requeue_after waits on the
// clock, a key is never reconciled by two workers at once, and owner handlers
// map children to their controlling owner.
#include "operator/kube/controller.h"

#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "operator/kube/api_error.h"

namespace orrery::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool Eventually(const std::function<bool()>& pred) {
  auto end = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return pred();
}

std::unique_ptr<RateLimiter> Exponential() {
  return std::make_unique<ItemExponentialFailureRateLimiter>(milliseconds(5), seconds(1000));
}

TEST(ControllerTest, FailuresBackOffOnTheClockThenSucceed) {
  FakeClock clock;
  std::atomic<int> calls{0};
  Controller c(
      "test",
      [&](const std::string&) -> StatusOr<Result> {
        return ++calls <= 2 ? StatusOr<Result>(UnavailableError("flaky"))
                            : StatusOr<Result>(Result{});
      },
      1, &clock, Exponential());
  c.Start();
  c.queue().Add("ns/a");
  ASSERT_TRUE(Eventually([&] { return calls == 1 && c.queue().NumWaiting() == 1; }));
  EXPECT_EQ(c.queue().NumRequeues("ns/a"), 1);
  clock.Advance(milliseconds(4));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(calls.load(), 1);  // 5ms backoff not over
  clock.Advance(milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return calls == 2 && c.queue().NumWaiting() == 1; }));
  clock.Advance(milliseconds(9));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(calls.load(), 2);  // second backoff is 10ms
  clock.Advance(milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return calls == 3; }));
  ASSERT_TRUE(
      Eventually([&] { return c.queue().NumRequeues("ns/a") == 0; }));  // forgotten on success
  c.Stop();
  EXPECT_EQ(c.failures(), 2);
}

TEST(ControllerTest, RequeueAfterIsATimedWaitNotABackoff) {
  FakeClock clock;
  std::atomic<int> calls{0};
  Controller c(
      "test",
      [&](const std::string&) -> StatusOr<Result> {
        ++calls;
        Result r;
        r.requeue_after = seconds(30);
        return r;
      },
      1, &clock, Exponential());
  c.Start();
  c.queue().Add("ns/a");
  ASSERT_TRUE(Eventually([&] { return calls == 1 && c.queue().NumWaiting() == 1; }));
  EXPECT_EQ(c.queue().NumRequeues("ns/a"), 0);
  clock.Advance(seconds(29));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(calls.load(), 1);
  clock.Advance(seconds(1));
  ASSERT_TRUE(Eventually([&] { return calls == 2; }));
  c.Stop();
}

TEST(ControllerTest, AKeyIsNeverReconciledConcurrently) {
  FakeClock clock;
  std::mutex mu;
  std::map<std::string, int> active;
  std::atomic<bool> overlap{false};
  std::atomic<int> calls{0};
  Controller c(
      "test",
      [&](const std::string& key) -> StatusOr<Result> {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (active[key]++ > 0) overlap = true;
        }
        std::this_thread::sleep_for(milliseconds(1));
        {
          std::lock_guard<std::mutex> lock(mu);
          --active[key];
        }
        ++calls;
        return Result{};
      },
      4, &clock);
  c.Start();
  for (int i = 0; i < 300; ++i) c.queue().Add("ns/k" + std::to_string(i % 5));
  ASSERT_TRUE(Eventually([&] { return c.queue().Len() == 0; }));
  c.Stop();
  EXPECT_FALSE(overlap.load());
  EXPECT_GE(calls.load(), 5);
}

TEST(ControllerTest, OwnerHandlersEnqueueTheControllingOwner) {
  FakeClock clock;
  Controller c(
      "test", [](const std::string&) -> StatusOr<Result> { return Result{}; }, 1, &clock);
  auto child = [](const std::string& owner, bool controller) {
    Object o = {{"metadata", {{"namespace", "ns"}, {"name", "pod-1"}}}};
    o["metadata"]["ownerReferences"] = {
        {{"kind", "ModelJob"}, {"name", owner}, {"controller", controller}}};
    return std::make_shared<const Object>(o);
  };
  EventHandlers h = c.EnqueueOwnerHandlers("ModelJob");
  h.on_add(child("job-a", true));
  h.on_add(child("job-b", false));  // not the controller: ignored
  h.on_update(child("job-c", true), child("job-d", true));
  EXPECT_EQ(c.queue().Len(), 3u);
  std::set<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    auto k = c.queue().Get();
    ASSERT_TRUE(k.has_value());
    keys.insert(*k);
    c.queue().Done(*k);
  }
  EXPECT_EQ(keys, (std::set<std::string>{"ns/job-a", "ns/job-c", "ns/job-d"}));
  EXPECT_EQ(ControllerOwnerKey(Object::object(), "ModelJob"), "");
}

}  // namespace
}  // namespace orrery::kube
