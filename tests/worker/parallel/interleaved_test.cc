// Interleaved multi-model execution (interleaved.h): K spilled tasks sharing
// one device under one budget each equal the same task trained alone under
// spill; a task stopped in the middle resumes alone or in another set; a task
// that ends leaves the others running; the order follows the predicted times.
// With the GPU path and a visible GPU, the same on cuda:0 (side stream, pinned
// host masters, events), against each task alone there and on the CPU.
#include "worker/parallel/interleaved.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/parallel/equivalence.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::LargestLayerBytes;
using testing_worker::RunResult;

constexpr int64_t kBatchRows = 8;

model::ModelConfig Mlp(int64_t seed, int width) {
  model::ModelConfig c = testing_worker::TinyMlp();
  c.mlp = {32, width, 2, 10};
  c.seed = seed;
  return c;
}

InterleavedTask Task(const std::string& name, const model::ModelConfig& mc, int64_t steps,
                     const OptimizerConfig& opt = {}) {
  InterleavedTask t;
  t.name = name;
  t.model = mc;
  t.strategy.name = "spill";
  t.optimizer = opt;
  t.batch = [mc](int64_t step) { return model::SyntheticBatch(mc, kBatchRows, step); };
  t.steps = steps;
  return t;
}

// Every task's shards fit a third of the budget, as spill needs.
int64_t Budget(const std::vector<InterleavedTask>& tasks) {
  int64_t largest = 0;
  for (const auto& t : tasks) largest = std::max(largest, LargestLayerBytes(t.model));
  return 3 * largest;
}

// The task trained alone under spill with the same budget, from `start` (and
// its state) to `steps`.
RunResult Alone(const InterleavedTask& t, int64_t budget, int64_t start = 0,
                const model::NamedTensors& params = {}, const model::NamedTensors& state = {},
                c10::Device device = c10::kCPU) {
  StrategyConfig sc = t.strategy;
  sc.spill_budget_bytes = budget;
  sc.device = device;
  auto s = MakeStrategy(t.model, sc, t.optimizer, nullptr);
  EXPECT_TRUE(s.ok()) << s.status();
  RunResult r;
  if (!s.ok()) return r;
  if (!params.empty()) {
    EXPECT_TRUE((*s)->LoadFullState(params, state).ok());
  }
  for (int64_t step = start; step < t.steps; ++step) {
    auto loss = (*s)->Step(t.batch(step));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return r;
    r.losses.push_back(*loss);
  }
  auto p = (*s)->GatherFullParameters();
  EXPECT_TRUE(p.ok());
  if (p.ok()) r.params = *p;
  return r;
}

RunResult AsRun(const InterleavedResult& r) {
  RunResult out;
  out.losses = r.losses;
  out.params = r.params;
  return out;
}

// Trains `tasks` interleaved on `on` and checks each against itself alone there.
std::vector<InterleavedResult> ExpectEachEqualsAlone(const std::vector<InterleavedTask>& tasks,
                                                     InterleaveOrder order,
                                                     InterleavedStats* stats = nullptr,
                                                     c10::Device on = c10::kCPU) {
  at::set_num_threads(1);
  const int64_t budget = Budget(tasks);
  auto device = InterleavedDevice::Create(on, budget, order);
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return {};
  std::vector<InterleavedResult> results = TrainInterleaved(**device, tasks);
  EXPECT_EQ(results.size(), tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    SCOPED_TRACE("task " + tasks[i].name);
    EXPECT_TRUE(results[i].status.ok()) << results[i].status;
    if (!results[i].status.ok()) continue;
    EXPECT_EQ(results[i].outcome, "completed");
    EXPECT_EQ(results[i].step, tasks[i].steps);
    ExpectEquivalent(Alone(tasks[i], budget, 0, {}, {}, on), {AsRun(results[i])});
  }
  InterleavedStats s = (*device)->stats();
  EXPECT_GT(s.peak_device_bytes, 0);
  EXPECT_LE(s.peak_device_bytes, budget);
  EXPECT_TRUE((*device)->choice().has_value());
  if (stats != nullptr) *stats = s;
  return results;
}

// An MLP recomputed and a GPT (AdamW) keeping its activations: both ways of
// running a shard (the second's parameters are freed after the forward and
// copied in again for the backward).
std::vector<InterleavedTask> MlpAndGpt() {
  OptimizerConfig adam;
  adam.kind = "adamw";
  adam.lr = 1e-3;
  std::vector<InterleavedTask> tasks = {Task("mlp", Mlp(11, 64), 4),
                                        Task("gpt", testing_worker::TinyGpt(), 4, adam)};
  tasks[0].strategy.recompute = "unit";
  tasks[1].strategy.recompute = "none";
  return tasks;
}

TEST(InterleavedTest, TwoTasksEachEqualTrainingAlone) {
  InterleavedStats stats;
  ExpectEachEqualsAlone(MlpAndGpt(), InterleaveOrder::kAuto, &stats);
  // Every visit of every step took a turn: (2 × shards - 1) per step.
  EXPECT_GT(stats.turns, 8);
  EXPECT_GT(stats.busy_s, 0);
}

TEST(InterleavedTest, TwoTasksOnTheGpuEachEqualTrainingAloneThere) {
  if (!testing_worker::GpuVisible()) GTEST_SKIP() << testing_worker::GpuSkipReason();
  const c10::Device gpu(c10::kCUDA, 0);
  const std::vector<InterleavedTask> tasks = MlpAndGpt();
  for (InterleaveOrder order : {InterleaveOrder::kAuto, InterleaveOrder::kRoundRobin}) {
    SCOPED_TRACE(InterleaveOrderName(order));
    InterleavedStats stats;
    std::vector<InterleavedResult> results = ExpectEachEqualsAlone(tasks, order, &stats, gpu);
    EXPECT_GT(stats.busy_s, 0);
    // And the GPU's interleaved run is the CPU's task alone, to float32
    // rounding, for the SGD task. Not for AdamW's: attention's key bias gets a
    // gradient of pure rounding noise (softmax ignores a shift shared by every
    // key), which Adam scales up to a full step of either sign, so the GPU's and
    // the CPU's rounding part its key biases by ~lr (seen on an H200: 6.6e-4).
    for (size_t i = 0; i < results.size(); ++i) {
      if (tasks[i].optimizer.kind == "adamw") continue;
      SCOPED_TRACE("task " + tasks[i].name + " against the CPU");
      ExpectEquivalent(Alone(tasks[i], Budget(tasks)), {AsRun(results[i])}, 1e-4);
    }
  }
}

TEST(InterleavedTest, ThreeTasksRoundRobinEachEqualTrainingAlone) {
  ExpectEachEqualsAlone({Task("a", Mlp(11, 64), 3), Task("b", Mlp(12, 48), 3),
                         Task("c", testing_worker::TinyGpt(), 3)},
                        InterleaveOrder::kRoundRobin);
}

TEST(InterleavedTest, ThreeTasksModelAfterModelEachEqualTrainingAlone) {
  ExpectEachEqualsAlone({Task("a", Mlp(11, 64), 3), Task("b", Mlp(12, 48), 3),
                         Task("c", testing_worker::TinyGpt(), 3)},
                        InterleaveOrder::kModelAfterModel);
}

TEST(InterleavedTest, AFinishedTaskLeavesTheOthersRunning) {
  // "short" ends after 2 steps; the others go on to 5 (and equal themselves
  // alone), in either order.
  for (InterleaveOrder order : {InterleaveOrder::kRoundRobin, InterleaveOrder::kAuto}) {
    SCOPED_TRACE(InterleaveOrderName(order));
    ExpectEachEqualsAlone({Task("short", Mlp(11, 64), 2), Task("long", Mlp(12, 48), 5),
                           Task("gpt", testing_worker::TinyGpt(), 5)},
                          order);
  }
}

TEST(InterleavedTest, AFailedTaskLeavesTheOthersRunning) {
  at::set_num_threads(1);
  std::vector<InterleavedTask> tasks = {Task("broken", Mlp(11, 64), 4),
                                        Task("gpt", testing_worker::TinyGpt(), 4),
                                        Task("mlp", Mlp(12, 48), 4)};
  // Its third step's rows have the wrong width: the step fails mid-schedule.
  const model::ModelConfig mc = tasks[0].model;
  tasks[0].batch = [mc](int64_t step) {
    model::Batch b = model::SyntheticBatch(mc, kBatchRows, step);
    if (step == 2) b.inputs = b.inputs.narrow(1, 0, 5);
    return b;
  };
  const int64_t budget = Budget(tasks);
  auto device = InterleavedDevice::Create(c10::kCPU, budget, InterleaveOrder::kRoundRobin);
  ASSERT_TRUE(device.ok());
  auto results = TrainInterleaved(**device, tasks);
  EXPECT_FALSE(results[0].status.ok());
  EXPECT_EQ(results[0].outcome, "failed");
  EXPECT_EQ(results[0].step, 2);
  for (size_t i = 1; i < tasks.size(); ++i) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status;
    EXPECT_EQ(results[i].step, 4);
    ExpectEquivalent(Alone(tasks[i], budget), {AsRun(results[i])});
  }
  // What the failed step had charged went back to the budget.
  EXPECT_LE((*device)->stats().peak_device_bytes, budget);
}

TEST(InterleavedTest, AStoppedTaskResumesAloneAndInAnotherSet) {
  at::set_num_threads(1);
  std::vector<InterleavedTask> tasks = {Task("stopped", Mlp(11, 64), 6),
                                        Task("other", testing_worker::TinyGpt(), 6)};
  tasks[0].stop = [](int64_t step) { return step == 3; };
  const int64_t budget = Budget(tasks);
  auto device = InterleavedDevice::Create(c10::kCPU, budget, InterleaveOrder::kRoundRobin);
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<InterleavedResult> first = TrainInterleaved(**device, tasks);
  ASSERT_TRUE(first[0].status.ok()) << first[0].status;
  EXPECT_EQ(first[0].outcome, "stopped");
  EXPECT_EQ(first[0].step, 3);
  // The other task ran to its end.
  ASSERT_TRUE(first[1].status.ok()) << first[1].status;
  EXPECT_EQ(first[1].step, 6);
  ExpectEquivalent(Alone(tasks[1], budget), {AsRun(first[1])});

  // The uninterrupted run alone, and its last three steps.
  RunResult whole = Alone(tasks[0], budget);
  RunResult tail = whole;
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
  ASSERT_EQ(first[0].losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) EXPECT_DOUBLE_EQ(first[0].losses[s], whole.losses[s]);

  // Resumed alone from the stopped task's state.
  RunResult alone = Alone(tasks[0], budget, 3, first[0].params, first[0].optimizer_state);
  ExpectEquivalent(tail, {alone});

  // Resumed in another interleaved set, beside a new task.
  InterleavedTask resumed = tasks[0];
  resumed.stop = nullptr;
  resumed.start_step = 3;
  resumed.params = first[0].params;
  resumed.optimizer_state = first[0].optimizer_state;
  auto second_device = InterleavedDevice::Create(c10::kCPU, budget, InterleaveOrder::kAuto);
  ASSERT_TRUE(second_device.ok());
  auto second = TrainInterleaved(**second_device, {resumed, Task("new", Mlp(13, 48), 4)});
  ASSERT_TRUE(second[0].status.ok()) << second[0].status;
  EXPECT_EQ(second[0].step, 6);
  ExpectEquivalent(tail, {AsRun(second[0])});
}

TEST(InterleavedTest, OrderFollowsPredictedRoundTime) {
  // A compute-heavy task beside a copy-heavy one: round robin hides each
  // one's copies behind the other's compute.
  std::vector<std::vector<double>> compute = {{4, 4, 4}, {1, 1, 1}};
  std::vector<std::vector<double>> copy = {{1, 1, 1}, {4, 4, 4}};
  const double rr = PredictRoundSeconds(compute, copy, InterleaveOrder::kRoundRobin);
  const double mam = PredictRoundSeconds(compute, copy, InterleaveOrder::kModelAfterModel);
  EXPECT_LT(rr, mam);
  // Round robin A B A B A B: B's copies (4) hide behind A's compute (4), A's
  // (1) behind B's (1): 3 × (4 + 1) = 15. Model after model: B's computes
  // (1) hide little of its own copies (4): 3 × 4 (A) + 4 + 1 + 4 = 21 (the
  // steady state, worked by hand).
  EXPECT_DOUBLE_EQ(rr, 15);
  EXPECT_DOUBLE_EQ(mam, 21);
  // Two identical tasks: the orders tie.
  std::vector<std::vector<double>> same = {{2, 2}, {2, 2}};
  EXPECT_DOUBLE_EQ(PredictRoundSeconds(same, same, InterleaveOrder::kRoundRobin),
                   PredictRoundSeconds(same, same, InterleaveOrder::kModelAfterModel));

  InterleaveChoice c;
  c.order = InterleaveOrder::kRoundRobin;
  c.tasks = {"a", "b"};
  c.round_robin_s = rr;
  c.model_after_model_s = mam;
  const std::string json = c.ToJson();
  EXPECT_NE(json.find("\"event\":\"interleave\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"order\":\"round_robin\""), std::string::npos) << json;
}

TEST(InterleavedTest, OnlySpillTasksJoin) {
  auto device = InterleavedDevice::Create(c10::kCPU, 1 << 20);
  ASSERT_TRUE(device.ok());
  StrategyConfig sc;
  sc.name = "fsdp";
  auto s = (*device)->Join("t", testing_worker::TinyMlp(), sc, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("set its template to spill"), std::string::npos);
  EXPECT_FALSE(InterleavedDevice::Create(c10::kCPU, 0).ok());
}

}  // namespace
}  // namespace orrery::parallel
