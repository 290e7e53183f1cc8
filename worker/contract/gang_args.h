// The `orrery-worker gang` command line: one process trains several tasks
// interleaved on one device (Hydra's shard-level multi-model scheduling;
// worker/parallel/interleaved.h, worker/train/gang.h):
//
//   orrery-worker gang --spill-budget-bytes N [--interleave-order auto|round_robin|
//                      model_after_model] [--device cpu|cuda] [--spill-link-bytes-per-s N]
//                      [--stop-file PATH] -- [task A's flags] -- [task B's flags] ...
//
// --stop-file names a file the gang reads while it runs: each line naming one
// of its tasks stops that task alone (it checkpoints and ends "preempted"),
// the others run on. The file need not exist; a caller appends task names to
// it (one per line) and gives each gang a path of its own.
//
// Each task's flags are a `train` command line (worker_args.h, written by
// ToArgs, so a task's part is byte for byte what it would be alone); the gang
// flags come before the first "--". Every task names itself with --task
// (distinct), runs the spill template (--template spill, or unset) with
// dp=1, and leaves the device and the spill budget to the gang, which they
// share. Each keeps its own model, data, optimizer, schedule, checkpoint
// directory (distinct where set) and progress lines.
//
// Torch-free: the operator links it without LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/contract/worker_args.h"

namespace orrery::contract {

// The orders interleaved.h's InterleaveOrder names, "auto" first (the default).
inline constexpr const char* kInterleaveOrders = "auto|round_robin|model_after_model";

struct GangArgs {
  std::optional<int64_t> spill_budget_bytes;    // the device memory the tasks share
  std::optional<std::string> interleave_order;  // kInterleaveOrders
  std::optional<std::string> device;            // cpu | cuda
  std::optional<int64_t> spill_link_bytes_per_s;
  std::optional<std::string> stop_file;  // per-task stop requests, one name a line
  std::vector<WorkerArgs> tasks;

  bool operator==(const GangArgs&) const = default;
};

// "--name=value" for each gang flag set, then "--" and ToArgs(task) per task.
std::vector<std::string> ToGangArgs(const GangArgs& gang);

// Parses argv without the program and subcommand. INVALID_ARGUMENT naming the
// flag (and the task, by position and name) for: an unknown gang flag, no
// budget, fewer than two tasks, a task without --task or two with the same
// one, two tasks with the same --checkpoint-dir, a task's --template other
// than spill, its own --device, --spill-budget-bytes, --no-double-buffer or
// --metrics-address (a gang serves no /metrics),
// a layout with dp > 1, and whatever ParseWorkerArgs rejects in a task.
StatusOr<GangArgs> ParseGangArgs(const std::vector<std::string>& argv);

// One line per gang flag, for the worker's --help.
std::string GangFlagsHelp();

}  // namespace orrery::contract
