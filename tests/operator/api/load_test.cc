// The text -> checked job pipeline, and the shipped examples through it.
#include "operator/api/load.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/operator/api/test_jobs.h"

namespace orrery::api {
namespace {

TEST(LoadTest, LoadsAValidJobWithDefaultsAndTasks) {
  auto loaded = LoadJobText(testing::kMinimalYaml);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tasks.size(), 1u);
  EXPECT_EQ(loaded->job.spec.profiling.gpu_counts, (std::vector<int>{1, 2, 4, 8}));
}

TEST(LoadTest, ReportsDecodeAndValidationErrorsTogether) {
  std::string yaml = testing::kMinimalYaml;
  yaml.replace(yaml.find("batchSize: 16"), 13, "batchSize: 0\n      batchsize: 1");
  yaml += "  checkpoints: {keep: 0}\n";
  Analysis a = AnalyzeJson(*YamlToJson(yaml));
  ASSERT_EQ(a.errors.size(), 3u);
  EXPECT_EQ(a.errors[0].path, "spec.tasks[0].training.batchsize");  // decode: unknown field
  EXPECT_EQ(a.errors[1].path, "spec.tasks[0].training.batchSize");  // validation
  EXPECT_EQ(a.errors[2].path, "spec.checkpoints.keep");
  EXPECT_TRUE(a.tasks.empty());
  auto loaded = LoadJobText(yaml);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("invalid ModelSelectionJob small: 3 errors"),
            std::string::npos)
      << loaded.status();
}

TEST(LoadTest, MissingRequiredFieldIsReportedOnce) {
  std::string yaml = testing::kMinimalYaml;
  yaml.replace(yaml.find("      learningRate: 1e-3\n"), 25, "");
  Analysis a = AnalyzeJson(*YamlToJson(yaml));
  ASSERT_EQ(a.errors.size(), 1u);
  EXPECT_EQ(FormatFieldError(a.errors[0]),
            "spec.tasks[0].training.learningRate: required value (fix: set learningRate)");
}

TEST(LoadTest, EveryExampleIsValid) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(ORRERY_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    auto docs = ReadManifests(entry.path().string());
    ASSERT_TRUE(docs.ok()) << docs.status();
    for (const Json& doc : *docs) {
      Analysis a = AnalyzeJson(doc);
      std::string errors;
      for (const auto& e : a.errors) errors += FormatFieldError(e) + "\n";
      EXPECT_TRUE(a.ok()) << entry.path() << "\n" << errors;
      EXPECT_FALSE(a.tasks.empty());
      ++count;
    }
  }
  EXPECT_GE(count, 4);
}

TEST(LoadTest, ReadManifestsReportsMissingAndBadFiles) {
  auto missing = ReadManifests("/nonexistent/job.yaml");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = std::filesystem::path(::testing::TempDir()) / "load_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "bad.yaml") << "a: [1\n";
  auto bad = ReadManifests((dir / "bad.yaml").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.yaml"), std::string::npos);
  std::ofstream(dir / "j.json") << R"({"a": 1})";
  auto json = ReadManifests((dir / "j.json").string());
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)[0]["a"], 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::api
