// Where samples come from. A sample is a window of seq_len + 1 tokens (inputs are
// the first seq_len, targets the last seq_len), addressed by its index in
// [0, NumSamples()); the global order (order.h) decides which index comes when.
//
//  - TokenFile: a flat file of little-endian uint16 or uint32 tokens (the layout
//    nanoGPT-style .bin files use), memory-mapped; sample i starts at token
//    i * seq_len, so consecutive samples share one boundary token.
//  - SyntheticSource: seeded, learnable sequences (each next token is an affine
//    function of the previous one, with a per-sample start), for profiling and
//    tests that need a loss that falls without any data on disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t NumSamples() const = 0;
  virtual int64_t SeqLen() const = 0;
  virtual int64_t VocabSize() const = 0;
  // Fills `out` (SeqLen() + 1 tokens) with sample `index`. Thread-safe.
  virtual Status Read(int64_t index, int32_t* out) const = 0;
};

class TokenFile final : public SampleSource {
 public:
  // `token_bytes` is 2 (uint16) or 4 (uint32). `vocab_size` 0 = scan for the max.
  static StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path, int token_bytes,
                                                   int64_t seq_len, int64_t vocab_size = 0);
  ~TokenFile() override;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t NumSamples() const override;
  int64_t SeqLen() const override { return seq_len_; }
  int64_t VocabSize() const override { return vocab_size_; }
  Status Read(int64_t index, int32_t* out) const override;
  int64_t NumTokens() const { return num_tokens_; }

 private:
  TokenFile() = default;
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t mapped_ = 0;
  int token_bytes_ = 2;
  int64_t num_tokens_ = 0;
  int64_t seq_len_ = 0;
  int64_t vocab_size_ = 0;
};

class SyntheticSource final : public SampleSource {
 public:
  SyntheticSource(uint64_t seed, int64_t num_samples, int64_t seq_len, int64_t vocab_size);
  int64_t NumSamples() const override { return num_samples_; }
  int64_t SeqLen() const override { return seq_len_; }
  int64_t VocabSize() const override { return vocab_size_; }
  Status Read(int64_t index, int32_t* out) const override;

 private:
  uint64_t seed_;
  int64_t num_samples_, seq_len_, vocab_size_;
};

}  // namespace orrery::data
