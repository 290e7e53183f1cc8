// Tests for the run report: report.json round-trips every field and names the
// field it cannot read; report.html escapes user strings, draws one rect per bar
// and renders an empty run.
#include "operator/local/report.h"

#include <cmath>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace orrery::local {

// Field-by-field equality, here rather than in report.h: only tests need it.
bool operator==(const ReportBar& a, const ReportBar& b) {
  return a.task == b.task && a.devices == b.devices && a.start_s == b.start_s &&
         a.end_s == b.end_s && a.template_name == b.template_name && a.gpus == b.gpus &&
         a.batch_size == b.batch_size && a.ended_by == b.ended_by && a.gpu_type == b.gpu_type &&
         a.gang == b.gang;
}
bool operator==(const ReportLossPoint& a, const ReportLossPoint& b) {
  return a.step == b.step && a.loss == b.loss && a.time_s == b.time_s;
}
bool operator==(const ReportStateIo& a, const ReportStateIo& b) {
  return a.op == b.op && a.time_s == b.time_s && a.step == b.step && a.reason == b.reason &&
         a.from_layout == b.from_layout && a.layout == b.layout && a.bytes == b.bytes &&
         a.bytes_needed == b.bytes_needed && a.seconds == b.seconds &&
         a.peak_rss_bytes == b.peak_rss_bytes && a.ranks == b.ranks;
}
bool operator==(const ReportTask& a, const ReportTask& b) {
  return a.name == b.name && a.source == b.source && a.hyper == b.hyper && a.state == b.state &&
         a.template_name == b.template_name && a.gpus == b.gpus && a.batch_size == b.batch_size &&
         a.steps_done == b.steps_done && a.steps_total == b.steps_total &&
         a.final_loss == b.final_loss && a.samples_per_s == b.samples_per_s &&
         a.restarts == b.restarts && a.losses == b.losses && a.state_io == b.state_io &&
         a.export_path == b.export_path;
}
bool operator==(const ReportProfile& a, const ReportProfile& b) {
  return a.signature == b.signature && a.tasks == b.tasks && a.template_name == b.template_name &&
         a.gpus == b.gpus && a.batch_size == b.batch_size && a.samples_per_s == b.samples_per_s &&
         a.step_time_s == b.step_time_s && a.peak_memory_mib == b.peak_memory_mib &&
         a.from_cache == b.from_cache && a.device_allocated_mib == b.device_allocated_mib &&
         a.recompute == b.recompute;
}
bool operator==(const ReportPlan& a, const ReportPlan& b) {
  return a.at_s == b.at_s && a.trigger == b.trigger && a.planner == b.planner &&
         a.makespan_s == b.makespan_s && a.lower_bound_s == b.lower_bound_s && a.gap == b.gap &&
         a.solve_s == b.solve_s && a.makespan_bound == b.makespan_bound;
}
bool operator==(const ReportEvent& a, const ReportEvent& b) {
  return a.time_s == b.time_s && a.text == b.text;
}

namespace {

// Every field set to a value distinct from its default, with awkward doubles.
RunReport FullReport() {
  RunReport r;
  r.job = "sweep-\"α\"";
  r.devices = "cpu:3";
  r.device_count = 3;
  r.started_at = "2026-11-23T02:24:33Z";
  r.wall_s = 1234.5678901234567;
  r.outcome = "interrupted";
  ReportTask a;
  a.name = "lr-3e-4";
  a.source = "lr";
  a.hyper = {{"learningRate", "0.0003"}, {"batch", "64"}, {"activation", "relu"}};
  a.state = "running";
  a.template_name = "dp2";
  a.gpus = 2;
  a.batch_size = 64;
  a.steps_done = 4000000000LL;  // beyond 32 bits
  a.steps_total = 5000000000LL;
  a.final_loss = 0.1 + 0.2;
  a.samples_per_s = 1e-7;
  a.restarts = 3;
  a.losses = {{1, 2.5, 0.25}, {2, 1.0 / 3.0, 0.5}, {3, 1e300, 7}};
  a.state_io = {{"save", 9.5, 50, "signal", "", "dp=4,tp=1,pp=1,fsdp=4", 12300000, 12300000, 0.125,
                 5000000000LL, 4},
                {"restore", 19.75, 50, "", "dp=4,tp=1,pp=1,fsdp=4", "dp=1,tp=2,pp=2", 12300000,
                 12300000, 1.0 / 3.0, 210000000, 4}};
  a.export_path = "/outputs/lr-3e-4";
  ReportTask b;
  b.name = "lr-1e-3";
  b.source = "lr";
  b.state = "pending";
  r.tasks = {a, b};
  r.planned = {{"lr-3e-4", {0, 1}, 10, 20.5, "dp2", 2, 64, ""},
               {"lr-1e-3", {2}, 0, 30, "single", 1, 32, ""},
               {"lr-1e-3", {3}, 30, 40, "spill", 1, 32, "", "", "lr-1e-3+lr-3e-4"}};
  r.actual = {{"lr-3e-4", {0, 1}, 9.75, 19.125, "dp2", 2, 64, "device-lost"},
              {"lr-3e-4", {0}, 19.5, 25, "dp1", 1, 64, "running"}};
  r.profiles = {
      {"sig-abc", "lr-3e-4,lr-1e-3", "dp2", 2, 64, 123.456, 0.0421, 812.5, true, 2047.75, "unit"},
      {"sig-def", "lr-1e-3", "single", 1, 32, 99, 0.5, 100, false}};
  r.plans = {{0, "start", "orrery", 100.5, 90.25, 0.11357, 0.75},
             {19.5, "device-lost", "list", 120, 95, 0.263, 0.01, /*makespan_bound=*/false}};
  r.events = {{0, "Started run"}, {19.2, "Lost device 1"}};
  return r;
}

void ExpectSame(const RunReport& a, const RunReport& b) {
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.device_count, b.device_count);
  EXPECT_EQ(a.started_at, b.started_at);
  EXPECT_EQ(a.wall_s, b.wall_s);
  EXPECT_EQ(a.outcome, b.outcome);
  EXPECT_TRUE(a.tasks == b.tasks);
  EXPECT_TRUE(a.planned == b.planned);
  EXPECT_TRUE(a.actual == b.actual);
  EXPECT_TRUE(a.profiles == b.profiles);
  EXPECT_TRUE(a.plans == b.plans);
  EXPECT_TRUE(a.events == b.events);
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

TEST(ReportJson, RoundTripsEveryField) {
  const RunReport original = FullReport();
  const std::string text = ReportJson(original);
  EXPECT_EQ(nlohmann::json::parse(text).at("version"), 1);
  auto back = ReportFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(original, *back);
  // And writing it again gives the same bytes.
  EXPECT_EQ(ReportJson(*back), text);
}

TEST(ReportJson, RoundTripsEmptyReport) {
  auto back = ReportFromJson(ReportJson(RunReport{}));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(RunReport{}, *back);
}

TEST(ReportJson, NonFiniteLossReadsBackAsNaN) {
  RunReport r = FullReport();
  r.tasks[0].losses[0].loss = std::nan("");
  auto back = ReportFromJson(ReportJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->tasks[0].losses[0].loss));
}

// Breaks one field of a valid report and returns the error message.
std::string ErrorAfter(void (*mutate)(nlohmann::json&)) {
  nlohmann::json j = nlohmann::json::parse(ReportJson(FullReport()));
  mutate(j);
  auto r = ReportFromJson(j.dump());
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(ReportJson, MalformedInputNamesTheField) {
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) { j["job"] = 5; }).find("job: want a string"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) { j.erase("outcome"); }).find("outcome: missing"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["tasks"][1]["losses"] = {{{"step", "x"}}};
            }).find("tasks[1].losses[0].step"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["actual"][0]["devices"] = {0, -1};
            }).find("actual[0].devices[1]"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["tasks"][0]["hyper"][2] = "relu";
            }).find("tasks[0].hyper[2]"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["profiles"][1]["from_cache"] = "yes";
            }).find("profiles[1].from_cache"),
            std::string::npos);
  EXPECT_NE(
      ErrorAfter([](nlohmann::json& j) { j["plans"][0]["gap"] = "big"; }).find("plans[0].gap"),
      std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) { j["device_count"] = 1e12; }).find("device_count"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["events"] = {1, 2};
            }).find("events[0]"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) { j["version"] = 2; }).find("version"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["tasks"][0]["state_io"][1]["bytes"] = 1.5;
            }).find("tasks[0].state_io[1].bytes: want an integer"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](nlohmann::json& j) {
              j["tasks"][0]["state_io"][0].erase("op");
            }).find("tasks[0].state_io[0].op: missing"),
            std::string::npos);
}

// report.json of an Orrery from before the saves and restores were recorded
// still resumes: a task without "state_io" has none.
TEST(ReportJson, ReadsAReportWrittenBeforeStateIo) {
  nlohmann::json j = nlohmann::json::parse(ReportJson(FullReport()));
  for (auto& t : j["tasks"]) t.erase("state_io");
  auto back = ReportFromJson(j.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tasks[0].state_io.empty());
  EXPECT_EQ(back->tasks[0].losses.size(), 3u);
}

// Likewise a report from before exports: no task exported anything.
TEST(ReportJson, ReadsAReportWrittenBeforeExports) {
  nlohmann::json j = nlohmann::json::parse(ReportJson(FullReport()));
  ASSERT_EQ(j["tasks"][0]["export"], "/outputs/lr-3e-4");
  EXPECT_FALSE(j["tasks"][1].contains("export"));  // b exported nothing
  for (auto& t : j["tasks"]) t.erase("export");
  auto back = ReportFromJson(j.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tasks[0].export_path, "");
}

// A report from before measured peaks: its profiles carry none.
TEST(ReportJson, ReadsAReportWrittenBeforeMeasuredPeaks) {
  nlohmann::json j = nlohmann::json::parse(ReportJson(FullReport()));
  ASSERT_EQ(j["profiles"][0]["recompute"], "unit");
  for (auto& p : j["profiles"]) {
    p.erase("device_allocated_mib");
    p.erase("recompute");
  }
  auto back = ReportFromJson(j.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->profiles[0].device_allocated_mib, 0);
  EXPECT_EQ(back->profiles[0].recompute, "");
  EXPECT_EQ(back->profiles[0].peak_memory_mib, 812.5);
}

TEST(ReportHtml, ShowsEachProfilesMeasuredPeakAndItsMode) {
  const std::string html = ReportHtml(FullReport());
  EXPECT_NE(html.find("2048 MiB (recompute unit)"), std::string::npos);
  EXPECT_NE(html.find("not measured"), std::string::npos);  // sig-def predates peaks
}

TEST(ReportHtml, ListsWhereEachTrainedModelWent) {
  RunReport r = FullReport();
  std::string html = ReportHtml(r);
  EXPECT_NE(html.find("<h3>Trained models</h3>"), std::string::npos);
  EXPECT_NE(html.find("<code>/outputs/lr-3e-4</code>"), std::string::npos);
  r.tasks[0].export_path = "";
  EXPECT_EQ(ReportHtml(r).find("Trained models"), std::string::npos);
}

TEST(ReportJson, RejectsTextThatIsNotJson) {
  auto r = ReportFromJson("{\"version\": 1,");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ReportFromJson("[1, 2]").ok());
}

TEST(TaskColour, FirstTwelveAreDistinctHexColours) {
  std::set<std::string> seen;
  for (size_t i = 0; i < 48; ++i) {
    const std::string c = TaskColour(i);
    ASSERT_EQ(c.size(), 7u) << c;
    EXPECT_EQ(c[0], '#');
    EXPECT_EQ(c.find_first_not_of("0123456789abcdef", 1), std::string::npos) << c;
    seen.insert(c);
  }
  // All 48 differ: later cycles vary the palette rather than repeat it.
  EXPECT_EQ(seen.size(), 48u);
  EXPECT_EQ(TaskColour(3), TaskColour(3));
}

TEST(ReportHtml, EscapesUserStrings) {
  RunReport r = FullReport();
  const std::string evil = "<script>alert('x')</script>";
  r.job = evil;
  r.tasks[0].name = evil;
  r.tasks[0].hyper[0].second = evil;
  r.actual[0].task = evil;
  r.planned[0].task = evil;
  r.events[0].text = evil;
  r.profiles[0].signature = evil;
  r.plans[0].trigger = evil;
  r.tasks[0].state_io[1].from_layout = evil;
  const std::string html = ReportHtml(r);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("alert('x')"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
}

TEST(ReportHtml, DrawsOneRectPerBar) {
  RunReport r = FullReport();
  // A gang on non-adjacent devices is still one "bar" rect (plus a part).
  r.actual.push_back({"lr-1e-3", {0, 2}, 25, 40, "dp2", 2, 32, "completed"});
  const std::string html = ReportHtml(r);
  EXPECT_EQ(Count(html, "class=\"bar actual\""), r.actual.size());
  EXPECT_EQ(Count(html, "class=\"bar planned\""), r.planned.size());
  EXPECT_EQ(Count(html, "class=\"bar actual\" data-task=\"lr-3e-4\""), 2u);
  EXPECT_EQ(Count(html, "class=\"bar actual\" data-task=\"lr-1e-3\""), 1u);
  EXPECT_EQ(Count(html, "class=\"bar-part actual\""), 1u);
  // Bars are filled with their task's colour, the same as the table's swatch.
  EXPECT_NE(html.find("fill=\"" + TaskColour(0) + "\""), std::string::npos);
  EXPECT_NE(html.find("background:" + TaskColour(1)), std::string::npos);
  EXPECT_NE(html.find("polyline class=\"loss-curve\" data-task=\"lr-3e-4\""), std::string::npos);
}

TEST(ReportHtml, AnInterleavedGangsMembersShareTheirLaneInBands) {
  RunReport r = FullReport();
  // Untyped devices (gpu_type ""), one gang.
  r.actual = {{"lr-3e-4", {1}, 0, 30, "spill", 1, 64, "completed", "", "lr-3e-4+lr-1e-3"},
              {"lr-1e-3", {1}, 0, 20, "spill", 1, 32, "completed", "", "lr-3e-4+lr-1e-3"}};
  const std::string html = ReportHtml(r);
  EXPECT_EQ(Count(html, "class=\"bar actual\""), 2u);
  EXPECT_EQ(Count(html, "data-gang=\"lr-3e-4+lr-1e-3\""), 2u);
  EXPECT_NE(html.find("interleaved gang lr-3e-4+lr-1e-3"), std::string::npos);
  // Each member draws half the lane, one above the other: the same height,
  // different tops.
  auto attribute = [&](const std::string& task, const std::string& name) {
    size_t at = html.find("class=\"bar actual\" data-task=\"" + task + "\"");
    at = html.find(" " + name + "=\"", at) + name.size() + 3;
    return std::stod(html.substr(at, html.find('"', at) - at));
  };
  EXPECT_DOUBLE_EQ(attribute("lr-3e-4", "height"), attribute("lr-1e-3", "height"));
  EXPECT_LT(attribute("lr-3e-4", "y"), attribute("lr-1e-3", "y"));
  EXPECT_NEAR(attribute("lr-1e-3", "y") - attribute("lr-3e-4", "y"), attribute("lr-3e-4", "height"),
              0.01);
}

TEST(ReportHtml, ListsEachTasksCheckpointsAndReshards) {
  RunReport r = FullReport();
  std::string html = ReportHtml(r);
  EXPECT_EQ(Count(html, "<h2>Checkpoints and re-shards</h2>"), 1u);
  // Only the task that saved or restored gets a table, under its colour.
  EXPECT_EQ(Count(html, "<h3><span class=\"swatch\""), 1u);
  EXPECT_NE(html.find("<h3><span class=\"swatch\" style=\"background:" + TaskColour(0) +
                      "\"></span>lr-3e-4</h3>"),
            std::string::npos);
  // The save: written in its layout, bytes against the bytes needed, the
  // largest rank's peak memory.
  EXPECT_NE(html.find("<td>save (signal)</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("wrote 12.3 MB</td><td class=\"num\">12.3 MB</td><td class=\"num\">100 %"),
            std::string::npos);
  EXPECT_NE(html.find("5.00 GB"), std::string::npos);
  // The restore into another layout is a re-shard, from the old layout into the new.
  EXPECT_NE(html.find("<td>re-shard</td>"), std::string::npos);
  EXPECT_NE(html.find("<code>dp=4,tp=1,pp=1,fsdp=4</code> → <code>dp=1,tp=2,pp=2</code>"),
            std::string::npos);
  EXPECT_NE(html.find("read 12.3 MB"), std::string::npos);
  EXPECT_NE(html.find("210 MB"), std::string::npos);

  // A long run: every restore, the newest saves.
  ReportTask& t = r.tasks[1];
  for (int i = 1; i <= 25; ++i) {
    t.state_io.push_back({"save", 1.0 * i, 10 * i, "periodic", "", "dp=1", 1000, 1000, 0.01, 0, 1});
  }
  t.state_io.push_back({"restore", 30, 250, "", "dp=1", "dp=1", 1000, 1000, 0.01, 0, 1});
  html = ReportHtml(r);
  EXPECT_NE(html.find("5 earlier of 25 saves not shown"), std::string::npos);
  EXPECT_EQ(Count(html, "<td>save (periodic)</td>"), 20u);
  EXPECT_EQ(Count(html, "<td>restore</td>"), 1u);  // the same layout: not a re-shard

  EXPECT_NE(ReportHtml(RunReport{}).find("No checkpoint saved or restored yet."),
            std::string::npos);
}

TEST(FormatBytes, ThreeSignificantDigitsInDecimalUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(1000), "1.00 kB");
  EXPECT_EQ(FormatBytes(12345678), "12.3 MB");
  EXPECT_EQ(FormatBytes(210000000), "210 MB");
  EXPECT_EQ(FormatBytes(999600), "1.00 MB");
  EXPECT_EQ(FormatBytes(1250000000), "1.25 GB");
  EXPECT_EQ(FormatBytes(INT64_MAX), "9.22 EB");
  EXPECT_EQ(FormatBytes(-1), "–");
}

TEST(ReportHtml, IsSelfContained) {
  const std::string html = ReportHtml(FullReport());
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("url(http"), std::string::npos);
  EXPECT_EQ(html.rfind("</html>\n"), html.size() - 8);
}

TEST(ReportHtml, RendersEmptyReport) {
  const std::string html = ReportHtml(RunReport{});
  EXPECT_NE(html.find("<svg class=\"gantt\""), std::string::npos);
  EXPECT_NE(html.find("no data yet"), std::string::npos);
  EXPECT_NE(html.find("no bars yet"), std::string::npos);
  EXPECT_EQ(Count(html, "class=\"bar "), 0u);
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(html.find("inf"), std::string::npos);
}

TEST(ReportHtml, TimeAxisSwitchesToMinutesForLongRuns) {
  RunReport r = FullReport();
  EXPECT_NE(ReportHtml(r).find("time since start (min)"), std::string::npos);  // wall 1234 s
  r.wall_s = 50;
  r.actual.clear();
  r.planned = {{"lr-3e-4", {0}, 0, 45, "dp1", 1, 64, ""}};
  EXPECT_NE(ReportHtml(r).find("time since start (s)"), std::string::npos);
}

}  // namespace
}  // namespace orrery::local
