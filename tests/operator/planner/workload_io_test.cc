#include "operator/planner/workload_io.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace orrery::planner {
namespace {

constexpr const char* kGood = R"(
name: tiny
cluster: {nodes: 2, gpusPerNode: 4, gpuMemoryGiB: 40}
tasks:
  - name: a
    work: 1000
    arrival: 5
    weight: 2
    trueSpeed: 0.8
    profiles:
      - {template: ddp, gpus: 1, batchSize: 8, throughput: 10, memoryGiB: 20}
      - {template: fsdp, gpus: 8, batchSize: 64, throughput: 60, memoryGiB: 8}
  - name: b
    work: 500
    profiles:
      - {template: spill, gpus: 2, batchSize: 8, throughput: 3, memoryGiB: 30}
events:
  - {type: nodeLost, time: 100, node: 1}
  - {type: nodeJoined, time: 200}
otherJobs:
  - name: rival
    arrival: 50
    leave: 400
    gpuQuota: 4
    tasks:
      - name: r
        work: 900
        profiles:
          - {template: ddp, gpus: 1, batchSize: 8, throughput: 10, memoryGiB: 20}
)";

TEST(WorkloadIoTest, ParsesEveryField) {
  auto w = ParseWorkload(kGood);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->name, "tiny");
  ASSERT_EQ(w->problem.nodes.size(), 2u);
  EXPECT_EQ(w->problem.TotalGpus(), 8);
  ASSERT_EQ(w->problem.tasks.size(), 2u);
  const Task& a = w->problem.tasks[0];
  EXPECT_DOUBLE_EQ(a.arrival, 5);
  EXPECT_DOUBLE_EQ(a.weight, 2);
  EXPECT_EQ(a.configs[1].nodes, 2);  // 8 GPUs on 4-GPU nodes
  EXPECT_EQ(a.configs[0].nodes, 1);
  EXPECT_DOUBLE_EQ(w->true_speed[0], 0.8);
  EXPECT_DOUBLE_EQ(w->true_speed[1], 1.0);
  ASSERT_EQ(w->events.size(), 2u);
  EXPECT_EQ(w->events[0].kind, ClusterEvent::Kind::kNodeLost);
  EXPECT_EQ(w->events[0].node, 1);
  EXPECT_EQ(w->events[1].kind, ClusterEvent::Kind::kNodeJoined);
  ASSERT_EQ(w->other_jobs.size(), 1u);
  const OtherJob& rival = w->other_jobs[0];
  EXPECT_EQ(rival.name, "rival");
  EXPECT_DOUBLE_EQ(rival.arrival, 50);
  EXPECT_DOUBLE_EQ(rival.leave, 400);
  EXPECT_EQ(rival.quota, 4);
  ASSERT_EQ(rival.tasks.size(), 1u);
  EXPECT_EQ(rival.tasks[0].configs[0].throughput, 10);
}

TEST(WorkloadIoTest, RoundTripsThroughFormat) {
  auto w = ParseWorkload(kGood);
  ASSERT_TRUE(w.ok());
  auto again = ParseWorkload(FormatWorkload(*w));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << FormatWorkload(*w);
  EXPECT_EQ(FormatWorkload(*again), FormatWorkload(*w));
  EXPECT_DOUBLE_EQ(again->problem.tasks[0].configs[1].throughput, 60);
  EXPECT_EQ(again->events.size(), 2u);
  EXPECT_EQ(again->other_jobs.size(), 1u);
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(WorkloadIoTest, ErrorsNameTheFieldPath) {
  struct Case {
    std::string from, to, error;
  };
  std::vector<Case> cases = {
      {"throughput: 3", "throughput: 0", "tasks[1].profiles[0].throughput: must be positive"},
      {"work: 500", "work: -1", "tasks[1].work: must be positive"},
      {"gpusPerNode: 4", "gpusPerNode: 0", "cluster.gpusPerNode: must be positive"},
      {"template: spill", "template: magic", "tasks[1].profiles[0].template"},
      {"template: spill, gpus: 2", "template: spill, gpus: 8",
       "tasks[1].profiles[0].gpus: template spill cannot span nodes"},
      {"type: nodeJoined", "type: reboot", "events[1].type"},
      {"node: 1", "node: 7", "events[0].node: no such node"},
      {"name: b", "name: a", "tasks[1].name: duplicate"},
      {"batchSize: 64,", "", "tasks[0].profiles[1].batchSize: required"},
      {"work: 500", "work: lots", "tasks[1].work: wrong type"},
      {"name: rival", "name: tiny", "otherJobs[0].name: must be non-empty and not the workload's"},
      {"work: 900", "work: 0", "otherJobs[0].tasks[0].work: must be positive"},
      {"gpuQuota: 4", "gpuQuota: -1", "otherJobs[0].gpuQuota: must not be negative"},
  };
  for (const Case& c : cases) {
    auto w = ParseWorkload(Replace(kGood, c.from, c.to));
    ASSERT_FALSE(w.ok()) << c.error;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find(c.error), std::string::npos)
        << w.status() << " wanted " << c.error;
  }
  EXPECT_FALSE(ParseWorkload("tasks: [").ok());
}

TEST(WorkloadIoTest, ShippedWorkloadsParseAndFit) {
  namespace fs = std::filesystem;
  int count = 0;
  for (const auto& e :
       fs::directory_iterator(std::string(ORRERY_SOURCE_DIR) + "/bench/workloads")) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    auto w = ParseWorkload(text.str());
    ASSERT_TRUE(w.ok()) << e.path() << ": " << w.status();
    EXPECT_TRUE(ValidateProblem(w->problem).ok()) << e.path();
    ++count;
  }
  EXPECT_GE(count, 8);
}

}  // namespace
}  // namespace orrery::planner
