// The profile cache file: round trip, keys, corrupt files, and the gang
// speedups measured per device kind.
#include "operator/local/profile_cache.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace orrery::local {
namespace {

contract::ProfileEntry Entry(const std::string& tmpl, int gpus, double rate) {
  contract::ProfileEntry e;
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
  const contract::ProfileEntry* hit = again->Find(Entry("ddp", 2, 0));
  ASSERT_NE(hit, nullptr);
  EXPECT_DOUBLE_EQ(hit->samples_per_s, 750);
  EXPECT_EQ(hit->measured_at, "2026-11-23T00:00:00Z");
  contract::ProfileEntry other = Entry("ddp", 2, 0);
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

TEST(ProfileCache, KeepsAMeasuredGangSpeedupPerDeviceKind) {
  std::string dir = ::testing::TempDir() + "/profile_cache_gangs";
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/profiles.json";
  auto cache = ProfileCache::Load(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->GangSpeedup("cpu"), std::nullopt);
  cache->Put(Entry("spill", 1, 100));
  cache->PutGangSpeedup("cpu", 0.8);
  cache->PutGangSpeedup("cuda", 1.3);
  cache->PutGangSpeedup("cuda", 1.25);  // the latest measurement
  cache->PutGangSpeedup("cpu", 0);      // not a measurement: ignored
  ASSERT_TRUE(cache->Save().ok());
  auto again = ProfileCache::Load(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->size(), 1u);
  EXPECT_EQ(again->GangSpeedup("cpu"), 0.8);
  EXPECT_EQ(again->GangSpeedup("cuda"), 1.25);
  // A bad figure is an error naming the field and the fix.
  { std::ofstream(path) << R"({"entries": [], "gang_speedups": {"cpu": -1}})"; }
  auto bad = ProfileCache::Load(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gang_speedups.cpu"), std::string::npos);
  EXPECT_NE(bad.status().message().find("remove it"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::local
