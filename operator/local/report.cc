// The run report (see report.h). The HTML page is built as plain strings: CSS and
// SVG inline, every user-supplied string escaped, nothing fetched and no script,
// so it opens from a work directory on any machine and is safe to share. The
// Gantt chart draws what actually ran (one lane per device) above the latest plan
// on one time axis, so where reality drifted from the plan is visible at a glance.
// report.json carries the same figures with a version, for a resumed run to read.
#include "operator/local/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace orrery::local {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------
// Colours

// Twelve hues spread round the colour wheel, with the lightness varied so that
// neighbours differ even for readers who confuse red and green.
constexpr const char* kPalette[] = {
    "#1f77b4",  // blue
    "#ff7f0e",  // orange
    "#2ca02c",  // green
    "#d62728",  // red
    "#9467bd",  // purple
    "#8c564b",  // brown
    "#e377c2",  // pink
    "#17becf",  // cyan
    "#bcbd22",  // olive
    "#3b3eac",  // indigo
    "#f2b701",  // gold
    "#b8008a",  // magenta
};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

struct Rgb {
  int r = 0, g = 0, b = 0;
};

Rgb ParseRgb(const std::string& hex) {
  auto part = [&](size_t i) { return std::stoi(hex.substr(1 + 2 * i, 2), nullptr, 16); };
  return {part(0), part(1), part(2)};
}

std::string FormatRgb(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", std::clamp(c.r, 0, 255), std::clamp(c.g, 0, 255),
                std::clamp(c.b, 0, 255));
  return buf;
}

// Text on a bar: dark on light colours, white on dark ones (relative luminance).
const char* TextColourOn(const std::string& hex) {
  const Rgb c = ParseRgb(hex);
  const double y = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
  return y > 150 ? "#111" : "#fff";
}

// ---------------------------------------------------------------------------
// Formatting

std::string Escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "12.5 s", "4 min 05 s", "2 h 03 min".
std::string Duration(double s) {
  if (!std::isfinite(s)) return "–";
  if (s < 0) {
    std::string out = "-";
    out += Duration(-s);
    return out;
  }
  if (s < 60) return Fmt(s < 10 ? "%.1f s" : "%.0f s", s);
  const long total = std::lround(s);
  char buf[48];
  if (total < 3600) {
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", total / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld h %02ld min", total / 3600, (total % 3600) / 60);
  }
  return buf;
}

std::string Number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "∞" : "-∞");
  return Fmt("%.4g", v);
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks.
double NiceStep(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double nice = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
  return nice * mag;
}

// Time ticks in seconds, but stepping in whole minutes or hours when the run is long.
struct TimeTicks {
  double step_s = 1;
  double unit_s = 1;
  const char* unit = "s";
};

TimeTicks ChooseTimeTicks(double span_s) {
  TimeTicks t;
  if (span_s <= 180) {
    t.step_s = NiceStep(span_s, 8);
  } else if (span_s <= 3 * 3600) {
    t.unit_s = 60;
    t.unit = "min";
    const double m = NiceStep(span_s / 60, 8);
    t.step_s = 60 * std::max(1.0, m);
  } else {
    t.unit_s = 3600;
    t.unit = "h";
    t.step_s = 3600 * NiceStep(span_s / 3600, 8);
  }
  return t;
}

std::string TickLabel(double v, double step) {
  // Enough decimals to tell ticks apart, none when they are whole.
  if (std::fabs(step - std::round(step)) < 1e-9 && std::fabs(v - std::round(v)) < 1e-9) {
    return Fmt("%.0f", v);
  }
  return step >= 0.1 ? Fmt("%.1f", v) : Fmt("%.3g", v);
}

// At most `max` bytes of `s`, ending in "…" when cut; never splits a UTF-8 character.
std::string Shorten(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max - 1;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  return s.substr(0, cut) + "…";
}

std::string Px(double v) { return Fmt("%.1f", v); }

// ---------------------------------------------------------------------------
// HTML

constexpr const char* kStyle = R"css(
:root { --ink:#1d2330; --muted:#5b6475; --rule:#dfe3ea; --panel:#f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 14px/1.45 -apple-system, "Segoe UI", Roboto,
  "DejaVu Sans", Helvetica, Arial, sans-serif; color: var(--ink); background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--rule); }
h3 { font-size: 14px; margin: 16px 0 6px; }
.meta { display: flex; flex-wrap: wrap; gap: 8px 28px; color: var(--muted); margin: 6px 0 0; }
.meta b { color: var(--ink); font-weight: 600; }
.outcome { display: inline-block; padding: 1px 9px; border-radius: 10px; color: #fff;
  font-weight: 600; background: #6b7280; }
.outcome.completed { background: #1a7f37; } .outcome.failed { background: #c62828; }
.outcome.interrupted { background: #b26a00; } .outcome.running { background: #1f6feb; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 9px; border-bottom: 1px solid var(--rule); vertical-align: top; }
th { background: var(--panel); font-weight: 600; color: var(--muted); white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: -1px; margin-right: 6px; }
code { font: 12px ui-monospace, "DejaVu Sans Mono", Menlo, monospace; background: var(--panel);
  padding: 0 4px; border-radius: 3px; }
.progress { display: inline-block; width: 60px; height: 6px; background: var(--rule);
  border-radius: 3px; vertical-align: middle; margin-left: 6px; overflow: hidden; }
.progress i { display: block; height: 100%; background: #1a7f37; }
.note { color: var(--muted); font-style: italic; margin: 6px 0; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font-family: -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Helvetica, Arial, sans-serif; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 8px 0 0; color: var(--muted); font-size: 12px; }
.legend svg { display: inline-block; vertical-align: middle; margin-right: 5px; }
ul.events { list-style: none; padding: 0; margin: 0; font-size: 13px; }
ul.events li { padding: 3px 0; border-bottom: 1px solid var(--rule); }
ul.events .t { display: inline-block; min-width: 90px; color: var(--muted); font-variant-numeric: tabular-nums; }
)css";

class Page {
 public:
  Page& operator<<(const std::string& s) {
    out_ += s;
    return *this;
  }
  Page& operator<<(const char* s) {
    out_ += s;
    return *this;
  }
  std::string str() && { return std::move(out_); }

 private:
  std::string out_;
};

// Colour of each task name; bars of tasks the table does not list get colours
// after the listed ones, in order of appearance, so every bar is coloured.
std::map<std::string, std::string> ColourByTask(const RunReport& r) {
  std::map<std::string, std::string> colours;
  size_t next = 0;
  auto add = [&](const std::string& name) {
    if (!colours.count(name)) colours[name] = TaskColour(next++);
  };
  for (const auto& t : r.tasks) add(t.name);
  for (const auto& b : r.actual) add(b.task);
  for (const auto& b : r.planned) add(b.task);
  return colours;
}

void Header(Page& p, const RunReport& r) {
  const std::string outcome = r.outcome.empty() ? "unknown" : r.outcome;
  p << "<header><h1>Orrery run: " << Escape(r.job.empty() ? "(unnamed job)" : r.job) << "</h1>"
    << "<div class=\"meta\">"
    << "<span>Outcome <span class=\"outcome " << Escape(outcome) << "\">" << Escape(outcome)
    << "</span></span>"
    << "<span>Devices <b>" << Escape(r.devices) << "</b> (" << std::to_string(r.device_count)
    << ")</span>"
    << "<span>Started <b>" << (r.started_at.empty() ? "–" : Escape(r.started_at)) << "</b></span>"
    << "<span>Wall time <b>" << Duration(r.wall_s) << "</b></span>"
    << "<span>Tasks <b>" << std::to_string(r.tasks.size()) << "</b></span>"
    << "</div></header>\n";
}

void TaskTable(Page& p, const RunReport& r, const std::map<std::string, std::string>& colour) {
  p << "<section><h2>Tasks</h2>";
  if (r.tasks.empty()) {
    p << "<p class=\"note\">No tasks yet.</p></section>\n";
    return;
  }
  p << "<table><thead><tr><th>Task</th><th>Hyper-parameters</th><th>State</th>"
       "<th>Template</th><th class=\"num\">GPUs</th><th class=\"num\">Batch</th>"
       "<th class=\"num\">Steps</th><th class=\"num\">Final loss</th>"
       "<th class=\"num\">Samples/s</th><th class=\"num\">Restarts</th></tr></thead><tbody>";
  for (const auto& t : r.tasks) {
    p << "<tr><td><span class=\"swatch\" style=\"background:" << colour.at(t.name) << "\"></span>"
      << Escape(t.name);
    if (!t.source.empty() && t.source != t.name)
      p << " <small>(" << Escape(t.source) << ")</small>";
    p << "</td><td>";
    for (size_t i = 0; i < t.hyper.size(); ++i) {
      p << (i ? " " : "") << "<code>" << Escape(t.hyper[i].first) << "="
        << Escape(t.hyper[i].second) << "</code>";
    }
    const double done =
        t.steps_total > 0
            ? std::clamp(static_cast<double>(t.steps_done) / static_cast<double>(t.steps_total),
                         0.0, 1.0)
            : 0.0;
    p << "</td><td>" << Escape(t.state) << "</td><td>" << Escape(t.template_name) << "</td>"
      << "<td class=\"num\">" << std::to_string(t.gpus) << "</td><td class=\"num\">"
      << std::to_string(t.batch_size) << "</td><td class=\"num\">" << std::to_string(t.steps_done)
      << " / " << std::to_string(t.steps_total)
      << "<span class=\"progress\"><i style=\"width:" << Fmt("%.0f", 100 * done)
      << "%\"></i></span></td>"
      << "<td class=\"num\">"
      << (t.losses.empty() && t.final_loss == 0 ? "–" : Number(t.final_loss))
      << "</td><td class=\"num\">" << (t.samples_per_s > 0 ? Number(t.samples_per_s) : "–")
      << "</td><td class=\"num\">" << std::to_string(t.restarts) << "</td></tr>";
  }
  p << "</tbody></table>";
  // Where each trained model went, to load with transformers (or PEFT).
  bool exported = false;
  for (const auto& t : r.tasks) exported = exported || !t.export_path.empty();
  if (exported) {
    p << "<h3>Trained models</h3><table><thead><tr><th>Task</th><th>Hugging Face directory</th>"
         "</tr></thead><tbody>";
    for (const auto& t : r.tasks) {
      if (t.export_path.empty()) continue;
      p << "<tr><td><span class=\"swatch\" style=\"background:" << colour.at(t.name) << "\"></span>"
        << Escape(t.name) << "</td><td><code>" << Escape(t.export_path) << "</code></td></tr>";
    }
    p << "</tbody></table>";
  }
  p << "</section>\n";
}

// How a bar ended, drawn on top of its fill so the task colour stays readable.
struct EndStyle {
  const char* stroke;
  double width;
  const char* dash;   // "" for solid
  const char* hatch;  // pattern id or ""
  const char* label;
};

EndStyle StyleFor(const std::string& ended_by) {
  if (ended_by == "device-lost") return {"#e00000", 2.5, "", "", "device lost"};
  if (ended_by == "failed") return {"#111", 2, "", "hatch-dark", "failed"};
  if (ended_by == "interrupted") return {"#444", 1.5, "", "hatch-light", "interrupted"};
  if (ended_by == "rescaled") return {"#111", 1.5, "2 2", "", "rescaled"};
  if (ended_by == "running") return {"#111", 1.5, "6 3", "", "running"};
  if (ended_by == "completed") return {"rgba(0,0,0,0.35)", 1, "", "", "completed"};
  return {"rgba(0,0,0,0.25)", 1, "", "", ""};  // planned or unknown
}

struct Axis {
  double left = 0, width = 0, span = 1;
  double X(double t) const { return left + width * std::clamp(t / span, 0.0, 1.0); }
};

// Devices as contiguous runs of lanes: {0,1,3} -> {0,1},{3}.
std::vector<std::pair<int, int>> LaneRuns(std::vector<int> devices) {
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  std::vector<std::pair<int, int>> runs;
  for (int d : devices) {
    if (d < 0) continue;
    if (!runs.empty() && runs.back().second + 1 == d) {
      runs.back().second = d;
    } else {
      runs.push_back({d, d});
    }
  }
  return runs;
}

std::string DeviceList(const std::vector<int>& devices) {
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(devices[i]);
  }
  return s;
}

// One panel of lanes. Each bar is one <rect class="bar ..."> on its first run of
// contiguous lanes (a gang on non-adjacent devices adds "bar-part" rects).
// A lane's label: "device 3", or with GPU types the type and the device,
// "L4 3" (the type cut to fit the margin).
std::string LaneLabel(int lane, const std::vector<std::string>& types) {
  const size_t k = static_cast<size_t>(lane);
  if (k >= types.size() || types[k].empty()) return "device " + std::to_string(lane);
  std::string type = types[k].size() > 9 ? types[k].substr(0, 8) + "…" : types[k];
  return type + " " + std::to_string(lane);
}

void GanttPanel(Page& p, const std::vector<ReportBar>& bars, const char* kind, const char* title,
                int lanes, double top, const Axis& axis,
                const std::map<std::string, std::string>& colour,
                const std::vector<std::string>& device_types) {
  constexpr double kLane = 30, kPad = 4;
  const double height = lanes * kLane;
  p << "<text x=\"" << Px(axis.left) << "\" y=\"" << Px(top - 8)
    << "\" font-size=\"13\" font-weight=\"600\" fill=\"#1d2330\">" << title << "</text>";
  for (int lane = 0; lane < lanes; ++lane) {
    const double y = top + lane * kLane;
    p << "<rect x=\"" << Px(axis.left) << "\" y=\"" << Px(y) << "\" width=\"" << Px(axis.width)
      << "\" height=\"" << Px(kLane) << "\" fill=\"" << (lane % 2 ? "#ffffff" : "#f6f7f9")
      << "\"/><text x=\"" << Px(axis.left - 8) << "\" y=\"" << Px(y + kLane / 2 + 4)
      << "\" font-size=\"12\" text-anchor=\"end\" fill=\"#5b6475\">"
      << Escape(LaneLabel(lane, device_types)) << "</text>";
  }
  p << "<rect x=\"" << Px(axis.left) << "\" y=\"" << Px(top) << "\" width=\"" << Px(axis.width)
    << "\" height=\"" << Px(height) << "\" fill=\"none\" stroke=\"#c9ced8\"/>";
  if (bars.empty()) {
    p << "<text x=\"" << Px(axis.left + axis.width / 2) << "\" y=\"" << Px(top + height / 2 + 4)
      << "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#5b6475\" font-style=\"italic\">"
      << "no bars yet</text>";
    return;
  }
  for (const auto& b : bars) {
    const auto runs = LaneRuns(b.devices);
    if (runs.empty()) continue;
    const std::string& fill = colour.at(b.task);
    const EndStyle st = StyleFor(b.ended_by);
    const double x0 = axis.X(b.start_s);
    const double w = std::max(1.5, axis.X(b.end_s) - x0);
    // The hover tooltip (SVG <title>): everything the bar stands for.
    std::string tip = b.task;
    for (const std::string& line :
         {"devices " + DeviceList(b.devices) + (b.gpu_type.empty() ? "" : " (" + b.gpu_type + ")"),
          Duration(b.start_s) + " → " + Duration(b.end_s) + " (" + Duration(b.end_s - b.start_s) +
              ")",
          b.template_name, std::to_string(b.gpus) + " GPU, batch " + std::to_string(b.batch_size),
          b.ended_by.empty() ? std::string() : "ended by " + b.ended_by,
          b.gang.empty() ? std::string() : "interleaved gang " + b.gang}) {
      if (line.empty()) continue;
      tip += '\n';
      tip += line;
    }
    // A gang's members share their lanes: each draws its own band of them.
    size_t band = 0, bands = 1;
    if (!b.gang.empty()) {
      std::vector<std::string> members;
      std::stringstream names(b.gang);
      for (std::string m; std::getline(names, m, '+');) members.push_back(m);
      auto it = std::find(members.begin(), members.end(), b.task);
      if (it != members.end()) {
        band = static_cast<size_t>(it - members.begin());
        bands = members.size();
      }
    }
    for (size_t i = 0; i < runs.size(); ++i) {
      const double h =
          ((runs[i].second - runs[i].first + 1) * kLane - 2 * kPad) / static_cast<double>(bands);
      const double y = top + runs[i].first * kLane + kPad + static_cast<double>(band) * h;
      p << "<rect class=\"" << (i == 0 ? "bar " : "bar-part ") << kind << "\" data-task=\""
        << Escape(b.task) << "\" data-ended-by=\"" << Escape(b.ended_by) << "\" data-gang=\""
        << Escape(b.gang) << "\" x=\"" << Px(x0) << "\" y=\"" << Px(y) << "\" width=\"" << Px(w)
        << "\" height=\"" << Px(h) << "\" rx=\"3\" fill=\"" << fill << "\"><title>" << Escape(tip)
        << "</title></rect>";
      if (*st.hatch) {
        p << "<rect x=\"" << Px(x0) << "\" y=\"" << Px(y) << "\" width=\"" << Px(w)
          << "\" height=\"" << Px(h) << "\" rx=\"3\" fill=\"url(#" << st.hatch
          << ")\" pointer-events=\"none\"/>";
      }
      // The outline is inset by half its width so it never covers a neighbour.
      const double sw = st.width;
      if (w > sw) {
        p << "<rect x=\"" << Px(x0 + sw / 2) << "\" y=\"" << Px(y + sw / 2) << "\" width=\""
          << Px(w - sw) << "\" height=\"" << Px(h - sw) << "\" rx=\"3\" fill=\"none\" stroke=\""
          << st.stroke << "\" stroke-width=\"" << Fmt("%g", st.width) << "\"";
        if (*st.dash) p << " stroke-dasharray=\"" << st.dash << "\"";
        p << " pointer-events=\"none\"/>";
      }
      // Label when the name fits (about 7 px a character at 11 px).
      if (w >= 7.0 * static_cast<double>(b.task.size()) + 10) {
        p << "<text x=\"" << Px(x0 + 6) << "\" y=\"" << Px(y + h / 2 + 4)
          << "\" font-size=\"11\" font-weight=\"600\" fill=\"" << TextColourOn(fill)
          << "\" pointer-events=\"none\">" << Escape(b.task) << "</text>";
      }
    }
  }
}

void Gantt(Page& p, const RunReport& r, const std::map<std::string, std::string>& colour) {
  p << "<section><h2>Schedule: actual vs planned</h2>";
  int lanes = std::max(1, r.device_count);
  double span = std::max(0.0, r.wall_s);
  for (const auto* bars : {&r.actual, &r.planned}) {
    for (const auto& b : *bars) {
      for (int d : b.devices) lanes = std::max(lanes, d + 1);
      if (std::isfinite(b.end_s)) span = std::max(span, b.end_s);
    }
  }
  if (!(span > 0)) span = 1;
  const TimeTicks ticks = ChooseTimeTicks(span);
  span = std::ceil(span / ticks.step_s - 1e-9) * ticks.step_s;  // end on a tick

  constexpr double kWidth = 1200, kLeft = 78, kRight = 20, kLane = 30, kGap = 44;
  const Axis axis{kLeft, kWidth - kLeft - kRight, span};
  const double actual_top = 26;
  const double planned_top = actual_top + lanes * kLane + kGap;
  const double axis_y = planned_top + lanes * kLane;
  const double height = axis_y + 42;
  p << "<svg class=\"gantt\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << Px(kWidth)
    << "\" height=\"" << Px(height) << "\" viewBox=\"0 0 " << Px(kWidth) << " " << Px(height)
    << "\" role=\"img\" aria-label=\"Gantt chart\"><defs>"
    << "<pattern id=\"hatch-dark\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
       "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"6\" fill=\"rgba(0,0,0,0.45)\"/>"
       "</pattern>"
    << "<pattern id=\"hatch-light\" width=\"7\" height=\"7\" patternUnits=\"userSpaceOnUse\" "
       "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"7\" "
       "fill=\"rgba(255,255,255,0.55)\"/></pattern></defs>";
  // Grid lines first, under the bars of both panels.
  for (double t = 0; t <= span + 1e-9; t += ticks.step_s) {
    const double x = axis.X(t);
    for (double top : {actual_top, planned_top}) {
      p << "<line x1=\"" << Px(x) << "\" y1=\"" << Px(top) << "\" x2=\"" << Px(x) << "\" y2=\""
        << Px(top + lanes * kLane) << "\" stroke=\"#e3e6ec\"/>";
    }
  }
  GanttPanel(p, r.actual, "actual", "Actual", lanes, actual_top, axis, colour, r.device_types);
  GanttPanel(p, r.planned, "planned", "Planned (latest plan)", lanes, planned_top, axis, colour,
             r.device_types);
  for (double t = 0; t <= span + 1e-9; t += ticks.step_s) {
    const double x = axis.X(t);
    p << "<line x1=\"" << Px(x) << "\" y1=\"" << Px(axis_y) << "\" x2=\"" << Px(x) << "\" y2=\""
      << Px(axis_y + 5) << "\" stroke=\"#5b6475\"/><text x=\"" << Px(x) << "\" y=\""
      << Px(axis_y + 18) << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#5b6475\">"
      << TickLabel(t / ticks.unit_s, ticks.step_s / ticks.unit_s) << "</text>";
  }
  p << "<text x=\"" << Px(axis.left + axis.width / 2) << "\" y=\"" << Px(axis_y + 36)
    << "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#5b6475\">time since start ("
    << ticks.unit << ")</text>";
  // "Now": where the run stood when this report was written.
  if (r.wall_s > 0 && r.wall_s < span) {
    const double x = axis.X(r.wall_s);
    p << "<line x1=\"" << Px(x) << "\" y1=\"" << Px(actual_top - 4) << "\" x2=\"" << Px(x)
      << "\" y2=\"" << Px(axis_y) << "\" stroke=\"#1d2330\" stroke-width=\"1.2\" "
      << "stroke-dasharray=\"4 3\"/>";
    // The label goes left of the line near the right edge, so it is not cut off.
    const bool left = x > axis.left + axis.width - 110;
    p << "<text x=\"" << Px(left ? x - 4 : x + 4) << "\" y=\"" << Px(actual_top - 8)
      << "\" font-size=\"11\" text-anchor=\"" << (left ? "end" : "start")
      << "\" fill=\"#1d2330\">now " << Duration(r.wall_s) << "</text>";
  }
  p << "</svg>";

  // Legend: tasks, then how bars ended.
  p << "<div class=\"legend\">";
  std::vector<std::string> order;
  for (const auto& t : r.tasks) order.push_back(t.name);
  for (const auto& entry : colour) {
    if (std::find(order.begin(), order.end(), entry.first) == order.end()) {
      order.push_back(entry.first);
    }
  }
  for (const auto& name : order) {
    p << "<span><span class=\"swatch\" style=\"background:" << colour.at(name) << "\"></span>"
      << Escape(name) << "</span>";
  }
  p << "</div><div class=\"legend\">";
  for (const char* e :
       {"completed", "running", "rescaled", "interrupted", "device-lost", "failed"}) {
    const EndStyle st = StyleFor(e);
    p << "<span><svg width=\"30\" height=\"14\"><rect x=\"1\" y=\"1\" width=\"28\" height=\"12\" "
         "rx=\"2\" fill=\"#9aa3b2\"/>";
    if (*st.hatch) {
      p << "<rect x=\"1\" y=\"1\" width=\"28\" height=\"12\" rx=\"2\" fill=\"url(#" << st.hatch
        << ")\"/>";
    }
    p << "<rect x=\"1.5\" y=\"1.5\" width=\"27\" height=\"11\" rx=\"2\" fill=\"none\" stroke=\""
      << st.stroke << "\" stroke-width=\"" << Fmt("%g", st.width) << "\"";
    if (*st.dash) p << " stroke-dasharray=\"" << st.dash << "\"";
    p << "/></svg>" << st.label << "</span>";
  }
  p << "</div></section>\n";
}

void LossChart(Page& p, const RunReport& r, const std::map<std::string, std::string>& colour) {
  p << "<section><h2>Training loss</h2>";
  double min_step = std::numeric_limits<double>::infinity(), max_step = -min_step;
  double min_loss = min_step, max_loss = -min_step;
  bool any = false;
  for (const auto& t : r.tasks) {
    for (const auto& pt : t.losses) {
      if (!std::isfinite(pt.loss)) continue;
      any = true;
      min_step = std::min(min_step, static_cast<double>(pt.step));
      max_step = std::max(max_step, static_cast<double>(pt.step));
      min_loss = std::min(min_loss, pt.loss);
      max_loss = std::max(max_loss, pt.loss);
    }
  }
  if (!any) {
    p << "<p class=\"note\">No loss reported yet (no data yet).</p></section>\n";
    return;
  }
  // Losses that fall by orders of magnitude read better on a log axis.
  const bool log_y = min_loss > 0 && max_loss / min_loss > 30;
  auto fy = [&](double v) { return log_y ? std::log10(v) : v; };
  double y_lo = fy(min_loss), y_hi = fy(max_loss);
  if (!log_y) y_lo = std::min(0.0, y_lo);
  if (y_hi - y_lo < 1e-12) {
    y_hi += 0.5;
    y_lo -= 0.5;
  }
  const double y_step = log_y ? 1.0 : NiceStep(y_hi - y_lo, 6);
  y_lo = std::floor(y_lo / y_step) * y_step;
  y_hi = std::ceil(y_hi / y_step - 1e-9) * y_step;
  double x_lo = 0, x_hi = std::max(max_step, 1.0);
  const double x_step = NiceStep(x_hi - x_lo, 8);
  x_hi = std::ceil(x_hi / x_step - 1e-9) * x_step;

  constexpr double kWidth = 1200, kLeft = 70, kRight = 220, kTop = 14, kBottom = 46;
  // Taller with many tasks, so the legend (18 px a task) fits beside the plot.
  const double chart_height =
      std::max(360.0, kTop + kBottom + 18.0 * static_cast<double>(r.tasks.size()));
  const double pw = kWidth - kLeft - kRight, ph = chart_height - kTop - kBottom;
  auto X = [&](double s) { return kLeft + pw * (s - x_lo) / (x_hi - x_lo); };
  auto Y = [&](double v) { return kTop + ph * (1 - (fy(v) - y_lo) / (y_hi - y_lo)); };
  auto Yraw = [&](double f) { return kTop + ph * (1 - (f - y_lo) / (y_hi - y_lo)); };

  p << "<svg class=\"loss\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << Px(kWidth)
    << "\" height=\"" << Px(chart_height) << "\" viewBox=\"0 0 " << Px(kWidth) << " "
    << Px(chart_height) << "\" role=\"img\" aria-label=\"Loss curves\">";
  p << "<rect x=\"" << Px(kLeft) << "\" y=\"" << Px(kTop) << "\" width=\"" << Px(pw)
    << "\" height=\"" << Px(ph) << "\" fill=\"#fbfbfc\" stroke=\"#c9ced8\"/>";
  for (double f = y_lo; f <= y_hi + 1e-9; f += y_step) {
    const double y = Yraw(f);
    const std::string label = log_y ? Number(std::pow(10.0, f)) : TickLabel(f, y_step);
    p << "<line x1=\"" << Px(kLeft) << "\" y1=\"" << Px(y) << "\" x2=\"" << Px(kLeft + pw)
      << "\" y2=\"" << Px(y) << "\" stroke=\"#e3e6ec\"/><text x=\"" << Px(kLeft - 8) << "\" y=\""
      << Px(y + 4) << "\" font-size=\"11\" text-anchor=\"end\" fill=\"#5b6475\">" << label
      << "</text>";
  }
  for (double s = x_lo; s <= x_hi + 1e-9; s += x_step) {
    const double x = X(s);
    p << "<line x1=\"" << Px(x) << "\" y1=\"" << Px(kTop) << "\" x2=\"" << Px(x) << "\" y2=\""
      << Px(kTop + ph) << "\" stroke=\"#e3e6ec\"/><text x=\"" << Px(x) << "\" y=\""
      << Px(kTop + ph + 17) << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#5b6475\">"
      << Fmt("%.0f", s) << "</text>";
  }
  p << "<text x=\"" << Px(kLeft + pw / 2) << "\" y=\"" << Px(chart_height - 8)
    << "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#5b6475\">step</text>"
    << "<text transform=\"translate(16," << Px(kTop + ph / 2)
    << ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#5b6475\">loss"
    << (log_y ? " (log scale)" : "") << "</text>";

  double legend_y = kTop + 8;
  for (const auto& t : r.tasks) {
    const std::string& c = colour.at(t.name);
    std::vector<std::pair<double, double>> pts;
    for (const auto& pt : t.losses) {
      if (std::isfinite(pt.loss) && (!log_y || pt.loss > 0)) {
        pts.push_back({X(static_cast<double>(pt.step)), Y(pt.loss)});
      }
    }
    if (pts.size() == 1) {
      p << "<circle cx=\"" << Px(pts[0].first) << "\" cy=\"" << Px(pts[0].second)
        << "\" r=\"3\" fill=\"" << c << "\"/>";
    } else if (pts.size() > 1) {
      p << "<polyline class=\"loss-curve\" data-task=\"" << Escape(t.name)
        << "\" fill=\"none\" stroke=\"" << c
        << "\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"";
      for (const auto& [x, y] : pts) p << Px(x) << "," << Px(y) << " ";
      p << "\"/>";
    }
    // Legend entry, with the last loss, to the right of the plot.
    const double lx = kLeft + pw + 16;
    p << "<line x1=\"" << Px(lx) << "\" y1=\"" << Px(legend_y) << "\" x2=\"" << Px(lx + 20)
      << "\" y2=\"" << Px(legend_y) << "\" stroke=\"" << c << "\" stroke-width=\"3\"/>"
      << "<text x=\"" << Px(lx + 26) << "\" y=\"" << Px(legend_y + 4)
      << "\" font-size=\"12\" fill=\"#1d2330\">" << Escape(Shorten(t.name, 22));
    if (!t.losses.empty())
      p << " <tspan fill=\"#5b6475\">" << Number(t.losses.back().loss) << "</tspan>";
    p << "</text>";
    legend_y += 18;
  }
  p << "</svg></section>\n";
}

// Each task's saves and restores: bytes moved against the bytes its ranks
// needed, time and the largest rank's peak memory. Every restore is listed; of
// the periodic saves only the latest kSavesShown, so a long run stays readable.
constexpr size_t kSavesShown = 20;

void StateIoTable(Page& p, const RunReport& r, const std::map<std::string, std::string>& colour) {
  p << "<section><h2>Checkpoints and re-shards</h2>";
  bool any = false;
  for (const auto& t : r.tasks) any = any || !t.state_io.empty();
  if (!any) {
    p << "<p class=\"note\">No checkpoint saved or restored yet.</p></section>\n";
    return;
  }
  for (const auto& t : r.tasks) {
    if (t.state_io.empty()) continue;
    size_t saves = 0;
    for (const auto& io : t.state_io) saves += io.op == "save" ? 1 : 0;
    const size_t skip = saves > kSavesShown ? saves - kSavesShown : 0;
    p << "<h3><span class=\"swatch\" style=\"background:" << colour.at(t.name) << "\"></span>"
      << Escape(t.name) << "</h3>";
    if (skip > 0) {
      p << "<p class=\"note\">" << std::to_string(skip) << " earlier of " << std::to_string(saves)
        << " saves not shown (report.json has them).</p>";
    }
    p << "<table><thead><tr><th class=\"num\">At</th><th>Operation</th><th class=\"num\">Step</th>"
         "<th>Layout</th><th class=\"num\">Written / read</th><th class=\"num\">Needed</th>"
         "<th class=\"num\">Moved / needed</th><th class=\"num\">Time</th>"
         "<th class=\"num\">Peak RSS (largest rank)</th></tr></thead><tbody>";
    size_t save_index = 0;
    for (const auto& io : t.state_io) {
      const bool save = io.op == "save";
      if (save && save_index++ < skip) continue;
      std::string op = save                                                    ? "save"
                       : io.from_layout.empty() || io.from_layout == io.layout ? "restore"
                                                                               : "re-shard";
      if (!io.reason.empty()) op += " (" + io.reason + ")";
      std::string layout;
      if (!save && !io.from_layout.empty() && io.from_layout != io.layout) {
        layout += "<code>" + Escape(io.from_layout) + "</code> → ";
      }
      layout += io.layout.empty() ? "–" : "<code>" + Escape(io.layout) + "</code>";
      const std::string ratio = io.bytes_needed > 0
                                    ? Fmt("%.0f %%", 100.0 * static_cast<double>(io.bytes) /
                                                         static_cast<double>(io.bytes_needed))
                                    : "–";
      p << "<tr><td class=\"num\">" << Duration(io.time_s) << "</td><td>" << Escape(op)
        << "</td><td class=\"num\">" << std::to_string(io.step) << "</td><td>" << layout
        << "</td><td class=\"num\">" << (save ? "wrote " : "read ") << FormatBytes(io.bytes)
        << "</td><td class=\"num\">" << FormatBytes(io.bytes_needed) << "</td><td class=\"num\">"
        << ratio << "</td><td class=\"num\">" << Fmt("%.3g s", io.seconds)
        << "</td><td class=\"num\">"
        << (io.peak_rss_bytes > 0 ? FormatBytes(io.peak_rss_bytes) : "–") << "</td></tr>";
    }
    p << "</tbody></table>";
  }
  p << "</section>\n";
}

void PlansTable(Page& p, const RunReport& r) {
  p << "<section><h2>Plans adopted</h2>";
  if (r.plans.empty()) {
    p << "<p class=\"note\">No plan adopted yet.</p></section>\n";
    return;
  }
  p << "<table><thead><tr><th class=\"num\">#</th><th class=\"num\">At</th><th>Trigger</th>"
       "<th>Planner</th><th class=\"num\">Makespan</th><th class=\"num\">Lower bound</th>"
       "<th class=\"num\">Gap</th><th class=\"num\">Solve</th></tr></thead><tbody>";
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const auto& pl = r.plans[i];
    p << "<tr><td class=\"num\">" << std::to_string(i + 1) << "</td><td class=\"num\">"
      << Duration(pl.at_s) << "</td><td>" << Escape(pl.trigger) << "</td><td>" << Escape(pl.planner)
      << "</td><td class=\"num\">" << Duration(pl.makespan_s) << "</td><td class=\"num\">"
      << (pl.makespan_bound ? Duration(pl.lower_bound_s) : std::string("on weighted completion"))
      << "</td><td class=\"num\">" << Fmt("%.1f %%", 100 * pl.gap) << "</td><td class=\"num\">"
      << Fmt("%.3g s", pl.solve_s) << "</td></tr>";
  }
  p << "</tbody></table></section>\n";
}

// A profile's measured peak and the mode it was measured in, what the planner
// fits to a device ("not measured" in a profile from before peaks: the
// planner models activations over the parameter memory then).
std::string PeakText(const ReportProfile& pr) {
  if (pr.device_allocated_mib <= 0) return "not measured";
  return Fmt("%.0f MiB", pr.device_allocated_mib) +
         (pr.recompute.empty() ? std::string() : " (recompute " + Escape(pr.recompute) + ")");
}

void ProfileTable(Page& p, const RunReport& r) {
  p << "<section><h2>Profiling</h2>";
  if (r.profiles.empty()) {
    p << "<p class=\"note\">No profiles yet.</p></section>\n";
    return;
  }
  p << "<table><thead><tr><th>Signature</th><th>Tasks</th><th>Template</th>"
       "<th class=\"num\">GPUs</th><th class=\"num\">Batch</th><th class=\"num\">Samples/s</th>"
       "<th class=\"num\">Step time</th><th class=\"num\">Parameter memory</th>"
       "<th class=\"num\">Peak memory</th><th>Source</th></tr></thead><tbody>";
  for (const auto& pr : r.profiles) {
    p << "<tr><td><code>" << Escape(pr.signature) << "</code></td><td>" << Escape(pr.tasks)
      << "</td><td>" << Escape(pr.template_name) << "</td><td class=\"num\">"
      << std::to_string(pr.gpus) << "</td><td class=\"num\">" << std::to_string(pr.batch_size)
      << "</td><td class=\"num\">" << Number(pr.samples_per_s) << "</td><td class=\"num\">"
      << Fmt("%.3g s", pr.step_time_s) << "</td><td class=\"num\">"
      << Fmt("%.0f MiB", pr.peak_memory_mib) << "</td><td class=\"num\">" << PeakText(pr)
      << "</td><td>" << (pr.from_cache ? "cache" : "measured") << "</td></tr>";
  }
  p << "</tbody></table></section>\n";
}

void EventList(Page& p, const RunReport& r) {
  p << "<section><h2>Events</h2>";
  if (r.events.empty()) {
    p << "<p class=\"note\">No events yet.</p></section>\n";
    return;
  }
  p << "<ul class=\"events\">";
  for (const auto& e : r.events) {
    p << "<li><span class=\"t\">" << Duration(e.time_s) << "</span>" << Escape(e.text) << "</li>";
  }
  p << "</ul></section>\n";
}

// ---------------------------------------------------------------------------
// JSON

// NaN and infinities have no JSON form; nlohmann writes them as null, so null
// reads back as NaN (a diverged loss stays visible as NaN rather than failing).
json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Reads typed fields of one JSON object, naming the full path in errors:
// "tasks[2].losses[0].step: want an integer".
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  bool Has(const char* key) const { return j_.find(key) != j_.end(); }
  Status Object() const {
    if (!j_.is_object()) return Error(path_.empty() ? "report" : path_, "want an object");
    return OkStatus();
  }
  Status Get(const char* key, std::string* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_string()) return Error(Path(key), "want a string");
    *out = v->get<std::string>();
    return OkStatus();
  }
  Status Get(const char* key, double* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (v->is_null()) {
      *out = std::numeric_limits<double>::quiet_NaN();
    } else if (v->is_number()) {
      *out = v->get<double>();
    } else {
      return Error(Path(key), "want a number");
    }
    return OkStatus();
  }
  Status Get(const char* key, int64_t* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_number_integer()) return Error(Path(key), "want an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error(Path(key), "out of range");
    }
    *out = v->get<int64_t>();
    return OkStatus();
  }
  Status Get(const char* key, int* out) const {
    int64_t v = 0;
    ORRERY_RETURN_IF_ERROR(Get(key, &v));
    if (v < INT32_MIN || v > INT32_MAX) return Error(Path(key), "out of range");
    *out = static_cast<int>(v);
    return OkStatus();
  }
  Status Get(const char* key, bool* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_boolean()) return Error(Path(key), "want true or false");
    *out = v->get<bool>();
    return OkStatus();
  }
  // A list of objects, each read by `read(Reader, T*)`.
  template <typename T, typename F>
  Status List(const char* key, std::vector<T>* out, F read) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_array()) return Error(Path(key), "want an array");
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      Reader item((*v)[i], Path(key) + "[" + std::to_string(i) + "]");
      ORRERY_RETURN_IF_ERROR(item.Object());
      T t;
      ORRERY_RETURN_IF_ERROR(read(item, &t));
      out->push_back(std::move(t));
    }
    return OkStatus();
  }
  // Device lists: an array of integers.
  Status Get(const char* key, std::vector<int>* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_array()) return Error(Path(key), "want an array");
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      const json& d = (*v)[i];
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > INT32_MAX) {
        return Error(Path(key) + "[" + std::to_string(i) + "]", "want a device index");
      }
      out->push_back(d.get<int>());
    }
    return OkStatus();
  }
  Status Get(const char* key, std::vector<std::string>* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_array()) return Error(Path(key), "want an array");
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        return Error(Path(key) + "[" + std::to_string(i) + "]", "want a string");
      out->push_back((*v)[i].get<std::string>());
    }
    return OkStatus();
  }
  // Hyper-parameters: an array of [name, value] string pairs, kept in order.
  Status Get(const char* key, std::vector<std::pair<std::string, std::string>>* out) const {
    ORRERY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_array()) return Error(Path(key), "want an array");
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      const json& kv = (*v)[i];
      if (!kv.is_array() || kv.size() != 2 || !kv[0].is_string() || !kv[1].is_string()) {
        return Error(Path(key) + "[" + std::to_string(i) + "]", "want [name, value] strings");
      }
      out->push_back({kv[0].get<std::string>(), kv[1].get<std::string>()});
    }
    return OkStatus();
  }

 private:
  std::string Path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  static Status Error(const std::string& path, const std::string& what) {
    return InvalidArgumentError("report.json: " + path + ": " + what);
  }
  StatusOr<const json*> Field(const char* key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) return Error(Path(key), "missing");
    return &*it;
  }

  const json& j_;
  std::string path_;
};

json BarFields(const ReportBar& b) {
  return {{"task", b.task},
          {"devices", b.devices},
          {"start_s", Num(b.start_s)},
          {"end_s", Num(b.end_s)},
          {"template", b.template_name},
          {"gpus", b.gpus},
          {"batch_size", b.batch_size},
          {"ended_by", b.ended_by},
          {"gang", b.gang}};
}

json BarJson(const ReportBar& b) {
  json j = BarFields(b);
  if (!b.gpu_type.empty()) j["gpu_type"] = b.gpu_type;
  return j;
}

Status ReadBar(const Reader& r, ReportBar* b) {
  ORRERY_RETURN_IF_ERROR(r.Get("task", &b->task));
  ORRERY_RETURN_IF_ERROR(r.Get("devices", &b->devices));
  ORRERY_RETURN_IF_ERROR(r.Get("start_s", &b->start_s));
  ORRERY_RETURN_IF_ERROR(r.Get("end_s", &b->end_s));
  ORRERY_RETURN_IF_ERROR(r.Get("template", &b->template_name));
  ORRERY_RETURN_IF_ERROR(r.Get("gpus", &b->gpus));
  ORRERY_RETURN_IF_ERROR(r.Get("batch_size", &b->batch_size));
  // Absent for untyped devices and in reports from before GPU types.
  if (r.Has("gpu_type")) ORRERY_RETURN_IF_ERROR(r.Get("gpu_type", &b->gpu_type));
  ORRERY_RETURN_IF_ERROR(r.Get("ended_by", &b->ended_by));
  // Reports written before interleaved gangs have no "gang".
  return r.Has("gang") ? r.Get("gang", &b->gang) : OkStatus();
}

Status ReadLoss(const Reader& r, ReportLossPoint* l) {
  ORRERY_RETURN_IF_ERROR(r.Get("step", &l->step));
  ORRERY_RETURN_IF_ERROR(r.Get("loss", &l->loss));
  return r.Get("time_s", &l->time_s);
}

json StateIoJson(const ReportStateIo& io) {
  return {{"op", io.op},
          {"time_s", Num(io.time_s)},
          {"step", io.step},
          {"reason", io.reason},
          {"from_layout", io.from_layout},
          {"layout", io.layout},
          {"bytes", io.bytes},
          {"bytes_needed", io.bytes_needed},
          {"seconds", Num(io.seconds)},
          {"peak_rss_bytes", io.peak_rss_bytes},
          {"ranks", io.ranks}};
}

Status ReadStateIo(const Reader& r, ReportStateIo* io) {
  ORRERY_RETURN_IF_ERROR(r.Get("op", &io->op));
  ORRERY_RETURN_IF_ERROR(r.Get("time_s", &io->time_s));
  ORRERY_RETURN_IF_ERROR(r.Get("step", &io->step));
  ORRERY_RETURN_IF_ERROR(r.Get("reason", &io->reason));
  ORRERY_RETURN_IF_ERROR(r.Get("from_layout", &io->from_layout));
  ORRERY_RETURN_IF_ERROR(r.Get("layout", &io->layout));
  ORRERY_RETURN_IF_ERROR(r.Get("bytes", &io->bytes));
  ORRERY_RETURN_IF_ERROR(r.Get("bytes_needed", &io->bytes_needed));
  ORRERY_RETURN_IF_ERROR(r.Get("seconds", &io->seconds));
  ORRERY_RETURN_IF_ERROR(r.Get("peak_rss_bytes", &io->peak_rss_bytes));
  return r.Get("ranks", &io->ranks);
}

Status ReadTask(const Reader& r, ReportTask* t) {
  ORRERY_RETURN_IF_ERROR(r.Get("name", &t->name));
  ORRERY_RETURN_IF_ERROR(r.Get("source", &t->source));
  ORRERY_RETURN_IF_ERROR(r.Get("hyper", &t->hyper));
  ORRERY_RETURN_IF_ERROR(r.Get("state", &t->state));
  ORRERY_RETURN_IF_ERROR(r.Get("template", &t->template_name));
  ORRERY_RETURN_IF_ERROR(r.Get("gpus", &t->gpus));
  ORRERY_RETURN_IF_ERROR(r.Get("batch_size", &t->batch_size));
  ORRERY_RETURN_IF_ERROR(r.Get("steps_done", &t->steps_done));
  ORRERY_RETURN_IF_ERROR(r.Get("steps_total", &t->steps_total));
  ORRERY_RETURN_IF_ERROR(r.Get("final_loss", &t->final_loss));
  ORRERY_RETURN_IF_ERROR(r.Get("samples_per_s", &t->samples_per_s));
  ORRERY_RETURN_IF_ERROR(r.Get("restarts", &t->restarts));
  ORRERY_RETURN_IF_ERROR(r.List("losses", &t->losses, ReadLoss));
  // Absent in the report of an Orrery from before exports: none.
  if (r.Has("export")) ORRERY_RETURN_IF_ERROR(r.Get("export", &t->export_path));
  if (r.Has("gpu_type")) ORRERY_RETURN_IF_ERROR(r.Get("gpu_type", &t->gpu_type));
  // Absent in the report of an Orrery from before state_io: none recorded.
  if (!r.Has("state_io")) return OkStatus();
  return r.List("state_io", &t->state_io, ReadStateIo);
}

Status ReadProfile(const Reader& r, ReportProfile* p) {
  ORRERY_RETURN_IF_ERROR(r.Get("signature", &p->signature));
  ORRERY_RETURN_IF_ERROR(r.Get("tasks", &p->tasks));
  ORRERY_RETURN_IF_ERROR(r.Get("template", &p->template_name));
  ORRERY_RETURN_IF_ERROR(r.Get("gpus", &p->gpus));
  ORRERY_RETURN_IF_ERROR(r.Get("batch_size", &p->batch_size));
  ORRERY_RETURN_IF_ERROR(r.Get("samples_per_s", &p->samples_per_s));
  ORRERY_RETURN_IF_ERROR(r.Get("step_time_s", &p->step_time_s));
  ORRERY_RETURN_IF_ERROR(r.Get("peak_memory_mib", &p->peak_memory_mib));
  // Absent in the report of an Orrery from before measured peaks.
  if (r.Has("device_allocated_mib"))
    ORRERY_RETURN_IF_ERROR(r.Get("device_allocated_mib", &p->device_allocated_mib));
  if (r.Has("recompute")) ORRERY_RETURN_IF_ERROR(r.Get("recompute", &p->recompute));
  return r.Get("from_cache", &p->from_cache);
}

Status ReadPlan(const Reader& r, ReportPlan* p) {
  ORRERY_RETURN_IF_ERROR(r.Get("at_s", &p->at_s));
  ORRERY_RETURN_IF_ERROR(r.Get("trigger", &p->trigger));
  ORRERY_RETURN_IF_ERROR(r.Get("planner", &p->planner));
  ORRERY_RETURN_IF_ERROR(r.Get("makespan_s", &p->makespan_s));
  ORRERY_RETURN_IF_ERROR(r.Get("lower_bound_s", &p->lower_bound_s));
  ORRERY_RETURN_IF_ERROR(r.Get("gap", &p->gap));
  if (r.Has("bound_on")) {  // a report from before it: makespan
    std::string on;
    ORRERY_RETURN_IF_ERROR(r.Get("bound_on", &on));
    p->makespan_bound = on != "weightedCompletion";
  }
  return r.Get("solve_s", &p->solve_s);
}

Status ReadEvent(const Reader& r, ReportEvent* e) {
  ORRERY_RETURN_IF_ERROR(r.Get("time_s", &e->time_s));
  return r.Get("text", &e->text);
}

Status ReadAction(const Reader& r, ReportAction* a) {
  ORRERY_RETURN_IF_ERROR(r.Get("time_s", &a->time_s));
  ORRERY_RETURN_IF_ERROR(r.Get("kind", &a->kind));
  ORRERY_RETURN_IF_ERROR(r.Get("task", &a->task));
  ORRERY_RETURN_IF_ERROR(r.Get("detail", &a->detail));
  return r.Get("trigger", &a->trigger);
}

constexpr int kJsonVersion = 1;

}  // namespace

std::string TaskColour(size_t index) {
  const char* base = kPalette[index % kPaletteSize];
  const size_t cycle = index / kPaletteSize;
  if (cycle == 0) return base;
  // Later cycles: the same hues, alternately darker and lighter, further each
  // time (cycles 1,2 by 30%, 3,4 by 60%, then 80%; past 84 tasks colours repeat).
  const Rgb c = ParseRgb(base);
  const size_t steps = (cycle + 1) / 2;  // whole steps: 1, 1, 2, 2, 3, ...
  const double amount = std::min(0.8, 0.3 * static_cast<double>(steps));
  const bool darker = cycle % 2 == 1;
  auto mix = [&](int v) {
    const double target = darker ? 0 : 255;
    return static_cast<int>(std::lround(v + (target - v) * amount));
  };
  return FormatRgb({mix(c.r), mix(c.g), mix(c.b)});
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "–";
  if (bytes < 1000) return std::to_string(bytes) + " B";
  constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes) / 1000;
  size_t unit = 0;
  while (v >= 999.5 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    v /= 1000;
    ++unit;
  }
  return Fmt(v < 9.995 ? "%.2f " : v < 99.95 ? "%.1f " : "%.0f ", v) + kUnits[unit];
}

std::string ReportHtml(const RunReport& report) {
  const auto colour = ColourByTask(report);
  Page p;
  p << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>Orrery run: " << Escape(report.job) << "</title><style>" << kStyle
    << "</style></head><body>\n";
  Header(p, report);
  TaskTable(p, report, colour);
  Gantt(p, report, colour);
  LossChart(p, report, colour);
  StateIoTable(p, report, colour);
  PlansTable(p, report);
  ProfileTable(p, report);
  EventList(p, report);
  p << "</body></html>\n";
  return std::move(p).str();
}

std::string ReportJson(const RunReport& r) {
  json tasks = json::array();
  for (const auto& t : r.tasks) {
    json hyper = json::array();
    for (const auto& [k, v] : t.hyper) hyper.push_back({k, v});
    json losses = json::array();
    for (const auto& l : t.losses) {
      losses.push_back({{"step", l.step}, {"loss", Num(l.loss)}, {"time_s", Num(l.time_s)}});
    }
    json state_io = json::array();
    for (const auto& io : t.state_io) state_io.push_back(StateIoJson(io));
    tasks.push_back({{"name", t.name},
                     {"source", t.source},
                     {"hyper", hyper},
                     {"state", t.state},
                     {"template", t.template_name},
                     {"gpus", t.gpus},
                     {"batch_size", t.batch_size},
                     {"steps_done", t.steps_done},
                     {"steps_total", t.steps_total},
                     {"final_loss", Num(t.final_loss)},
                     {"samples_per_s", Num(t.samples_per_s)},
                     {"restarts", t.restarts},
                     {"losses", losses},
                     {"state_io", state_io}});
    if (!t.export_path.empty()) tasks.back()["export"] = t.export_path;
    if (!t.gpu_type.empty()) tasks.back()["gpu_type"] = t.gpu_type;
  }
  json planned = json::array(), actual = json::array();
  for (const auto& b : r.planned) planned.push_back(BarJson(b));
  for (const auto& b : r.actual) actual.push_back(BarJson(b));
  json profiles = json::array();
  for (const auto& p : r.profiles) {
    profiles.push_back({{"signature", p.signature},
                        {"tasks", p.tasks},
                        {"template", p.template_name},
                        {"gpus", p.gpus},
                        {"batch_size", p.batch_size},
                        {"samples_per_s", Num(p.samples_per_s)},
                        {"step_time_s", Num(p.step_time_s)},
                        {"peak_memory_mib", Num(p.peak_memory_mib)},
                        {"device_allocated_mib", Num(p.device_allocated_mib)},
                        {"recompute", p.recompute},
                        {"from_cache", p.from_cache}});
  }
  json plans = json::array();
  for (const auto& p : r.plans) {
    plans.push_back({{"at_s", Num(p.at_s)},
                     {"trigger", p.trigger},
                     {"planner", p.planner},
                     {"makespan_s", Num(p.makespan_s)},
                     {"lower_bound_s", Num(p.lower_bound_s)},
                     {"gap", Num(p.gap)},
                     {"bound_on", p.makespan_bound ? "makespan" : "weightedCompletion"},
                     {"solve_s", Num(p.solve_s)}});
  }
  json events = json::array();
  for (const auto& e : r.events) events.push_back({{"time_s", Num(e.time_s)}, {"text", e.text}});
  json actions = json::array();
  for (const auto& a : r.actions) {
    actions.push_back({{"time_s", Num(a.time_s)},
                       {"kind", a.kind},
                       {"task", a.task},
                       {"detail", a.detail},
                       {"trigger", a.trigger}});
  }
  json j = {{"version", kJsonVersion},    {"job", r.job},
            {"devices", r.devices},       {"device_count", r.device_count},
            {"started_at", r.started_at}, {"wall_s", Num(r.wall_s)},
            {"outcome", r.outcome},       {"tasks", tasks},
            {"planned", planned},         {"actual", actual},
            {"profiles", profiles},       {"plans", plans},
            {"events", events},           {"actions", actions},
            {"violations", r.violations}};
  if (!r.device_types.empty()) j["device_types"] = r.device_types;
  // Invalid UTF-8 in a name (from a user's spec) is replaced, not thrown.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

StatusOr<RunReport> ReportFromJson(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("report.json: not valid JSON");
  const Reader r(j, "");
  ORRERY_RETURN_IF_ERROR(r.Object());
  int version = 0;
  ORRERY_RETURN_IF_ERROR(r.Get("version", &version));
  if (version != kJsonVersion) {
    return InvalidArgumentError("report.json: version: " + std::to_string(version) +
                                " is not supported (want " + std::to_string(kJsonVersion) + ")");
  }
  RunReport out;
  ORRERY_RETURN_IF_ERROR(r.Get("job", &out.job));
  ORRERY_RETURN_IF_ERROR(r.Get("devices", &out.devices));
  ORRERY_RETURN_IF_ERROR(r.Get("device_count", &out.device_count));
  if (r.Has("device_types")) ORRERY_RETURN_IF_ERROR(r.Get("device_types", &out.device_types));
  ORRERY_RETURN_IF_ERROR(r.Get("started_at", &out.started_at));
  ORRERY_RETURN_IF_ERROR(r.Get("wall_s", &out.wall_s));
  ORRERY_RETURN_IF_ERROR(r.Get("outcome", &out.outcome));
  ORRERY_RETURN_IF_ERROR(r.List("tasks", &out.tasks, ReadTask));
  ORRERY_RETURN_IF_ERROR(r.List("planned", &out.planned, ReadBar));
  ORRERY_RETURN_IF_ERROR(r.List("actual", &out.actual, ReadBar));
  ORRERY_RETURN_IF_ERROR(r.List("profiles", &out.profiles, ReadProfile));
  ORRERY_RETURN_IF_ERROR(r.List("plans", &out.plans, ReadPlan));
  ORRERY_RETURN_IF_ERROR(r.List("events", &out.events, ReadEvent));
  // Reports written before the engine's journal have neither.
  if (r.Has("actions")) ORRERY_RETURN_IF_ERROR(r.List("actions", &out.actions, ReadAction));
  if (r.Has("violations") && j["violations"].is_array()) {
    for (const json& v : j["violations"]) {
      if (v.is_string()) out.violations.push_back(v.get<std::string>());
    }
  }
  return out;
}

}  // namespace orrery::local
