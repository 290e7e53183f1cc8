// The independent plan checker: a plan is valid when every task runs once with
// one of its configurations on exactly the GPUs that configuration names (within
// one node unless it spans nodes, evenly split, on nodes with enough GPU memory),
// not before it arrives, for at least its work over its throughput, and no GPU
// is used by two tasks at once. Tests and benchmarks run every plan through it.
#pragma once

#include "common/status.h"
#include "operator/planner/problem.h"

namespace orrery::planner {

// OK, or InvalidArgument naming the task and the broken rule.
Status CheckPlan(const Problem& problem, const Plan& plan);

}  // namespace orrery::planner
