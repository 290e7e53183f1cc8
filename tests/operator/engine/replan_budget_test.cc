// Re-planning within a budget: triggers that fire within the coalescing
// window of the last solve wait for one solve at its end, what must not wait
// (capacity) solves at once, and a warm-started re-plan on an arrival keeps
// the running gangs as they run.
#include <gtest/gtest.h>

#include "operator/engine/engine.h"
#include "operator/engine/job_options.h"
#include "tests/operator/engine/two_nodes.h"

namespace orrery::engine {
namespace {

EngineOptions Options(double window, bool warm) {
  EngineOptions o;
  o.solver_time_limit_s = 2;
  o.switch_cost_s = 50;
  o.replan_interval_s = 3600;
  o.coalesce_window_s = window;
  o.warm_start = warm;
  return o;
}

void Apply(StepInput& in, const StepResult& r) {
  for (const LaunchAction& l : r.launches) in.world.tasks[l.task].running = {l.config, l.gpus};
}

// Two tasks arrive 10 s apart, both within 300 s of the first plan: neither
// step solves, each asks to be stepped again when the window ends, and that
// step solves once and plans both. Without a window each arrival solves.
TEST(ReplanBudget, TriggersWithinTheWindowCoalesceIntoOneSolve) {
  for (double window : {300.0, 0.0}) {
    Engine engine(Options(window, false), nullptr);
    StepInput in;
    in.world = testing::TwoNodes();
    in.world.tasks[1].arrived = false;
    in.world.tasks[2].arrived = false;
    Apply(in, engine.Step(in));
    ASSERT_EQ(engine.solves(), 1);
    int deferred = 0;
    for (size_t t : {1U, 2U}) {
      in.world.now += 10;
      in.world.tasks[t].arrived = true;
      StepResult r = engine.Step(in);
      if (window > 0) {
        EXPECT_FALSE(r.decision.has_value());
        ASSERT_TRUE(r.deferred.has_value());
        EXPECT_EQ(*r.deferred, Trigger::kTaskArrived);
        EXPECT_DOUBLE_EQ(r.next_step_at, 1000 + window);
        ++deferred;
      } else {
        EXPECT_TRUE(r.decision && r.decision->solved);
      }
      Apply(in, r);
    }
    if (window > 0) {
      EXPECT_EQ(deferred, 2);
      in.world.now = 1000 + window;
      StepResult r = engine.Step(in);
      ASSERT_TRUE(r.decision && r.decision->solved);
      ASSERT_TRUE(r.decision->trigger.has_value());
      EXPECT_EQ(*r.decision->trigger, Trigger::kTaskArrived);
      EXPECT_EQ(r.decision->tasks_planned, 3);
      EXPECT_EQ(engine.solves(), 2);  // one for both arrivals
    } else {
      EXPECT_EQ(engine.solves(), 3);
    }
  }
}

// A lost node does not wait for the window.
TEST(ReplanBudget, CapacityChangesSolveAtOnce) {
  Engine engine(Options(300, true), nullptr);
  StepInput in;
  in.world = testing::TwoNodes();
  Apply(in, engine.Step(in));
  in.world.now += 5;
  in.world.nodes[1].alive = false;
  for (auto& t : in.world.tasks)
    if (t.running && t.running->gpus.front().node == 1) t.running.reset();
  StepResult r = engine.Step(in);
  EXPECT_FALSE(r.deferred.has_value());
  ASSERT_TRUE(r.decision && r.decision->solved);
  EXPECT_EQ(*r.decision->trigger, Trigger::kCapacityChanged);
  EXPECT_FALSE(r.decision->kept_running);  // capacity: a full re-plan
}

// The running task holds one GPU in its slow configuration while a second
// node stands empty: a fresh plan from scratch would move it to two GPUs. A
// warm-started re-plan on an arrival plans only what waits, so the gang runs
// on as it is (no stop) and the newcomer gets the free GPUs.
TEST(ReplanBudget, WarmStartedReplanOnArrivalKeepsRunningGangs) {
  for (bool warm : {true, false}) {
    Engine engine(Options(0, warm), nullptr);
    StepInput in;
    in.world = testing::TwoNodes();
    in.world.tasks.resize(2);
    in.world.tasks[0].remaining_work = 5000;
    in.world.tasks[1].arrived = false;
    in.world.tasks[1].remaining_work = 100;
    // The first plan placed task 0 on one GPU of node a (an older plan).
    in.world.tasks[0].running = RunningView{0, {{0, 0}}};
    Apply(in, engine.Step(in));
    in.world.now += 100;
    in.world.tasks[1].arrived = true;
    StepResult r = engine.Step(in);
    ASSERT_TRUE(r.decision && r.decision->solved);
    EXPECT_EQ(r.decision->warm, warm);
    EXPECT_EQ(r.decision->kept_running, warm);
    const planner::Assignment& a = engine.current_plan()->assignments[0];
    if (warm) {
      EXPECT_TRUE(r.stops.empty());
      EXPECT_EQ(a.config, 0);
      EXPECT_EQ(a.gpus, (std::vector<planner::GpuSlot>{{0, 0}}));
      EXPECT_DOUBLE_EQ(a.start, in.world.now);
    } else {
      // From scratch, the arrival's re-plan moves it onto two GPUs.
      EXPECT_EQ(a.config, 1);
      EXPECT_EQ(r.stops.size(), 1U);
    }
  }
}

// A job asks for the budget in its spec (spec.scheduling): every world's
// engine gets the same window and warm starts, and the default is neither.
TEST(ReplanBudget, TheJobSpecSetsTheWindowAndWarmStarts) {
  api::SchedulingSpec spec;
  EngineOptions defaults = JobEngineOptions(spec, {});
  EXPECT_EQ(defaults.coalesce_window_s, 0);
  EXPECT_FALSE(defaults.warm_start);
  spec.coalesce_window_seconds = 120;
  spec.warm_start = true;
  EngineOptions o = JobEngineOptions(spec, {});
  EXPECT_EQ(o.coalesce_window_s, 120);
  EXPECT_TRUE(o.warm_start);
  EXPECT_NE(o, defaults) << "an edit of either is a spec change the engine re-plans on";
}

// spec.scheduling.objective reaches the engine in every world (it was honoured
// by `orrery plan` only): makespan by default, else the weighted completion.
TEST(ReplanBudget, TheJobSpecSetsTheObjective) {
  api::SchedulingSpec spec;
  EXPECT_EQ(JobEngineOptions(spec, {}).objective, planner::Objective::kMakespan);
  spec.objective = api::Objective::kWeightedCompletionTime;
  const EngineOptions o = JobEngineOptions(spec, {});
  EXPECT_EQ(o.objective, planner::Objective::kWeightedCompletion);
  EXPECT_NE(o, JobEngineOptions({}, {})) << "an edit is a spec change the engine re-plans on";
}

}  // namespace
}  // namespace orrery::engine
