// Save under one layout, load under another: property tests over every layout of
// up to 8 ranks, plus the errors of damaged checkpoints.
#include "worker/checkpoint/reader.h"

#include <fstream>

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/model_fixture.h"
#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {
namespace {

using testing::AllLayouts;
using testing::ModelState;
using testing::RandomModel;
using testing::ReferenceSlice;
using testing::TempDir;

Status Save(const std::string& dir, const ModelState& m, const Layout& l, uint64_t block_size) {
  ORRERY_RETURN_IF_ERROR(
      WriteAllShards(dir, l, BalancedStages(m.num_layers), m.specs, m.Pointers(), block_size));
  CheckpointInfo info;
  info.step = 7;
  info.layout = l;
  info.num_layers = m.num_layers;
  return CommitCheckpoint(dir, info);
}

// Loads every rank of `to` and checks each local buffer against the reference
// slice of the original, the padding is zero, and every element is held somewhere.
// With `partial`, exact loads hand back the pieces of blocks each rank read in
// part (all ranks' together in *partial).
void CheckLoad(const CheckpointReader& reader, const ModelState& m, const Layout& to,
               const LoadOptions& opt, std::vector<BlockPiece>* partial = nullptr) {
  auto stages = BalancedStages(m.num_layers);
  std::vector<std::vector<bool>> seen(m.specs.size());
  for (size_t i = 0; i < m.specs.size(); ++i)
    seen[i].assign(static_cast<size_t>(Numel(m.specs[i].shape)), false);
  for (int r = 0; r < to.World(); ++r) {
    std::vector<std::vector<char>> bufs(m.specs.size());
    std::vector<RankBuffer> rb;
    std::vector<LocalPiece> pieces;
    for (size_t i = 0; i < m.specs.size(); ++i) {
      auto p = LocalPieceOf(m.specs[i], to, r, stages);
      ASSERT_TRUE(p.ok());
      pieces.push_back(*p);
      if (!p->present) continue;
      bufs[i].assign(static_cast<size_t>(p->buffer_elements) * DTypeSize(m.specs[i].dtype), '\x5A');
      rb.push_back({m.specs[i], bufs[i].data(), bufs[i].size()});
    }
    LoadStats stats;
    Status s = LoadRank(reader, rb, to, r, stages, opt, &stats, partial);
    ASSERT_TRUE(s.ok()) << s << " loading rank " << r << " of " << to.ToString();
    if (!opt.verify || (opt.exact && partial != nullptr)) {
      EXPECT_EQ(stats.bytes_read, stats.bytes_needed);
    }
    for (size_t i = 0; i < m.specs.size(); ++i) {
      if (!pieces[i].present) continue;
      std::vector<char> want;
      ReferenceSlice(m.data[i], m.specs[i], pieces[i].region, want);
      std::vector<char> got(bufs[i].begin(), bufs[i].begin() + static_cast<long>(want.size()));
      ASSERT_EQ(got, want) << m.specs[i].name << " rank " << r << " of " << to.ToString();
      for (size_t b = want.size(); b < bufs[i].size(); ++b)
        ASSERT_EQ(bufs[i][b], 0) << "padding not zeroed";
      // Mark coverage by the reference index arithmetic.
      const Region& reg = pieces[i].region;
      for (int64_t k = 0; k < reg.Numel(); ++k) {
        int64_t pos = reg.flat_begin + k, g = 0, stride = 1;
        for (size_t d = m.specs[i].shape.size(); d-- > 0;) {
          g += (reg.offsets[d] + pos % reg.sizes[d]) * stride;
          pos /= reg.sizes[d];
          stride *= m.specs[i].shape[d];
        }
        seen[i][static_cast<size_t>(g)] = true;
      }
    }
  }
  for (size_t i = 0; i < m.specs.size(); ++i) {
    for (bool b : seen[i])
      ASSERT_TRUE(b) << m.specs[i].name << " not fully held under " << to.ToString();
  }
}

TEST(ReaderTest, EveryLayoutToEveryLayoutIsBitIdentical) {
  const auto layouts = AllLayouts(8);
  ASSERT_GT(layouts.size(), 50u);
  TempDir tmp;
  uint64_t seed = 1;
  for (const Layout& from : layouts) {
    const ModelState m = RandomModel(seed++);
    const std::string dir = tmp.Sub("from-" + from.ToString());
    // Tiny blocks and reads so verification and op splitting are exercised.
    ASSERT_TRUE(Save(dir, m, from, 1 + seed % 40).ok());
    auto reader = CheckpointReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    ASSERT_TRUE(reader->VerifyAll().ok());
    for (const Layout& to : layouts) {
      LoadOptions opt;
      opt.threads = 1;
      opt.verify = (seed + static_cast<uint64_t>(to.World())) % 2 == 0;
      opt.max_read = 1 + (seed * 7 + static_cast<uint64_t>(to.dp)) % 97;
      CheckLoad(*reader, m, to, opt);
      if (HasFatalFailure()) return;
    }
  }
}

// Exact loads (LoadOptions::exact): every rank reads exactly its bytes, and the
// pieces of blocks the ranks read in part, taken together, tile every block
// and pass its checksum; a flipped byte fails on some rank or in the pieces.
TEST(ReaderTest, ExactLoadsReadOnlyTheirBytesAndTheRanksTogetherCheckEveryBlock) {
  const auto layouts = AllLayouts(8);
  TempDir tmp;
  uint64_t seed = 100;
  for (size_t li = 0; li < layouts.size(); li += 3) {
    const Layout& from = layouts[li];
    const ModelState m = RandomModel(seed++);
    const std::string dir = tmp.Sub("exact-" + from.ToString());
    ASSERT_TRUE(Save(dir, m, from, 1 + seed % 40).ok());
    auto reader = CheckpointReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (size_t lj = li % 5; lj < layouts.size(); lj += 5) {
      LoadOptions opt;
      opt.threads = 2;
      opt.exact = true;
      opt.max_read = 1 + (seed * 11) % 97;
      std::vector<BlockPiece> partial;
      CheckLoad(*reader, m, layouts[lj], opt, &partial);
      if (HasFatalFailure()) return;
      auto untiled = CheckBlockPieces(partial, *reader);
      ASSERT_TRUE(untiled.ok()) << untiled.status();
      EXPECT_TRUE(untiled->empty()) << untiled->size() << " pieces of blocks nobody tiled, "
                                    << from.ToString() << " -> " << layouts[lj].ToString();
      // The same pieces with one term damaged fail, naming the file.
      if (!partial.empty()) {
        partial[partial.size() / 2].term ^= 1u << 7;
        auto bad = CheckBlockPieces(partial, *reader);
        ASSERT_FALSE(bad.ok());
        EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
        EXPECT_NE(bad.status().message().find("shard-"), std::string::npos) << bad.status();
      }
    }
  }
}

TEST(ReaderTest, ParallelReadsOfALargerStateAreExact) {
  TempDir tmp;
  ModelState m;
  m.num_layers = 4;
  for (int i = 0; i < 8; ++i) {
    TensorSpec s{
        "model/l" + std::to_string(i), {64 + i, 96}, DType::kFloat32, i / 2, i % 3 - 1, i % 2 == 0};
    std::vector<char> d(static_cast<size_t>(Numel(s.shape)) * 4);
    for (size_t k = 0; k < d.size(); ++k)
      d[k] = static_cast<char>(k * 131 + static_cast<size_t>(i));
    m.specs.push_back(s);
    m.data.push_back(std::move(d));
  }
  ASSERT_TRUE(Save(tmp.Sub("c"), m, {1, 4, 2, 1}, 4096).ok());
  auto reader = CheckpointReader::Open(tmp.Sub("c"));
  ASSERT_TRUE(reader.ok());
  LoadOptions opt;
  opt.threads = 4;
  opt.max_read = 8192;
  CheckLoad(*reader, m, {2, 2, 1, 2}, opt);
  CheckLoad(*reader, m, {8, 1, 1, 4}, opt);
}

class DamagedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = RandomModel(99, 4);
    for (auto& s : m_.specs) {  // big enough that every rank writes something
      s.shape = {16, 8};
      s.dtype = DType::kFloat32;
      s.tp_dim = 0;
      s.layer = 0;
    }
    for (auto& d : m_.data) d.assign(16 * 8 * 4, 'x');
    m_.num_layers = 1;
    dir_ = tmp_.Sub("c");
    ASSERT_TRUE(Save(dir_, m_, {1, 2, 1, 1}, 64).ok());
  }
  Status LoadAll() {
    ORRERY_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(dir_));
    std::vector<std::vector<char>> bufs;
    std::vector<RankBuffer> rb;
    for (const auto& s : m_.specs) {
      bufs.emplace_back(static_cast<size_t>(Numel(s.shape)) * 4);
      rb.push_back({s, bufs.back().data(), bufs.back().size()});
    }
    return LoadRank(reader, rb, {1, 1, 1, 1}, 0, BalancedStages(1), LoadOptions{});
  }
  TempDir tmp_;
  ModelState m_;
  std::string dir_;
};

TEST_F(DamagedCheckpointTest, IntactLoads) { EXPECT_TRUE(LoadAll().ok()); }

TEST_F(DamagedCheckpointTest, MissingShardNamesTheFile) {
  std::remove((dir_ + "/" + ShardFileName(1)).c_str());
  Status s = LoadAll();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("shard-00001.bin"), std::string::npos) << s;
}

TEST_F(DamagedCheckpointTest, TruncatedShardNamesTheFile) {
  ASSERT_EQ(::truncate((dir_ + "/" + ShardFileName(0)).c_str(), 100), 0);
  Status s = LoadAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("shard-00000.bin"), std::string::npos) << s;
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
}

TEST_F(DamagedCheckpointTest, FlippedByteFailsChecksumNamingTheFile) {
  {
    std::fstream f(dir_ + "/" + ShardFileName(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('y');
  }
  Status s = LoadAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("shard-00001.bin"), std::string::npos) << s;
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  auto reader = CheckpointReader::Open(dir_);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->VerifyAll().code(), StatusCode::kDataLoss);
}

TEST_F(DamagedCheckpointTest, NewerFormatIsRefusedClearly) {
  auto text = ReadWholeFile(dir_ + "/metadata.json");
  ASSERT_TRUE(text.ok());
  std::string t = *text;
  const std::string key = "\"format_version\": 1";
  const auto at = t.find(key);
  ASSERT_NE(at, std::string::npos);
  t.replace(at, key.size(), "\"format_version\": 99");
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/metadata.json", t).ok());
  auto reader = CheckpointReader::Open(dir_);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(reader.status().message().find("version 99"), std::string::npos) << reader.status();
  EXPECT_NE(reader.status().message().find("metadata.json"), std::string::npos);
}

TEST_F(DamagedCheckpointTest, UncommittedIsNotFound) {
  std::remove((dir_ + "/metadata.json").c_str());
  EXPECT_EQ(CheckpointReader::Open(dir_).status().code(), StatusCode::kNotFound);
}

TEST_F(DamagedCheckpointTest, WrongSpecIsRefused) {
  auto reader = CheckpointReader::Open(dir_);
  ASSERT_TRUE(reader.ok());
  TensorSpec s = m_.specs[0];
  s.shape = {16, 9};
  std::vector<char> buf(16 * 9 * 4);
  Status st =
      LoadRank(*reader, {{s, buf.data(), buf.size()}}, {1, 1, 1, 1}, 0, BalancedStages(1), {});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  s.name = "model/nope";
  EXPECT_EQ(LoadRank(*reader, {{s, buf.data(), buf.size()}}, {1, 1, 1, 1}, 0, BalancedStages(1), {})
                .code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace orrery::checkpoint
