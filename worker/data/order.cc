// Seeded per-epoch permutations and the step-by-step cursor (see order.h).
#include "worker/data/order.h"

#include <cstdint>
#include <numeric>
#include <string>
#include <utility>

#include "common/random.h"

namespace orrery::data {

namespace {
// Uniform in [0, bound) without modulo bias (rejection on the top of the range).
uint64_t Below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t v;
  do {
    v = SplitMix64Next(state);
  } while (v >= limit);
  return v % bound;
}
}  // namespace

GlobalOrder::GlobalOrder(uint64_t seed, int64_t num_samples)
    : seed_(seed), num_samples_(num_samples) {}

std::vector<int64_t> GlobalOrder::Permutation(int64_t epoch) const {
  std::vector<int64_t> perm(static_cast<size_t>(num_samples_));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  uint64_t state = seed_;
  SplitMix64Next(state);
  state ^= static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull;
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(Below(state, static_cast<uint64_t>(i + 1)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

int64_t GlobalOrder::SampleAt(int64_t position) {
  const int64_t epoch = position / num_samples_;
  if (epoch != cached_epoch_) {
    cached_ = Permutation(epoch);
    cached_epoch_ = epoch;
  }
  return cached_[static_cast<size_t>(position % num_samples_)];
}

Share RankShare(int64_t global_batch, int dp, int rank) {
  return {global_batch * rank / dp, global_batch * (rank + 1) / dp};
}

StatusOr<std::vector<int64_t>> SamplesForRank(GlobalOrder& order, const Cursor& cursor,
                                              int64_t global_batch, int dp, int rank) {
  if (cursor.num_samples != order.num_samples() || cursor.seed != order.seed()) {
    return InvalidArgumentError(
        "cursor (seed " + std::to_string(cursor.seed) + ", " + std::to_string(cursor.num_samples) +
        " samples) does not match the dataset order (seed " + std::to_string(order.seed()) + ", " +
        std::to_string(order.num_samples()) + " samples)");
  }
  if (order.num_samples() <= 0) return FailedPreconditionError("dataset has no samples");
  if (dp < 1 || rank < 0 || rank >= dp || global_batch < 0) {
    return InvalidArgumentError("bad share: global batch " + std::to_string(global_batch) +
                                ", rank " + std::to_string(rank) + " of dp=" + std::to_string(dp));
  }
  const Share s = RankShare(global_batch, dp, rank);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(s.end - s.begin));
  const int64_t base = cursor.Position();
  for (int64_t i = s.begin; i < s.end; ++i) out.push_back(order.SampleAt(base + i));
  return out;
}

Cursor Advance(const Cursor& cursor, int64_t global_batch) {
  Cursor next = cursor;
  if (cursor.num_samples <= 0) return next;
  const int64_t pos = cursor.Position() + global_batch;
  next.epoch = pos / cursor.num_samples;
  next.consumed = pos % cursor.num_samples;
  return next;
}

}  // namespace orrery::data
