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
TEST(Crc32cTest, ShiftEqualsFeedingZeroBytes) {
  std::vector<unsigned char> zeros(5000, 0);
  for (uint32_t state : {0u, 1u, 0xFFFFFFFFu, 0x12345678u}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{4999}}) {
      // Feeding zeros into the raw register: ~Extend(~state, zeros).
      const uint32_t want = ~Crc32cExtend(~state, zeros.data(), n);
      EXPECT_EQ(Crc32cShift(state, n), want) << "state " << state << " n " << n;
    }
  }
}

TEST(Crc32cTest, TermsOfPiecesThatTileABlockGiveItsChecksum) {
  std::vector<unsigned char> block(3001);
  uint32_t x = 7;
  for (auto& b : block) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 16);
  const uint32_t want = Crc32c(block.data(), block.size());
  // Any cut points, pieces in any order (XOR commutes).
  for (std::vector<size_t> cuts : std::vector<std::vector<size_t>>{
           {}, {1}, {1500}, {3000}, {10, 20, 30, 2999}, {512, 1024, 2048}}) {
    std::vector<size_t> edges{0};
    edges.insert(edges.end(), cuts.begin(), cuts.end());
    edges.push_back(block.size());
    uint32_t terms = 0;
    for (size_t i = edges.size() - 1; i-- > 0;) {
      terms ^= Crc32cFragmentTerm(block.data() + edges[i], edges[i + 1] - edges[i],
                                  block.size() - edges[i + 1]);
    }
    EXPECT_EQ(Crc32cFromTerms(terms, block.size()), want) << cuts.size() << " cuts";
  }
  // A flipped bit, or a missing piece, fails.
  uint32_t terms = Crc32cFragmentTerm(block.data(), 1000, block.size() - 1000);
  EXPECT_NE(Crc32cFromTerms(terms, block.size()), want);
  block[5] ^= 1;
  terms = Crc32cFragmentTerm(block.data(), block.size(), 0);
  EXPECT_NE(Crc32cFromTerms(terms, block.size()), want);
}

}  // namespace orrery::checkpoint
