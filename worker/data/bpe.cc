// Byte-level BPE from a Hugging Face tokenizer.json (see bpe.h). The steps
// follow the `tokenizers` library (github.com/huggingface/tokenizers, read as a
// reference for behaviour: AddedVocabulary::find_matches, the ByteLevel
// pre-tokenizer, BPE's Word::merge_all), written afresh here so the ids match
// without linking Rust: the three split patterns are scanners over code points
// rather than a regex engine (std::regex has neither \p{L} nor lookahead), with
// ICU for character categories and NFC.
#include "worker/data/bpe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/utypes.h>

#include "common/bytes_text.h"

namespace orrery::data {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// UTF-8

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs,
// surrogates or code points past U+10FFFF), with its code point; 0 if none.
size_t Utf8At(std::string_view s, size_t i, char32_t* cp) {
  const size_t n = s.size();
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len = 0;
  char32_t v = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0Fu;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07u;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > n) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char t = b(i + k);
    if (k == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xBF)) return 0;
    v = (v << 6) | (t & 0x3Fu);
  }
  *cp = v;
  return len;
}

// Offset of the first byte that does not start well-formed UTF-8, or npos.
size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  char32_t cp = 0;
  while (i < s.size()) {
    // ASCII runs are most text; skip them eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t word = 0;
      std::memcpy(&word, s.data() + i, 8);
      if ((word & 0x8080808080808080ull) != 0) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const size_t len = Utf8At(s, i, &cp);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

// ---------------------------------------------------------------------------
// Character classes of the split patterns.

// What \p{L}, \p{N} and \s (Oniguruma's, which the `tokenizers` library runs
// the patterns with: the White_Space property) make of a code point.
enum class Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

bool IsWhiteSpace(char32_t c) {
  // PropList.txt's White_Space: a fixed, short list.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

constexpr std::array<Cls, 128> MakeAsciiClasses() {
  std::array<Cls, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t[c] = Cls::kLetter;
    } else if (c >= '0' && c <= '9') {
      t[c] = Cls::kNumber;
    } else if ((c >= 0x09 && c <= 0x0D) || c == ' ') {
      t[c] = Cls::kSpace;
    } else {
      t[c] = Cls::kOther;
    }
  }
  return t;
}
constexpr std::array<Cls, 128> kAsciiClasses = MakeAsciiClasses();

// Letters and numbers of Unicode 15.1 and 16.0, which the library's
// Oniguruma knows and ICU 72 (Unicode 15.0, Debian 12's) leaves unassigned:
// found by classifying, with the pinned library, every code point ICU 72 does
// not assign; all the others agree. Ranges are inclusive and sorted.
struct CodePointRange {
  char32_t first, last;
  Cls cls;
};
constexpr CodePointRange kUnicode16Additions[] = {
    {0x1C89, 0x1C8A, Cls::kLetter},   {0xA7CB, 0xA7CD, Cls::kLetter},
    {0xA7DA, 0xA7DC, Cls::kLetter},   {0x105C0, 0x105F3, Cls::kLetter},
    {0x10D40, 0x10D49, Cls::kNumber}, {0x10D4A, 0x10D65, Cls::kLetter},
    {0x10D6F, 0x10D85, Cls::kLetter}, {0x10EC2, 0x10EC4, Cls::kLetter},
    {0x11380, 0x11389, Cls::kLetter}, {0x1138B, 0x1138B, Cls::kLetter},
    {0x1138E, 0x1138E, Cls::kLetter}, {0x11390, 0x113B5, Cls::kLetter},
    {0x113B7, 0x113B7, Cls::kLetter}, {0x113D1, 0x113D1, Cls::kLetter},
    {0x113D3, 0x113D3, Cls::kLetter}, {0x116D0, 0x116E3, Cls::kNumber},
    {0x11BC0, 0x11BE0, Cls::kLetter}, {0x11BF0, 0x11BF9, Cls::kNumber},
    {0x13460, 0x143FA, Cls::kLetter}, {0x16100, 0x1611D, Cls::kLetter},
    {0x16130, 0x16139, Cls::kNumber}, {0x16D40, 0x16D6C, Cls::kLetter},
    {0x16D70, 0x16D79, Cls::kNumber}, {0x18CFF, 0x18CFF, Cls::kLetter},
    {0x1CCF0, 0x1CCF9, Cls::kNumber}, {0x1E5D0, 0x1E5ED, Cls::kLetter},
    {0x1E5F0, 0x1E5F0, Cls::kLetter}, {0x1E5F1, 0x1E5FA, Cls::kNumber},
    {0x2EBF0, 0x2EE5D, Cls::kLetter},
};

// An ICU newer than the library's Unicode 16.0 would call letters what the
// library does not know; those are classed as the library classes them.
bool IcuIsPastUnicode16() {
  static const bool past = [] {
    UVersionInfo v;
    u_getUnicodeVersion(v);
    return v[0] > 16;
  }();
  return past;
}

bool AssignedAfterUnicode16(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] > 16;
}

Cls Classify(char32_t c) {
  if (c < 128) return kAsciiClasses[c];
  if (IsWhiteSpace(c)) return Cls::kSpace;
  const auto type = u_charType(static_cast<UChar32>(c));
  if (type == U_UNASSIGNED) {
    const auto* end = std::end(kUnicode16Additions);
    const auto* it =
        std::upper_bound(std::begin(kUnicode16Additions), end, c,
                         [](char32_t v, const CodePointRange& r) { return v < r.first; });
    if (it != std::begin(kUnicode16Additions) && c <= (it - 1)->last) return (it - 1)->cls;
    return Cls::kOther;
  }
  if (IcuIsPastUnicode16() && AssignedAfterUnicode16(c)) return Cls::kOther;
  switch (type) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return Cls::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: return Cls::kNumber;
    default: return Cls::kOther;
  }
}

// Rust regex's Unicode \w, which single_word tests the neighbours with.
bool IsWordChar(char32_t c) {
  if (c < 128)
    return kAsciiClasses[c] == Cls::kLetter || kAsciiClasses[c] == Cls::kNumber || c == '_';
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL))
    return true;
  switch (u_charType(u)) {
    case U_NON_SPACING_MARK:
    case U_COMBINING_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_CONNECTOR_PUNCTUATION: return true;
    default: return false;
  }
}

// A code point of text already checked to be UTF-8.
struct CodePoint {
  char32_t cp = 0;
  uint32_t len = 0;
  Cls cls = Cls::kOther;
};

CodePoint At(std::string_view s, size_t i) {
  CodePoint c;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    c.cp = b0;
    c.len = 1;
    c.cls = kAsciiClasses[b0];
    return c;
  }
  c.len = static_cast<uint32_t>(Utf8At(s, i, &c.cp));
  if (c.len == 0) c.len = 1;  // never reached on checked text; keeps scans moving
  c.cls = Classify(c.cp);
  return c;
}

// Start of the code point that ends at `end` (end > 0).
size_t PrevStart(std::string_view s, size_t end) {
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

size_t RunOf(std::string_view s, size_t i, Cls cls) {
  while (i < s.size()) {
    const CodePoint c = At(s, i);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// ---------------------------------------------------------------------------
// The split patterns, as scanners. Each returns the end of the match that the
// pattern's leftmost-first (backtracking) search finds at `i`; every position
// starts one, since the alternatives cover letters, numbers, whitespace and
// everything else.

enum class Pattern { kGpt2, kLlama3, kQwen2 };

// GPT-2's, also the ByteLevel pre-tokenizer's built-in one.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's (transformers' convert_slow_tokenizer.py, TikTokenConverter).
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's (transformers' models/qwen2/tokenization_qwen2.py): single digits.
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Length after the apostrophe of 's 't 're 've 'm 'll 'd at s[k], or 0. With
// `fold` (Llama 3's (?i:...)), case-insensitively: Unicode case folding also
// takes U+017F LATIN SMALL LETTER LONG S to s (CaseFolding.txt), and no other
// character folds to one of these letters.
size_t ContractionLength(std::string_view s, size_t k, bool fold) {
  const auto lower = [&](size_t j) -> int {
    if (j >= s.size()) return -1;
    const int b = static_cast<unsigned char>(s[j]);
    return fold && b >= 'A' && b <= 'Z' ? b + ('a' - 'A') : b;
  };
  const int a = lower(k);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
  if (fold && s.substr(k, 2) == "\xC5\xBF") return 2;  // U+017F
  const int b = lower(k + 1);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 2;
  return 0;
}

// \s+(?!\S)|\s+ over the whitespace run [i, j): all of it at the end of the
// text, else all but its last character (which goes with the next piece's
// lookahead), else the one character.
size_t WhitespaceMatchEnd(std::string_view s, size_t i, size_t j) {
  if (j == s.size()) return j;
  const size_t last = PrevStart(s, j);
  return last > i ? last : j;
}

size_t MatchGpt2(std::string_view s, size_t i) {
  if (s[i] == '\'') {
    if (const size_t len = ContractionLength(s, i + 1, false)) return i + 1 + len;
  }
  const CodePoint c = At(s, i);
  // " ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+": the optional space is U+0020 only.
  if (c.cp == ' ' && i + 1 < s.size()) {
    const CodePoint d = At(s, i + 1);
    if (d.cls != Cls::kSpace) return RunOf(s, i + 1, d.cls);
  }
  if (c.cls != Cls::kSpace) return RunOf(s, i, c.cls);
  return WhitespaceMatchEnd(s, i, RunOf(s, i, Cls::kSpace));
}

size_t MatchLlama(std::string_view s, size_t i, size_t max_digits) {
  const size_t n = s.size();
  if (s[i] == '\'') {
    if (const size_t len = ContractionLength(s, i + 1, true)) return i + 1 + len;
  }
  const CodePoint c = At(s, i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == Cls::kLetter) return RunOf(s, i, Cls::kLetter);
  if (c.cls != Cls::kNumber && c.cp != '\r' && c.cp != '\n' && i + c.len < n &&
      At(s, i + c.len).cls == Cls::kLetter)
    return RunOf(s, i + c.len, Cls::kLetter);
  // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
  if (c.cls == Cls::kNumber) {
    size_t j = i;
    for (size_t k = 0; k < max_digits && j < n; ++k) {
      const CodePoint d = At(s, j);
      if (d.cls != Cls::kNumber) break;
      j += d.len;
    }
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t o = n;
  if (c.cls == Cls::kOther) {
    o = i;
  } else if (c.cp == ' ' && i + 1 < n && At(s, i + 1).cls == Cls::kOther) {
    o = i + 1;
  }
  if (o < n) {
    size_t j = RunOf(s, o, Cls::kOther);
    while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
    return j;
  }
  // c is whitespace. \s*[\r\n]+: the run up to its last CR or LF.
  const size_t j = RunOf(s, i, Cls::kSpace);
  for (size_t k = j; k > i; --k) {
    if (s[k - 1] == '\r' || s[k - 1] == '\n') return k;
  }
  return WhitespaceMatchEnd(s, i, j);
}

size_t MatchEnd(Pattern p, std::string_view s, size_t i) {
  switch (p) {
    case Pattern::kGpt2: return MatchGpt2(s, i);
    case Pattern::kLlama3: return MatchLlama(s, i, 3);
    case Pattern::kQwen2: return MatchLlama(s, i, 1);
  }
  return s.size();
}

// ---------------------------------------------------------------------------
// GPT-2's byte alphabet: printable bytes stand for themselves, the others for
// U+0100 onwards in byte order, so every byte is one visible character.

struct ByteAlphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // by code point; -1 when not a byte's
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet = [] {
    ByteAlphabet a;
    a.to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      a.to_char[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      a.to_byte[a.to_char[b]] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return alphabet;
}

// The bytes a token written in the byte alphabet stands for; nullopt when a
// character of it is not in the alphabet (or it is not UTF-8).
std::optional<std::string> AlphabetToBytes(std::string_view token) {
  const ByteAlphabet& a = Alphabet();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    char32_t cp = 0;
    const size_t len = Utf8At(token, i, &cp);
    if (len == 0 || cp >= a.to_byte.size() || a.to_byte[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(a.to_byte[cp]));
    i += len;
  }
  return bytes;
}

// ---------------------------------------------------------------------------
// Added tokens.

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  std::string normalized_content;  // content after the normalizer
};

// Finds added tokens in text leftmost-longest and without overlaps, as the
// library's Aho-Corasick automaton (MatchKind::LeftmostLongest) does. Tokens
// are few and rare in text, so a table of first bytes and a compare at each
// candidate beats an automaton's setup.
class TokenMatcher {
 public:
  void Add(std::string pattern, int token) {
    if (!pattern.empty()) patterns_.push_back({std::move(pattern), token});
  }
  void Build() {
    std::sort(patterns_.begin(), patterns_.end(), [](const Entry& a, const Entry& b) {
      if (a.text[0] != b.text[0]) return a.text[0] < b.text[0];
      return a.text.size() > b.text.size();  // longest first at a start
    });
    first_.fill({0, 0});
    for (uint32_t k = 0; k < patterns_.size(); ++k) {
      auto& range = first_[static_cast<unsigned char>(patterns_[k].text[0])];
      if (range.second == 0) range.first = k;
      ++range.second;
    }
  }
  bool empty() const { return patterns_.empty(); }
  // The first match at or after `from`: its start, length and token index.
  bool Find(std::string_view s, size_t from, size_t* start, size_t* len, int* token) const {
    for (size_t i = from; i < s.size(); ++i) {
      const auto range = first_[static_cast<unsigned char>(s[i])];
      for (uint32_t k = range.first; k < range.first + range.second; ++k) {
        const std::string& p = patterns_[k].text;
        if (s.compare(i, p.size(), p) == 0) {
          *start = i, *len = p.size(), *token = patterns_[k].token;
          return true;
        }
      }
    }
    return false;
  }

 private:
  struct Entry {
    std::string text;
    int token;
  };
  std::vector<Entry> patterns_;
  std::array<std::pair<uint32_t, uint32_t>, 256> first_{};  // first index, count
};

// ---------------------------------------------------------------------------
// Hashing.

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct MergeRule {
  int32_t rank = 0;
  int32_t id = 0;  // of the merged token
};

// Splitmix-style mixing: ids are small consecutive integers, which the
// identity std::hash<uint64_t> would crowd into few buckets.
struct PairHash {
  size_t operator()(uint64_t k) const {
    k ^= k >> 31;
    k *= 0x7fb5d329728ea185ull;
    k ^= k >> 27;
    k *= 0x81dadef4bc2dd44dull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
};

// Ids of words already merged in one EncodeChunk call: text repeats its words,
// and merging is most of the cost.
class WordCache {
 public:
  bool Lookup(std::string_view word, std::vector<int32_t>* out) const {
    const auto it = map_.find(word);
    if (it == map_.end()) return false;
    out->insert(out->end(), ids_.begin() + it->second.first,
                ids_.begin() + it->second.first + it->second.second);
    return true;
  }
  void Insert(std::string_view word, const int32_t* ids, size_t n) {
    if (map_.size() >= kMaxWords) return;
    map_.emplace(std::string(word),
                 std::make_pair(static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)));
    ids_.insert(ids_.end(), ids, ids + n);
  }

 private:
  static constexpr size_t kMaxWords = size_t{1} << 18;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> map_;
  std::vector<int32_t> ids_;
};

const icu::Normalizer2* NfcInstance() {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  return U_FAILURE(err) ? nullptr : nfc;
}

// Code points below U+0300 are all NFC and compose with nothing before them;
// their UTF-8 lead bytes are below 0xCC.
bool MayChangeUnderNfc(std::string_view s) {
  for (const char ch : s) {
    if (static_cast<unsigned char>(ch) >= 0xCC) return true;
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  Pattern pattern = Pattern::kGpt2;  // kSplit, or kByteLevel with use_regex
  bool use_regex = false;            // kByteLevel
  bool add_prefix_space = false;     // kByteLevel
};

struct BpeTokenizerImpl {
  std::string json_path;

  // The model.
  StringMap word_ids;                   // a vocabulary token's bytes -> id
  std::array<int32_t, 256> byte_ids{};  // each single byte's id, -1 if none
  std::unordered_map<uint64_t, MergeRule, PairHash> merges;
  bool ignore_merges = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;

  // Every id: what it decodes to and how tokenizer.json writes it.
  std::vector<std::string> id_bytes;
  std::vector<std::string> id_text;
  std::vector<uint8_t> id_known;
  int64_t vocab_size = 0;

  // The pipeline.
  bool nfc = false;
  std::vector<PreTokenizerStep> steps;  // Splits, then one ByteLevel
  std::vector<AddedToken> added;
  TokenMatcher raw_matcher;         // tokens with normalized false, on the raw text
  TokenMatcher normalized_matcher;  // normalized true, on the normalized text
  bool any_lstrip = false;
  bool any_rstrip = false;
  size_t longest_added = 0;  // bytes, over contents and normalized contents
  bool uses_gpt2_pattern = false;
  // ByteLevel comes first with add_prefix_space: the space goes on every piece
  // between added tokens, so a chunk that continues a piece must not get one.
  bool prefix_space_on_pieces = false;

  std::optional<int32_t> bos, eos;

  Status EncodeChunk(std::string_view text, const BpeTokenizer::ChunkContext& context,
                     std::vector<int32_t>* out) const;
  size_t SplitPoint(std::string_view text, size_t from) const;

 private:
  template <typename Emit>
  void SplitAddedTokens(std::string_view s, const TokenMatcher& matcher, Emit&& emit) const;
  template <typename Emit>
  void PreTokenize(std::string_view piece, size_t step, bool suppress_prefix, Emit&& emit) const;
  void EncodeWord(std::string_view word, WordCache* cache, std::vector<int32_t>* out) const;
  void MergeWord(std::string_view word, std::vector<int32_t>* out) const;
  bool CutAllowedByAddedTokens(std::string_view text, size_t p, bool check_lstrip) const;
  bool AddedTokenEndsAt(std::string_view text, size_t end) const;
};

namespace {

// ---------------------------------------------------------------------------
// Loading.

// Errors name the file and the field: "<path>: model.type \"Unigram\" is not
// supported; supported: ...".
class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}
  Status Error(const std::string& field, const std::string& what) const {
    return InvalidArgumentError(file_ + ": " + field + " " + what);
  }
  Status Unsupported(const std::string& field, const json& value,
                     const std::string& supported) const {
    return Error(field, Show(value) + " is not supported; supported: " + supported);
  }
  // An optional bool: absent or null gives `fallback`.
  Status Bool(const json& obj, const std::string& where, const char* key, bool fallback,
              bool* out) const {
    *out = fallback;
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return OkStatus();
    if (!it->is_boolean()) return Error(Field(where, key), Show(*it) + " must be true or false");
    *out = it->get<bool>();
    return OkStatus();
  }
  static std::string Field(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  static std::string Show(const json& v) {
    std::string s = v.dump();
    if (s.size() > 120) s = s.substr(0, 117) + "...";
    return s;
  }

 private:
  std::string file_;
};

Status ParseNormalizer(const JsonReader& r, const json& n, const std::string& where, bool* nfc) {
  if (n.is_null()) return OkStatus();
  const std::string supported = "null, NFC, or a Sequence of NFC (Qwen2 uses NFC)";
  if (!n.is_object() || !n.contains("type")) return r.Unsupported(where, n, supported);
  const json& type = n["type"];
  if (type == "NFC") {
    *nfc = true;
    return OkStatus();
  }
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (size_t k = 0; k < n["normalizers"].size(); ++k) {
      ORRERY_RETURN_IF_ERROR(ParseNormalizer(
          r, n["normalizers"][k], where + ".normalizers[" + std::to_string(k) + "]", nfc));
    }
    return OkStatus();
  }
  return r.Unsupported(where + ".type", type, supported);
}

Status ParseSplit(const JsonReader& r, const json& p, const std::string& where,
                  PreTokenizerStep* step) {
  step->kind = PreTokenizerStep::Kind::kSplit;
  const auto pattern = p.find("pattern");
  if (pattern == p.end() || !pattern->is_object())
    return r.Error(where + ".pattern", "is missing (expected {\"Regex\": \"...\"})");
  const auto regex = pattern->find("Regex");
  if (regex == pattern->end() || !regex->is_string()) {
    return r.Unsupported(where + ".pattern", *pattern,
                         "{\"Regex\": P} with P the GPT-2, Llama 3 or Qwen2 pattern");
  }
  const std::string& text = regex->get_ref<const std::string&>();
  if (text == kGpt2Pattern) {
    step->pattern = Pattern::kGpt2;
  } else if (text == kLlama3Pattern) {
    step->pattern = Pattern::kLlama3;
  } else if (text == kQwen2Pattern) {
    step->pattern = Pattern::kQwen2;
  } else {
    return r.Unsupported(where + ".pattern.Regex", *regex,
                         "the GPT-2, Llama 3 and Qwen2 patterns (the split is hand-written for "
                         "each; a new pattern needs a scanner in worker/data/bpe.cc)");
  }
  const auto behavior = p.find("behavior");
  if (behavior != p.end() && *behavior != "Isolated")
    return r.Unsupported(where + ".behavior", *behavior, "\"Isolated\"");
  bool invert = false;
  ORRERY_RETURN_IF_ERROR(r.Bool(p, where, "invert", false, &invert));
  if (invert) return r.Unsupported(where + ".invert", true, "false");
  return OkStatus();
}

Status ParseByteLevel(const JsonReader& r, const json& p, const std::string& where,
                      PreTokenizerStep* step) {
  step->kind = PreTokenizerStep::Kind::kByteLevel;
  step->pattern = Pattern::kGpt2;
  // The library's defaults when a field is absent: add_prefix_space and
  // use_regex true.
  ORRERY_RETURN_IF_ERROR(r.Bool(p, where, "add_prefix_space", true, &step->add_prefix_space));
  ORRERY_RETURN_IF_ERROR(r.Bool(p, where, "use_regex", true, &step->use_regex));
  return OkStatus();
}

Status ParsePreTokenizer(const JsonReader& r, const json& p, BpeTokenizerImpl* t) {
  const std::string supported =
      "ByteLevel (GPT-2), or a Sequence of Split (the GPT-2, Llama 3 or Qwen2 pattern) "
      "followed by ByteLevel (Llama 3, Qwen2)";
  if (p.is_null())
    return r.Error("pre_tokenizer", "is null; a byte-level BPE needs one: " + supported);
  if (!p.is_object() || !p.contains("type")) return r.Unsupported("pre_tokenizer", p, supported);
  const json& type = p["type"];
  if (type == "ByteLevel") {
    PreTokenizerStep step;
    ORRERY_RETURN_IF_ERROR(ParseByteLevel(r, p, "pre_tokenizer", &step));
    t->steps.push_back(step);
  } else if (type == "Sequence") {
    const auto items = p.find("pretokenizers");
    if (items == p.end() || !items->is_array() || items->empty())
      return r.Error("pre_tokenizer.pretokenizers", "must be a non-empty list");
    for (size_t k = 0; k < items->size(); ++k) {
      const std::string where = "pre_tokenizer.pretokenizers[" + std::to_string(k) + "]";
      const json& item = (*items)[k];
      if (!item.is_object() || !item.contains("type")) return r.Unsupported(where, item, supported);
      PreTokenizerStep step;
      if (item["type"] == "Split") {
        ORRERY_RETURN_IF_ERROR(ParseSplit(r, item, where, &step));
      } else if (item["type"] == "ByteLevel") {
        if (k + 1 != items->size())
          return r.Error(where, "is a ByteLevel before the last step; supported: " + supported);
        ORRERY_RETURN_IF_ERROR(ParseByteLevel(r, item, where, &step));
      } else {
        return r.Unsupported(where + ".type", item["type"], supported);
      }
      t->steps.push_back(step);
    }
    if (t->steps.back().kind != PreTokenizerStep::Kind::kByteLevel)
      return r.Error("pre_tokenizer.pretokenizers",
                     "has no ByteLevel last; supported: " + supported);
  } else {
    return r.Unsupported("pre_tokenizer.type", type, supported);
  }
  bool splits = false;
  for (const PreTokenizerStep& s : t->steps) {
    const bool s_splits = s.kind == PreTokenizerStep::Kind::kSplit || s.use_regex;
    splits = splits || s_splits;
    if (s_splits && s.pattern == Pattern::kGpt2) t->uses_gpt2_pattern = true;
  }
  if (!splits) {
    return r.Error("pre_tokenizer",
                   "is a ByteLevel with use_regex false and no Split before it, which makes each "
                   "text between added tokens one word; supported: " +
                       supported);
  }
  t->prefix_space_on_pieces = t->steps.size() == 1 && t->steps[0].add_prefix_space;
  return OkStatus();
}

Status ParseModel(const JsonReader& r, const json& m, BpeTokenizerImpl* t) {
  const std::string supported = "BPE (byte-level, as GPT-2, Llama 3 and Qwen2 use)";
  if (!m.is_object()) return r.Unsupported("model", m, supported);
  const auto type = m.find("type");
  // Files from before the library wrote "type" hold a BPE when they hold merges.
  if (type != m.end() ? *type != "BPE" : !m.contains("merges")) {
    return r.Unsupported("model.type", type != m.end() ? *type : json(nullptr),
                         supported +
                             " (Unigram, WordPiece and WordLevel models, as in T5, BERT "
                             "or Llama 2's sentencepiece tokenizers, are not)");
  }
  bool byte_fallback = false;
  ORRERY_RETURN_IF_ERROR(r.Bool(m, "model", "byte_fallback", false, &byte_fallback));
  if (byte_fallback)
    return r.Unsupported("model.byte_fallback", true, "false (byte-level BPE needs no fallback)");
  ORRERY_RETURN_IF_ERROR(r.Bool(m, "model", "ignore_merges", false, &t->ignore_merges));
  ORRERY_RETURN_IF_ERROR(r.Bool(m, "model", "fuse_unk", false, &t->fuse_unk));
  if (const auto d = m.find("dropout");
      d != m.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    return r.Unsupported("model.dropout", *d, "null (dropout samples merges at random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto v = m.find(key);
    if (v != m.end() && !v->is_null() && *v != "")
      return r.Unsupported(std::string("model.") + key, *v, "null");
  }

  const auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object())
    return r.Error("model.vocab", "must be an object of token -> id");
  StringMap text_ids;  // as written, for the merges
  text_ids.reserve(vocab->size());
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return r.Error("model.vocab[" + json(token).dump() + "]", "must be an id in [0, 2^31)");
    text_ids.emplace(token, id.get<int32_t>());
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  t->id_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
  t->id_text.assign(static_cast<size_t>(max_id + 1), std::string());
  t->id_known.assign(static_cast<size_t>(max_id + 1), 0);
  t->byte_ids.fill(-1);
  t->word_ids.reserve(text_ids.size());
  for (const auto& [token, id] : text_ids) {
    t->id_known[id] = 1;
    t->id_text[id] = token;
    if (std::optional<std::string> bytes = AlphabetToBytes(token)) {
      if (bytes->size() == 1) t->byte_ids[static_cast<unsigned char>((*bytes)[0])] = id;
      t->id_bytes[id] = *bytes;
      t->word_ids.emplace(std::move(*bytes), id);
    } else {
      // As the library's ByteLevel decoder: a token outside the alphabet
      // decodes to its own text. BPE never produces one.
      t->id_bytes[id] = token;
    }
  }

  if (const auto unk = m.find("unk_token"); unk != m.end() && !unk->is_null()) {
    const auto it =
        unk->is_string() ? text_ids.find(unk->get_ref<const std::string&>()) : text_ids.end();
    if (it == text_ids.end())
      return r.Error("model.unk_token", r.Show(*unk) + " is not in model.vocab");
    t->unk_id = it->second;
  }

  const auto merges = m.find("merges");
  if (merges == m.end() || !merges->is_array())
    return r.Error("model.merges", "must be a list of \"a b\" strings or [\"a\", \"b\"] pairs");
  t->merges.reserve(merges->size());
  std::string merged;
  for (size_t k = 0; k < merges->size(); ++k) {
    const json& e = (*merges)[k];
    const std::string where = "model.merges[" + std::to_string(k) + "]";
    std::string_view a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return r.Error(where, r.Show(e) + " must be two tokens separated by one space");
      a = std::string_view(s).substr(0, space);
      b = std::string_view(s).substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>();
      b = e[1].get_ref<const std::string&>();
    } else {
      return r.Error(where, r.Show(e) + " must be \"a b\" or [\"a\", \"b\"]");
    }
    const auto ia = text_ids.find(a), ib = text_ids.find(b);
    merged.assign(a).append(b);
    const auto im = text_ids.find(merged);
    if (ia == text_ids.end() || ib == text_ids.end() || im == text_ids.end()) {
      return r.Error(where, r.Show(e) + " names a token not in model.vocab (" +
                                json(ia == text_ids.end()   ? std::string(a)
                                     : ib == text_ids.end() ? std::string(b)
                                                            : merged)
                                    .dump() +
                                ")");
    }
    // A pair listed twice keeps its last rank, as the library's map does.
    t->merges[PairKey(ia->second, ib->second)] = {static_cast<int32_t>(k), im->second};
  }
  return OkStatus();
}

Status ParseAddedTokens(const JsonReader& r, const json& list, BpeTokenizerImpl* t) {
  if (list.is_null()) return OkStatus();
  if (!list.is_array()) return r.Error("added_tokens", "must be a list");
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string where = "added_tokens[" + std::to_string(k) + "]";
    const json& e = list[k];
    if (!e.is_object()) return r.Error(where, "must be an object");
    AddedToken a;
    const auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX)
      return r.Error(where + ".id", "must be an id in [0, 2^31)");
    const auto content = e.find("content");
    if (content == e.end() || !content->is_string())
      return r.Error(where + ".content", "must be a string");
    a.id = id->get<int32_t>();
    a.content = content->get<std::string>();
    if (FirstInvalidUtf8(a.content) != std::string_view::npos)
      return r.Error(where + ".content", "is not UTF-8");
    ORRERY_RETURN_IF_ERROR(r.Bool(e, where, "special", false, &a.special));
    ORRERY_RETURN_IF_ERROR(r.Bool(e, where, "single_word", false, &a.single_word));
    ORRERY_RETURN_IF_ERROR(r.Bool(e, where, "lstrip", false, &a.lstrip));
    ORRERY_RETURN_IF_ERROR(r.Bool(e, where, "rstrip", false, &a.rstrip));
    ORRERY_RETURN_IF_ERROR(r.Bool(e, where, "normalized", !a.special, &a.normalized));
    t->added.push_back(std::move(a));
  }
  return OkStatus();
}

// Could a character matter to NFC under ICU's tables but not under the
// library's? The library normalizes with the data of Unicode 9.0 (its
// unicode-normalization-alignments crate; checked against every combining
// character's reordering), to which a later character is unassigned: a starter
// that neither decomposes nor composes.
bool NfcDiffersFromUnicode9(const icu::Normalizer2& nfc, char32_t c) {
  if (nfc.isInert(static_cast<UChar32>(c))) return false;
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] > 9 || (age[0] == 9 && age[1] > 0);
}

// NFC of valid UTF-8, as the library computes it: ICU's, except that a
// character from after Unicode 9.0 stays as it is and splits the text into
// stretches normalized apart (it blocks reordering and composition there).
StatusOr<std::string> Nfc(std::string_view s) {
  const icu::Normalizer2* nfc = NfcInstance();
  if (nfc == nullptr) return InternalError("ICU's NFC normalizer is unavailable");
  UErrorCode err = U_ZERO_ERROR;
  const auto piece = [](std::string_view v) {
    return icu::StringPiece(v.data(), static_cast<int32_t>(v.size()));
  };
  // Text NFC under ICU's tables is NFC under Unicode 9.0's too.
  if (nfc->isNormalizedUTF8(piece(s), err) && U_SUCCESS(err)) return std::string(s);
  err = U_ZERO_ERROR;
  std::string out;
  out.reserve(s.size());
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(s.size()));
  size_t done = 0;
  char32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = std::max<size_t>(Utf8At(s, i, &cp), 1);
    if (cp >= 0x300 && NfcDiffersFromUnicode9(*nfc, cp)) {
      nfc->normalizeUTF8(0, piece(s.substr(done, i - done)), sink, nullptr, err);
      sink.Append(s.data() + i, static_cast<int32_t>(len));
      done = i + len;
    }
    i += len;
  }
  nfc->normalizeUTF8(0, piece(s.substr(done)), sink, nullptr, err);
  if (U_FAILURE(err)) return InternalError(std::string("NFC failed: ") + u_errorName(err));
  return out;
}

std::optional<int32_t> LookupToken(const BpeTokenizerImpl& t, std::string_view token) {
  for (const AddedToken& a : t.added) {
    if (a.content == token) return a.id;
  }
  if (std::optional<std::string> bytes = AlphabetToBytes(token)) {
    if (const auto it = t.word_ids.find(*bytes); it != t.word_ids.end()) return it->second;
  }
  for (size_t id = 0; id < t.id_text.size(); ++id) {
    if (t.id_known[id] != 0 && t.id_text[id] == token) return static_cast<int32_t>(id);
  }
  return std::nullopt;
}

// bos/eos from the post-processor's single-sequence template: special tokens
// before $A and after it.
void SpecialsFromTemplate(const json& p, BpeTokenizerImpl* t) {
  if (!p.is_object()) return;
  if (p.value("type", "") == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& q : p["processors"]) SpecialsFromTemplate(q, t);
    return;
  }
  if (p.value("type", "") != "TemplateProcessing" || !p.contains("single") ||
      !p["single"].is_array())
    return;
  bool seen_sequence = false;
  for (const json& piece : p["single"]) {
    if (!piece.is_object()) continue;
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const auto special = piece.find("SpecialToken");
    if (special == piece.end() || !special->is_object()) continue;
    const std::string name = special->value("id", "");
    std::optional<int32_t> id;
    if (p.contains("special_tokens") && p["special_tokens"].contains(name)) {
      const json& ids = p["special_tokens"][name].value("ids", json::array());
      if (ids.is_array() && !ids.empty() && ids[0].is_number_integer()) id = ids[0].get<int32_t>();
    }
    if (!id) id = LookupToken(*t, name);
    if (!id) continue;
    if (!seen_sequence && !t->bos) t->bos = id;
    if (seen_sequence && !t->eos) t->eos = id;
  }
}

// bos_token / eos_token of a tokenizer_config.json beside tokenizer.json; they
// override the template's (Llama 3 Instruct ends turns with <|eot_id|>, which
// no template says).
void SpecialsFromConfig(const fs::path& dir, BpeTokenizerImpl* t) {
  std::ifstream in(dir / "tokenizer_config.json");
  if (!in) return;
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return;
  const auto read = [&](const char* key) -> std::optional<int32_t> {
    const auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    if (it->is_string()) return LookupToken(*t, it->get_ref<const std::string&>());
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      return LookupToken(*t, (*it)["content"].get_ref<const std::string&>());
    return std::nullopt;
  };
  if (auto bos = read("bos_token")) t->bos = bos;
  if (auto eos = read("eos_token")) t->eos = eos;
}

StatusOr<std::shared_ptr<BpeTokenizerImpl>> LoadImpl(const std::string& path) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  if (!fs::is_regular_file(file, ec)) {
    return NotFoundError(file.string() +
                         ": no such tokenizer.json (fix: give the model directory holding "
                         "tokenizer.json, or the file itself)");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFoundError(file.string() + ": cannot be read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  const JsonReader r(file.string());
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return InvalidArgumentError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!doc.is_object()) return r.Error("(top level)", "must be an object");

  auto t = std::make_shared<BpeTokenizerImpl>();
  t->json_path = file.string();
  // nlohmann reports a wrong type as an exception; the checks above each read
  // should leave none, and this keeps a missed one from escaping.
  try {
    if (!doc.contains("model")) return r.Error("model", "is missing");
    ORRERY_RETURN_IF_ERROR(ParseModel(r, doc["model"], t.get()));
    ORRERY_RETURN_IF_ERROR(
        ParseNormalizer(r, doc.value("normalizer", json()), "normalizer", &t->nfc));
    ORRERY_RETURN_IF_ERROR(ParsePreTokenizer(r, doc.value("pre_tokenizer", json()), t.get()));
    const json decoder = doc.value("decoder", json());
    if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
      return r.Unsupported("decoder", decoder, "ByteLevel (or null)");
    ORRERY_RETURN_IF_ERROR(ParseAddedTokens(r, doc.value("added_tokens", json()), t.get()));
    SpecialsFromTemplate(doc.value("post_processor", json()), t.get());
    SpecialsFromConfig(file.parent_path(), t.get());
  } catch (const json::exception& e) {
    return r.Error("(structure)", std::string("is not a tokenizer.json's: ") + e.what());
  }

  // Added tokens: their ids extend the table; content is what they decode to.
  int64_t max_id = static_cast<int64_t>(t->id_bytes.size()) - 1;
  for (const AddedToken& a : t->added) max_id = std::max<int64_t>(max_id, a.id);
  t->vocab_size = max_id + 1;
  t->id_bytes.resize(static_cast<size_t>(t->vocab_size));
  t->id_text.resize(static_cast<size_t>(t->vocab_size));
  t->id_known.resize(static_cast<size_t>(t->vocab_size), 0);
  for (size_t k = 0; k < t->added.size(); ++k) {
    AddedToken& a = t->added[k];
    t->id_known[a.id] = 1;
    t->id_bytes[a.id] = a.content;
    t->id_text[a.id] = a.content;
    t->any_lstrip = t->any_lstrip || a.lstrip;
    t->any_rstrip = t->any_rstrip || a.rstrip;
    a.normalized_content = a.content;
    if (a.normalized && t->nfc) {
      ORRERY_ASSIGN_OR_RETURN(a.normalized_content, Nfc(a.content));
    }
    t->longest_added = std::max({t->longest_added, a.content.size(), a.normalized_content.size()});
    if (a.normalized) {
      t->normalized_matcher.Add(a.normalized_content, static_cast<int>(k));
    } else {
      t->raw_matcher.Add(a.content, static_cast<int>(k));
    }
  }
  t->raw_matcher.Build();
  t->normalized_matcher.Build();
  if (t->nfc && NfcInstance() == nullptr)
    return InternalError("ICU's NFC normalizer is unavailable (needed by " + t->json_path + ")");

  return t;
}

}  // namespace

// ---------------------------------------------------------------------------
// Encoding.

// The library's AddedVocabulary::find_matches: `emit(piece, token, offset)`
// for each stretch of text (token -1) and each added token, in order.
template <typename Emit>
void BpeTokenizerImpl::SplitAddedTokens(std::string_view s, const TokenMatcher& matcher,
                                        Emit&& emit) const {
  if (matcher.empty()) {
    if (!s.empty()) emit(s, -1, size_t{0});
    return;
  }
  size_t done = 0;  // end of the last piece emitted
  size_t from = 0;  // where the search resumes
  size_t start = 0, len = 0;
  int token = -1;
  while (matcher.Find(s, from, &start, &len, &token)) {
    from = start + len;
    size_t stop = start + len;
    const AddedToken& a = added[static_cast<size_t>(token)];
    if (a.single_word) {
      char32_t cp = 0;
      const bool word_before =
          start > 0 && Utf8At(s, PrevStart(s, start), &cp) > 0 && IsWordChar(cp);
      const bool word_after = stop < s.size() && Utf8At(s, stop, &cp) > 0 && IsWordChar(cp);
      if (word_before || word_after) continue;
    }
    if (a.lstrip) {
      size_t k = start;
      char32_t cp = 0;
      while (k > done) {
        const size_t prev = PrevStart(s, k);
        if (Utf8At(s, prev, &cp) == 0 || !IsWhiteSpace(cp)) break;
        k = prev;
      }
      start = k;
    }
    if (a.rstrip) {
      char32_t cp = 0;
      while (stop < s.size()) {
        const size_t l = Utf8At(s, stop, &cp);
        if (l == 0 || !IsWhiteSpace(cp)) break;
        stop += l;
      }
    }
    if (done < start) emit(s.substr(done, start - done), -1, done);
    emit(s.substr(start, stop - start), token, start);
    done = stop;
  }
  if (done < s.size()) emit(s.substr(done), -1, done);
}

template <typename Emit>
void BpeTokenizerImpl::PreTokenize(std::string_view piece, size_t step, bool suppress_prefix,
                                   Emit&& emit) const {
  const PreTokenizerStep& st = steps[step];
  if (st.kind == PreTokenizerStep::Kind::kSplit) {
    for (size_t i = 0; i < piece.size();) {
      const size_t end = MatchEnd(st.pattern, piece, i);
      PreTokenize(piece.substr(i, end - i), step + 1, false, emit);
      i = end;
    }
    return;
  }
  // ByteLevel, the last step.
  std::string prefixed;
  if (st.add_prefix_space && !suppress_prefix && !piece.empty() && piece[0] != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(piece);
    piece = prefixed;
  }
  if (!st.use_regex) {
    emit(piece);
    return;
  }
  for (size_t i = 0; i < piece.size();) {
    const size_t end = MatchGpt2(piece, i);
    emit(piece.substr(i, end - i));
    i = end;
  }
}

void BpeTokenizerImpl::EncodeWord(std::string_view word, WordCache* cache,
                                  std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    const int32_t id = byte_ids[static_cast<unsigned char>(word[0])];
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  // ignore_merges (Llama 3): a word in the vocabulary is that one token, even
  // where merging would split it.
  if (ignore_merges) {
    if (const auto it = word_ids.find(word); it != word_ids.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (cache != nullptr && cache->Lookup(word, out)) return;
  const size_t before = out->size();
  MergeWord(word, out);
  if (cache != nullptr) cache->Insert(word, out->data() + before, out->size() - before);
}

// The library's Word::merge_all: repeatedly merge the adjacent pair of lowest
// rank (leftmost among equals), through a heap whose stale entries are skipped.
void BpeTokenizerImpl::MergeWord(std::string_view word, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    int32_t len;  // bytes; 0 once merged into its left neighbour
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t id;
  };
  // The heap's top is the lowest rank, then the lowest position.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();

  bool last_unknown = false;
  for (const char ch : word) {
    int32_t id = byte_ids[static_cast<unsigned char>(ch)];
    const bool unknown = id < 0;
    if (unknown) {
      // A byte outside the vocabulary: the unknown token if there is one
      // (consecutive ones fused with fuse_unk), else dropped, as the library.
      if (unk_id < 0) continue;
      if (fuse_unk && last_unknown) {
        ++symbols.back().len;
        continue;
      }
      id = unk_id;
    }
    last_unknown = unknown;
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  const auto rule = [&](int32_t a, int32_t b) -> const MergeRule* {
    const auto it = merges.find(PairKey(a, b));
    return it == merges.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeRule* m = rule(symbols[k].id, symbols[k + 1].id))
      heap.push_back({m->rank, static_cast<int32_t>(k), m->id});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    const MergeRule* m = rule(left.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // stale: a neighbour changed
    symbols[left.next].len = 0;
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeRule* p = rule(symbols[left.prev].id, left.id)) {
        heap.push_back({p->rank, left.prev, p->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (left.next >= 0) {
      if (const MergeRule* q = rule(left.id, symbols[left.next].id)) {
        heap.push_back({q->rank, top.pos, q->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
  for (int32_t k = 0; k >= 0; k = symbols[k].next) out->push_back(symbols[k].id);
}

Status BpeTokenizerImpl::EncodeChunk(std::string_view text,
                                     const BpeTokenizer::ChunkContext& context,
                                     std::vector<int32_t>* out) const {
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgumentError("invalid UTF-8 at byte offset " +
                                std::to_string(context.byte_offset + static_cast<int64_t>(bad)) +
                                " (fix: convert the text to UTF-8, e.g. iconv -f latin1 -t utf-8)");
  }
  // A cache pays off once words repeat; tiny texts skip its setup.
  std::optional<WordCache> cache;
  if (text.size() >= 4096) cache.emplace();
  WordCache* word_cache = cache ? &*cache : nullptr;
  const auto emit_word = [&](std::string_view word) { EncodeWord(word, word_cache, out); };

  Status status;
  SplitAddedTokens(text, raw_matcher, [&](std::string_view piece, int token, size_t offset) {
    if (!status.ok()) return;
    if (token >= 0) {
      out->push_back(added[static_cast<size_t>(token)].id);
      return;
    }
    std::string normalized;
    if (nfc && MayChangeUnderNfc(piece)) {
      StatusOr<std::string> n = Nfc(piece);
      if (!n.ok()) {
        status = n.status();
        return;
      }
      normalized = std::move(*n);
      piece = normalized;
    }
    SplitAddedTokens(
        piece, normalized_matcher, [&](std::string_view sub, int sub_token, size_t sub_offset) {
          if (sub_token >= 0) {
            out->push_back(added[static_cast<size_t>(sub_token)].id);
            return;
          }
          const bool suppress =
              context.continues && prefix_space_on_pieces && offset == 0 && sub_offset == 0;
          PreTokenize(sub, 0, suppress, emit_word);
        });
  });
  return status;
}

// Does no added token straddle p, and (check_lstrip) none with lstrip start at
// p? Either would make the library's split differ once the text is cut there.
bool BpeTokenizerImpl::CutAllowedByAddedTokens(std::string_view text, size_t p,
                                               bool check_lstrip) const {
  for (const AddedToken& a : added) {
    for (const std::string* content : {&a.content, &a.normalized_content}) {
      const size_t len = content->size();
      if (len == 0) continue;
      for (size_t s = p >= len ? p - len + 1 : 0; s < p; ++s) {
        if (text.compare(s, len, *content) == 0) return false;
      }
      if (check_lstrip && a.lstrip && text.compare(p, len, *content) == 0) return false;
    }
  }
  return true;
}

bool BpeTokenizerImpl::AddedTokenEndsAt(std::string_view text, size_t end) const {
  for (const AddedToken& a : added) {
    for (const std::string* content : {&a.content, &a.normalized_content}) {
      const size_t len = content->size();
      if (len > 0 && len <= end && text.compare(end - len, len, *content) == 0) return true;
    }
  }
  return false;
}

size_t BpeTokenizerImpl::SplitPoint(std::string_view text, size_t from) const {
  const size_t n = text.size();
  from = std::max<size_t>(from, 1);
  // The added-token checks look up to a token's length past p: text that ends
  // sooner may go on with a token, so no cut that close to the end.
  if (n < longest_added + 1) return 0;
  char32_t cp = 0;
  for (size_t p = n - longest_added; p-- > from;) {
    const char before = text[p - 1];
    if (before == '\n') {
      // After a '\n', before something other than whitespace. With the GPT-2
      // pattern, \s+(?!\S) would keep a longer whitespace run ending in '\n'
      // whole at the end of a chunk but split it mid-text, so the '\n' must be
      // the run's only character there.
      const size_t len = Utf8At(text, p, &cp);
      if (len == 0 || IsWhiteSpace(cp)) continue;
      if (uses_gpt2_pattern) {
        if (p < 2) continue;
        const size_t prev = PrevStart(text, p - 1);
        if (Utf8At(text, prev, &cp) == 0 || IsWhiteSpace(cp)) continue;
        // Nor may the '\n' open a piece that gets a prefix space.
        if (prefix_space_on_pieces && AddedTokenEndsAt(text, p - 1)) continue;
      }
      if (CutAllowedByAddedTokens(text, p, /*check_lstrip=*/true)) return p;
    } else if (text[p] == ' ' && !any_rstrip && p + 1 < n) {
      // Before a ' ' between two letters: every pattern ends a letter run at
      // the space and starts the next piece with it.
      const size_t prev = PrevStart(text, p);
      if (Utf8At(text, prev, &cp) == 0 || Classify(cp) != Cls::kLetter) continue;
      if (Utf8At(text, p + 1, &cp) == 0 || Classify(cp) != Cls::kLetter) continue;
      if (CutAllowedByAddedTokens(text, p, /*check_lstrip=*/false)) return p;
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// BpeTokenizer.

StatusOr<BpeTokenizer> BpeTokenizer::Load(const std::string& path) {
  ORRERY_ASSIGN_OR_RETURN(std::shared_ptr<BpeTokenizerImpl> impl, LoadImpl(path));
  return BpeTokenizer(std::move(impl));
}

StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  ORRERY_RETURN_IF_ERROR(impl_->EncodeChunk(text, ChunkContext{}, &ids));
  return ids;
}

Status BpeTokenizer::EncodeChunk(std::string_view text, const ChunkContext& context,
                                 std::vector<int32_t>* out) const {
  return impl_->EncodeChunk(text, context, out);
}

size_t BpeTokenizer::SplitPoint(std::string_view text, size_t from) const {
  return impl_->SplitPoint(text, from);
}

StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    if (id < 0 || id >= impl_->vocab_size || impl_->id_known[id] == 0) {
      return OutOfRangeError("ids[" + std::to_string(k) + "] = " + std::to_string(id) +
                             " is not in the vocabulary of " + impl_->json_path + " (" +
                             std::to_string(impl_->vocab_size) + " ids)");
    }
    out += impl_->id_bytes[id];
  }
  return out;
}

int64_t BpeTokenizer::VocabSize() const { return impl_->vocab_size; }
std::optional<int32_t> BpeTokenizer::BosId() const { return impl_->bos; }
std::optional<int32_t> BpeTokenizer::EosId() const { return impl_->eos; }
std::optional<int32_t> BpeTokenizer::TokenId(std::string_view token) const {
  return LookupToken(*impl_, token);
}
const std::string& BpeTokenizer::JsonPath() const { return impl_->json_path; }

// ---------------------------------------------------------------------------
// Text files.

namespace {

std::string ErrnoText() { return std::strerror(errno); }

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return InternalError("cannot write " + path + ": " + ErrnoText());
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

// Little-endian on every host: the layout TokenFile reads.
void PackTokens(const std::vector<int32_t>& ids, int token_bytes, std::string* out) {
  out->resize(ids.size() * static_cast<size_t>(token_bytes));
  char* p = out->data();
  for (const int32_t id : ids) {
    const auto v = static_cast<uint32_t>(id);
    for (int b = 0; b < token_bytes; ++b) *p++ = static_cast<char>((v >> (8 * b)) & 0xFF);
  }
}

// A one-line bar on stderr, redrawn at most four times a second.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string name, int64_t total)
      : enabled_(enabled), name_(std::move(name)), total_(total) {}
  void Update(int64_t done, int64_t tokens, bool last = false) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - drawn_ < std::chrono::milliseconds(250)) return;
    drawn_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double fraction =
        total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1;
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::string bar(static_cast<size_t>(filled), '=');
    bar.resize(width, ' ');
    std::fprintf(stderr, "\rtokenizing %s [%s] %3.0f%% %s/%s %.2fM tokens/s ", name_.c_str(),
                 bar.c_str(), fraction * 100, HumanBytes(static_cast<uint64_t>(done)).c_str(),
                 HumanBytes(static_cast<uint64_t>(total_)).c_str(),
                 seconds > 0 ? static_cast<double>(tokens) / seconds / 1e6 : 0.0);
    if (last) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  std::string name_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point drawn_{};
};

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

StatusOr<int64_t> EncodeTextFileWithTokenizer(const std::string& text_path,
                                              const BpeTokenizer& tokenizer,
                                              const std::string& token_path, int token_bytes,
                                              const TextEncodeOptions& options) {
  if (token_bytes == 0) token_bytes = tokenizer.VocabSize() <= 65536 ? 2 : 4;
  if (token_bytes != 2 && token_bytes != 4) {
    return InvalidArgumentError("token_bytes " + std::to_string(token_bytes) +
                                " is not supported (fix: 2 for uint16 or 4 for uint32 tokens)");
  }
  if (token_bytes == 2 && tokenizer.VocabSize() > 65536) {
    return InvalidArgumentError("token_bytes 2 cannot hold the ids of " + tokenizer.JsonPath() +
                                " (vocabulary of " + std::to_string(tokenizer.VocabSize()) +
                                "; fix: token_bytes 4)");
  }
  if (options.chunk_bytes <= 0) return InvalidArgumentError("chunk_bytes must be positive");

  Fd in(::open(text_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return NotFoundError("cannot open text " + text_path + ": " + ErrnoText());
  struct stat st {};
  if (::fstat(in.get(), &st) != 0)
    return InternalError("cannot stat " + text_path + ": " + ErrnoText());

  // Beside the target (a rename within one filesystem), named for this
  // process and call; O_EXCL refuses a leftover, mode 0666 less the umask as
  // any new file (mkstemp's 0600 would hide the tokens from other users).
  static std::atomic<uint64_t> calls{0};
  const std::string tmp =
      token_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(calls.fetch_add(1));
  Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (out.get() < 0) return InternalError("cannot create " + tmp + ": " + ErrnoText());
  // Until the rename, a failure removes the temporary file: token_path is
  // either the old file or the whole new one.
  struct Cleanup {
    const std::string& path;
    bool armed = true;
    ~Cleanup() {
      if (armed) ::unlink(path.c_str());
    }
  } cleanup{tmp};

  ProgressBar progress(
      options.progress && ::isatty(STDERR_FILENO) == 1 && st.st_size >= options.progress_min_bytes,
      fs::path(text_path).filename().string(), st.st_size);
  const auto chunk = static_cast<size_t>(options.chunk_bytes);
  std::string buf;
  std::vector<int32_t> ids;
  std::string packed;
  int64_t offset = 0;  // of buf[0] in the file
  int64_t total = 0;
  size_t searched = 0;  // buf[0, searched) holds no cut
  bool continues = false;
  bool eof = false;
  while (!eof || !buf.empty()) {
    // Top the buffer up to a chunk past what is known to hold no cut.
    const size_t want = std::max(chunk, searched + chunk);
    while (!eof && buf.size() < want) {
      const size_t old = buf.size();
      buf.resize(want);
      const ssize_t n = ::read(in.get(), buf.data() + old, want - old);
      if (n < 0 && errno == EINTR) {
        buf.resize(old);
        continue;
      }
      if (n < 0) return InternalError("cannot read " + text_path + ": " + ErrnoText());
      buf.resize(old + static_cast<size_t>(n));
      if (n == 0) eof = true;
    }
    size_t cut = buf.size();
    if (!eof) {
      // Look again a little before `searched`: a cut needs some text after it
      // (a character, an added token's length), which the last look lacked.
      constexpr size_t kLookBack = 4096;
      cut = tokenizer.SplitPoint(buf, searched > kLookBack ? searched - kLookBack : 0);
      if (cut == 0) {
        searched = buf.size();
        continue;  // no safe cut yet: hold more text
      }
    }
    ids.clear();
    const Status s =
        tokenizer.EncodeChunk(std::string_view(buf).substr(0, cut), {continues, offset}, &ids);
    if (!s.ok()) return s.WithContext(text_path);
    PackTokens(ids, token_bytes, &packed);
    ORRERY_RETURN_IF_ERROR(WriteAll(out.get(), packed.data(), packed.size(), tmp));
    total += static_cast<int64_t>(ids.size());
    offset += static_cast<int64_t>(cut);
    buf.erase(0, cut);
    searched = 0;
    continues = true;
    progress.Update(offset, total);
  }
  progress.Update(offset, total, /*last=*/true);
  if (::fsync(out.get()) != 0) return InternalError("cannot fsync " + tmp + ": " + ErrnoText());
  if (::close(out.Release()) != 0) return InternalError("cannot close " + tmp + ": " + ErrnoText());
  if (::rename(tmp.c_str(), token_path.c_str()) != 0)
    return InternalError("cannot rename " + tmp + " to " + token_path + ": " + ErrnoText());
  cleanup.armed = false;
  // The rename itself survives a crash once the directory is synced; a
  // filesystem that cannot sync directories still has a whole file or none.
  const fs::path dir = fs::path(token_path).parent_path();
  Fd dir_fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) (void)::fsync(dir_fd.get());
  return total;
}

std::string CachedTokenPath(const std::string& cache_dir, const std::string& text_path,
                            const std::string& tokenizer_path, int token_bytes) {
  // FNV-1a, 64 bits: a cache key among a worker's few corpora, not a defence
  // against collisions crafted on purpose.
  uint64_t h = 0xcbf29ce484222325ull;
  std::error_code ec;
  const fs::path text_abs = fs::absolute(text_path, ec);
  h = Fnv1a(h, ec ? text_path : text_abs.string());
  struct stat st {};
  if (::stat(text_path.c_str(), &st) == 0) {
    const std::string meta = "\n" + std::to_string(st.st_size) + "\n" +
                             std::to_string(st.st_mtim.tv_sec) + "." +
                             std::to_string(st.st_mtim.tv_nsec);
    h = Fnv1a(h, meta);
  } else {
    h = Fnv1a(h, "\nmissing");
  }
  fs::path json_path = tokenizer_path;
  if (fs::is_directory(json_path, ec)) json_path /= "tokenizer.json";
  if (std::ifstream in(json_path, std::ios::binary); in) {
    std::stringstream content;
    content << in.rdbuf();
    h = Fnv1a(h, "\ntokenizer\n" + content.str());
  } else {
    h = Fnv1a(h, "\nno tokenizer " + json_path.string());
  }
  h = Fnv1a(h, "\nbytes " + std::to_string(token_bytes));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  std::string stem = fs::path(text_path).stem().string();
  for (char& c : stem) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  if (stem.empty()) stem = "text";
  return (fs::path(cache_dir) / (stem + "-" + hex + ".tokens")).string();
}

}  // namespace orrery::data
