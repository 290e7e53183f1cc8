// Combinatorial lower bounds on a plan's objective, valid for every schedule and
// cheap enough to compute for thousands of tasks. Planners combine them with the
// bound CBC proves on their MILP.
#pragma once

#include <vector>

#include "operator/planner/problem.h"

namespace orrery::planner {

// The least C such that every task has a fitting configuration finishing by C
// (arrival + run time <= C) and the sum over tasks of their least GPU-time among
// those configurations fits in C x total GPUs. At least as tight as both "longest
// task" and "total least work over GPUs". With several GPU types, also the
// per-type area test (each type's GPUs hold the GPU-time of what runs there;
// lower_bound.cc derives it from the dual of the fractional assignment LP).
// 0 for an empty problem.
double MakespanLowerBound(const Problem& problem);

// With 2-4 GPU types: a price per GPU-second of each type (GpuTypes order),
// the optimal dual of the typed area bound's fractional assignment LP (the
// worth of a type's GPU-time when every type is as busy as the bound says);
// a type the bound leaves idle costs a twentieth of the dearest; scaled so
// that the cluster's average GPU-second costs 1. Empty with
// one type (or more than four). Planners weigh GPU-time across types by it.
std::vector<double> TypePrices(const Problem& problem);

// Sum over tasks of weight x (arrival + shortest fitting run time).
double WeightedCompletionLowerBound(const Problem& problem);

// The bound for the problem's own objective.
double LowerBound(const Problem& problem);

}  // namespace orrery::planner
