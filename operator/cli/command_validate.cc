// `orrery validate FILE...`: the checks the operator runs, on this machine.
// Prints every problem with its field path and fix and exits 1, or a summary of
// the job (tasks after expansion, GPU bounds) and exits 0.
#include <ostream>
#include <set>

#include "operator/api/schema.h"
#include "operator/cli/commands.h"
#include "operator/cli/job_file.h"

namespace orrery::cli {
namespace {

void PrintSummary(const JobDocument& doc, std::ostream& out) {
  const api::ModelSelectionJob& job = doc.analysis.job;
  const api::ResourcesSpec& r = job.spec.resources;
  out << doc.file;
  if (doc.index > 0) out << " (document " << doc.index + 1 << ")";
  out << ": ModelSelectionJob \"" << job.metadata.name << "\" is valid\n";
  out << "  tasks:         " << doc.analysis.tasks.size() << " after expansion (from "
      << job.spec.tasks.size() << " in spec)\n";
  out << "  gpus per task: " << r.gpus_per_task.min << "-" << r.gpus_per_task.max << " "
      << r.gpu_resource_name << ", job quota " << r.gpu_quota << "\n";
  out << "  templates:     ";
  for (size_t i = 0; i < r.templates.size(); ++i)
    out << (i ? ", " : "") << api::EnumName(r.templates[i]);
  out << "\n  objective:     " << api::EnumName(job.spec.scheduling.objective) << "\n";
  out << "  elasticity:    " << (job.spec.elasticity.enabled ? "on" : "off") << "\n";
  if (job.spec.suspend) out << "  suspended:     yes\n";
}

int RunValidate(Invocation& in) {
  if (WantsHelp(in.args)) {
    in.out
        << "Usage: orrery validate FILE...\n\n"
           "Checks each ModelSelectionJob in the files (YAML, several documents allowed, or JSON)\n"
           "with the operator's own rules. Prints every problem as\n"
           "  spec.tasks[2].training.batchSize: must be at least 1 (fix: ...)\n"
           "and exits 1, or prints a summary and exits 0.\n";
    return kExitOk;
  }
  if (in.args.empty()) {
    in.err << "orrery validate: missing FILE\nUsage: orrery validate FILE...\n";
    return kExitUsage;
  }
  int exit_code = kExitOk;
  for (const std::string& file : in.args) {
    auto docs = AnalyzeFile(file);
    if (!docs.ok()) {
      in.out << docs.status().message() << "\n";
      exit_code = kExitInvalid;
      continue;
    }
    for (const JobDocument& doc : *docs) {
      if (doc.analysis.ok()) {
        PrintSummary(doc, in.out);
      } else {
        PrintErrors(doc, in.out);
        exit_code = kExitInvalid;
      }
    }
  }
  return exit_code;
}

}  // namespace
}  // namespace orrery::cli

ORRERY_CLI_COMMAND(validate, "validate FILE...",
                   "Check job files and report every problem with its fix",
                   orrery::cli::RunValidate);
