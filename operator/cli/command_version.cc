// `orrery version`: the build's version and the API version it speaks.
#include <ostream>

#include "operator/api/types.h"
#include "operator/cli/commands.h"

namespace {

int RunVersion(orrery::cli::Invocation& in) {
  in.out << "orrery " << ORRERY_VERSION << " (API " << orrery::api::kApiVersion << ", kind "
         << orrery::api::kKind << ")\n";
  return orrery::cli::kExitOk;
}

}  // namespace

ORRERY_CLI_COMMAND(version, "version", "Print the version", RunVersion);
