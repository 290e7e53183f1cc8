// Where a task's pre-trained model and trained output lie as its workers see
// them. A volume-backed path may be written relative to the volume (`gpt2` on a
// claim mounted at /models is /models/gpt2) or absolute under its mount path;
// without a volume the path is used as written (a relative one is resolved by
// the world that launches the worker: engine/worker_command.h). Pure.
#pragma once

#include <string>

#include "operator/api/types.h"

namespace orrery::api {

// The placeholder for the expanded task's name in output.path.
inline constexpr const char* kTaskPlaceholder = "{task}";

// `path` inside a volume mounted at `mount_path`: a relative path joined to it,
// an absolute one unchanged.
std::string VolumePath(const std::string& path, const std::string& mount_path);

// The Hugging Face directory of a pre-trained model as the worker opens it.
std::string ModelDirectory(const PretrainedModel& model);

// The folder an output spec names, with {task} as written (expansion replaces
// it: use the expanded task's output).
std::string OutputDirectory(const OutputSpec& output);

// `path` with every {task} replaced by `task`.
std::string SubstituteTask(const std::string& path, const std::string& task);

// Whether absolute `path` is `dir` or lies under it, compared component by
// component without touching the file system ("/models2" is not under "/models").
bool PathUnder(const std::string& path, const std::string& dir);

// Whether `path` has a "." or ".." component or an empty one ("a//b"): what
// may not appear in a mount path or in a path inside a volume.
bool HasUncleanComponent(const std::string& path);

}  // namespace orrery::api
