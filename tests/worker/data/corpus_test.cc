// data/build_corpus.sh: builds a real English corpus from base-files, identical on
// every run, that the byte-level tokenizer turns into enough training samples.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "worker/data/source.h"
#include "worker/data/tokenizer.h"

namespace orrery::data {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CorpusTest, BuildsDeterministicEnglishTextThatTokenizes) {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/orrery-corpus-" + std::to_string(::getpid());
  const std::string script = std::string(ORRERY_SOURCE_DIR) + "/data/build_corpus.sh";
  ASSERT_EQ(std::system((script + " " + dir + "/a.txt > /dev/null").c_str()), 0);
  ASSERT_EQ(std::system((script + " " + dir + "/b.txt > /dev/null").c_str()), 0);
  const std::string a = Slurp(dir + "/a.txt");
  EXPECT_EQ(a, Slurp(dir + "/b.txt"));
  EXPECT_GT(a.size(), 100000u);
  size_t printable = 0, spaces = 0;
  for (char c : a) {
    printable += (c >= 32 && c < 127) || c == '\n' ? 1 : 0;
    spaces += c == ' ' ? 1 : 0;
  }
  EXPECT_GT(printable, a.size() * 99 / 100);  // plain English text
  EXPECT_GT(spaces, a.size() / 10);
  EXPECT_NE(a.find("Free Software Foundation"), std::string::npos);

  auto n = EncodeTextFile(dir + "/a.txt", dir + "/a.bin");
  ASSERT_TRUE(n.ok()) << n.status();
  auto tokens = TokenFile::Open(dir + "/a.bin", 2, 128, kByteVocabSize);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_GT((*tokens)->NumSamples(), 700);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::data
