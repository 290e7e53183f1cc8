// The safetensors reader and writer against the real Python libraries (safetensors
// 0.8.0, transformers 5.24.0, torch 2.15, pinned by scripts/reference-venv):
//   - files written by safetensors.torch.save_file and by save_pretrained (a tiny
//     seeded GPT-2, sharded in bf16 and fp16, single-file fp32) read bit for bit,
//     whole and by blocks;
//   - files the C++ writer wrote (F32, BF16, F16, sharded) load with
//     safetensors.torch.load_file to exactly torch's own conversion of the same
//     float32 values, and a GPT-2 re-exported through the writer loads with
//     AutoModelForCausalLM.from_pretrained to the reference model's weights.
// The Python side is safetensors_reference.py. Without the venv the tests fail
// and say to run scripts/reference-venv; they never pass silently.
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/hf/safetensors.h"

namespace orrery::hf {
namespace {

using checkpoint::DType;
using checkpoint::testing::TempDir;
using json = nlohmann::json;

const std::string kScript =
    std::string(ORRERY_SOURCE_DIR) + "/tests/worker/hf/safetensors_reference.py";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command; returns its combined output, or an error with it.
StatusOr<std::string> RunCommand(const std::string& command, const std::string& log) {
  const int rc = std::system((command + " >" + Quote(log) + " 2>&1").c_str());
  std::string output = ReadAll(log);
  if (rc != 0) {
    return InternalError("`" + command + "` failed (status " + std::to_string(rc) + "):\n" +
                         output);
  }
  return output;
}

// The reference interpreter, checked to import what the script needs.
StatusOr<std::string> ReferencePython(const std::string& scratch) {
  const std::string hint =
      "the Python reference is missing: run scripts/reference-venv (it creates the venv with "
      "the pinned torch, safetensors and transformers), then rerun this test";
  auto printed =
      RunCommand(Quote(std::string(ORRERY_SOURCE_DIR) + "/scripts/reference-venv") + " --python",
                 scratch + "/venv.log");
  if (!printed.ok()) return FailedPreconditionError(hint + "\n" + printed.status().message());
  std::string python = *printed;
  while (!python.empty() && (python.back() == '\n' || python.back() == ' ')) python.pop_back();
  if (python.empty() || ::access(python.c_str(), X_OK) != 0) {
    return FailedPreconditionError(hint + " (no interpreter at " + python + ")");
  }
  auto imported = RunCommand(Quote(python) + " -c 'import torch, safetensors, transformers, numpy'",
                             scratch + "/import.log");
  if (!imported.ok()) return FailedPreconditionError(hint + "\n" + imported.status().message());
  return python;
}

std::vector<float> LoadFloats(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

void SaveFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// Index of the first element whose bits differ, or -1.
int64_t FirstDifference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

// One `write` run of the script shared by the tests (torch takes seconds to import).
class ReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = std::make_unique<TempDir>();
    auto python = ReferencePython(tmp_->path());
    if (!python.ok()) {
      setup_ = python.status();
      return;
    }
    python_ = *python;
    const std::string out = tmp_->Sub("py");
    auto ran = RunCommand(Quote(python_) + " " + Quote(kScript) + " write " + Quote(out),
                          tmp_->Sub("write.log"));
    if (!ran.ok()) {
      setup_ = ran.status();
      return;
    }
    manifest_ = json::parse(ReadAll(out + "/manifest.json"));
  }
  static void TearDownTestSuite() { tmp_.reset(); }
  void SetUp() override { ASSERT_TRUE(setup_.ok()) << setup_.message(); }

  // Reads every tensor of a manifest entry whole and compares it bit for bit.
  static void ExpectMatchesPython(const SafetensorsReader& r, const json& entry) {
    std::set<std::string> want;
    for (const auto& [name, t] : entry["tensors"].items()) want.insert(name);
    const std::vector<std::string> names = r.Names();
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want);
    for (const auto& [name, t] : entry["tensors"].items()) {
      SCOPED_TRACE(name);
      const TensorInfo* info = r.Find(name);
      ASSERT_NE(info, nullptr);
      EXPECT_STREQ(SafetensorsDTypeName(info->dtype), t["dtype"].get<std::string>().c_str());
      EXPECT_EQ(info->shape, t["shape"].get<std::vector<int64_t>>());
      if (!t.contains("expected")) continue;
      const std::vector<float> expected = LoadFloats(t["expected"]);
      std::vector<float> got(static_cast<size_t>(info->numel()));
      ASSERT_TRUE(r.ReadFloat32(name, Block{}, got.data()).ok());
      const int64_t diff = FirstDifference(got, expected);
      EXPECT_EQ(diff, -1) << "element " << diff << ": " << got[static_cast<size_t>(diff)]
                          << " != " << expected[static_cast<size_t>(diff)];
    }
  }

  static inline Status setup_;
  static inline std::unique_ptr<TempDir> tmp_;
  static inline std::string python_;
  static inline json manifest_;
};

TEST_F(ReferenceTest, ReadsSaveFileBitForBit) {
  const json& single = manifest_["single"];
  auto r = SafetensorsReader::Open(single["path"]);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectMatchesPython(**r, single);
  const auto metadata = single["metadata"].get<std::map<std::string, std::string>>();
  EXPECT_EQ((*r)->metadata(), metadata);
  std::vector<float> out(8);
  EXPECT_EQ((*r)->ReadFloat32("i64.ids", {}, out.data()).code(), StatusCode::kInvalidArgument);
}

TEST_F(ReferenceTest, ReadsBlocksOfSaveFileTensors) {
  const json& single = manifest_["single"];
  auto opened = SafetensorsReader::Open(single["path"]);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const SafetensorsReader& r = **opened;
  for (const char* name : {"bf16.matrix", "fp16.matrix", "fp32.matrix", "fp32.cube"}) {
    SCOPED_TRACE(name);
    const TensorInfo* info = r.Find(name);
    ASSERT_NE(info, nullptr);
    const std::vector<float> all = LoadFloats(single["tensors"][name]["expected"]);
    const int64_t rows = info->shape[0], cols = info->numel() / rows;
    const uint64_t esize = checkpoint::DTypeSize(info->dtype);
    // Every split a tensor-parallel rank of 2 or 3 could own, by rows and by columns,
    // and an fsdp rank's flat range.
    for (int parts : {2, 3}) {
      for (int p = 0; p < parts; ++p) {
        const int64_t r0 = rows * p / parts, r1 = rows * (p + 1) / parts;
        const int64_t c0 = cols * p / parts, c1 = cols * (p + 1) / parts;
        std::vector<float> got(static_cast<size_t>((r1 - r0) * cols));
        uint64_t before = r.bytes_read();
        ASSERT_TRUE(r.ReadFloat32(name, {r0, r1, 0, -1}, got.data()).ok());
        EXPECT_EQ(r.bytes_read() - before, got.size() * esize);
        EXPECT_EQ(FirstDifference(
                      got, std::vector<float>(all.begin() + r0 * cols, all.begin() + r1 * cols)),
                  -1);
        got.assign(static_cast<size_t>(rows * (c1 - c0)), 0.0f);
        before = r.bytes_read();
        ASSERT_TRUE(r.ReadFloat32(name, {0, -1, c0, c1}, got.data()).ok());
        EXPECT_EQ(r.bytes_read() - before, got.size() * esize);
        std::vector<float> want;
        for (int64_t i = 0; i < rows; ++i) {
          want.insert(want.end(), all.begin() + i * cols + c0, all.begin() + i * cols + c1);
        }
        EXPECT_EQ(FirstDifference(got, want), -1);
        const int64_t n = info->numel(), f0 = n * p / parts, f1 = n * (p + 1) / parts;
        got.assign(static_cast<size_t>(f1 - f0), 0.0f);
        ASSERT_TRUE(r.ReadFlatFloat32(name, f0, f1, got.data()).ok());
        EXPECT_EQ(FirstDifference(got, std::vector<float>(all.begin() + f0, all.begin() + f1)), -1);
      }
    }
  }
}

TEST_F(ReferenceTest, ReadsSavePretrainedModels) {
  for (const char* tag : {"gpt2-bf16", "gpt2-fp16", "gpt2-fp32"}) {
    SCOPED_TRACE(tag);
    const json& entry = manifest_[tag];
    auto r = SafetensorsReader::Open(entry["path"]);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectMatchesPython(**r, entry);
    std::set<std::string> files;
    for (const std::string& name : (*r)->Names()) files.insert((*r)->Find(name)->file);
    if (entry["sharded"].get<bool>()) {
      EXPECT_GE(files.size(), 2u);
    } else {
      EXPECT_EQ(files.size(), 1u);
    }
    EXPECT_EQ((*r)->metadata().at("format"), "pt");
  }
}

TEST_F(ReferenceTest, PythonLoadsWhatTheWriterWrote) {
  const std::string out = tmp_->Sub("cc");
  ASSERT_TRUE(checkpoint::MakeDirs(out + "/sources").ok());
  // Seeded values with every awkward case for the narrowing conversions.
  std::mt19937 rng(20240521);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> any_bits;
  auto values = [&](size_t n, int kind) {
    std::vector<float> v(n);
    for (float& x : v) {
      if (kind == 0) x = normal(rng);
      if (kind == 1) x = normal(rng) * 3e4f;                   // near F16's range
      if (kind == 2) x = std::bit_cast<float>(any_bits(rng));  // any float at all
    }
    const std::vector<float> special = {std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        std::nanf(""),
                                        -0.0f,
                                        std::bit_cast<float>(0x3F808000u),
                                        std::bit_cast<float>(0x3F818000u),
                                        std::bit_cast<float>(0x3F801000u),
                                        std::bit_cast<float>(0x3F803000u),
                                        65520.0f,
                                        65519.99f,
                                        std::ldexp(1.0f, -25),
                                        std::ldexp(3.0f, -25),
                                        1e-40f,
                                        std::bit_cast<float>(0x7F7FFFFFu)};
    for (size_t i = 0; i < special.size() && i < n; ++i) v[i] = special[i];
    return v;
  };
  struct Source {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  const std::vector<Source> sources = {
      {"model.embed.weight", {64, 48}, values(64 * 48, 0)},
      {"model.layers.0.mlp.weight", {48, 96}, values(48 * 96, 1)},
      {"model.layers.0.mlp.bias", {96}, values(96, 2)},
      {"model.layers.1.conv", {4, 3, 5}, values(60, 2)},
      {"model.scale", {}, {0.125f}},
      {"model.empty", {0, 4}, {}},
  };
  json sources_json = json::object();
  std::vector<TensorToWrite> tensors;
  for (const Source& s : sources) {
    const std::string path = out + "/sources/" + s.name + ".f32";
    SaveFloats(path, s.values);
    sources_json[s.name] = {{"shape", s.shape}, {"source", path}};
    tensors.push_back({s.name, s.shape, [&s](float* dst) {
                         std::copy(s.values.begin(), s.values.end(), dst);
                         return OkStatus();
                       }});
  }
  json manifest = {{"exports", json::array()}, {"models", json::array()}};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (bool sharded : {false, true}) {
      WriteOptions options;
      options.dtype = dtype;
      if (sharded) options.max_shard_bytes = 8192;
      const std::string dir = out + "/" + SafetensorsDTypeName(dtype) + (sharded ? "-sharded" : "");
      Status s = WriteSafetensors(dir, tensors, options);
      ASSERT_TRUE(s.ok()) << s;
      manifest["exports"].push_back({{"dir", dir},
                                     {"dtype", SafetensorsDTypeName(dtype)},
                                     {"sharded", sharded},
                                     {"tensors", sources_json}});
    }
  }

  // A pre-trained model in, the same model out: read the Python GPT-2 and stream
  // it through the writer (bf16, sharded) next to its config.json.
  const json& gpt2 = manifest_["gpt2-bf16"];
  const std::string ref_dir = gpt2["path"];
  auto reader = SafetensorsReader::Open(ref_dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<TensorToWrite> weights;
  for (const std::string& name : (*reader)->Names()) {
    const SafetensorsReader* r = reader->get();
    weights.push_back({name, r->Find(name)->shape,
                       [r, name](float* dst) { return r->ReadFloat32(name, Block{}, dst); }});
  }
  const std::string model_dir = out + "/gpt2";
  WriteOptions options;
  options.dtype = DType::kBFloat16;
  options.max_shard_bytes = 16 << 10;
  ASSERT_TRUE(WriteSafetensors(model_dir, weights, options).ok());
  ASSERT_TRUE(
      WriteFileAtomically(model_dir + "/config.json", ReadAll(ref_dir + "/config.json")).ok());
  manifest["models"].push_back({{"dir", model_dir}, {"reference", ref_dir}});

  ASSERT_TRUE(WriteFileAtomically(out + "/manifest.json", manifest.dump(1)).ok());
  auto checked = RunCommand(Quote(python_) + " " + Quote(kScript) + " check " + Quote(out),
                            tmp_->Sub("check.log"));
  ASSERT_TRUE(checked.ok()) << checked.status().message();
  std::cout << *checked;
}

}  // namespace
}  // namespace orrery::hf
