// Decomposition by pool, how the orrery planner reaches thousands of GPUs.
//
// A gang never spans GPU types, so once every task has a GPU type the types'
// pools are independent problems; and a large pool of one type is split into
// groups of at most `max_nodes` interchangeable nodes. Each group's tasks are
// then planned alone (a MILP and a local search a group's size, not the
// cluster's), and the group plans laid side by side are a plan of the whole:
// the groups share no node. The type of each task comes from a plan of the
// whole cluster (orrery's balanced per-type sweep); the split of a type's
// tasks between its groups is a longest-processing-time balance of GPU-time.
#pragma once

#include <vector>

#include "common/status.h"
#include "operator/planner/planner.h"
#include "operator/planner/problem.h"

namespace orrery::planner {

struct PoolSplit {
  int pools = 0;
  std::vector<int> node_pool;  // per node of the problem: its group
  std::vector<int> task_pool;  // per task: its group
};

// Groups the nodes by GPU type, each type's nodes (in index order) into
// ceil(n / max_nodes) groups of near-equal size; a running task's gang stays
// in one group. Then each task goes to a group of the type `plan` runs it on
// (a running task: where it runs), the largest GPU-time first to the group of
// its type least loaded relative to its GPUs.
PoolSplit SplitIntoPools(const Problem& problem, const Plan& plan, int max_nodes);

// Whether the problem is large enough to plan by pool: more than one group,
// tasks x GPUs at least `min_size`, and no GPU cap below the nodes' GPUs (a
// cap is shared by every pool).
bool WorthSplitting(const Problem& problem, int max_nodes, double min_size);

// Plans every group with `make()`'s planner on its nodes and tasks, the time
// limit shared in proportion to the groups' tasks x GPUs, and joins the plans
// (node indices back to the problem's). The joined plan's lower bound is left
// 0 (the caller's own); its note says the groups and their makespans.
StatusOr<Plan> SolveByPools(const Problem& problem, const PoolSplit& split,
                            const PlanOptions& options);

}  // namespace orrery::planner
