// Reading job files for the CLI: every document of every file, decoded, defaulted,
// validated and expanded (operator/api/load.h), with the file named in errors.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/load.h"

namespace orrery::cli {

struct JobDocument {
  std::string file;
  size_t index = 0;  // document index within the file
  api::Analysis analysis;
};

// The file's documents; a file that cannot be read or parsed is an error.
StatusOr<std::vector<JobDocument>> AnalyzeFile(const std::string& path);

// Prints "FILE: ModelSelectionJob "name": N errors" and one line per error.
void PrintErrors(const JobDocument& doc, std::ostream& out);

// The folder relative paths of a job in `file` resolve against (data, TorchScript,
// pre-trained models and tokenizers not on a volume, outputs): the job file's
// folder or, the first that holds every input path, one of its parents
// (examples/ name files from the repository root).
std::string JobBaseDir(const std::string& file, const std::vector<api::ExpandedTask>& tasks);

}  // namespace orrery::cli
