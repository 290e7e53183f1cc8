// The one path from text to a checked job, shared by `orrery validate`, the local
// and simulated worlds and the Kubernetes controller: decode strictly, apply
// computed defaults, validate, expand. Decode errors and validation errors are
// reported together, so a user sees every problem in one go.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/api/field_error.h"
#include "operator/api/types.h"
#include "operator/api/yaml.h"

namespace orrery::api {

struct Analysis {
  ModelSelectionJob job;            // as decoded, with computed defaults applied
  std::vector<FieldError> errors;   // empty when the job is valid
  std::vector<ExpandedTask> tasks;  // filled only when the job is valid
  bool ok() const { return errors.empty(); }
};

Analysis AnalyzeJson(const Json& json);

struct LoadedJob {
  ModelSelectionJob job;
  std::vector<ExpandedTask> tasks;
};

// INVALID_ARGUMENT listing every problem when the job is not valid.
StatusOr<LoadedJob> LoadJob(const Json& json);
StatusOr<LoadedJob> LoadJobText(std::string_view yaml_or_json);

// Reads a file and returns its documents (YAML, possibly several, or JSON).
StatusOr<std::vector<Json>> ReadManifests(const std::string& path);

}  // namespace orrery::api
