// A problem found in a ModelSelectionJob, named by its field path the way the
// Kubernetes API server names it ("spec.tasks[2].training.batchSize"), with what is
// wrong and how to fix it. The codec, validation and expansion all report lists of
// these so a user sees every problem at once, not one per attempt.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::api {

struct FieldError {
  std::string path;     // "spec.tasks[2].training.batchSize"; "" for the document itself
  std::string message;  // "must be at least 1"
  std::string fix;      // "set a positive global batch size"; may be empty
  bool operator==(const FieldError&) const = default;
};

// "spec.tasks[2].training.batchSize: must be at least 1 (fix: ...)"
std::string FormatFieldError(const FieldError& error);

// OK when `errors` is empty; otherwise INVALID_ARGUMENT whose message starts with
// `what` and lists every error on its own line.
Status FieldErrorsToStatus(const std::vector<FieldError>& errors, const std::string& what);

// Path helpers: Child("spec", "tasks") == "spec.tasks", Index("spec.tasks", 2) ==
// "spec.tasks[2]", Key("spec.resources.nodeSelector", "a.b/c") uses [a.b/c].
std::string ChildPath(const std::string& parent, const std::string& field);
std::string IndexPath(const std::string& parent, size_t index);
std::string KeyPath(const std::string& parent, const std::string& key);

}  // namespace orrery::api
