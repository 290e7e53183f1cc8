// The model's own tokenizer: byte-level BPE read from a Hugging Face
// tokenizer.json, as GPT-2, Llama 3 and Qwen2 ship it. Encode gives exactly the
// ids of the `tokenizers` library's Tokenizer.encode(text,
// add_special_tokens=False).ids (tests/worker/data/bpe_reference_test.cc checks
// it against the pinned library), so a model fine-tuned here sees the ids it was
// pre-trained on.
//
// The pipeline is the library's: added tokens are split out of the raw text
// (leftmost-longest; single_word, lstrip, rstrip honoured), the rest is
// normalized (nothing or NFC) and split again on normalized added tokens, then
// pre-tokenized (the GPT-2, Llama 3 or Qwen2 split pattern, hand-written as
// scanners over code points with ICU's character properties), each piece is
// mapped to GPT-2's byte alphabet and merged by rank. Anything else a
// tokenizer.json may hold (Unigram, WordPiece, Metaspace, byte_fallback, an
// unknown pattern) is refused at Load with the field named, never guessed at.
//
// EncodeTextFileWithTokenizer turns a text file into the token file TokenFile
// (source.h) reads, streaming it in chunks cut where cutting cannot change the
// ids; CachedTokenPath names where a worker keeps that file so a corpus is
// tokenized once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace orrery::data {

struct BpeTokenizerImpl;  // bpe.cc: the vocabulary, merges and pipeline

class BpeTokenizer {
 public:
  // `path` is a tokenizer.json or a model directory holding one. A directory's
  // tokenizer_config.json, when present, names the bos/eos tokens.
  static StatusOr<BpeTokenizer> Load(const std::string& path);

  // Ids of `text` (UTF-8; invalid UTF-8 is an error naming the byte offset).
  // Thread-safe: a tokenizer is immutable after Load and cheap to copy.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // The bytes the ids stand for: vocabulary tokens through the byte alphabet,
  // added tokens as written. Ids that end inside a character give its first
  // bytes, so the result is valid UTF-8 only when the ids are a whole text.
  // An id not in the vocabulary is an error.
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // Largest id + 1 over the model vocabulary and the added tokens.
  int64_t VocabSize() const;
  // From tokenizer_config.json (bos_token / eos_token) when the model directory
  // has one, else the post-processor's template (a special token before $A is
  // bos, one after it eos); nullopt when neither says.
  std::optional<int32_t> BosId() const;
  std::optional<int32_t> EosId() const;
  // The id of an added token's content or of a vocabulary entry as written in
  // tokenizer.json (byte alphabet: "Ġthe"); nullopt when there is none.
  std::optional<int32_t> TokenId(std::string_view token) const;
  // The tokenizer.json this was loaded from.
  const std::string& JsonPath() const;

  // Streaming, for EncodeTextFileWithTokenizer (and its tests). A text may be
  // cut at any point SplitPoint returns: encoding the two parts apart, the
  // second with `continues` set, gives the ids of encoding the whole.
  struct ChunkContext {
    bool continues = false;   // this chunk follows a cut made at a SplitPoint
    int64_t byte_offset = 0;  // of the chunk in the whole text, for error messages
  };
  // Appends the ids of `text` to *out.
  Status EncodeChunk(std::string_view text, const ChunkContext& context,
                     std::vector<int32_t>* out) const;
  // The last safe cut p in [from, text.size()), or 0 when there is none; it
  // is safe whatever text follows `text`. The rule (the same for every
  // supported pattern): cut after a '\n' when a character other than
  // whitespace follows it, or before a ' ' between two letters when no added
  // token has rstrip set; never inside an occurrence of an added token, nor
  // just before one with lstrip set, nor closer to the end of `text` than the
  // longest added token (one could start there). With the GPT-2 pattern the
  // '\n' must also be the only whitespace before the cut, and (with
  // add_prefix_space) not follow an added token. Each pattern ends a piece at
  // such a point and starts the next there, and NFC composes nothing across
  // it, so the cut changes no id.
  size_t SplitPoint(std::string_view text, size_t from = 0) const;

 private:
  explicit BpeTokenizer(std::shared_ptr<const BpeTokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const BpeTokenizerImpl> impl_;
};

struct TextEncodeOptions {
  int64_t chunk_bytes = int64_t{8} << 20;  // text read (and held) at a time, about
  // A progress bar on stderr when stderr is a terminal and the text is at least
  // progress_min_bytes long.
  bool progress = true;
  int64_t progress_min_bytes = int64_t{64} << 20;
};

// Encodes the UTF-8 text file `text_path` into `token_path`: little-endian
// uint16 (token_bytes 2) or uint32 (4) ids, the layout TokenFile reads;
// token_bytes 0 picks 2 when VocabSize() <= 65536, else 4. The text is streamed
// in chunks cut at BpeTokenizer::SplitPoint, so the ids are those of encoding
// the whole file as one string, while memory stays near chunk_bytes (a text with
// no safe cut for longer than that is held until one comes). Written to a
// temporary name, fsynced and renamed: token_path is whole or absent. Returns
// the number of tokens.
StatusOr<int64_t> EncodeTextFileWithTokenizer(const std::string& text_path,
                                              const BpeTokenizer& tokenizer,
                                              const std::string& token_path, int token_bytes = 0,
                                              const TextEncodeOptions& options = {});

// Where a worker caches the token file of `text_path` under `cache_dir`: the
// name holds the text file's stem and a hash of its absolute path, size and
// modification time, the tokenizer.json's content (tokenizer_path may be the
// model directory) and token_bytes, so a changed text or tokenizer gets a new
// file and an unchanged one is tokenized once. Reads only metadata and the
// tokenizer.json; a file it cannot read hashes as missing.
std::string CachedTokenPath(const std::string& cache_dir, const std::string& text_path,
                            const std::string& tokenizer_path, int token_bytes = 0);

}  // namespace orrery::data
