// Inspect and offline reshard (see reshard.h).
#include "worker/checkpoint/reshard.h"

#include <cinttypes>
#include <cstdio>
#include <vector>

#include "worker/checkpoint/io.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {

namespace {
std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string RegionString(const Region& r) {
  std::string s = "offsets " + ShapeString(r.offsets) + " sizes " + ShapeString(r.sizes);
  if (r.flat_begin != 0 || r.flat_end != r.RectNumel()) {
    s += " flat [" + std::to_string(r.flat_begin) + "," + std::to_string(r.flat_end) + ")";
  }
  return s;
}
}  // namespace

Status Inspect(const std::string& dir, const InspectOptions& options, std::ostream& out) {
  ORRERY_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(dir));
  const Metadata& m = reader.metadata();
  const CheckpointInfo& info = m.info;
  out << "checkpoint " << dir << "\n";
  out << "  format version " << m.format_version << ", step " << info.step << "\n";
  out << "  layout " << info.layout.ToString() << " (world " << info.layout.World() << "), "
      << info.num_layers << " layers\n";
  out << "  dataset seed " << info.dataset.seed << ", " << info.dataset.num_samples
      << " samples, epoch " << info.dataset.epoch << ", consumed " << info.dataset.consumed << "\n";
  if (!info.lr_schedule.empty()) {
    out << "  lr schedule";
    for (const auto& [k, v] : info.lr_schedule) out << " " << k << "=" << v;
    out << "\n";
  }
  for (const auto& [k, v] : info.extra) out << "  " << k << ": " << v << "\n";
  if (!m.blobs.empty()) {
    uint64_t b = 0;
    for (const auto& [k, v] : m.blobs) b += v.size();
    out << "  blobs " << m.blobs.size() << " (" << HumanBytes(b) << ")\n";
  }
  uint64_t file_bytes = 0;
  for (const auto& f : m.files) file_bytes += f.size;
  out << "files: " << m.files.size() << ", " << HumanBytes(file_bytes) << "\n";
  for (const auto& f : m.files) {
    char crc[16];
    std::snprintf(crc, sizeof(crc), "%08" PRIx32, f.crc32c);
    out << "  " << f.name << "  rank " << f.rank << "  " << HumanBytes(f.size) << "  crc32c " << crc
        << "\n";
  }
  out << "tensors: " << m.tensors.size() << ", " << HumanBytes(m.TotalTensorBytes()) << "\n";
  for (const auto& [name, t] : m.tensors) {
    out << "  " << name << "  " << DTypeName(t.spec.dtype) << ShapeString(t.spec.shape) << "  "
        << HumanBytes(static_cast<uint64_t>(Numel(t.spec.shape)) * DTypeSize(t.spec.dtype))
        << "  layer " << t.spec.layer << "  tp_dim " << t.spec.tp_dim
        << (t.spec.fsdp_sharded ? "  fsdp" : "") << "  chunks " << t.chunks.size() << "\n";
    if (options.list_chunks) {
      for (const auto& c : t.chunks) {
        out << "    " << m.files[static_cast<size_t>(c.file)].name << " @" << c.offset << " "
            << c.bytes << " B  " << RegionString(c.region) << "\n";
      }
    }
  }
  if (!options.verify) {
    Status s = reader.CheckFiles();
    out << "files: "
        << (s.ok() ? "present with recorded sizes (checksums not read)" : "FAILED: " + s.ToString())
        << "\n";
    return s;
  }
  Status s = reader.VerifyAll(options.threads);
  out << "checksums: " << (s.ok() ? "ok" : "FAILED: " + s.ToString()) << "\n";
  return s;
}

Status Reshard(const std::string& from, const Layout& to, const std::string& out,
               const ReshardOptions& options, LoadStats* stats) {
  ORRERY_RETURN_IF_ERROR(to.Validate());
  ORRERY_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(from));
  if (PathExists(JoinPath(out, kMetadataFile))) {
    return AlreadyExistsError("output " + out + " already holds a committed checkpoint");
  }
  const Metadata& m = reader.metadata();
  const StageFn stages = BalancedStages(m.info.num_layers);
  LoadOptions lo;
  lo.threads = options.threads;
  lo.verify = options.verify;
  std::vector<char> buf;
  for (int r = 0; r < to.World(); ++r) {
    ORRERY_ASSIGN_OR_RETURN(auto w, ShardWriter::Create(out, to, r, stages, options.block_size));
    // One tensor at a time keeps memory at the largest local piece.
    for (const auto& [name, t] : m.tensors) {
      ORRERY_ASSIGN_OR_RETURN(LocalPiece piece, LocalPieceOf(t.spec, to, r, stages));
      if (!piece.present) continue;
      const uint64_t es = DTypeSize(t.spec.dtype);
      buf.assign(static_cast<size_t>(piece.buffer_elements) * es, 0);
      if (piece.writer) {
        ORRERY_RETURN_IF_ERROR(reader.Load(
            {{name, piece.region, buf.data(), static_cast<uint64_t>(piece.region.Numel()) * es}},
            lo, stats));
      }
      ORRERY_RETURN_IF_ERROR(w->Add(t.spec, buf.data(), buf.size()));
    }
    ORRERY_RETURN_IF_ERROR(w->Finish());
  }
  CheckpointInfo info = m.info;
  info.layout = to;
  info.extra["resharded_from"] = m.info.layout.ToString();
  return CommitCheckpoint(out, info, m.blobs);
}

}  // namespace orrery::checkpoint
