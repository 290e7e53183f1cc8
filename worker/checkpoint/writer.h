// Saving: every rank writes its own shard file in parallel with the others, then
// one rank commits the checkpoint by writing its metadata atomically.
//
//   auto w = ShardWriter::Create(dir, layout, rank, stages);   // every rank
//   for (each local tensor) w->Add(spec, data, bytes);          // model + optimizer
//   w->AddBlob("rng/cpu", state);                               // opaque per-rank state
//   w->Finish();                                                // fsyncs shard + index
//   -- barrier (the caller's communicator) --
//   CommitCheckpoint(dir, info);                                // one rank (rank 0)
//
// A rank writes a tensor's piece only if it is the piece's designated writer
// (replicated data is written once, by dp-rank 0 / replica 0 / tp-rank 0), so the
// caller simply adds every tensor it holds. Finish() leaves "shard-RRRRR.bin" and
// its index "shard-RRRRR.index.json"; CommitCheckpoint gathers the indexes of all
// ranks into metadata.json (temp name, fsync, rename, fsync of the directory).
// CheckpointStore (store.h) wraps this with step directories and retention.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "worker/checkpoint/io.h"
#include "worker/checkpoint/layout.h"
#include "worker/checkpoint/metadata.h"
#include "worker/checkpoint/storage.h"

namespace orrery::checkpoint {

std::string ShardFileName(int rank);   // "shard-00003.bin"
std::string ShardIndexName(int rank);  // "shard-00003.index.json"

class ShardWriter {
 public:
  // Creates `dir` if needed and starts rank `rank`'s shard (replacing any left by
  // an earlier, uncommitted attempt).
  static StatusOr<std::unique_ptr<ShardWriter>> Create(const std::string& dir, const Layout& layout,
                                                       int rank, StageFn stages,
                                                       uint64_t block_size = kDefaultBlockSize,
                                                       const Storage& storage = LocalStorage());
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // `data` is the rank's local buffer of the tensor: LocalPieceOf(spec, ...)
  // .buffer_elements elements (fsdp padding included; padding is not written).
  // Fails if the rank does not hold the tensor or the size is wrong.
  Status Add(const TensorSpec& spec, const void* data, uint64_t bytes);
  // A piece of a tensor given by its region of the global tensor, for a caller
  // that knows what it holds better than a Layout can say (a live template:
  // fsdp's flat ranges of a layer's concatenated parameters, tensor-parallel
  // slices, pipeline stages cut by measured cost). `data` holds region.Numel()
  // elements, row-major over the region's flat range. The caller decides which
  // rank writes a replicated piece; a rank may add several regions of one
  // tensor. Only `spec`'s name, shape and dtype matter to a later load.
  Status AddRegion(const TensorSpec& spec, const Region& region, const void* data, uint64_t bytes);
  // Opaque per-rank bytes (RNG state ...), stored under BlobKey(rank, name).
  Status AddBlob(const std::string& name, const std::string& bytes);
  // Flushes and fsyncs the shard, then writes its index atomically.
  Status Finish();

  uint64_t bytes_written() const { return offset_; }

 private:
  // Appends `bytes` at `data` as one chunk of `tm` covering `region`.
  Status AppendChunk(TensorMeta& tm, const Region& region, const char* data, uint64_t bytes);

  ShardWriter(std::string dir, Layout layout, int rank, StageFn stages, uint64_t block_size,
              std::unique_ptr<WritableFile> file, const Storage& storage);

  std::string dir_;
  Layout layout_;
  int rank_;
  StageFn stages_;
  uint64_t block_size_;
  std::unique_ptr<WritableFile> file_;
  const Storage& storage_;
  uint64_t offset_ = 0;
  uint32_t file_crc_ = 0;
  bool finished_ = false;
  Metadata index_;  // this rank's part of the metadata, file index 0 = its shard
};

// Gathers the indexes of ranks [0, info.layout.World()) in `dir` and commits the
// checkpoint. Fails (naming the rank) if any rank has not finished. `extra_blobs`
// (full keys) are stored beside the ranks' own (offline reshard keeps the old ones).
Status CommitCheckpoint(const std::string& dir, const CheckpointInfo& info,
                        const std::map<std::string, std::string>& extra_blobs = {},
                        const Storage& storage = LocalStorage());

// One process writing the shards of every rank of `layout` from whole (global)
// tensors: offline resharding, tests and benchmarks. `global` holds each spec's
// full tensor, row-major. Does not commit.
Status WriteAllShards(const std::string& dir, const Layout& layout, const StageFn& stages,
                      const std::vector<TensorSpec>& specs, const std::vector<const void*>& global,
                      uint64_t block_size = kDefaultBlockSize);

// Copies the elements of `region` out of a whole row-major tensor into `dst`
// (region.Numel() elements); the reference slicing used by tests and WriteAllShards.
void SliceRegion(const void* global, const std::vector<int64_t>& shape, size_t elem_size,
                 const Region& region, void* dst);

}  // namespace orrery::checkpoint
