// The cluster-wide allocation across jobs: shares follow how well each job's
// tasks scale, an arrival splits the cluster, a completion gives GPUs back,
// GPUs nobody's allocation uses are every job's, quotas bound shares, and the
// shares stand between triggers.
#include "operator/engine/cluster_share.h"

#include <set>
#include <tuple>

#include <gtest/gtest.h>

namespace orrery::engine {
namespace {

using planner::elastic::Option;

// A task with the given (GPUs, samples/s) points at batch 64.
ScaleTask Task(const std::string& name, double work,
               const std::vector<std::pair<int, double>>& points) {
  ScaleTask t;
  t.name = name;
  t.total_work = work;
  t.remaining_work = work;
  t.base_batch = 64;
  for (const auto& [gpus, throughput] : points) t.options.push_back(Option{gpus, 64, throughput});
  return t;
}

const std::vector<std::pair<int, double>> kScales = {{1, 10}, {2, 19}, {4, 36}, {8, 68}};
const std::vector<std::pair<int, double>> kFlat = {{1, 10}, {2, 11}, {4, 11.5}};

// kScales's options in pool `pool`.
std::vector<Option> kScalesOptions(int pool) {
  std::vector<Option> out;
  for (const auto& [gpus, throughput] : kScales) out.push_back(Option{gpus, 64, throughput, pool});
  return out;
}

JobDemand Job(const std::string& key, std::vector<ScaleTask> tasks, int quota = 0) {
  return JobDemand{key, quota, std::move(tasks)};
}

TEST(ClusterSharesTest, SharesFollowScalingEfficiency) {
  ClusterShares shares({});
  ASSERT_TRUE(shares.Update(Job("ns/flat", {Task("t", 1e5, kFlat)}), 12, 0).ok());
  auto u = shares.Update(Job("ns/scales", {Task("t", 1e5, kScales)}), 12, 0);
  ASSERT_TRUE(u.ok()) << u.status();
  ASSERT_TRUE(u->decided);
  EXPECT_EQ(u->trigger, ScaleTrigger::kArrival);
  // Equal work: the job that turns GPUs into progress gets the wide share; the
  // one that barely scales gets what is left, not half.
  EXPECT_EQ(u->shares.at("ns/scales").gpus, 8);
  EXPECT_EQ(u->shares.at("ns/flat").gpus, 4);
  EXPECT_EQ(u->shares.at("ns/flat").cap, 4);  // nothing idle
  EXPECT_NE(u->shares.at("ns/scales").reason.find("t start 8 GPUs at batch 64"), std::string::npos)
      << u->shares.at("ns/scales").reason;
  // Every decision is in the log under the job's name.
  ASSERT_FALSE(shares.log().empty());
  EXPECT_EQ(shares.log().back().task.rfind("ns/", 0), 0u);
}

TEST(ClusterSharesTest, SharesAreTheAutoscalersAllocation) {
  // The same tasks through one autoscaler directly: the shares add up its choice.
  std::vector<ScaleTask> a = {Task("x", 4e4, kScales), Task("y", 9e4, kFlat)};
  std::vector<ScaleTask> b = {Task("z", 2e4, kScales)};
  ClusterShares shares({});
  ASSERT_TRUE(shares.Update(Job("a", a), 10, 5).ok());
  auto u = shares.Update(Job("b", b), 10, 5);
  ASSERT_TRUE(u.ok());
  Autoscaler direct({});
  std::vector<ScaleTask> all = {a[0], a[1], b[0]};
  all[0].name = "a/x";
  all[1].name = "a/y";
  all[2].name = "b/z";
  auto plan = direct.Decide(all, 10, ScaleTrigger::kArrival, 5);
  ASSERT_TRUE(plan.ok());
  auto gpus = [&](size_t i) {
    int c = plan->choice[i];
    return c < 0 ? 0 : all[i].options[static_cast<size_t>(c)].gpus;
  };
  EXPECT_EQ(u->shares.at("a").gpus, gpus(0) + gpus(1));
  EXPECT_EQ(u->shares.at("b").gpus, gpus(2));
  EXPECT_EQ(u->shares.at("a").cap - u->shares.at("a").gpus, 10 - plan->gpus_used);
}

TEST(ClusterSharesTest, AnArrivalSplitsTheClusterAndACompletionGivesItBack) {
  ClusterShares shares({});
  auto first = shares.Update(Job("a", {Task("t", 1e5, kScales)}), 8, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->shares.at("a").cap, 8);
  EXPECT_EQ(first->changed, std::vector<std::string>{"a"});
  // Before a's gang starts, b arrives with the same work: half each beats all to one.
  auto second = shares.Update(Job("b", {Task("t", 1e5, kScales)}), 8, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->shares.at("a").cap, 4);
  EXPECT_EQ(second->shares.at("b").cap, 4);
  EXPECT_EQ(second->changed, (std::vector<std::string>{"a", "b"}));
  // b finishes (no tasks left): a's cap is the whole cluster again.
  auto third = shares.Update(Job("b", {}), 8, 2);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->decided);
  EXPECT_EQ(third->trigger, ScaleTrigger::kCompletion);
  EXPECT_EQ(third->shares.count("b"), 0u);
  EXPECT_EQ(third->shares.at("a").cap, 8);
  EXPECT_EQ(third->changed, std::vector<std::string>{"a"});
  shares.Remove("a");
  EXPECT_FALSE(shares.Share("a").has_value());
}

TEST(ClusterSharesTest, ARunningTaskKeepsItsGpusWhenShrinkingItDoesNotPay) {
  AutoscalerOptions o;
  o.rescale_cost_s = 600;  // dear: a rescale pauses the task ten minutes
  ClusterShares shares({o, 300});
  ScaleTask running = Task("t", 2e4, kScales);
  running.current = 3;  // on 8 GPUs, about five minutes from done
  ASSERT_TRUE(shares.Update(Job("a", {running}), 8, 0).ok());
  auto u = shares.Update(Job("b", {Task("t", 1e5, kScales)}), 8, 10);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->shares.at("a").gpus, 8);
  EXPECT_EQ(u->shares.at("b").cap, 0) << u->shares.at("b").reason;
}

TEST(ClusterSharesTest, ADecisionThatShrinksARunningTaskNamesIt) {
  AutoscalerOptions o;
  o.rescale_cost_s = 1;  // cheap: a restart costs a second
  ClusterShares shares({o, 300});
  ScaleTask running = Task("t", 1e6, kScales);
  running.current = 3;  // on all 8 GPUs, hours from done
  auto alone = shares.Update(Job("a", {running}), 8, 0);
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->shares.at("a").shrinks.empty());
  // A short job arrives: the cluster finishes it far sooner if the long one
  // gives up GPUs for a while than if it waits hours for them.
  auto u = shares.Update(Job("b", {Task("t", 2e3, kScales)}), 8, 3600);
  ASSERT_TRUE(u.ok());
  const JobShare& a = u->shares.at("a");
  ASSERT_EQ(a.shrinks.size(), 1u) << a.reason;
  EXPECT_EQ(a.shrinks[0].task, "t");
  EXPECT_EQ(a.shrinks[0].from_gpus, 8);
  EXPECT_LT(a.shrinks[0].to_gpus, 8);
  EXPECT_EQ(a.gpus, a.shrinks[0].to_gpus);
  EXPECT_GT(u->shares.at("b").gpus, 0);
  EXPECT_EQ(a.decision, 2);
  EXPECT_TRUE(u->shares.at("b").shrinks.empty());
}

TEST(ClusterSharesTest, SharesStandBetweenTriggers) {
  ClusterShares shares({AutoscalerOptions{}, 300});
  JobDemand a = Job("a", {Task("t", 1e5, kScales)});
  ASSERT_TRUE(shares.Update(a, 8, 0).ok());
  EXPECT_EQ(shares.decisions(), 1);
  auto same = shares.Update(a, 8, 100);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->decided);
  EXPECT_EQ(same->shares.at("a").cap, 8);
  EXPECT_TRUE(same->changed.empty());
  auto interval = shares.Update(a, 8, 300);
  ASSERT_TRUE(interval.ok());
  EXPECT_TRUE(interval->decided);
  EXPECT_EQ(interval->trigger, ScaleTrigger::kInterval);
  auto lost = shares.Update(a, 4, 301);
  ASSERT_TRUE(lost.ok());
  EXPECT_TRUE(lost->decided);
  EXPECT_EQ(lost->trigger, ScaleTrigger::kCapacityChanged);
  EXPECT_EQ(lost->shares.at("a").cap, 4);
  EXPECT_EQ(shares.decisions(), 3);
}

TEST(ClusterSharesTest, TheQuotaBoundsShareAndCapAndIdleGpusAreAnyones) {
  ClusterShares shares({});
  // a cannot use more than 2 GPUs (its options stop there); b's quota is 2.
  ASSERT_TRUE(shares.Update(Job("a", {Task("t", 1e5, {{1, 10}, {2, 19}})}), 16, 0).ok());
  auto u = shares.Update(Job("b", {Task("t", 1e5, kScales)}, 2), 16, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->shares.at("a").gpus, 2);
  EXPECT_EQ(u->shares.at("b").gpus, 2);
  EXPECT_EQ(u->shares.at("a").cap, 14);  // 2 + the 12 nobody's allocation uses
  EXPECT_EQ(u->shares.at("b").cap, 2);   // its quota
}

// A job's gpuQuota edited is decided again at once, up or down, not at the
// next interval: the quota bounds what the allocation may give it.
TEST(ClusterSharesTest, AnEditedQuotaIsDecidedAgainAtOnce) {
  ClusterShares shares({AutoscalerOptions{}, 300});
  auto first = shares.Update(Job("a", {Task("t", 1e5, kScales)}, 2), 8, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->shares.at("a").cap, 2);
  auto raised = shares.Update(Job("a", {Task("t", 1e5, kScales)}, 8), 8, 10);
  ASSERT_TRUE(raised.ok());
  EXPECT_TRUE(raised->decided);
  EXPECT_EQ(raised->trigger, ScaleTrigger::kCapacityChanged);
  EXPECT_EQ(raised->shares.at("a").cap, 8);
  auto same = shares.Update(Job("a", {Task("t", 1e5, kScales)}, 8), 8, 20);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->decided);
  auto lowered = shares.Update(Job("a", {Task("t", 1e5, kScales)}, 4), 8, 30);
  ASSERT_TRUE(lowered.ok());
  EXPECT_TRUE(lowered->decided);
  EXPECT_EQ(lowered->shares.at("a").cap, 4);
}

TEST(ClusterSharesTest, GpusGivenPastAJobsQuotaAreIdle) {
  // a's tasks are short, so the allocation favours them: 2 GPUs each, 8 in
  // all, though a may hold only 4. The 4 past its quota are nobody's.
  std::vector<ScaleTask> short_tasks, long_tasks;
  for (int k = 0; k < 4; ++k) {
    short_tasks.push_back(Task("s" + std::to_string(k), 1e3, {{1, 10}, {2, 19}}));
    long_tasks.push_back(Task("l" + std::to_string(k), 1e5, {{1, 10}, {2, 19}}));
  }
  ClusterShares shares({});
  ASSERT_TRUE(shares.Update(Job("a", short_tasks, 4), 12, 0).ok());
  auto u = shares.Update(Job("b", long_tasks), 12, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->shares.at("a").gpus, 4);
  EXPECT_EQ(u->shares.at("a").cap, 4);
  const JobShare& b = u->shares.at("b");
  EXPECT_EQ(b.cap, 12 - 4) << b.reason;  // everything a cannot hold
}

TEST(ClusterSharesTest, BadInputNamesTheField) {
  ClusterShares shares({});
  auto negative = shares.Update(Job("a", {Task("t", 1e5, kScales)}), -1, 0);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("capacity"), std::string::npos);
  auto unnamed = shares.Update(Job("", {Task("t", 1e5, kScales)}), 8, 0);
  ASSERT_FALSE(unnamed.ok());
  EXPECT_NE(unnamed.status().message().find("demand.job"), std::string::npos);
  ScaleTask bad = Task("t", 1e5, {{0, 10}});
  auto table = shares.Update(Job("ns/bad", {bad}), 8, 0);
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("ns/bad/t"), std::string::npos)
      << table.status().message();
}

TEST(ClusterSharesTest, DemandComesFromThePlannersView) {
  std::vector<api::ExpandedTask> tasks(3);
  for (size_t t = 0; t < tasks.size(); ++t) {
    tasks[t].name = "t" + std::to_string(t);
    tasks[t].task.training.batch_size = 32;
    tasks[t].task.training.steps = 100;
  }
  WorldView w;
  for (size_t t = 0; t < tasks.size(); ++t) {
    TaskView v;
    v.name = tasks[t].name;
    v.remaining_work = 1600;
    v.profile = {{"ddp", 1, 1, 0, 10, 1},
                 {"ddp", 2, 1, 0, 18, 1},
                 {"fsdp", 2, 1, 0, 19, 1},
                 {"ddp", 2, 1, 64, 25, 1},
                 {"ddp", 4, 1, 0, 30, 1}};
    v.speed_factor = 0.5;
    w.tasks.push_back(v);
  }
  w.tasks[0].running = RunningView{2, {}};  // fsdp x 2 at its own batch
  w.tasks[1].done = true;
  w.tasks[2].arrived = false;
  JobDemand d = DemandFromWorld("ns/j", 2, w, tasks);
  EXPECT_EQ(d.job, "ns/j");
  EXPECT_EQ(d.quota, 2);
  ASSERT_EQ(d.tasks.size(), 1u);  // done and not-yet-profiled tasks ask for nothing
  const ScaleTask& s = d.tasks[0];
  EXPECT_EQ(s.name, "t0");
  EXPECT_EQ(s.base_batch, 32);
  EXPECT_EQ(s.total_work, 3200);  // 100 steps of 32
  EXPECT_EQ(s.remaining_work, 1600);
  // Per (GPUs, batch) the fastest template, at the measured speed; 4 GPUs is
  // over the quota.
  ASSERT_EQ(s.options.size(), 3u);
  EXPECT_EQ(s.options[0].gpus, 1);
  EXPECT_DOUBLE_EQ(s.options[0].throughput, 5);
  EXPECT_EQ(s.options[1].gpus, 2);
  EXPECT_EQ(s.options[1].batch_size, 32);
  EXPECT_DOUBLE_EQ(s.options[1].throughput, 9.5);
  EXPECT_EQ(s.options[2].batch_size, 64);
  EXPECT_EQ(s.current, 1);
}

// A view of three running tasks on one node: a on GPUs 0-1, b on 2-3, c on 4
// (each profiled at 1 and 2 GPUs), and d waiting.
WorldView ThreeRunning() {
  WorldView w;
  w.nodes = {{"n", 8, 80, true, ""}};
  const std::vector<planner::Config> profile = {{"ddp", 1, 1, 0, 10, 1}, {"ddp", 2, 1, 0, 18, 1}};
  for (const char* name : {"a", "b", "c", "d"}) {
    TaskView v;
    v.name = name;
    v.remaining_work = 100;
    v.profile = profile;
    w.tasks.push_back(v);
  }
  w.tasks[0].running = RunningView{1, {{0, 0}, {0, 1}}};
  w.tasks[1].running = RunningView{1, {{0, 2}, {0, 3}}};
  w.tasks[2].running = RunningView{0, {{0, 4}}};
  return w;
}

TEST(StepShareTest, StopsTheShrunkTasksInOrderUntilWithinTheShare) {
  JobShare share;
  share.cap = 3;
  share.decision = 2;
  share.shrinks = {{"c", 1, 0}, {"b", 2, 1}, {"a", 2, 1}};
  ShareStep step = StepShare(share, 8, ThreeRunning(), /*applied_decision=*/1);
  EXPECT_EQ(step.launch_cap, 3);
  // c (1 GPU) and then b (2) stop: the job holds 2 <= 3; a runs on.
  ASSERT_EQ(step.stops.size(), 2u);
  EXPECT_EQ(step.stops[0].task, 2u);
  EXPECT_EQ(step.stops[1].task, 1u);
  EXPECT_EQ(step.stops[0].reason, StopReason::kShare);
  EXPECT_EQ(step.held, 2);
  EXPECT_EQ(step.plan_cap, 3);
  // The same decision again stops nothing: a world applies it once.
  step = StepShare(share, 8, ThreeRunning(), /*applied_decision=*/2);
  EXPECT_TRUE(step.stops.empty());
  EXPECT_EQ(step.held, 5);
  // The plan never cuts under what the job still holds.
  EXPECT_EQ(step.plan_cap, 5);
}

TEST(StepShareTest, ATaskNotRunningAsTheDecisionSawItIsLeftAlone) {
  JobShare share;
  share.cap = 2;
  share.decision = 1;
  // The decision saw c on 2 GPUs and d running: c runs on 1 now, d waits.
  share.shrinks = {{"c", 2, 1}, {"d", 1, 0}, {"a", 2, 0}};
  ShareStep step = StepShare(share, 8, ThreeRunning(), 0);
  ASSERT_EQ(step.stops.size(), 1u);
  EXPECT_EQ(step.stops[0].task, 0u);
  EXPECT_EQ(step.held, 3);
}

TEST(StepShareTest, TheQuotaBoundsBothCapsAndNoRoomIsZero) {
  JobShare share;
  share.cap = 6;
  share.decision = 1;
  WorldView w = ThreeRunning();
  EXPECT_EQ(StepShare(share, 4, w, 0).launch_cap, 4);
  EXPECT_EQ(StepShare(share, -1, w, 0).launch_cap, 6);  // no quota
  // No room at all (a Kueue admission its trials fill): nothing launches, and
  // the plan keeps to what runs, at least the narrowest task's one GPU.
  ShareStep none = StepShare(share, 0, w, 0);
  EXPECT_EQ(none.launch_cap, 0);
  EXPECT_EQ(none.plan_cap, 0);
  for (TaskView& v : w.tasks) v.running.reset();
  EXPECT_EQ(StepShare(share, 4, w, 0).held, 0);
  share.cap = 0;
  EXPECT_EQ(StepShare(share, 4, w, 0).plan_cap, 1);  // the narrowest task's least GPUs
}

TEST(ClusterSharesTest, DemandFromAViewUsesEachTasksOwnBatchAndBudget) {
  WorldView w = ThreeRunning();
  JobDemand d = DemandFromView("sim", 0, w, {16, 16, 16, 16}, {400, 400, 400, 50});
  ASSERT_EQ(d.tasks.size(), 4u);
  EXPECT_EQ(d.tasks[0].base_batch, 16);
  EXPECT_EQ(d.tasks[0].total_work, 400);
  EXPECT_EQ(d.tasks[3].total_work, 100);  // never under what remains
  EXPECT_EQ(d.tasks[0].current, 1);       // 2 GPUs
  EXPECT_EQ(d.tasks[2].current, 0);
  EXPECT_EQ(d.tasks[3].current, -1);
}

// Shares are decided per GPU type: a job whose task runs only on "fast" (2
// GPUs there) gets at most those 2, and the other job, at home on both, 4 of
// the 6 "slow" ones (its options are 1, 2, 4 and 8 GPUs); as one pool of 8 they would split 4 and
// 4, and the first job's share would name GPUs it cannot use. Past kTypedShareWork the pools are
// decided as one (and still decided).
TEST(ClusterSharesTest, SharesAreDecidedPerGpuType) {
  ScaleTask only_fast = Task("t", 1e5, kScales);  // every option in pool 0: fast
  ScaleTask anywhere = Task("t", 1e5, kScales);
  for (const Option& o : kScalesOptions(1)) anywhere.options.push_back(o);
  JobDemand a{"ns/a", 0, {only_fast}, {"fast", "slow"}};
  JobDemand b{"ns/b", 0, {anywhere}, {"fast", "slow"}};
  ClusterShares shares({});
  const std::map<std::string, int> capacity = {{"fast", 2}, {"slow", 6}};
  ASSERT_TRUE(shares.Update(a, capacity, 0).ok());
  auto u = shares.Update(b, capacity, 0);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->shares.at("ns/a").gpus, 2);
  EXPECT_EQ(u->shares.at("ns/b").gpus, 4);  // its widest option that slow's 6 hold
  // The same demands over one pool of 8.
  ClusterShares untyped({});
  ASSERT_TRUE(untyped.Update(a, 8, 0).ok());
  u = untyped.Update(b, 8, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->shares.at("ns/a").gpus, 4);
  // A capacity change of one type is a trigger; too many states: one pool.
  u = shares.Update(b, {{"fast", 2000}, {"slow", 2000}}, 1);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->decided);
  EXPECT_EQ(u->trigger, ScaleTrigger::kCapacityChanged);
  // A pool index the demand does not name, and a negative count, are refused.
  JobDemand bad = a;
  bad.tasks[0].options[0].type = 2;
  auto e = shares.Update(bad, capacity, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("demand.tasks[0].options[0].type"), std::string::npos)
      << e.status().message();
  e = shares.Update(a, {{"fast", -1}}, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("capacity[fast]"), std::string::npos);
}

// With nodes of two types the demand's options are per type: a typed
// configuration in its type's pool, a typeless one in each pool the task may
// use, and a running gang's option in the pool of the node it runs on.
TEST(ClusterSharesTest, DemandFromATypedViewPutsEachOptionInItsPool) {
  WorldView w;
  w.nodes = {{"f", 2, 80, true, "fast"}, {"s", 4, 24, true, "slow"}};
  TaskView v;
  v.name = "t";
  v.remaining_work = 100;
  planner::Config typed{"ddp", 2, 1, 0, 40, 1};
  typed.gpu_type = "fast";
  v.profile = {{"ddp", 1, 1, 0, 10, 1}, typed};
  v.running = RunningView{0, {{1, 0}}};  // the typeless one, on the slow node
  w.tasks.push_back(v);
  JobDemand d = DemandFromView("ns/j", 0, w, {8}, {100});
  EXPECT_EQ(d.pools, (std::vector<std::string>{"fast", "slow"}));
  ASSERT_EQ(d.tasks.size(), 1u);
  std::set<std::tuple<int, int, double>> options;  // (pool, gpus, throughput)
  for (const Option& o : d.tasks[0].options) options.insert({o.type, o.gpus, o.throughput});
  EXPECT_EQ(options, (std::set<std::tuple<int, int, double>>{{0, 1, 10}, {0, 2, 40}, {1, 1, 10}}));
  const Option& current = d.tasks[0].options[static_cast<size_t>(d.tasks[0].current)];
  EXPECT_EQ(current.type, 1);
  EXPECT_EQ(current.gpus, 1);
  // Restricted to fast, the typeless configuration is offered there only.
  w.tasks[0].gpu_types = {"fast"};
  d = DemandFromView("ns/j", 0, w, {8}, {100});
  for (const Option& o : d.tasks[0].options) EXPECT_EQ(o.type, 0);
}

}  // namespace
}  // namespace orrery::engine
