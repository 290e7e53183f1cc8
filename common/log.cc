// stderr logger. Timestamps come from the wall clock, which is fine for logs only:
// no decision in Orrery depends on them.
#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace orrery {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void Log(LogLevel level, std::string_view message, std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < g_level.load()) return;
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string line;
  line.reserve(128);
  char head[32];
  std::snprintf(head, sizeof(head), "%c %02d:%02d:%02d.%03d ", kLetters[static_cast<int>(level)],
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  line += head;
  line += message;
  for (const auto& [k, v] : fields) {
    line += ' ';
    line += k;
    line += '=';
    const bool quote = v.find(' ') != std::string::npos;
    if (quote) line += '"';
    line += v;
    if (quote) line += '"';
  }
  line += '\n';
  std::lock_guard<std::mutex> lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace orrery
