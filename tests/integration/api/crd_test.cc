// The ModelSelectionJob CRD on a real API server: it installs and becomes
// Established; every example is accepted; bad manifests are refused by the
// server with the expected messages (and by the C++ validation too, so the two
// agree); the server's defaults decode strictly to what the C++ codec gives; the
// status the operator writes fits the status schema; `kubectl get msj` shows the
// printer columns and `kubectl explain` the descriptions.
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/load.h"
#include "operator/api/yaml.h"
#include "tests/operator/api/test_jobs.h"
#include "tests/testing/control_plane.h"

namespace orrery::api {
namespace {

using orrery::testing::CommandResult;
const std::string kSource = ORRERY_SOURCE_DIR;

class CrdTest : public orrery::testing::ControlPlaneTest {
 protected:
  static void SetUpTestSuite() {
    ControlPlaneTest::SetUpTestSuite();
    if (!plane()) return;
    CommandResult r = plane()->Kubectl("apply --server-side -f " + kSource +
                                       "/crds/orrery.dev_modelselectionjobs.yaml");
    crd_output_ = r.output;
    crd_applied_ = r.exit_code == 0;
    if (crd_applied_) {
      r = plane()->WaitEstablished("modelselectionjobs.orrery.dev");
      crd_output_ += r.output;
      crd_applied_ = r.exit_code == 0;
    }
  }
  void SetUp() override {
    ControlPlaneTest::SetUp();
    ASSERT_TRUE(crd_applied_) << crd_output_;
  }

  static Json Minimal() { return *YamlToJson(testing::kMinimalYaml); }

  // Applies `json` in dry-run mode; returns the server's answer.
  static CommandResult DryRun(const Json& json) {
    return plane()->Kubectl("apply --dry-run=server --validate=strict -f -", json.dump());
  }

  static bool crd_applied_;
  static std::string crd_output_;
};
bool CrdTest::crd_applied_ = false;
std::string CrdTest::crd_output_;

TEST_F(CrdTest, CrdIsEstablishedWithItsNames) {
  CommandResult r = plane()->Kubectl("api-resources --api-group=orrery.dev -o wide");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("modelselectionjobs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("msj"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ModelSelectionJob"), std::string::npos) << r.output;
}

TEST_F(CrdTest, EveryExampleIsAccepted) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    CommandResult r = plane()->Kubectl("apply --validate=strict -f " + entry.path().string());
    EXPECT_EQ(r.exit_code, 0) << entry.path() << "\n" << r.output;
    EXPECT_NE(r.output.find("modelselectionjob.orrery.dev/"), std::string::npos) << r.output;
    ++n;
  }
  EXPECT_GE(n, 4);
}

struct BadCase {
  const char* name;
  std::function<void(Json&)> mutate;
  const char* server_message;  // a substring of kubectl's error
};

Json& Task(Json& j) { return j["spec"]["tasks"][0]; }

const std::vector<BadCase>& BadCases() {
  static const std::vector<BadCase> cases = {
      {"batch_size", [](Json& j) { Task(j)["training"]["batchSize"] = 0; },
       "spec.tasks[0].training.batchSize: Invalid value: 0: spec.tasks[0].training.batchSize in "
       "body should be "
       "greater than or equal to 1"},
      {"unknown_field", [](Json& j) { Task(j)["training"]["optimiser"] = "sgd"; },
       "unknown field \"spec.tasks[0].training.optimiser\""},
      {"enum",
       [](Json& j) { j["spec"]["resources"]["templates"] = Json::parse(R"(["ddp", "zero"])"); },
       "Unsupported value: \"zero\""},
      {"duplicate_names", [](Json& j) { j["spec"]["tasks"].push_back(Task(j)); },
       "task names must be unique"},
      {"gpus_min_max",
       [](Json& j) {
         j["spec"]["resources"]["gpusPerTask"] = Json::parse(R"({"min": 4, "max": 2})");
       },
       "min must not exceed max"},
      {"quota",
       [](Json& j) {
         j["spec"]["resources"]["gpusPerTask"] = Json::parse(R"({"min": 8, "max": 8})");
       },
       "gpuQuota must be at least gpusPerTask.min"},
      {"steps_and_epochs", [](Json& j) { Task(j)["training"]["epochs"] = 2; },
       "must set exactly one of steps and epochs"},
      {"two_models",
       [](Json& j) { Task(j)["model"]["torchscript"] = Json::parse(R"({"path": "m.pt"})"); },
       "must set exactly one of gpt, mlp, torchscript"},
      {"no_data", [](Json& j) { Task(j)["data"] = Json::object(); },
       "must set exactly one of tokens, text, synthetic"},
      {"heads",
       [](Json& j) {
         Task(j)["model"] = Json::parse(
             R"({"gpt": {"layers": 2, "hidden": 100, "heads": 3, "seqLen": 64, "vocab": 256}})");
       },
       "hidden must be divisible by heads"},
      {"synthetic_vocab",
       [](Json& j) {
         Task(j)["model"] = Json::parse(
             R"({"gpt": {"layers": 2, "hidden": 64, "heads": 4, "seqLen": 64, "vocab": 100}})");
       },
       "data.synthetic.vocabSize must not exceed the model's vocab"},
      {"warmup", [](Json& j) { Task(j)["training"]["warmupSteps"] = 100; },
       "warmupSteps must be less than steps"},
      {"task_name", [](Json& j) { Task(j)["name"] = "Big_Model"; },
       "spec.tasks[0].name: Invalid value"},
      {"learning_rate", [](Json& j) { Task(j)["training"]["learningRate"] = 0; },
       "should be greater than 0"},
      {"grid_and_random",
       [](Json& j) {
         Task(j)["searchSpace"] = Json::parse(
             R"({"grid": {"learningRate": [1e-3]}, "random": {"count": 2, "learningRate": {"min": 1e-4, "max": 1e-3}}})");
       },
       "must set exactly one of grid and random"},
      {"grid_too_big",
       [](Json& j) {
         Json a = Json::array(), b = Json::array();
         for (int i = 1; i <= 30; ++i) a.push_back(i), b.push_back(i - 1);
         Task(j)["searchSpace"] =
             Json::object({{"grid", Json::object({{"batchSize", a}, {"warmupSteps", b}})}});
       },
       "expands to more than 512 tasks"},
      {"grid_duplicate",
       [](Json& j) { Task(j)["searchSpace"] = Json::parse(R"({"grid": {"batchSize": [8, 8]}})"); },
       "Duplicate value: 8"},
      {"distribution",
       [](Json& j) {
         Task(j)["searchSpace"] =
             Json::parse(R"({"random": {"count": 2, "learningRate": {"min": 1e-4}}})");
       },
       "must set either min and max, or values"},
      {"distribution_order",
       [](Json& j) {
         Task(j)["searchSpace"] =
             Json::parse(R"({"random": {"count": 2, "learningRate": {"min": 1e-2, "max": 1e-3}}})");
       },
       "min must not exceed max"},
      {"log_scale",
       [](Json& j) {
         Task(j)["searchSpace"] = Json::parse(
             R"({"random": {"count": 2, "weightDecay": {"min": 0, "max": 0.1, "logScale": true}}})");
       },
       "min must be greater than 0 when logScale is true"},
      {"random_count",
       [](Json& j) {
         Task(j)["searchSpace"] = Json::parse(
             R"({"random": {"count": 600, "learningRate": {"min": 1e-4, "max": 1e-3}}})");
       },
       "should be less than or equal to 512"},
      {"gpu_counts",
       [](Json& j) { j["spec"]["profiling"] = Json::parse(R"({"gpuCounts": [1, 16]})"); },
       "profiling.gpuCounts must lie within resources.gpusPerTask"},
      {"elastic",
       [](Json& j) {
         j["spec"]["elasticity"] = Json::parse(R"({"minBatchSize": 64, "maxBatchSize": 8})");
       },
       "minBatchSize must not exceed maxBatchSize"},
      {"checkpoint_path",
       [](Json& j) { j["spec"]["checkpoints"] = Json::parse(R"({"path": "relative/dir"})"); },
       "must be an absolute path"},
      {"toleration",
       [](Json& j) {
         j["spec"]["resources"]["tolerations"] =
             Json::parse(R"([{"key": "k", "operator": "Exists", "value": "v"}])");
       },
       "value must be empty when operator is Exists"},
      {"no_tasks", [](Json& j) { j["spec"]["tasks"] = Json::array(); },
       "spec.tasks: Invalid value"},
      {"missing_quota", [](Json& j) { j["spec"]["resources"].erase("gpuQuota"); },
       "spec.resources.gpuQuota: Required value"},
  };
  return cases;
}

TEST_F(CrdTest, BaseManifestIsAccepted) {
  CommandResult r = DryRun(Minimal());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(CrdTest, BadManifestsAreRejectedByTheServerAndByOrrery) {
  for (const BadCase& c : BadCases()) {
    Json j = Minimal();
    c.mutate(j);
    CommandResult r = DryRun(j);
    EXPECT_NE(r.exit_code, 0) << c.name << ": the server accepted it";
    EXPECT_NE(r.output.find(c.server_message), std::string::npos)
        << c.name << ": expected \"" << c.server_message << "\" in\n"
        << r.output;
    // orrery validate refuses the same manifest.
    EXPECT_FALSE(AnalyzeJson(j).ok())
        << c.name << ": the server refused it but the C++ validation did not";
  }
}

TEST_F(CrdTest, ServerDefaultsDecodeStrictlyToTheCodecsDefaults) {
  CommandResult r = plane()->Kubectl("apply -f -", Minimal().dump());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = plane()->Kubectl("get msj small -o json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto stored = ParseJson(r.output);
  ASSERT_TRUE(stored.ok()) << stored.status() << r.output;
  auto from_server = JobFromJson(*stored);  // strict: any unknown field would fail
  ASSERT_TRUE(from_server.ok()) << from_server.status();
  auto local = JobFromJson(Minimal());
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(from_server->spec, local->spec) << "server: " << EncodeSpec(from_server->spec).dump()
                                            << "\nlocal: " << EncodeSpec(local->spec).dump();
  EXPECT_GE(from_server->metadata.generation, 1);
}

TEST_F(CrdTest, StatusSubresourceAcceptsTheOperatorsStatusAndColumnsShowIt) {
  Json job = Minimal();
  job["metadata"]["name"] = "with-status";
  CommandResult r = plane()->Kubectl("apply -f -", job.dump());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Json status = EncodeStatus(*testing::FullJob().status);
  status["taskSummary"] = "1/3";
  status["gpusHeld"] = 6;
  status["eta"] = "42m";
  Json patch = {{"status", status}};
  r = plane()->Kubectl("patch msj with-status --subresource=status --type=merge -p '" +
                       patch.dump() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Read back: the status the C++ encoder wrote survives the schema unchanged.
  r = plane()->Kubectl("get msj with-status -o json");
  auto stored = JobFromJsonText(r.output);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_TRUE(stored->status.has_value());
  EXPECT_EQ(EncodeStatus(*stored->status), status);
  // A spec change through the status subresource is ignored.
  r = plane()->Kubectl("get msj with-status");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  std::istringstream h(header), v(row);
  std::vector<std::string> columns, values;
  for (std::string w; h >> w;) columns.push_back(w);
  for (std::string w; v >> w;) values.push_back(w);
  EXPECT_EQ(columns, (std::vector<std::string>{"NAME", "PHASE", "TASKS", "GPUS", "ETA", "AGE"}))
      << r.output;
  ASSERT_GE(values.size(), 5u) << r.output;
  EXPECT_EQ(values[0], "with-status");
  EXPECT_EQ(values[1], "Running");
  EXPECT_EQ(values[2], "1/3");
  EXPECT_EQ(values[3], "6");
  EXPECT_EQ(values[4], "42m");
  r = plane()->Kubectl("get msj with-status -o wide");
  EXPECT_NE(r.output.find("MAKESPAN"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3600"), std::string::npos) << r.output;
}

TEST_F(CrdTest, BadStatusIsRejected) {
  Json job = Minimal();
  job["metadata"]["name"] = "bad-status";
  ASSERT_EQ(plane()->Kubectl("apply -f -", job.dump()).exit_code, 0);
  CommandResult r = plane()->Kubectl(
      "patch msj bad-status --subresource=status --type=merge -p "
      "'{\"status\":{\"phase\":\"Dancing\"}}'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("Unsupported value: \"Dancing\""), std::string::npos) << r.output;
}

TEST_F(CrdTest, ExplainShowsDescriptions) {
  // kubectl explain reads the published OpenAPI, which can lag the CRD briefly.
  CommandResult r;
  for (int i = 0; i < 30; ++i) {
    r = plane()->Kubectl("explain msj.spec.tasks");
    if (r.exit_code == 0 && r.output.find("searchSpace") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("The models to train"), std::string::npos) << r.output;
  for (const char* field : {"name", "weight", "model", "data", "training", "searchSpace"}) {
    EXPECT_NE(r.output.find(std::string(field) + "\t"), std::string::npos) << field << "\n"
                                                                           << r.output;
  }
  r = plane()->Kubectl("explain msj.spec.tasks.training.batchSize");
  EXPECT_NE(r.output.find("Global batch size"), std::string::npos) << r.output;
  r = plane()->Kubectl("explain msj.spec.tasks.data.text.path");
  // explain wraps lines; compare with runs of white space collapsed.
  std::string flat;
  for (char ch : r.output) {
    bool space = ch == ' ' || ch == '\n' || ch == '\t';
    if (!space || (!flat.empty() && flat.back() != ' ')) flat += space ? ' ' : ch;
  }
  EXPECT_NE(
      flat.find(
          "a relative path is resolved against the root of the repository holding the job file"),
      std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace orrery::api
