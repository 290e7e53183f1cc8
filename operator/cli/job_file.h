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

}  // namespace orrery::cli
