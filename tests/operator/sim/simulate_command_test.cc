#include "operator/sim/simulate_command.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

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
  int Run(std::vector<std::string> args) {
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

}  // namespace
}  // namespace orrery::sim
