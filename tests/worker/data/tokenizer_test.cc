// Byte-level tokenization round-trips and writes a token file TokenFile reads,
// also when several threads of one process write the same file at once (the
// tasks of an `orrery-worker gang` on one corpus).
#include "worker/data/tokenizer.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "worker/data/source.h"

namespace orrery::data {
namespace {

TEST(TokenizerTest, BytesRoundTripIncludingUtf8) {
  const std::string text = "Free software, \xC3\xA9t\xC3\xA9.\n";
  const auto tokens = EncodeBytes(text);
  EXPECT_EQ(tokens.size(), text.size());
  EXPECT_EQ(tokens[0], 'F');
  EXPECT_EQ(DecodeBytes(std::vector<int32_t>(tokens.begin(), tokens.end())), text);
}

TEST(TokenizerTest, EncodesATextFileForTokenFile) {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = std::string(base != nullptr && *base != '\0' ? base : "/tmp");
  const std::string txt = dir + "/orrery-tok-" + std::to_string(::getpid()) + ".txt";
  const std::string bin = txt + ".bin";
  { std::ofstream(txt) << "the quick brown fox jumps over the lazy dog"; }
  auto n = EncodeTextFile(txt, bin);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 43);
  auto f = TokenFile::Open(bin, 2, 8, kByteVocabSize);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<int32_t> s(9);
  ASSERT_TRUE((*f)->Read(1, s.data()).ok());
  EXPECT_EQ(DecodeBytes(s), "k brown f");  // tokens 8..16
  std::filesystem::remove(txt);
  std::filesystem::remove(bin);
  EXPECT_EQ(EncodeTextFile(txt, bin).status().code(), StatusCode::kNotFound);
}

TEST(TokenizerTest, ThreadsEncodingOneFileAtOnceEachSucceedAndLeaveItWhole) {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/orrery-tok-threads-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string txt = dir + "/corpus.txt", bin = dir + "/corpus.bin";
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + " of the corpus\n";
  { std::ofstream(txt) << text; }
  constexpr int kThreads = 8;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto n = EncodeTextFile(txt, bin);
      if (!n.ok()) {
        errors[static_cast<size_t>(i)] = n.status().ToString();
      } else if (*n != static_cast<int64_t>(text.size())) {
        errors[static_cast<size_t>(i)] = "encoded " + std::to_string(*n) + " tokens";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i)
    EXPECT_EQ(errors[static_cast<size_t>(i)], "") << "thread " << i;
  EXPECT_EQ(std::filesystem::file_size(bin), 2 * text.size());
  size_t files = 0;  // no temporary file left behind
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::data
