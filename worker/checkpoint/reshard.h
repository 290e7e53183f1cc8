// Offline operations on a checkpoint's raw bytes, without LibTorch: a summary
// (inspect) and resharding into a new checkpoint laid out for another layout, each
// new rank's shard built by the same overlap reads a live rank would do.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "common/bytes_text.h"
#include "common/status.h"
#include "worker/checkpoint/layout.h"
#include "worker/checkpoint/reader.h"

namespace orrery::checkpoint {

struct InspectOptions {
  bool verify = true;  // read every shard and check its checksum
  bool list_chunks = false;
  int threads = 4;
};

// Writes a human-readable summary of the checkpoint in `dir` to `out`. Returns the
// verification result (OK when not verifying and the metadata is readable).
Status Inspect(const std::string& dir, const InspectOptions& options, std::ostream& out);

struct ReshardOptions {
  int threads = 4;
  bool verify = true;
  uint64_t block_size = kDefaultBlockSize;
};

// Writes the checkpoint in `from` re-laid out for `to` into the directory `out`
// (created; must not hold a committed checkpoint) and commits it. Pipeline stages
// of the new layout follow BalancedStages(metadata num_layers). `stats` counts
// the reads.
Status Reshard(const std::string& from, const Layout& to, const std::string& out,
               const ReshardOptions& options, LoadStats* stats = nullptr);

// "1.5 GiB" (common/bytes_text.h; checkpoint code and its callers say HumanBytes).
using orrery::HumanBytes;

}  // namespace orrery::checkpoint
