// `orrery expand` on the real binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/operator/cli/run_orrery.h"

namespace orrery::cli::testing {
namespace {

TEST(ExpandCommandTest, TableListsEveryExpandedTask) {
  RunResult r = RunOrrery("expand " + Example("quickstart.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("NAME", 0), 0u) << r.output;
  for (const char* name : {"tiny-gpt-lr-3e-4 ", "tiny-gpt-lr-1e-3 ", "tiny-gpt-lr-3e-3 "}) {
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
  }
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 4);
}

TEST(ExpandCommandTest, JsonOutputCarriesTheChosenValues) {
  RunResult r = RunOrrery("expand " + Example("gpt-finetune-sweep.yaml") + " -o json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto tasks = nlohmann::json::parse(r.output);
  ASSERT_EQ(tasks.size(), 12u);
  EXPECT_EQ(tasks[0]["name"], "gpt2-ft-lr-3e-5-bs-32-wu-100");
  EXPECT_EQ(tasks[0]["from"], "gpt2-ft");
  EXPECT_EQ(tasks[0]["training"]["batchSize"], 32);
  EXPECT_EQ(tasks[0]["searchSpace"]["learningRate"], "3e-05");
  EXPECT_EQ(tasks[11]["training"]["warmupSteps"], 500);
}

TEST(ExpandCommandTest, YamlOutputIsTheSameTasks) {
  RunResult json = RunOrrery("expand " + Example("mixed-sizes.yaml") + " --output=json");
  RunResult yaml = RunOrrery("expand " + Example("mixed-sizes.yaml") + " -o yaml");
  ASSERT_EQ(yaml.exit_code, 0) << yaml.output;
  EXPECT_NE(yaml.output.find("- name: gpt-small-r0"), std::string::npos) << yaml.output;
  EXPECT_EQ(nlohmann::json::parse(json.output).size(), 12u);
}

TEST(ExpandCommandTest, BadArguments) {
  EXPECT_EQ(RunOrrery("expand").exit_code, 2);
  EXPECT_EQ(RunOrrery("expand " + Example("quickstart.yaml") + " -o xml").exit_code, 2);
  EXPECT_EQ(RunOrrery("expand " + Example("quickstart.yaml") + " --frob").exit_code, 2);
}

TEST(ExpandCommandTest, InvalidJobPrintsErrors) {
  TempFiles files("expand_bad");
  std::string path =
      files.Write("bad.yaml",
                  "apiVersion: orrery.dev/v1alpha1\nkind: ModelSelectionJob\n"
                  "metadata: {name: x}\nspec: {tasks: [], resources: {gpuQuota: 1}}\n");
  RunResult r = RunOrrery("expand " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("spec.tasks: must not be empty"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace orrery::cli::testing
