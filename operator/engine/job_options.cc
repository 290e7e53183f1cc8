#include "operator/engine/job_options.h"

#include <algorithm>

namespace orrery::engine {

EngineOptions JobEngineOptions(const api::SchedulingSpec& scheduling, EngineOptions world) {
  EngineOptions o = std::move(world);
  o.policy = "orrery";
  o.replan_interval_s = scheduling.replan_interval_seconds;
  o.adopt_gain = scheduling.min_switch_gain;
  o.coalesce_window_s = scheduling.coalesce_window_seconds;
  o.warm_start = scheduling.warm_start;
  o.objective = PlanObjective(scheduling.objective);
  const double spec_limit = scheduling.solver_time_limit_seconds;
  o.solver_time_limit_s =
      o.solver_time_limit_s > 0 ? std::min(o.solver_time_limit_s, spec_limit) : spec_limit;
  return o;
}

planner::Objective PlanObjective(api::Objective objective) {
  return objective == api::Objective::kMakespan ? planner::Objective::kMakespan
                                                : planner::Objective::kWeightedCompletion;
}

}  // namespace orrery::engine
