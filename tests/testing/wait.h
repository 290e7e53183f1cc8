// Waiting in real time for something a real process or server will do: the
// integration and e2e tests poll instead of sleeping a fixed time, so they are
// as fast as the system allows and fail only after a generous limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>

namespace orrery::testing {

// Calls `done` every `poll` until it returns true or `limit` has passed; the
// last call is made at the limit, so a condition that became true just then
// still counts. Returns whether it did.
template <typename F, typename Rep, typename Period>
bool WaitUntil(F done, std::chrono::duration<Rep, Period> limit,
               std::chrono::milliseconds poll = std::chrono::milliseconds(100)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

// The same with a minute's limit: long enough for anything a loaded 2-core
// machine does in these tests, short enough that a hang fails soon.
template <typename F>
bool WaitUntil(F done) {
  return WaitUntil(std::move(done), std::chrono::seconds(60));
}

// The same with the limit and the poll in seconds (figures computed at run time).
template <typename F>
bool WaitUntil(F done, double limit_s, double poll_s = 0.1) {
  return WaitUntil(std::move(done), std::chrono::duration<double>(limit_s),
                   std::chrono::milliseconds(static_cast<int64_t>(poll_s * 1000)));
}

}  // namespace orrery::testing
