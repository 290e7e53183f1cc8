// Minimal structured logging to stderr: a level, a message in the Kubernetes style
// ("Created Pod"), and key=value pairs. Thread-safe; one line per call.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace orrery {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

using LogField = std::pair<std::string_view, std::string>;
// Log(kInfo, "Created Pod", {{"job", "ns/sweep"}, {"rank", "2"}})
//   -> "I 12:00:01.123 Created Pod job=ns/sweep rank=2"
void Log(LogLevel level, std::string_view message, std::initializer_list<LogField> fields = {});

}  // namespace orrery
