// The elastic allocator is exact for its objective: on small random cases its
// value equals a brute force over every combination of options; its choices
// respect capacity; and its tie-breaking makes it deterministic.
#include "operator/planner/elastic/allocator.h"

#include <cmath>
#include <cstdint>
#include <functional>

#include <gtest/gtest.h>

#include "common/random.h"

namespace orrery::planner::elastic {
namespace {

using Rng = SplitMix64;  // common/random.h

double BruteForce(const std::vector<ElasticTask>& tasks, int capacity, Value value) {
  double best = 0;
  std::function<void(size_t, int, double)> go = [&](size_t i, int used, double v) {
    if (i == tasks.size()) {
      best = std::max(best, v);
      return;
    }
    go(i + 1, used, v);  // queued
    for (const Option& o : tasks[i].options) {
      if (used + o.gpus <= capacity) go(i + 1, used + o.gpus, v + OptionValue(tasks[i], o, value));
    }
  };
  go(0, 0, 0);
  return best;
}

std::vector<ElasticTask> RandomTasks(Rng& rng, int n) {
  std::vector<ElasticTask> tasks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ElasticTask& t = tasks[static_cast<size_t>(i)];
    t.name = "t" + std::to_string(i);
    t.total_work = 1000 + rng.Between(0, 100000);
    t.remaining_work = t.total_work * (0.1 + 0.9 * rng.Uniform01());
    t.weight = 1 + rng.Between(0, 2);
    const double base = 50 + 200 * rng.Uniform01();
    const double efficiency = 0.5 + 0.5 * rng.Uniform01();  // per doubling
    for (int g = 1; g <= 8; g *= 2) {
      for (int b = 32; b <= 256; b *= 2) {
        if (b % g != 0) continue;
        // Throughput grows with GPUs by the task's efficiency and with batch size
        // sub-linearly, as profiles do.
        const double t_gb = base * std::pow(g, std::log2(1 + efficiency)) * std::pow(b / 32.0, 0.3);
        t.options.push_back({g, b, t_gb});
      }
    }
  }
  return tasks;
}

TEST(ElasticAllocatorTest, MatchesBruteForceOnRandomSmallCases) {
  Rng rng{42};
  for (int trial = 0; trial < 60; ++trial) {
    const int n = rng.Between(1, 4);
    const int capacity = rng.Between(0, 12);
    const auto tasks = RandomTasks(rng, n);
    for (Value v : {Value::kNormalizedThroughput, Value::kRemainingFraction}) {
      auto got = Allocate(tasks, capacity, v);
      ASSERT_TRUE(got.ok()) << got.status();
      const double want = BruteForce(tasks, capacity, v);
      EXPECT_NEAR(got->value, want, 1e-9 * std::max(1.0, want)) << "trial " << trial;
      // The reported value and GPUs are those of the reported choice.
      double value = 0;
      int gpus = 0;
      for (size_t i = 0; i < tasks.size(); ++i) {
        const int c = got->choice[i];
        if (c < 0) continue;
        gpus += tasks[i].options[static_cast<size_t>(c)].gpus;
        value += OptionValue(tasks[i], tasks[i].options[static_cast<size_t>(c)], v);
      }
      EXPECT_EQ(gpus, got->gpus_used);
      EXPECT_LE(gpus, capacity);
      EXPECT_NEAR(value, got->value, 1e-9 * std::max(1.0, value));
    }
  }
}

// Brute force over explicit values, task `held` fixed to option `to` (-2: free).
double BruteForceValues(const std::vector<ElasticTask>& tasks,
                        const std::vector<std::vector<double>>& values, int capacity, size_t held,
                        int to) {
  double best = -1e300;
  std::function<void(size_t, int, double)> go = [&](size_t i, int used, double v) {
    if (i == tasks.size()) {
      best = std::max(best, v);
      return;
    }
    if (i != held || to == -1) go(i + 1, used, v);  // queued
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      if (i == held && to != -2 && static_cast<int>(j) != to) continue;
      const int g = tasks[i].options[j].gpus;
      if (used + g <= capacity) go(i + 1, used + g, v + values[i][j]);
    }
  };
  go(0, 0, 0);
  return best;
}

TEST(ElasticAllocatorTest, KnapsackProbesMatchBruteForce) {
  // The autoscaler's per-task gains: the best total with one task held to one
  // option, read off the prefix and suffix tables, against a brute force. Values
  // may be negative (a change charged more than it gains).
  Rng rng{7};
  for (int trial = 0; trial < 60; ++trial) {
    const int n = rng.Between(1, 5);
    const int capacity = rng.Between(0, 14);
    const auto tasks = RandomTasks(rng, n);
    std::vector<std::vector<double>> values(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i)
      for (size_t j = 0; j < tasks[i].options.size(); ++j)
        values[i].push_back(rng.Uniform01() * 10 - 2);
    auto k = Knapsack::Solve(tasks, values, capacity);
    ASSERT_TRUE(k.ok()) << k.status();
    const double want = BruteForceValues(tasks, values, capacity, tasks.size(), -2);
    EXPECT_NEAR(k->allocation().value, want, 1e-9 * std::max(1.0, want)) << "trial " << trial;
    for (size_t i = 0; i < tasks.size(); ++i) {
      for (int j = -1; j < static_cast<int>(tasks[i].options.size()); ++j) {
        const double got = k->BestWith(i, j);
        const double brute = BruteForceValues(tasks, values, capacity, i, j);
        const std::vector<int> plan = k->PlanWith(i, j);
        if (brute < -1e299) {
          EXPECT_TRUE(std::isinf(got) && got < 0) << "trial " << trial << " task " << i;
          EXPECT_TRUE(plan.empty());
        } else {
          EXPECT_NEAR(got, brute, 1e-9 * std::max(1.0, std::abs(brute)))
              << "trial " << trial << " task " << i << " option " << j;
          // The plan behind it holds task i at j, fits, and is worth exactly that.
          ASSERT_EQ(plan.size(), tasks.size());
          EXPECT_EQ(plan[i], j);
          int used = 0;
          double worth = 0;
          for (size_t t = 0; t < tasks.size(); ++t) {
            if (plan[t] < 0) continue;
            used += tasks[t].options[static_cast<size_t>(plan[t])].gpus;
            worth += values[t][static_cast<size_t>(plan[t])];
          }
          EXPECT_LE(used, capacity);
          EXPECT_NEAR(worth, brute, 1e-9 * std::max(1.0, std::abs(brute)))
              << "trial " << trial << " task " << i << " option " << j;
        }
      }
    }
  }
}

TEST(ElasticAllocatorTest, LargerBatchWinsWhenFixedBatchScalesPoorly) {
  // One task, 8 GPUs. At batch 32 it barely scales (communication-bound); at
  // batch 256 on 8 GPUs it is far faster. The allocator takes GPUs and batch
  // together, which a fixed-batch policy cannot.
  ElasticTask t{"a", 1e6, 1e6, 1, {}, -1};
  t.options = {{1, 32, 100}, {8, 32, 130}, {8, 256, 600}};
  auto got = Allocate({t}, 8);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->choice[0], 2);
}

TEST(ElasticAllocatorTest, ScarceGpusGoToTheTaskThatScalesBest) {
  ElasticTask good{"good", 1000, 1000, 1, {{1, 32, 100}, {4, 128, 390}}, -1};
  ElasticTask poor{"poor", 1000, 1000, 1, {{1, 32, 100}, {4, 128, 140}}, -1};
  auto got = Allocate({good, poor}, 5);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->choice[0], 1);  // 4 GPUs to the task that turns them into work
  EXPECT_EQ(got->choice[1], 0);
  EXPECT_EQ(got->gpus_used, 5);
}

TEST(ElasticAllocatorTest, QueuesWhatDoesNotFitAndIsDeterministic) {
  Rng rng{7};
  auto tasks = RandomTasks(rng, 40);
  auto a = Allocate(tasks, 16);
  auto b = Allocate(tasks, 16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->choice, b->choice);
  int queued = 0;
  for (int c : a->choice) queued += c < 0 ? 1 : 0;
  EXPECT_GE(queued, 40 - 16);  // each running task holds at least one GPU
}

TEST(ElasticAllocatorTest, RejectsBadInputWithFieldPath) {
  ElasticTask t{"a", 10, 10, 1, {{0, 32, 1}}, -1};
  auto got = Allocate({t}, 4);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "tasks[0].options[0].gpus: must be at least 1");
  EXPECT_FALSE(Allocate({}, -1).ok());
  auto empty = Allocate({}, 8);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->choice.empty());
}

TEST(ElasticAllocatorTest, BuildOptionsKeepsBatchWithinBoundsAndMemory) {
  auto options =
      BuildOptions({1, 2, 4}, 32, 128, 64, 32, [](int g, int b) { return g * 10.0 + b; });
  for (const Option& o : options) {
    EXPECT_EQ(o.batch_size % o.gpus, 0);
    EXPECT_LE(o.batch_size / o.gpus, 64);
    EXPECT_GE(o.batch_size, 32);
    EXPECT_LE(o.batch_size, 128);
  }
  // 1 GPU: 32, 64 (96 and 128 exceed 64 per GPU); 2 GPUs: 32..128; 4 GPUs: 32..128.
  EXPECT_EQ(options.size(), 2u + 4u + 4u);
}

// Typed pools: random tasks whose options span 2 or 3 pools with their own
// speeds; some tasks do not fit a pool at all (memory), some fit only one.
std::vector<ElasticTask> RandomTypedTasks(Rng& rng, int n, size_t pools) {
  std::vector<ElasticTask> tasks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ElasticTask& t = tasks[static_cast<size_t>(i)];
    t.name = "t" + std::to_string(i);
    t.total_work = 1000 + rng.Between(0, 100000);
    t.remaining_work = t.total_work * (0.1 + 0.9 * rng.Uniform01());
    for (size_t p = 0; p < pools; ++p) {
      if (rng.Between(0, 3) == 0) continue;  // does not fit this type's memory
      const double speed = 0.3 + rng.Uniform01();
      for (int g = 1; g <= 4; g *= 2)
        for (int b = 32; b <= 128; b *= 2)
          t.options.push_back(
              {g, b,
               speed * 40 * std::pow(g, 0.4 + 0.5 * rng.Uniform01()) * std::pow(b / 32.0, 0.2),
               static_cast<int>(p)});
    }
  }
  return tasks;
}

// The typed DP equals the exhaustive per-event optimum (an independent search
// over every combination), never spans a pool's capacity, and its probes
// (BestWith, PlanWith) equal the exhaustive optimum with one task held.
TEST(ElasticAllocatorTest, TypedDpMatchesExhaustiveOptimum) {
  Rng rng{7};
  for (int trial = 0; trial < 60; ++trial) {
    const size_t pools = 2 + static_cast<size_t>(trial % 2);
    const int n = rng.Between(1, 4);
    std::vector<ElasticTask> tasks = RandomTypedTasks(rng, n, pools);
    Capacity cap;
    for (size_t p = 0; p < pools; ++p) cap.push_back(rng.Between(0, 6));
    std::vector<std::vector<double>> values(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i)
      for (const Option& o : tasks[i].options)
        values[i].push_back(OptionValue(tasks[i], o, Value::kRemainingFraction));
    auto exact = Exhaustive(tasks, values, cap);
    ASSERT_TRUE(exact.ok()) << exact.status();
    auto k = Knapsack::Solve(tasks, values, cap, true);
    ASSERT_TRUE(k.ok()) << k.status();
    const Allocation& a = k->allocation();
    EXPECT_NEAR(a.value, exact->value, 1e-9 * std::max(1.0, exact->value)) << "trial " << trial;
    Capacity used(pools, 0);
    double sum = 0;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (a.choice[i] < 0) continue;
      const Option& o = tasks[i].options[static_cast<size_t>(a.choice[i])];
      used[static_cast<size_t>(o.type)] += o.gpus;
      sum += values[i][static_cast<size_t>(a.choice[i])];
    }
    EXPECT_NEAR(sum, a.value, 1e-9);
    for (size_t p = 0; p < pools; ++p) EXPECT_LE(used[p], cap[p]) << "pool " << p;
    for (size_t i = 0; i < tasks.size(); ++i)
      for (int j = -1; j < static_cast<int>(tasks[i].options.size()); ++j) {
        // Task i held to option j: the exhaustive search over the others.
        std::vector<ElasticTask> held = tasks;
        std::vector<std::vector<double>> held_values = values;
        Capacity left = cap;
        double base = 0;
        if (j >= 0) {
          const Option& o = tasks[i].options[static_cast<size_t>(j)];
          if (!Fits(o, cap)) {
            EXPECT_TRUE(std::isinf(k->BestWith(i, j)));
            EXPECT_TRUE(k->PlanWith(i, j).empty());
            continue;
          }
          left[static_cast<size_t>(o.type)] -= o.gpus;
          base = values[i][static_cast<size_t>(j)];
        }
        held[i].options.clear();
        held_values[i].clear();
        auto rest = Exhaustive(held, held_values, left);
        ASSERT_TRUE(rest.ok());
        EXPECT_NEAR(k->BestWith(i, j), base + rest->value, 1e-9 * std::max(1.0, rest->value));
        const std::vector<int> plan = k->PlanWith(i, j);
        ASSERT_EQ(plan.size(), tasks.size());
        EXPECT_EQ(plan[i], j);
        double got = 0;
        Capacity u(pools, 0);
        for (size_t m = 0; m < tasks.size(); ++m) {
          if (plan[m] < 0) continue;
          const Option& o = tasks[m].options[static_cast<size_t>(plan[m])];
          u[static_cast<size_t>(o.type)] += o.gpus;
          got += values[m][static_cast<size_t>(plan[m])];
        }
        for (size_t p = 0; p < pools; ++p) EXPECT_LE(u[p], cap[p]);
        EXPECT_NEAR(got, base + rest->value, 1e-9 * std::max(1.0, rest->value));
      }
  }
}

// A memory-bound task that only has options on the large pool gets it; a task
// as fast on the small pool takes that one, so both run; counting GPUs alone
// (one pool of the same total) would not tell them apart.
TEST(ElasticAllocatorTest, TypesMatchTasksToPools) {
  ElasticTask big{"big", 1000, 1000, 1, {{4, 64, 100, 0}}, -1};
  ElasticTask small{"small", 1000, 1000, 1, {{4, 64, 90, 0}, {4, 64, 90, 1}}, -1};
  auto a = Allocate({small, big}, Capacity{4, 4}, Value::kRemainingFraction);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->choice[1], 0);
  EXPECT_EQ(a->choice[0], 1);  // the small pool
  EXPECT_EQ(a->gpus_used, 8);
}

TEST(ElasticAllocatorTest, TypedInputErrorsNameTheField) {
  ElasticTask t{"a", 10, 10, 1, {{1, 32, 1, 2}}, -1};
  auto got = Allocate({t}, Capacity{4, 4});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "tasks[0].options[0].type: must name a pool, 0 to 1");
  auto neg = Allocate({}, Capacity{4, -1});
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "capacity[1]: must be at least 0");
  auto huge = Allocate({}, Capacity{4000, 4000});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("states across pools exceed"), std::string::npos);
  std::vector<ElasticTask> many(30,
                                ElasticTask{"x", 10, 10, 1, {{1, 32, 1, 0}, {2, 32, 1, 0}}, -1});
  std::vector<std::vector<double>> v(30, {1.0, 1.0});
  EXPECT_EQ(Exhaustive(many, v, Capacity{4}).status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace orrery::planner::elastic
