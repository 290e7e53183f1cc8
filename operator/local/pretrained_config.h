// A pre-trained model's config.json as this machine sees it, for what needs
// the model's size or family before a worker opens it: `orrery plan`'s
// estimates (engine/estimate.h) and the checks validation cannot make without
// the file (CheckAgainstPretrained). In a cluster the file may be on a volume
// only the worker pods mount: unreadable here is then no error, only an
// estimate that waits for a profile.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/api/field_error.h"
#include "operator/api/types.h"
#include "operator/engine/estimate.h"

namespace orrery::local {

struct PretrainedConfig {
  std::string path;  // <model directory>/config.json, resolved as the local runner would
  std::optional<engine::PretrainedShape> shape;  // when read and understood
  // Why it was not read ("" when it was): no such file (and, for a model on a
  // volume, that this machine does not mount the claim).
  std::string unreadable;
  // A file that exists but is no config.json Orrery understands: an error the
  // worker would stop at too.
  Status error;
};

// Where this machine sees a claim's files: claim name -> local folder (its
// root, what the pods see at the mount path), e.g. from `orrery plan --volume`.
using ClaimFolders = std::map<std::string, std::string>;

// Reads the config.json of `model`: a model on a claim listed in `claims` from
// that folder, others where the workers would read it (relative paths resolved
// against `base_dir`, as engine::TrainFlags resolves them for the local runner).
PretrainedConfig ReadPretrainedConfig(const api::PretrainedModel& model,
                                      const std::string& base_dir, const ClaimFolders& claims = {});

// Every expanded task's pre-trained model read and checked against what the
// task asks of it (engine::CheckAgainstPretrained, errors named by the spec
// task they came from, each once). A config.json that exists but cannot be used
// is an error; one that cannot be read is an error too when `require_readable`
// (`orrery run`, whose workers open it on this machine), else not (`orrery
// plan`, for a cluster whose pods mount what this machine may not).
std::vector<api::FieldError> CheckPretrainedModels(const std::vector<api::ExpandedTask>& tasks,
                                                   const std::string& base_dir,
                                                   bool require_readable,
                                                   const ClaimFolders& claims = {});

}  // namespace orrery::local
