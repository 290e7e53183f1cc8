// File helpers: atomic replace, short reads named, listing and removal.
#include "worker/checkpoint/io.h"

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/temp_dir.h"

namespace orrery::checkpoint {
namespace {

TEST(IoTest, AtomicWriteReplacesAndLeavesNoTemp) {
  testing::TempDir tmp;
  const std::string p = tmp.Sub("f.json");
  ASSERT_TRUE(WriteFileAtomic(p, "one").ok());
  ASSERT_TRUE(WriteFileAtomic(p, "two!").ok());
  EXPECT_EQ(*ReadWholeFile(p), "two!");
  EXPECT_FALSE(PathExists(p + ".tmp"));
  auto names = ListDir(tmp.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"f.json"});
}

TEST(IoTest, ReadPastTheEndIsDataLossNamingTheFile) {
  testing::TempDir tmp;
  const std::string p = tmp.Sub("short.bin");
  ASSERT_TRUE(WriteFileAtomic(p, "abc").ok());
  auto f = File::OpenRead(p);
  ASSERT_TRUE(f.ok());
  char buf[8];
  Status s = f->ReadAt(1, buf, 5);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("short.bin"), std::string::npos);
  EXPECT_EQ(File::OpenRead(tmp.Sub("nope")).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(MakeDirs(tmp.Sub("a/b/c")).ok());
  ASSERT_TRUE(RemoveTree(tmp.Sub("a")).ok());
  EXPECT_FALSE(PathExists(tmp.Sub("a")));
}

}  // namespace
}  // namespace orrery::checkpoint
