// The checkpoint's metadata file: the one place that says what a checkpoint holds.
//
// A checkpoint is a directory with shard files (one per writing rank,
// "shard-00003.bin") and "metadata.json". The checkpoint exists exactly when
// metadata.json exists (it is written last, atomically). The metadata names every
// tensor (fully qualified name, global shape, dtype, its partition spec) and the
// chunks the shard files hold (a Region each, at a byte offset of a file), with a
// CRC-32C per block of every chunk and per file. It also carries the training
// state that is not tensors: step, layout it was written in, learning-rate schedule
// state, the dataset cursor, and small opaque per-rank blobs (RNG states), base64.
//
// Torch-free, so the operator and the CLI read it without LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/layout.h"
#include "worker/data/order.h"

namespace orrery::checkpoint {

// Bumped on any change an older reader would misread; readers refuse newer versions.
inline constexpr int kFormatVersion = 1;
inline constexpr const char* kFormatName = "orrery-checkpoint";
inline constexpr const char* kMetadataFile = "metadata.json";
// Checksum granularity: a load verifies every block it touches, so a small block
// keeps verification from reading much beyond what a rank needs.
inline constexpr uint64_t kDefaultBlockSize = 1 << 20;

struct ChunkMeta {
  int file = 0;         // index into Metadata::files
  uint64_t offset = 0;  // byte offset in the file
  uint64_t bytes = 0;   // region.Numel() * dtype size
  Region region;
  uint64_t block_size = kDefaultBlockSize;
  std::vector<uint32_t> block_crcs;  // CRC-32C of [offset + k*block_size, ...) within the chunk
};

struct TensorMeta {
  TensorSpec spec;
  std::vector<ChunkMeta> chunks;
};

struct FileMeta {
  std::string name;  // relative to the checkpoint directory
  int rank = 0;      // the rank that wrote it
  uint64_t size = 0;
  uint32_t crc32c = 0;  // of the whole file
};

// Training state besides tensors, given by the caller at commit.
struct CheckpointInfo {
  int64_t step = 0;
  Layout layout;       // the layout the checkpoint was written in
  int num_layers = 1;  // for the default stage assignment when resharding offline
  std::map<std::string, double> lr_schedule;  // e.g. {"base_lr":3e-4,"lr":1.2e-4,"warmup":100}
  data::Cursor dataset;
  std::map<std::string, std::string> extra;  // free-form (model name, config hash, ...)
};

struct Metadata {
  int format_version = kFormatVersion;
  CheckpointInfo info;
  std::vector<FileMeta> files;
  std::map<std::string, TensorMeta> tensors;  // by name
  // Opaque per-rank state (RNG): key "rank/<r>/<name>" -> raw bytes.
  std::map<std::string, std::string> blobs;

  const TensorMeta* Find(const std::string& name) const;
  uint64_t TotalTensorBytes() const;
};

std::string BlobKey(int rank, const std::string& name);

std::string MetadataToJson(const Metadata& metadata);
// `source` names the file in error messages.
StatusOr<Metadata> MetadataFromJson(const std::string& json, const std::string& source);

std::string Base64Encode(const std::string& bytes);
StatusOr<std::string> Base64Decode(const std::string& text);

}  // namespace orrery::checkpoint
