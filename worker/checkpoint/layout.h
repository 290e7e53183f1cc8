// How a job's state is spread over its ranks: the parallel layout, each tensor's
// partition spec, and the piece of a tensor a rank holds under a layout.
//
// Layout = {dp, tp, pp, fsdp}, world = dp * tp * pp. FSDP shards *within* the
// data-parallel group: fsdp divides dp, and the dp ranks form dp/fsdp replicas of
// fsdp shards each (fsdp = dp is plain FSDP/ZeRO-3, fsdp = 1 is plain DDP, anything
// between is hybrid sharding). Ranks are numbered tp fastest, then dp, then pp:
//   rank = (pp_index * dp + dp_index) * tp + tp_index
// (Megatron-LM's order, so a tensor-parallel group is adjacent ranks on one node);
// within the dp group, fsdp_index = dp_index % fsdp and replica = dp_index / fsdp.
//
// A tensor's partition spec says how any layout cuts it:
//  - pipeline: the tensor belongs to one `layer`; a StageFn maps (layer, pp) to the
//    stage that owns it (whole tensors per stage). BalancedStages() is the default.
//  - tensor parallel: `tp_dim` is split into tp near-equal contiguous parts
//    (column-parallel weights split dim 0, row-parallel dim 1), or -1 = replicated.
//  - fsdp: when `fsdp_sharded`, the local (tp-sliced) tensor is flattened row-major
//    and cut into fsdp equal contiguous ranges of ceil(numel / fsdp) elements; the
//    last range is padded with zeros in memory (padding is never written to disk).
//
// A Region describes any piece, stored or needed: a hyper-rectangle of the global
// tensor, and a flat range [flat_begin, flat_end) of that rectangle's row-major
// flattening (the whole rectangle when the range covers it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/dtype.h"

namespace orrery::checkpoint {

struct RankCoords {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int fsdp = 0;     // dp % layout.fsdp: which fsdp shard this rank holds
  int replica = 0;  // dp / layout.fsdp: which copy of the sharded state
};

struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int fsdp = 1;

  int World() const { return dp * tp * pp; }
  // Degrees >= 1 and fsdp divides dp.
  Status Validate() const;
  RankCoords Coords(int rank) const;
  int RankOf(int dp_index, int tp_index, int pp_index) const;
  // "dp=2,tp=2,pp=1,fsdp=1"
  std::string ToString() const;
  // Parses "dp=2,tp=2,pp=1" (any order; fsdp and unnamed degrees default to 1).
  static StatusOr<Layout> Parse(const std::string& text);
  bool operator==(const Layout&) const = default;
};

// Maps a layer to its pipeline stage in [0, pp).
using StageFn = std::function<int(int layer, int pp)>;
// Contiguous, balanced blocks of layers: stage = layer * pp / num_layers.
StageFn BalancedStages(int num_layers);

struct TensorSpec {
  std::string name;  // fully qualified: "model/layers.3.attn.qkv.weight", "optim/.../exp_avg"
  std::vector<int64_t> shape;  // global shape; empty = a scalar
  DType dtype = DType::kFloat32;
  int layer = 0;
  int tp_dim = -1;  // -1: replicated across tensor-parallel ranks
  bool fsdp_sharded = true;
};

struct Region {
  std::vector<int64_t> offsets;  // rectangle origin in the global tensor
  std::vector<int64_t> sizes;    // rectangle extent
  int64_t flat_begin = 0;        // range of the rectangle's row-major flattening
  int64_t flat_end = 0;

  int64_t RectNumel() const;
  int64_t Numel() const { return flat_end - flat_begin; }
  bool operator==(const Region&) const = default;
};

// The whole tensor as a Region.
Region FullRegion(const std::vector<int64_t>& shape);
int64_t Numel(const std::vector<int64_t>& shape);

// What one rank holds of one tensor under a layout.
struct LocalPiece {
  bool present = false;         // false: the tensor lives on another pipeline stage
  Region region;                // the elements the rank holds
  int64_t buffer_elements = 0;  // the rank's buffer size, >= region.Numel() (fsdp padding)
  bool writer = false;          // this rank writes the piece (one copy of replicated data)
  bool flat = false;            // fsdp-sharded: the rank keeps a 1-D buffer, not the rectangle
};

// Fails on an invalid layout/rank, a tp_dim out of range, or a stage out of range.
StatusOr<LocalPiece> LocalPieceOf(const TensorSpec& spec, const Layout& layout, int rank,
                                  const StageFn& stages);

}  // namespace orrery::checkpoint
