// Unit tests for the safetensors reader and writer (worker/hf/safetensors.h) on
// hand-built files: conversions with exact bit patterns, writer -> reader round
// trips, block and flat reads that touch only their bytes, sharded exports with
// their index, the commit's cleanup, and every malformed file the reader refuses.
// The check against the Python library is safetensors_reference_test.cc.
#include "worker/hf/safetensors.h"

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/worker/checkpoint/temp_dir.h"

namespace orrery::hf {
namespace {

using checkpoint::DType;
using checkpoint::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr const char* kHint = "save_pretrained(safe_serialization=True)";

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and the data section.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> Iota(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A tensor to write whose values are `values`.
TensorToWrite Tensor(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
  TensorToWrite t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.fill = [values = std::move(values)](float* out) {
    std::copy(values.begin(), values.end(), out);
    return OkStatus();
  };
  return t;
}

std::unique_ptr<SafetensorsReader> OpenOrDie(const std::string& path) {
  auto r = SafetensorsReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::vector<float> ReadAllFloats(const SafetensorsReader& r, const std::string& name) {
  const TensorInfo* t = r.Find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(t->numel()));
  Status s = r.ReadFloat32(name, Block{}, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---- conversions

TEST(ConversionTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(Float32ToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(Float32ToBFloat16(-2.0f), 0xC000);
  EXPECT_EQ(Float32ToBFloat16(F(0x3F808000)), 0x3F80);  // tie, even below: down
  EXPECT_EQ(Float32ToBFloat16(F(0x3F818000)), 0x3F82);  // tie, odd below: up
  EXPECT_EQ(Float32ToBFloat16(F(0x3F808001)), 0x3F81);  // above the tie: up
  EXPECT_EQ(Float32ToBFloat16(F(0x3F807FFF)), 0x3F80);  // below the tie: down
  EXPECT_EQ(Float32ToBFloat16(F(0x7F7FFFFF)), 0x7F80);  // the largest float overflows
  EXPECT_EQ(Float32ToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Float32ToBFloat16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(Float32ToBFloat16(std::nanf("")), 0x7FC0);
  EXPECT_EQ(Float32ToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(Float32ToBFloat16(F(0x00018000)), 0x0002);  // subnormal tie, odd: up
  EXPECT_EQ(Bits(BFloat16ToFloat32(0x3F81)), 0x3F810000u);
}

TEST(ConversionTest, Float16RoundsToNearestEven) {
  EXPECT_EQ(Float32ToFloat16(1.0f), 0x3C00);
  EXPECT_EQ(Float32ToFloat16(-2.0f), 0xC000);
  EXPECT_EQ(Float32ToFloat16(65504.0f), 0x7BFF);
  EXPECT_EQ(Float32ToFloat16(65519.996f), 0x7BFF);
  EXPECT_EQ(Float32ToFloat16(65520.0f), 0x7C00);  // tie between 65504 and 2^16: even is inf
  EXPECT_EQ(Float32ToFloat16(1e10f), 0x7C00);
  EXPECT_EQ(Float32ToFloat16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(Float32ToFloat16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Float32ToFloat16(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero: even
  EXPECT_EQ(Float32ToFloat16(F(Bits(std::ldexp(1.0f, -25)) + 1)), 0x0001);
  EXPECT_EQ(Float32ToFloat16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units, tie: up to 2
  EXPECT_EQ(Float32ToFloat16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 units, tie: down to 2
  EXPECT_EQ(Float32ToFloat16(F(0x3F801000)), 0x3C00);          // 1 + 2^-11: tie, even
  EXPECT_EQ(Float32ToFloat16(F(0x3F803000)), 0x3C02);          // 1 + 3*2^-11: tie, odd: up
  EXPECT_EQ(Float32ToFloat16(-0.0f), 0x8000);
  EXPECT_EQ(Float32ToFloat16(std::nanf("")), 0x7E00);
  EXPECT_EQ(Float32ToFloat16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(Float16ToFloat32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16ToFloat32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Float16ToFloat32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(Float16ToFloat32(0xFC00)));
}

TEST(ConversionTest, EveryHalfAndBFloat16RoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f16 = Float16ToFloat32(bits);
    const float bf16 = BFloat16ToFloat32(bits);
    if (std::isnan(f16)) {
      EXPECT_TRUE(std::isnan(Float16ToFloat32(Float32ToFloat16(f16))));
    } else {
      ASSERT_EQ(Float32ToFloat16(f16), bits) << std::hex << h;
    }
    if (std::isnan(bf16)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat32(Float32ToBFloat16(bf16))));
    } else {
      ASSERT_EQ(Float32ToBFloat16(bf16), bits) << std::hex << h;
    }
  }
}

TEST(ConversionTest, DTypeNames) {
  for (const char* name : {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"}) {
    auto d = ParseSafetensorsDType(name);
    ASSERT_TRUE(d.ok()) << name;
    EXPECT_STREQ(SafetensorsDTypeName(*d), name);
  }
  EXPECT_EQ(ParseSafetensorsDType("U32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSafetensorsDType("X7").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ShardFileName(2, 13), "model-00002-of-00013.safetensors");
}

// ---- writer -> reader

class RoundTripTest : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTripTest, ReadsBackWhatWasWritten) {
  TempDir tmp;
  const DType dtype = GetParam();
  // Values that exercise rounding: ties, subnormals, large values, signed zero.
  const std::vector<float> special = {1.0f,  F(0x3F808000), F(0x3F818000), F(0x3F801000),
                                      -0.0f, 65520.0f,      1e-7f,         -3.14159265f,
                                      1e30f, F(0x00018000), 0.1f,          -7.0f};
  std::vector<TensorToWrite> tensors = {
      Tensor("z.weight", {3, 4}, special),
      Tensor("a.bias", {5}, Iota(5, -2.0f)),
      Tensor("m.scalar", {}, {0.5f}),
      Tensor("m.empty", {0, 3}, {}),
      Tensor("b.conv", {2, 1, 3}, Iota(6, 10.0f)),
  };
  WriteOptions options;
  options.dtype = dtype;
  ASSERT_TRUE(WriteSafetensors(tmp.path(), tensors, options).ok());
  EXPECT_THAT(Files(tmp.path()), ElementsAre("model.safetensors"));

  auto r = OpenOrDie(tmp.path());
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->Names(), ElementsAre("a.bias", "b.conv", "m.empty", "m.scalar", "z.weight"));
  EXPECT_EQ(r->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  const TensorInfo* z = r->Find("z.weight");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->dtype, dtype);
  EXPECT_THAT(z->shape, ElementsAre(3, 4));
  EXPECT_EQ(z->file, tmp.path() + "/model.safetensors");
  EXPECT_EQ(r->Find("nope"), nullptr);

  auto expect = [&](float v) {
    if (dtype == DType::kBFloat16) return BFloat16ToFloat32(Float32ToBFloat16(v));
    if (dtype == DType::kFloat16) return Float16ToFloat32(Float32ToFloat16(v));
    return v;
  };
  std::vector<float> got = ReadAllFloats(*r, "z.weight");
  ASSERT_EQ(got.size(), special.size());
  for (size_t i = 0; i < special.size(); ++i)
    EXPECT_EQ(Bits(got[i]), Bits(expect(special[i]))) << i;
  EXPECT_THAT(ReadAllFloats(*r, "a.bias"), ElementsAre(-2, -1, 0, 1, 2));
  EXPECT_THAT(ReadAllFloats(*r, "m.scalar"), ElementsAre(0.5f));
  EXPECT_TRUE(ReadAllFloats(*r, "m.empty").empty());
  EXPECT_THAT(ReadAllFloats(*r, "b.conv"), ElementsAre(10, 11, 12, 13, 14, 15));
}

INSTANTIATE_TEST_SUITE_P(DTypes, RoundTripTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const auto& p) { return SafetensorsDTypeName(p.param); });

TEST(WriterTest, FileLayoutIsTheLibrarys) {
  TempDir tmp;
  WriteOptions options;
  options.dtype = DType::kBFloat16;
  ASSERT_TRUE(WriteSafetensors(tmp.path(),
                               {Tensor("w", {2}, {1.0f, F(0x3F818000)}), Tensor("b", {1}, {-2.0f})},
                               options)
                  .ok());
  const std::string bytes = ReadAll(tmp.Sub("model.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  // "__metadata__" first, tensors by name with contiguous offsets, space padding.
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[1],)"
            R"("data_offsets":[0,2]},"w":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}})");
  ASSERT_EQ(bytes.size(), 8 + n + 6);
  // b = -2 -> 0xC000; w = 1 -> 0x3F80, tie with odd below -> 0x3F82 (little-endian).
  EXPECT_EQ(bytes.substr(8 + n), std::string("\x00\xC0\x80\x3F\x82\x3F", 6));
}

TEST(WriterTest, ShardsAboveTheLimitWithAnIndex) {
  TempDir tmp;
  WriteOptions options;
  options.dtype = DType::kFloat16;
  options.max_shard_bytes = 50;  // 2-byte elements: 25 per shard
  // Shards fill in the given order: c(20 B) + a(30 B) = 50; d(30 B) would make 80, so
  // a new shard, which b(20 B) joins; e(60 B) is over the limit and gets its own.
  // Within a file the tensors are sorted by name.
  std::vector<TensorToWrite> tensors = {
      Tensor("c", {10}, Iota(10, 100)), Tensor("a", {15}, Iota(15)),
      Tensor("d", {3, 5}, Iota(15, 300)), Tensor("b", {10}, Iota(10, 200)),
      Tensor("e", {30}, Iota(30, 400))};
  ASSERT_TRUE(WriteSafetensors(tmp.path(), tensors, options).ok());
  EXPECT_THAT(Files(tmp.path()),
              ElementsAre("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                          "model-00003-of-00003.safetensors", "model.safetensors.index.json"));
  const json index = json::parse(ReadAll(tmp.Sub("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 160);
  EXPECT_EQ(index["weight_map"], json({{"a", "model-00001-of-00003.safetensors"},
                                       {"b", "model-00002-of-00003.safetensors"},
                                       {"c", "model-00001-of-00003.safetensors"},
                                       {"d", "model-00002-of-00003.safetensors"},
                                       {"e", "model-00003-of-00003.safetensors"}}));
  // Each shard holds only its tensors, each a complete file.
  auto shard2 = OpenOrDie(tmp.Sub("model-00002-of-00003.safetensors"));
  ASSERT_NE(shard2, nullptr);
  EXPECT_THAT(shard2->Names(), ElementsAre("b", "d"));
  EXPECT_LT(shard2->Find("b")->data_begin, shard2->Find("d")->data_begin);

  auto r = OpenOrDie(tmp.path());
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->Names(), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_EQ(ReadAllFloats(*r, "d"), Iota(15, 300));
  EXPECT_EQ(ReadAllFloats(*r, "c"), Iota(10, 100));
  EXPECT_EQ(ReadAllFloats(*r, "e"), Iota(30, 400));
  EXPECT_EQ(r->Find("e")->file, tmp.path() + "/model-00003-of-00003.safetensors");
  EXPECT_EQ(r->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  // The index path opens the same model.
  auto by_index = OpenOrDie(tmp.Sub("model.safetensors.index.json"));
  ASSERT_NE(by_index, nullptr);
  EXPECT_EQ(by_index->Names().size(), 5u);
}

TEST(WriterTest, FillsEachTensorOnceInFileOrder) {
  TempDir tmp;
  std::vector<std::string> calls;
  auto tracked = [&](const std::string& name) {
    TensorToWrite t;
    t.name = name;
    t.shape = {2};
    t.fill = [&calls, name](float* out) {
      calls.push_back(name);
      out[0] = out[1] = 1.0f;
      return OkStatus();
    };
    return t;
  };
  WriteOptions options;
  options.max_shard_bytes = 16;  // two tensors per shard
  ASSERT_TRUE(WriteSafetensors(tmp.path(), {tracked("y"), tracked("x"), tracked("w"), tracked("v")},
                               options)
                  .ok());
  EXPECT_THAT(calls, ElementsAre("x", "y", "v", "w"));
}

TEST(WriterTest, ANewExportReplacesTheOldOneAndLeavesOtherFiles) {
  TempDir tmp;
  ASSERT_TRUE(WriteFileAtomically(tmp.Sub("config.json"), "{\"model_type\": \"gpt2\"}\n").ok());
  WriteOptions sharded;
  sharded.max_shard_bytes = 8;
  ASSERT_TRUE(WriteSafetensors(
                  tmp.path(),
                  {Tensor("a", {2}, {1, 2}), Tensor("b", {2}, {3, 4}), Tensor("c", {2}, {5, 6})},
                  sharded)
                  .ok());
  EXPECT_EQ(Files(tmp.path()).size(), 5u);  // config, 3 shards, index
  WriteAll(tmp.Sub("model-00007-of-00009.safetensors.tmp"), "left by a crash");

  // Single file: the index and every shard go.
  ASSERT_TRUE(WriteSafetensors(tmp.path(), {Tensor("a", {2}, {7, 8})}, WriteOptions{}).ok());
  EXPECT_THAT(Files(tmp.path()), ElementsAre("config.json", "model.safetensors"));
  EXPECT_EQ(ReadAll(tmp.Sub("config.json")), "{\"model_type\": \"gpt2\"}\n");
  auto r = OpenOrDie(tmp.path());
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(ReadAllFloats(*r, "a"), ElementsAre(7, 8));

  // Sharded again, into two: the single file goes (it would shadow the index).
  ASSERT_TRUE(
      WriteSafetensors(tmp.path(), {Tensor("a", {2}, {1, 2}), Tensor("b", {2}, {3, 4})}, sharded)
          .ok());
  EXPECT_THAT(Files(tmp.path()),
              ElementsAre("config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors", "model.safetensors.index.json"));
}

TEST(WriterTest, AFailedFillLeavesThePreviousExportIntact) {
  TempDir tmp;
  ASSERT_TRUE(WriteSafetensors(tmp.path(), {Tensor("a", {2}, {1, 2})}, WriteOptions{}).ok());
  TensorToWrite bad;
  bad.name = "b";
  bad.shape = {2};
  bad.fill = [](float*) { return UnavailableError("gather from rank 3 failed"); };
  WriteOptions sharded;
  sharded.max_shard_bytes = 8;
  Status s = WriteSafetensors(tmp.path(), {Tensor("a", {2}, {5, 6}), bad}, sharded);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("tensor b"), HasSubstr("rank 3"), HasSubstr(tmp.path())));
  EXPECT_THAT(Files(tmp.path()), ElementsAre("model.safetensors"));  // no temporaries left
  auto r = OpenOrDie(tmp.path());
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(ReadAllFloats(*r, "a"), ElementsAre(1, 2));
}

TEST(WriterTest, RefusesBadRequests) {
  TempDir tmp;
  auto code = [&](const std::vector<TensorToWrite>& t, const WriteOptions& o = {}) {
    return WriteSafetensors(tmp.path(), t, o).code();
  };
  EXPECT_EQ(code({Tensor("a", {1}, {1}), Tensor("a", {1}, {1})}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({Tensor("a", {-1}, {})}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({Tensor("__metadata__", {1}, {1})}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({}), StatusCode::kInvalidArgument);
  TensorToWrite no_fill;
  no_fill.name = "x";
  EXPECT_EQ(code({no_fill}), StatusCode::kInvalidArgument);
  WriteOptions ints;
  ints.dtype = DType::kInt64;
  EXPECT_EQ(code({Tensor("a", {1}, {1})}, ints), StatusCode::kInvalidArgument);
  WriteOptions zero;
  zero.max_shard_bytes = 0;
  EXPECT_EQ(code({Tensor("a", {1}, {1})}, zero), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Files(tmp.path()).empty());
}

TEST(WriterTest, WriteFileAtomicallyCreatesTheDirectory) {
  TempDir tmp;
  const std::string path = tmp.Sub("out/model/config.json");
  ASSERT_TRUE(WriteFileAtomically(path, "{}\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "{\"a\": 1}\n").ok());
  EXPECT_EQ(ReadAll(path), "{\"a\": 1}\n");
  EXPECT_THAT(Files(tmp.Sub("out/model")), ElementsAre("config.json"));
}

// ---- block reads

class BlockTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    WriteOptions options;
    options.dtype = GetParam();
    // Small integers are exact in every dtype.
    ASSERT_TRUE(WriteSafetensors(tmp_.path(),
                                 {Tensor("m", {6, 5}, Iota(30)), Tensor("v", {7}, Iota(7, 100)),
                                  Tensor("s", {}, {42}), Tensor("t", {3, 2, 2}, Iota(12, 200))},
                                 options)
                    .ok());
    reader_ = OpenOrDie(tmp_.path());
    ASSERT_NE(reader_, nullptr);
    esize_ = checkpoint::DTypeSize(GetParam());
  }
  // Reads `b` of `name` and checks that exactly the block's bytes were read.
  std::vector<float> Read(const std::string& name, Block b, size_t elements) {
    std::vector<float> out(elements, -1.0f);
    const uint64_t before = reader_->bytes_read();
    Status s = reader_->ReadFloat32(name, b, out.data());
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(reader_->bytes_read() - before, elements * esize_);
    return out;
  }
  TempDir tmp_;
  std::unique_ptr<SafetensorsReader> reader_;
  uint64_t esize_ = 0;
};

TEST_P(BlockTest, RowsColumnsAndInnerBlocks) {
  // Rows 2..4 (a tensor-parallel rank's block of a row-sharded weight).
  EXPECT_THAT(Read("m", {2, 4, 0, -1}, 10), ElementsAre(10, 11, 12, 13, 14, 15, 16, 17, 18, 19));
  // Columns 1..3 of every row (a column-sharded weight).
  EXPECT_THAT(Read("m", {0, -1, 1, 3}, 12),
              ElementsAre(1, 2, 6, 7, 11, 12, 16, 17, 21, 22, 26, 27));
  EXPECT_THAT(Read("m", {4, 6, 3, 5}, 4), ElementsAre(23, 24, 28, 29));
  EXPECT_THAT(Read("m", {5, -1, 0, -1}, 5), ElementsAre(25, 26, 27, 28, 29));
  EXPECT_TRUE(Read("m", {3, 3, 0, -1}, 0).empty());
  EXPECT_TRUE(Read("m", {0, -1, 2, 2}, 0).empty());
  // Rank 1: rows are elements.
  EXPECT_THAT(Read("v", {2, 5, 0, -1}, 3), ElementsAre(102, 103, 104));
  // Rank 0: one row of one column.
  EXPECT_THAT(Read("s", {}, 1), ElementsAre(42));
  // Rank 3: a row is everything after dim 0 (2 x 2 = 4 columns).
  EXPECT_THAT(Read("t", {1, 2, 0, -1}, 4), ElementsAre(204, 205, 206, 207));
  EXPECT_THAT(Read("t", {0, -1, 3, 4}, 3), ElementsAre(203, 207, 211));
}

TEST_P(BlockTest, FlatRanges) {
  std::vector<float> out(7);
  uint64_t before = reader_->bytes_read();
  ASSERT_TRUE(reader_->ReadFlatFloat32("m", 13, 20, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(13, 14, 15, 16, 17, 18, 19));
  EXPECT_EQ(reader_->bytes_read() - before, 7 * esize_);
  before = reader_->bytes_read();
  ASSERT_TRUE(reader_->ReadFlatFloat32("t", 11, 11, out.data()).ok());
  EXPECT_EQ(reader_->bytes_read(), before);
}

TEST_P(BlockTest, OutOfRangeBlocksAreErrors) {
  std::vector<float> out(64);
  for (Block b : {Block{0, 7, 0, -1}, Block{-1, 2, 0, -1}, Block{3, 2, 0, -1}, Block{0, 1, 0, 6},
                  Block{0, 1, 4, 3}, Block{0, -2, 0, -1}, Block{0, 1, -3, -1}}) {
    Status s = reader_->ReadFloat32("m", b, out.data());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("\"m\""), HasSubstr("[6, 5]"), HasSubstr("block")));
  }
  EXPECT_EQ(reader_->ReadFloat32("v", {0, 1, 0, 2}, out.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(reader_->ReadFlatFloat32("m", 25, 31, out.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader_->ReadFlatFloat32("m", 5, 4, out.data()).code(), StatusCode::kInvalidArgument);
  Status missing = reader_->ReadFloat32("lm_head.weight", {}, out.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), AllOf(HasSubstr("lm_head.weight"), HasSubstr(tmp_.path())));
  EXPECT_EQ(reader_->bytes_read(), 0u);
}

TEST_P(BlockTest, ConcurrentReadsAreIndependent) {
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<float> out(5);
        const int row = (i + rep) % 6;
        if (!reader_->ReadFloat32("m", {row, row + 1, 0, -1}, out.data()).ok()) return;
        if (out != Iota(5, static_cast<float>(row * 5))) return;
      }
      ok[static_cast<size_t>(i)] = 1;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(ok, ::testing::Each(1));
  EXPECT_EQ(reader_->bytes_read(), 8u * 50 * 5 * esize_);
}

INSTANTIATE_TEST_SUITE_P(DTypes, BlockTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const auto& p) { return SafetensorsDTypeName(p.param); });

TEST(ReaderTest, ReadsF64AndRefusesIntegers) {
  TempDir tmp;
  const std::vector<double> d = {1.5, -2.25, 1e300};
  const std::vector<int32_t> i = {1, 2};
  const std::string data = std::string(reinterpret_cast<const char*>(d.data()), 24) +
                           std::string(reinterpret_cast<const char*>(i.data()), 8);
  WriteAll(tmp.Sub("x.safetensors"),
           RawFile(R"({"d":{"dtype":"F64","shape":[3],"data_offsets":[0,24]},)"
                   R"("i":{"dtype":"I32","shape":[2],"data_offsets":[24,32]}})",
                   data));
  auto r = OpenOrDie(tmp.Sub("x.safetensors"));
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->metadata().empty());
  std::vector<float> out(3);
  ASSERT_TRUE(r->ReadFloat32("d", {}, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(1.5f, -2.25f, std::numeric_limits<float>::infinity()));
  Status s = r->ReadFloat32("i", {}, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"i\""), HasSubstr("I32")));
  EXPECT_EQ(r->Find("i")->dtype, DType::kInt32);
}

TEST(ReaderTest, AFileThatShrinksAfterOpenIsAnErrorNamingIt) {
  TempDir tmp;
  ASSERT_TRUE(WriteSafetensors(tmp.path(), {Tensor("a", {4, 4}, Iota(16))}, WriteOptions{}).ok());
  auto r = OpenOrDie(tmp.path());
  ASSERT_NE(r, nullptr);
  const std::string file = tmp.Sub("model.safetensors");
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 20);
  std::vector<float> out(16);
  Status s = r->ReadFloat32("a", {}, out.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(file), HasSubstr("\"a\"")));
  // Rows before the cut still read.
  EXPECT_TRUE(r->ReadFloat32("a", {0, 2, 0, -1}, out.data()).ok());
}

TEST(ReaderTest, DirectoriesWithoutSafetensorsSayWhatToDo) {
  TempDir tmp;
  Status s = SafetensorsReader::Open(tmp.path()).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(tmp.path()), HasSubstr(kHint)));
  WriteAll(tmp.Sub("pytorch_model.bin"), "pickle");
  s = SafetensorsReader::Open(tmp.path()).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("pytorch_model.bin"), HasSubstr(kHint)));
  s = SafetensorsReader::Open(tmp.Sub("nothing-here")).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

// ---- malformed single files

struct Malformed {
  const char* what;
  std::string bytes;
  StatusCode code;
  std::vector<std::string> mentions;  // besides the file's path
};

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::vector<Malformed> MalformedFiles() {
  const std::string eight(8, 'x');
  std::string huge(8, '\0');
  const uint64_t big = kMaxHeaderBytes + 1;
  std::memcpy(huge.data(), &big, 8);
  std::string past(8, '\0');
  const uint64_t sixty = 60;
  std::memcpy(past.data(), &sixty, 8);
  const auto ok_a = Entry("a", "F32", "[2]", "[0,8]");
  return {
      {"shorter than the length", "abcd", StatusCode::kDataLoss, {"too short", kHint}},
      {"header over 100 MB", huge + "{}", StatusCode::kDataLoss, {"100000001", kHint}},
      {"header past the end", past + "{}", StatusCode::kDataLoss, {"truncated"}},
      {"not an object", RawFile("[1]", ""), StatusCode::kDataLoss, {"'{'", kHint}},
      {"leading space", RawFile(" {}", ""), StatusCode::kDataLoss, {"'{'"}},
      {"invalid JSON", RawFile("{\"a\":", ""), StatusCode::kDataLoss, {"not valid JSON", kHint}},
      {"entry not an object",
       RawFile("{\"a\":[1]}", ""),
       StatusCode::kDataLoss,
       {"\"a\"", "not a JSON object"}},
      {"no dtype",
       RawFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "no \"dtype\""}},
      {"no data_offsets",
       RawFile(R"({"a":{"dtype":"F32","shape":[2]}})", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "data_offsets"}},
      {"unknown dtype",
       RawFile("{" + Entry("a", "F33", "[2]", "[0,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "F33"}},
      {"unsupported dtype",
       RawFile("{" + Entry("a", "U32", "[2]", "[0,8]") + "}", eight),
       StatusCode::kInvalidArgument,
       {"\"a\"", "U32", "not supported"}},
      {"negative dimension",
       RawFile("{" + Entry("a", "F32", "[-2]", "[0,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "non-negative"}},
      {"fractional dimension",
       RawFile("{" + Entry("a", "F32", "[2.0]", "[0,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\""}},
      {"shape overflows",
       RawFile("{" + Entry("a", "F32", "[4294967296,4294967296]", "[0,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "too large"}},
      {"three offsets",
       RawFile("{" + Entry("a", "F32", "[2]", "[0,4,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "[begin, end]"}},
      {"begin after end",
       RawFile("{" + Entry("a", "F32", "[0]", "[8,0]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "begin > end"}},
      {"offsets past the file",
       RawFile("{" + Entry("a", "F32", "[4]", "[0,16]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "past the end", kHint}},
      {"size disagrees with shape",
       RawFile("{" + Entry("a", "F32", "[3]", "[0,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"a\"", "needs 12 bytes"}},
      {"overlap",
       RawFile("{" + ok_a + "," + Entry("b", "F32", "[2]", "[4,12]") + "}", eight + "yyyy"),
       StatusCode::kDataLoss,
       {"\"a\"", "\"b\"", "overlap"}},
      {"gap",
       RawFile("{" + Entry("b", "F32", "[1]", "[4,8]") + "}", eight),
       StatusCode::kDataLoss,
       {"\"b\"", "4 bytes", "contiguous"}},
      {"trailing bytes",
       RawFile("{" + ok_a + "}", eight + "zz"),
       StatusCode::kDataLoss,
       {"2 bytes after the last tensor"}},
      {"metadata not strings",
       RawFile("{\"__metadata__\":{\"format\":1}," + ok_a + "}", eight),
       StatusCode::kDataLoss,
       {"__metadata__", "format"}},
      {"metadata not an object",
       RawFile("{\"__metadata__\":[]," + ok_a + "}", eight),
       StatusCode::kDataLoss,
       {"__metadata__"}},
      {"a name twice",
       RawFile(
           "{" + Entry("a", "F32", "[1]", "[0,4]") + "," + Entry("a", "F32", "[1]", "[4,8]") + "}",
           eight),
       StatusCode::kDataLoss,
       {"\"a\"", "twice"}},
      {"deep nesting",
       RawFile("{\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}", ""),
       StatusCode::kDataLoss,
       {"nests"}},
  };
}

TEST(MalformedTest, EveryProblemIsAnErrorNamingTheFile) {
  TempDir tmp;
  const std::string path = tmp.Sub("bad.safetensors");
  for (const Malformed& m : MalformedFiles()) {
    SCOPED_TRACE(m.what);
    WriteAll(path, m.bytes);
    Status s = SafetensorsReader::Open(path).status();
    EXPECT_EQ(s.code(), m.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(path));
    for (const std::string& word : m.mentions) EXPECT_THAT(s.message(), HasSubstr(word));
  }
}

TEST(MalformedTest, EmptyAndZeroSizedTensorsAreValid) {
  TempDir tmp;
  const std::string path = tmp.Sub("ok.safetensors");
  WriteAll(path, RawFile("{}", ""));
  auto r = OpenOrDie(path);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->Names().empty());
  WriteAll(path, RawFile("{\"__metadata__\":null}", ""));  // as the Python library reads it
  r = OpenOrDie(path);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->metadata().empty());
  // Two empty tensors at the same offset, then a real one.
  WriteAll(path, RawFile("{" + Entry("e1", "F32", "[0]", "[0,0]") + "," +
                             Entry("e2", "BF16", "[3,0]", "[0,0]") + "," +
                             Entry("x", "F32", "[1]", "[0,4]") + "}    ",
                         Floats({7})));
  r = OpenOrDie(path);
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->Names(), ElementsAre("e1", "e2", "x"));
  EXPECT_THAT(ReadAllFloats(*r, "x"), ElementsAre(7));
}

// ---- sharded models

class ShardedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteAll(tmp_.Sub("s1.safetensors"), RawFile("{" + Entry("a", "F32", "[1]", "[0,4]") + "," +
                                                     Entry("b", "F32", "[1]", "[4,8]") + "}",
                                                 Floats({1, 2})));
    WriteAll(tmp_.Sub("s2.safetensors"),
             RawFile("{" + Entry("c", "F32", "[1]", "[0,4]") + "}", Floats({3})));
  }
  void Index(const json& weight_map) {
    WriteAll(tmp_.Sub("model.safetensors.index.json"),
             json({{"metadata", {{"total_size", 12}}}, {"weight_map", weight_map}}).dump());
  }
  Status Open() { return SafetensorsReader::Open(tmp_.path()).status(); }
  TempDir tmp_;
};

TEST_F(ShardedTest, AConsistentIndexOpens) {
  Index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  auto r = OpenOrDie(tmp_.path());
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(ReadAllFloats(*r, "c"), ElementsAre(3));
  EXPECT_THAT(ReadAllFloats(*r, "b"), ElementsAre(2));
}

TEST_F(ShardedTest, ASingleFileBesideAnIndexWinsAsInTransformers) {
  Index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  std::filesystem::copy_file(tmp_.Sub("s2.safetensors"), tmp_.Sub("model.safetensors"));
  auto r = OpenOrDie(tmp_.path());
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->Names(), ElementsAre("c"));
}

TEST_F(ShardedTest, AMissingShardIsNotFound) {
  Index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s3.safetensors"}});
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("s3.safetensors"), HasSubstr("\"c\""),
                                 HasSubstr("re-download"), HasSubstr(kHint)));
}

TEST_F(ShardedTest, ATensorInTwoShardsIsAnError) {
  WriteAll(tmp_.Sub("s2.safetensors"), RawFile("{" + Entry("a", "F32", "[1]", "[0,4]") + "," +
                                                   Entry("c", "F32", "[1]", "[4,8]") + "}",
                                               Floats({1, 3})));
  Index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("\"a\""), HasSubstr("s1.safetensors"), HasSubstr("s2.safetensors")));
}

TEST_F(ShardedTest, TheIndexDisagreeingWithAShardIsAnError) {
  // The index lists a tensor the shard does not hold.
  Index({{"a", "s1.safetensors"},
         {"b", "s1.safetensors"},
         {"c", "s2.safetensors"},
         {"d", "s2.safetensors"}});
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"d\""), HasSubstr("s2.safetensors"),
                                 HasSubstr("does not hold it"), HasSubstr(kHint)));
  // A shard holds a tensor the index does not list.
  Index({{"a", "s1.safetensors"}, {"c", "s2.safetensors"}});
  s = Open();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"b\""), HasSubstr("does not list it")));
  // The index puts a tensor in another shard.
  Index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}});
  s = Open();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("\"b\""));
}

TEST_F(ShardedTest, AMalformedIndexIsAnError) {
  WriteAll(tmp_.Sub("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_EQ(Open().code(), StatusCode::kDataLoss);
  WriteAll(tmp_.Sub("model.safetensors.index.json"), "{\"metadata\": {}}");
  EXPECT_THAT(Open().message(), HasSubstr("weight_map"));
  Index({{"a", 7}});
  EXPECT_EQ(Open().code(), StatusCode::kDataLoss);
  Index({{"a", "../s1.safetensors"}});
  EXPECT_THAT(Open().message(), HasSubstr("not a file name inside the model directory"));
  Index(json::object());
  EXPECT_THAT(Open().message(), HasSubstr("empty weight_map"));
}

TEST_F(ShardedTest, AMalformedShardIsNamed) {
  WriteAll(tmp_.Sub("s2.safetensors"), RawFile("{\"c\":3}", ""));
  Index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(tmp_.Sub("s2.safetensors")), HasSubstr("\"c\"")));
}

}  // namespace
}  // namespace orrery::hf
