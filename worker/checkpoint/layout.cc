// Rank coordinates and the piece of each tensor a rank holds (see layout.h).
#include "worker/checkpoint/layout.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace orrery::checkpoint {

Status Layout::Validate() const {
  if (dp < 1 || tp < 1 || pp < 1 || fsdp < 1) {
    return InvalidArgumentError("layout " + ToString() + ": every degree must be >= 1");
  }
  if (dp % fsdp != 0) {
    return InvalidArgumentError(
        "layout " + ToString() +
        ": fsdp must divide dp (fsdp shards within the data-parallel group)");
  }
  return OkStatus();
}

RankCoords Layout::Coords(int rank) const {
  RankCoords c;
  c.tp = rank % tp;
  c.dp = (rank / tp) % dp;
  c.pp = rank / (tp * dp);
  c.fsdp = c.dp % fsdp;
  c.replica = c.dp / fsdp;
  return c;
}

int Layout::RankOf(int dp_index, int tp_index, int pp_index) const {
  return (pp_index * dp + dp_index) * tp + tp_index;
}

std::string Layout::ToString() const {
  std::ostringstream os;
  os << "dp=" << dp << ",tp=" << tp << ",pp=" << pp << ",fsdp=" << fsdp;
  return os.str();
}

StatusOr<Layout> Layout::Parse(const std::string& text) {
  Layout l;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos)
      // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
      return InvalidArgumentError("layout \"" + text + "\": expected key=value, got \"" + item +
                                  "\"");
    std::string key = item.substr(0, eq);
    int value = 0;
    try {
      size_t used = 0;
      value = std::stoi(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
      return InvalidArgumentError("layout \"" + text + "\": \"" + item +
                                  "\" is not an integer degree");
    }
    if (key == "dp")
      l.dp = value;
    else if (key == "tp")
      l.tp = value;
    else if (key == "pp")
      l.pp = value;
    else if (key == "fsdp")
      l.fsdp = value;
    else
      // NOLINTNEXTLINE(performance-inefficient-string-concatenation): an error path.
      return InvalidArgumentError("layout \"" + text + "\": unknown degree \"" + key +
                                  "\" (dp, tp, pp, fsdp)");
  }
  ORRERY_RETURN_IF_ERROR(l.Validate());
  return l;
}

StageFn BalancedStages(int num_layers) {
  return [num_layers](int layer, int pp) {
    if (num_layers <= 0) return 0;
    return static_cast<int>(static_cast<int64_t>(layer) * pp / num_layers);
  };
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t Region::RectNumel() const { return checkpoint::Numel(sizes); }

Region FullRegion(const std::vector<int64_t>& shape) {
  Region r;
  r.offsets.assign(shape.size(), 0);
  r.sizes = shape;
  r.flat_begin = 0;
  r.flat_end = Numel(shape);
  return r;
}

StatusOr<LocalPiece> LocalPieceOf(const TensorSpec& spec, const Layout& layout, int rank,
                                  const StageFn& stages) {
  ORRERY_RETURN_IF_ERROR(layout.Validate());
  if (rank < 0 || rank >= layout.World()) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " outside world of " +
                                layout.ToString());
  }
  for (int64_t s : spec.shape) {
    if (s < 0) return InvalidArgumentError("tensor " + spec.name + ": negative dimension");
  }
  if (spec.tp_dim >= static_cast<int>(spec.shape.size()) || spec.tp_dim < -1) {
    return InvalidArgumentError("tensor " + spec.name + ": tp_dim " + std::to_string(spec.tp_dim) +
                                " out of range for " + std::to_string(spec.shape.size()) + " dims");
  }
  const RankCoords c = layout.Coords(rank);
  const int stage = stages ? stages(spec.layer, layout.pp) : 0;
  if (stage < 0 || stage >= layout.pp) {
    return InvalidArgumentError("tensor " + spec.name + ": layer " + std::to_string(spec.layer) +
                                " maps to stage " + std::to_string(stage) +
                                " outside pp=" + std::to_string(layout.pp));
  }
  LocalPiece piece;
  if (stage != c.pp) return piece;
  piece.present = true;
  Region r = FullRegion(spec.shape);
  if (spec.tp_dim >= 0) {
    const int64_t n = spec.shape[spec.tp_dim];
    const int64_t lo = n * c.tp / layout.tp;
    const int64_t hi = n * (c.tp + 1) / layout.tp;
    r.offsets[spec.tp_dim] = lo;
    r.sizes[spec.tp_dim] = hi - lo;
  }
  const int64_t rect = r.RectNumel();
  bool first_copy = spec.tp_dim >= 0 || c.tp == 0;
  if (spec.fsdp_sharded && layout.fsdp > 1) {
    const int64_t per = (rect + layout.fsdp - 1) / layout.fsdp;
    r.flat_begin = std::min<int64_t>(rect, per * c.fsdp);
    r.flat_end = std::min<int64_t>(rect, per * (c.fsdp + 1));
    piece.buffer_elements = per;
    piece.flat = true;
    first_copy = first_copy && c.replica == 0;
  } else {
    r.flat_begin = 0;
    r.flat_end = rect;
    piece.buffer_elements = rect;
    first_copy = first_copy && c.dp == 0;
  }
  piece.region = std::move(r);
  piece.writer = first_copy && piece.region.Numel() > 0;
  return piece;
}

}  // namespace orrery::checkpoint
