// CRC-32C against published check values and across the two implementations.
#include "worker/checkpoint/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace orrery::checkpoint {
namespace {

TEST(Crc32cTest, MatchesKnownCheckValues) {
  // RFC 3720 B.4 and the CRC catalogue's check value for "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::vector<unsigned char> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32cTest, ExtendingInPiecesEqualsOneShotAndSoftwareEqualsHardware) {
  std::mt19937 rng(7);
  std::string data(10000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  const uint32_t whole = Crc32c(data.data(), data.size());
  EXPECT_EQ(Crc32cExtendSoftwareForTest(0, data.data(), data.size()), whole);
  for (size_t cut : {0u, 1u, 7u, 8u, 9u, 4096u, 9999u}) {
    const uint32_t a = Crc32c(data.data(), cut);
    EXPECT_EQ(Crc32cExtend(a, data.data() + cut, data.size() - cut), whole) << "cut at " << cut;
  }
  data[5000] ^= 1;
  EXPECT_NE(Crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace orrery::checkpoint
