// Random model states for checkpoint tests: specs with random shapes, partition
// specs and dtypes, and their whole tensors filled with seeded random bytes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "worker/checkpoint/layout.h"

namespace orrery::checkpoint::testing {

struct ModelState {
  int num_layers = 1;
  std::vector<TensorSpec> specs;
  std::vector<std::vector<char>> data;  // whole tensors, row-major

  std::vector<const void*> Pointers() const {
    std::vector<const void*> p;
    for (const auto& d : data) p.push_back(d.data());
    return p;
  }
};

inline ModelState RandomModel(uint64_t seed, int num_tensors = 6) {
  std::mt19937_64 rng(seed);
  ModelState m;
  m.num_layers = 1 + static_cast<int>(rng() % 5);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kUInt8};
  for (int i = 0; i < num_tensors; ++i) {
    TensorSpec s;
    const bool optim = i % 3 == 2;
    s.name = (optim ? "optim/layers." : "model/layers.") + std::to_string(i) +
             (optim ? ".exp_avg" : ".weight");
    const int nd = static_cast<int>(rng() % 4);  // scalars included
    for (int d = 0; d < nd; ++d) s.shape.push_back(1 + static_cast<int64_t>(rng() % 9));
    s.dtype = dtypes[rng() % 4];
    s.layer = static_cast<int>(rng() % static_cast<uint64_t>(m.num_layers));
    s.tp_dim = nd == 0 ? -1 : static_cast<int>(rng() % static_cast<uint64_t>(nd + 1)) - 1;
    s.fsdp_sharded = rng() % 4 != 0;
    std::vector<char> bytes(static_cast<size_t>(Numel(s.shape)) * DTypeSize(s.dtype));
    for (auto& b : bytes) b = static_cast<char>(rng());
    m.specs.push_back(s);
    m.data.push_back(std::move(bytes));
  }
  return m;
}

// Every layout with world size <= max_world, all degrees and fsdp divisors of dp.
inline std::vector<Layout> AllLayouts(int max_world) {
  std::vector<Layout> out;
  for (int dp = 1; dp <= max_world; ++dp)
    for (int tp = 1; dp * tp <= max_world; ++tp)
      for (int pp = 1; dp * tp * pp <= max_world; ++pp)
        for (int fsdp = 1; fsdp <= dp; ++fsdp)
          if (dp % fsdp == 0) out.push_back({dp, tp, pp, fsdp});
  return out;
}

// The reference slice: element k of a region's flat range, by index arithmetic.
inline void ReferenceSlice(const std::vector<char>& global, const TensorSpec& spec, const Region& r,
                           std::vector<char>& out) {
  const size_t es = DTypeSize(spec.dtype);
  out.assign(static_cast<size_t>(r.Numel()) * es, 0);
  for (int64_t k = 0; k < r.Numel(); ++k) {
    int64_t pos = r.flat_begin + k, g = 0, stride = 1;
    for (size_t d = spec.shape.size(); d-- > 0;) {
      const int64_t i = pos % r.sizes[d];
      pos /= r.sizes[d];
      g += (r.offsets[d] + i) * stride;
      stride *= spec.shape[d];
    }
    for (size_t b = 0; b < es; ++b)
      out[static_cast<size_t>(k) * es + b] = global[static_cast<size_t>(g) * es + b];
  }
}

}  // namespace orrery::checkpoint::testing
