// The two simple baselines a planner must beat, exposed as functions so the
// orrery planner can reuse their choices as warm starts.
#pragma once

#include <optional>
#include <vector>

#include "operator/planner/problem.h"

namespace orrery::planner {

// Per task the fastest fitting configuration (ties: fewer GPUs, then index).
std::vector<int> FastestChoice(const Problem& problem);

// Greedy: longest-processing-time list scheduling with each task's fastest config.
// `lower_bound`: the problem's bound when the caller has it (else computed).
Plan GreedyPlan(const Problem& problem, std::optional<double> lower_bound = std::nullopt);

// Current practice: tasks one after another in arrival order, each alone on a
// whole node with the template a user picks by default: fsdp on the most GPUs
// of one node if it fits in memory, else spill; if the task has neither, its
// fastest single-node configuration (said in the note).
Plan CurrentPracticePlan(const Problem& problem, std::optional<double> lower_bound = std::nullopt);

}  // namespace orrery::planner
