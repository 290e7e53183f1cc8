// An interleaved gang of the plan as one `orrery-worker gang` command line
// (operator/engine/gang_command.h): each member's part is its own train flags,
// named by --task, and the worker's parser accepts the whole.
#include "operator/engine/gang_command.h"

#include <gtest/gtest.h>

#include "operator/api/load.h"
#include "operator/api/yaml.h"
#include "worker/contract/gang_args.h"
#include "worker/contract/worker_args.h"

namespace orrery::engine {
namespace {

const char* kJob = R"(
apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: t}
spec:
  tasks:
  - name: gpt
    model: {gpt: {layers: 2, hidden: 64, heads: 4, seqLen: 32, vocab: 256}}
    data: {synthetic: {seed: 7, samples: 1000}}
    training: {steps: 200, batchSize: 8, learningRate: 0.1}
    searchSpace: {grid: {learningRate: [0.1, 0.01]}}
  resources: {gpuQuota: 4}
)";

std::vector<api::ExpandedTask> Tasks() {
  auto json = api::YamlToJson(kJob);
  EXPECT_TRUE(json.ok()) << json.status();
  auto job = api::LoadJob(*json);
  EXPECT_TRUE(job.ok()) << job.status();
  return job->tasks;
}

LaunchConfig Spill(const std::string& checkpoint_dir) {
  LaunchConfig c;
  c.template_name = "spill";
  c.gpus = 1;
  c.checkpoint_dir = checkpoint_dir;
  c.checkpoint_every = 50;
  c.device = "cpu";
  return c;
}

TEST(GangCommand, EachMemberKeepsItsOwnTrainFlags) {
  const std::vector<api::ExpandedTask> tasks = Tasks();
  ASSERT_EQ(tasks.size(), 2u);
  auto flags = GangFlags({{&tasks[0], Spill("/ckpt/a")}, {&tasks[1], Spill("/ckpt/b")}}, 1 << 20);
  ASSERT_TRUE(flags.ok()) << flags.status();
  auto gang = contract::ParseGangArgs(*flags);
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_EQ(gang->spill_budget_bytes, 1 << 20);
  EXPECT_EQ(gang->device, "cpu");
  ASSERT_EQ(gang->tasks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto alone =
        contract::ParseWorkerArgs(TrainFlags(tasks[i], Spill(i == 0 ? "/ckpt/a" : "/ckpt/b")));
    ASSERT_TRUE(alone.ok());
    alone->task = tasks[i].name;
    alone->device.reset();
    alone->template_name.reset();
    EXPECT_EQ(gang->tasks[i], *alone) << tasks[i].name;
  }
  EXPECT_NE(gang->tasks[0].lr, gang->tasks[1].lr);  // each its own hyper-parameters
}

TEST(GangCommand, RefusesWhatCannotInterleave) {
  const std::vector<api::ExpandedTask> tasks = Tasks();
  auto error = [](const StatusOr<std::vector<std::string>>& r) {
    return r.ok() ? std::string("ok") : r.status().ToString();
  };
  EXPECT_NE(error(GangFlags({{&tasks[0], Spill("/a")}}, 1 << 20)).find("at least two"),
            std::string::npos);
  LaunchConfig ddp = Spill("/b");
  ddp.template_name = "ddp";
  ddp.gpus = 2;
  EXPECT_NE(error(GangFlags({{&tasks[0], Spill("/a")}, {&tasks[1], ddp}}, 1 << 20))
                .find("only spill on one GPU"),
            std::string::npos);
  LaunchConfig cuda = Spill("/b");
  cuda.device = "cuda";
  EXPECT_NE(
      error(GangFlags({{&tasks[0], Spill("/a")}, {&tasks[1], cuda}}, 1 << 20)).find("one device"),
      std::string::npos);
  EXPECT_NE(error(GangFlags({{&tasks[0], Spill("/a")}, {&tasks[1], Spill("/a")}}, 1 << 20))
                .find("give each its own"),
            std::string::npos);
  EXPECT_NE(error(GangFlags({{&tasks[0], Spill("/a")}, {&tasks[1], Spill("/b")}}, 0))
                .find("--spill-budget-bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace orrery::engine
