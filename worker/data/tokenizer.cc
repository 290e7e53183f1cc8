// Byte-level tokenization (see tokenizer.h).
#include "worker/data/tokenizer.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>

namespace orrery::data {

std::vector<uint16_t> EncodeBytes(const std::string& text) {
  std::vector<uint16_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string DecodeBytes(const std::vector<int32_t>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) out += static_cast<char>(t >= 0 && t < 256 ? t : '?');
  return out;
}

StatusOr<int64_t> EncodeTextFile(const std::string& text_path, const std::string& token_path) {
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return NotFoundError("cannot open text " + text_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<uint16_t> tokens = EncodeBytes(text);
  // Named for this process and call: two tasks of one gang (worker/train/gang.h)
  // tokenize on threads of one process, and a shared name would let one
  // truncate or rename the other's half-written file.
  static std::atomic<uint64_t> calls{0};
  const std::string tmp =
      token_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(calls.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return InternalError("cannot create token file " + tmp);
    // Little-endian hosts only (x86-64, aarch64): the in-memory layout is the file's.
    out.write(reinterpret_cast<const char*>(tokens.data()),
              static_cast<std::streamsize>(tokens.size() * 2));
    if (!out) return InternalError("cannot write token file " + tmp);
  }
  if (std::rename(tmp.c_str(), token_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return InternalError("cannot rename " + tmp + " to " + token_path);
  }
  return static_cast<int64_t>(tokens.size());
}

}  // namespace orrery::data
