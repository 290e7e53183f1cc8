// CRC-32C with the reflected polynomial 0x82F63B78 (RFC 3720, iSCSI). The table
// path processes 8 bytes per step; the hardware path uses the crc32q instruction.
#include "worker/checkpoint/crc32c.h"

#include <array>
#include <cstring>

namespace orrery::checkpoint {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

uint32_t ExtendSoftware(uint32_t crc, const unsigned char* p, size_t n) {
  const auto& t = GetTables().t;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian hosts only (x86-64, aarch64)
    v ^= c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const unsigned char* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

bool HaveHardware() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (HaveHardware()) return ExtendHardware(crc, p, size);
#endif
  return ExtendSoftware(crc, p, size);
}

namespace {

// Polynomials over GF(2) modulo the CRC polynomial, in the reflected order the
// register uses (bit 31 is x^0, bit 0 is x^31).
uint32_t MultiplyModPoly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {
    if ((a & bit) != 0) product ^= b;
    b = (b & 1) != 0 ? (b >> 1) ^ kPoly : b >> 1;  // b *= x
  }
  return product;
}

// x^(8 * 2^k) mod P for k = 0..63: the effect of 2^k zero bytes on a register.
const std::array<uint32_t, 64>& ZeroBytePowers() {
  static const std::array<uint32_t, 64> powers = [] {
    std::array<uint32_t, 64> p{};
    p[0] = 0x80000000u >> 8;  // x^8
    for (size_t k = 1; k < p.size(); ++k) p[k] = MultiplyModPoly(p[k - 1], p[k - 1]);
    return p;
  }();
  return powers;
}

}  // namespace

uint32_t Crc32cShift(uint32_t state, uint64_t zero_bytes) {
  const auto& powers = ZeroBytePowers();
  for (size_t k = 0; zero_bytes != 0; ++k, zero_bytes >>= 1) {
    if ((zero_bytes & 1) != 0) state = MultiplyModPoly(powers[k], state);
  }
  return state;
}

uint32_t Crc32cFragmentTerm(const void* data, size_t size, uint64_t bytes_after) {
  // The register after `data` from a zero register is ~Crc32cExtend(~0, data).
  return Crc32cShift(~Crc32cExtend(0xFFFFFFFFu, data, size), bytes_after);
}

uint32_t Crc32cFromTerms(uint32_t xor_of_terms, uint64_t length) {
  return ~(Crc32cShift(0xFFFFFFFFu, length) ^ xor_of_terms);
}

// Exposed for the test that checks both paths agree.
uint32_t Crc32cExtendSoftwareForTest(uint32_t crc, const void* data, size_t size) {
  return ExtendSoftware(crc, static_cast<const unsigned char*>(data), size);
}

}  // namespace orrery::checkpoint
