#include "operator/local/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace orrery::local {

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0)) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

std::string ProgressLine(const TaskProgress& t, size_t name_width, int bar_width, bool unicode) {
  std::ostringstream os;
  std::string name = t.name;
  if (name.size() < name_width) name.append(name_width - name.size(), ' ');
  os << name << " ";
  double frac = t.steps > 0 ? std::clamp(static_cast<double>(t.step) / t.steps, 0.0, 1.0) : 0;
  int filled = static_cast<int>(std::floor(frac * bar_width));
  os << (unicode ? "▕" : "[");
  for (int i = 0; i < bar_width; ++i)
    os << (i < filled ? (unicode ? "█" : "#") : (unicode ? "·" : "."));
  os << (unicode ? "▏" : "]");
  char buf[160];
  std::snprintf(buf, sizeof(buf), " %3d%% %lld/%lld", static_cast<int>(std::floor(frac * 100)),
                static_cast<long long>(t.step), static_cast<long long>(t.steps));
  os << buf;
  if (t.state == "running" || t.state == "completed") {
    if (t.loss > 0) {
      std::snprintf(buf, sizeof(buf), "  loss %.3f", t.loss);
      os << buf;
    }
    if (t.state == "running" && t.samples_per_s > 0) {
      std::snprintf(buf, sizeof(buf), "  %.0f samples/s", t.samples_per_s);
      os << buf;
      if (t.eta_s >= 0) os << "  ETA " << FormatDuration(t.eta_s);
    }
  }
  os << "  " << t.state;
  if (!t.config.empty()) os << " " << t.config;
  return os.str();
}

void ProgressDisplay::Clear() {
  if (tty_ && drawn_lines_ > 0) {
    out_ << "\x1b[" << drawn_lines_ << "A\x1b[J";
    drawn_lines_ = 0;
  }
}

void ProgressDisplay::Event(double t, const std::string& text) {
  Clear();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "[%7.1fs] ", t);
  out_ << stamp << text << "\n";
  out_.flush();
}

void ProgressDisplay::Update(double t, const std::vector<TaskProgress>& tasks,
                             double expected_finish_s) {
  size_t width = 0;
  for (const auto& task : tasks) width = std::max(width, task.name.size());
  if (tty_) {
    Clear();
    for (const auto& task : tasks) out_ << ProgressLine(task, width, 24, true) << "\n";
    out_ << "elapsed " << FormatDuration(t);
    if (expected_finish_s >= 0) out_ << "  plan finishes at " << FormatDuration(expected_finish_s);
    out_ << "\n";
    drawn_lines_ = static_cast<int>(tasks.size()) + 1;
    out_.flush();
    return;
  }
  printed_tenths_.resize(tasks.size(), -1);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskProgress& task = tasks[i];
    if (task.steps <= 0 || task.state != "running") continue;
    int tenth = static_cast<int>(10 * task.step / task.steps);
    if (tenth <= printed_tenths_[i]) continue;
    printed_tenths_[i] = tenth;
    char stamp[32];
    std::snprintf(stamp, sizeof(stamp), "[%7.1fs] ", t);
    out_ << stamp << ProgressLine(task, width, 20, false) << "\n";
  }
  out_.flush();
}

void ProgressDisplay::Finish(const std::vector<TaskProgress>& tasks) {
  size_t width = 0;
  for (const auto& task : tasks) width = std::max(width, task.name.size());
  Clear();
  for (const auto& task : tasks) out_ << ProgressLine(task, width, tty_ ? 24 : 20, tty_) << "\n";
  out_.flush();
  drawn_lines_ = 0;
}

}  // namespace orrery::local
