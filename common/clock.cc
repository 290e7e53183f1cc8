// The system clock's sleep.
#include "common/clock.h"

#include <thread>

#include "common/time_text.h"

namespace orrery {

void SystemClock::SleepUntil(TimePoint deadline) { std::this_thread::sleep_until(deadline); }

SystemClock* SystemClock::Get() {
  static SystemClock clock;
  return &clock;
}

std::string Rfc3339Utc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace orrery
