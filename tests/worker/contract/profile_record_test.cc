// The profiler's record: the worker's document read into an entry, and an
// entry through the JSON both profile caches store.
#include "worker/contract/profile_record.h"

#include <gtest/gtest.h>

namespace orrery::contract {
namespace {

TEST(ParseProfileDocument, ReadsTheProfilersFields) {
  auto e =
      ParseProfileDocument(R"({"event":"profile","template":"ddp","world_size":2,"global_batch":8,)"
                           R"("step_time_s":{"median":0.012,"p90":0.014},"samples_per_s":666.7,)"
                           R"("peak_memory_bytes":{"device_parameters":40960,"host_rss":1}})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->gpus, 2);
  EXPECT_EQ(e->batch_size, 8);
  EXPECT_DOUBLE_EQ(e->samples_per_s, 666.7);
  EXPECT_DOUBLE_EQ(e->step_time_s, 0.012);
  EXPECT_DOUBLE_EQ(e->step_time_p90_s, 0.014);
  EXPECT_DOUBLE_EQ(e->peak_memory_bytes, 40960);
  // A document without a measured peak (a worker from before them).
  EXPECT_EQ(e->device_allocated_bytes, 0);
  EXPECT_EQ(e->recompute, "");
  EXPECT_FALSE(ParseProfileDocument(R"({"event":"progress"})").ok());
  EXPECT_FALSE(
      ParseProfileDocument(R"({"event":"profile","samples_per_s":0,"step_time_s":{}})").ok());
}

TEST(ParseProfileDocument, ReadsTheMeasuredPeakAndItsRecomputationMode) {
  auto e = ParseProfileDocument(
      R"({"event":"profile","template":"fsdp","world_size":2,"global_batch":8,)"
      R"("step_time_s":{"median":0.012,"p90":0.014},"samples_per_s":666.7,)"
      R"("peak_memory_bytes":{"device_parameters":40960,"host_rss":1,"device_allocated":917504},)"
      R"("knobs":{"recompute":"unit","micro_batches":0}})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_DOUBLE_EQ(e->peak_memory_bytes, 40960);
  EXPECT_DOUBLE_EQ(e->device_allocated_bytes, 917504);
  EXPECT_EQ(e->recompute, "unit");
}

TEST(ProfileEntryJson, AnEntryFromBeforeMeasuredPeaksReadsWithoutThem) {
  auto e = ProfileEntryFromJson(
      nlohmann::json::parse(R"({"signature":"s","template":"ddp","gpus":1,"batchSize":8,)"
                            R"("device":"cpu","samplesPerSecond":400,"peakMemoryBytes":4096})"),
      "old");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->device_allocated_bytes, 0);
  EXPECT_EQ(e->recompute, "");
  // Written back as it was: no measured-peak fields.
  EXPECT_FALSE(ProfileEntryToJson(*e).contains("deviceAllocatedBytes"));
  EXPECT_FALSE(ProfileEntryToJson(*e).contains("recompute"));
}

TEST(ProfileEntryJson, RoundTripsEveryField) {
  ProfileEntry e;
  e.signature = "gpt-l2-h64/synthetic/b8";
  e.template_name = "fsdp";
  e.gpus = 4;
  e.batch_size = 32;
  e.device = "cuda";
  e.samples_per_s = 123.5;
  e.step_time_s = 0.25;
  e.step_time_p90_s = 0.3;
  e.peak_memory_bytes = 1e9;
  e.measured_at = "2026-11-26T10:00:00Z";
  e.device_allocated_bytes = 3e9;
  e.recompute = "none";
  auto back = ProfileEntryFromJson(ProfileEntryToJson(e), "here");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ProfileEntryToJson(*back), ProfileEntryToJson(e));
  EXPECT_EQ(back->Key(), e.Key());
  EXPECT_DOUBLE_EQ(back->device_allocated_bytes, 3e9);
  EXPECT_EQ(back->recompute, "none");
}

TEST(ProfileEntryJson, NamesWhereAnEntryIsBad) {
  nlohmann::json j = ProfileEntryToJson(ProfileEntry{"s", "ddp", 1, 8, "cpu", 1, 0, 0, 0, ""});
  j.erase("device");
  auto missing = ProfileEntryFromJson(j, "cache.json: entries[3]");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("entries[3]"), std::string::npos);
  j["device"] = "cpu";
  j["deviceAllocatedBytes"] = -1;
  auto negative = ProfileEntryFromJson(j, "x");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("deviceAllocatedBytes"), std::string::npos);
  j.erase("deviceAllocatedBytes");
  j["samplesPerSecond"] = 0;
  EXPECT_FALSE(ProfileEntryFromJson(j, "x").ok());
}

}  // namespace
}  // namespace orrery::contract
