// Reading and writing Hugging Face safetensors files (see safetensors.h): header
// validation, the directory/index/shard resolution transformers uses, block reads
// that touch only a slice's bytes, float32 <-> bf16/fp16 conversion, and the
// atomic, streamed export.
#include "worker/hf/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

namespace orrery::hf {
namespace {

using checkpoint::DType;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; Orrery reads it by copying bytes");

constexpr const char* kResaveHint =
    "re-save the model with save_pretrained(safe_serialization=True)";
// JSON nesting deeper than this is not a safetensors header (entries nest 2 deep);
// refusing it keeps a hostile header from exhausting the stack.
constexpr int kMaxJsonDepth = 16;
// Elements converted per batch when the source is wider than float32 (F64).
constexpr uint64_t kConvertBatch = 1 << 16;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr std::array<DTypeName, 10> kDTypeNames = {{
    {DType::kFloat32, "F32"},
    {DType::kFloat16, "F16"},
    {DType::kBFloat16, "BF16"},
    {DType::kFloat64, "F64"},
    {DType::kInt64, "I64"},
    {DType::kInt32, "I32"},
    {DType::kInt16, "I16"},
    {DType::kInt8, "I8"},
    {DType::kUInt8, "U8"},
    {DType::kBool, "BOOL"},
}};
// Valid safetensors dtypes Orrery does not read: named so the error says "not
// supported" rather than "corrupt".
constexpr std::array<const char*, 12> kOtherSafetensorsDTypes = {
    "U16",         "U32",         "U64",     "C64", "F8_E5M2", "F8_E4M3",
    "F8_E5M2FNUZ", "F8_E4M3FNUZ", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2"};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Concatenates strings (and string literals) into one allocation.
template <typename... Parts>
std::string StrCat(const Parts&... parts) {
  std::string out;
  (out.append(parts), ...);
  return out;
}

// A JSON value's text for an error message, cut short.
std::string Excerpt(const json& j) {
  std::string s = j.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The deepest nesting of arrays and objects in `text`, outside strings.
int JsonDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

// A non-negative integer that fits in uint64 (JSON numbers like 3.0 or -1 are not).
bool AsUnsigned(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

Status BadEntry(const std::string& file, const std::string& name, const std::string& what) {
  return DataLossError(file + ": tensor " + Quoted(name) + " " + what +
                       "; the file is corrupt or was not written by safetensors: " + kResaveHint);
}

// One header entry: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
// Offsets come back relative to the data section, checked against its size.
Status ParseEntry(const std::string& file, const std::string& name, const json& j,
                  uint64_t data_size, TensorInfo* t, uint64_t* begin, uint64_t* end) {
  t->name = name;
  t->file = file;
  if (!j.is_object()) return BadEntry(file, name, "is not a JSON object but " + Excerpt(j));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(key)) return BadEntry(file, name, std::string("has no \"") + key + "\"");
  }
  const json& dtype = j["dtype"];
  if (!dtype.is_string()) return BadEntry(file, name, "has a dtype that is not a string");
  auto parsed = ParseSafetensorsDType(dtype.get<std::string>());
  if (!parsed.ok()) {
    return Status(parsed.status().code(),
                  file + ": tensor " + Quoted(name) + ": " + parsed.status().message());
  }
  t->dtype = *parsed;

  const json& shape = j["shape"];
  if (!shape.is_array()) return BadEntry(file, name, "has a shape that is not an array");
  uint64_t numel = 1;
  for (const json& d : shape) {
    uint64_t dim = 0;
    if (!AsUnsigned(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
      return BadEntry(
          file, name,
          "has shape " + Excerpt(shape) + ", whose dimensions are not all non-negative integers");
    }
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      return BadEntry(file, name, "has shape " + Excerpt(shape) + ", too large to address");
    }
    t->shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, checkpoint::DTypeSize(t->dtype), &bytes)) {
    return BadEntry(file, name, "has shape " + Excerpt(shape) + ", too large to address");
  }

  const json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !AsUnsigned(offsets[0], begin) ||
      !AsUnsigned(offsets[1], end)) {
    return BadEntry(file, name,
                    "has data_offsets " + Excerpt(offsets) +
                        ", not a pair of non-negative integers [begin, end]");
  }
  if (*begin > *end) {
    return BadEntry(file, name, "has data_offsets " + Excerpt(offsets) + " with begin > end");
  }
  if (*end > data_size) {
    return BadEntry(file, name,
                    "has data_offsets " + Excerpt(offsets) + " past the end of the file (" +
                        std::to_string(data_size) +
                        " bytes of tensor data); the file is truncated: re-download it or " +
                        kResaveHint);
  }
  if (*end - *begin != bytes) {
    return BadEntry(file, name,
                    "has data_offsets " + Excerpt(offsets) + " (" + std::to_string(*end - *begin) +
                        " bytes) but shape " + ShapeString(t->shape) + " of " +
                        SafetensorsDTypeName(t->dtype) + " needs " + std::to_string(bytes) +
                        " bytes");
  }
  return OkStatus();
}

std::string AbsolutePath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return path;
  return p.lexically_normal().string();
}

std::string DirName(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// ---- float conversions

uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
float BitsFloat(uint32_t b) { return std::bit_cast<float>(b); }

// Converts `count` 2-byte values stored at byte offset 2*count of `out` into
// floats at `out`, in place. Walking forward is safe: float i overwrites the
// sources of elements at most i, and element i's source is read first.
template <float (*Convert)(uint16_t)>
void ExpandInPlace(float* out, uint64_t count) {
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  const unsigned char* src = bytes + 2 * count;
  for (uint64_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    const float f = Convert(h);
    std::memcpy(bytes + 4 * i, &f, sizeof f);
  }
}

// Packs float32 values into the output dtype's little-endian bytes.
void Narrow(const float* in, uint64_t count, DType dtype, unsigned char* out) {
  switch (dtype) {
    case DType::kBFloat16:
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t h = Float32ToBFloat16(in[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::kFloat16:
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t h = Float32ToFloat16(in[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default: return;  // F32 is written as is; WriteSafetensors refuses other dtypes
  }
}

// ---- export helpers

// A file name save_pretrained writes for weights (or the .tmp this writer uses
// for one): the files a new export replaces or removes.
bool IsExportFileName(const std::string& name) {
  std::string base = name;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".tmp") == 0) {
    base.resize(base.size() - 4);
  }
  if (base == kSingleFileName || base == kIndexFileName) return true;
  // model-00001-of-00003.safetensors
  static constexpr std::string_view kPrefix = "model-", kMid = "-of-", kSuffix = ".safetensors";
  const size_t digits = 5;
  if (base.size() != kPrefix.size() + digits + kMid.size() + digits + kSuffix.size()) return false;
  auto all_digits = [&](size_t at) {
    return std::all_of(base.begin() + static_cast<std::ptrdiff_t>(at),
                       base.begin() + static_cast<std::ptrdiff_t>(at + digits),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  return base.starts_with(kPrefix) && all_digits(kPrefix.size()) &&
         base.compare(kPrefix.size() + digits, kMid.size(), kMid) == 0 &&
         all_digits(kPrefix.size() + digits + kMid.size()) && base.ends_with(kSuffix);
}

Status RemoveIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return InternalError("cannot remove " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

struct PlannedTensor {
  const TensorToWrite* tensor;
  uint64_t numel;
  uint64_t begin;  // relative to the data section
  uint64_t end;
};

struct PlannedFile {
  std::string name;
  std::vector<PlannedTensor> tensors;  // in file order (by name)
  std::string header;                  // padded JSON
};

// The header JSON of one file, laid out as the safetensors library writes it:
// "__metadata__" first, then the tensors in data order; padded with spaces to a
// multiple of 8 bytes so the data that follows is aligned.
std::string BuildHeader(const PlannedFile& f, DType dtype,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  for (const PlannedTensor& t : f.tensors) {
    nlohmann::ordered_json e;
    e["dtype"] = SafetensorsDTypeName(dtype);
    e["shape"] = t.tensor->shape;
    e["data_offsets"] = {t.begin, t.end};
    h[t.tensor->name] = std::move(e);
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

Status WriteDataFile(const std::string& path, const PlannedFile& f, DType dtype) {
  ORRERY_ASSIGN_OR_RETURN(checkpoint::File out, checkpoint::File::Create(path));
  unsigned char length[8];
  const uint64_t n = f.header.size();
  std::memcpy(length, &n, 8);
  ORRERY_RETURN_IF_ERROR(out.Append(length, 8));
  ORRERY_RETURN_IF_ERROR(out.Append(f.header.data(), f.header.size()));
  std::vector<float> values;
  std::vector<unsigned char> bytes;
  for (const PlannedTensor& t : f.tensors) {
    values.assign(t.numel, 0.0f);
    Status filled = t.tensor->fill(values.data());
    if (!filled.ok()) return filled.WithContext("filling tensor " + t.tensor->name);
    if (dtype == DType::kFloat32) {
      ORRERY_RETURN_IF_ERROR(out.Append(values.data(), t.end - t.begin));
      continue;
    }
    bytes.resize(t.end - t.begin);
    Narrow(values.data(), t.numel, dtype, bytes.data());
    ORRERY_RETURN_IF_ERROR(out.Append(bytes.data(), bytes.size()));
  }
  ORRERY_RETURN_IF_ERROR(out.Sync());
  return out.Close();
}

Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return InternalError("cannot rename " + from + " to " + to + ": " + std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace

// ---- public small pieces

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* SafetensorsDTypeName(DType dtype) {
  for (const auto& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

StatusOr<DType> ParseSafetensorsDType(std::string_view name) {
  for (const auto& d : kDTypeNames) {
    if (name == d.name) return d.dtype;
  }
  for (const char* other : kOtherSafetensorsDTypes) {
    if (name == other) {
      return InvalidArgumentError("dtype " + Quoted(name) +
                                  " is not supported by Orrery (it reads F32, F16, BF16, F64, "
                                  "I64, I32, I16, I8, U8 and BOOL); convert the model, e.g. "
                                  "model.to(torch.bfloat16).save_pretrained(...)");
    }
  }
  return DataLossError("unknown safetensors dtype " + Quoted(name) +
                       "; the file is corrupt or was not written by safetensors: " + kResaveHint);
}

uint16_t Float32ToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN, as c10::BFloat16 makes it
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float BFloat16ToFloat32(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t Float32ToFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;  // NaN
  // 65520 (0x477FF000) lies halfway between 65504, the largest half, and 65536;
  // ties go to even, which is infinity.
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, in units of 2^-24.
    // Half of the smallest subnormal (2^-25) and below round to zero.
    if (abs <= 0x33000000u) return sign;
    const uint32_t exponent = abs >> 23;  // 102..112
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t q = mantissa >> shift;
    const uint32_t rem = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((abs >> 23) - 112) << 10 | ((abs & 0x7FFFFFu) >> 13);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0)) ++h;  // a carry bumps the exponent
  return static_cast<uint16_t>(sign | h);
}

float Float16ToFloat32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return BitsFloat(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal: normalise.
  uint32_t e = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return BitsFloat(sign | (e << 23) | ((mantissa & 0x3FFu) << 13));
}

std::string ShardFileName(int k, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k, n);
  return buf;
}

// ---- header parsing

StatusOr<uint64_t> ParseHeaderLength(std::string_view first_bytes, uint64_t file_size,
                                     const std::string& file) {
  if (first_bytes.size() < 8 || file_size < 8) {
    return DataLossError(file + " is " + std::to_string(file_size) +
                         " bytes, too short for a safetensors file (8-byte header length "
                         "first); it is truncated or not safetensors: " +
                         kResaveHint);
  }
  uint64_t n = 0;
  std::memcpy(&n, first_bytes.data(), 8);
  if (n > kMaxHeaderBytes) {
    return DataLossError(file + " declares a header of " + std::to_string(n) +
                         " bytes, more than the " + std::to_string(kMaxHeaderBytes) +
                         " allowed; it is not a safetensors file or is corrupt: " + kResaveHint);
  }
  if (n > file_size - 8) {
    return DataLossError(file + " declares a header of " + std::to_string(n) +
                         " bytes but the file has only " + std::to_string(file_size - 8) +
                         " after the length; it is truncated: re-download it or " + kResaveHint);
  }
  return n;
}

StatusOr<ParsedHeader> ParseHeader(std::string_view header, uint64_t file_size,
                                   const std::string& file) {
  if (file_size < 8 + header.size()) {
    return InvalidArgumentError(file + ": header of " + std::to_string(header.size()) +
                                " bytes does not fit a file of " + std::to_string(file_size));
  }
  const uint64_t data_size = file_size - 8 - header.size();
  if (header.empty() || header.front() != '{') {
    return DataLossError(file +
                         ": the header does not start with '{' (a JSON object); it is "
                         "not a safetensors file or is corrupt: " +
                         std::string(kResaveHint));
  }
  if (JsonDepth(header) > kMaxJsonDepth) {
    return DataLossError(file + ": the header nests JSON more than " +
                         std::to_string(kMaxJsonDepth) + " deep; it is not a safetensors header");
  }
  // Duplicate names are refused (JSON parsers disagree on which one wins).
  std::string duplicate;
  std::set<std::string> keys;
  json::parser_callback_t on_key = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json root;
  try {
    root = json::parse(header.begin(), header.end(), on_key);
  } catch (const json::exception& e) {
    return DataLossError(file + ": the header is not valid JSON (" + e.what() +
                         "); the file is corrupt or not safetensors: " + kResaveHint);
  }
  if (!root.is_object()) {
    return DataLossError(file + ": the header is not a JSON object; " + kResaveHint);
  }
  if (!duplicate.empty()) {
    return DataLossError(file + ": the header lists " + Quoted(duplicate) +
                         " twice; the file is corrupt: " + kResaveHint);
  }

  ParsedHeader out;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (value.is_null()) continue;  // the Python library reads null as "no metadata"
      if (!value.is_object()) {
        return DataLossError(file + ": \"__metadata__\" is not a JSON object of strings; " +
                             kResaveHint);
      }
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return DataLossError(file + ": \"__metadata__\" entry " + Quoted(k) +
                               " is not a string but " + Excerpt(v) + "; " + kResaveHint);
        }
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    TensorInfo t;
    uint64_t begin = 0, end = 0;
    ORRERY_RETURN_IF_ERROR(ParseEntry(file, name, value, data_size, &t, &begin, &end));
    const uint64_t data_start = 8 + header.size();
    t.data_begin = data_start + begin;
    t.data_end = data_start + end;
    ranges.push_back({begin, end, out.tensors.size()});
    out.tensors.push_back(std::move(t));
  }

  // The tensors must tile the data section exactly, as the Python library demands.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t at = 0;
  const std::string* previous = nullptr;
  for (const Range& r : ranges) {
    const std::string& name = out.tensors[r.index].name;
    if (r.begin < at) {
      return DataLossError(file + ": tensors " + Quoted(*previous) + " and " + Quoted(name) +
                           " overlap (data offset " + std::to_string(r.begin) + " < " +
                           std::to_string(at) + "); the file is corrupt: " + kResaveHint);
    }
    if (r.begin > at) {
      return DataLossError(file + ": " + std::to_string(r.begin - at) + " bytes before tensor " +
                           Quoted(name) +
                           " belong to no tensor (data offsets must be contiguous); the "
                           "file is corrupt: " +
                           kResaveHint);
    }
    at = r.end;
    previous = &name;
  }
  if (at != data_size) {
    return DataLossError(file + ": " + std::to_string(data_size - at) +
                         " bytes after the last tensor belong to no tensor (the header "
                         "accounts for " +
                         std::to_string(at) + " of " + std::to_string(data_size) +
                         " data bytes); the file is corrupt: " + kResaveHint);
  }
  std::vector<TensorInfo> sorted;
  sorted.reserve(ranges.size());
  for (const Range& r : ranges) sorted.push_back(std::move(out.tensors[r.index]));
  out.tensors = std::move(sorted);
  return out;
}

// ---- reader

SafetensorsReader::~SafetensorsReader() = default;

StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(const std::string& path) {
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader());
  r->source_ = path;
  if (IsDirectory(path)) {
    const std::string single = checkpoint::JoinPath(path, kSingleFileName);
    const std::string index = checkpoint::JoinPath(path, kIndexFileName);
    if (IsRegularFile(single)) {
      ORRERY_RETURN_IF_ERROR(r->OpenFile(single, nullptr));
    } else if (IsRegularFile(index)) {
      ORRERY_RETURN_IF_ERROR(r->OpenIndex(index));
    } else {
      std::string why = "the model directory " + path + " holds neither " + kSingleFileName +
                        " nor " + kIndexFileName;
      if (checkpoint::PathExists(checkpoint::JoinPath(path, "pytorch_model.bin")) ||
          checkpoint::PathExists(checkpoint::JoinPath(path, "pytorch_model.bin.index.json"))) {
        why += " (it holds pytorch_model.bin, a pickle, which Orrery does not load)";
      }
      return NotFoundError(why + "; " + kResaveHint);
    }
  } else if (!checkpoint::PathExists(path)) {
    return NotFoundError("no model at " + path +
                         ": give a Hugging Face model directory (config.json and "
                         "model.safetensors or model.safetensors.index.json) or a .safetensors "
                         "file");
  } else if (path.ends_with(".index.json")) {
    ORRERY_RETURN_IF_ERROR(r->OpenIndex(path));
  } else {
    ORRERY_RETURN_IF_ERROR(r->OpenFile(path, nullptr));
  }
  return r;
}

Status SafetensorsReader::OpenFile(const std::string& path, std::vector<std::string>* names) {
  const std::string abs = AbsolutePath(path);
  ORRERY_ASSIGN_OR_RETURN(checkpoint::File f, checkpoint::File::OpenRead(abs));
  ORRERY_ASSIGN_OR_RETURN(uint64_t size, f.Size());
  char first[8] = {};
  if (size >= 8) ORRERY_RETURN_IF_ERROR(f.ReadAt(0, first, 8));
  ORRERY_ASSIGN_OR_RETURN(uint64_t n, ParseHeaderLength(std::string_view(first, 8), size, abs));
  std::string header(n, '\0');
  ORRERY_RETURN_IF_ERROR(f.ReadAt(8, header.data(), n));
  ORRERY_ASSIGN_OR_RETURN(ParsedHeader parsed, ParseHeader(header, size, abs));
  if (files_.empty()) metadata_ = parsed.metadata;
  const size_t file_index = files_.size();
  files_.push_back(std::move(f));
  for (TensorInfo& t : parsed.tensors) {
    auto [it, inserted] = tensors_.try_emplace(t.name);
    if (!inserted) {
      return DataLossError("tensor " + Quoted(t.name) + " is in both " + it->second.info.file +
                           " and " + abs + "; the model's shards overlap: " + kResaveHint);
    }
    if (names != nullptr) names->push_back(t.name);
    it->second.info = std::move(t);
    it->second.file = file_index;
  }
  return OkStatus();
}

Status SafetensorsReader::OpenIndex(const std::string& index_path) {
  const std::string abs_index = AbsolutePath(index_path);
  const std::string dir = DirName(abs_index);
  ORRERY_ASSIGN_OR_RETURN(std::string text, checkpoint::ReadWholeFile(abs_index));
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    return DataLossError(abs_index + " is not valid JSON (" + e.what() + "); " + kResaveHint);
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return DataLossError(abs_index +
                         " has no \"weight_map\" object mapping tensor names to "
                         "shard files; " +
                         std::string(kResaveHint));
  }
  // Shard file -> the tensors the index puts there.
  std::map<std::string, std::set<std::string>> expected;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      return DataLossError(abs_index + ": weight_map entry " + Quoted(name) +
                           " is not a file name but " + Excerpt(file) + "; " + kResaveHint);
    }
    const std::string shard = file.get<std::string>();
    const std::filesystem::path p(shard);
    const bool escapes = std::any_of(p.begin(), p.end(), [](const auto& c) { return c == ".."; });
    if (shard.empty() || p.is_absolute() || escapes) {
      return DataLossError(abs_index + ": weight_map puts tensor " + Quoted(name) + " in " +
                           Quoted(shard) +
                           ", which is not a file name inside the model directory; " + kResaveHint);
    }
    expected[shard].insert(name);
  }
  if (expected.empty()) {
    return DataLossError(abs_index + " has an empty weight_map; " + std::string(kResaveHint));
  }
  for (const auto& [shard, names] : expected) {
    const std::string path = checkpoint::JoinPath(dir, shard);
    if (!IsRegularFile(path)) {
      return NotFoundError(StrCat(abs_index, " names shard ", shard, " (holding tensor ",
                                  Quoted(*names.begin()), ") but ", path,
                                  " does not exist; the download is incomplete: re-download the "
                                  "model, or ",
                                  kResaveHint));
    }
    std::vector<std::string> held;
    ORRERY_RETURN_IF_ERROR(OpenFile(path, &held));
    for (const std::string& name : held) {
      if (names.count(name) == 0) {
        auto it = index["weight_map"].find(name);
        return DataLossError(StrCat(path, " holds tensor ", Quoted(name), " but ", abs_index,
                                    it == index["weight_map"].end()
                                        ? std::string(" does not list it")
                                        : " puts it in " + it->get<std::string>(),
                                    "; the index and the shards disagree: ", kResaveHint));
      }
    }
    if (held.size() != names.size()) {
      std::set<std::string> held_set(held.begin(), held.end());
      for (const std::string& name : names) {
        if (held_set.count(name) == 0) {
          return DataLossError(
              StrCat(abs_index, " puts tensor ", Quoted(name), " in ", shard, " but ", path,
                     " does not hold it; the index and the shards disagree: ", kResaveHint));
        }
      }
    }
  }
  return OkStatus();
}

const TensorInfo* SafetensorsReader::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second.info;
}

std::vector<std::string> SafetensorsReader::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, e] : tensors_) names.push_back(name);
  return names;
}

StatusOr<const SafetensorsReader::Entry*> SafetensorsReader::Lookup(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return NotFoundError("tensor " + Quoted(name) + " is not in the model at " + source_ + " (" +
                         std::to_string(tensors_.size()) +
                         " tensors); check the checkpoint matches the model's architecture "
                         "and naming");
  }
  const DType d = it->second.info.dtype;
  if (d != DType::kFloat32 && d != DType::kFloat16 && d != DType::kBFloat16 &&
      d != DType::kFloat64) {
    return InvalidArgumentError("tensor " + Quoted(name) + " in " + it->second.info.file +
                                " has dtype " + SafetensorsDTypeName(d) +
                                ", not a floating-point type; it cannot be read as float32");
  }
  return &it->second;
}

Status SafetensorsReader::ReadElements(const Entry& e, uint64_t first, uint64_t count,
                                       float* out) const {
  if (count == 0) return OkStatus();
  const TensorInfo& t = e.info;
  const uint64_t size = checkpoint::DTypeSize(t.dtype);
  const uint64_t offset = t.data_begin + first * size;
  const checkpoint::File& f = files_[e.file];
  auto read = [&](uint64_t at, void* dst, uint64_t bytes) -> Status {
    Status s = f.ReadAt(at, dst, bytes);
    if (!s.ok()) {
      return Status(s.code(), "reading tensor " + Quoted(t.name) + ": " + s.message() +
                                  " (the file changed after the model was opened; re-download "
                                  "or re-save it)");
    }
    bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
    return OkStatus();
  };
  switch (t.dtype) {
    case DType::kFloat32: return read(offset, out, count * 4);
    case DType::kBFloat16:
      ORRERY_RETURN_IF_ERROR(read(offset, reinterpret_cast<char*>(out) + 2 * count, count * 2));
      ExpandInPlace<BFloat16ToFloat32>(out, count);
      return OkStatus();
    case DType::kFloat16:
      ORRERY_RETURN_IF_ERROR(read(offset, reinterpret_cast<char*>(out) + 2 * count, count * 2));
      ExpandInPlace<Float16ToFloat32>(out, count);
      return OkStatus();
    case DType::kFloat64: {
      std::vector<double> buf(std::min(count, kConvertBatch));
      for (uint64_t done = 0; done < count;) {
        const uint64_t n = std::min<uint64_t>(count - done, buf.size());
        ORRERY_RETURN_IF_ERROR(read(offset + done * 8, buf.data(), n * 8));
        for (uint64_t i = 0; i < n; ++i) out[done + i] = static_cast<float>(buf[i]);
        done += n;
      }
      return OkStatus();
    }
    default: return InternalError("unreachable: dtype checked by Lookup");
  }
}

Status SafetensorsReader::ReadFloat32(const std::string& name, const Block& block,
                                      float* out) const {
  ORRERY_ASSIGN_OR_RETURN(const Entry* e, Lookup(name));
  const std::vector<int64_t>& shape = e->info.shape;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t ncols = 1;  // a row is everything after dim 0
  for (size_t i = 1; i < shape.size(); ++i) ncols *= shape[i];
  const int64_t r0 = block.row_begin, r1 = block.row_end == -1 ? rows : block.row_end;
  const int64_t c0 = block.col_begin, c1 = block.col_end == -1 ? ncols : block.col_end;
  if (r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > ncols) {
    return InvalidArgumentError(
        "block rows [" + std::to_string(block.row_begin) + ", " + std::to_string(block.row_end) +
        ") cols [" + std::to_string(block.col_begin) + ", " + std::to_string(block.col_end) +
        ") is out of range for tensor " + Quoted(name) + " of shape " + ShapeString(shape) +
        " (seen as " + std::to_string(rows) + " rows x " + std::to_string(ncols) +
        " cols; -1 as an end means all)");
  }
  const auto width = static_cast<uint64_t>(c1 - c0);
  if (c0 == 0 && c1 == ncols) {
    return ReadElements(*e, static_cast<uint64_t>(r0) * width,
                        static_cast<uint64_t>(r1 - r0) * width, out);
  }
  for (int64_t r = r0; r < r1; ++r) {
    ORRERY_RETURN_IF_ERROR(ReadElements(
        *e, static_cast<uint64_t>(r) * static_cast<uint64_t>(ncols) + static_cast<uint64_t>(c0),
        width, out + static_cast<uint64_t>(r - r0) * width));
  }
  return OkStatus();
}

Status SafetensorsReader::ReadFlatFloat32(const std::string& name, int64_t begin, int64_t end,
                                          float* out) const {
  ORRERY_ASSIGN_OR_RETURN(const Entry* e, Lookup(name));
  const int64_t numel = e->info.numel();
  if (begin < 0 || begin > end || end > numel) {
    return InvalidArgumentError("flat range [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") is out of range for tensor " +
                                Quoted(name) + " of shape " + ShapeString(e->info.shape) + " (" +
                                std::to_string(numel) + " elements)");
  }
  return ReadElements(*e, static_cast<uint64_t>(begin), static_cast<uint64_t>(end - begin), out);
}

// ---- writer

Status WriteSafetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                        const WriteOptions& options) {
  const DType dtype = options.dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return InvalidArgumentError(std::string("cannot export weights as ") +
                                SafetensorsDTypeName(dtype) + ": choose F32, BF16 or F16");
  }
  if (options.max_shard_bytes <= 0) {
    return InvalidArgumentError("max_shard_bytes must be positive, not " +
                                std::to_string(options.max_shard_bytes));
  }
  if (tensors.empty()) return InvalidArgumentError("no tensors to export to " + dir);
  const uint64_t esize = checkpoint::DTypeSize(dtype);

  // Plan the files: tensors fill shards in the given order.
  std::set<std::string> names;
  std::vector<std::vector<PlannedTensor>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgumentError("cannot export a tensor named " + Quoted(t.name));
    }
    if (!names.insert(t.name).second) {
      return InvalidArgumentError("tensor " + Quoted(t.name) + " is given twice");
    }
    if (!t.fill) return InvalidArgumentError("tensor " + Quoted(t.name) + " has no fill");
    uint64_t numel = 1, bytes = 0;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
        return InvalidArgumentError("tensor " + Quoted(t.name) + " has an invalid shape " +
                                    ShapeString(t.shape));
      }
    }
    if (__builtin_mul_overflow(numel, esize, &bytes)) {
      return InvalidArgumentError("tensor " + Quoted(t.name) + " is too large: shape " +
                                  ShapeString(t.shape));
    }
    if (!shards.back().empty() &&
        shard_bytes + bytes > static_cast<uint64_t>(options.max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back({&t, numel, 0, 0});
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const int n = static_cast<int>(shards.size());
  std::vector<PlannedFile> files;
  for (int k = 0; k < n; ++k) {
    PlannedFile f;
    f.name = n == 1 ? kSingleFileName : ShardFileName(k + 1, n);
    f.tensors = std::move(shards[static_cast<size_t>(k)]);
    std::sort(f.tensors.begin(), f.tensors.end(),
              [](const PlannedTensor& a, const PlannedTensor& b) {
                return a.tensor->name < b.tensor->name;
              });
    uint64_t at = 0;
    for (PlannedTensor& t : f.tensors) {
      t.begin = at;
      t.end = at += t.numel * esize;
    }
    f.header = BuildHeader(f, dtype, options.metadata);
    if (f.header.size() > kMaxHeaderBytes) {
      return InvalidArgumentError("the header of " + f.name + " would be " +
                                  std::to_string(f.header.size()) +
                                  " bytes, more than safetensors reads");
    }
    files.push_back(std::move(f));
  }

  ORRERY_RETURN_IF_ERROR(checkpoint::MakeDirs(dir));
  auto path = [&](const std::string& name) { return checkpoint::JoinPath(dir, name); };
  std::vector<std::string> temps;
  auto fail = [&](const Status& s) {
    for (const std::string& t : temps) (void)RemoveIfExists(t);
    return s.WithContext("exporting weights to " + dir);
  };

  // 1. Every file to a temporary name, fsynced.
  for (const PlannedFile& f : files) {
    temps.push_back(path(f.name) + ".tmp");
    if (Status s = WriteDataFile(temps.back(), f, dtype); !s.ok()) return fail(s);
  }
  std::string index_text;
  if (n > 1) {
    json index;
    // As transformers writes it; readers use only the weight_map.
    index["metadata"] = {{"total_parameters", total_bytes / esize}, {"total_size", total_bytes}};
    json weight_map = json::object();
    for (const PlannedFile& f : files) {
      for (const PlannedTensor& t : f.tensors) weight_map[t.tensor->name] = f.name;
    }
    index["weight_map"] = std::move(weight_map);
    index_text = index.dump(2) + "\n";
    temps.push_back(path(kIndexFileName) + ".tmp");
    auto f = checkpoint::File::Create(temps.back());
    Status s = f.status();
    if (s.ok()) s = f->Append(index_text.data(), index_text.size());
    if (s.ok()) s = f->Sync();
    if (s.ok()) s = f->Close();
    if (!s.ok()) return fail(s);
  }

  // 2. Withdraw the previous export's commit files, 3. rename the shards in, 4. commit.
  Status s;
  if (n == 1) {
    s = RemoveIfExists(path(kIndexFileName));
    if (s.ok()) s = checkpoint::SyncDir(dir);
    if (s.ok()) s = Rename(temps[0], path(kSingleFileName));
  } else {
    s = RemoveIfExists(path(kIndexFileName));
    if (s.ok()) s = RemoveIfExists(path(kSingleFileName));
    if (s.ok()) s = checkpoint::SyncDir(dir);
    for (size_t i = 0; s.ok() && i < files.size(); ++i) s = Rename(temps[i], path(files[i].name));
    if (s.ok()) s = checkpoint::SyncDir(dir);
    if (s.ok()) s = Rename(temps.back(), path(kIndexFileName));
  }
  if (s.ok()) s = checkpoint::SyncDir(dir);
  if (!s.ok()) return fail(s);

  // 5. Remove what an earlier export left that this one does not name.
  std::set<std::string> kept;
  for (const PlannedFile& f : files) kept.insert(f.name);
  if (n > 1) kept.insert(kIndexFileName);
  ORRERY_ASSIGN_OR_RETURN(std::vector<std::string> present, checkpoint::ListDir(dir));
  bool removed = false;
  for (const std::string& name : present) {
    if (IsExportFileName(name) && kept.count(name) == 0) {
      ORRERY_RETURN_IF_ERROR(RemoveIfExists(path(name)));
      removed = true;
    }
  }
  if (removed) ORRERY_RETURN_IF_ERROR(checkpoint::SyncDir(dir));
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  ORRERY_RETURN_IF_ERROR(checkpoint::MakeDirs(DirName(path)));
  Status s = checkpoint::WriteFileAtomic(path, contents);
  if (!s.ok()) (void)RemoveIfExists(path + ".tmp");
  return s;
}

}  // namespace orrery::hf
