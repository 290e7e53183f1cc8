// Byte-level tokenization round-trips and writes a token file TokenFile reads.
#include "worker/data/tokenizer.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace orrery::data
