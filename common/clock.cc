// The system clock's sleep.
#include "common/clock.h"

#include <thread>

namespace orrery {

void SystemClock::SleepUntil(TimePoint deadline) { std::this_thread::sleep_until(deadline); }

SystemClock* SystemClock::Get() {
  static SystemClock clock;
  return &clock;
}

}  // namespace orrery
