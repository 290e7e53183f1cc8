#include "operator/sim/simulate_command.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/operator/sim/shared_cluster_workload.h"

namespace orrery::sim {
namespace {

namespace fs = std::filesystem;

class SimulateCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    dir_ = fs::path(tmp ? tmp : "/tmp") / ("orrery_simcmd_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream((dir_ / name).string()) << text;
    return (dir_ / name).string();
  }
  int Run(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    return SimulateCommand(args, out_, err_);
  }
  fs::path dir_;
  std::ostringstream out_, err_;
};

constexpr const char* kWorkload = R"(
name: cmd
cluster: {nodes: 1, gpusPerNode: 2, gpuMemoryGiB: 40}
tasks:
  - {name: a, work: 100, trueSpeed: 1.2, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10}]}
  - {name: b, work: 50, profiles: [{template: ddp, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 10}]}
)";

TEST_F(SimulateCommandTest, PrintsTableAndWritesJsonAndSvg) {
  std::string path = Write("w.yaml", kWorkload);
  std::string json = (dir_ / "r.json").string(), svg = (dir_ / "g.svg").string();
  ASSERT_EQ(Run({path, "--policy", "greedy", "--seed", "2", "--json", json, "--svg", svg}), 0)
      << err_.str();
  EXPECT_NE(out_.str().find("policy greedy"), std::string::npos);
  EXPECT_TRUE(fs::exists(json));
  EXPECT_TRUE(fs::exists(svg));
  ASSERT_EQ(Run({path, "--policy", "orrery-static", "--json", "-"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("orrery-static"), std::string::npos);
  EXPECT_NE(out_.str().find("\"intervals\""), std::string::npos);
}

// A workload on a cluster it shares with another job (otherJobs): the table
// and the JSON say how often the cluster share stopped one of its tasks.
TEST_F(SimulateCommandTest, AWorkloadSharingTheClusterSaysWhatTheShareStopped) {
  std::string path = Write("shared.yaml", testing::kSharedClusterWorkload);
  // A switch of 5 s: taking a GPU from a task that a second GPU speeds up by
  // 20% pays (at the default 120 s the share leaves the running tasks alone).
  ASSERT_EQ(Run({path, "--switch-cost", "5", "--json", "-"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("\"shareStops\": 1"), std::string::npos) << out_.str().substr(0, 600);
  ASSERT_EQ(Run({path, "--switch-cost", "5"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("share stops         1"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({path}), 0) << err_.str();
  EXPECT_NE(out_.str().find("share stops         0"), std::string::npos) << out_.str();
  // A bad other job is named by its field path.
  std::string bad = Write("bad.yaml", R"(
cluster: {nodes: 1, gpusPerNode: 4, gpuMemoryGiB: 40}
tasks:
  - {name: a, work: 10, profiles: [{template: ddp, gpus: 1, batchSize: 16, throughput: 1, memoryGiB: 1}]}
otherJobs:
  - {name: theirs, leave: .inf, tasks: []}
)");
  EXPECT_NE(Run({bad}), 0);
  EXPECT_NE(err_.str().find("otherJobs[0].leave"), std::string::npos) << err_.str();
}

// The re-planning budget's flags, and every re-plan's trigger, solver time
// and gap in the output (table, --replans lines, JSON).
TEST_F(SimulateCommandTest, ReportsEveryReplanWithCoalescingAndWarmStarts) {
  std::string path = Write("w.yaml", kWorkload);
  ASSERT_EQ(Run({path, "--coalesce-window", "60", "--warm-start", "--replans", "--json", "-"}), 0)
      << err_.str();
  const std::string out = out_.str();
  EXPECT_NE(out.find("re-plans by trigger"), std::string::npos) << out;
  EXPECT_NE(out.find("start"), std::string::npos);
  EXPECT_NE(out.find("re-plans: time[h] trigger solver[s] gap"), std::string::npos) << out;
  EXPECT_NE(out.find("\"replanLog\""), std::string::npos);
  EXPECT_NE(out.find("\"solverSeconds\""), std::string::npos);
  EXPECT_NE(out.find("\"gap\""), std::string::npos);
  EXPECT_EQ(Run({path, "--coalesce-window", "-5"}), 2);
  EXPECT_NE(err_.str().find("--coalesce-window"), std::string::npos);
}

TEST_F(SimulateCommandTest, ReportsBadInput) {
  EXPECT_EQ(Run({}), 2);
  EXPECT_EQ(Run({"x.yaml", "--bogus"}), 2);
  EXPECT_EQ(Run({(dir_ / "missing.yaml").string()}), 1);
  std::string bad = Write(
      "bad.yaml", std::string(kWorkload).replace(
                      std::string(kWorkload).find("throughput: 1, memoryGiB: 10}]}\n  - {name: b"),
                      13, "throughput: 0"));
  EXPECT_EQ(Run({bad}), 1);
  EXPECT_NE(err_.str().find("tasks[0].profiles[0].throughput: must be positive"), std::string::npos)
      << err_.str();
  std::string good = Write("good.yaml", kWorkload);
  EXPECT_EQ(Run({good, "--policy", "gurobi"}), 2);
}

// Four tasks that fit only spilled (ddp needs 90 GiB of 40), an hour each
// alone, on two GPUs: `orrery run`'s interleaved gangs are on by default.
constexpr const char* kSpilled = R"(
name: spilled
cluster: {nodes: 1, gpusPerNode: 2, gpuMemoryGiB: 40}
tasks:
  - {name: a, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30}, {template: ddp, gpus: 1, batchSize: 8, throughput: 3, memoryGiB: 90}]}
  - {name: b, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30}]}
  - {name: c, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30}]}
  - {name: d, work: 3600, profiles: [{template: spill, gpus: 1, batchSize: 8, throughput: 1, memoryGiB: 30}]}
)";

TEST_F(SimulateCommandTest, InterleavedGangsByDefaultAndTheirFlags) {
  std::string path = Write("spilled.yaml", kSpilled);
  std::string svg = (dir_ / "g.svg").string();
  ASSERT_EQ(Run({path, "--json", "-", "--svg", svg}), 0) << err_.str();
  EXPECT_NE(out_.str().find("interleaved gangs   2"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("\"gang\": \"a+b\""), std::string::npos) << out_.str();
  std::stringstream chart;
  chart << std::ifstream(svg).rdbuf();
  EXPECT_NE(chart.str().find("interleaved gang "), std::string::npos);
  // 1.5x: two hours of a gang's work in 4800 s (1.33 h) against 2 h alone.
  ASSERT_EQ(Run({path, "--interleave-speedup", "1.5"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("makespan            1.33 h"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({path, "--no-interleave"}), 0) << err_.str();
  EXPECT_EQ(out_.str().find("interleaved gangs"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("makespan            2.00 h"), std::string::npos) << out_.str();
  for (const char* bad : {"0", "-1", "fast", "1.5x"}) {
    EXPECT_EQ(Run({path, "--interleave-speedup", bad}), 2) << bad;
    EXPECT_NE(err_.str().find("--interleave-speedup: must be a number > 0"), std::string::npos)
        << err_.str();
  }
}

constexpr const char* kElasticTrace = R"(
name: cmd-elastic
cluster: {nodes: 1, gpusPerNode: 4}
horizonS: 3600
rescaleCostS: 30
kinds:
  - {name: cnn, computeSPerSample: 0.003, overheadS: 0.02, gradientMB: 100,
     maxBatchPerGpu: 128, minBatch: 64, maxBatch: 512, baseBatch: 128, work: 5.0e5}
jobs:
  - {kind: cnn, arrival: 0}
  - {kind: cnn, arrival: 100}
)";

TEST_F(SimulateCommandTest, ElasticTraceUnderEveryPolicy) {
  const std::string trace = Write("e.yaml", kElasticTrace);
  ASSERT_EQ(Run({"--elastic", trace}), 0) << err_.str();
  for (const char* p : {"elastic ", "gpu-only ", "static "})
    EXPECT_NE(out_.str().find(p), std::string::npos) << out_.str();
  ASSERT_EQ(Run({"--elastic", trace, "--policy", "elastic", "--decisions", "-"}), 0) << err_.str();
  EXPECT_EQ(out_.str().find("gpu-only "), std::string::npos);
  EXPECT_NE(out_.str().find("elastic t=0 arrival cnn-job-0 start 0x0 -> "), std::string::npos)
      << out_.str();
  const std::string csv =
      Write("jobs.csv", "arrival,kind,work,minBatch,maxBatch\n50,cnn,1e5,64,256\n");
  ASSERT_EQ(Run({"--elastic", trace, "--jobs-csv", csv, "--policy", "static"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("3 jobs"), std::string::npos) << out_.str();
}

// A trace with GPU types: the pools are listed, every policy (optimum
// included) runs, and the decisions name each job's pool.
TEST_F(SimulateCommandTest, ElasticTraceWithGpuTypes) {
  std::string typed = kElasticTrace;
  typed.replace(
      typed.find("cluster: {nodes: 1, gpusPerNode: 4}"), 35,
      "cluster:\n  pools:\n    - {gpuType: l4, nodes: 1, gpusPerNode: 4, speed: 0.3, "
      "gpuMemoryGiB: 24}\n    - {gpuType: a100, nodes: 1, gpusPerNode: 4, gpuMemoryGiB: 80}");
  const std::string trace = Write("typed.yaml", typed);
  ASSERT_EQ(Run({"--elastic", trace, "--decisions", "-"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("pools: l4 4 GPUs (speed 0.3, 24 GiB) a100 4 GPUs (speed 1, 80 GiB)"),
            std::string::npos)
      << out_.str();
  for (const char* p : {"elastic ", "gpu-only ", "static ", "optimum "})
    EXPECT_NE(out_.str().find(p), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("elastic t=0 arrival cnn-job-0 start 0x0 -> 4x512@a100"),
            std::string::npos)
      << out_.str();
  const std::string bad = Write("bad-typed.yaml", typed + "capacity:\n  - {time: 10, gpus: 0}\n");
  EXPECT_EQ(Run({"--elastic", bad}), 1);
  EXPECT_NE(err_.str().find("capacity[0].pool: required: the cluster has several pools"),
            std::string::npos)
      << err_.str();
}

TEST_F(SimulateCommandTest, ElasticErrors) {
  const std::string trace = Write("e.yaml", kElasticTrace);
  EXPECT_EQ(Run({"--elastic", trace, "--policy", "fastest"}), 2);
  EXPECT_EQ(Run({"--elastic"}), 2);
  EXPECT_EQ(Run({"--elastic", (dir_ / "missing.yaml").string()}), 1);
  const std::string bad =
      Write("bad.yaml", std::string(kElasticTrace) + "  - {kind: rnn, arrival: 5}\n");
  EXPECT_EQ(Run({"--elastic", bad}), 1);
  EXPECT_NE(err_.str().find("jobs[2].kind: unknown kind rnn"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace orrery::sim
