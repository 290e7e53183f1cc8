// The accountant refuses reservations past its budget and remembers the peak.
#include "worker/parallel/memory_accountant.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace orrery::parallel {
namespace {

TEST(MemoryAccountantTest, ChargesReleasesAndKeepsThePeak) {
  MemoryAccountant a(100);
  ASSERT_TRUE(a.Reserve(60, "a").ok());
  ASSERT_TRUE(a.Reserve(40, "b").ok());
  Status over = a.Reserve(1, "c");
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("c needs 1 bytes"), std::string::npos) << over;
  EXPECT_EQ(a.resident(), 100);
  a.Release(60);
  EXPECT_EQ(a.resident(), 40);
  ASSERT_TRUE(a.Reserve(50, "d").ok());
  EXPECT_EQ(a.peak(), 100);
  EXPECT_FALSE(a.Reserve(-1, "e").ok());
}

TEST(MemoryAccountantTest, ConcurrentReservationsNeverPassTheBudget) {
  MemoryAccountant a(1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a]() {
      for (int i = 0; i < 2000; ++i) {
        if (a.Reserve(300, "x").ok()) a.Release(300);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(a.resident(), 0);
  EXPECT_LE(a.peak(), 900);
  EXPECT_GE(a.peak(), 300);
}

}  // namespace
}  // namespace orrery::parallel
