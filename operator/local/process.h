// A child process for the local world: a worker rank started with its own
// arguments and environment, its stdout read line by line without blocking, its
// stderr appended to a log file, signalled and reaped. Each child gets its own
// process group (a terminal's Ctrl-C reaches only `orrery run`, which decides what
// the workers do) and dies with its parent (PR_SET_PDEATHSIG), so no worker
// outlives the runner whatever happens to it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "common/status.h"

namespace orrery::local {

class Process {
 public:
  // argv[0] is the program path. `env` is added to (and overrides) the parent's
  // environment. stdout is captured when `capture_stdout`, else discarded.
  static StatusOr<Process> Spawn(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& stderr_path, bool capture_stdout);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // kills (SIGKILL) and reaps a child still running

  pid_t pid() const { return pid_; }
  // Complete lines read so far (without '\n'); never blocks.
  std::vector<std::string> ReadLines();
  // Exit status once exited: the code, or 128 + signal; nullopt while running.
  std::optional<int> Poll();
  bool Running() { return !Poll().has_value(); }
  void Signal(int signal) const;
  // Waits up to `timeout_s`; then SIGKILL. Returns the exit status.
  int WaitOrKill(double timeout_s);

 private:
  Process() = default;
  void Reset();
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string partial_;
  std::optional<int> status_;
};

}  // namespace orrery::local
