#include "common/random.h"

namespace orrery {

uint64_t SplitMix64Next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double SplitMix64::Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

uint64_t SplitMix64::Below(uint64_t bound) {
  // Rejection sampling removes the modulo bias (Lemire's threshold).
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t x = Next();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace orrery
