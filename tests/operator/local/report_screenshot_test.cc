// Renders report.html in headless Chromium and checks the screenshot: the page is
// not blank and every task's colour covers a bar's worth of pixels, so the Gantt
// chart really drew a bar per task (an SVG mistake that still parses as HTML would
// pass a string test but not this one). Set ORRERY_REPORT_SCREENSHOT=<path> to keep
// the PNG for a look.
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include "operator/local/report.h"
#include "tests/testing/png.h"

namespace orrery::local {
namespace {

namespace fs = std::filesystem;

constexpr const char* kChromium = "/usr/bin/chromium";

// Three tasks over two devices: a plan, what actually ran (one device lost and a
// rescale), and falling loss curves.
RunReport ThreeTaskReport() {
  RunReport r;
  r.job = "mnist-sweep";
  r.devices = "cpu:2";
  r.device_count = 2;
  r.started_at = "2026-11-23T02:00:00Z";
  r.wall_s = 290;
  r.outcome = "running";
  const char* names[] = {"lr-1e-3", "lr-3e-4", "lr-1e-4"};
  const char* lrs[] = {"0.001", "0.0003", "0.0001"};
  for (int i = 0; i < 3; ++i) {
    ReportTask t;
    t.name = names[i];
    t.source = "lr";
    t.hyper = {{"learningRate", lrs[i]}, {"batchSize", "64"}};
    t.template_name = i == 0 ? "dp2" : "single";
    t.gpus = i == 0 ? 2 : 1;
    t.batch_size = 64;
    t.steps_total = 3000;
    t.steps_done = i == 2 ? 1400 : 3000;
    t.state = i == 2 ? "running" : "completed";
    t.samples_per_s = 900.0 - 150 * i;
    t.restarts = i == 1 ? 1 : 0;
    for (int s = 0; s <= t.steps_done; s += 100) {
      const double loss = 0.08 + 2.3 * std::exp(-s / (300.0 + 250 * i));
      t.losses.push_back({s, loss, s * 0.05});
    }
    t.final_loss = t.losses.back().loss;
    r.tasks.push_back(t);
  }
  r.planned = {{"lr-1e-3", {0, 1}, 0, 95, "dp2", 2, 64, ""},
               {"lr-3e-4", {0}, 95, 200, "single", 1, 64, ""},
               {"lr-1e-4", {1}, 95, 240, "single", 1, 64, ""}};
  r.actual = {{"lr-1e-3", {0, 1}, 0, 60, "dp2", 2, 64, "device-lost"},
              {"lr-1e-3", {0}, 62, 130, "single", 1, 64, "completed"},
              {"lr-3e-4", {1}, 75, 150, "single", 1, 64, "rescaled"},
              {"lr-3e-4", {1}, 152, 230, "single", 1, 64, "completed"},
              {"lr-1e-4", {0}, 132, 290, "single", 1, 64, "running"}};
  r.plans = {{0, "start", "orrery", 240, 220, 0.083, 0.41},
             {60, "device-lost", "orrery", 300, 270, 0.1, 0.22}};
  r.profiles = {
      {"mlp-784-256-10", "lr-1e-3,lr-3e-4,lr-1e-4", "single", 1, 64, 850, 0.075, 310, false},
      {"mlp-784-256-10", "lr-1e-3,lr-3e-4,lr-1e-4", "dp2", 2, 64, 1500, 0.085, 330, true}};
  r.events = {{0, "Adopted plan 1 (orrery, makespan 4 min 00 s)"},
              {60, "Lost device 1 while lr-1e-3 ran on it"},
              {60.5, "Adopted plan 2 after device-lost"},
              {150, "Rescaled lr-3e-4"}};
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "orrery-report-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ReportScreenshot, ChartDrawsABarPerTask) {
  if (!fs::exists(kChromium)) {
    GTEST_SKIP() << kChromium << " is absent: install the `chromium` package "
                 << "(deps/debian-packages.txt) to render the report";
  }
  const RunReport report = ThreeTaskReport();
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const fs::path html = dir.path() / "report.html";
  const fs::path png = dir.path() / "report.png";
  std::ofstream(html) << ReportHtml(report);

  // A private profile directory keeps the test off the user's home; `timeout`
  // bounds a browser that hangs rather than failing.
  const std::string command =
      "timeout 120 " + std::string(kChromium) +
      " --headless --no-sandbox --disable-gpu --hide-scrollbars --disable-dev-shm-usage"
      " --no-first-run --user-data-dir=" +
      (dir.path() / "profile").string() + " --screenshot=" + png.string() +
      " --window-size=1280,2000 file://" + html.string() + " > " +
      (dir.path() / "chromium.log").string() + " 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream log_in(dir.path() / "chromium.log");
  const std::string log((std::istreambuf_iterator<char>(log_in)), {});
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "chromium failed (" << rc << "):\n" << log;
  auto image = testing::ReadPng(png.string());
  ASSERT_TRUE(image.ok()) << image.status() << "\n" << log;
  if (const char* keep = std::getenv("ORRERY_REPORT_SCREENSHOT")) {
    fs::copy_file(png, keep, fs::copy_options::overwrite_existing);
  }
  EXPECT_EQ(image->width, 1280);
  EXPECT_EQ(image->height, 2000);

  // Not blank: a good share of the page is drawn on.
  const testing::Rgba white{255, 255, 255, 255};
  size_t drawn = 0;
  for (const auto& px : image->pixels) drawn += px == white ? 0 : 1;
  EXPECT_GT(drawn, image->pixels.size() / 10) << "the page looks blank";

  // Each task's exact colour covers at least a bar's worth of pixels: a bar is
  // 22 px high and, at these durations, 60+ px wide in each panel, while the
  // swatches, legend and loss line of a task cover well under this.
  for (size_t i = 0; i < report.tasks.size(); ++i) {
    auto colour = testing::ParseHexColour(TaskColour(i));
    ASSERT_TRUE(colour.ok()) << colour.status();
    size_t n = 0;
    for (const auto& px : image->pixels) n += px == *colour ? 1 : 0;
    EXPECT_GE(n, 4000u) << "task " << report.tasks[i].name << " (" << TaskColour(i)
                        << ") covers too few pixels: its bars were not drawn";
  }
}

}  // namespace
}  // namespace orrery::local
