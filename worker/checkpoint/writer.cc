// Shard writing and the atomic commit of a checkpoint (see writer.h).
#include "worker/checkpoint/writer.h"

#include <cstdio>
#include <cstring>

#include "worker/checkpoint/crc32c.h"
#include "worker/checkpoint/overlap.h"

namespace orrery::checkpoint {

std::string ShardFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05d.bin", rank);
  return buf;
}

std::string ShardIndexName(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "shard-%05d.index.json", rank);
  return buf;
}

ShardWriter::ShardWriter(std::string dir, Layout layout, int rank, StageFn stages,
                         uint64_t block_size, std::unique_ptr<WritableFile> file,
                         const Storage& storage)
    : dir_(std::move(dir)),
      layout_(layout),
      rank_(rank),
      stages_(std::move(stages)),
      block_size_(block_size),
      file_(std::move(file)),
      storage_(storage) {
  index_.info.layout = layout_;
  index_.files.push_back({ShardFileName(rank_), rank_, 0, 0});
}

StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& dir,
                                                           const Layout& layout, int rank,
                                                           StageFn stages, uint64_t block_size,
                                                           const Storage& storage) {
  ORRERY_RETURN_IF_ERROR(layout.Validate());
  if (rank < 0 || rank >= layout.World()) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " outside world of " +
                                layout.ToString());
  }
  if (block_size == 0) return InvalidArgumentError("block size must be > 0");
  ORRERY_RETURN_IF_ERROR(storage.MakeDirs(dir));
  // A stale index from an earlier attempt must not let a commit see this rank as done.
  ORRERY_RETURN_IF_ERROR(storage.Remove(JoinPath(dir, ShardIndexName(rank))));
  ORRERY_ASSIGN_OR_RETURN(auto f, storage.Create(JoinPath(dir, ShardFileName(rank))));
  return std::unique_ptr<ShardWriter>(
      new ShardWriter(dir, layout, rank, std::move(stages), block_size, std::move(f), storage));
}

Status ShardWriter::Add(const TensorSpec& spec, const void* data, uint64_t bytes) {
  if (finished_)
    return FailedPreconditionError("shard writer of rank " + std::to_string(rank_) +
                                   " already finished");
  ORRERY_ASSIGN_OR_RETURN(LocalPiece piece, LocalPieceOf(spec, layout_, rank_, stages_));
  if (!piece.present) {
    return InvalidArgumentError("rank " + std::to_string(rank_) + " does not hold tensor " +
                                spec.name + " under " + layout_.ToString());
  }
  const size_t es = DTypeSize(spec.dtype);
  if (bytes != static_cast<uint64_t>(piece.buffer_elements) * es) {
    return InvalidArgumentError("tensor " + spec.name + ": local buffer has " +
                                std::to_string(bytes) + " bytes, rank " + std::to_string(rank_) +
                                " holds " +
                                std::to_string(piece.buffer_elements * static_cast<int64_t>(es)));
  }
  if (index_.tensors.count(spec.name) != 0)
    return InvalidArgumentError("tensor " + spec.name + " added twice");
  TensorMeta& tm = index_.tensors[spec.name];
  tm.spec = spec;
  if (!piece.writer) return OkStatus();  // another rank writes this copy
  return AppendChunk(tm, piece.region, static_cast<const char*>(data),
                     static_cast<uint64_t>(piece.region.Numel()) * es);
}

Status ShardWriter::AddRegion(const TensorSpec& spec, const Region& region, const void* data,
                              uint64_t bytes) {
  if (finished_)
    return FailedPreconditionError("shard writer of rank " + std::to_string(rank_) +
                                   " already finished");
  const size_t es = DTypeSize(spec.dtype);
  const bool in_bounds = [&] {
    if (region.offsets.size() != spec.shape.size() || region.sizes.size() != spec.shape.size())
      return false;
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      if (region.offsets[d] < 0 || region.sizes[d] < 0 ||
          region.offsets[d] + region.sizes[d] > spec.shape[d])
        return false;
    }
    return region.flat_begin >= 0 && region.flat_begin <= region.flat_end &&
           region.flat_end <= region.RectNumel();
  }();
  if (!in_bounds) {
    return InvalidArgumentError("tensor " + spec.name + ": region outside its global shape");
  }
  if (bytes != static_cast<uint64_t>(region.Numel()) * es) {
    return InvalidArgumentError("tensor " + spec.name + ": region of " +
                                std::to_string(region.Numel()) + " elements given " +
                                std::to_string(bytes) + " bytes");
  }
  auto [it, fresh] = index_.tensors.emplace(spec.name, TensorMeta{spec, {}});
  if (!fresh && (it->second.spec.shape != spec.shape || it->second.spec.dtype != spec.dtype)) {
    return InvalidArgumentError("tensor " + spec.name +
                                " added twice with different shapes or dtypes");
  }
  return AppendChunk(it->second, region, static_cast<const char*>(data), bytes);
}

Status ShardWriter::AppendChunk(TensorMeta& tm, const Region& region, const char* data,
                                uint64_t bytes) {
  ChunkMeta c;
  c.file = 0;
  c.offset = offset_;
  c.bytes = bytes;
  c.region = region;
  c.block_size = block_size_;
  for (uint64_t off = 0; off < c.bytes; off += block_size_) {
    c.block_crcs.push_back(Crc32c(data + off, std::min(block_size_, c.bytes - off)));
  }
  ORRERY_RETURN_IF_ERROR(file_->Append(data, c.bytes));
  file_crc_ = Crc32cExtend(file_crc_, data, c.bytes);
  offset_ += c.bytes;
  tm.chunks.push_back(std::move(c));
  return OkStatus();
}

Status ShardWriter::AddBlob(const std::string& name, const std::string& bytes) {
  index_.blobs[BlobKey(rank_, name)] = bytes;
  return OkStatus();
}

Status ShardWriter::Finish() {
  if (finished_) return OkStatus();
  ORRERY_RETURN_IF_ERROR(file_->Sync());
  ORRERY_RETURN_IF_ERROR(file_->Close());
  index_.files[0].size = offset_;
  index_.files[0].crc32c = file_crc_;
  ORRERY_RETURN_IF_ERROR(
      storage_.WriteAtomic(JoinPath(dir_, ShardIndexName(rank_)), MetadataToJson(index_)));
  finished_ = true;
  return OkStatus();
}

Status CommitCheckpoint(const std::string& dir, const CheckpointInfo& info,
                        const std::map<std::string, std::string>& extra_blobs,
                        const Storage& storage) {
  ORRERY_RETURN_IF_ERROR(info.layout.Validate());
  Metadata m;
  m.info = info;
  m.blobs = extra_blobs;
  for (int r = 0; r < info.layout.World(); ++r) {
    const std::string path = JoinPath(dir, ShardIndexName(r));
    auto text = storage.ReadWhole(path);
    if (!text.ok()) {
      return FailedPreconditionError("cannot commit " + dir + ": rank " + std::to_string(r) +
                                     " has not finished its shard (" + text.status().message() +
                                     ")");
    }
    ORRERY_ASSIGN_OR_RETURN(Metadata part, MetadataFromJson(*text, path));
    if (part.files.size() != 1)
      return DataLossError(path + ": a shard index must name exactly one file");
    if (!(part.info.layout == info.layout)) {
      return FailedPreconditionError(path + " was written under layout " +
                                     part.info.layout.ToString() + ", the commit is for " +
                                     info.layout.ToString());
    }
    const int file_index = static_cast<int>(m.files.size());
    m.files.push_back(part.files[0]);
    for (auto& [name, t] : part.tensors) {
      auto [it, fresh] = m.tensors.emplace(name, TensorMeta{t.spec, {}});
      const TensorSpec& have = it->second.spec;
      if (!fresh && (have.shape != t.spec.shape || have.dtype != t.spec.dtype ||
                     have.tp_dim != t.spec.tp_dim || have.layer != t.spec.layer ||
                     have.fsdp_sharded != t.spec.fsdp_sharded)) {
        return FailedPreconditionError("tensor " + name +
                                       " has different specs on different ranks (rank " +
                                       std::to_string(r) + ")");
      }
      for (auto& c : t.chunks) {
        c.file = file_index;
        it->second.chunks.push_back(std::move(c));
      }
    }
    for (auto& [key, bytes] : part.blobs) m.blobs[key] = std::move(bytes);
  }
  // Every element of every tensor must be stored exactly once somewhere.
  for (const auto& [name, t] : m.tensors) {
    int64_t stored = 0;
    for (const auto& c : t.chunks) stored += c.region.Numel();
    if (stored != Numel(t.spec.shape)) {
      return FailedPreconditionError(
          // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
          "cannot commit " + dir + ": tensor " + name + " has " + std::to_string(stored) + " of " +
          std::to_string(Numel(t.spec.shape)) + " elements stored (a rank did not add it?)");
    }
  }
  ORRERY_RETURN_IF_ERROR(storage.WriteAtomic(JoinPath(dir, kMetadataFile), MetadataToJson(m)));
  // The indexes are now redundant; a leftover one is harmless.
  for (int r = 0; r < info.layout.World(); ++r)
    (void)storage.Remove(JoinPath(dir, ShardIndexName(r)));
  return OkStatus();
}

void SliceRegion(const void* global, const std::vector<int64_t>& shape, size_t elem_size,
                 const Region& region, void* dst) {
  const auto* src = static_cast<const char*>(global);
  auto* out = static_cast<char*>(dst);
  for (const CopyRun& run : Overlap(region, FullRegion(shape))) {
    std::memcpy(out + run.dst * static_cast<int64_t>(elem_size),
                src + run.src * static_cast<int64_t>(elem_size),
                static_cast<size_t>(run.count) * elem_size);
  }
}

Status WriteAllShards(const std::string& dir, const Layout& layout, const StageFn& stages,
                      const std::vector<TensorSpec>& specs, const std::vector<const void*>& global,
                      uint64_t block_size) {
  if (specs.size() != global.size())
    return InvalidArgumentError("WriteAllShards: specs and tensors differ in count");
  std::vector<char> buf;
  for (int r = 0; r < layout.World(); ++r) {
    ORRERY_ASSIGN_OR_RETURN(auto w, ShardWriter::Create(dir, layout, r, stages, block_size));
    for (size_t i = 0; i < specs.size(); ++i) {
      ORRERY_ASSIGN_OR_RETURN(LocalPiece piece, LocalPieceOf(specs[i], layout, r, stages));
      if (!piece.present) continue;
      const size_t es = DTypeSize(specs[i].dtype);
      buf.assign(static_cast<size_t>(piece.buffer_elements) * es, 0);
      if (piece.writer) SliceRegion(global[i], specs[i].shape, es, piece.region, buf.data());
      ORRERY_RETURN_IF_ERROR(w->Add(specs[i], buf.data(), buf.size()));
    }
    ORRERY_RETURN_IF_ERROR(w->Finish());
  }
  return OkStatus();
}

}  // namespace orrery::checkpoint
