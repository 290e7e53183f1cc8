// Step directories, retention of the last K, and fallback on load (see store.h).
#include "worker/checkpoint/store.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "worker/checkpoint/io.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {
namespace {
constexpr char kPrefix[] = "step-";

// Parses "step-000000000100" -> 100; -1 for any other name.
int64_t StepOf(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}
}  // namespace

CheckpointStore::CheckpointStore(std::string root, int keep, const Storage& storage)
    : root_(std::move(root)), keep_(std::max(1, keep)), storage_(&storage) {}

std::string CheckpointStore::StepDir(int64_t step) const {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%012lld", kPrefix, static_cast<long long>(step));
  return JoinPath(root_, buf);
}

StatusOr<std::vector<int64_t>> CheckpointStore::CommittedSteps() const {
  std::vector<int64_t> steps;
  if (!storage_->Exists(root_)) return steps;
  ORRERY_ASSIGN_OR_RETURN(auto names, storage_->List(root_));
  for (const auto& n : names) {
    const int64_t s = StepOf(n);
    if (s >= 0 && storage_->Exists(JoinPath(JoinPath(root_, n), kMetadataFile))) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status CheckpointStore::Commit(const CheckpointInfo& info) {
  ORRERY_RETURN_IF_ERROR(CommitCheckpoint(StepDir(info.step), info, {}, *storage_));
  ORRERY_RETURN_IF_ERROR(storage_->SyncDir(root_));
  return Prune();
}

Status CheckpointStore::Prune() {
  ORRERY_ASSIGN_OR_RETURN(auto committed, CommittedSteps());
  if (committed.empty()) return OkStatus();
  const int64_t newest = committed.back();
  std::vector<int64_t> doomed;
  if (committed.size() > static_cast<size_t>(keep_)) {
    doomed.assign(committed.begin(), committed.end() - keep_);
  }
  ORRERY_ASSIGN_OR_RETURN(auto names, storage_->List(root_));
  for (const auto& n : names) {
    const int64_t s = StepOf(n);
    if (s >= 0 && s < newest && !std::binary_search(committed.begin(), committed.end(), s))
      doomed.push_back(s);
  }
  for (int64_t s : doomed) {
    // Uncommit first (metadata goes before the shards), so a crash mid-removal
    // never leaves a committed checkpoint with missing shards.
    const std::string dir = StepDir(s);
    ORRERY_RETURN_IF_ERROR(storage_->Remove(JoinPath(dir, kMetadataFile)));
    ORRERY_RETURN_IF_ERROR(storage_->SyncDir(dir));
    ORRERY_RETURN_IF_ERROR(storage_->RemoveTree(dir));
  }
  return OkStatus();
}

Status VerifyCheckpoint(const CheckpointReader& reader, VerifyLevel level) {
  if (level == VerifyLevel::kMetadata) return OkStatus();
  if (level == VerifyLevel::kFiles) return reader.CheckFiles();
  return reader.VerifyAll();
}

StatusOr<CheckpointReader> CheckpointStore::OpenLatest(VerifyLevel level, bool fallback) const {
  ORRERY_ASSIGN_OR_RETURN(auto steps, CommittedSteps());
  Status last_error = NotFoundError("no committed checkpoint under " + root_);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    auto reader = CheckpointReader::Open(StepDir(*it), *storage_);
    Status s = reader.ok() ? VerifyCheckpoint(*reader, level) : reader.status();
    if (s.ok()) return std::move(reader).value();
    if (!fallback) return s;
    Log(LogLevel::kWarning, "Skipped damaged checkpoint",
        {{"dir", StepDir(*it)}, {"error", s.ToString()}});
    last_error =
        NotFoundError("no usable checkpoint under " + root_ + "; last error: " + s.ToString());
  }
  return last_error;
}

}  // namespace orrery::checkpoint
