// SIGINT and SIGTERM for long-running commands (`orrery run`, `orrery operator`),
// seen by one thread that waits for them. A handler alone would not do: CBC
// installs its own SIGINT handler whenever it solves (to stop a solve),
// replacing ours. Blocked signals stay pending whatever handler is installed, so
// the waiting thread gets them; threads that libraries started before us (and
// that do not block them) run a handler that forwards to the waiting thread
// through a pipe. Child processes unblock the signals before exec.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace orrery::cli {

class StopSignals {
 public:
  // Every SIGINT/SIGTERM sets `*stop` and calls `on_stop` (from the waiting
  // thread; it may be null). The `exit_after`-th signal exits the process at
  // once with status 130 (0: never), for a user who gives up on a clean stop.
  StopSignals(std::atomic<bool>* stop, std::function<void()> on_stop = nullptr, int exit_after = 3);
  ~StopSignals();  // restores the signal mask and dispositions
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  sigset_t set_;
  sigset_t old_mask_;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

}  // namespace orrery::cli
