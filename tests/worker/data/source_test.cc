// Token files (mmap, both widths, windows) and the synthetic source.
#include "worker/data/source.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace orrery::data {
namespace {

std::string TempPath(const std::string& name) {
  const char* base = std::getenv("TMPDIR");
  return std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/orrery-data-" +
         std::to_string(::getpid()) + "-" + name;
}

template <typename T>
std::string WriteTokens(const std::string& name, const std::vector<T>& tokens) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(T)));
  return path;
}

TEST(SourceTest, TokenFileWindowsShareOneBoundaryToken) {
  std::vector<uint16_t> tokens;
  for (uint16_t i = 0; i < 21; ++i) tokens.push_back(static_cast<uint16_t>(i * 3));
  const std::string path = WriteTokens("u16.bin", tokens);
  auto f = TokenFile::Open(path, 2, 4);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->NumTokens(), 21);
  EXPECT_EQ((*f)->NumSamples(), 5);  // (21 - 1) / 4
  EXPECT_EQ((*f)->VocabSize(), 61);
  std::vector<int32_t> s(5);
  ASSERT_TRUE((*f)->Read(1, s.data()).ok());
  EXPECT_EQ(s, (std::vector<int32_t>{12, 15, 18, 21, 24}));
  ASSERT_TRUE((*f)->Read(4, s.data()).ok());
  EXPECT_EQ(s.back(), 60);
  EXPECT_EQ((*f)->Read(5, s.data()).code(), StatusCode::kOutOfRange);
  std::filesystem::remove(path);
}

TEST(SourceTest, Uint32TokensAndBadFiles) {
  std::vector<uint32_t> tokens = {70000, 1, 2, 3, 4};
  const std::string path = WriteTokens("u32.bin", tokens);
  auto f = TokenFile::Open(path, 4, 2, 100000);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<int32_t> s(3);
  ASSERT_TRUE((*f)->Read(0, s.data()).ok());
  EXPECT_EQ(s, (std::vector<int32_t>{70000, 1, 2}));
  EXPECT_FALSE(TokenFile::Open(path, 4, 10).ok());  // fewer tokens than one sample
  EXPECT_FALSE(TokenFile::Open(path, 3, 2).ok());
  EXPECT_EQ(TokenFile::Open(TempPath("missing"), 2, 2).status().code(), StatusCode::kNotFound);
  std::filesystem::remove(path);
}

TEST(SourceTest, SyntheticIsDeterministicInRangeAndMostlyFollowsItsRule) {
  SyntheticSource a(9, 100, 32, 50), b(9, 100, 32, 50), c(10, 100, 32, 50);
  std::vector<int32_t> x(33), y(33), z(33);
  ASSERT_TRUE(a.Read(17, x.data()).ok());
  ASSERT_TRUE(b.Read(17, y.data()).ok());
  ASSERT_TRUE(c.Read(17, z.data()).ok());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  int follows = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    EXPECT_GE(x[i], 0);
    EXPECT_LT(x[i], 50);
    follows += x[i + 1] == (x[i] * 5 + 3) % 50 ? 1 : 0;
  }
  EXPECT_GT(follows, 24);
  EXPECT_FALSE(a.Read(100, x.data()).ok());
}

}  // namespace
}  // namespace orrery::data
