// `orrery-worker checkpoint ...` (and the standalone `orrery-ckpt`): inspect and
// offline reshard of a checkpoint directory. Torch-free.
//
//   checkpoint inspect DIR [--no-verify] [--chunks] [--threads N]
//   checkpoint reshard DIR --to dp=2,tp=2,pp=1[,fsdp=1] OUT [--threads N] [--no-verify]
//
// The worker's main dispatches with RunCheckpointCommand(argc - 1, argv + 1), so
// argv[0] is "checkpoint" (or a program name) and argv[1] the subcommand.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace orrery::checkpoint {

// Returns the process exit code: 0 ok, 1 the checkpoint failed (bad, damaged),
// 2 usage error.
int RunCheckpointCommand(int argc, char** argv);
int RunCheckpointCommand(const std::vector<std::string>& args, std::ostream& out,
                         std::ostream& err);

}  // namespace orrery::checkpoint
