// The controller work queue, with client-go's workqueue semantics:
//  - an item is queued at most once (de-duplicated while waiting);
//  - an item is handed to one worker at a time: re-added while being processed,
//    it is marked dirty and queued again only when the worker calls Done;
//  - AddAfter delays an item (the earliest of several delays wins), and
//    AddRateLimited delays it by the rate limiter's When(); Forget resets its
//    backoff (call it when the item succeeded);
//  - ShutDown stops accepting items; Get hands out what is queued, then returns
//    nullopt; ShutDownWithDrain also waits until every handed-out item is Done.
// Delays are measured on the injected Clock. A Get waiting for a delayed item
// re-reads the clock at least every kMaxIdle of real time, so a FakeClock moved
// by a test is noticed promptly; Len() and Get() promote due items immediately.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/clock.h"
#include "operator/kube/rate_limiter.h"

namespace orrery::kube {

// Thread-safe: any number of producers and workers.
class WorkQueue {
 public:
  static constexpr Duration kMaxIdle = std::chrono::milliseconds(20);

  // `limiter` nullptr: DefaultControllerRateLimiter(clock).
  explicit WorkQueue(Clock* clock, std::unique_ptr<RateLimiter> limiter = nullptr);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& item);
  void AddAfter(const std::string& item, Duration delay);
  void AddRateLimited(const std::string& item);
  void Forget(const std::string& item);
  int NumRequeues(const std::string& item);

  // Blocks until an item is ready (and returns it, now being processed) or the
  // queue is shut down and empty (nullopt).
  std::optional<std::string> Get();
  // Ends the processing of an item handed out by Get.
  void Done(const std::string& item);

  void ShutDown();
  void ShutDownWithDrain();
  bool ShuttingDown() const;

  size_t Len();         // items ready to be handed out
  size_t NumWaiting();  // items waiting for their delay

 private:
  void AddLocked(const std::string& item);
  void PromoteReadyLocked();

  Clock* clock_;
  std::unique_ptr<RateLimiter> limiter_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;
  std::set<std::string> processing_;
  // Delayed items: ready time per item, and the same ordered by time.
  std::map<std::string, TimePoint> waiting_;
  std::set<std::pair<TimePoint, std::string>> waiting_by_time_;
  bool shutting_down_ = false;
};

}  // namespace orrery::kube
