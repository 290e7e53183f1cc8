// `orrery validate` on the real binary: good files, bad files, bad input.
#include <gtest/gtest.h>

#include "tests/operator/cli/run_orrery.h"

namespace orrery::cli::testing {
namespace {

TEST(ValidateCommandTest, EveryExampleIsValidWithASummary) {
  for (const char* f :
       {"quickstart.yaml", "gpt-finetune-sweep.yaml", "mixed-sizes.yaml", "elastic.yaml"}) {
    RunResult r = RunOrrery("validate " + Example(f));
    EXPECT_EQ(r.exit_code, 0) << f << "\n" << r.output;
    EXPECT_NE(r.output.find("is valid"), std::string::npos) << r.output;
  }
  RunResult r = RunOrrery("validate " + Example("gpt-finetune-sweep.yaml"));
  EXPECT_NE(r.output.find("tasks:         12 after expansion (from 1 in spec)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gpus per task: 1-8 nvidia.com/gpu, job quota 16"), std::string::npos)
      << r.output;
}

const char* kBad = R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: bad}
spec:
  tasks:
  - name: a
    model: {mlp: {layers: 1, hidden: 1, inputs: 1, outputs: 1}}
    data: {synthetic: {}}
    training: {steps: 10, batchSize: 4, learningRate: 0.1}
  - name: b
    model: {mlp: {layers: 1, hidden: 1, inputs: 1, outputs: 1}}
    data: {synthetic: {}}
    training: {steps: 10, batchSize: 4, learningRate: 0.1}
  - name: c
    model: {mlp: {layers: 1, hidden: 1, inputs: 1, outputs: 1}}
    data: {synthetic: {}}
    training: {steps: 10, batchSize: 0, learningRate: 0.1, optimiser: sgd}
  resources: {gpuQuota: 1, gpusPerTask: {min: 2, max: 4}}
)";

TEST(ValidateCommandTest, PrintsEveryErrorWithPathAndFixAndExits1) {
  TempFiles files("validate_bad");
  RunResult r = RunOrrery("validate " + files.Write("bad.yaml", kBad));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ModelSelectionJob \"bad\" is invalid: 3 errors"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\nspec.tasks[2].training.batchSize: must be at least 1 (fix: "),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find(
          "\nspec.tasks[2].training.optimiser: unknown field \"optimiser\" (fix: did you mean "
          "\"optimizer\"?"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\nspec.resources.gpuQuota: must be at least gpusPerTask.min"),
            std::string::npos)
      << r.output;
}

TEST(ValidateCommandTest, SyntaxErrorsNameTheFileAndLine) {
  TempFiles files("validate_syntax");
  std::string path = files.Write("broken.yaml", "apiVersion: orrery.dev/v1alpha1\nspec: [1, 2\n");
  RunResult r = RunOrrery("validate " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("broken.yaml"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("line "), std::string::npos) << r.output;
}

TEST(ValidateCommandTest, SeveralDocumentsAndFiles) {
  TempFiles files("validate_multi");
  RunResult r = RunOrrery("validate " + Example("quickstart.yaml") + " " + Example("elastic.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string two = files.Write("two.yaml", std::string(kBad) + "---\n" + kBad);
  r = RunOrrery("validate " + two);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("(document 2)"), std::string::npos) << r.output;
}

TEST(ValidateCommandTest, UsageErrors) {
  RunResult r = RunOrrery("validate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing FILE"), std::string::npos);
  r = RunOrrery("validate /nonexistent.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot open /nonexistent.yaml"), std::string::npos) << r.output;
  r = RunOrrery("validate --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("Usage: orrery validate"), std::string::npos);
}

}  // namespace
}  // namespace orrery::cli::testing
