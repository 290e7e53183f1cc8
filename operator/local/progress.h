// What `orrery run` shows while it works. On a terminal: the events scroll by and
// below them one progress bar per task (steps, loss, throughput, ETA) and the
// plan's expected finish, redrawn in place. Piped to a file: the same events, one
// per line, and a task's progress line only when it crosses a tenth of its work,
// so the log stays short and greppable.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace orrery::local {

struct TaskProgress {
  std::string name;
  std::string state;   // pending | profiling | running | completed | failed | ...
  std::string config;  // "ddp×2", "" when none yet
  int64_t step = 0;
  int64_t steps = 0;
  double loss = 0;
  double samples_per_s = 0;
  double eta_s = -1;  // < 0 unknown
};

// "1:05:09", "4:05", "0:07".
std::string FormatDuration(double seconds);
// One task's line, `width` columns for the bar (ASCII when !unicode).
std::string ProgressLine(const TaskProgress& task, size_t name_width, int bar_width, bool unicode);

class ProgressDisplay {
 public:
  ProgressDisplay(std::ostream& out, bool tty) : out_(out), tty_(tty) {}
  // An event line, stamped with seconds since the start.
  void Event(double t, const std::string& text);
  // The current bars and the plan's expected finish (< 0: no plan yet).
  void Update(double t, const std::vector<TaskProgress>& tasks, double expected_finish_s);
  // Leaves the final bars on screen (tty) or prints a last line per task (pipe).
  void Finish(const std::vector<TaskProgress>& tasks);

 private:
  void Clear();
  std::ostream& out_;
  bool tty_;
  int drawn_lines_ = 0;
  std::vector<int> printed_tenths_;  // pipe mode: last tenth printed per task
};

}  // namespace orrery::local
