// Rate limiters (see rate_limiter.h).
#include "operator/kube/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace orrery::kube {

Duration ItemExponentialFailureRateLimiter::When(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  int exp = failures_[item]++;
  // Compute in double so large exponents saturate at the cap instead of overflowing.
  double delay_ns = static_cast<double>(base_.count()) * std::pow(2.0, exp);
  if (delay_ns >= static_cast<double>(max_.count())) return max_;
  return Duration(static_cast<Duration::rep>(delay_ns));
}

void ItemExponentialFailureRateLimiter::Forget(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(item);
}

int ItemExponentialFailureRateLimiter::NumRequeues(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

BucketRateLimiter::BucketRateLimiter(Clock* clock, double qps, int burst)
    : clock_(clock), qps_(qps), burst_(burst), tokens_(burst), last_(clock->Now()) {}

Duration BucketRateLimiter::When(const std::string&) {
  std::lock_guard<std::mutex> lock(mu_);
  TimePoint now = clock_->Now();
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + ToSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1.0;
  if (tokens_ >= 0) return Duration::zero();
  // The token is owed: it arrives when the deficit has refilled.
  return FromSeconds(-tokens_ / qps_);
}

Duration MaxOfRateLimiter::When(const std::string& item) {
  Duration longest = Duration::zero();
  for (auto& l : limiters_) longest = std::max(longest, l->When(item));
  return longest;
}

void MaxOfRateLimiter::Forget(const std::string& item) {
  for (auto& l : limiters_) l->Forget(item);
}

int MaxOfRateLimiter::NumRequeues(const std::string& item) {
  int n = 0;
  for (auto& l : limiters_) n = std::max(n, l->NumRequeues(item));
  return n;
}

std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock) {
  std::vector<std::unique_ptr<RateLimiter>> parts;
  parts.push_back(std::make_unique<ItemExponentialFailureRateLimiter>(std::chrono::milliseconds(5),
                                                                      std::chrono::seconds(1000)));
  parts.push_back(std::make_unique<BucketRateLimiter>(clock, 10.0, 100));
  return std::make_unique<MaxOfRateLimiter>(std::move(parts));
}

}  // namespace orrery::kube
