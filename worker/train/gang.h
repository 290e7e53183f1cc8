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
// each checkpoints and exits as train does. One task is stopped alone by a
// line naming it in the --stop-file (GangConfig::stop_file, read every
// kStopFilePollMs), or through GangStops: it checkpoints at its next step
// boundary and ends "preempted", and the others run on.
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
#include <memory>
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
  std::string stop_file;       // --stop-file: "" for none
};

// How often a running gang reads its --stop-file.
inline constexpr int kStopFilePollMs = 100;

// The stop flag of each task of a gang, by name: Request stops one task alone
// (at its next step boundary), RequestAll every one.
class GangStops {
 public:
  explicit GangStops(std::vector<std::string> tasks);
  // False (and nothing stopped) when the gang has no task `task`.
  bool Request(const std::string& task);
  void RequestAll();
  const std::atomic<bool>* Flag(size_t i) const { return &flags_[i]; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::unique_ptr<std::atomic<bool>[]> flags_;
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

// Trains every task of the gang; `stop` (may be null) stops them all, `stops`
// (may be null; else made for the gang's tasks, in its order) each alone, as
// does a line of gang.stop_file. An error only where the gang's device cannot
// be made; a task's failure is its result.
StatusOr<GangResult> TrainGang(const GangConfig& gang, std::ostream& out,
                               const std::atomic<bool>* stop, GangStops* stops = nullptr);

}  // namespace orrery::train
