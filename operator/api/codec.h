// ModelSelectionJob <-> JSON and YAML. Decoding is strict like kubectl's: an
// unknown field, a wrong type or a missing required field is an error naming its
// path, and every such error is collected before returning. Encoding writes every
// field, so Decode(Encode(job)) == job. Metadata is the exception: fields Orrery
// does not read are kept verbatim (ObjectMeta::extra_json), because objects read
// from the API server carry many.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "operator/api/field_error.h"
#include "operator/api/types.h"
#include "operator/api/yaml.h"

namespace orrery::api {

// Decodes `json` into `job`, appending every problem to `errors`; fields that
// decode are filled even when others fail, so validation can still run on them.
void DecodeJob(const Json& json, ModelSelectionJob* job, std::vector<FieldError>* errors);

// Whole-object conveniences: INVALID_ARGUMENT listing every error.
StatusOr<ModelSelectionJob> JobFromJson(const Json& json);
StatusOr<ModelSelectionJob> JobFromJsonText(std::string_view text);
StatusOr<ModelSelectionJob> JobFromYaml(std::string_view text);

Json EncodeJob(const ModelSelectionJob& job);
Json EncodeSpec(const ModelSelectionJobSpec& spec);
Json EncodeStatus(const ModelSelectionJobStatus& status);
Json EncodeTask(const TaskSpec& task);
std::string JobToJson(const ModelSelectionJob& job, int indent = 2);
std::string JobToYaml(const ModelSelectionJob& job);

// The status alone, as the operator reads it back from the /status subresource.
void DecodeStatus(const Json& json, const std::string& path, ModelSelectionJobStatus* status,
                  std::vector<FieldError>* errors);

}  // namespace orrery::api
