// Keeps crds/ and operator/api/schema.h in step: every field the C++ codec writes
// is in the CRD with a description (and the CRD has no field C++ does not know),
// and enums, defaults and bounds are the same numbers on both sides.
#include "operator/api/schema.h"

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"
#include "tests/operator/api/test_jobs.h"

namespace orrery::api {
namespace {

Json LoadCrd() {
  std::ifstream in(std::string(ORRERY_SOURCE_DIR) + "/crds/orrery.dev_modelselectionjobs.yaml");
  std::stringstream s;
  s << in.rdbuf();
  auto json = YamlToJson(s.str());
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : Json();
}

const Json& RootSchema() {
  static const Json crd = LoadCrd();
  return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
}

// The schema node at a path like "spec.tasks[].training.batchSize" (or nullptr).
const Json* SchemaAt(const std::string& path) {
  const Json* node = &RootSchema();
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '.')) {
    bool items = part.size() > 2 && part.substr(part.size() - 2) == "[]";
    if (items) part.resize(part.size() - 2);
    if (!node->contains("properties") || !(*node)["properties"].contains(part)) return nullptr;
    node = &(*node)["properties"][part];
    if (items) {
      if (!node->contains("items")) return nullptr;
      node = &(*node)["items"];
    }
  }
  return node;
}

TEST(SchemaTest, CrdNamesMatchTypes) {
  Json crd = LoadCrd();
  EXPECT_EQ(crd["spec"]["group"], kGroup);
  EXPECT_EQ(crd["spec"]["names"]["kind"], kKind);
  EXPECT_EQ(crd["spec"]["names"]["plural"], kPlural);
  EXPECT_EQ(crd["spec"]["names"]["shortNames"][0], kShortName);
  EXPECT_EQ(crd["spec"]["versions"][0]["name"], kVersion);
  EXPECT_EQ(crd["metadata"]["name"], std::string(kPlural) + "." + kGroup);
}

// Walks a JSON value and its schema side by side, recording paths without a
// schema or without a description.
void Walk(const Json& value, const Json& schema, const std::string& path,
          std::vector<std::string>* missing, std::vector<std::string>* undocumented,
          std::set<std::string>* visited) {
  visited->insert(path);
  if (!schema.contains("description") || schema["description"].get<std::string>().empty()) {
    undocumented->push_back(path);
  }
  if (value.is_object() && schema.contains("properties")) {
    for (const auto& [key, child] : value.items()) {
      std::string child_path = path.empty() ? key : path + "." + key;
      if (!schema["properties"].contains(key)) {
        missing->push_back(child_path);
        continue;
      }
      Walk(child, schema["properties"][key], child_path, missing, undocumented, visited);
    }
  } else if (value.is_array() && schema.contains("items")) {
    for (const auto& item : value)
      Walk(item, schema["items"], path + "[]", missing, undocumented, visited);
  }
}

// Every property path in the schema under `path`.
void SchemaPaths(const Json& schema, const std::string& path, std::set<std::string>* out) {
  out->insert(path);
  if (schema.contains("properties")) {
    for (const auto& [key, child] : schema["properties"].items()) {
      SchemaPaths(child, path.empty() ? key : path + "." + key, out);
    }
  }
  if (schema.contains("items")) SchemaPaths(schema["items"], path + "[]", out);
}

TEST(SchemaTest, EveryCodecFieldIsInTheCrdWithADescription) {
  Json full = EncodeJob(testing::FullJob());
  std::vector<std::string> missing, undocumented;
  std::set<std::string> visited;
  for (const char* top : {"spec", "status"}) {
    Walk(full[top], RootSchema()["properties"][top], top, &missing, &undocumented, &visited);
  }
  EXPECT_TRUE(missing.empty()) << "fields the codec writes but the CRD lacks: "
                               << ::testing::PrintToString(missing);
  EXPECT_TRUE(undocumented.empty())
      << "CRD fields without a description: " << ::testing::PrintToString(undocumented);

  // And the other way: no CRD field the codec never writes.
  std::set<std::string> schema_paths;
  for (const char* top : {"spec", "status"})
    SchemaPaths(RootSchema()["properties"][top], top, &schema_paths);
  std::vector<std::string> unknown;
  for (const std::string& p : schema_paths) {
    if (!visited.count(p)) unknown.push_back(p);
  }
  EXPECT_TRUE(unknown.empty()) << "CRD fields the C++ types do not know: "
                               << ::testing::PrintToString(unknown);
}

TEST(SchemaTest, EveryNestedSchemaHasADescription) {
  // Also covers schema nodes the full job does not reach (e.g. list items).
  std::vector<std::string> undocumented;
  std::function<void(const Json&, const std::string&)> visit = [&](const Json& s,
                                                                   const std::string& path) {
    if (!path.empty() && path != "metadata" &&
        (!s.contains("description") || s["description"].get<std::string>().empty())) {
      undocumented.push_back(path);
    }
    if (s.contains("properties")) {
      for (const auto& [k, c] : s["properties"].items())
        visit(c, path.empty() ? k : path + "." + k);
    }
    if (s.contains("items")) visit(s["items"], path + "[]");
  };
  visit(RootSchema(), "");
  EXPECT_TRUE(undocumented.empty()) << ::testing::PrintToString(undocumented);
}

template <typename E>
void ExpectEnum(const std::string& path) {
  const Json* node = SchemaAt(path);
  ASSERT_NE(node, nullptr) << path;
  ASSERT_TRUE(node->contains("enum")) << path;
  EXPECT_EQ((*node)["enum"].get<std::vector<std::string>>(), EnumNameList<E>()) << path;
}

TEST(SchemaTest, EnumsMatch) {
  ExpectEnum<Template>("spec.resources.templates[]");
  ExpectEnum<Template>("status.tasks[].config.template");
  ExpectEnum<Optimizer>("spec.tasks[].training.optimizer");
  ExpectEnum<Optimizer>("spec.tasks[].searchSpace.grid.optimizer[]");
  ExpectEnum<LrSchedule>("spec.tasks[].training.schedule");
  ExpectEnum<Precision>("spec.tasks[].training.precision");
  ExpectEnum<TokenDtype>("spec.tasks[].data.tokens.dtype");
  ExpectEnum<Objective>("spec.scheduling.objective");
  ExpectEnum<LrScaling>("spec.elasticity.learningRateScaling");
  ExpectEnum<Phase>("status.phase");
  ExpectEnum<TaskState>("status.tasks[].state");
  ExpectEnum<ExportDtype>("spec.tasks[].output.dtype");
}

TEST(SchemaTest, DefaultsMatchWhatDecodingAnEmptyFieldGives) {
  // Decode a job that sets only required fields (and every optional object, so
  // nested defaults show), encode it, and compare each CRD `default:` with it.
  auto parsed = YamlToJson(R"(apiVersion: orrery.dev/v1alpha1
kind: ModelSelectionJob
metadata: {name: d}
spec:
  tasks:
  - name: t
    model:
      mlp: {layers: 1, hidden: 1, inputs: 1, outputs: 1}
      pretrained: {path: m, seqLen: 8, volume: {claimName: models}}
    data: {tokens: {path: x}, synthetic: {}}
    training: {steps: 5, batchSize: 1, learningRate: 0.1}
    fineTuning: {lora: {rank: 1}}
    output: {path: o, volume: {claimName: out}}
    searchSpace:
      random:
        count: 1
        learningRate: {min: 1, max: 2}
        batchSize: {min: 1, max: 2}
        weightDecay: {min: 1, max: 2}
        warmupSteps: {min: 1, max: 2}
        loraRank: {min: 1, max: 2}
        freezeBlocks: {min: 1, max: 2}
  resources:
    gpuQuota: 1
    tolerations: [{key: k}]
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto job = JobFromJson(*parsed);
  ASSERT_TRUE(job.ok()) << job.status();
  Json encoded = EncodeJob(*job);

  int compared = 0;
  std::function<void(const Json&, const Json&, const std::string&)> visit =
      [&](const Json& schema, const Json& value, const std::string& path) {
        if (schema.contains("default")) {
          const Json& d = schema["default"];
          if (!(d.is_object() && d.empty())) {  // `default: {}` only makes nested defaults apply
            ++compared;
            if (d.is_number()) {
              EXPECT_TRUE(value.is_number()) << path;
              EXPECT_DOUBLE_EQ(d.get<double>(), value.get<double>()) << path;
            } else {
              EXPECT_EQ(d.dump(), value.dump()) << path;
            }
          }
        }
        if (schema.contains("properties") && value.is_object()) {
          for (const auto& [k, c] : schema["properties"].items()) {
            if (value.contains(k)) {
              visit(c, value[k], path + "." + k);
            } else if (c.contains("default")) {
              ADD_FAILURE() << path << "." << k
                            << " has a CRD default but the codec wrote no value";
            }
          }
        }
        if (schema.contains("items") && value.is_array()) {
          for (const auto& item : value) visit(schema["items"], item, path + "[]");
        }
      };
  visit(RootSchema()["properties"]["spec"], encoded["spec"], "spec");
  EXPECT_GE(compared, 32);
}

TEST(SchemaTest, LimitsMatch) {
  for (const Limit& l : kLimits) {
    const Json* node = SchemaAt(std::string(l.path));
    ASSERT_NE(node, nullptr) << l.path;
    const char* min_key = l.kind == LimitKind::kValue        ? "minimum"
                          : l.kind == LimitKind::kItems      ? "minItems"
                          : l.kind == LimitKind::kProperties ? "minProperties"
                                                             : "minLength";
    const char* max_key = l.kind == LimitKind::kValue        ? "maximum"
                          : l.kind == LimitKind::kItems      ? "maxItems"
                          : l.kind == LimitKind::kProperties ? "maxProperties"
                                                             : "maxLength";
    if (l.min) {
      ASSERT_TRUE(node->contains(min_key)) << l.path << " lacks " << min_key;
      EXPECT_DOUBLE_EQ((*node)[min_key].get<double>(), *l.min) << l.path;
    } else {
      EXPECT_FALSE(node->contains(min_key)) << l.path;
    }
    if (l.max) {
      ASSERT_TRUE(node->contains(max_key)) << l.path << " lacks " << max_key;
      EXPECT_DOUBLE_EQ((*node)[max_key].get<double>(), *l.max) << l.path;
    } else {
      EXPECT_FALSE(node->contains(max_key)) << l.path;
    }
    EXPECT_EQ(node->value("exclusiveMinimum", false), l.exclusive_min) << l.path;
  }
}

TEST(SchemaTest, GridValuesHaveTheTrainingFieldsBounds) {
  for (const char* field : {"learningRate", "batchSize", "weightDecay", "warmupSteps"}) {
    const Json* training = SchemaAt(std::string("spec.tasks[].training.") + field);
    const Json* item = SchemaAt(std::string("spec.tasks[].searchSpace.grid.") + field + "[]");
    ASSERT_NE(training, nullptr);
    ASSERT_NE(item, nullptr) << field;
    for (const char* key : {"type", "minimum", "maximum", "exclusiveMinimum"}) {
      EXPECT_EQ(training->value(key, Json()), item->value(key, Json())) << field << " " << key;
    }
  }
}

TEST(SchemaTest, FineTuningDimensionsHaveTheirFieldsBounds) {
  // A grid's loraRank and freezeBlocks values obey fineTuning's own bounds.
  for (const auto& [grid, field] :
       {std::pair<const char*, const char*>{"loraRank", "spec.tasks[].fineTuning.lora.rank"},
        {"freezeBlocks", "spec.tasks[].fineTuning.freezeBlocks"}}) {
    const Json* own = SchemaAt(field);
    const Json* item = SchemaAt(std::string("spec.tasks[].searchSpace.grid.") + grid + "[]");
    ASSERT_NE(own, nullptr) << field;
    ASSERT_NE(item, nullptr) << grid;
    for (const char* key : {"type", "minimum", "maximum"}) {
      EXPECT_EQ(own->value(key, Json()), item->value(key, Json())) << grid << " " << key;
    }
  }
  // Both volumes' defaults are schema.h's.
  EXPECT_EQ(SchemaAt("spec.tasks[].model.pretrained.volume.mountPath")->value("default", ""),
            kDefaultModelMountPath);
  EXPECT_EQ(SchemaAt("spec.tasks[].output.volume.mountPath")->value("default", ""),
            kDefaultOutputMountPath);
}

TEST(SchemaTest, ListsUnderCelRulesAreBounded) {
  // CEL cost estimation needs maxItems on lists and maxLength on strings it
  // iterates; Kubernetes rejects the CRD otherwise.
  for (const char* path :
       {"spec.tasks", "spec.profiling.gpuCounts", "spec.tasks[].searchSpace.grid.learningRate",
        "spec.resources.tolerations"}) {
    const Json* node = SchemaAt(path);
    ASSERT_NE(node, nullptr) << path;
    EXPECT_TRUE(node->contains("maxItems")) << path;
  }
  EXPECT_TRUE(SchemaAt("spec.tasks[].name")->contains("maxLength"));
}

// The syntax of what reaches a worker pod: the CRD's patterns are schema.h's,
// and each says what validation's hand-written check says on every sample (a
// pattern cannot count a label key's prefix, so the samples keep it short).
const std::string& CrdPattern(const char* path) {
  static std::map<std::string, std::string> cache;
  const Json* node = SchemaAt(path);
  EXPECT_NE(node, nullptr) << path;
  return cache[path] = node != nullptr ? node->value("pattern", "") : "";
}

bool Matches(const std::string& pattern, const std::string& s) {
  return std::regex_search(s, std::regex(pattern, std::regex::ECMAScript));
}

TEST(SchemaTest, PodFieldPatternsAreSchemasAndAgreeWithValidation) {
  EXPECT_EQ(CrdPattern("spec.resources.image"), kImagePattern);
  EXPECT_EQ(CrdPattern("spec.resources.gpuResourceName"), kExtendedResourcePattern);
  EXPECT_EQ(CrdPattern("spec.resources.tolerations[].key"), kTolerationKeyPattern);
  EXPECT_EQ(CrdPattern("spec.resources.tolerations[].value"), kLabelValuePattern);
  const Json* selector = SchemaAt("spec.resources.nodeSelector");
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ((*selector)["additionalProperties"].value("pattern", ""), kLabelValuePattern);
  EXPECT_NE(
      (*selector)["x-kubernetes-validations"][0]["rule"].get<std::string>().find(kLabelKeyPattern),
      std::string::npos)
      << "the nodeSelector key rule matches kLabelKeyPattern";

  const std::vector<std::string> images = {
      "registry.example.com/orrery/worker:0.1.0",
      "worker",
      "localhost:5000/worker:dev",
      "Registry.Example.com/team/worker",
      "a.b_c/x",
      "my-registry:443/a/b/c:v1.2_3",
      "worker@sha256:" + std::string(64, 'a'),
      "w:" + std::string(128, 't'),
      "repo/a__b/c--d/e.f",
      "Worker",
      "registry.example.com/Orrery/worker",
      "registry.example.com/orrery/worker:",
      "registry.example.com/orrery/worker:.x",
      "worker:" + std::string(129, 't'),
      "worker@sha256:abc",
      "worker@md5:" + std::string(32, 'a'),
      "worker@sha256:" + std::string(64, 'A'),
      " worker",
      "work er",
      "registry.example.com//worker",
      "-worker",
      "worker-",
      "a___b",
      "host:port/x",
      ":tag",
      "registry.example.com/orrery/worker:v1@sha512:" + std::string(128, '0')};
  for (const std::string& image : images) {
    EXPECT_EQ(Matches(kImagePattern, image), ImageReferenceProblem(image).empty()) << image;
  }
  const std::vector<std::string> keys = {"a",
                                         "orrery.dev/pool",
                                         "node.kubernetes.io/instance-type",
                                         "A_b.C-1",
                                         "x/" + std::string(63, 'n'),
                                         "",
                                         "/a",
                                         "a/",
                                         "a/b/c",
                                         "Orrery.dev/pool",
                                         "bad key",
                                         "-a",
                                         "a-",
                                         "x/" + std::string(64, 'n'),
                                         "a..b/c",
                                         "a_b/c",
                                         "under_score"};
  for (const std::string& key : keys) {
    EXPECT_EQ(Matches(kLabelKeyPattern, key), IsLabelKey(key)) << key;
    EXPECT_EQ(Matches(kTolerationKeyPattern, key), key.empty() || IsLabelKey(key)) << key;
  }
  const std::vector<std::string> values = {"",   "a",  "A-b_c.d", std::string(63, 'v'),
                                           "-a", "a.", "a b",     "ü"};
  for (const std::string& value : values) {
    // maxLength: 63 bounds a value's length beside the pattern.
    EXPECT_EQ(Matches(kLabelValuePattern, value), IsLabelValue(value)) << value;
  }
  const std::vector<std::string> resources = {"nvidia.com/gpu",
                                              "amd.com/gpu",
                                              "example.com/GPU_1",
                                              "gpu",
                                              "cpu",
                                              "kubernetes.io/gpu",
                                              "nvidia.com/",
                                              "/gpu",
                                              "Nvidia.com/gpu",
                                              "nvidia.com/gpu/x"};
  for (const std::string& name : resources) {
    // The pattern and the CEL rule against kubernetes.io/ and requests. together.
    bool crd = Matches(kExtendedResourcePattern, name) &&
               name.find("kubernetes.io/") == std::string::npos && name.rfind("requests.", 0) != 0;
    EXPECT_EQ(crd, IsExtendedResourceName(name)) << name;
  }
}

TEST(SchemaTest, LimitForFindsEveryLimit) {
  for (const Limit& l : kLimits) EXPECT_EQ(&LimitFor(l.path), &l);
  EXPECT_DEATH((void)LimitFor("spec.nope"), "");
}

TEST(SchemaTest, EnumParsingRoundTrips) {
  for (auto name : EnumNames<Template>::kNames)
    EXPECT_EQ(EnumName(*ParseEnum<Template>(name)), name);
  EXPECT_FALSE(ParseEnum<Template>("DDP").has_value());
  EXPECT_EQ(EnumNamesJoined<LrScaling>(), "none, linear, sqrt");
}

}  // namespace
}  // namespace orrery::api
