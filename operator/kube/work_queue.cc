// The rate-limited, delaying, de-duplicating work queue (see work_queue.h).
#include "operator/kube/work_queue.h"

#include <algorithm>

namespace orrery::kube {

WorkQueue::WorkQueue(Clock* clock, std::unique_ptr<RateLimiter> limiter)
    : clock_(clock), limiter_(limiter ? std::move(limiter) : DefaultControllerRateLimiter(clock)) {}

WorkQueue::~WorkQueue() { ShutDown(); }

void WorkQueue::AddLocked(const std::string& item) {
  if (shutting_down_) return;
  if (dirty_.count(item)) return;
  dirty_.insert(item);
  if (processing_.count(item)) return;  // queued again by Done
  queue_.push_back(item);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(item);
}

void WorkQueue::AddAfter(const std::string& item, Duration delay) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  if (delay <= Duration::zero()) {
    AddLocked(item);
    return;
  }
  TimePoint ready = clock_->Now() + delay;
  auto it = waiting_.find(item);
  if (it != waiting_.end()) {
    if (it->second <= ready) return;  // an earlier delay already holds it
    waiting_by_time_.erase({it->second, item});
    it->second = ready;
  } else {
    waiting_.emplace(item, ready);
  }
  waiting_by_time_.insert({ready, item});
  // A waiting Get may be sleeping towards a later deadline.
  cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& item) { AddAfter(item, limiter_->When(item)); }
void WorkQueue::Forget(const std::string& item) { limiter_->Forget(item); }
int WorkQueue::NumRequeues(const std::string& item) { return limiter_->NumRequeues(item); }

void WorkQueue::PromoteReadyLocked() {
  if (waiting_by_time_.empty()) return;
  TimePoint now = clock_->Now();
  while (!waiting_by_time_.empty() && waiting_by_time_.begin()->first <= now) {
    std::string item = waiting_by_time_.begin()->second;
    waiting_by_time_.erase(waiting_by_time_.begin());
    waiting_.erase(item);
    AddLocked(item);
  }
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    PromoteReadyLocked();
    if (!queue_.empty()) break;
    if (shutting_down_) return std::nullopt;
    if (waiting_by_time_.empty()) {
      cv_.wait(lock);
    } else {
      Duration until = waiting_by_time_.begin()->first - clock_->Now();
      cv_.wait_for(lock, std::clamp(until, Duration(std::chrono::microseconds(100)), kMaxIdle));
    }
  }
  std::string item = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(item);
  dirty_.erase(item);
  return item;
}

void WorkQueue::Done(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(item);
  if (dirty_.count(item)) {
    queue_.push_back(item);
    cv_.notify_one();
  }
  if (processing_.empty()) cv_.notify_all();  // a draining ShutDown may wait for this
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  // Delayed items will never be due for anyone: drop them.
  waiting_.clear();
  waiting_by_time_.clear();
  cv_.notify_all();
}

void WorkQueue::ShutDownWithDrain() {
  ShutDown();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return processing_.empty(); });
}

bool WorkQueue::ShuttingDown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() {
  std::lock_guard<std::mutex> lock(mu_);
  PromoteReadyLocked();
  return queue_.size();
}

size_t WorkQueue::NumWaiting() {
  std::lock_guard<std::mutex> lock(mu_);
  PromoteReadyLocked();
  return waiting_.size();
}

}  // namespace orrery::kube
