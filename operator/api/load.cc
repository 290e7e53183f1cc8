// Text -> checked job; see load.h.
#include "operator/api/load.h"

#include <fstream>
#include <sstream>

#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/validation.h"

namespace orrery::api {

Analysis AnalyzeJson(const Json& json) {
  Analysis a;
  DecodeJob(json, &a.job, &a.errors);
  ApplyDefaults(&a.job.spec);
  // Validation runs even after decode errors: it reports other problems too.
  // Its "required value" for a field the decoder already flagged would repeat it.
  for (FieldError& e : ValidateJob(a.job)) {
    bool duplicate = false;
    for (const FieldError& d : a.errors) duplicate = duplicate || d.path == e.path;
    if (!duplicate) a.errors.push_back(std::move(e));
  }
  if (a.errors.empty()) {
    // ValidateJob has already run the expansion's checks.
    (void)ExpandTasks(a.job.spec, &a.tasks);
  }
  return a;
}

StatusOr<LoadedJob> LoadJob(const Json& json) {
  Analysis a = AnalyzeJson(json);
  std::string name = a.job.metadata.name.empty() ? "" : " " + a.job.metadata.name;
  ORRERY_RETURN_IF_ERROR(FieldErrorsToStatus(a.errors, "invalid ModelSelectionJob" + name));
  return LoadedJob{std::move(a.job), std::move(a.tasks)};
}

StatusOr<LoadedJob> LoadJobText(std::string_view yaml_or_json) {
  ORRERY_ASSIGN_OR_RETURN(Json json, ParseJsonOrYaml(yaml_or_json));
  return LoadJob(json);
}

StatusOr<std::vector<Json>> ReadManifests(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    auto json = ParseJson(text);
    if (!json.ok()) return json.status().WithContext(path);
    return std::vector<Json>{std::move(json).value()};
  }
  auto docs = YamlToJsonDocuments(text);
  if (!docs.ok()) return docs.status().WithContext(path);
  if (docs->empty()) return InvalidArgumentError(path + ": no YAML document in the file");
  return std::move(docs).value();
}

}  // namespace orrery::api
