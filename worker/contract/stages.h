// Where a pipeline cuts a model into stages, decided the same way by the
// worker (which builds its stage from the cut) and the planner (which
// estimates the memory of the fullest stage): torch-free, from the model's
// shape alone, so that the two agree and a run cuts the same stages every
// time it starts (a cut timed on the machine differed from run to run, and
// under load put every block on one stage).
#pragma once

#include <vector>

#include "common/status.h"

namespace orrery::contract {

// A transformer as the worker's pipeline sees it: layer 0 the embedding,
// layers 1..blocks the blocks, layer blocks + 1 the final norm and the head.
struct TransformerShape {
  int blocks = 0;
  double hidden = 0;
  double q_out = 0;    // heads x head_dim
  double kv_out = 0;   // key/value heads x head_dim (grouped-query attention)
  double ff = 0;       // the MLP's width
  bool gated = false;  // SwiGLU's gate, up and down (Llama) rather than fc1, fc2
  double seq = 0;
  double vocab = 0;
};

// Each layer's forward FLOPs for one sequence: a block's projections and MLP
// (2 FLOPs per weight per token) and its attention's two s x s products
// (4·s·q_out per token); the head's vocab x hidden product; the embedding's
// lookup, counted as hidden per token (no product, but not free).
std::vector<double> LayerFlops(const TransformerShape& shape);

// A contiguous partition of per-layer costs into `stages` parts minimising
// the largest part; the first layer of every stage
// after the first. INVALID_ARGUMENT for fewer layers than stages or < 1 stage.
StatusOr<std::vector<int>> BalanceStages(const std::vector<double>& costs, int stages);

// The cut a pipeline of `stages` makes of `shape` unless told otherwise
// (--stage-starts): BalanceStages over LayerFlops.
StatusOr<std::vector<int>> TransformerStageStarts(const TransformerShape& shape, int stages);

}  // namespace orrery::contract
