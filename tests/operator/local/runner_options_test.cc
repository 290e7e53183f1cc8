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

TEST(ParseDevices, GroupsOfGpuTypes) {
  auto cpu = ParseDevices("cpu:2=big+cpu:3=small");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->kind, "cpu");
  EXPECT_EQ(cpu->ids, (std::vector<int>{0, 1, 2, 3, 4})) << "cpu devices number on";
  EXPECT_EQ(cpu->types, (std::vector<std::string>{"big", "big", "small", "small", "small"}));
  EXPECT_EQ(cpu->Pools(), (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(cpu->TypeOf(2), "small");
  auto cuda = ParseDevices("cuda:0-1,6=NVIDIA-H100-80GB-HBM3+cuda:2-3=L4");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->ids, (std::vector<int>{0, 1, 6, 2, 3}));
  EXPECT_EQ(cuda->types[2], "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(cuda->types[3], "L4");
  auto plain = ParseDevices("cuda:0-1");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->types.empty());
  EXPECT_EQ(plain->Pools(), (std::vector<std::string>{""}));
  EXPECT_EQ(plain->TypeOf(0), "");
}

TEST(ParseDevices, GpuTypeErrorsSayWhatToWrite) {
  for (const char* bad : {"cpu:2=big+cpu:2", "cpu:2=big+cuda:0=L4", "cuda:0-1=a+cuda:1=b",
                          "cpu:2=", "cpu:2=-x", "cpu:2=a b", "gpu:2=big", "+"}) {
    auto d = ParseDevices(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("--devices"), std::string::npos) << d.status();
    EXPECT_NE(d.status().message().find("cpu:2=big+cpu:2=small"), std::string::npos) << d.status();
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
