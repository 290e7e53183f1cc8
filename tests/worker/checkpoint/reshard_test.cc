// Offline reshard: the new checkpoint holds the same tensors, laid out for the new
// layout (one shard per new rank), and loads bit-identically; inspect reports it.
#include "worker/checkpoint/reshard.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/model_fixture.h"
#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {
namespace {

using testing::ModelState;
using testing::RandomModel;
using testing::ReferenceSlice;
using testing::TempDir;

Status Save(const std::string& dir, const ModelState& m, const Layout& l) {
  ORRERY_RETURN_IF_ERROR(
      WriteAllShards(dir, l, BalancedStages(m.num_layers), m.specs, m.Pointers(), 64));
  CheckpointInfo info;
  info.step = 42;
  info.layout = l;
  info.num_layers = m.num_layers;
  info.dataset = {1, 500, 0, 123};
  return CommitCheckpoint(dir, info, {{BlobKey(0, "rng"), "abc"}});
}

TEST(ReshardTest, ResultLoadsBitIdenticalInTheNewLayout) {
  TempDir tmp;
  const ModelState m = RandomModel(5, 8);
  ASSERT_TRUE(Save(tmp.Sub("a"), m, {1, 4, 2, 1}).ok());
  const Layout to{2, 2, 1, 2};
  LoadStats stats;
  Status s = Reshard(tmp.Sub("a"), to, tmp.Sub("b"), {}, &stats);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GT(stats.bytes_needed, 0u);
  auto reader = CheckpointReader::Open(tmp.Sub("b"));
  ASSERT_TRUE(reader.ok());
  const Metadata& md = reader->metadata();
  EXPECT_EQ(md.info.layout, to);
  EXPECT_EQ(md.info.step, 42);
  EXPECT_EQ(md.info.dataset.consumed, 123);
  EXPECT_EQ(md.blobs.at(BlobKey(0, "rng")), "abc");
  EXPECT_EQ(md.info.extra.at("resharded_from"), "dp=1,tp=4,pp=2,fsdp=1");
  EXPECT_EQ(md.files.size(), 4u);
  ASSERT_TRUE(reader->VerifyAll().ok());
  // Each chunk of the new checkpoint is exactly the piece its rank holds.
  for (const auto& [name, t] : md.tensors) {
    for (const ChunkMeta& c : t.chunks) {
      auto p = LocalPieceOf(t.spec, to, md.files[static_cast<size_t>(c.file)].rank,
                            BalancedStages(m.num_layers));
      ASSERT_TRUE(p.ok());
      EXPECT_TRUE(p->writer);
      EXPECT_EQ(p->region, c.region);
    }
  }
  // Whole tensors read back equal the originals.
  for (size_t i = 0; i < m.specs.size(); ++i) {
    std::vector<char> got(m.data[i].size());
    Region full = FullRegion(m.specs[i].shape);
    ASSERT_TRUE(reader->Load({{m.specs[i].name, full, got.data(), got.size()}}, {}).ok());
    EXPECT_EQ(got, m.data[i]) << m.specs[i].name;
  }
  EXPECT_EQ(Reshard(tmp.Sub("a"), to, tmp.Sub("b"), {}).code(), StatusCode::kAlreadyExists);
}

TEST(ReshardTest, InspectSummarisesAndReportsDamage) {
  TempDir tmp;
  const ModelState m = RandomModel(6, 3);
  ASSERT_TRUE(Save(tmp.Sub("a"), m, {2, 1, 1, 2}).ok());
  std::ostringstream out;
  InspectOptions opt;
  opt.list_chunks = true;
  ASSERT_TRUE(Inspect(tmp.Sub("a"), opt, out).ok());
  const std::string text = out.str();
  EXPECT_NE(text.find("layout dp=2,tp=1,pp=1,fsdp=2"), std::string::npos) << text;
  EXPECT_NE(text.find("step 42"), std::string::npos);
  EXPECT_NE(text.find(m.specs[0].name), std::string::npos);
  EXPECT_NE(text.find("checksums: ok"), std::string::npos);
  {
    std::fstream f(tmp.Sub("a") + "/" + ShardFileName(0),
                   std::ios::in | std::ios::out | std::ios::binary);
    const int c = f.get();
    f.seekp(0);
    f.put(static_cast<char>(c ^ 1));
  }
  std::ostringstream bad;
  Status s = Inspect(tmp.Sub("a"), opt, bad);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.str().find("checksums: FAILED"), std::string::npos);
  EXPECT_NE(bad.str().find("shard-00000.bin"), std::string::npos);
}

TEST(HumanBytesTest, Units) {
  EXPECT_EQ(HumanBytes(12), "12 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(3ull << 30), "3.0 GiB");
}

}  // namespace
}  // namespace orrery::checkpoint
