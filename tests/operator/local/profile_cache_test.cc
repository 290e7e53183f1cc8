// The profile cache file: round trip, keys, corrupt files, and the profiler's
// document.
#include "operator/local/profile_cache.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace orrery::local {
namespace {

ProfileEntry Entry(const std::string& tmpl, int gpus, double rate) {
  ProfileEntry e;
  e.signature = "gpt-l2-h64-a4-s64-v256/text/b8";
  e.template_name = tmpl;
  e.gpus = gpus;
  e.batch_size = 8;
  e.device = "cpu";
  e.samples_per_s = rate;
  e.step_time_s = 8 / rate;
  e.step_time_p90_s = 9 / rate;
  e.peak_memory_bytes = 1 << 20;
  e.measured_at = "2026-11-23T00:00:00Z";
  return e;
}

TEST(ProfileCache, MissingFileIsEmptyAndSaveLoadRoundTrips) {
  std::string dir = ::testing::TempDir() + "/profile_cache_test";
  std::filesystem::remove_all(dir);
  std::string path = dir + "/sub/profiles.json";
  auto cache = ProfileCache::Load(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->size(), 0u);
  cache->Put(Entry("single", 1, 400));
  cache->Put(Entry("ddp", 2, 700));
  cache->Put(Entry("ddp", 2, 750));  // same key: replaced
  ASSERT_TRUE(cache->Save().ok());
  auto again = ProfileCache::Load(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->size(), 2u);
  const ProfileEntry* hit = again->Find(Entry("ddp", 2, 0));
  ASSERT_NE(hit, nullptr);
  EXPECT_DOUBLE_EQ(hit->samples_per_s, 750);
  EXPECT_EQ(hit->measured_at, "2026-11-23T00:00:00Z");
  ProfileEntry other = Entry("ddp", 2, 0);
  other.device = "cuda";
  EXPECT_EQ(again->Find(other), nullptr);
  other = Entry("ddp", 2, 0);
  other.batch_size = 16;
  EXPECT_EQ(again->Find(other), nullptr);
}

TEST(ProfileCache, CorruptFileIsAnErrorNamingIt) {
  std::string path = ::testing::TempDir() + "/profile_cache_corrupt.json";
  { std::ofstream(path) << "{\"entries\": [{\"signature\": 3}]}"; }
  auto cache = ProfileCache::Load(path);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find(path), std::string::npos);
  EXPECT_NE(cache.status().message().find("entries[0]"), std::string::npos);
  { std::ofstream(path) << "not json"; }
  cache = ProfileCache::Load(path);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("remove"), std::string::npos);
}

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
  EXPECT_FALSE(ParseProfileDocument(R"({"event":"progress"})").ok());
  EXPECT_FALSE(
      ParseProfileDocument(R"({"event":"profile","samples_per_s":0,"step_time_s":{}})").ok());
}

}  // namespace
}  // namespace orrery::local
