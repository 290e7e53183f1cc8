// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): tiny, fully specified, equal on every platform,
// unlike <random>'s distributions. Every seeded stream in Orrery (search-space
// sampling, data order, synthetic traces, randomised tests) draws from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace orrery {

// One step of the generator: advances `state` and returns the next value.
uint64_t SplitMix64Next(uint64_t& state);

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64Next(state_); }
  double Uniform01();              // [0, 1) with 53 random bits
  uint64_t Below(uint64_t bound);  // [0, bound), bound > 0, without modulo bias
  // [lo, hi], lo <= hi.
  int Between(int lo, int hi) {
    return lo + static_cast<int>(Below(static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1));
  }
  // One of `values`, each equally likely; `values` is not empty.
  template <typename T>
  T Pick(std::initializer_list<T> values) {
    return *(values.begin() + static_cast<std::ptrdiff_t>(Below(values.size())));
  }

 private:
  uint64_t state_;
};

}  // namespace orrery
