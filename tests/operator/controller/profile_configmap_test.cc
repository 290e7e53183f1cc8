#include "operator/controller/profile_configmap.h"

#include <gtest/gtest.h>

#include "operator/controller/names.h"

namespace orrery::controller {
namespace {

CachedProfile Entry(int gpus, const std::string& measured_at, double speed = 100) {
  CachedProfile p;
  p.entry.signature = "gpt-l2-h64/synthetic/b8";
  p.entry.template_name = "ddp";
  p.entry.gpus = gpus;
  p.entry.batch_size = 8;
  p.entry.device = "cuda";
  p.entry.samples_per_s = speed;
  p.entry.step_time_s = 0.08;
  p.entry.step_time_p90_s = 0.09;
  p.entry.peak_memory_bytes = 1e9;
  p.entry.measured_at = measured_at;
  return p;
}

TEST(ProfileConfigMapTest, RoundTrip) {
  ProfileTable t;
  MergeProfile(&t, Entry(1, "2026-01-01T00:00:00Z"));
  MergeProfile(&t, Entry(2, "2026-01-01T00:00:01Z"));
  CachedProfile oom = Entry(8, "2026-01-01T00:00:02Z", 0);
  oom.infeasible = true;
  oom.reason = "OOMKilled";
  MergeProfile(&t, oom);
  Json cm = EncodeProfileConfigMap(t, "orrery-system");
  EXPECT_EQ(cm["metadata"]["name"], kProfileConfigMapName);
  EXPECT_EQ(cm["metadata"]["namespace"], "orrery-system");
  for (const auto& [k, v] : cm["data"].items()) {
    EXPECT_TRUE(IsLabelValue(k)) << k;  // ConfigMap keys: [-._a-zA-Z0-9]
    EXPECT_TRUE(v.is_string());
  }
  std::vector<api::FieldError> errors;
  ProfileTable back = DecodeProfileConfigMap(cm, &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back, t);
  EXPECT_TRUE(back.at(ProfileDataKey(oom.entry)).infeasible);
}

TEST(ProfileConfigMapTest, MeasuredPeaksRoundTripAndOldEntriesReadWithoutThem) {
  ProfileTable t;
  CachedProfile measured = Entry(1, "2026-01-01T00:00:00Z");
  measured.entry.device_allocated_bytes = 5e9;
  measured.entry.recompute = "unit";
  MergeProfile(&t, measured);
  std::vector<api::FieldError> errors;
  ProfileTable back = DecodeProfileConfigMap(EncodeProfileConfigMap(t, "ns"), &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back, t);
  EXPECT_DOUBLE_EQ(back.at(ProfileDataKey(measured.entry)).entry.device_allocated_bytes, 5e9);
  // An entry an older operator wrote: no deviceAllocatedBytes, no recompute.
  const CachedProfile before = Entry(2, "2026-01-01T00:00:01Z");
  Json old = EncodeCachedProfile(before);
  old.erase("deviceAllocatedBytes");
  old.erase("recompute");
  Json cm = {{"data", {{ProfileDataKey(before.entry), old.dump()}}}};
  back = DecodeProfileConfigMap(cm, &errors);
  EXPECT_TRUE(errors.empty());
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back.begin()->second.entry.device_allocated_bytes, 0);
  EXPECT_EQ(back.begin()->second.entry.recompute, "");
  // A bad mode is named.
  Json bad = EncodeCachedProfile(measured);
  bad["recompute"] = "sometimes";
  DecodeProfileConfigMap(Json{{"data", {{ProfileDataKey(measured.entry), bad.dump()}}}}, &errors);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors.back().path.find("recompute"), std::string::npos);
}

TEST(ProfileConfigMapTest, EmptyConfigMapIsAnEmptyCache) {
  std::vector<api::FieldError> errors;
  Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "x"}}}};
  EXPECT_TRUE(DecodeProfileConfigMap(cm, &errors).empty());
  EXPECT_TRUE(errors.empty());
}

TEST(ProfileConfigMapTest, BadEntriesAreReportedByPathAndSkipped) {
  ProfileTable t;
  MergeProfile(&t, Entry(1, "2026-01-01T00:00:00Z"));
  Json cm = EncodeProfileConfigMap(t, "ns");
  std::string good_key = cm["data"].begin().key();
  cm["data"]["pnotjson"] = "{";
  Json wrong_type = EncodeCachedProfile(Entry(2, "t"));
  wrong_type["gpus"] = "two";
  cm["data"][ProfileDataKey(Entry(2, "t").entry)] = wrong_type.dump();
  cm["data"]["pmismatch"] = EncodeCachedProfile(Entry(4, "t")).dump();
  Json unknown = EncodeCachedProfile(Entry(8, "t"));
  unknown["colour"] = "red";
  unknown.erase("device");
  cm["data"][ProfileDataKey(Entry(8, "t").entry)] = unknown.dump();
  std::vector<api::FieldError> errors;
  ProfileTable back = DecodeProfileConfigMap(cm, &errors);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back.begin()->first, good_key);
  std::vector<std::string> paths;
  paths.reserve(errors.size());
  for (const auto& e : errors) paths.push_back(e.path);
  std::string k2 = ProfileDataKey(Entry(2, "t").entry);
  std::string k8 = ProfileDataKey(Entry(8, "t").entry);
  EXPECT_NE(std::find(paths.begin(), paths.end(), "data[pnotjson]"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "data[" + k2 + "].gpus"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "data[pmismatch]"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "data[" + k8 + "].colour"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "data[" + k8 + "].device"), paths.end());
}

TEST(ProfileConfigMapTest, FeasibleEntriesNeedThroughput) {
  std::vector<api::FieldError> errors;
  CachedProfile out;
  EXPECT_FALSE(DecodeCachedProfile(EncodeCachedProfile(Entry(1, "t", 0)), "x", &out, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "x.samplesPerSecond");
}

TEST(ProfileConfigMapTest, MergeKeepsTheNewestMeasurement) {
  ProfileTable t;
  EXPECT_TRUE(MergeProfile(&t, Entry(1, "2026-01-02T00:00:00Z", 100)));
  EXPECT_FALSE(MergeProfile(&t, Entry(1, "2026-01-01T00:00:00Z", 50)));  // older
  EXPECT_FALSE(MergeProfile(&t, Entry(1, "2026-01-02T00:00:00Z", 70)));  // tie: keep
  EXPECT_DOUBLE_EQ(t.begin()->second.entry.samples_per_s, 100);
  EXPECT_TRUE(MergeProfile(&t, Entry(1, "2026-01-03T00:00:00Z", 120)));
  EXPECT_DOUBLE_EQ(t.begin()->second.entry.samples_per_s, 120);
  ProfileTable other;
  MergeProfile(&other, Entry(1, "2026-01-01T00:00:00Z", 1));
  MergeProfile(&other, Entry(2, "2026-01-01T00:00:00Z", 1));
  EXPECT_EQ(MergeProfiles(&t, other), 1);
  EXPECT_EQ(t.size(), 2u);
  // A later measurement of a configuration that failed replaces the failure.
  CachedProfile oom = Entry(4, "2026-01-01T00:00:00Z", 0);
  oom.infeasible = true;
  MergeProfile(&t, oom);
  EXPECT_TRUE(MergeProfile(&t, Entry(4, "2026-02-01T00:00:00Z")));
  EXPECT_FALSE(t.at(ProfileDataKey(oom.entry)).infeasible);
}

TEST(ProfileConfigMapTest, BoundEvictsTheOldestFirst) {
  ProfileTable t;
  for (int g = 1; g <= 100; ++g) {
    char when[32];
    std::snprintf(when, sizeof(when), "2026-01-01T00:%02d:%02dZ", g / 60, g % 60);
    MergeProfile(&t, Entry(g, when));
  }
  size_t full = ProfileDataBytes(t);
  EXPECT_TRUE(BoundProfiles(&t, full).empty());
  size_t one = full / 100;
  std::vector<std::string> evicted = BoundProfiles(&t, full - 10 * one);
  EXPECT_GE(evicted.size(), 10u);
  EXPECT_LE(ProfileDataBytes(t), full - 10 * one);
  EXPECT_EQ(evicted.front(), ProfileDataKey(Entry(1, "").entry));  // the oldest
  EXPECT_EQ(t.count(ProfileDataKey(Entry(100, "").entry)), 1u);    // the newest stays
  EXPECT_EQ(t.count(ProfileDataKey(Entry(1, "").entry)), 0u);
}

TEST(ProfileConfigMapTest, DefaultBudgetFitsAConfigMap) {
  EXPECT_LT(kProfileConfigMapBudget, 1024u * 1024u);
  ProfileTable t;
  for (int g = 1; g <= 5000; ++g) MergeProfile(&t, Entry(g, "2026-01-01T00:00:00Z"));
  BoundProfiles(&t);
  EXPECT_LE(ProfileDataBytes(t), kProfileConfigMapBudget);
  EXPECT_LT(EncodeProfileConfigMap(t, "ns").dump().size(), 1024u * 1024u);
}

}  // namespace
}  // namespace orrery::controller
