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
#include "worker/checkpoint/storage.h"

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
  // With verify: read exactly the requested bytes, never rounded out to whole
  // blocks. A block the reads cover whole is checked at once; a block they
  // cover in part is checked from its pieces' checksum terms (crc32c.h) once
  // pieces read by this or other ranks tile it: Load hands those pieces to its
  // caller (`partial`) to check together with the other ranks'
  // (CheckBlockPieces); without `partial` it reads the rest of such blocks
  // itself (counted in bytes_read).
  bool exact = false;
  uint64_t max_read = 16ull << 20;  // largest single read (bounce buffer size)
};

// A piece of one checksummed block that a load read (LoadOptions::exact).
struct BlockPiece {
  int file = 0;
  uint64_t block_offset = 0;  // file offset of the block's first byte
  uint64_t block_length = 0;
  uint64_t begin = 0;  // the piece: bytes [begin, end) of the block
  uint64_t end = 0;
  uint32_t term = 0;       // Crc32cFragmentTerm of the piece within its block
  uint32_t block_crc = 0;  // the block's checksum in the metadata
  bool operator==(const BlockPiece&) const = default;
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
  static StatusOr<CheckpointReader> Open(const std::string& dir,
                                         const Storage& storage = LocalStorage());

  const std::string& dir() const { return dir_; }
  const Metadata& metadata() const { return metadata_; }
  std::string FilePath(int file) const;

  // Every shard file exists with its recorded size (cheap: stat only).
  Status CheckFiles() const;
  // Reads every shard file in full and checks the file and block checksums.
  Status VerifyAll(int threads = 4) const;

  // `partial`: see LoadOptions::exact (ignored otherwise).
  Status Load(const std::vector<LoadRequest>& requests, const LoadOptions& options,
              LoadStats* stats = nullptr, std::vector<BlockPiece>* partial = nullptr) const;

  // Reads the blocks the pieces belong to whole and checks them (each once);
  // the bytes go to stats->bytes_read.
  Status CheckWholeBlocks(const std::vector<BlockPiece>& pieces, LoadStats* stats) const;

 private:
  std::string dir_;
  Metadata metadata_;
  const Storage* storage_ = &LocalStorage();
};

// Checks every block that `pieces` tile (pieces read twice, by replicas, count
// once) against its checksum: DATA_LOSS naming the file and bytes on a
// mismatch. Returns the pieces of the blocks they do not tile.
StatusOr<std::vector<BlockPiece>> CheckBlockPieces(std::vector<BlockPiece> pieces,
                                                   const CheckpointReader& reader);

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
                LoadStats* stats = nullptr, std::vector<BlockPiece>* partial = nullptr);

}  // namespace orrery::checkpoint
