// Rate limiters for the work queue, with client-go's semantics: When(item) says how
// long to wait before the item is processed again, Forget(item) ends its failure
// history, NumRequeues(item) counts its failures. The controller default is the
// maximum of a per-item exponential backoff (5ms doubling to 1000s) and an overall
// token bucket (10 qps, burst 100), as in client-go's
// DefaultControllerRateLimiter. Time comes from an injected Clock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"

namespace orrery::kube {

// Thread-safe.
class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  virtual Duration When(const std::string& item) = 0;
  virtual void Forget(const std::string& item) = 0;
  virtual int NumRequeues(const std::string& item) = 0;
};

// base * 2^failures, capped at max_delay.
class ItemExponentialFailureRateLimiter final : public RateLimiter {
 public:
  ItemExponentialFailureRateLimiter(Duration base_delay, Duration max_delay)
      : base_(base_delay), max_(max_delay) {}
  Duration When(const std::string& item) override;
  void Forget(const std::string& item) override;
  int NumRequeues(const std::string& item) override;

 private:
  std::mutex mu_;
  Duration base_, max_;
  std::map<std::string, int> failures_;
};

// A token bucket shared by all items: `qps` tokens a second, at most `burst`
// saved. When() reserves a token and returns how long until it is available, so
// reservations queue up behind each other like golang.org/x/time/rate's Reserve.
class BucketRateLimiter final : public RateLimiter {
 public:
  BucketRateLimiter(Clock* clock, double qps, int burst);
  Duration When(const std::string& item) override;
  void Forget(const std::string&) override {}
  int NumRequeues(const std::string&) override { return 0; }

 private:
  std::mutex mu_;
  Clock* clock_;
  double qps_;
  double burst_;
  double tokens_;
  TimePoint last_;
};

// The longest wait of its parts; Forget and NumRequeues pass through.
class MaxOfRateLimiter final : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
      : limiters_(std::move(limiters)) {}
  Duration When(const std::string& item) override;
  void Forget(const std::string& item) override;
  int NumRequeues(const std::string& item) override;

 private:
  std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// max(exponential 5ms..1000s, bucket 10 qps burst 100).
std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock);

}  // namespace orrery::kube
