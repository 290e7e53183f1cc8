// See job_file.h.
#include "operator/cli/job_file.h"

#include "operator/api/field_error.h"

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

}  // namespace orrery::cli
