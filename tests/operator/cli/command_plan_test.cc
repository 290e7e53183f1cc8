// `orrery plan` on the real binary: a plan for a cluster shape with its Gantt
// chart, measured profiles from the cache where they exist, estimates elsewhere.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/operator/cli/run_orrery.h"

namespace orrery::cli::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PlanCommandTest, PlansEveryTaskAndDrawsTheGantt) {
  TempFiles files("plan_gantt");
  std::string svg = files.Write("plan.svg", "");
  std::string cache = files.Write("empty-cache.json", "{\"entries\": []}");
  RunResult r = RunOrrery("plan " + Example("gpt-finetune-sweep.yaml") + " --gpus 2x8 --svg " +
                          svg + " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 2x8 cuda (12 tasks; 0 profiled configurations"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("makespan "), std::string::npos);
  EXPECT_NE(r.output.find("lower bound "), std::string::npos);
  EXPECT_NE(r.output.find("current practice"), std::string::npos);
  EXPECT_NE(r.output.find("~"), std::string::npos);  // estimates are marked
  std::string chart = ReadAll(svg);
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  // One bar per task, each labelled with its name in the tooltip or the bar.
  for (const char* task : {"gpt2-ft-lr-3e-5-bs-32-wu-100", "gpt2-ft-lr-3e-4-bs-64-wu-500"}) {
    EXPECT_NE(r.output.find(task), std::string::npos) << task;
    EXPECT_NE(chart.find(task), std::string::npos) << task;
  }
}

TEST(PlanCommandTest, MeasuredProfilesReplaceEstimates) {
  TempFiles files("plan_cache");
  std::string svg = files.Write("plan.svg", "");
  // The quickstart's model on one and two CPU devices, as orrery run records it.
  std::string cache = files.Write("profiles.json", R"({"version": 1, "entries": [
    {"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": "single", "gpus": 1,
     "batchSize": 8, "device": "cpu", "samplesPerSecond": 400},
    {"signature": "gpt-l2-h64-a4-s64-v256/text/b8", "template": "ddp", "gpus": 2,
     "batchSize": 8, "device": "cpu", "samplesPerSecond": 700}]})");
  RunResult r = RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 1x2 --device cpu --svg " +
                          svg + " --profile-cache " + cache);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("6 profiled configurations, 0 estimated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 400.0\n"), std::string::npos) << r.output;  // measured, unmarked
  EXPECT_EQ(r.output.find("~400"), std::string::npos) << r.output;
}

TEST(PlanCommandTest, BadArgumentsSayWhatToWrite) {
  RunResult r = RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("NODESxGPUS"), std::string::npos) << r.output;
  EXPECT_EQ(RunOrrery("plan --gpus 2x8").exit_code, 2);
  EXPECT_EQ(RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 2x8 --device tpu").exit_code,
            2);
  TempFiles files("plan_bad");
  std::string cache = files.Write("bad.json", "[1, 2]");
  r = RunOrrery("plan " + Example("quickstart.yaml") + " --gpus 1x2 --profile-cache " + cache);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not a profile cache"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace orrery::cli::testing
