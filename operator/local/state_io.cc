#include "operator/local/state_io.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace orrery::local {
namespace {

using nlohmann::json;

// A count (bytes, a step) of a worker line; 0 when absent, negative or not an
// integer.
int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return INT64_MAX;
  }
  return std::max<int64_t>(0, it->get<int64_t>());
}

double Number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string Text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::optional<ReportStateIo> ParseStateIo(const json& line, double time_s) {
  if (!line.is_object()) return std::nullopt;
  const std::string event = Text(line, "event");
  const bool save = event == "checkpoint";
  if (!save && event != "restore") return std::nullopt;
  auto step = line.find("step");
  if (step == line.end() || !step->is_number_integer()) return std::nullopt;
  ReportStateIo io;
  io.op = save ? "save" : "restore";
  io.time_s = time_s;
  io.step = step->get<int64_t>();
  io.seconds = Number(line, "seconds");
  if (save) {
    io.reason = Text(line, "reason");
    io.bytes = Int(line, "bytes");
  } else {
    io.from_layout = Text(line, "from_layout");
    io.layout = Text(line, "layout");
    io.bytes = Int(line, "bytes_read");
    io.bytes_needed = Int(line, "bytes_needed");
  }
  auto ranks = line.find("ranks");
  if (ranks != line.end() && ranks->is_array() && !ranks->empty()) {
    int64_t bytes = 0, needed = 0;
    for (const json& r : *ranks) {
      if (!r.is_object()) continue;
      ++io.ranks;
      bytes += Int(r, "bytes");
      needed += Int(r, "bytes_needed");
      io.peak_rss_bytes = std::max(io.peak_rss_bytes, Int(r, "peak_rss_bytes"));
    }
    // The ranks' own counts are the detail; a total the line states wins.
    if (io.bytes == 0) io.bytes = bytes;
    if (io.bytes_needed == 0) io.bytes_needed = needed;
  }
  return io;
}

std::string RestoreEventText(const std::string& task, const ReportStateIo& r) {
  std::string text = task;
  if (!r.from_layout.empty() && !r.layout.empty() && r.from_layout != r.layout) {
    text += " re-sharded step " + std::to_string(r.step) + " from " + r.from_layout + " into " +
            r.layout;
  } else {
    text += " restored step " + std::to_string(r.step);
    if (!r.layout.empty()) text += " in " + r.layout;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds,
                r.seconds < 9.995   ? "%.2f"
                : r.seconds < 99.95 ? "%.1f"
                                    : "%.0f",
                r.seconds);
  text += ": read " + FormatBytes(r.bytes) + " of " + FormatBytes(r.bytes_needed) + " needed in " +
          seconds + " s";
  if (r.peak_rss_bytes > 0) text += " (peak RSS " + FormatBytes(r.peak_rss_bytes) + ")";
  return text;
}

void AppendStateIo(std::vector<ReportStateIo>* records, ReportStateIo io, size_t max_saves) {
  records->push_back(std::move(io));
  size_t saves = 0;
  for (const ReportStateIo& r : *records) saves += r.op == "save" ? 1 : 0;
  if (saves <= max_saves) return;
  auto oldest = std::find_if(records->begin(), records->end(),
                             [](const ReportStateIo& r) { return r.op == "save"; });
  records->erase(oldest);
}

}  // namespace orrery::local
