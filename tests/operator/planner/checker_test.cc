#include "operator/planner/checker.h"

#include <gtest/gtest.h>

#include "tests/operator/planner/testing_problems.h"

namespace orrery::planner {
namespace {
using testing::Cfg;
using testing::Cluster;
using testing::MakeTask;

class CheckerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = Cluster(2, 2, 40);
    p_.tasks.push_back(MakeTask("a", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 2, 20)}));
    p_.tasks.push_back(MakeTask("b", 100, {Cfg("ddp", 1, 10), Cfg("fsdp", 4, 40, 10, 2)}, 5));
    plan_.assignments = {{1, {{0, 0}, {0, 1}}, 0, 5}, {0, {{0, 0}}, 5, 15}};
  }
  std::string Error() { return CheckPlan(p_, plan_).message(); }
  Problem p_;
  Plan plan_;
};

TEST_F(CheckerTest, AcceptsValidPlan) { EXPECT_TRUE(CheckPlan(p_, plan_).ok()) << Error(); }

TEST_F(CheckerTest, RejectsGpuUsedTwiceAtOnce) {
  p_.tasks[1].arrival = 0;
  plan_.assignments[1].start = 4;
  plan_.assignments[1].end = 14;
  EXPECT_NE(Error().find("used by two tasks at once"), std::string::npos) << Error();
}

TEST_F(CheckerTest, RejectsStartBeforeArrival) {
  plan_.assignments[1] = {0, {{1, 0}}, 1, 11};
  EXPECT_NE(Error().find("before it arrives"), std::string::npos) << Error();
}

TEST_F(CheckerTest, RejectsEndingBeforeWorkIsDone) {
  plan_.assignments[1].end = 14;
  EXPECT_NE(Error().find("ends before"), std::string::npos) << Error();
}

TEST_F(CheckerTest, RejectsWrongGpuCount) {
  plan_.assignments[0].gpus = {{0, 0}};
  EXPECT_NE(Error().find("configuration names 2"), std::string::npos) << Error();
}

TEST_F(CheckerTest, RejectsSingleNodeConfigAcrossNodes) {
  plan_.assignments[0].gpus = {{0, 1}, {1, 0}};
  EXPECT_NE(Error().find("spans 2 nodes"), std::string::npos) << Error();
}

TEST_F(CheckerTest, AcceptsMultiNodeConfigSplitEvenly) {
  plan_.assignments[1] = {1, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}, 5, 7.5};
  EXPECT_TRUE(CheckPlan(p_, plan_).ok()) << Error();
  plan_.assignments[1].gpus = {{0, 0}, {0, 1}, {1, 0}, {1, 0}};
  EXPECT_FALSE(CheckPlan(p_, plan_).ok());
}

TEST_F(CheckerTest, RejectsMissingGpuAndMemory) {
  plan_.assignments[1] = {0, {{1, 2}}, 5, 15};
  EXPECT_NE(Error().find("does not exist"), std::string::npos) << Error();
  p_.tasks[1].configs[0].memory_gib = 41;
  plan_.assignments[1] = {0, {{1, 0}}, 5, 15};
  EXPECT_NE(Error().find("GPU memory"), std::string::npos) << Error();
}

TEST_F(CheckerTest, ChargesSwitchCostWhenARunningTaskMoves) {
  p_.tasks[0].running = RunningState{1, {{0, 0}, {0, 1}}, 3};
  EXPECT_TRUE(CheckPlan(p_, plan_).ok()) << Error();  // stays: free
  plan_.assignments[0].gpus = {{1, 0}, {1, 1}};
  EXPECT_NE(Error().find("ends before"), std::string::npos) << Error();
  plan_.assignments[0].end = 8;
  EXPECT_TRUE(CheckPlan(p_, plan_).ok()) << Error();
}

}  // namespace
}  // namespace orrery::planner
