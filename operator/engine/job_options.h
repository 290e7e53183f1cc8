// The engine's options for one job, the same in every world: the job's
// spec.scheduling (re-plan interval, the gain that justifies a switch, the
// solver's time limit, the objective) over what the world sets itself (the switch cost of its
// gangs, the drift tolerance, the seed). A world's solver limit, when it sets
// one, caps the spec's (an operator flag bounds every job's solves).
#pragma once

#include "operator/api/types.h"
#include "operator/engine/engine.h"

namespace orrery::engine {

EngineOptions JobEngineOptions(const api::SchedulingSpec& scheduling, EngineOptions world);

// The planner's objective for a spec's spec.scheduling.objective (the engine's
// and `orrery plan`'s).
planner::Objective PlanObjective(api::Objective objective);

}  // namespace orrery::engine
