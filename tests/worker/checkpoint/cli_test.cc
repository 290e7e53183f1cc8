// The checkpoint subcommands: usage errors, inspect, reshard.
#include "worker/checkpoint/cli.h"

#include <sstream>

#include <gtest/gtest.h>

#include "tests/worker/checkpoint/model_fixture.h"
#include "tests/worker/checkpoint/temp_dir.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {
namespace {

int RunCli(const std::vector<std::string>& args, std::string* out_text = nullptr,
           std::string* err_text = nullptr) {
  std::ostringstream out, err;
  const int rc = RunCheckpointCommand(args, out, err);
  if (out_text != nullptr) *out_text = out.str();
  if (err_text != nullptr) *err_text = err.str();
  return rc;
}

TEST(CliTest, UsageErrors) {
  std::string err;
  EXPECT_EQ(RunCli({"checkpoint"}, nullptr, &err), 2);
  EXPECT_NE(err.find("usage"), std::string::npos);
  EXPECT_EQ(RunCli({"checkpoint", "frobnicate", "x"}), 2);
  EXPECT_EQ(RunCli({"checkpoint", "inspect"}), 2);
  EXPECT_EQ(RunCli({"checkpoint", "reshard", "a", "b"}), 2);  // no --to
  EXPECT_EQ(RunCli({"checkpoint", "reshard", "a", "--to", "dp=3,fsdp=2", "b"}),
            2);  // invalid layout
  EXPECT_EQ(RunCli({"checkpoint", "inspect", "a", "--threads", "0"}), 2);
  EXPECT_EQ(RunCli({"checkpoint", "help"}), 0);
}

TEST(CliTest, InspectAndReshardADirectory) {
  testing::TempDir tmp;
  const testing::ModelState m = testing::RandomModel(12, 5);
  ASSERT_TRUE(WriteAllShards(tmp.Sub("a"), {1, 2, 2, 1}, BalancedStages(m.num_layers), m.specs,
                             m.Pointers())
                  .ok());
  CheckpointInfo info;
  info.layout = {1, 2, 2, 1};
  info.num_layers = m.num_layers;
  ASSERT_TRUE(CommitCheckpoint(tmp.Sub("a"), info).ok());

  std::string out, err;
  EXPECT_EQ(RunCli({"checkpoint", "inspect", tmp.Sub("a")}, &out, &err), 0) << err;
  EXPECT_NE(out.find("checksums: ok"), std::string::npos) << out;
  EXPECT_EQ(RunCli({"checkpoint", "reshard", tmp.Sub("a"), "--to", "dp=2,tp=2,pp=1", tmp.Sub("b")},
                   &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("resharded"), std::string::npos);
  auto reader = CheckpointReader::Open(tmp.Sub("b"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->metadata().info.layout, (Layout{2, 2, 1, 1}));
  EXPECT_EQ(RunCli({"checkpoint", "inspect", tmp.Sub("missing")}, &out, &err), 1);
  EXPECT_NE(err.find("metadata.json"), std::string::npos) << err;
}

}  // namespace
}  // namespace orrery::checkpoint
