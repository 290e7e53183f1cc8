// The global order of samples and the cursor into it: the dataset half of a job's
// state, kept so that a change of data-parallel degree or of global batch size
// neither repeats nor skips a sample.
//
// The samples of a dataset of N samples are visited as an endless stream of epochs;
// epoch e is a permutation of [0, N) drawn by Fisher-Yates from a splitmix64 stream
// seeded by (seed, e), implemented here so every rank on every machine computes the
// same order. A Cursor is (epoch, consumed in that epoch): stream position
// epoch * N + consumed. A step with global batch B takes the next B positions (a
// batch may run across an epoch boundary), and data-parallel rank r of dp takes
// the contiguous part [B*r/dp, B*(r+1)/dp) of them, so local batches differ by at
// most one sample when dp does not divide B. Advancing by B is all a step does to
// the cursor, whatever dp is, which is why re-partitioning is exact.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace orrery::data {

struct Cursor {
  uint64_t seed = 0;
  int64_t num_samples = 0;  // N
  int64_t epoch = 0;
  int64_t consumed = 0;  // in [0, N)

  int64_t Position() const { return epoch * num_samples + consumed; }
  bool operator==(const Cursor&) const = default;
};

// The permutation of one epoch, computed on demand and cached (one epoch at a time).
class GlobalOrder {
 public:
  GlobalOrder(uint64_t seed, int64_t num_samples);
  uint64_t seed() const { return seed_; }
  int64_t num_samples() const { return num_samples_; }
  // Sample index at stream position `position` (= epoch * N + i).
  int64_t SampleAt(int64_t position);
  // The whole permutation of `epoch`.
  std::vector<int64_t> Permutation(int64_t epoch) const;

 private:
  uint64_t seed_;
  int64_t num_samples_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_;
};

// [begin, end) of rank r's part of a global batch of B (contiguous, balanced).
struct Share {
  int64_t begin = 0;
  int64_t end = 0;
};
Share RankShare(int64_t global_batch, int dp, int rank);

// The sample indices rank `rank` of `dp` reads for the step starting at `cursor`.
StatusOr<std::vector<int64_t>> SamplesForRank(GlobalOrder& order, const Cursor& cursor,
                                              int64_t global_batch, int dp, int rank);

// The cursor after a step of `global_batch` samples.
Cursor Advance(const Cursor& cursor, int64_t global_batch);

}  // namespace orrery::data
