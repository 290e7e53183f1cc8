// libFuzzer target over the safetensors header parser (worker/hf/safetensors.h),
// the part of the reader that sees a downloaded file's untrusted bytes. Each input
// is a whole file. Besides crashes, leaks and hangs it checks on every input:
//   - every error names the file;
//   - a header that validates describes tensors that tile the data section
//     exactly: each one's bytes inside the file, after the header, sized
//     shape x dtype, in order, with no gap and no overlap.
// It also checks that float32 -> bf16/fp16 -> float32 -> bf16/fp16 is stable for
// the input's bytes read as floats.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "worker/hf/safetensors.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

const std::string kFile = "fuzz.safetensors";

void CheckHeader(std::string_view file) {
  auto n = orrery::hf::ParseHeaderLength(file, file.size(), kFile);
  if (!n.ok()) {
    Check(n.status().message().find(kFile) != std::string::npos);
    return;
  }
  Check(*n <= file.size() - 8);
  auto parsed = orrery::hf::ParseHeader(file.substr(8, *n), file.size(), kFile);
  if (!parsed.ok()) {
    Check(parsed.status().message().find(kFile) != std::string::npos);
    return;
  }
  uint64_t at = 8 + *n;
  for (const orrery::hf::TensorInfo& t : parsed->tensors) {
    Check(t.file == kFile);
    Check(t.data_begin == at);
    Check(t.data_begin <= t.data_end && t.data_end <= file.size());
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      Check(d >= 0);
      Check(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel));
    }
    Check(numel * orrery::checkpoint::DTypeSize(t.dtype) == t.data_end - t.data_begin);
    Check(static_cast<uint64_t>(t.numel()) == numel);
    at = t.data_end;
  }
  Check(at == file.size());
}

void CheckConversions(const uint8_t* data, size_t size) {
  for (size_t i = 0; i + 4 <= size && i < 256; i += 4) {
    float f;
    std::memcpy(&f, data + i, 4);
    const uint16_t b = orrery::hf::Float32ToBFloat16(f);
    const uint16_t h = orrery::hf::Float32ToFloat16(f);
    Check(orrery::hf::Float32ToBFloat16(orrery::hf::BFloat16ToFloat32(b)) == b);
    Check(orrery::hf::Float32ToFloat16(orrery::hf::Float16ToFloat32(h)) == h);
    Check(std::isnan(f) == std::isnan(orrery::hf::BFloat16ToFloat32(b)));
    Check(std::isnan(f) == std::isnan(orrery::hf::Float16ToFloat32(h)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 20) return 0;  // headers of real models are far smaller; keep runs fast
  CheckHeader(std::string_view(reinterpret_cast<const char*>(data), size));
  CheckConversions(data, size);
  return 0;
}
