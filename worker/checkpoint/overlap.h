// The overlap between a region a rank needs and a region a shard holds, as runs of
// elements contiguous in both: the core of loading into another layout.
//
// Both regions are hyper-rectangles of the same global tensor, each restricted to a
// flat range of its own row-major flattening (layout.h). Their common elements are
// the rectangles' intersection, clipped to both flat ranges. Walking that
// intersection one innermost row at a time gives stretches contiguous in both
// flattenings; adjacent stretches are merged, so a whole-tensor or dim-0 split
// overlap becomes a single run.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/checkpoint/layout.h"

namespace orrery::checkpoint {

struct CopyRun {
  int64_t src = 0;    // element offset from the first element `have` stores
  int64_t dst = 0;    // element offset from the first element `need` holds
  int64_t count = 0;  // elements
  bool operator==(const CopyRun&) const = default;
};

// Runs in increasing src order. Regions of different rank (number of dims) never
// overlap and give no runs.
std::vector<CopyRun> Overlap(const Region& need, const Region& have);

}  // namespace orrery::checkpoint
