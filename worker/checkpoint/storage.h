// Where checkpoint bytes live: the few operations the checkpoint code needs of
// a store of named files, behind one interface, so that another store (an
// object store) can be added without touching the format, the commit protocol
// or the re-shard logic above it. LocalStorage() is a POSIX directory tree
// (a local disk or a mounted PVC); every path is a '/'-separated name.
//
// Contracts an implementation keeps, because the commit protocol relies on
// them: WriteAtomic's content is visible whole or not at all and durable when
// it returns; a WritableFile's bytes are durable after Sync(); a ReadableFile
// may be read from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::checkpoint {

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  virtual const std::string& path() const = 0;
  // Exactly `size` bytes at `offset`; a short file is DATA_LOSS naming it.
  // Thread-safe.
  virtual Status ReadAt(uint64_t offset, void* dst, uint64_t size) const = 0;
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual const std::string& path() const = 0;
  virtual Status Append(const void* data, uint64_t size) = 0;
  virtual Status Sync() = 0;  // durable when it returns
  virtual Status Close() = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;
  // NOT_FOUND for a missing file.
  virtual StatusOr<std::unique_ptr<ReadableFile>> OpenRead(const std::string& path) const = 0;
  // Creates or truncates.
  virtual StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& path) const = 0;
  // NOT_FOUND for a missing file.
  virtual StatusOr<uint64_t> Size(const std::string& path) const = 0;
  virtual StatusOr<std::string> ReadWhole(const std::string& path) const = 0;
  virtual Status WriteAtomic(const std::string& path, const std::string& content) const = 0;
  virtual bool Exists(const std::string& path) const = 0;
  // Names (not paths) under `dir`; NOT_FOUND if it does not exist.
  virtual StatusOr<std::vector<std::string>> List(const std::string& dir) const = 0;
  virtual Status MakeDirs(const std::string& path) const = 0;
  // A file; OK when it does not exist.
  virtual Status Remove(const std::string& path) const = 0;
  virtual Status RemoveTree(const std::string& path) const = 0;
  // Makes the names under `dir` durable (a no-op where names need no sync).
  virtual Status SyncDir(const std::string& dir) const = 0;
};

// The POSIX directory store (io.h).
const Storage& LocalStorage();

}  // namespace orrery::checkpoint
