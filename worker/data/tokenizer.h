// Text to tokens. Byte-level: every byte of UTF-8 text is one token (vocab 256),
// so the tokenizer is exact, reversible and identical everywhere without a trained
// vocabulary. EncodeTextFile writes a uint16 token file TokenFile reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::data {

inline constexpr int64_t kByteVocabSize = 256;

std::vector<uint16_t> EncodeBytes(const std::string& text);
std::string DecodeBytes(const std::vector<int32_t>& tokens);
// Reads `text_path`, writes its tokens to `token_path` (uint16, little-endian).
// Returns the number of tokens.
StatusOr<int64_t> EncodeTextFile(const std::string& text_path, const std::string& token_path);

}  // namespace orrery::data
