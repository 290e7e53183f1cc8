// Engine::Step, the loop every world runs: which change triggers a plan, when
// a step solves, and which tasks launch on which nodes, checked without any
// world.
#include <set>

#include <gtest/gtest.h>

#include "operator/engine/engine.h"
#include "tests/operator/engine/two_nodes.h"

namespace orrery::engine {
namespace {

// Two nodes of 2 GPUs, three tasks that each run on 1 or 2 GPUs.
StepInput TwoNodes() {
  StepInput in;
  in.world = testing::TwoNodes();
  return in;
}

EngineOptions Options() {
  EngineOptions o;
  o.solver_time_limit_s = 2;
  o.switch_cost_s = 50;
  o.replan_interval_s = 600;
  return o;
}

// Marks the step's launches running in the view, as a world would.
void Apply(StepInput& in, const StepResult& r) {
  for (const LaunchAction& l : r.launches) in.world.tasks[l.task].running = {l.config, l.gpus};
}

int Gpus(const StepResult& r) {
  int n = 0;
  for (const LaunchAction& l : r.launches) n += static_cast<int>(l.gpus.size());
  return n;
}

TEST(EngineStep, FirstStepPlansAndLaunchesWhatFits) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  StepResult r = engine.Step(in);
  ASSERT_TRUE(r.trigger.has_value());
  EXPECT_EQ(*r.trigger, Trigger::kStart);
  ASSERT_TRUE(r.decision && r.decision->adopted);
  EXPECT_TRUE(r.error.ok());
  EXPECT_FALSE(r.launches.empty());
  EXPECT_LE(Gpus(r), 4);
  for (const LaunchAction& l : r.launches) {
    const planner::Config& c = in.world.tasks[l.task].profile[static_cast<size_t>(l.config)];
    EXPECT_EQ(static_cast<int>(l.gpus.size()), c.gpus);
  }
  EXPECT_DOUBLE_EQ(r.next_step_at, 1000 + 600);
}

TEST(EngineStep, NothingChangedNothingHappens) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  StepResult first = engine.Step(in);
  Apply(in, first);
  in.world.now += 10;
  StepResult r = engine.Step(in);
  EXPECT_FALSE(r.trigger.has_value());
  EXPECT_FALSE(r.decision.has_value());
  // What the first step launched runs; nothing launches twice.
  for (const LaunchAction& l : r.launches) {
    for (const LaunchAction& f : first.launches) EXPECT_NE(l.task, f.task);
  }
}

TEST(EngineStep, EachChangeIsItsTrigger) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  in.world.tasks[2].arrived = false;
  Apply(in, engine.Step(in));
  auto next = [&](auto change) {
    StepInput copy = in;
    change(copy);
    return engine.DetectTrigger(copy);
  };
  EXPECT_EQ(next([](StepInput&) {}), std::nullopt);
  EXPECT_EQ(next([](StepInput& s) { s.world.nodes[1].alive = false; }), Trigger::kCapacityChanged);
  EXPECT_EQ(next([](StepInput& s) {
              s.world.nodes.push_back({"c", 2, 40, true});
            }),
            Trigger::kCapacityChanged);
  EXPECT_EQ(next([](StepInput& s) { s.world.gpu_cap = 2; }), Trigger::kQuotaChanged);
  EXPECT_EQ(next([](StepInput& s) { s.world.tasks[2].arrived = true; }), Trigger::kTaskArrived);
  EXPECT_EQ(next([](StepInput& s) { s.world.tasks[0].done = true; }), Trigger::kTaskFinished);
  // A measured speed 20% off the profile drifts past the 10% tolerance; 5% does not.
  EXPECT_EQ(next([](StepInput& s) { s.world.tasks[0].speed_factor = 0.8; }),
            Trigger::kThroughputDrift);
  EXPECT_EQ(next([](StepInput& s) { s.world.tasks[0].speed_factor = 0.95; }), std::nullopt);
  EXPECT_EQ(next([](StepInput& s) { s.world.now += 600; }), Trigger::kInterval);
  // The most urgent wins when several change at once.
  EXPECT_EQ(next([](StepInput& s) {
              s.world.tasks[0].done = true;
              s.world.gpu_cap = 2;
            }),
            Trigger::kQuotaChanged);
}

TEST(EngineStep, ADriftIsPlannedWithOnce) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  Apply(in, engine.Step(in));
  in.world.tasks[0].speed_factor = 0.5;
  in.world.now += 5;
  StepResult r = engine.Step(in);
  ASSERT_EQ(r.trigger, Trigger::kThroughputDrift);
  EXPECT_TRUE(r.decision.has_value());
  in.world.now += 5;
  EXPECT_EQ(engine.DetectTrigger(in), std::nullopt);  // the plan knows the new speed
}

// Scheduling settings edited on a running job: the next step solves under
// them once (kSpecChanged); the same settings again change nothing; a change
// that forces adoption in the same step keeps its own trigger.
TEST(EngineStep, EditedSettingsAreSolvedWithOnceAndApplyFromThen) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  Apply(in, engine.Step(in));
  EXPECT_FALSE(engine.UpdateOptions(Options()));
  EngineOptions edited = Options();
  edited.replan_interval_s = 60;
  edited.switch_cost_s = 10;
  EXPECT_TRUE(engine.UpdateOptions(edited));
  EXPECT_EQ(engine.options().replan_interval_s, 60);
  in.world.now += 5;
  StepResult r = engine.Step(in);
  ASSERT_EQ(r.trigger, Trigger::kSpecChanged);
  EXPECT_TRUE(r.decision.has_value() && r.decision->solved);
  in.world.now += 5;
  EXPECT_EQ(engine.Step(in).trigger, std::nullopt);
  // The new interval is the one that counts.
  in.world.now += 61;
  EXPECT_EQ(engine.DetectTrigger(in), Trigger::kInterval);
  Apply(in, engine.Step(in));

  edited.adopt_gain = 0.5;
  ASSERT_TRUE(engine.UpdateOptions(edited));
  in.world.nodes[1].alive = false;
  in.world.now += 5;
  EXPECT_EQ(engine.Step(in).trigger, Trigger::kCapacityChanged);
}

TEST(EngineStep, QuotaDownStopsWhatExceedsItAndUpLaunchesMore) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  in.world.gpu_cap = 4;
  Apply(in, engine.Step(in));
  int held = 0;
  for (const TaskView& v : in.world.tasks)
    held += v.running ? static_cast<int>(v.running->gpus.size()) : 0;
  ASSERT_GT(held, 1);
  // 4 -> 1: the step says which running tasks stop, in one pass.
  in.world.gpu_cap = 1;
  in.world.now += 1;
  in.launch_budget = 0;  // the job holds more than its cap: a world gives it no room
  StepResult down = engine.Step(in);
  ASSERT_EQ(down.trigger, Trigger::kQuotaChanged);
  ASSERT_TRUE(down.decision && down.decision->adopted);
  int stopped = 0;
  for (const StopAction& s : down.stops) {
    EXPECT_EQ(s.reason, StopReason::kQuota);
    stopped += static_cast<int>(in.world.tasks[s.task].running->gpus.size());
    in.world.tasks[s.task].running.reset();
    in.blocked.insert(s.task);  // its ranks checkpoint and go away
  }
  EXPECT_GE(stopped, held - 1);
  EXPECT_TRUE(down.launches.empty());  // the stopped ones still hold their GPUs
  // Once they are gone, nothing over the cap launches.
  in.blocked.clear();
  in.world.now += 1;
  int running = 0;
  for (const TaskView& v : in.world.tasks)
    running += v.running ? static_cast<int>(v.running->gpus.size()) : 0;
  in.launch_budget = 1 - running;
  StepResult after = engine.Step(in);
  EXPECT_LE(Gpus(after) + running, 1);
  Apply(in, after);
  // 1 -> 4: a re-plan, and launches up to the new cap.
  in.world.gpu_cap = 4;
  running = 0;
  for (const TaskView& v : in.world.tasks)
    running += v.running ? static_cast<int>(v.running->gpus.size()) : 0;
  in.launch_budget = 4 - running;
  in.world.now += 1;
  StepResult up = engine.Step(in);
  EXPECT_EQ(up.trigger, Trigger::kQuotaChanged);
  EXPECT_TRUE(up.decision && up.decision->adopted);
  EXPECT_GT(Gpus(up), 0);
  EXPECT_LE(Gpus(up) + running, 4);
}

// A running task made under edited pod settings (TaskView::outdated) stops
// for the edit without a re-plan, and starts again where its plan has it once
// its ranks are gone; a task that is not outdated keeps running.
TEST(EngineStep, AnOutdatedTaskStopsForTheSpecAndRunsAgainAsPlanned) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  StepResult first = engine.Step(in);
  Apply(in, first);
  ASSERT_GE(first.launches.size(), 2u);
  const LaunchAction edited = first.launches.front();
  in.world.tasks[edited.task].outdated = true;
  in.world.now += 10;
  StepResult r = engine.Step(in);
  EXPECT_FALSE(r.decision.has_value()) << "an edit of pod settings is not a re-plan";
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops[0].task, edited.task);
  EXPECT_EQ(r.stops[0].reason, StopReason::kSpec);
  EXPECT_STREQ(StopReasonName(StopReason::kSpec), "spec");
  EXPECT_TRUE(r.launches.empty()) << "its ranks still hold the GPUs";
  // The world stops it: its ranks go (blocked meanwhile), then it is waiting.
  in.world.tasks[edited.task].running.reset();
  in.world.tasks[edited.task].outdated = false;
  in.blocked.insert(edited.task);
  in.world.now += 10;
  for (const LaunchAction& l : engine.Step(in).launches) EXPECT_NE(l.task, edited.task);
  in.blocked.clear();
  in.world.now += 10;
  StepResult again = engine.Step(in);
  EXPECT_TRUE(again.stops.empty());
  ASSERT_EQ(again.launches.size(), 1u);
  EXPECT_EQ(again.launches[0].task, edited.task);
  EXPECT_EQ(again.launches[0].config, edited.config);
  EXPECT_EQ(again.launches[0].gpus, edited.gpus);
  EXPECT_TRUE(engine.journal().violations().empty());
}

// SelectLaunches alone: planned order, claims, the budget, and nodes by name.
planner::Plan PlanOf(const std::vector<std::pair<int, std::vector<planner::GpuSlot>>>& tasks) {
  planner::Plan p;
  double start = 0;
  for (auto& [config, gpus] : tasks) {
    planner::Assignment a;
    a.config = config;
    a.gpus = gpus;
    a.start = start;
    start += 10;
    p.assignments.push_back(a);
  }
  return p;
}

TEST(SelectLaunches, PlannedOrderClaimsAndBudget) {
  StepInput in = TwoNodes();
  planner::Plan plan = PlanOf({{1, {{0, 0}, {0, 1}}}, {0, {{1, 0}}}, {1, {{1, 0}, {1, 1}}}});
  std::vector<std::string> names = {"a", "b"};
  auto l = SelectLaunches(in, plan, names, {});
  ASSERT_EQ(l.size(), 2u);  // t2 wants b's GPUs that t1 claims first
  EXPECT_EQ(l[0].task, 0u);
  EXPECT_EQ(l[1].task, 1u);
  // Node a busy: t0 waits and claims it; t1 still starts on b.
  in.free_gpus = {1, 2};
  l = SelectLaunches(in, plan, names, {});
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].task, 1u);
  // A budget of 1: t0 (2 GPUs) is over it and nothing overtakes it.
  in.free_gpus = {};
  in.launch_budget = 1;
  EXPECT_TRUE(SelectLaunches(in, plan, names, {}).empty());
  // Blocked, done and running tasks do not launch.
  in.launch_budget = -1;
  in.blocked = {0};
  in.world.tasks[1].done = true;
  l = SelectLaunches(in, plan, names, {});
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].task, 2u);
}

TEST(SelectLaunches, NodesAreMatchedByNameAndGoneNodesWait) {
  StepInput in = TwoNodes();
  // The plan was made when the nodes were b, a (indices swapped since).
  planner::Plan plan = PlanOf({{0, {{0, 0}}}, {0, {{1, 0}}}});
  auto l = SelectLaunches(in, plan, {"b", "a"}, {});
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].gpus[0].node, 1);  // b is index 1 now
  EXPECT_EQ(l[1].gpus[0].node, 0);
  in.world.nodes[1].alive = false;  // b is gone: its task waits for a plan
  l = SelectLaunches(in, plan, {"b", "a"}, {});
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].task, 1u);
  l = SelectLaunches(in, plan, {"gone", "a"}, {});
  ASSERT_EQ(l.size(), 1u);
}

TEST(SelectLaunches, StopsFreeTheirGpusAtOnceOnlyWhenTheWorldSaysSo) {
  StepInput in = TwoNodes();
  in.world.tasks[0].running = RunningView{1, {{0, 0}, {0, 1}}};
  planner::Plan plan = PlanOf({{0, {{0, 0}}}, {0, {{0, 1}}}});
  std::vector<StopAction> stops = {{0, StopReason::kReplan}};
  EXPECT_TRUE(SelectLaunches(in, plan, {"a", "b"}, stops).empty());
  in.stops_free_at_once = true;
  auto l = SelectLaunches(in, plan, {"a", "b"}, stops);
  ASSERT_EQ(l.size(), 2u);  // t0 again on one GPU, t1 on the other
}

// An interleaved gang's members all run on its one GPU: it is held, and
// freed by their stops, once.
TEST(SelectLaunches, AGangsSharedGpuCountsOnce) {
  StepInput in = TwoNodes();
  in.world.tasks[0].running = RunningView{0, {{0, 0}}};
  in.world.tasks[1].running = RunningView{0, {{0, 0}}};
  planner::Plan plan = PlanOf({{0, {{0, 0}}}, {0, {{0, 0}}}, {0, {{0, 1}}}});
  const std::vector<std::vector<size_t>> gangs = {{0, 1}};
  auto l = SelectLaunches(in, plan, {"a", "b"}, {}, gangs);
  ASSERT_EQ(l.size(), 1u);  // node a's other GPU is free
  EXPECT_EQ(l[0].task, 2u);
  // The gang stopped, node a otherwise full (t2 on its other GPU): one GPU
  // comes free, for one of the members launching again as one gang.
  in.world.tasks[2].running = RunningView{0, {{0, 1}}};
  in.free_gpus = {0, 2};
  in.stops_free_at_once = true;
  plan = PlanOf({{0, {{0, 0}}}, {0, {{0, 1}}}, {0, {{0, 1}}}});
  std::vector<StopAction> stops = {{0, StopReason::kReplan}, {1, StopReason::kReplan}};
  l = SelectLaunches(in, plan, {"a", "b"}, stops);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].task, 0u);
}

TEST(EngineStep, AStalePlanIsReplannedOncePerCapacity) {
  Engine engine(Options(), nullptr);
  StepInput in = TwoNodes();
  StepResult first = engine.Step(in);
  ASSERT_TRUE(first.decision);
  // Nothing ran; the plan's nodes have no GPUs free for this job now (another
  // job took them, which the view shows as fewer GPUs on node b only).
  in.world.now += 1;
  in.free_gpus = {0, 0};
  StepResult r = engine.Step(in);
  EXPECT_TRUE(r.launches.empty());
  ASSERT_TRUE(r.trigger.has_value());
  EXPECT_EQ(*r.trigger, Trigger::kCapacityChanged);
  in.world.now += 1;
  StepResult again = engine.Step(in);
  EXPECT_FALSE(again.decision.has_value());  // once for this capacity
}

// Task 2 starts first on a:2; task 0 next on a:2 + b:1; task 1 last on b:1.
planner::Plan ThreeTaskPlan() {
  planner::Plan plan;
  plan.assignments.resize(3);
  plan.assignments[2] = {0, {{0, 0}, {0, 1}}, 0, 10};
  plan.assignments[0] = {0, {{0, 2}, {0, 3}, {1, 0}}, 5, 20};
  plan.assignments[1] = {0, {{1, 1}}, 8, 30};
  return plan;
}

StepInput FourAndTwo(std::vector<int> free) {
  StepInput in = TwoNodes();
  in.world.nodes = {{"a", 4, 40, true}, {"b", 2, 40, true}};
  in.free_gpus = std::move(free);
  return in;
}

std::vector<std::string> Placement(const StepInput& in, const LaunchAction& l) {
  std::vector<std::string> out;
  for (const planner::GpuSlot& g : l.gpus) out.push_back(in.world.nodes[g.node].name);
  return out;
}

TEST(SelectLaunches, PlannedOrderAndEarlierTasksKeepTheirClaim) {
  const planner::Plan plan = ThreeTaskPlan();
  const std::vector<std::string> nodes = {"a", "b"};
  StepInput in = FourAndTwo({4, 2});
  auto launches = SelectLaunches(in, plan, nodes, {});
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].task, 2u);
  EXPECT_EQ(Placement(in, launches[0]), (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(launches[1].task, 0u);
  EXPECT_EQ(Placement(in, launches[1]), (std::vector<std::string>{"a", "a", "b"}));
  EXPECT_EQ(launches[2].task, 1u);
  // a has only 3 free: task 2 starts, task 0 cannot and keeps its claim on b, so
  // task 1 (later) does not take the GPU task 0 waits for.
  in = FourAndTwo({3, 1});
  launches = SelectLaunches(in, plan, nodes, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].task, 2u);
  // A blocked task does not start again, and claims nothing.
  in = FourAndTwo({1, 2});
  in.blocked = {2};
  launches = SelectLaunches(in, plan, nodes, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].task, 1u);
}

TEST(SelectLaunches, StopAtTheFirstTaskOverTheBudget) {
  const planner::Plan plan = ThreeTaskPlan();
  const std::vector<std::string> nodes = {"a", "b"};
  // 3 GPUs of quota left: task 2 (2 GPUs) starts; task 0 (3) is over what is
  // left, and task 1 (1 GPU, planned after it) does not overtake it.
  StepInput in = FourAndTwo({4, 2});
  in.launch_budget = 3;
  auto launches = SelectLaunches(in, plan, nodes, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].task, 2u);
  in.launch_budget = 6;
  EXPECT_EQ(SelectLaunches(in, plan, nodes, {}).size(), 3u);
  in.launch_budget = 0;
  EXPECT_TRUE(SelectLaunches(in, plan, nodes, {}).empty());
}

// ---- interleaved gangs (planner/interleave.h) ------------------------------------

// One node of one GPU and `n` tasks that run only spilled on one GPU, each
// 100 s alone.
StepInput SpilledOnOneGpu(int n) {
  StepInput in;
  in.world.now = 0;
  in.world.nodes.push_back({"n0", 1, 16, true});
  for (int t = 0; t < n; ++t) {
    TaskView v;
    v.name = "t" + std::to_string(t);
    v.remaining_work = 1000;
    v.profile = {planner::Config{"spill", 1, 1, 8, 10, 12}};
    in.world.tasks.push_back(v);
  }
  return in;
}

TEST(EngineStep, InterleavingLaunchesSpilledTasksAsOneGang) {
  EngineOptions o = Options();
  o.interleave = true;
  Engine engine(o, nullptr);
  StepInput in = SpilledOnOneGpu(3);
  StepResult r = engine.Step(in);
  ASSERT_TRUE(r.decision && r.decision->adopted) << r.error;
  // Two of the three share the GPU (gangs of two); the third waits.
  ASSERT_EQ(r.decision->gangs.size(), 1u);
  const std::vector<size_t> gang = r.decision->gangs[0];
  ASSERT_EQ(gang.size(), 2u);
  const planner::Assignment& a = r.decision->plan.assignments[gang[0]];
  const planner::Assignment& b = r.decision->plan.assignments[gang[1]];
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_DOUBLE_EQ(a.start, b.start);
  EXPECT_DOUBLE_EQ(a.end, b.end);
  // 200 s of work together at 1.22x: 164 s, not 200.
  EXPECT_NEAR(a.end - a.start, 200 / planner::kInterleaveSpeedup, 1e-6);
  ASSERT_EQ(r.launches.size(), 1u);
  const LaunchAction& l = r.launches[0];
  ASSERT_EQ(l.interleaved.size(), 1u);
  EXPECT_EQ(std::set<size_t>({l.task, l.interleaved[0].task}),
            std::set<size_t>(gang.begin(), gang.end()));
  EXPECT_EQ(l.interleaved[0].gpus, l.gpus);
  EXPECT_EQ(l.interleaved[0].config, 0);
  // Both journaled as launched, naming the gang.
  int launches = 0;
  for (const JournalEntry& e : engine.journal().entries()) {
    if (e.kind != "launch") continue;
    ++launches;
    EXPECT_NE(e.detail.find("interleaved"), std::string::npos) << e.detail;
  }
  EXPECT_EQ(launches, 2);

  // The gang runs; its first member finishes. The other keeps running where
  // it is (no stop), and the third task waits for the GPU.
  for (size_t t : gang) in.world.tasks[t].running = RunningView{0, l.gpus};
  in.free_gpus = {0};
  in.world.now = 60;
  in.world.tasks[gang[0]].done = true;
  in.world.tasks[gang[0]].running.reset();
  in.world.tasks[gang[1]].remaining_work = 500;
  StepResult next = engine.Step(in);
  ASSERT_TRUE(next.trigger.has_value());
  EXPECT_EQ(*next.trigger, Trigger::kTaskFinished);
  EXPECT_TRUE(next.stops.empty());
  EXPECT_TRUE(next.launches.empty());
}

TEST(EngineStep, WithoutInterleavingSpilledTasksRunOneAfterAnother) {
  Engine engine(Options(), nullptr);  // interleave off: the other worlds' default
  StepInput in = SpilledOnOneGpu(2);
  StepResult r = engine.Step(in);
  ASSERT_TRUE(r.decision && r.decision->adopted);
  EXPECT_TRUE(r.decision->gangs.empty());
  ASSERT_EQ(r.launches.size(), 1u);
  EXPECT_TRUE(r.launches[0].interleaved.empty());
  EXPECT_TRUE(engine.gangs().empty());
}

TEST(EngineStep, AGangThatGainsNothingIsNotPlanned) {
  // A measured speedup of at most 1 (the gang no faster than its members one
  // after the other) offers no gang.
  EngineOptions o = Options();
  o.interleave = true;
  o.interleave_speedup = 0.8;
  Engine engine(o, nullptr);
  StepInput in = SpilledOnOneGpu(2);
  StepResult r = engine.Step(in);
  ASSERT_TRUE(r.decision && r.decision->adopted);
  EXPECT_TRUE(r.decision->gangs.empty());
  ASSERT_EQ(r.launches.size(), 1u);
  EXPECT_TRUE(r.launches[0].interleaved.empty());
}

// A gang's members share one GPU: under a cap of one GPU the running gang is
// within it, and a re-plan that ends the gang stops its members for the
// re-plan, not for a quota they never exceeded.
TEST(EngineStep, AGangsSharedGpuCountsOnceAgainstTheCap) {
  EngineOptions o = Options();
  o.interleave = true;
  Engine engine(o, nullptr);
  StepInput in = SpilledOnOneGpu(4);
  in.world.gpu_cap = 1;
  StepResult r = engine.Step(in);
  ASSERT_TRUE(r.decision && r.decision->adopted);
  ASSERT_EQ(r.launches.size(), 1u);
  ASSERT_EQ(r.launches[0].interleaved.size(), 1u);
  Apply(in, r);
  in.world.tasks[r.launches[0].interleaved[0].task].running = {0, r.launches[0].gpus};
  in.free_gpus = {0};
  in.world.now = 30;
  o.interleave_speedup = 0.8;
  ASSERT_TRUE(engine.UpdateOptions(o));
  StepResult next = engine.Step(in);
  ASSERT_TRUE(next.decision && next.decision->adopted) << next.decision->reason;
  ASSERT_FALSE(next.stops.empty());
  for (const StopAction& s : next.stops) EXPECT_EQ(s.reason, StopReason::kReplan) << s.task;
}

// Each member of a running gang the new plan moves stops alone; one it keeps
// where it runs, from now, runs on in the gang's process (the worker stops
// members one at a time), and is not stopped.
void ExpectOnlyMovedMembersStop(const StepInput& in, const StepResult& next,
                                const std::vector<size_t>& members) {
  ASSERT_TRUE(next.decision && next.decision->adopted);
  std::set<size_t> stopped;
  for (const StopAction& s : next.stops) stopped.insert(s.task);
  int kept = 0;
  for (size_t m : members) {
    const planner::Assignment& a = next.decision->plan.assignments[m];
    const bool stays = a.start <= in.world.now + 1e-9 && in.world.tasks[m].running &&
                       a.gpus == in.world.tasks[m].running->gpus;
    EXPECT_NE(stays, stopped.count(m) > 0) << "member " << m << " starts at " << a.start;
    kept += stays ? 1 : 0;
  }
  EXPECT_EQ(kept, 1) << "one member runs on in the gang";
}

TEST(EngineStep, AMeasuredSpeedupBelowOneEndsTheGangs) {
  EngineOptions o = Options();
  o.interleave = true;
  Engine engine(o, nullptr);
  StepInput in = SpilledOnOneGpu(4);
  StepResult r = engine.Step(in);
  ASSERT_TRUE(r.decision && r.decision->adopted);
  ASSERT_EQ(r.decision->gangs.size(), 2u);
  ASSERT_EQ(r.launches.size(), 1u);
  ASSERT_EQ(r.launches[0].interleaved.size(), 1u);
  Apply(in, r);
  in.world.tasks[r.launches[0].interleaved[0].task].running = {0, r.launches[0].gpus};
  in.free_gpus = {0};
  // The running gang measured 0.8x (slower than its members one after the
  // other): the plan is made again without gangs; of the running gang, whose
  // members now run one after the other, the member moved later stops alone
  // and the other runs on in the gang's process.
  in.world.now = 30;
  o.interleave_speedup = 0.8;
  ASSERT_TRUE(engine.UpdateOptions(o, Trigger::kGangSpeedMeasured));
  StepResult next = engine.Step(in);
  ASSERT_TRUE(next.trigger.has_value());
  EXPECT_EQ(*next.trigger, Trigger::kGangSpeedMeasured);
  ASSERT_TRUE(next.decision && next.decision->adopted) << next.decision->reason;
  EXPECT_TRUE(next.decision->gangs.empty());
  ExpectOnlyMovedMembersStop(in, next, {r.launches[0].task, r.launches[0].interleaved[0].task});
  EXPECT_TRUE(engine.gangs().empty());
  // The same speedup again changes nothing.
  in.world.now = 40;
  EXPECT_FALSE(engine.UpdateOptions(o));
  StepResult same = engine.Step(in);
  EXPECT_FALSE(same.decision && same.decision->adopted);
}

}  // namespace
}  // namespace orrery::engine

namespace orrery::engine {
namespace {

// One GPU, a long task (1000 samples) and a short one (100), 1 sample/s each:
// every order has the same makespan, but under spec.scheduling.objective
// weightedCompletionTime the engine runs first what finishes the weighted sum
// soonest: the short task, unless the long one weighs enough more.
// One node of one GPU at `now`, and two tasks of one configuration: "long"
// (1000 units of work, weight `long_weight`) and "short" (100, weight 1).
StepInput LongAndShortOnOneGpu(double now, double long_weight = 1) {
  StepInput in;
  in.world.now = now;
  in.world.nodes = {{"a", 1, 40, true}};
  for (const auto& [name, work] : {std::pair<std::string, double>{"long", 1000}, {"short", 100}}) {
    TaskView t;
    t.name = name;
    t.remaining_work = work;
    t.weight = name == "long" ? long_weight : 1;
    t.profile = {testing::Cfg(1, 1)};
    in.world.tasks.push_back(t);
  }
  return in;
}

TEST(EngineStep, TheJobsObjectiveOrdersWhatRunsFirst) {
  auto first_launch = [](planner::Objective objective, double long_weight) {
    EngineOptions o = Options();
    o.objective = objective;
    Engine engine(o, nullptr);
    StepInput in = LongAndShortOnOneGpu(0, long_weight);
    StepResult r = engine.Step(in);
    EXPECT_TRUE(r.decision && r.decision->adopted);
    EXPECT_EQ(r.launches.size(), 1u);
    return std::make_pair(
        r.launches.empty() ? std::string() : in.world.tasks[r.launches[0].task].name,
        r.decision ? r.decision->new_objective : 0.0);
  };
  const auto [wct_first, wct] = first_launch(planner::Objective::kWeightedCompletion, 1);
  EXPECT_EQ(wct_first, "short");
  EXPECT_DOUBLE_EQ(wct, 100 + 1100);  // the sum of completion times from now
  const auto [heavy_first, heavy] = first_launch(planner::Objective::kWeightedCompletion, 20);
  EXPECT_EQ(heavy_first, "long");
  EXPECT_DOUBLE_EQ(heavy, 20 * 1000 + 1100);
  const auto [makespan_first, makespan] = first_launch(planner::Objective::kMakespan, 1);
  EXPECT_DOUBLE_EQ(makespan, 1100);
}

// The UpdateStatus action: every step that solves says, in world terms, what
// every world writes (status.plan, the report's plan row, the re-plan log):
// the plan in force's number, when it ends and its bound on the same clock
// (no bound under weighted completion, whose bound is not a time); a solve
// kept out gives the solve's figures and leaves the number as it was.
TEST(EngineStep, EverySolveSaysTheStatusOnce) {
  auto one_node = [](planner::Objective objective) {
    EngineOptions o = Options();
    o.objective = objective;
    return std::make_pair(o, LongAndShortOnOneGpu(500));
  };
  {
    auto [o, in] = one_node(planner::Objective::kMakespan);
    Engine engine(o, nullptr);
    StepResult r = engine.Step(in);
    ASSERT_TRUE(r.status.has_value());
    const PlanStatusUpdate& u = *r.status;
    EXPECT_TRUE(u.adopted);
    EXPECT_EQ(u.trigger, "start");
    EXPECT_EQ(u.revision, 1);
    EXPECT_DOUBLE_EQ(u.at, 500);
    EXPECT_DOUBLE_EQ(u.ends_at, 500 + 1100);  // both tasks one after the other, from now
    ASSERT_TRUE(u.ends_at_bound.has_value());
    EXPECT_DOUBLE_EQ(*u.ends_at_bound, 500 + 1100);  // one GPU: the bound is the work
    EXPECT_NEAR(u.plan_gap, 0, 1e-9);
    EXPECT_EQ(u.tasks_planned, 2);
    EXPECT_FALSE(u.planner.empty());
    // Nothing changed: no solve, no status.
    Apply(in, r);
    in.world.now += 10;
    EXPECT_FALSE(engine.Step(in).status.has_value());
    // A drift solves; the same plan is kept (one GPU, nothing to gain).
    in.world.tasks[r.launches[0].task].speed_factor = 0.5;
    StepResult drift = engine.Step(in);
    ASSERT_TRUE(drift.status.has_value());
    EXPECT_EQ(drift.status->trigger, "throughput-drift");
    EXPECT_FALSE(drift.status->adopted);
    EXPECT_EQ(drift.status->revision, 1);
    EXPECT_DOUBLE_EQ(drift.status->ends_at, 0);
    EXPECT_GT(drift.status->objective, 0);
  }
  {
    auto [o, in] = one_node(planner::Objective::kWeightedCompletion);
    Engine engine(o, nullptr);
    StepResult r = engine.Step(in);
    ASSERT_TRUE(r.status.has_value());
    EXPECT_TRUE(r.status->adopted);
    EXPECT_FALSE(r.status->ends_at_bound.has_value());
    EXPECT_DOUBLE_EQ(r.status->ends_at, 500 + 1100);
    EXPECT_DOUBLE_EQ(r.status->objective, 100 + 1100);  // on the remaining problem, from now
  }
}

}  // namespace
}  // namespace orrery::engine
