// How an interleaved gang of the plan (operator/planner/interleave.h) becomes
// one `orrery-worker gang` command line (worker/contract/gang_args.h): each
// member's `train` flags exactly as TrainFlags writes them for it alone (its
// own data, hyper-parameters, budget and checkpoint directory, so a gang that
// is stopped resumes each member from its own checkpoint, and a member can
// later run alone from it), named by --task, with the device and the spill
// budget the gang's. Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/expand.h"
#include "operator/engine/worker_command.h"

namespace orrery::engine {

struct GangMember {
  const api::ExpandedTask* task = nullptr;
  LaunchConfig config;  // template spill on one GPU; its device is the gang's
};

// Flags for `orrery-worker gang` (without the subcommand). `spill_budget_bytes`
// is the device memory the members share (> 0). INVALID_ARGUMENT, naming the
// member, for fewer than two members, a member whose configuration is not
// spill on one GPU, members on different devices, or two members sharing a
// checkpoint directory.
// `stop_file` (optional) is the gang's --stop-file: a line naming a member
// stops that member alone.
StatusOr<std::vector<std::string>> GangFlags(const std::vector<GangMember>& members,
                                             int64_t spill_budget_bytes,
                                             const std::string& stop_file = "");

}  // namespace orrery::engine
