// The layout of one task: data × tensor × pipeline degrees, and where one global
// rank sits in it. Torch-free, so the planner-facing code and tests can use it.
//
// Rank order puts tensor parallelism innermost (adjacent ranks share a node and
// the fastest links, as in Megatron-LM), then data, then pipeline:
//   rank = (pp_index * dp + dp_index) * tp + tp_index
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::dist {

struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int world_size() const { return dp * tp * pp; }
  bool operator==(const Layout&) const = default;
};

// Parses "dp=2,tp=1,pp=2" (any order, missing degrees are 1) or "2x1x2" (dp x tp x pp).
StatusOr<Layout> ParseLayout(const std::string& text);
std::string LayoutToString(const Layout& layout);

struct Coordinates {
  int dp = 0;
  int tp = 0;
  int pp = 0;
};

Coordinates CoordinatesOf(const Layout& layout, int rank);
int RankOf(const Layout& layout, const Coordinates& c);

// Global ranks (ascending) of the group this rank belongs to along each axis.
std::vector<int> DataGroup(const Layout& layout, int rank);
std::vector<int> TensorGroup(const Layout& layout, int rank);
std::vector<int> PipelineGroup(const Layout& layout, int rank);

// A name unique to this rank's group along an axis ("dp/pp0.tp1"), the same on
// every member: the key prefix of that group in the rendezvous store.
std::string DataGroupName(const Layout& layout, int rank);
std::string TensorGroupName(const Layout& layout, int rank);
std::string PipelineGroupName(const Layout& layout, int rank);

}  // namespace orrery::dist
