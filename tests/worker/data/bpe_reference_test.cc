// BpeTokenizer against the Hugging Face `tokenizers` library itself: the
// pinned Python reference (scripts/reference-venv) trains tiny byte-level BPE
// tokenizers in the GPT-2, Llama 3, Qwen2 and RoBERTa styles
// (bpe_reference.py), and every id must match, for test strings in many
// scripts and for a held-out file encoded whole, which the C++ side encodes in
// small streamed chunks to exercise SplitPoint. Fails, never skips, when the
// reference venv is missing.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "worker/data/bpe.h"

namespace orrery::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a shell command; its stdout, or nullopt when it fails.
std::optional<std::string> RunCommand(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  while (const size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) return std::nullopt;
  return out;
}

std::string Escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

// "" when equal, else where they first differ: the ids around it, what each
// side's ids there decode to, and the text there.
std::string FirstMismatch(const BpeTokenizer& tok, const std::vector<int32_t>& got,
                          const std::vector<int32_t>& want, std::string_view text) {
  if (got == want) return "";
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const auto show = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = k >= 3 ? k - 3 : 0; i < std::min(ids.size(), k + 4); ++i) {
      auto piece = tok.Decode({ids[i]});
      s += (i == k ? " >>" : " ") + std::to_string(ids[i]) + "'" +
           Escape(piece.ok() ? *piece : "?") + "'";
    }
    return s;
  };
  const auto prefix = tok.Decode(std::vector<int32_t>(want.begin(), want.begin() + k));
  const size_t at = prefix.ok() ? prefix->size() : 0;
  const size_t from = at >= 20 ? at - 20 : 0;
  std::ostringstream out;
  out << "first difference at id " << k << " (got " << got.size() << " ids, want " << want.size()
      << ")\n  got: " << show(got) << "\n  want:" << show(want) << "\n  text near byte " << at
      << ": '" << Escape(text.substr(std::min(from, text.size()), 60)) << "'";
  return out.str();
}

class BpeReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string source = ORRERY_SOURCE_DIR;
    const auto python = RunCommand(source + "/scripts/reference-venv --python");
    std::string py = python ? *python : "";
    while (!py.empty() && (py.back() == '\n' || py.back() == ' ')) py.pop_back();
    if (py.empty() || !fs::exists(py) || !RunCommand("'" + py + "' -c 'import tokenizers' 2>&1")) {
      setup_error_ = "the Python reference is missing (" + py +
                     " cannot import tokenizers): run scripts/reference-venv";
      return;
    }
    dir_ = fs::path(ORRERY_BINARY_DIR) / "tests" / ("bpe_reference." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    const std::string command = "'" + py + "' '" + source +
                                "/tests/worker/data/bpe_reference.py' --out '" + dir_.string() +
                                "' 2>&1";
    if (const auto out = RunCommand(command); !out) {
      setup_error_ = "bpe_reference.py failed: " + command;
      return;
    }
    reference_ = json::parse(ReadFile(dir_ / "reference.json"));
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void CheckStyle(const std::string& style, bool round_trips) {
    ASSERT_EQ(setup_error_, "");
    const json& ref = reference_["styles"][style];
    auto tok = BpeTokenizer::Load((dir_ / style).string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->VocabSize(), ref["vocab_size"].get<int64_t>());

    const json& cases = reference_["cases"];
    int mismatches = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string text = cases[i].get<std::string>();
      const auto want = ref["ids"][i].get<std::vector<int32_t>>();
      auto got = tok->Encode(text);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::string diff = FirstMismatch(*tok, *got, want, text);
      if (!diff.empty() && ++mismatches <= 5) {
        ADD_FAILURE() << style << " case " << i << " '" << Escape(text) << "': " << diff;
      }
      auto decoded = tok->Decode(want);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      // Where the library's decoder makes U+FFFD of an added token's
      // characters (bpe_reference.py), the (normalized) text is the expectation.
      const std::string library_decoded = ref["decoded"][i].get<std::string>();
      const std::string normalized = ref["normalized"][i].get<std::string>();
      const auto has_fffd = [](const std::string& s) {
        return s.find("\xEF\xBF\xBD") != std::string::npos;
      };
      EXPECT_EQ(*decoded,
                has_fffd(library_decoded) && !has_fffd(normalized) ? normalized : library_decoded)
          << style << " case " << i;
      if (round_trips) {
        EXPECT_EQ(*decoded, text) << style << " case " << i;
      }
    }
    EXPECT_EQ(mismatches, 0) << style << ": " << mismatches << " of " << cases.size()
                             << " strings differ";

    // The held-out file: as one string, and streamed through small chunks
    // (cut at SplitPoint) into a token file.
    const std::string heldout = ReadFile(dir_ / "heldout.txt");
    const auto want = ref["file_ids"].get<std::vector<int32_t>>();
    auto whole = tok->Encode(heldout);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(FirstMismatch(*tok, *whole, want, heldout), "") << style << " heldout.txt";
    for (const int64_t chunk : {int64_t{64}, int64_t{1000}, int64_t{1} << 20}) {
      const fs::path bin = dir_ / (style + "." + std::to_string(chunk) + ".bin");
      TextEncodeOptions options;
      options.chunk_bytes = chunk;
      options.progress = false;
      auto n = EncodeTextFileWithTokenizer((dir_ / "heldout.txt").string(), *tok, bin.string(), 4,
                                           options);
      ASSERT_TRUE(n.ok()) << n.status();
      const std::string bytes = ReadFile(bin);
      ASSERT_EQ(bytes.size(), static_cast<size_t>(*n) * 4);
      std::vector<int32_t> streamed(static_cast<size_t>(*n));
      for (size_t k = 0; k < streamed.size(); ++k) {
        uint32_t v = 0;
        for (int b = 3; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(bytes[k * 4 + b]);
        streamed[k] = static_cast<int32_t>(v);
      }
      EXPECT_EQ(FirstMismatch(*tok, streamed, want, heldout), "")
          << style << " heldout.txt streamed in chunks of " << chunk << " bytes";
    }
  }

  static inline std::string setup_error_;
  static inline fs::path dir_;
  static inline json reference_;
};

TEST_F(BpeReferenceTest, Gpt2) { CheckStyle("gpt2", /*round_trips=*/true); }
TEST_F(BpeReferenceTest, Llama3) { CheckStyle("llama3", /*round_trips=*/true); }
// NFC changes text, so only the decoded ids are compared.
TEST_F(BpeReferenceTest, Qwen2) { CheckStyle("qwen2", /*round_trips=*/false); }
// add_prefix_space, lstrip and rstrip add and drop spaces.
TEST_F(BpeReferenceTest, Roberta) { CheckStyle("roberta", /*round_trips=*/false); }

TEST_F(BpeReferenceTest, SpecialIdsFromThePostProcessor) {
  ASSERT_EQ(setup_error_, "");
  auto llama = BpeTokenizer::Load((dir_ / "llama3" / "tokenizer.json").string());
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->BosId(), llama->TokenId("<|begin_of_text|>"));
  EXPECT_TRUE(llama->BosId().has_value());
  EXPECT_FALSE(llama->EosId().has_value());
}

}  // namespace
}  // namespace orrery::data
