// See job_file.h.
#include "operator/cli/job_file.h"

#include <filesystem>

#include "operator/api/field_error.h"
#include "operator/api/paths.h"

namespace orrery::cli {

StatusOr<std::vector<JobDocument>> AnalyzeFile(const std::string& path) {
  ORRERY_ASSIGN_OR_RETURN(std::vector<api::Json> docs, api::ReadManifests(path));
  std::vector<JobDocument> out;
  for (size_t i = 0; i < docs.size(); ++i) out.push_back({path, i, api::AnalyzeJson(docs[i])});
  return out;
}

void PrintErrors(const JobDocument& doc, std::ostream& out) {
  const auto& errors = doc.analysis.errors;
  out << doc.file;
  if (doc.index > 0) out << " (document " << doc.index + 1 << ")";
  out << ": ModelSelectionJob";
  if (!doc.analysis.job.metadata.name.empty())
    out << " \"" << doc.analysis.job.metadata.name << "\"";
  out << " is invalid: " << errors.size() << (errors.size() == 1 ? " error\n" : " errors\n");
  for (const api::FieldError& e : errors) out << api::FormatFieldError(e) << "\n";
}

std::string JobBaseDir(const std::string& file, const std::vector<api::ExpandedTask>& tasks) {
  namespace fs = std::filesystem;
  std::vector<std::string> rel;
  auto relative = [&](const std::string& path) {
    if (!path.empty() && path[0] != '/') rel.push_back(path);
  };
  for (const auto& t : tasks) {
    const api::DataSpec& d = t.task.data;
    if (d.text) relative(d.text->path);
    if (d.text) relative(d.text->tokenizer);
    if (d.tokens) relative(d.tokens->path);
    if (t.task.model.torchscript) relative(t.task.model.torchscript->path);
    if (t.task.model.pretrained) relative(api::ModelDirectory(*t.task.model.pretrained));
  }
  fs::path dir = fs::absolute(fs::path(file)).parent_path();
  for (fs::path d = dir; !d.empty(); d = d.parent_path()) {
    bool all = true;
    for (const auto& r : rel) all = all && fs::exists(d / r);
    if (all) return d.string();
    if (d == d.root_path()) break;
  }
  return dir.string();
}

}  // namespace orrery::cli
