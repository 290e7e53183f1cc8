// Hyper-rectangle intersection with flat-range clipping (see overlap.h).
#include "worker/checkpoint/overlap.h"

#include <algorithm>

namespace orrery::checkpoint {

std::vector<CopyRun> Overlap(const Region& need, const Region& have) {
  std::vector<CopyRun> runs;
  const size_t nd = need.sizes.size();
  if (have.sizes.size() != nd || need.Numel() <= 0 || have.Numel() <= 0) return runs;

  // Intersection of the two rectangles, in global coordinates.
  std::vector<int64_t> lo(nd), hi(nd);
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = std::max(need.offsets[d], have.offsets[d]);
    hi[d] = std::min(need.offsets[d] + need.sizes[d], have.offsets[d] + have.sizes[d]);
    if (lo[d] >= hi[d]) return runs;
  }
  // Row-major strides of each rectangle.
  std::vector<int64_t> sn(nd, 1), sh(nd, 1);
  for (size_t d = nd; d-- > 1;) {
    sn[d - 1] = sn[d] * need.sizes[d];
    sh[d - 1] = sh[d] * have.sizes[d];
  }
  const int64_t row = nd == 0 ? 1 : hi[nd - 1] - lo[nd - 1];
  std::vector<int64_t> idx(lo);  // current global index; the last dim stays at lo
  auto emit = [&](int64_t src, int64_t dst, int64_t count) {
    if (!runs.empty()) {
      CopyRun& last = runs.back();
      if (last.src + last.count == src && last.dst + last.count == dst) {
        last.count += count;
        return;
      }
    }
    runs.push_back({src, dst, count});
  };
  while (true) {
    int64_t pn = 0, ph = 0;  // flat positions of the row's first element
    for (size_t d = 0; d < nd; ++d) {
      pn += (idx[d] - need.offsets[d]) * sn[d];
      ph += (idx[d] - have.offsets[d]) * sh[d];
    }
    // Rows come in increasing flat order in both rectangles: past either range, stop.
    if (pn >= need.flat_end || ph >= have.flat_end) break;
    const int64_t k0 = std::max({int64_t{0}, need.flat_begin - pn, have.flat_begin - ph});
    const int64_t k1 = std::min({row, need.flat_end - pn, have.flat_end - ph});
    if (k0 < k1) emit(ph + k0 - have.flat_begin, pn + k0 - need.flat_begin, k1 - k0);
    // Advance the odometer over all dims but the last.
    if (nd <= 1) break;
    size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return runs;
    }
  }
  return runs;
}

}  // namespace orrery::checkpoint
