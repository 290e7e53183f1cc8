#include "operator/cli/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <ctime>
#include <utility>

namespace orrery::cli {
namespace {

// Threads that libraries start before StopSignals exists (OpenBLAS starts its
// pool when it is loaded) do not block the signals, so the kernel may deliver
// one to them: the handler then passes it on through this pipe.
std::atomic<int> g_forward_fd{-1};

extern "C" void ForwardSignal(int sig) {
  int fd = g_forward_fd.load();
  if (fd >= 0) {
    unsigned char b = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = write(fd, &b, 1);
  }
}

}  // namespace

StopSignals::StopSignals(std::atomic<bool>* stop, std::function<void()> on_stop, int exit_after) {
  int fds[2] = {-1, -1};
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    g_forward_fd.store(write_fd_);
  }
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  // A handler, not "ignore": a background job starts with SIGINT ignored, and an
  // ignored signal is dropped even when blocked.
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
  waiter_ = std::thread([this, stop, on_stop = std::move(on_stop), exit_after] {
    int count = 0;
    while (!done_.load()) {
      // Signals pending for the process (every thread blocks them) are taken
      // here; the ones a library thread took arrive through the pipe.
      int sig = 0;
      timespec zero{0, 0};
      siginfo_t info;
      int got = sigtimedwait(&set_, &info, &zero);
      if (got > 0) sig = got;
      if (sig == 0 && read_fd_ >= 0) {
        pollfd p{read_fd_, POLLIN, 0};
        if (poll(&p, 1, 100) > 0) {
          unsigned char b = 0;
          if (read(read_fd_, &b, 1) == 1) sig = b;
        }
      } else if (sig == 0) {
        timespec wait{0, 100 * 1000 * 1000};
        got = sigtimedwait(&set_, &info, &wait);
        if (got > 0) sig = got;
      }
      if (sig == 0 || done_.load()) continue;
      stop->store(true);
      if (on_stop) on_stop();
      if (exit_after > 0 && ++count >= exit_after) _exit(130);
    }
  });
}

StopSignals::~StopSignals() {
  done_.store(true);
  waiter_.join();
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_forward_fd.store(-1);
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

}  // namespace orrery::cli
