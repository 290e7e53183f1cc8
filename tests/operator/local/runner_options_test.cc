// The runner's command-line values: device sets and device failures.
#include <gtest/gtest.h>

#include "operator/local/runner.h"

namespace orrery::local {
namespace {

TEST(ParseDevices, CpuCountsAndDefaults) {
  auto d = ParseDevices("cpu:3");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, "cpu");
  EXPECT_EQ(d->ids, (std::vector<int>{0, 1, 2}));
  auto one = ParseDevices("cpu");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->ids.size(), 1u);
}

TEST(ParseDevices, CudaRangesAndLists) {
  auto d = ParseDevices("cuda:0-3,6");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, "cuda");
  EXPECT_EQ(d->ids, (std::vector<int>{0, 1, 2, 3, 6}));
}

TEST(ParseDevices, ErrorsSayWhatToWrite) {
  for (const char* bad :
       {"gpu:2", "cpu:0", "cpu:x", "cuda:", "cuda:3-1", "cuda:1,1", "cpu:99999"}) {
    auto d = ParseDevices(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("--devices"), std::string::npos) << d.status();
    EXPECT_NE(d.status().message().find("cpu:N"), std::string::npos) << d.status();
  }
}

TEST(ParseFailDevice, TimeAndDevice) {
  auto e = ParseFailDevice("12.5:1");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_DOUBLE_EQ(e->at_s, 12.5);
  EXPECT_EQ(e->device, 1);
  EXPECT_TRUE(e->fail);
  for (const char* bad : {"12", ":1", "a:1", "1:b", "-1:0", "1:-2", "1:2x"}) {
    auto b = ParseFailDevice(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("SECONDS:DEVICE"), std::string::npos);
  }
}

}  // namespace
}  // namespace orrery::local
