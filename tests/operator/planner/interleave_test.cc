// Interleaved gangs (operator/planner/interleave.h): spilled tasks sharing a
// GPU are offered as one "interleaved" task; the planner keeps the gangs where
// GPUs are scarce (and the simulator, running that plan, finishes sooner than
// it does with the best plan without them), and drops them where every task
// has a GPU of its own, or where a task fits without spilling.
#include "operator/planner/interleave.h"

#include <gtest/gtest.h>

#include "operator/planner/workload_io.h"
#include "operator/sim/simulator.h"

namespace orrery::planner {
namespace {

// Four tasks whose ddp configuration needs 90 GiB: on 40 GiB GPUs only spill
// fits. Each takes an hour alone.
Workload Spilled(int gpus) {
  auto w = ParseWorkload(R"(
name: spilled
cluster: {nodes: 1, gpusPerNode: )" +
                         std::to_string(gpus) + R"(, gpuMemoryGiB: 40}
tasks:
  - {name: a, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30},
                                      {template: ddp, gpus: 1, batchSize: 8, throughput: 3, memoryGiB: 90}]}
  - {name: b, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30}]}
  - {name: c, work: 7200, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 2, memoryGiB: 35}]}
  - {name: d, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30}]}
)");
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

PlanOptions Options() { return PlanOptions{5, nullptr, 1, -1}; }

double Simulated(const Workload& w) {
  sim::SimOptions o;
  o.engine.introspect = false;
  o.engine.solver_time_limit_s = 5;
  auto r = sim::Simulate(w, o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->makespan : 0;
}

TEST(InterleaveTest, GangsOfSpilledTasksModelTheMeasuredSpeedup) {
  const Workload w = Spilled(2);
  EXPECT_EQ(SpillOnlyTasks(w.problem), (std::vector<int>{0, 1, 2, 3}));
  GangedProblem g = GroupInterleaved(w.problem);
  ASSERT_EQ(g.gangs, 2);
  ASSERT_EQ(g.problem.tasks.size(), 2u);
  for (const Task& t : g.problem.tasks) {
    ASSERT_EQ(t.configs.size(), 1u);
    const Config& c = t.configs[0];
    EXPECT_EQ(c.template_name, kInterleavedTemplate);
    EXPECT_EQ(c.gpus, 1);
    EXPECT_EQ(t.work, 7200 + (t.name == "a+b" || t.name == "b+a" ? 0 : 3600));
    // Two hour-long tasks: two hours over the speedup.
    EXPECT_NEAR(t.work / c.throughput, 7200 / kInterleaveSpeedup, 1e-6);
  }
  // A speedup of 1 offers no gang; a slow gang is never faster than its longest member.
  EXPECT_EQ(GroupInterleaved(w.problem, {1.0, 2}).gangs, 0);
  GangedProblem fast = GroupInterleaved(w.problem, {10.0, 2});
  for (const Task& t : fast.problem.tasks)
    EXPECT_NEAR(t.work / t.configs[0].throughput, 3600, 1e-6) << t.name;
}

TEST(InterleaveTest, ChosenWhereGpusAreScarceAndFasterOnTheSimulator) {
  const Workload w = Spilled(2);
  auto planner = MakeOrreryPlanner();
  auto r = SolveInterleaved(*planner, w.problem, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->interleaved());
  EXPECT_NEAR(r->without.makespan, 7200, 1e-3);
  EXPECT_NEAR(r->plan.makespan, 7200 / kInterleaveSpeedup, 1e-3);
  EXPECT_NE(r->plan.note.find("interleaved gang"), std::string::npos);
  // The simulator runs each plan's problem: the gangs finish sooner.
  Workload ganged = w;
  ganged.problem = r->ganged.problem;
  ganged.true_speed.assign(ganged.problem.tasks.size(), 1.0);
  const double with = Simulated(ganged), without = Simulated(w);
  EXPECT_NEAR(without, 7200, 1);
  EXPECT_NEAR(with, 7200 / kInterleaveSpeedup, 1);
  EXPECT_LT(with, without);
}

TEST(InterleaveTest, NotChosenWhereEveryTaskHasAGpu) {
  const Workload w = Spilled(4);
  auto planner = MakeOrreryPlanner();
  auto r = SolveInterleaved(*planner, w.problem, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->interleaved());
  EXPECT_NEAR(r->plan.makespan, 3600, 1e-3);
  EXPECT_EQ(r->ganged.problem.tasks.size(), 4u);
}

TEST(InterleaveTest, OnlyTasksThatMustSpillShare) {
  Workload w = Spilled(2);
  // On 96 GiB GPUs task a fits under ddp: it is not offered a gang.
  for (Node& n : w.problem.nodes) n.gpu_memory_gib = 96;
  EXPECT_EQ(SpillOnlyTasks(w.problem), (std::vector<int>{1, 2, 3}));
  GangedProblem g = GroupInterleaved(w.problem);
  EXPECT_EQ(g.gangs, 1);
  // One gang of the first two by alone time, then a and the odd spilled one alone.
  EXPECT_EQ(g.members, (std::vector<std::vector<int>>{{1, 2}, {0}, {3}}));
  EXPECT_EQ(g.problem.tasks[0].name, "b+c");
  EXPECT_EQ(g.problem.tasks[1].configs.size(), 2u);  // a keeps its own
  // A running task stays where it runs.
  w.problem.tasks[1].running = RunningState{0, {{0, 0}}, 60};
  EXPECT_EQ(SpillOnlyTasks(w.problem), (std::vector<int>{2, 3}));
}

}  // namespace
}  // namespace orrery::planner
