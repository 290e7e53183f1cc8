// The POSIX directory store behind checkpoint::Storage (see storage.h): thin
// wrappers over io.h.
#include "worker/checkpoint/storage.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "worker/checkpoint/io.h"

namespace orrery::checkpoint {
namespace {

class LocalReadable final : public ReadableFile {
 public:
  explicit LocalReadable(File f) : file_(std::move(f)) {}
  const std::string& path() const override { return file_.path(); }
  Status ReadAt(uint64_t offset, void* dst, uint64_t size) const override {
    return file_.ReadAt(offset, dst, size);
  }

 private:
  File file_;
};

class LocalWritable final : public WritableFile {
 public:
  explicit LocalWritable(File f) : file_(std::move(f)) {}
  const std::string& path() const override { return file_.path(); }
  Status Append(const void* data, uint64_t size) override { return file_.Append(data, size); }
  Status Sync() override { return file_.Sync(); }
  Status Close() override { return file_.Close(); }

 private:
  File file_;
};

class Local final : public Storage {
 public:
  StatusOr<std::unique_ptr<ReadableFile>> OpenRead(const std::string& path) const override {
    ORRERY_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
    return std::unique_ptr<ReadableFile>(std::make_unique<LocalReadable>(std::move(f)));
  }
  StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& path) const override {
    ORRERY_ASSIGN_OR_RETURN(File f, File::Create(path));
    return std::unique_ptr<WritableFile>(std::make_unique<LocalWritable>(std::move(f)));
  }
  StatusOr<uint64_t> Size(const std::string& path) const override {
    if (!PathExists(path)) return NotFoundError("file " + path + " is missing");
    ORRERY_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
    return f.Size();
  }
  StatusOr<std::string> ReadWhole(const std::string& path) const override {
    return ReadWholeFile(path);
  }
  Status WriteAtomic(const std::string& path, const std::string& content) const override {
    return WriteFileAtomic(path, content);
  }
  bool Exists(const std::string& path) const override { return PathExists(path); }
  StatusOr<std::vector<std::string>> List(const std::string& dir) const override {
    return ListDir(dir);
  }
  Status MakeDirs(const std::string& path) const override { return checkpoint::MakeDirs(path); }
  Status Remove(const std::string& path) const override {
    if (std::remove(path.c_str()) != 0 && errno != ENOENT)
      return InternalError("removing " + path + ": " + std::strerror(errno));
    return OkStatus();
  }
  Status RemoveTree(const std::string& path) const override { return checkpoint::RemoveTree(path); }
  Status SyncDir(const std::string& dir) const override { return checkpoint::SyncDir(dir); }
};

}  // namespace

const Storage& LocalStorage() {
  static const Local* local = new Local();
  return *local;
}

}  // namespace orrery::checkpoint
