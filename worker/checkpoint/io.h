// The few POSIX file operations the checkpoint needs, returning Status with the
// file's path in every error: full reads and writes that retry short transfers,
// fsync of files and directories, and the write-temp-fsync-rename commit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::checkpoint {

// An open file descriptor, closed on destruction.
class File {
 public:
  File() = default;
  explicit File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  static StatusOr<File> OpenRead(const std::string& path);
  // Creates or truncates.
  static StatusOr<File> Create(const std::string& path);

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  StatusOr<uint64_t> Size() const;
  // Reads exactly `size` bytes at `offset`; a short file is a DataLoss error naming it.
  Status ReadAt(uint64_t offset, void* dst, uint64_t size) const;
  Status Append(const void* data, uint64_t size);
  Status Sync();
  Status Close();

 private:
  int fd_ = -1;
  std::string path_;
};

std::string JoinPath(const std::string& dir, const std::string& name);
Status MakeDirs(const std::string& path);
Status SyncDir(const std::string& path);
bool PathExists(const std::string& path);
StatusOr<std::string> ReadWholeFile(const std::string& path);
// Writes `path`.tmp, fsyncs it, renames it over `path`, fsyncs the directory.
Status WriteFileAtomic(const std::string& path, const std::string& content);
// Removes a directory tree (best effort for files; returns the first error).
Status RemoveTree(const std::string& path);
StatusOr<std::vector<std::string>> ListDir(const std::string& path);

}  // namespace orrery::checkpoint
