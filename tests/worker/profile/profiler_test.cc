// The profiler prints one parseable document with the measured figures and
// knobs, tunes micro-batches for a pipeline, and writes the termination message.
#include "worker/profile/profiler.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "tests/worker/dist/run_ranks.h"

namespace orrery::profile {
namespace {

using Json = nlohmann::json;

train::TaskConfig Task() {
  train::TaskConfig t;
  t.model.gpt = {2, 32, 4, 16, 64};
  t.global_batch = 8;
  t.profile_warmup = 1;
  t.profile_steps = 4;
  return t;
}

TEST(PercentileTest, NearestRank) {
  EXPECT_EQ(Percentile({}, 0.5), 0.0);
  EXPECT_EQ(Percentile({3, 1, 2}, 0.5), 2.0);
  EXPECT_EQ(Percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9), 9.0);
  EXPECT_EQ(Percentile({5}, 0.9), 5.0);
}

TEST(ProfilerTest, SingleRankDocument) {
  testing_worker::TempDir dir;
  train::TaskConfig t = Task();
  t.termination_message_path = dir.path() + "/termination-log";
  std::ostringstream out;
  auto s = Profile(t, nullptr, out);
  ASSERT_TRUE(s.ok()) << s.status();
  Json doc = Json::parse(out.str());
  EXPECT_EQ(doc["event"], "profile");
  EXPECT_EQ(doc["template"], "single");
  EXPECT_EQ(doc["timed_steps"], 4);
  double median = doc["step_time_s"]["median"], p90 = doc["step_time_s"]["p90"];
  EXPECT_GT(median, 0.0);
  EXPECT_GE(p90, median);
  EXPECT_NEAR(doc["samples_per_s"].get<double>(), 8.0 / median, 1e-6 * 8.0 / median);
  EXPECT_GT(doc["peak_memory_bytes"]["host_rss"].get<int64_t>(), 0);
  EXPECT_GT(doc["peak_memory_bytes"]["device_parameters"].get<int64_t>(), 0);
  // The device it ran on (the task's), and the counting allocator's peak of
  // tensor bytes: at least the parameters and gradients, within the process.
  EXPECT_EQ(doc["device"], "cpu");
  EXPECT_EQ(doc["device_name"], "cpu");
  ASSERT_TRUE(doc["peak_memory_bytes"].contains("device_allocated"));
  const int64_t allocated = doc["peak_memory_bytes"]["device_allocated"];
  EXPECT_GT(allocated, doc["peak_memory_bytes"]["device_parameters"].get<int64_t>());
  EXPECT_LT(allocated, doc["peak_memory_bytes"]["host_rss"].get<int64_t>());
  std::ifstream f(t.termination_message_path);
  std::string written((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(Json::parse(written)["samples_per_s"], doc["samples_per_s"]);
}

TEST(ProfilerTest, PipelineTunesMicroBatchesOnTwoRanks) {
  train::TaskConfig t = Task();
  t.strategy.name = "pipeline";
  t.tune = true;
  std::vector<std::string> outs(2);
  auto statuses = testing_worker::RunRanks(2, [&](int rank, dist::Rendezvous* rdv) -> Status {
    std::ostringstream out;
    ORRERY_ASSIGN_OR_RETURN(auto s, Profile(t, rdv, out));
    outs[static_cast<size_t>(rank)] = out.str();
    return OkStatus();
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(outs[1].empty());  // only rank 0 reports
  Json doc = Json::parse(outs[0]);
  EXPECT_EQ(doc["layout"], "dp=1,tp=1,pp=2");
  ASSERT_EQ(doc["tuning"].size(), 3u);  // 2, 4 and 8 micro-batches
  int chosen = doc["knobs"]["micro_batches"];
  double best = 1e9;
  int best_m = 0;
  for (const auto& trial : doc["tuning"]) {
    if (trial["step_time_s"].get<double>() < best) {
      best = trial["step_time_s"];
      best_m = trial["knobs"]["micro_batches"];
    }
  }
  EXPECT_EQ(chosen, best_m);
  EXPECT_EQ(doc["knobs"]["stage_starts"].size(), 1u);
}

TEST(ProfilerTest, InfeasibleConfigurationIsAnError) {
  train::TaskConfig t = Task();
  t.strategy.name = "spill";
  t.strategy.spill_budget_bytes = 1000;
  std::ostringstream out;
  auto s = Profile(t, nullptr, out);
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace orrery::profile
