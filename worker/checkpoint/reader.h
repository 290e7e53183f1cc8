// Loading into any layout: each rank computes, for every tensor it holds under its
// (new) layout, the overlap with every stored chunk, and reads only those byte
// ranges, in parallel, straight into its buffers.
//
// Integrity: each block (ChunkMeta::block_size bytes) of a chunk has a CRC-32C.
// With LoadOptions::verify a load reads every block it touches whole and checks it,
// so what it reads beyond its needs is at most a block at each end of a needed
// range; with verify off it reads exactly the needed bytes. VerifyAll() reads
// every file in full (inspect, fallback). Errors name the file: a missing shard is
// NOT_FOUND, a short file or a wrong checksum DATA_LOSS.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/layout.h"
#include "worker/checkpoint/metadata.h"

namespace orrery::checkpoint {

struct LoadRequest {
  std::string name;     // tensor name
  Region region;        // the elements wanted
  void* dst = nullptr;  // region.Numel() elements, row-major over the region's flat range
  uint64_t dst_bytes = 0;
};

struct LoadOptions {
  int threads = 4;  // parallel reads
  bool verify = true;
  uint64_t max_read = 16ull << 20;  // largest single read (bounce buffer size)
};

struct LoadStats {
  uint64_t bytes_needed = 0;  // bytes the requests asked for
  uint64_t bytes_read = 0;    // bytes requested from the files
  uint64_t reads = 0;         // pread calls issued (ops)
  LoadStats& operator+=(const LoadStats& o) {
    bytes_needed += o.bytes_needed;
    bytes_read += o.bytes_read;
    reads += o.reads;
    return *this;
  }
};

class CheckpointReader {
 public:
  // Reads and checks metadata.json in `dir` (NOT_FOUND if the checkpoint was never
  // committed; FAILED_PRECONDITION if written in a newer format).
  static StatusOr<CheckpointReader> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const Metadata& metadata() const { return metadata_; }
  std::string FilePath(int file) const;

  // Every shard file exists with its recorded size (cheap: stat only).
  Status CheckFiles() const;
  // Reads every shard file in full and checks the file and block checksums.
  Status VerifyAll(int threads = 4) const;

  Status Load(const std::vector<LoadRequest>& requests, const LoadOptions& options,
              LoadStats* stats = nullptr) const;

 private:
  std::string dir_;
  Metadata metadata_;
};

// A rank's buffers for the tensors it holds: name -> buffer of
// LocalPieceOf(spec, layout, rank, stages).buffer_elements elements.
struct RankBuffer {
  TensorSpec spec;
  void* data = nullptr;
  uint64_t bytes = 0;
};

// Loads what rank `rank` holds under `layout` into `buffers` (fsdp padding is
// zeroed). Tensors the rank does not hold are skipped; a spec whose shape or dtype
// differs from the checkpoint's is an error naming the tensor.
Status LoadRank(const CheckpointReader& reader, const std::vector<RankBuffer>& buffers,
                const Layout& layout, int rank, const StageFn& stages, const LoadOptions& options,
                LoadStats* stats = nullptr);

}  // namespace orrery::checkpoint
