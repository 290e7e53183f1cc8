#include "worker/contract/stages.h"

#include <algorithm>
#include <limits>
#include <string>

namespace orrery::contract {

std::vector<double> LayerFlops(const TransformerShape& t) {
  const double h = t.hidden, s = t.seq;
  const double projections = h * t.q_out + 2 * h * t.kv_out + t.q_out * h;
  const double mlp = (t.gated ? 3 : 2) * h * t.ff;
  const double block = s * (2 * (projections + mlp) + 4 * s * t.q_out);
  std::vector<double> flops;
  flops.push_back(s * h);
  for (int b = 0; b < t.blocks; ++b) flops.push_back(block);
  flops.push_back(s * 2 * h * t.vocab);
  return flops;
}

StatusOr<std::vector<int>> BalanceStages(const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  if (stages < 1 || stages > n) {
    return InvalidArgumentError("cannot cut " + std::to_string(n) + " layers into " +
                                std::to_string(stages) + " stages");
  }
  const auto at = [](int i) { return static_cast<size_t>(i); };
  // best[k][i]: the smallest largest-stage cost cutting the first i layers into k stages.
  std::vector<double> prefix(at(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[at(i) + 1] = prefix[at(i)] + costs[at(i)];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(at(stages) + 1, std::vector<double>(at(n) + 1, inf));
  std::vector<std::vector<int>> cut(at(stages) + 1, std::vector<int>(at(n) + 1, 0));
  best[0][0] = 0.0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double c = std::max(best[at(k - 1)][at(j)], prefix[at(i)] - prefix[at(j)]);
        if (c < best[at(k)][at(i)]) {
          best[at(k)][at(i)] = c;
          cut[at(k)][at(i)] = j;
        }
      }
    }
  }
  std::vector<int> starts;
  int i = n;
  for (int k = stages; k > 1; --k) {
    i = cut[at(k)][at(i)];
    starts.push_back(i);
  }
  std::reverse(starts.begin(), starts.end());
  return starts;
}

StatusOr<std::vector<int>> TransformerStageStarts(const TransformerShape& shape, int stages) {
  return BalanceStages(LayerFlops(shape), stages);
}

}  // namespace orrery::contract
