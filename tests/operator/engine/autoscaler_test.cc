// The autoscaler applies the allocator's changes only when they pay for their
// rescale: no flapping between near-equal allocations, forced shrinks when the
// capacity drops, arrivals queued when the cluster is full, and a reason on
// every decision. Tasks with a base batch take their GPU counts from the
// decision at that batch, and grow onto idle GPUs only when it pays.
#include "operator/engine/autoscaler.h"

#include <gtest/gtest.h>

namespace orrery::engine {
namespace {

using planner::elastic::Option;

// A task whose throughput is linear in GPUs over the given GPU counts (batch 32
// per GPU), so the allocator's preference is set by its work alone (a fresh
// task: total and remaining work alike, so either value gives the same order).
ScaleTask Linear(const std::string& name, double remaining, const std::vector<int>& gpus,
                 double per_gpu = 10) {
  ScaleTask t;
  t.name = name;
  t.total_work = remaining;
  t.remaining_work = remaining;
  for (int g : gpus) t.options.push_back(Option{g, 32 * g, per_gpu * g});
  return t;
}

int IndexOf(const ScaleTask& t, int gpus) {
  for (size_t j = 0; j < t.options.size(); ++j)
    if (t.options[j].gpus == gpus) return static_cast<int>(j);
  return -1;
}

int Count(const ScalePlan& p, ScaleDecision::Action a) {
  int n = 0;
  for (const ScaleDecision& d : p.decisions) n += d.action == a ? 1 : 0;
  return n;
}

TEST(AutoscalerTest, StartsQueuedTasksWithoutCost) {
  Autoscaler as({});
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {2, 4}), Linear("b", 2000, {2, 4})};
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->gpus_used, 8);
  EXPECT_EQ(Count(*plan, ScaleDecision::Action::kStart), 2);
  for (const ScaleDecision& d : plan->decisions) {
    EXPECT_EQ(d.time, 10);
    EXPECT_EQ(d.to_gpus, 4);
    EXPECT_FALSE(d.reason.empty());
  }
}

TEST(AutoscalerTest, ArrivalsQueuedWhenFull) {
  Autoscaler as({});
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {4}), Linear("b", 1000, {4}),
                                  Linear("c", 1000, {4})};
  tasks[0].current = 0;
  tasks[1].current = 0;
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, (std::vector<int>{0, 0, -1}));
  ASSERT_EQ(plan->decisions.size(), 1u);
  EXPECT_EQ(plan->decisions[0].task, "c");
  EXPECT_EQ(plan->decisions[0].action, ScaleDecision::Action::kQueue);
}

TEST(AutoscalerTest, NearEqualAllocationsDoNotFlap) {
  Autoscaler as({});
  // a holds 6 GPUs, b 2. Which of the two should hold 6 alternates with tiny
  // changes in remaining work; the allocator alone would swap them every time.
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {2, 6}), Linear("b", 1000, {2, 6})};
  tasks[0].current = IndexOf(tasks[0], 6);
  tasks[1].current = IndexOf(tasks[1], 2);
  for (int round = 0; round < 6; ++round) {
    tasks[0].remaining_work = tasks[0].total_work = round % 2 == 0 ? 1001 : 999;
    tasks[1].remaining_work = tasks[1].total_work = round % 2 == 0 ? 999 : 1001;
    auto plan = as.Decide(tasks, 8, ScaleTrigger::kInterval, 100.0 * round);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->choice[0], tasks[0].current) << "round " << round;
    EXPECT_EQ(plan->choice[1], tasks[1].current) << "round " << round;
    EXPECT_EQ(Count(*plan, ScaleDecision::Action::kRescale), 0);
    if (round % 2 == 0) {
      // The allocator wanted the swap here; the decision says why it was refused.
      ASSERT_GE(Count(*plan, ScaleDecision::Action::kKeep), 1);
      EXPECT_NE(plan->decisions[0].reason.find("does not beat"), std::string::npos);
    }
  }
}

TEST(AutoscalerTest, LargeGainRescalesRunningTasks) {
  Autoscaler as({});
  // b is ten times smaller: moving the 6 GPUs to it pays within the hours both
  // still have to run.
  std::vector<ScaleTask> tasks = {Linear("a", 1e6, {2, 6}), Linear("b", 1e5, {2, 6})};
  tasks[0].current = IndexOf(tasks[0], 6);
  tasks[1].current = IndexOf(tasks[1], 2);
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kInterval, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice[0], IndexOf(tasks[0], 2));
  EXPECT_EQ(plan->choice[1], IndexOf(tasks[1], 6));
  EXPECT_EQ(Count(*plan, ScaleDecision::Action::kRescale), 2);
  for (const ScaleDecision& d : plan->decisions) EXPECT_GT(d.gain, d.cost);
}

TEST(AutoscalerTest, HighRescaleCostKeepsAllocation) {
  AutoscalerOptions o;
  o.rescale_cost_s = 1e6;  // a rescale costs more than any horizon gains
  Autoscaler as(o);
  std::vector<ScaleTask> tasks = {Linear("a", 1e6, {2, 6}), Linear("b", 1e5, {2, 6})};
  tasks[0].current = IndexOf(tasks[0], 6);
  tasks[1].current = IndexOf(tasks[1], 2);
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kInterval, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice[0], tasks[0].current);
  EXPECT_EQ(plan->choice[1], tasks[1].current);
}

TEST(AutoscalerTest, TaskAboutToFinishIsLeftAlone) {
  AutoscalerOptions o;
  // By size, not by what is left: the allocator itself still wants the swap.
  o.value = planner::elastic::Value::kNormalizedThroughput;
  Autoscaler as(o);
  // a runs on 6 GPUs and finishes in 20 s there; b, half a's size, would run
  // faster on them. Counted over the whole horizon a's shrink pays for its
  // pause; counted over the 20 s before a's GPUs come free anyway it does not.
  std::vector<ScaleTask> tasks = {Linear("a", 1e6, {2, 6}), Linear("b", 5e5, {2, 6})};
  tasks[0].remaining_work = 1200;  // 60 samples/s on 6 GPUs
  tasks[0].current = IndexOf(tasks[0], 6);
  tasks[1].current = IndexOf(tasks[1], 2);
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kInterval, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice[0], tasks[0].current);
  EXPECT_EQ(plan->choice[1], tasks[1].current);
  EXPECT_EQ(Count(*plan, ScaleDecision::Action::kRescale), 0);
  ASSERT_GE(plan->decisions.size(), 1u);
  EXPECT_EQ(plan->decisions[0].task, "a");
  EXPECT_EQ(plan->decisions[0].action, ScaleDecision::Action::kKeep);
  // With a far from done the same swap is made.
  tasks[0].remaining_work = 1e6;
  plan = as.Decide(tasks, 8, ScaleTrigger::kInterval, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice[0], IndexOf(tasks[0], 2));
  EXPECT_EQ(plan->choice[1], IndexOf(tasks[1], 6));
}

TEST(AutoscalerTest, ChangedTaskDwellsBeforeAnotherChange) {
  AutoscalerOptions o;
  o.dwell = 4;  // 4 x 60 s
  Autoscaler as(o);
  // a starts alone on all 8 GPUs. b, ten times smaller, arrives 10 s later:
  // without the dwell a would shrink at once to make room; with it, a keeps its
  // GPUs until 240 s after its start, and b waits.
  std::vector<ScaleTask> tasks = {Linear("a", 1e6, {2, 4, 8})};
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->choice[0], IndexOf(tasks[0], 8));
  tasks[0].current = plan->choice[0];
  tasks.push_back(Linear("b", 1e5, {2, 4, 8}));
  plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice[0], IndexOf(tasks[0], 8));
  EXPECT_EQ(plan->choice[1], -1);
  ASSERT_EQ(plan->decisions.size(), 2u);
  EXPECT_EQ(plan->decisions[0].action, ScaleDecision::Action::kKeep);
  EXPECT_NE(plan->decisions[0].reason.find("dwell"), std::string::npos)
      << plan->decisions[0].reason;
  // Past the dwell the same state is re-planned and a gives b room.
  plan = as.Decide(tasks, 8, ScaleTrigger::kInterval, 300);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->choice[0], IndexOf(tasks[0], 8));
  EXPECT_GE(plan->choice[1], 0);
  // Without a dwell the change is made at once.
  AutoscalerOptions none;
  none.dwell = 0;
  Autoscaler eager(none);
  std::vector<ScaleTask> fresh = {Linear("a", 1e6, {2, 4, 8})};
  ASSERT_TRUE(eager.Decide(fresh, 8, ScaleTrigger::kArrival, 0).ok());
  fresh[0].current = IndexOf(fresh[0], 8);
  fresh.push_back(Linear("b", 1e5, {2, 4, 8}));
  plan = eager.Decide(fresh, 8, ScaleTrigger::kArrival, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->choice[0], IndexOf(fresh[0], 8));
}

TEST(AutoscalerTest, RecordedGainIsProgressWithBonusesStatedApart) {
  AutoscalerOptions o;
  o.deadline_s = 1000;  // within the horizon: the deadline bonus is on
  Autoscaler as(o);
  // a finishes in 12.5 s on 8 GPUs, or in 85 s on 4 after its pause; b, queued,
  // finishes by the deadline only if it starts now on 4. Two tasks on course
  // outweigh a's progress, so a shrinks although the shrink itself loses progress.
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {4, 8}), Linear("b", 20000, {4})};
  tasks[0].current = IndexOf(tasks[0], 8);
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->choice[0], IndexOf(tasks[0], 4));
  const ScaleDecision& d = plan->decisions[0];
  ASSERT_EQ(d.action, ScaleDecision::Action::kRescale);
  // The progress a plan makes over the 12.5 s a would still run: 0.042 per second
  // (a at 40/1000, b at 40/20000) against 0.08 with a kept on 8 GPUs. The bonus
  // that outweighed it is not in the gain.
  EXPECT_NEAR(d.gain, (0.042 - 0.08) * 12.5, 1e-9);
  EXPECT_NEAR(d.cost, 60 * 0.04, 1e-9);
  EXPECT_NE(d.reason.find("deadline bonus: 2 tasks on course to finish by the deadline "
                          "against 1"),
            std::string::npos)
      << d.reason;
  EXPECT_EQ(d.reason.find("beats"), std::string::npos) << d.reason;
}

TEST(AutoscalerTest, CapacityLossForcesShrink) {
  AutoscalerOptions o;
  o.rescale_cost_s = 1e6;  // even a prohibitive cost cannot keep GPUs that are gone
  Autoscaler as(o);
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {2, 4, 8})};
  tasks[0].current = IndexOf(tasks[0], 8);
  auto plan = as.Decide(tasks, 4, ScaleTrigger::kCapacityChanged, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_LE(plan->gpus_used, 4);
  ASSERT_EQ(plan->decisions.size(), 1u);
  EXPECT_EQ(plan->decisions[0].action, ScaleDecision::Action::kRescale);
  EXPECT_EQ(plan->decisions[0].from_gpus, 8);
  EXPECT_LE(plan->decisions[0].to_gpus, 4);
  EXPECT_EQ(plan->decisions[0].reason.rfind("forced", 0), 0u) << plan->decisions[0].reason;
}

TEST(AutoscalerTest, CapacityLossPreemptsWhenNothingFits) {
  Autoscaler as({});
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {4}), Linear("b", 500, {4})};
  tasks[0].current = 0;
  tasks[1].current = 0;
  auto plan = as.Decide(tasks, 4, ScaleTrigger::kCapacityChanged, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->gpus_used, 4);
  EXPECT_EQ(Count(*plan, ScaleDecision::Action::kPreempt), 1);
}

TEST(AutoscalerTest, LogKeepsEveryDecision) {
  Autoscaler as({});
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {4})};
  ASSERT_TRUE(as.Decide(tasks, 8, ScaleTrigger::kArrival, 1).ok());
  tasks.push_back(Linear("b", 1000, {8}, 2));
  tasks[0].current = 0;
  ASSERT_TRUE(as.Decide(tasks, 8, ScaleTrigger::kArrival, 2).ok());
  ASSERT_EQ(as.log().size(), 2u);
  EXPECT_EQ(as.log()[0].task, "a");
  EXPECT_EQ(as.log()[1].task, "b");
  EXPECT_EQ(as.log()[1].action, ScaleDecision::Action::kQueue);
  EXPECT_STREQ(ScaleTriggerName(as.log()[1].trigger), "arrival");
}

TEST(AutoscalerTest, BadInputNamesTheField) {
  Autoscaler as({});
  std::vector<ScaleTask> tasks = {Linear("a", 1000, {4})};
  tasks[0].current = 3;
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("tasks[0].current"), std::string::npos);
  tasks[0].current = -1;
  tasks[0].options[0].gpus = 0;
  plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("tasks[0].options[0].gpus"), std::string::npos);
  EXPECT_FALSE(as.Decide(tasks, -1, ScaleTrigger::kArrival, 0).ok());
}

// A task with base batch 128: 4 GPUs at its base batch, plus the options listed
// at other batches.
ScaleTask Based(const std::string& name, double remaining, const std::vector<Option>& others) {
  ScaleTask t;
  t.name = name;
  t.total_work = remaining;
  t.remaining_work = remaining;
  t.base_batch = 128;
  t.options.push_back(Option{4, 128, 40});
  for (const Option& o : others) t.options.push_back(o);
  return t;
}

TEST(AutoscalerTest, BaseBatchDecidesGpusAndTheBatchFollows) {
  // Two tasks, 4 GPUs: at batch 64 both would fit side by side on 2 GPUs each,
  // which the knapsack over every option prefers; at their base batch only one
  // fits, and it runs at 4 GPUs at its fastest batch there (256), the other
  // waits.
  const std::vector<Option> others = {{2, 64, 40}, {4, 256, 50}};
  std::vector<ScaleTask> tasks = {Based("a", 1000, others), Based("b", 2000, others)};
  Autoscaler as({});
  auto plan = as.Decide(tasks, 4, ScaleTrigger::kArrival, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, (std::vector<int>{2, -1}));
  EXPECT_EQ(plan->gpus_used, 4);
  for (ScaleTask& t : tasks) t.base_batch = 0;  // every batch movable: the joint knapsack
  Autoscaler joint({});
  auto side_by_side = joint.Decide(tasks, 4, ScaleTrigger::kArrival, 0);
  ASSERT_TRUE(side_by_side.ok()) << side_by_side.status();
  EXPECT_EQ(side_by_side->choice, (std::vector<int>{1, 1}));
}

TEST(AutoscalerTest, GrowsOntoIdleGpusOnlyWhenItPaysTwoRescalesAndShrinksBack) {
  // 8 GPUs, the base batch fits only 4; batch 256 runs on 8 at 70 samples/s.
  const std::vector<Option> wide = {{8, 256, 70}};
  {
    // 10,000 samples: growing saves 107 s, less than two rescale costs (60 s)
    // with hysteresis.
    Autoscaler as({});
    auto plan = as.Decide({Based("a", 1e4, wide)}, 8, ScaleTrigger::kArrival, 0);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->choice, (std::vector<int>{0}));
  }
  Autoscaler as({});
  std::vector<ScaleTask> tasks = {Based("a", 1e5, wide)};
  auto plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->choice, (std::vector<int>{1}));  // saves 1,071 s
  ASSERT_EQ(plan->decisions.size(), 1u);
  EXPECT_EQ(plan->decisions[0].action, ScaleDecision::Action::kStart);
  EXPECT_NE(plan->decisions[0].reason.find("idle"), std::string::npos) << plan->decisions[0].reason;
  // An arrival needs the GPUs it grew onto: it shrinks back to the 4 the
  // fixed-batch decision gave it, within its dwell time, and b starts.
  tasks[0].current = 1;
  tasks.push_back(Based("b", 1e5, {}));
  plan = as.Decide(tasks, 8, ScaleTrigger::kArrival, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, (std::vector<int>{0, 0}));
  EXPECT_EQ(Count(*plan, ScaleDecision::Action::kRescale), 1);
  EXPECT_EQ(Count(*plan, ScaleDecision::Action::kStart), 1);
}

// GPU types: a task's options on two pools, pool 1 twice as fast. The
// decision picks the pool as well as the count; growth never takes idle GPUs
// of another pool, so a task never spans types; and a pool losing GPUs forces
// shrinks there alone.
ScaleTask Typed(const std::string& name, double remaining, int pool_of_wide) {
  ScaleTask t;
  t.name = name;
  t.total_work = remaining;
  t.remaining_work = remaining;
  t.base_batch = 128;
  t.options = {{4, 128, 40, 0}, {4, 128, 80, 1}, {8, 256, 140, pool_of_wide}};
  return t;
}

// Both ways of deciding across types: the joint knapsack (the default with
// several pools) and the base-batch shadow with its guarded growth.
class TypedAutoscalerTest : public testing::TestWithParam<bool> {
 protected:
  AutoscalerOptions Options() const {
    AutoscalerOptions o;
    o.shadow_across_types = GetParam();
    return o;
  }
};

TEST_P(TypedAutoscalerTest, ChoosesPoolAndGrowsWithinIt) {
  using planner::elastic::Capacity;
  {
    // Both pools have 4 GPUs: one task takes the faster pool.
    Autoscaler as(Options());
    auto plan = as.Decide({Typed("a", 1e5, 1)}, Capacity{4, 4}, ScaleTrigger::kArrival, 0);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->choice, (std::vector<int>{1}));
    EXPECT_EQ(plan->decisions[0].to_type, 1);
  }
  {
    // 8 GPUs in pool 1: it grows there at batch 256 (saves 536 s).
    Autoscaler as(Options());
    auto plan = as.Decide({Typed("a", 1e5, 1)}, Capacity{4, 8}, ScaleTrigger::kArrival, 0);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->choice, (std::vector<int>{2}));
  }
  {
    // The wide option is on pool 0, with 4 idle GPUs of pool 0 and 4 of pool 1:
    // 8 GPUs idle in all, but no pool holds 8, so it does not grow.
    Autoscaler as(Options());
    auto plan = as.Decide({Typed("a", 1e5, 0)}, Capacity{4, 4}, ScaleTrigger::kArrival, 0);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->choice, (std::vector<int>{1}));
    EXPECT_EQ(plan->gpus_used, 4);
  }
  // Two running, one per pool; pool 0 loses its GPUs: its task is preempted
  // (forced), the other keeps pool 1.
  Autoscaler as(Options());
  std::vector<ScaleTask> tasks = {Typed("a", 1e5, 1), Typed("b", 5e4, 1)};
  tasks[0].current = 0;
  tasks[1].current = 1;
  auto plan = as.Decide(tasks, Capacity{0, 4}, ScaleTrigger::kCapacityChanged, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->choice, (std::vector<int>{-1, 1}));
  ASSERT_EQ(plan->decisions.size(), 1u);
  EXPECT_EQ(plan->decisions[0].action, ScaleDecision::Action::kPreempt);
  EXPECT_EQ(plan->decisions[0].reason.rfind("forced: pool 0", 0), 0u) << plan->decisions[0].reason;
  auto bad = as.Decide(tasks, Capacity{4}, ScaleTrigger::kInterval, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "tasks[0].options[1].type: must name a pool, 0 to 0");
}

INSTANTIATE_TEST_SUITE_P(ShadowOrJoint, TypedAutoscalerTest, testing::Bool());

}  // namespace
}  // namespace orrery::engine
