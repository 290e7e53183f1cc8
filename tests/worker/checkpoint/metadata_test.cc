// The metadata JSON round-trips, and damaged or foreign metadata is refused with a
// message naming the file.
#include "worker/checkpoint/metadata.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace orrery::checkpoint {
namespace {

Metadata Sample() {
  Metadata m;
  m.info.step = 1234;
  m.info.layout = {4, 2, 1, 2};
  m.info.num_layers = 12;
  m.info.lr_schedule = {{"lr", 1.5e-4}, {"warmup_steps", 100}};
  m.info.dataset = {77, 5000, 3, 250};
  m.info.extra = {{"model", "gpt-small"}};
  m.files.push_back({"shard-00000.bin", 0, 96, 0xDEADBEEF});
  TensorMeta t;
  t.spec = {"model/wte", {4, 6}, DType::kBFloat16, 0, 0, true};
  t.chunks.push_back({0, 48, 48, Region{{0, 0}, {4, 6}, 0, 24}, 32, {1, 2}});
  m.tensors.emplace(t.spec.name, t);
  m.blobs[BlobKey(3, "rng/cpu")] = std::string("\x00\x01\xFFxyz", 6);
  return m;
}

TEST(MetadataTest, RoundTrips) {
  const Metadata m = Sample();
  auto back = MetadataFromJson(MetadataToJson(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->info.step, 1234);
  EXPECT_EQ(back->info.layout, m.info.layout);
  EXPECT_EQ(back->info.dataset, m.info.dataset);
  EXPECT_EQ(back->info.lr_schedule, m.info.lr_schedule);
  EXPECT_EQ(back->info.extra, m.info.extra);
  EXPECT_EQ(back->blobs, m.blobs);
  const TensorMeta* t = back->Find("model/wte");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->spec.dtype, DType::kBFloat16);
  EXPECT_EQ(t->chunks[0].region, m.tensors.at("model/wte").chunks[0].region);
  EXPECT_EQ(t->chunks[0].block_crcs, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(back->files[0].crc32c, 0xDEADBEEFu);
  EXPECT_EQ(back->TotalTensorBytes(), 48u);
}

TEST(MetadataTest, RefusesDamagedMetadata) {
  auto mutate = [](auto fn) {
    nlohmann::json j = nlohmann::json::parse(MetadataToJson(Sample()));
    fn(j);
    return MetadataFromJson(j.dump(), "/ckpt/metadata.json").status();
  };
  Status s = mutate([](auto& j) { j["format_version"] = 2; });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("/ckpt/metadata.json"), std::string::npos);
  EXPECT_EQ(mutate([](auto& j) { j["format"] = "something-else"; }).code(), StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["tensors"][0]["chunks"][0]["file"] = 3; }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["tensors"][0]["chunks"][0]["bytes"] = 50; }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["tensors"][0]["chunks"][0]["offset"] = 60; }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["tensors"][0]["chunks"][0]["block_crcs"] = {1}; }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) {
              j["tensors"][0]["chunks"][0]["region"]["sizes"] = {5, 6};
            }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["tensors"][0]["dtype"] = "float7"; }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["files"][0]["name"] = "../etc/passwd"; }).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j["layout"]["fsdp"] = 3; }).code(), StatusCode::kDataLoss);
  EXPECT_EQ(mutate([](auto& j) { j.erase("step"); }).code(), StatusCode::kDataLoss);
  EXPECT_EQ(MetadataFromJson("{not json", "x").status().code(), StatusCode::kDataLoss);
}

TEST(MetadataTest, Base64RoundTripsAllLengths) {
  std::string bytes;
  for (int n = 0; n < 20; ++n) {
    auto back = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, bytes);
    bytes += static_cast<char>(n * 37 + 200);
  }
  EXPECT_EQ(Base64Encode("Man"), "TWFu");
  EXPECT_EQ(Base64Encode("Ma"), "TWE=");
  EXPECT_FALSE(Base64Decode("TW=u").ok());
  EXPECT_FALSE(Base64Decode("TWF").ok());
}

}  // namespace
}  // namespace orrery::checkpoint
