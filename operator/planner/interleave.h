// Interleaved gangs (Hydra, Nagrecha & Kumar, "Hydra: A System for Large
// Multi-Model Deep Learning", VLDB 2023, its shard-level multi-model
// scheduling): tasks whose models only run spilled may share one GPU in one
// worker process (`orrery-worker gang`, worker/train/gang.h), one model's
// shard computing while another's is copied in, so together they finish
// sooner than one after the other on that GPU. A planner sees such a gang as
// one task ("a+b") whose single configuration is "interleaved" on one GPU.
//
// The gang's time: the members' alone times T_i (work over their one-GPU
// spill throughput) shortened by the measured interleaving speedup s,
//   G = max(sum_i T_i / s, max_i T_i),
// never less than the longest member alone. s defaults to
// kInterleaveSpeedup, measured by bench/worker/interleave_bench (two spilled
// models, each larger than the budget, interleaved against spilled one after
// the other on one device: 1.22x on the CPU path with an emulated
// host-to-device link). Hydra reports 1.8-4.5x over single-model
// parallelism on GPUs; ours is the conservative figure we measured.
//
// Interleaving wins where GPUs are scarce: with a GPU per spilled task each
// runs alone sooner than any gang. So the planner solves both problems, the
// tasks as they are and with the spilled ones paired in gangs, and keeps the
// plan with the better objective (SolveInterleaved). Pure, like the planners.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "operator/planner/planner.h"
#include "operator/planner/problem.h"

namespace orrery::planner {

inline constexpr double kInterleaveSpeedup = 1.22;
inline constexpr const char* kInterleavedTemplate = "interleaved";

struct InterleaveOptions {
  double speedup = kInterleaveSpeedup;  // > 1, else no gangs are offered
  int gang_size = 2;                    // tasks per gang (>= 2)
};

// Tasks that need spilling: not running, with a one-GPU spill configuration
// that fits the cluster and no other template's configuration that does.
std::vector<int> SpillOnlyTasks(const Problem& problem);

// `problem` with SpillOnlyTasks grouped in gangs of options.gang_size, in
// order of their alone time (similar lengths share, so neither waits long),
// each gang one task; an odd one left over stays alone. members[i]: the
// original tasks task i of `problem` stands for (one, for a task not in a
// gang). A gang's work is its members' samples, arrival the latest, weight
// the sum; one configuration per GPU type all members have a one-GPU spill
// configuration for, template "interleaved", throughput work / G, memory the
// largest member's (they share one budget, the device's).
struct GangedProblem {
  Problem problem;
  std::vector<std::vector<int>> members;
  int gangs = 0;
};
GangedProblem GroupInterleaved(const Problem& problem, const InterleaveOptions& options = {});

// `problem` with the given gangs (task indices, two or more each) merged as
// GroupInterleaved merges its own, each timed at `speedup` whatever its value
// (a gang measured slower than its members one after the other is timed as
// slow as it is), the other tasks as they are; a gang whose members share no
// GPU type stays its members. For re-timing a plan that has gangs.
GangedProblem GroupAs(const Problem& problem, const std::vector<std::vector<int>>& gangs,
                      double speedup);

// The gang's seconds from its members' alone seconds T_i (work over their
// one-GPU spill throughput) and the interleaving speedup s:
//   G = max(sum_i T_i / s, max_i T_i);
// one member alone runs as alone (G = T). The planner's gang time and the
// simulator's gang progress (GangShares) both come from here.
double GangSeconds(const std::vector<double>& alone_seconds, double speedup);

// Each member's speed in the gang as a fraction of its speed alone, T_i / G:
// the shares of the device under which every member finishes at GangSeconds
// together (they sum to s where the longest member does not bound G). Where
// a member leaves (it finished, or its true speed differed from the
// profile's), the rest share again on what each has left.
std::vector<double> GangShares(const std::vector<double>& alone_seconds, double speedup);

// The name of a gang of these tasks: "a+b".
std::string GangName(const std::vector<std::string>& tasks);

struct InterleavedPlan {
  GangedProblem ganged;  // gangs == 0: the problem as given
  Plan plan;             // on ganged.problem
  Plan without;          // the plan without gangs (== plan when no gang was offered)
  bool interleaved() const { return ganged.gangs > 0; }
};

// Solves `problem`, and where SpillOnlyTasks has two or more tasks also the
// ganged problem; keeps the ganged plan only where its objective is lower (a
// ganged problem the planner fails on leaves the plan without gangs).
StatusOr<InterleavedPlan> SolveInterleaved(Planner& planner, const Problem& problem,
                                           const PlanOptions& options,
                                           const InterleaveOptions& interleave = {});

}  // namespace orrery::planner
