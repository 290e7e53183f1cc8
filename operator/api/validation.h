// Checks a ModelSelectionJob and reports every problem with its field path and a
// fix. The same rules back `orrery validate` and the operator; the CRD in crds/
// carries the subset an API server can check (bounds, enums, CEL cross-field
// rules) so a bad job is usually refused at `kubectl apply` already.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/field_error.h"
#include "operator/api/types.h"

namespace orrery::api {

// Every problem in the spec (after ApplyDefaults), including a search space that
// expands past kMaxExpandedTasks. Paths start with `spec`.
std::vector<FieldError> ValidateSpec(const ModelSelectionJobSpec& spec);
// apiVersion, kind, metadata.name, then the spec.
std::vector<FieldError> ValidateJob(const ModelSelectionJob& job);
// OK, or INVALID_ARGUMENT listing every problem.
Status CheckJob(const ModelSelectionJob& job);

// Name rules shared with expansion and the CLI.
bool IsDns1123Label(const std::string& s);      // [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63
bool IsDns1123Subdomain(const std::string& s);  // dot-separated labels, <= 253

// What goes into a worker pod, checked as the API server and the kubelet check
// it (schema.h's patterns say the same to the CRD).
bool IsLabelValue(const std::string& s);  // <= 63 of [A-Za-z0-9-_.], alphanumeric ends; or ""
// A qualified name: [DNS-1123 subdomain "/"] name, the name <= 63 of
// [A-Za-z0-9-_.] with alphanumeric ends.
bool IsLabelKey(const std::string& s);
// A label key with a prefix, outside kubernetes.io (the native resources'), as
// a container may request it.
bool IsExtendedResourceName(const std::string& s);
// What is wrong with a container image reference the kubelet would refuse to
// pull (InvalidImageName), or "" when it parses.
std::string ImageReferenceProblem(const std::string& image);
// What is wrong with an absolute path a worker pod mounts a volume at, or ""
// ("" for a path that is clean, absolute, not / and free of ':').
std::string MountPathProblem(const std::string& path);

}  // namespace orrery::api
