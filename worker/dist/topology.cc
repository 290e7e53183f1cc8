// Layout arithmetic; see topology.h for the rank order.
#include "worker/dist/topology.h"

#include <cstdlib>
#include <sstream>

namespace orrery::dist {
namespace {

StatusOr<int> ParseDegree(const std::string& s) {
  if (s.empty()) return InvalidArgumentError("empty degree");
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || v < 1 || v > 4096) return InvalidArgumentError("bad degree '" + s + "'");
  return static_cast<int>(v);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

}  // namespace

StatusOr<Layout> ParseLayout(const std::string& text) {
  Layout layout;
  if (text.find('=') == std::string::npos) {
    auto parts = Split(text, 'x');
    if (parts.size() != 3) return InvalidArgumentError("layout '" + text + "': want DPxTPxPP");
    ORRERY_ASSIGN_OR_RETURN(layout.dp, ParseDegree(parts[0]));
    ORRERY_ASSIGN_OR_RETURN(layout.tp, ParseDegree(parts[1]));
    ORRERY_ASSIGN_OR_RETURN(layout.pp, ParseDegree(parts[2]));
    return layout;
  }
  for (const auto& item : Split(text, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      return InvalidArgumentError("layout item '" + item + "': want key=value");
    std::string key = item.substr(0, eq);
    auto degree = ParseDegree(item.substr(eq + 1));
    if (!degree.ok()) return degree.status().WithContext("layout " + key);
    if (key == "dp") {
      layout.dp = *degree;
    } else if (key == "tp") {
      layout.tp = *degree;
    } else if (key == "pp") {
      layout.pp = *degree;
    } else {
      return InvalidArgumentError("layout: unknown axis '" + key + "' (dp, tp, pp)");
    }
  }
  return layout;
}

std::string LayoutToString(const Layout& l) {
  return "dp=" + std::to_string(l.dp) + ",tp=" + std::to_string(l.tp) +
         ",pp=" + std::to_string(l.pp);
}

Coordinates CoordinatesOf(const Layout& l, int rank) {
  Coordinates c;
  c.tp = rank % l.tp;
  c.dp = (rank / l.tp) % l.dp;
  c.pp = rank / (l.tp * l.dp);
  return c;
}

int RankOf(const Layout& l, const Coordinates& c) { return (c.pp * l.dp + c.dp) * l.tp + c.tp; }

std::vector<int> DataGroup(const Layout& l, int rank) {
  Coordinates c = CoordinatesOf(l, rank);
  std::vector<int> out;
  for (int i = 0; i < l.dp; ++i) out.push_back(RankOf(l, {i, c.tp, c.pp}));
  return out;
}

std::vector<int> TensorGroup(const Layout& l, int rank) {
  Coordinates c = CoordinatesOf(l, rank);
  std::vector<int> out;
  for (int i = 0; i < l.tp; ++i) out.push_back(RankOf(l, {c.dp, i, c.pp}));
  return out;
}

std::vector<int> PipelineGroup(const Layout& l, int rank) {
  Coordinates c = CoordinatesOf(l, rank);
  std::vector<int> out;
  for (int i = 0; i < l.pp; ++i) out.push_back(RankOf(l, {c.dp, c.tp, i}));
  return out;
}

std::string DataGroupName(const Layout& l, int rank) {
  Coordinates c = CoordinatesOf(l, rank);
  return "dp/pp" + std::to_string(c.pp) + ".tp" + std::to_string(c.tp);
}
std::string TensorGroupName(const Layout& l, int rank) {
  Coordinates c = CoordinatesOf(l, rank);
  return "tp/pp" + std::to_string(c.pp) + ".dp" + std::to_string(c.dp);
}
std::string PipelineGroupName(const Layout& l, int rank) {
  Coordinates c = CoordinatesOf(l, rank);
  return "pp/dp" + std::to_string(c.dp) + ".tp" + std::to_string(c.tp);
}

}  // namespace orrery::dist
