// `orrery tokenize --tokenizer DIR_OR_JSON --input TEXT --output TOKENS
// [--token-bytes 2|4]`: a text file through the model's own tokenizer.json
// (worker/data/bpe.h) into the token file a training job reads, with the count,
// the vocabulary size and the speed. The worker does the same on its own; this
// is for preparing a corpus ahead of time and for checking a tokenizer loads.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <string>

#include "common/bytes_text.h"
#include "operator/cli/commands.h"
#include "worker/data/bpe.h"

namespace orrery::cli {
namespace {

constexpr const char* kUsage =
    "Usage: orrery tokenize --tokenizer DIR_OR_JSON --input TEXT --output TOKENS\n"
    "                       [--token-bytes 2|4]\n";

int RunTokenize(Invocation& in) {
  if (WantsHelp(in.args)) {
    in.out << kUsage
           << "\nEncodes the UTF-8 file TEXT with the model's tokenizer (a Hugging Face\n"
              "tokenizer.json with a byte-level BPE, as GPT-2, Llama 3 and Qwen2 ship; give\n"
              "the model directory or the file) into TOKENS: little-endian uint16 ids\n"
              "(--token-bytes 2) or uint32 (4); the default is 2 when the vocabulary fits.\n"
              "The ids are those of the `tokenizers` library's encode(text,\n"
              "add_special_tokens=False); added tokens such as <|endoftext|> written in the\n"
              "text become their ids. TOKENS is written whole or not at all.\n";
    return kExitOk;
  }
  std::string tokenizer_path, input, output;
  int token_bytes = 0;
  for (size_t i = 0; i < in.args.size(); ++i) {
    const std::string& a = in.args[i];
    std::string* into = nullptr;
    std::string bytes_text;
    if (a == "--tokenizer") {
      into = &tokenizer_path;
    } else if (a == "--input") {
      into = &input;
    } else if (a == "--output") {
      into = &output;
    } else if (a == "--token-bytes") {
      into = &bytes_text;
    } else {
      in.err << "orrery tokenize: unknown argument " << a << "\n" << kUsage;
      return kExitUsage;
    }
    if (i + 1 >= in.args.size()) {
      in.err << "orrery tokenize: " << a << " needs a value\n" << kUsage;
      return kExitUsage;
    }
    *into = in.args[++i];
    if (into == &bytes_text) {
      if (bytes_text != "2" && bytes_text != "4") {
        in.err << "orrery tokenize: --token-bytes must be 2 (uint16) or 4 (uint32), not "
               << bytes_text << "\n";
        return kExitUsage;
      }
      token_bytes = bytes_text == "2" ? 2 : 4;
    }
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"--tokenizer", tokenizer_path},
        {"--input", input},
        {"--output", output}}) {
    if (value.empty()) {
      in.err << "orrery tokenize: missing " << flag << "\n" << kUsage;
      return kExitUsage;
    }
  }

  auto tokenizer = data::BpeTokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) {
    in.err << "orrery tokenize: " << tokenizer.status().message() << "\n";
    return kExitInvalid;
  }
  const auto start = std::chrono::steady_clock::now();
  auto count = data::EncodeTextFileWithTokenizer(input, *tokenizer, output, token_bytes);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!count.ok()) {
    in.err << "orrery tokenize: " << count.status().message() << "\n";
    return kExitInvalid;
  }
  if (token_bytes == 0) token_bytes = tokenizer->VocabSize() <= 65536 ? 2 : 4;
  std::error_code ec;
  const auto text_bytes = static_cast<double>(std::filesystem::file_size(input, ec));
  char timing[96];
  std::snprintf(timing, sizeof timing, "%.2f s, %.2fM tokens/s", seconds,
                seconds > 0 ? static_cast<double>(*count) / seconds / 1e6 : 0.0);
  in.out << "Tokenized " << input << " with " << tokenizer->JsonPath() << "\n"
         << "  tokens:      " << *count << " (uint" << token_bytes * 8 << ") -> " << output << "\n"
         << "  vocab size:  " << tokenizer->VocabSize() << "\n"
         << "  text:        "
         << (ec ? std::string("?") : HumanBytes(static_cast<uint64_t>(text_bytes))) << " in "
         << timing << "\n";
  return kExitOk;
}

}  // namespace
}  // namespace orrery::cli

ORRERY_CLI_COMMAND(tokenize, "tokenize --tokenizer DIR_OR_JSON --input TEXT --output TOKENS",
                   "Encode a text file with a model's tokenizer.json into a token file",
                   orrery::cli::RunTokenize);
