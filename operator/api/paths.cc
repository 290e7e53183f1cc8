// Model and output paths; see paths.h.
#include "operator/api/paths.h"

#include <vector>

namespace orrery::api {
namespace {

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

}  // namespace

std::string VolumePath(const std::string& path, const std::string& mount_path) {
  if (path.empty() || path.front() == '/') return path;
  std::string base = mount_path;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base == "/" ? "/" + path : base + "/" + path;
}

std::string ModelDirectory(const PretrainedModel& model) {
  return model.volume ? VolumePath(model.path, model.volume->mount_path) : model.path;
}

std::string OutputDirectory(const OutputSpec& output) {
  return output.volume ? VolumePath(output.path, output.volume->mount_path) : output.path;
}

std::string SubstituteTask(const std::string& path, const std::string& task) {
  std::string out = path;
  const std::string placeholder = kTaskPlaceholder;
  for (size_t at = out.find(placeholder); at != std::string::npos;
       at = out.find(placeholder, at + task.size())) {
    out.replace(at, placeholder.size(), task);
  }
  return out;
}

bool PathUnder(const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty() || path.front() != '/' || dir.front() != '/') return false;
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (d == "/") return true;
  return path == d ||
         (path.size() > d.size() && path.compare(0, d.size(), d) == 0 && path[d.size()] == '/');
}

bool HasUncleanComponent(const std::string& path) {
  std::vector<std::string> parts = Components(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    // A leading "/" gives an empty first component, a trailing one an empty last.
    if (p.empty() && i != 0 && i + 1 != parts.size()) return true;
    if (p == "." || p == "..") return true;
  }
  return false;
}

}  // namespace orrery::api
