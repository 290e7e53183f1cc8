// `orrery-worker gang`: one process trains several tasks interleaved on one
// device (Hydra's shard-level multi-model scheduling, Nagrecha & Kumar, VLDB
// 2023; worker/parallel/interleaved.h), each through train's ordinary path
// (trainer.h): its own model, data, optimizer, schedule, checkpoints in its own
// --checkpoint-dir, and a resume from its own newest checkpoint, so a killed
// gang restarted with the same command line resumes every task where it was.
// The command line is worker/contract/gang_args.h's.
//
// Each task runs Train on a thread of its own, its spill strategy joined to
// the gang's InterleavedDevice (one budget, one copier, one schedule of shard
// visits); every task is built and resumed before any steps. A task that
// finishes, fails or is stopped leaves the others running. SIGTERM stops all:
// each checkpoints and exits as train does.
//
// Not per task in a gang: /metrics (a gang serves none; --metrics-address and
// ORRERY_METRICS_ADDRESS are not read), and the CPU RNG state a checkpoint
// keeps (the process's one generator; no template draws from it today).
//
// Progress (stdout, one JSON object per line): train's lines of each task with
// "task":"NAME" added as their first key, and the gang's own:
//   {"event":"gang","tasks":["a","b"],"budget_bytes":..,"order":"auto","device":"cpu"}
//   {"event":"interleave",...}                  (interleaved.h, after the first round)
//   {"event":"gang_done","tasks":[{"task":"a","status":"completed"|"preempted"|"failed",
//    "error":null|".."},..],"busy_fraction":0.93,"turns":..,"peak_device_bytes":..}
#pragma once

#include <atomic>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/parallel/interleaved.h"
#include "worker/train/task.h"
#include "worker/train/trainer.h"

namespace orrery::train {

struct GangConfig {
  // Each a spill task on one device (strategy.name "spill", dp 1), named by
  // metrics.task; strategy.device is set by the caller (every task's the same).
  std::vector<TaskConfig> tasks;
  int64_t budget_bytes = 0;
  parallel::InterleaveOrder order = parallel::InterleaveOrder::kAuto;
  int64_t link_bytes_per_s = 0;
  std::string device = "cpu";  // --device as given, for the caller to resolve
};

// Parses `orrery-worker gang`'s argv (contract::ParseGangArgs) into each
// task's TaskConfig (ParseTaskFlags), its template spill and its budget the
// gang's. INVALID_ARGUMENT naming the flag and task.
StatusOr<GangConfig> ParseGangFlags(const std::vector<std::string>& args);

struct GangResult {
  std::vector<StatusOr<TrainResult>> tasks;  // in the config's order
  parallel::InterleavedStats stats;
  std::optional<parallel::InterleaveChoice> choice;
  bool ok() const;  // every task completed or was preempted
};

// Trains every task of the gang; `stop` (may be null) stops them all. An error
// only where the gang's device cannot be made; a task's failure is its result.
StatusOr<GangResult> TrainGang(const GangConfig& gang, std::ostream& out,
                               const std::atomic<bool>* stop);

}  // namespace orrery::train
