// Tokenizer throughput: BpeTokenizer (worker/data/bpe.h) against the Hugging Face
// `tokenizers` library it reproduces, on the same seeded multilingual corpus and
// the same tokenizer.json files, measured in one run. The Python side
// (tests/worker/data/bpe_reference.py --bench, in scripts/reference-venv) trains
// the GPT-2, Llama 3 and Qwen2 style tokenizers, writes the corpus, times the
// library and writes its ids; this program times Encode on the whole text, and
// EncodeTextFileWithTokenizer (streamed, into a token file), checks every id
// against the library's, and prints:
//
//   style   tokens   orrery Encode   orrery file   tokenizers encode   encode_batch (N threads)
//
// All single-threaded except the library's encode_batch over the corpus's lines.
//
//   tokenizer_bench [--lines N] [--styles gpt2,llama3,qwen2] [--python PY] [--keep DIR]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/data/bpe.h"

namespace fs = std::filesystem;
using orrery::data::BpeTokenizer;

namespace {

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

std::vector<int32_t> ReadIds(const fs::path& path, int token_bytes) {
  const std::string bytes = ReadFile(path);
  std::vector<int32_t> ids(bytes.size() / static_cast<size_t>(token_bytes));
  for (size_t k = 0; k < ids.size(); ++k) {
    uint32_t v = 0;
    for (int b = token_bytes - 1; b >= 0; --b)
      v = (v << 8) | static_cast<unsigned char>(bytes[k * static_cast<size_t>(token_bytes) + b]);
    ids[k] = static_cast<int32_t>(v);
  }
  return ids;
}

int Usage() {
  std::cerr << "Usage: tokenizer_bench [--lines N] [--styles gpt2,llama3,qwen2] [--python PY]"
               " [--keep DIR]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int lines = 40000;
  std::string styles = "gpt2,llama3,qwen2";
  std::string python;
  std::string keep;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const std::string v = argv[++i];
    if (a == "--lines") {
      lines = std::atoi(v.c_str());
      if (lines <= 0) return Usage();
    } else if (a == "--styles") {
      styles = v;
    } else if (a == "--python") {
      python = v;
    } else if (a == "--keep") {
      keep = v;
    } else {
      return Usage();
    }
  }
  const std::string source = ORRERY_SOURCE_DIR;
  if (python.empty()) {
    FILE* pipe = ::popen((source + "/scripts/reference-venv --python").c_str(), "r");
    char buf[4096] = {};
    if (pipe != nullptr) {
      const size_t n = std::fread(buf, 1, sizeof buf - 1, pipe);
      buf[n] = '\0';
      ::pclose(pipe);
    }
    python = Trim(buf);
  }
  if (python.empty() || !fs::exists(python)) {
    std::cerr << "tokenizer_bench: no Python reference at '" << python
              << "' (fix: run scripts/reference-venv)\n";
    return 1;
  }
  const fs::path dir = keep.empty() ? fs::temp_directory_path() /
                                          ("orrery-tokenizer-bench." + std::to_string(::getpid()))
                                    : fs::path(keep);
  fs::create_directories(dir);
  const std::string command =
      "'" + python + "' '" + source + "/tests/worker/data/bpe_reference.py' --bench --out '" +
      dir.string() + "' --lines " + std::to_string(lines) + " --styles " + styles;
  std::cerr << "Training the tokenizers and timing the library (" << lines << " lines)...\n";
  if (std::system(command.c_str()) != 0) {
    std::cerr << "tokenizer_bench: failed: " << command << "\n";
    return 1;
  }
  const nlohmann::json library = nlohmann::json::parse(ReadFile(dir / "bench.json"));
  const std::string text = ReadFile(dir / "heldout.txt");

  std::printf("corpus: %.1f MiB of seeded multilingual text, %d lines\n",
              static_cast<double>(text.size()) / (1024.0 * 1024.0), lines);
  std::printf("%-8s %9s %15s %15s %18s %26s  %s\n", "style", "tokens", "orrery Encode",
              "orrery file", "tokenizers encode", "tokenizers encode_batch", "ids");
  int status = 0;
  for (const auto& [style, lib] : library.items()) {
    auto tok = BpeTokenizer::Load((dir / style).string());
    if (!tok.ok()) {
      std::cerr << tok.status() << "\n";
      return 1;
    }
    double encode_s = 1e30;
    std::vector<int32_t> ids;
    for (int run = 0; run < 3; ++run) {
      const auto start = std::chrono::steady_clock::now();
      auto got = tok->Encode(text);
      encode_s = std::min(encode_s, Seconds(start));
      if (!got.ok()) {
        std::cerr << got.status() << "\n";
        return 1;
      }
      ids = std::move(*got);
    }
    double file_s = 1e30;
    const fs::path bin = dir / (style + ".bin");
    for (int run = 0; run < 3; ++run) {
      const auto start = std::chrono::steady_clock::now();
      auto n = orrery::data::EncodeTextFileWithTokenizer((dir / "heldout.txt").string(), *tok,
                                                         bin.string(), 4);
      file_s = std::min(file_s, Seconds(start));
      if (!n.ok()) {
        std::cerr << n.status() << "\n";
        return 1;
      }
    }
    const std::vector<int32_t> want = ReadIds(dir / (style + ".ids"), 4);
    const bool same = ids == want && ReadIds(bin, 4) == want;
    if (!same) status = 1;
    const double tokens = static_cast<double>(ids.size());
    const auto rate = [&](double s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2fM tok/s", tokens / s / 1e6);
      return std::string(buf);
    };
    const std::string batch = rate(lib["encode_batch_s"].get<double>()) + " (" +
                              std::to_string(lib["threads"].get<int>()) + " threads)";
    std::printf("%-8s %9zu %15s %15s %18s %26s  %s\n", style.c_str(), ids.size(),
                rate(encode_s).c_str(), rate(file_s).c_str(),
                rate(lib["encode_s"].get<double>()).c_str(), batch.c_str(),
                same ? "identical" : "DIFFER");
  }
  if (keep.empty()) fs::remove_all(dir);
  return status;
}
