// Time as an injected dependency. Nothing in Orrery reads the wall clock
// directly: worlds hand a Clock to what needs one, and tests hand a FakeClock
// that moves only when told, so every timed behaviour is deterministic.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace orrery {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

// Thread-safe: any thread may call any method.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // Blocks the caller until Now() >= deadline (a FakeClock: until advanced there).
  virtual void SleepUntil(TimePoint deadline) = 0;
  void SleepFor(Duration d) { SleepUntil(Now() + d); }
};

// The process's steady clock.
class SystemClock final : public Clock {
 public:
  TimePoint Now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  void SleepUntil(TimePoint deadline) override;
  static SystemClock* Get();
};

// A clock that stands still until Advance() moves it; sleepers wake when it passes
// their deadline.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint(std::chrono::hours(1))) : now_(start) {}
  TimePoint Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void SleepUntil(TimePoint deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return now_ >= deadline; });
  }
  void Advance(Duration d) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      now_ += d;
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  TimePoint now_;
};

// Seconds as a double, for reports and plans.
inline double ToSeconds(Duration d) { return std::chrono::duration<double>(d).count(); }
inline Duration FromSeconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

}  // namespace orrery
