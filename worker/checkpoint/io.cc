// POSIX file helpers for the checkpoint (see io.h).
#include "worker/checkpoint/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <sys/stat.h>

namespace orrery::checkpoint {
namespace {
Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = what + " " + path + ": " + std::strerror(e);
  if (e == ENOENT) return NotFoundError(msg);
  if (e == ENOSPC) return ResourceExhaustedError(msg);
  return InternalError(msg);
}
}  // namespace

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<File> File::OpenRead(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  return File(fd, path);
}

StatusOr<File> File::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  return File(fd, path);
}

StatusOr<uint64_t> File::Size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Errno("cannot stat", path_);
  return static_cast<uint64_t>(st.st_size);
}

Status File::ReadAt(uint64_t offset, void* dst, uint64_t size) const {
  auto* p = static_cast<char*>(dst);
  while (size > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size, 1u << 30));
    const ssize_t n = ::pread(fd_, p, want, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot read", path_);
    }
    if (n == 0) {
      return DataLossError("shard file " + path_ + " is truncated: no data at byte " +
                           std::to_string(offset));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
  return OkStatus();
}

Status File::Append(const void* data, uint64_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size, 1u << 30));
    const ssize_t n = ::write(fd_, p, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path_);
    }
    p += n;
    size -= static_cast<uint64_t>(n);
  }
  return OkStatus();
}

Status File::Sync() {
  if (::fsync(fd_) != 0) return Errno("cannot fsync", path_);
  return OkStatus();
}

Status File::Close() {
  if (fd_ < 0) return OkStatus();
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return Errno("cannot close", path_);
  return OkStatus();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return InternalError("cannot create directory " + path + ": " + ec.message());
  return OkStatus();
}

Status SyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync directory", path);
  return OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  ORRERY_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  ORRERY_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  std::string out(size, '\0');
  ORRERY_RETURN_IF_ERROR(f.ReadAt(0, out.data(), size));
  return out;
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    ORRERY_ASSIGN_OR_RETURN(File f, File::Create(tmp));
    ORRERY_RETURN_IF_ERROR(f.Append(content.data(), content.size()));
    ORRERY_RETURN_IF_ERROR(f.Sync());
    ORRERY_RETURN_IF_ERROR(f.Close());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename " + tmp + " to", path);
  const auto slash = path.find_last_of('/');
  return SyncDir(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return InternalError("cannot remove " + path + ": " + ec.message());
  return OkStatus();
}

StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return Errno("cannot list directory", path);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace orrery::checkpoint
