// The storage seam under the checkpoint code: a whole save, commit, retention
// and exact re-shard load through a Storage that keeps its files in memory
// (what an object store would be), touching no file on disk; and the POSIX
// directory store's edge cases.
#include "worker/checkpoint/storage.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/model_fixture.h"
#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/checkpoint/io.h"
#include "worker/checkpoint/store.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {
namespace {

// Files as strings under their full path; a "directory" exists while a file
// lies under it. WriteAtomic replaces whole; nothing needs syncing.
class InMemoryStorage final : public Storage {
 public:
  struct Files {
    std::mutex mu;
    std::map<std::string, std::string> by_path;
  };

  class Reader final : public ReadableFile {
   public:
    Reader(std::string path, std::string bytes)
        : path_(std::move(path)), bytes_(std::move(bytes)) {}
    const std::string& path() const override { return path_; }
    Status ReadAt(uint64_t offset, void* dst, uint64_t size) const override {
      if (offset + size > bytes_.size()) return DataLossError(path_ + " is short");
      std::memcpy(dst, bytes_.data() + offset, size);
      return OkStatus();
    }

   private:
    std::string path_, bytes_;
  };

  class Writer final : public WritableFile {
   public:
    Writer(std::string path, Files* files) : path_(std::move(path)), files_(files) {}
    const std::string& path() const override { return path_; }
    Status Append(const void* data, uint64_t size) override {
      std::lock_guard<std::mutex> lock(files_->mu);
      files_->by_path[path_].append(static_cast<const char*>(data), size);
      return OkStatus();
    }
    Status Sync() override { return OkStatus(); }
    Status Close() override { return OkStatus(); }

   private:
    std::string path_;
    Files* files_;
  };

  StatusOr<std::unique_ptr<ReadableFile>> OpenRead(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    auto it = files_->by_path.find(path);
    if (it == files_->by_path.end()) return NotFoundError(path + " is missing");
    return std::unique_ptr<ReadableFile>(std::make_unique<Reader>(path, it->second));
  }
  StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    files_->by_path[path].clear();
    return std::unique_ptr<WritableFile>(std::make_unique<Writer>(path, files_.get()));
  }
  StatusOr<uint64_t> Size(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    auto it = files_->by_path.find(path);
    if (it == files_->by_path.end()) return NotFoundError(path + " is missing");
    return it->second.size();
  }
  StatusOr<std::string> ReadWhole(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    auto it = files_->by_path.find(path);
    if (it == files_->by_path.end()) return NotFoundError(path + " is missing");
    return it->second;
  }
  Status WriteAtomic(const std::string& path, const std::string& content) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    files_->by_path[path] = content;
    return OkStatus();
  }
  bool Exists(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    auto it = files_->by_path.lower_bound(path);
    return it != files_->by_path.end() &&
           (it->first == path || it->first.rfind(path + "/", 0) == 0);
  }
  StatusOr<std::vector<std::string>> List(const std::string& dir) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    std::vector<std::string> names;
    const std::string prefix = dir + "/";
    for (const auto& [path, bytes] : files_->by_path) {
      if (path.rfind(prefix, 0) != 0) continue;
      std::string name = path.substr(prefix.size());
      name = name.substr(0, name.find('/'));
      if (names.empty() || names.back() != name) names.push_back(name);
    }
    if (names.empty()) return NotFoundError(dir + " does not exist");
    return names;
  }
  Status MakeDirs(const std::string&) const override { return OkStatus(); }
  Status Remove(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    files_->by_path.erase(path);
    return OkStatus();
  }
  Status RemoveTree(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(files_->mu);
    for (auto it = files_->by_path.begin(); it != files_->by_path.end();) {
      it = it->first.rfind(path + "/", 0) == 0 ? files_->by_path.erase(it) : std::next(it);
    }
    return OkStatus();
  }
  Status SyncDir(const std::string&) const override { return OkStatus(); }

  size_t FileCount() const { return files_->by_path.size(); }

 private:
  std::unique_ptr<Files> files_ = std::make_unique<Files>();
};

TEST(StorageTest, SaveCommitRetentionAndReshardRunThroughAnyStorage) {
  InMemoryStorage mem;
  const std::string root = "/nonexistent-orrery-bucket/job/task";
  CheckpointStore store(root, 2, mem);
  const testing::ModelState m = testing::RandomModel(42, 8);
  const Layout from{2, 2, 1, 2};
  const StageFn stages = BalancedStages(m.num_layers);
  for (int64_t step : {10, 20, 30}) {
    for (int r = 0; r < from.World(); ++r) {
      auto w = ShardWriter::Create(store.StepDir(step), from, r, stages, 64, mem);
      ASSERT_TRUE(w.ok()) << w.status();
      for (size_t i = 0; i < m.specs.size(); ++i) {
        auto piece = LocalPieceOf(m.specs[i], from, r, stages);
        ASSERT_TRUE(piece.ok());
        if (!piece->present) continue;
        const size_t es = DTypeSize(m.specs[i].dtype);
        std::vector<char> buf(static_cast<size_t>(piece->buffer_elements) * es, 0);
        if (piece->writer)
          SliceRegion(m.data[i].data(), m.specs[i].shape, es, piece->region, buf.data());
        ASSERT_TRUE((*w)->Add(m.specs[i], buf.data(), buf.size()).ok());
      }
      ASSERT_TRUE((*w)->Finish().ok());
    }
    CheckpointInfo info;
    info.step = step;
    info.layout = from;
    info.num_layers = m.num_layers;
    ASSERT_TRUE(store.Commit(info).ok());
  }
  EXPECT_FALSE(PathExists(root)) << "nothing may reach the disk";
  auto steps = store.CommittedSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, (std::vector<int64_t>{20, 30}));  // retention through the storage

  auto reader = store.OpenLatest(VerifyLevel::kChecksums, /*fallback=*/false);
  ASSERT_TRUE(reader.ok()) << reader.status();
  // Every rank of another layout loads exactly its bytes, checked together.
  const Layout to{1, 2, 2, 1};
  std::vector<BlockPiece> partial;
  for (int r = 0; r < to.World(); ++r) {
    std::vector<std::vector<char>> bufs(m.specs.size());
    std::vector<RankBuffer> rb;
    for (size_t i = 0; i < m.specs.size(); ++i) {
      auto piece = LocalPieceOf(m.specs[i], to, r, stages);
      ASSERT_TRUE(piece.ok());
      if (!piece->present) continue;
      bufs[i].assign(static_cast<size_t>(piece->buffer_elements) * DTypeSize(m.specs[i].dtype), 0);
      rb.push_back({m.specs[i], bufs[i].data(), bufs[i].size()});
    }
    LoadOptions opt;
    opt.exact = true;
    LoadStats stats;
    ASSERT_TRUE(LoadRank(*reader, rb, to, r, stages, opt, &stats, &partial).ok());
    EXPECT_EQ(stats.bytes_read, stats.bytes_needed);
    for (size_t i = 0; i < m.specs.size(); ++i) {
      auto piece = LocalPieceOf(m.specs[i], to, r, stages);
      if (!piece->present) continue;
      const size_t es = DTypeSize(m.specs[i].dtype);
      std::vector<char> want(static_cast<size_t>(piece->region.Numel()) * es);
      SliceRegion(m.data[i].data(), m.specs[i].shape, es, piece->region, want.data());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), bufs[i].begin())) << m.specs[i].name;
    }
  }
  auto untiled = CheckBlockPieces(partial, *reader);
  ASSERT_TRUE(untiled.ok()) << untiled.status();
  EXPECT_TRUE(untiled->empty());
}

TEST(StorageTest, LocalStorageEdges) {
  testing::TempDir tmp;
  const Storage& local = LocalStorage();
  const std::string path = JoinPath(tmp.path(), "a/b/file");
  EXPECT_EQ(local.Size(path).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(local.OpenRead(path).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(local.Remove(path).ok());  // missing is fine
  ASSERT_TRUE(local.MakeDirs(JoinPath(tmp.path(), "a/b")).ok());
  ASSERT_TRUE(local.WriteAtomic(path, "hello").ok());
  auto size = local.Size(path);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 5u);
  auto names = local.List(JoinPath(tmp.path(), "a/b"));
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"file"});
  ASSERT_TRUE(local.RemoveTree(JoinPath(tmp.path(), "a")).ok());
  EXPECT_FALSE(local.Exists(path));
}

}  // namespace
}  // namespace orrery::checkpoint
