// JSON codec of the checkpoint metadata, with the checks that make a damaged or
// foreign file fail with a clear message instead of a bad read later.
#include "worker/checkpoint/metadata.h"

#include <nlohmann/json.hpp>

namespace orrery::checkpoint {

using nlohmann::json;

const TensorMeta* Metadata::Find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

uint64_t Metadata::TotalTensorBytes() const {
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) {
    total += static_cast<uint64_t>(Numel(t.spec.shape)) * DTypeSize(t.spec.dtype);
  }
  return total;
}

std::string BlobKey(int rank, const std::string& name) {
  return "rank/" + std::to_string(rank) + "/" + name;
}

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

json RegionToJson(const Region& r) {
  return json{{"offsets", r.offsets},
              {"sizes", r.sizes},
              {"flat_begin", r.flat_begin},
              {"flat_end", r.flat_end}};
}

Region RegionFromJson(const json& j) {
  Region r;
  r.offsets = j.at("offsets").get<std::vector<int64_t>>();
  r.sizes = j.at("sizes").get<std::vector<int64_t>>();
  r.flat_begin = j.at("flat_begin").get<int64_t>();
  r.flat_end = j.at("flat_end").get<int64_t>();
  return r;
}

Status CheckChunk(const TensorMeta& t, const ChunkMeta& c, size_t num_files,
                  const std::string& where) {
  const auto& shape = t.spec.shape;
  if (c.file < 0 || static_cast<size_t>(c.file) >= num_files)
    return DataLossError(where + ": chunk names file index " + std::to_string(c.file) +
                         " that does not exist");
  if (c.region.offsets.size() != shape.size() || c.region.sizes.size() != shape.size()) {
    return DataLossError(where + ": chunk region has the wrong number of dimensions");
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (c.region.offsets[d] < 0 || c.region.sizes[d] < 0 ||
        c.region.offsets[d] + c.region.sizes[d] > shape[d]) {
      return DataLossError(where + ": chunk region lies outside the tensor's shape");
    }
  }
  if (c.region.flat_begin < 0 || c.region.flat_begin > c.region.flat_end ||
      c.region.flat_end > c.region.RectNumel()) {
    return DataLossError(where + ": chunk flat range lies outside its rectangle");
  }
  if (c.bytes != static_cast<uint64_t>(c.region.Numel()) * DTypeSize(t.spec.dtype)) {
    return DataLossError(where + ": chunk byte count does not match its region");
  }
  if (c.block_size == 0) return DataLossError(where + ": chunk block size is 0");
  if (c.block_crcs.size() != (c.bytes + c.block_size - 1) / c.block_size) {
    return DataLossError(where + ": chunk has " + std::to_string(c.block_crcs.size()) +
                         " block checksums, expected " +
                         std::to_string((c.bytes + c.block_size - 1) / c.block_size));
  }
  return OkStatus();
}

}  // namespace

std::string Base64Encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(const std::string& text) {
  if (text.size() % 4 != 0)
    return InvalidArgumentError("base64 text length is not a multiple of 4");
  auto value = [](char ch) -> int {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char ch = text[i + static_cast<size_t>(k)];
      if (ch == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        if (pad > 0) return InvalidArgumentError("base64 padding in the middle");
        v[k] = value(ch);
        if (v[k] < 0) return InvalidArgumentError("invalid base64 character");
      }
    }
    const uint32_t w = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out += static_cast<char>((w >> 16) & 0xFF);
    if (pad < 2) out += static_cast<char>((w >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(w & 0xFF);
  }
  return out;
}

std::string MetadataToJson(const Metadata& m) {
  json j;
  j["format"] = kFormatName;
  j["format_version"] = m.format_version;
  const CheckpointInfo& info = m.info;
  j["step"] = info.step;
  j["layout"] = {{"dp", info.layout.dp},
                 {"tp", info.layout.tp},
                 {"pp", info.layout.pp},
                 {"fsdp", info.layout.fsdp}};
  j["num_layers"] = info.num_layers;
  j["lr_schedule"] = info.lr_schedule;
  j["dataset"] = {{"seed", info.dataset.seed},
                  {"num_samples", info.dataset.num_samples},
                  {"epoch", info.dataset.epoch},
                  {"consumed", info.dataset.consumed}};
  j["extra"] = info.extra;
  json files = json::array();
  for (const auto& f : m.files) {
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"size", f.size}, {"crc32c", f.crc32c}});
  }
  j["files"] = std::move(files);
  json tensors = json::array();
  for (const auto& [name, t] : m.tensors) {
    json chunks = json::array();
    for (const auto& c : t.chunks) {
      chunks.push_back({{"file", c.file},
                        {"offset", c.offset},
                        {"bytes", c.bytes},
                        {"region", RegionToJson(c.region)},
                        {"block_size", c.block_size},
                        {"block_crcs", c.block_crcs}});
    }
    tensors.push_back({{"name", name},
                       {"shape", t.spec.shape},
                       {"dtype", DTypeName(t.spec.dtype)},
                       {"layer", t.spec.layer},
                       {"tp_dim", t.spec.tp_dim},
                       {"fsdp_sharded", t.spec.fsdp_sharded},
                       {"chunks", std::move(chunks)}});
  }
  j["tensors"] = std::move(tensors);
  json blobs = json::object();
  for (const auto& [key, bytes] : m.blobs) blobs[key] = Base64Encode(bytes);
  j["blobs"] = std::move(blobs);
  return j.dump(1);
}

StatusOr<Metadata> MetadataFromJson(const std::string& text, const std::string& source) {
  Metadata m;
  try {
    const json j = json::parse(text);
    if (!j.is_object() || j.value("format", std::string()) != kFormatName) {
      return DataLossError(source +
                           " is not an Orrery checkpoint metadata file (no \"format\": \"" +
                           kFormatName + "\")");
    }
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version > kFormatVersion) {
      return FailedPreconditionError(
          source + " has checkpoint format version " + std::to_string(m.format_version) +
          "; this build reads up to version " + std::to_string(kFormatVersion) +
          " (written by a newer Orrery)");
    }
    if (m.format_version < 1)
      return DataLossError(source + ": invalid format version " + std::to_string(m.format_version));
    CheckpointInfo& info = m.info;
    info.step = j.at("step").get<int64_t>();
    const json& l = j.at("layout");
    info.layout = {l.at("dp").get<int>(), l.at("tp").get<int>(), l.at("pp").get<int>(),
                   l.at("fsdp").get<int>()};
    if (Status s = info.layout.Validate(); !s.ok())
      return DataLossError(source + ": " + s.message());
    info.num_layers = j.at("num_layers").get<int>();
    info.lr_schedule = j.at("lr_schedule").get<std::map<std::string, double>>();
    const json& d = j.at("dataset");
    info.dataset.seed = d.at("seed").get<uint64_t>();
    info.dataset.num_samples = d.at("num_samples").get<int64_t>();
    info.dataset.epoch = d.at("epoch").get<int64_t>();
    info.dataset.consumed = d.at("consumed").get<int64_t>();
    info.extra = j.at("extra").get<std::map<std::string, std::string>>();
    for (const auto& f : j.at("files")) {
      m.files.push_back({f.at("name").get<std::string>(), f.at("rank").get<int>(),
                         f.at("size").get<uint64_t>(), f.at("crc32c").get<uint32_t>()});
      const std::string& name = m.files.back().name;
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
        return DataLossError(source + ": shard file name \"" + name +
                             "\" is not a plain file name");
      }
    }
    for (const auto& t : j.at("tensors")) {
      TensorMeta tm;
      tm.spec.name = t.at("name").get<std::string>();
      tm.spec.shape = t.at("shape").get<std::vector<int64_t>>();
      auto dtype = ParseDType(t.at("dtype").get<std::string>());
      if (!dtype.ok())
        return DataLossError(source + ": tensor " + tm.spec.name + ": " + dtype.status().message());
      tm.spec.dtype = *dtype;
      tm.spec.layer = t.at("layer").get<int>();
      tm.spec.tp_dim = t.at("tp_dim").get<int>();
      tm.spec.fsdp_sharded = t.at("fsdp_sharded").get<bool>();
      for (int64_t s : tm.spec.shape) {
        if (s < 0)
          return DataLossError(source + ": tensor " + tm.spec.name + " has a negative dimension");
      }
      for (const auto& c : t.at("chunks")) {
        ChunkMeta cm;
        cm.file = c.at("file").get<int>();
        cm.offset = c.at("offset").get<uint64_t>();
        cm.bytes = c.at("bytes").get<uint64_t>();
        cm.region = RegionFromJson(c.at("region"));
        cm.block_size = c.at("block_size").get<uint64_t>();
        cm.block_crcs = c.at("block_crcs").get<std::vector<uint32_t>>();
        ORRERY_RETURN_IF_ERROR(
            CheckChunk(tm, cm, m.files.size(), source + ": tensor " + tm.spec.name));
        if (cm.offset + cm.bytes > m.files[static_cast<size_t>(cm.file)].size) {
          return DataLossError(source + ": tensor " + tm.spec.name +
                               ": chunk runs past the end of " +
                               m.files[static_cast<size_t>(cm.file)].name);
        }
        tm.chunks.push_back(std::move(cm));
      }
      std::string name = tm.spec.name;
      if (!m.tensors.emplace(name, std::move(tm)).second)
        // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
        return DataLossError(source + ": tensor " + name + " listed twice");
    }
    for (const auto& [key, value] : j.at("blobs").items()) {
      auto bytes = Base64Decode(value.get<std::string>());
      if (!bytes.ok())
        // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
        return DataLossError(source + ": blob " + key + ": " + bytes.status().message());
      m.blobs[key] = *std::move(bytes);
    }
  } catch (const json::exception& e) {
    return DataLossError(source + ": malformed checkpoint metadata: " + e.what());
  }
  return m;
}

}  // namespace orrery::checkpoint
