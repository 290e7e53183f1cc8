// Hugging Face safetensors weights, in and out, without LibTorch. A pre-trained model
// arrives as a directory (config.json and model.safetensors, or
// model.safetensors.index.json and the shards it names); each worker rank reads only
// the bytes of its own slice of each tensor (a block of rows or columns for tensor
// parallelism, a flat range for fsdp) as float32. At the end of training the worker
// writes the model back as such a directory, which
// transformers.AutoModelForCausalLM.from_pretrained loads.
//
// The format: an unsigned 64-bit little-endian header length N, N bytes of JSON
// (an object mapping each tensor's name to its dtype, shape and data_offsets, the
// byte range relative to the end of the header, plus an optional "__metadata__"
// object of strings), then the tensors' bytes, little-endian, row-major, packed
// without gaps. Files are validated as strictly as the Python library does, and
// every error names the file and tensor and says what to do about it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/dtype.h"
#include "worker/checkpoint/io.h"

namespace orrery::hf {

// The file names transformers' save_pretrained uses.
inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
// A larger header is refused (as the Python library does): no real model needs it.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A tensor in a safetensors file.
struct TensorInfo {
  std::string name;
  checkpoint::DType dtype;  // from "F32","F16","BF16","F64","I64","I32","I16","I8","U8","BOOL"
  std::vector<int64_t> shape;
  std::string file;         // absolute path of the file holding it
  uint64_t data_begin = 0;  // absolute byte offset in `file` of its first byte
  uint64_t data_end = 0;
  int64_t numel() const;
};

// A rectangular block of a tensor of rank 0-2 (rows = dim 0, cols = dim 1): rows
// [row_begin,row_end), cols [col_begin,col_end); col_end = -1 means all columns,
// row_end = -1 all rows. For rank 1 only the row range applies (elements). For
// tensors of rank > 2, a row is everything after dim 0. (So a tensor is seen as a
// rows x cols matrix: rank 0 is 1 x 1, rank 1 is n x 1, rank k >= 2 is
// shape[0] x shape[1]*...*shape[k-1].)
struct Block {
  int64_t row_begin = 0, row_end = -1, col_begin = 0, col_end = -1;
};

// One model's weights: a directory with model.safetensors, or
// model.safetensors.index.json and the shards it names, or a single .safetensors
// file path (or an .index.json path). A directory holding both is read as
// transformers reads it: model.safetensors wins. Everything is validated at Open;
// reads are thread-safe (pread on descriptors opened once).
class SafetensorsReader {
 public:
  static StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const TensorInfo* Find(const std::string& name) const;  // nullptr when absent
  std::vector<std::string> Names() const;                 // sorted

  // Reads `block` of tensor `name`, converted to float32, row-major into out (block
  // rows x block cols elements). Reads only the block's bytes: one pread for a
  // full-width row range, else one pread per row. Errors: NOT_FOUND naming the
  // tensor and the model; INVALID_ARGUMENT for a block out of range (naming
  // tensor, shape and block) or a dtype that is not F32/F16/BF16/F64; DATA_LOSS for
  // a file that became shorter after Open.
  Status ReadFloat32(const std::string& name, const Block& block, float* out) const;
  // Flat elements [begin, end) of the tensor's row-major flattening (an fsdp
  // shard), as float32. One pread.
  Status ReadFlatFloat32(const std::string& name, int64_t begin, int64_t end, float* out) const;

  // Total payload bytes read so far (tensor bytes, not headers), for tests that
  // check a rank read only its slice.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  // The "__metadata__" of the first file (the single file, or the first shard by name).
  std::map<std::string, std::string> metadata() const { return metadata_; }
  // What was opened: the directory, index or file path given to Open.
  const std::string& source() const { return source_; }

 private:
  struct Entry {
    TensorInfo info;
    size_t file = 0;  // index into files_
  };
  SafetensorsReader() = default;
  Status OpenFile(const std::string& path, std::vector<std::string>* names);
  Status OpenIndex(const std::string& index_path);
  StatusOr<const Entry*> Lookup(const std::string& name) const;
  // Reads `count` elements starting at element `first` (row-major) as float32.
  Status ReadElements(const Entry& e, uint64_t first, uint64_t count, float* out) const;

  std::string source_;
  std::vector<checkpoint::File> files_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

// A tensor to write: its float32 data comes from `fill` (called once, with a
// buffer of numel floats) so a writer never needs the whole model in memory at once.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  std::function<Status(float* out)> fill;
};

struct WriteOptions {
  // F32, BF16 (rounded to nearest even, as torch does) or F16.
  checkpoint::DType dtype = checkpoint::DType::kFloat32;
  // Above it: model-0000k-of-0000n.safetensors + model.safetensors.index.json
  // ("metadata": {"total_parameters", "total_size"}, "weight_map"). Tensors go to shards in the
  // given order, a new shard starting when the next tensor would overflow the
  // current one (a tensor larger than the limit gets a shard of its own).
  int64_t max_shard_bytes = 5LL << 30;
  std::map<std::string, std::string> metadata = {{"format", "pt"}};  // "__metadata__"
};

// Writes `tensors` (names unique) into `dir` (created if missing) as safetensors.
// Within a file, tensors are laid out as the safetensors library lays them out
// (sorted by name; one dtype per export), and `fill` is called once per tensor,
// file by file, in that order.
//
// Commit protocol: every file is written to "<name>.tmp" and fsynced; then the
// previous export's model.safetensors.index.json is removed, and for a sharded
// export its model.safetensors too (so no crash can leave an index naming a mix
// of old and new shards, or an old single file shadowing a new index), the shards
// are renamed into place, and the index (or the single file) is renamed last. A crash leaves either
// the old export, the new one, or a directory that does not load; never one that loads with half
// the weights. Files of an earlier export that the new one does not name (stale shards, leftover
// .tmp files) are removed after the commit; other files (config.json, tokenizer files) are left
// alone.
Status WriteSafetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                        const WriteOptions& options);

// Writes a text file atomically (temp, fsync, rename, fsync of the directory):
// for config.json, adapter_config.json. Creates the parent directory if missing.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

// ---- Lower-level pieces, public for the tests, the fuzzer and the model code.

// "F32" <-> DType::kFloat32, and so on for the ten dtypes TensorInfo names.
const char* SafetensorsDTypeName(checkpoint::DType dtype);
StatusOr<checkpoint::DType> ParseSafetensorsDType(std::string_view name);

// Conversions as torch does them: float32 -> bfloat16 and -> float16 round to
// nearest, ties to even; overflow gives infinity; NaN stays NaN.
uint16_t Float32ToBFloat16(float value);
float BFloat16ToFloat32(uint16_t bits);
uint16_t Float32ToFloat16(float value);
float Float16ToFloat32(uint16_t bits);

// "model-00002-of-00005.safetensors" (k counts from 1).
std::string ShardFileName(int k, int n);

// A file's header, validated: its tensors (sorted by data offset, with absolute
// byte offsets, `file` as given) and its "__metadata__".
struct ParsedHeader {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};
// The header length from a file's first 8 bytes, checked against kMaxHeaderBytes
// and the file's size. `file` names the file in errors.
StatusOr<uint64_t> ParseHeaderLength(std::string_view first_bytes, uint64_t file_size,
                                     const std::string& file);
// Validates `header` (the N bytes after the length) of a file of `file_size` bytes:
// a JSON object; each entry's dtype, shape and data_offsets; sizes consistent with
// shape x dtype; tensors packed from the end of the header to the end of the
// file with no gap and no overlap.
StatusOr<ParsedHeader> ParseHeader(std::string_view header, uint64_t file_size,
                                   const std::string& file);

}  // namespace orrery::hf
