// A job's checkpoints over time: one directory per step under a root, the last K
// committed ones kept, and loading that can fall back to an older checkpoint when
// the newest is damaged.
//
//   root/step-000000000100/{shard-*.bin, metadata.json}
//   root/step-000000000200/...
//
// A step directory without metadata.json is an unfinished save (a crash, or one in
// progress); it is never loaded. Older checkpoints are removed only after a newer
// one has committed, so a crash at any moment leaves the previous one intact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/reader.h"

namespace orrery::checkpoint {

enum class VerifyLevel {
  kMetadata,  // metadata parses, format version supported
  kFiles,     // ... and every shard file exists with its recorded size
  kChecksums  // ... and every byte matches its checksum (reads everything)
};

class CheckpointStore {
 public:
  // `keep`: how many committed checkpoints to retain (>= 1).
  CheckpointStore(std::string root, int keep, const Storage& storage = LocalStorage());

  const std::string& root() const { return root_; }
  const Storage& storage() const { return *storage_; }
  std::string StepDir(int64_t step) const;

  // Steps with a committed checkpoint, ascending.
  StatusOr<std::vector<int64_t>> CommittedSteps() const;

  // Commits the step's directory (after every rank's ShardWriter::Finish), then
  // applies retention. Writers should use StepDir(info.step) as their directory.
  Status Commit(const CheckpointInfo& info);

  // Removes committed checkpoints beyond the newest `keep`, and unfinished step
  // directories older than the newest committed one.
  Status Prune();

  // Opens the newest committed checkpoint that passes `level`. With `fallback`, a
  // checkpoint that fails is skipped (and logged) for the next older one;
  // without, its error is returned. NOT_FOUND if none is usable.
  StatusOr<CheckpointReader> OpenLatest(VerifyLevel level, bool fallback) const;

 private:
  std::string root_;
  int keep_;
  const Storage* storage_;
};

// Checks an opened checkpoint at `level`.
Status VerifyCheckpoint(const CheckpointReader& reader, VerifyLevel level);

}  // namespace orrery::checkpoint
