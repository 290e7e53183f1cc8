// Overlap-driven parallel reads with block verification (see reader.h).
#include "worker/checkpoint/reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>

#include "worker/checkpoint/crc32c.h"
#include "worker/checkpoint/io.h"
#include "worker/checkpoint/overlap.h"

namespace orrery::checkpoint {
namespace {

// A stretch of file bytes that goes to one place in a destination buffer.
struct Piece {
  uint64_t file_off = 0;
  uint64_t len = 0;
  char* dst = nullptr;
};

// One pread: a byte range of one chunk, the pieces inside it, and the blocks to check.
struct ReadOp {
  int file = 0;
  uint64_t off = 0;
  uint64_t len = 0;
  std::vector<Piece> pieces;
  const ChunkMeta* chunk = nullptr;
  uint64_t first_block =
      0;  // blocks [first_block, first_block + n) cover [off, off+len) when verifying
  bool verify = false;
  bool exact = false;  // verify by pieces (LoadOptions::exact)
};

// Runs `fn(i)` for i in [0, n) on up to `threads` threads; returns the first error.
Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  std::atomic<bool> failed{false};
  auto work = [&] {
    while (!failed.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        failed = true;
      }
    }
  };
  const int t = static_cast<int>(std::min<size_t>(n, static_cast<size_t>(std::max(1, threads))));
  std::vector<std::thread> pool;
  for (int i = 1; i < t; ++i) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  return first;
}

// Splits the pieces of one chunk (sorted by file offset) into read ops.
void PlanChunk(int file, const ChunkMeta& c, std::vector<Piece> pieces, const LoadOptions& opt,
               std::vector<ReadOp>& ops) {
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.file_off < b.file_off; });
  // Byte ranges to read: the pieces themselves, or the whole blocks they touch.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) in file bytes
  const uint64_t chunk_end = c.offset + c.bytes;
  for (const Piece& p : pieces) {
    uint64_t b = p.file_off, e = p.file_off + p.len;
    if (opt.verify && !opt.exact) {
      b = c.offset + (b - c.offset) / c.block_size * c.block_size;
      e = std::min(chunk_end,
                   c.offset + (e - c.offset + c.block_size - 1) / c.block_size * c.block_size);
    }
    if (!ranges.empty() && b <= ranges.back().second) {
      ranges.back().second = std::max(ranges.back().second, e);
    } else {
      ranges.emplace_back(b, e);
    }
  }
  // Cut ranges into ops of at most max_read (whole blocks when verifying).
  uint64_t step = std::max<uint64_t>(opt.max_read, 1);
  if (opt.verify) step = std::max<uint64_t>(step / c.block_size, 1) * c.block_size;
  const bool exact = opt.verify && opt.exact;
  size_t pi = 0;
  for (const auto& [rb, re] : ranges) {
    for (uint64_t b = rb; b < re; b += step) {
      ReadOp op;
      op.file = file;
      op.off = b;
      op.len = std::min(step, re - b);
      op.chunk = &c;
      op.verify = opt.verify && !exact;
      op.exact = exact;
      op.first_block = (b - c.offset) / c.block_size;
      const uint64_t e = op.off + op.len;
      // Pieces overlapping [b, e), cut at the op's edges.
      while (pi < pieces.size() && pieces[pi].file_off + pieces[pi].len <= b) ++pi;
      for (size_t k = pi; k < pieces.size() && pieces[k].file_off < e; ++k) {
        const Piece& p = pieces[k];
        const uint64_t s = std::max(p.file_off, b);
        const uint64_t t = std::min(p.file_off + p.len, e);
        if (s < t) op.pieces.push_back({s, t - s, p.dst + (s - p.file_off)});
      }
      ops.push_back(std::move(op));
    }
  }
}

// An exact read: the blocks of its chunk it covers whole are checked now; the
// pieces of blocks it covers in part are kept with their checksum terms.
Status CheckRead(const ReadOp& op, const std::string& path, const char* buf, std::mutex& mu,
                 std::vector<BlockPiece>& pieces) {
  const ChunkMeta& c = *op.chunk;
  const uint64_t first = (op.off - c.offset) / c.block_size;
  const uint64_t end = op.off + op.len;
  std::vector<BlockPiece> mine;
  for (uint64_t blk = first; c.offset + blk * c.block_size < end; ++blk) {
    const uint64_t bs = c.offset + blk * c.block_size;
    const uint64_t be = std::min(c.offset + c.bytes, bs + c.block_size);
    const uint64_t s = std::max(bs, op.off), e = std::min(be, end);
    if (blk >= c.block_crcs.size()) return DataLossError("shard file " + path + ": chunk index");
    if (s == bs && e == be) {
      if (Crc32c(buf + (s - op.off), e - s) != c.block_crcs[blk]) {
        return DataLossError("shard file " + path + " fails its checksum in bytes [" +
                             std::to_string(bs) + ", " + std::to_string(be) + ")");
      }
      continue;
    }
    BlockPiece p;
    p.file = op.file;
    p.block_offset = bs;
    p.block_length = be - bs;
    p.begin = s - bs;
    p.end = e - bs;
    p.term = Crc32cFragmentTerm(buf + (s - op.off), e - s, be - e);
    p.block_crc = c.block_crcs[blk];
    mine.push_back(p);
  }
  if (!mine.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    pieces.insert(pieces.end(), mine.begin(), mine.end());
  }
  return OkStatus();
}

}  // namespace

StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& dir, const Storage& storage) {
  const std::string path = JoinPath(dir, kMetadataFile);
  auto text = storage.ReadWhole(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no committed checkpoint in " + dir + " (" + path + " is missing)");
    }
    return text.status();
  }
  ORRERY_ASSIGN_OR_RETURN(Metadata m, MetadataFromJson(*text, path));
  CheckpointReader r;
  r.dir_ = dir;
  r.metadata_ = std::move(m);
  r.storage_ = &storage;
  return r;
}

std::string CheckpointReader::FilePath(int file) const {
  return JoinPath(dir_, metadata_.files[static_cast<size_t>(file)].name);
}

Status CheckpointReader::CheckFiles() const {
  for (size_t i = 0; i < metadata_.files.size(); ++i) {
    const std::string path = FilePath(static_cast<int>(i));
    auto size = storage_->Size(path);
    if (!size.ok()) {
      if (size.status().code() == StatusCode::kNotFound)
        return NotFoundError("shard file " + path + " is missing");
      return size.status();
    }
    if (*size != metadata_.files[i].size) {
      return DataLossError("shard file " + path + " has " + std::to_string(*size) +
                           " bytes, the metadata records " +
                           std::to_string(metadata_.files[i].size) +
                           (*size < metadata_.files[i].size ? " (truncated)" : ""));
    }
  }
  return OkStatus();
}

Status CheckpointReader::VerifyAll(int threads) const {
  ORRERY_RETURN_IF_ERROR(CheckFiles());
  // The whole-file CRC covers every byte, so one sequential pass per file suffices.
  return ParallelFor(metadata_.files.size(), threads, [&](size_t i) -> Status {
    const std::string path = FilePath(static_cast<int>(i));
    ORRERY_ASSIGN_OR_RETURN(auto f, storage_->OpenRead(path));
    std::vector<char> buf(8u << 20);
    uint32_t crc = 0;
    const uint64_t size = metadata_.files[i].size;
    for (uint64_t off = 0; off < size; off += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), size - off);
      ORRERY_RETURN_IF_ERROR(f->ReadAt(off, buf.data(), n));
      crc = Crc32cExtend(crc, buf.data(), n);
    }
    if (crc != metadata_.files[i].crc32c) {
      return DataLossError("shard file " + path + " fails its checksum (crc32c " +
                           std::to_string(crc) + ", metadata records " +
                           std::to_string(metadata_.files[i].crc32c) + ")");
    }
    return OkStatus();
  });
}

Status CheckpointReader::Load(const std::vector<LoadRequest>& requests, const LoadOptions& options,
                              LoadStats* stats, std::vector<BlockPiece>* partial) const {
  // Group the pieces by chunk: (tensor, chunk index) -> pieces.
  std::map<const ChunkMeta*, std::vector<Piece>> by_chunk;
  LoadStats local;
  for (const LoadRequest& req : requests) {
    const TensorMeta* t = metadata_.Find(req.name);
    if (t == nullptr) return NotFoundError("tensor " + req.name + " is not in checkpoint " + dir_);
    const uint64_t es = DTypeSize(t->spec.dtype);
    if (req.region.sizes.size() != t->spec.shape.size()) {
      return InvalidArgumentError("tensor " + req.name +
                                  ": requested region has the wrong number of dimensions");
    }
    if (req.dst_bytes < static_cast<uint64_t>(req.region.Numel()) * es) {
      return InvalidArgumentError("tensor " + req.name + ": destination buffer too small");
    }
    int64_t covered = 0;
    for (const ChunkMeta& c : t->chunks) {
      for (const CopyRun& run : Overlap(req.region, c.region)) {
        by_chunk[&c].push_back({c.offset + static_cast<uint64_t>(run.src) * es,
                                static_cast<uint64_t>(run.count) * es,
                                static_cast<char*>(req.dst) + static_cast<uint64_t>(run.dst) * es});
        covered += run.count;
      }
    }
    if (covered != req.region.Numel()) {
      return DataLossError("tensor " + req.name + ": checkpoint " + dir_ + " stores " +
                           std::to_string(covered) + " of the " +
                           std::to_string(req.region.Numel()) + " elements requested");
    }
    local.bytes_needed += static_cast<uint64_t>(req.region.Numel()) * es;
  }
  std::vector<ReadOp> ops;
  std::map<int, bool> files_used;
  for (auto& [chunk, pieces] : by_chunk) {
    PlanChunk(chunk->file, *chunk, std::move(pieces), options, ops);
    files_used[chunk->file] = true;
  }
  // Open each file once; preads from several threads share the descriptor.
  ORRERY_RETURN_IF_ERROR(CheckFiles());
  std::map<int, std::unique_ptr<ReadableFile>> files;
  for (const auto& [f, used] : files_used) {
    ORRERY_ASSIGN_OR_RETURN(auto file, storage_->OpenRead(FilePath(f)));
    files.emplace(f, std::move(file));
  }
  for (const ReadOp& op : ops) {
    local.bytes_read += op.len;
    local.reads += 1;
  }
  std::mutex pieces_mu;
  std::vector<BlockPiece> pieces;
  // Big ops first so the threads finish together.
  std::sort(ops.begin(), ops.end(), [](const ReadOp& a, const ReadOp& b) { return a.len > b.len; });
  Status s = ParallelFor(ops.size(), options.threads, [&](size_t i) -> Status {
    const ReadOp& op = ops[i];
    const ReadableFile& file = *files.at(op.file);
    const bool direct =
        op.pieces.size() == 1 && op.pieces[0].file_off == op.off && op.pieces[0].len == op.len;
    thread_local std::vector<char> bounce;
    char* buf;
    if (direct) {
      buf = op.pieces[0].dst;
    } else {
      if (bounce.size() < op.len) bounce.resize(op.len);
      buf = bounce.data();
    }
    if (op.exact) {
      ORRERY_RETURN_IF_ERROR(file.ReadAt(op.off, buf, op.len));
      ORRERY_RETURN_IF_ERROR(CheckRead(op, file.path(), buf, pieces_mu, pieces));
    } else if (!op.verify) {
      ORRERY_RETURN_IF_ERROR(file.ReadAt(op.off, buf, op.len));
    } else {
      // One block per read, checked while it is still in cache.
      const ChunkMeta& c = *op.chunk;
      for (uint64_t pos = 0, blk = op.first_block; pos < op.len; pos += c.block_size, ++blk) {
        const uint64_t n = std::min<uint64_t>(c.block_size, op.len - pos);
        ORRERY_RETURN_IF_ERROR(file.ReadAt(op.off + pos, buf + pos, n));
        const uint32_t crc = Crc32c(buf + pos, n);
        if (crc != c.block_crcs[blk]) {
          return DataLossError("shard file " + file.path() + " fails its checksum in bytes [" +
                               std::to_string(op.off + pos) + ", " +
                               std::to_string(op.off + pos + n) + ")");
        }
      }
    }
    if (!direct) {
      for (const Piece& p : op.pieces) std::memcpy(p.dst, buf + (p.file_off - op.off), p.len);
    }
    return OkStatus();
  });
  if (s.ok() && !pieces.empty()) {
    // Blocks this rank's own pieces tile are checked here; the rest go to the
    // caller, or are read whole.
    auto untiled = CheckBlockPieces(std::move(pieces), *this);
    if (!untiled.ok()) {
      s = untiled.status();
    } else if (partial != nullptr) {
      partial->insert(partial->end(), untiled->begin(), untiled->end());
    } else {
      s = CheckWholeBlocks(*untiled, &local);
    }
  }
  if (stats != nullptr) *stats += local;
  return s;
}

Status CheckpointReader::CheckWholeBlocks(const std::vector<BlockPiece>& pieces,
                                          LoadStats* stats) const {
  std::map<std::pair<int, uint64_t>, const BlockPiece*> blocks;
  for (const BlockPiece& p : pieces) blocks.emplace(std::make_pair(p.file, p.block_offset), &p);
  std::vector<char> buf;
  for (const auto& [key, p] : blocks) {
    if (p->file < 0 || static_cast<size_t>(p->file) >= metadata_.files.size())
      return InvalidArgumentError("block of an unknown file");
    ORRERY_ASSIGN_OR_RETURN(auto file, storage_->OpenRead(FilePath(p->file)));
    buf.resize(p->block_length);
    ORRERY_RETURN_IF_ERROR(file->ReadAt(p->block_offset, buf.data(), p->block_length));
    if (stats != nullptr) {
      stats->bytes_read += p->block_length;
      stats->reads += 1;
    }
    if (Crc32c(buf.data(), buf.size()) != p->block_crc) {
      return DataLossError("shard file " + file->path() + " fails its checksum in bytes [" +
                           std::to_string(p->block_offset) + ", " +
                           std::to_string(p->block_offset + p->block_length) + ")");
    }
  }
  return OkStatus();
}

StatusOr<std::vector<BlockPiece>> CheckBlockPieces(std::vector<BlockPiece> pieces,
                                                   const CheckpointReader& reader) {
  std::sort(pieces.begin(), pieces.end(), [](const BlockPiece& a, const BlockPiece& b) {
    return std::tie(a.file, a.block_offset, a.begin, a.end) <
           std::tie(b.file, b.block_offset, b.begin, b.end);
  });
  std::vector<BlockPiece> untiled;
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i;
    while (j < pieces.size() && pieces[j].file == pieces[i].file &&
           pieces[j].block_offset == pieces[i].block_offset)
      ++j;
    // Walk the block from its first byte, each step taking a piece that starts
    // where the last one ended (duplicates from replicas are skipped).
    uint64_t pos = 0;
    uint32_t terms = 0;
    const BlockPiece& first = pieces[i];
    auto damaged = [&](const BlockPiece& p) {
      return DataLossError("shard file " + reader.FilePath(p.file) +
                           " fails its checksum in bytes [" + std::to_string(p.block_offset) +
                           ", " + std::to_string(p.block_offset + p.block_length) + ")");
    };
    for (size_t k = i; k < j; ++k) {
      if (k > i && pieces[k].begin == pieces[k - 1].begin && pieces[k].end == pieces[k - 1].end) {
        // The same bytes read by another replica must have read the same.
        if (pieces[k].term != pieces[k - 1].term) return damaged(pieces[k]);
        continue;
      }
      if (pieces[k].begin == pos && pieces[k].end > pos) {
        terms ^= pieces[k].term;
        pos = pieces[k].end;
      }
    }
    if (pos == first.block_length) {
      if (Crc32cFromTerms(terms, first.block_length) != first.block_crc) return damaged(first);
    } else {
      untiled.insert(untiled.end(), pieces.begin() + static_cast<std::ptrdiff_t>(i),
                     pieces.begin() + static_cast<std::ptrdiff_t>(j));
    }
    i = j;
  }
  return untiled;
}

Status LoadRank(const CheckpointReader& reader, const std::vector<RankBuffer>& buffers,
                const Layout& layout, int rank, const StageFn& stages, const LoadOptions& options,
                LoadStats* stats, std::vector<BlockPiece>* partial) {
  std::vector<LoadRequest> requests;
  for (const RankBuffer& b : buffers) {
    const TensorMeta* t = reader.metadata().Find(b.spec.name);
    if (t == nullptr)
      return NotFoundError("tensor " + b.spec.name + " is not in checkpoint " + reader.dir());
    if (t->spec.shape != b.spec.shape || t->spec.dtype != b.spec.dtype) {
      return FailedPreconditionError("tensor " + b.spec.name +
                                     ": the checkpoint holds a different shape or dtype");
    }
    ORRERY_ASSIGN_OR_RETURN(LocalPiece piece, LocalPieceOf(b.spec, layout, rank, stages));
    if (!piece.present) continue;
    const uint64_t es = DTypeSize(b.spec.dtype);
    if (b.bytes != static_cast<uint64_t>(piece.buffer_elements) * es) {
      return InvalidArgumentError(
          "tensor " + b.spec.name + ": buffer has " + std::to_string(b.bytes) + " bytes, rank " +
          std::to_string(rank) + " holds " +
          std::to_string(static_cast<uint64_t>(piece.buffer_elements) * es));
    }
    const uint64_t valid = static_cast<uint64_t>(piece.region.Numel()) * es;
    if (b.bytes > valid) std::memset(static_cast<char*>(b.data) + valid, 0, b.bytes - valid);
    requests.push_back({b.spec.name, piece.region, b.data, valid});
  }
  return reader.Load(requests, options, stats, partial);
}

}  // namespace orrery::checkpoint
