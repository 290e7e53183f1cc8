// Hydra's multi-model execution (Nagrecha & Kumar, "Hydra: A System for Large
// Multi-Model Deep Learning", 2022, its shard-level scheduling "SHARP"):
// several spilled models trained together on one device under one memory
// budget. Each task keeps its own model, data, optimizer and progress; its
// steps run through an ordinary spill strategy (sharded.cc), but the strategies
// share one device (budget, copier, prefetch slot) and take turns shard by
// shard, so that while one model's shard computes, the next shard in the
// group's schedule (of any model) is copied in. Each task's losses and
// parameters are those of training it alone under spill: only the order of
// the tasks' shard visits changes, never what a visit computes.
//
// The schedule orders one step of every task (a round) either
//   model_after_model  each task's whole step in turn (A0 A1 .. B0 B1 ..), or
//   round_robin        visit by visit across tasks (A0 B0 A1 B1 ..),
// chosen from the first round, which runs model after model without
// prefetching and measures every visit's copy and compute time: the order
// whose predicted round time (PredictRoundSeconds) is shorter wins, a tie
// going to model_after_model (fewer activations alive at once). Round robin
// wins when the tasks differ, a compute-heavy shard hiding a copy-heavy
// task's transfer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/parallel/strategy.h"

namespace orrery::parallel {

namespace internal {
class ShardGroup;
}

enum class InterleaveOrder { kAuto, kRoundRobin, kModelAfterModel };

std::string InterleaveOrderName(InterleaveOrder order);

// compute[t][v], copy[t][v]: seconds of visit v of task t's step. The round's
// time when each visit's copy starts as the previous slot starts computing
// (double buffering over one copier) and a slot computes once its copy is in
// and the previous slot is done.
double PredictRoundSeconds(const std::vector<std::vector<double>>& compute,
                           const std::vector<std::vector<double>>& copy, InterleaveOrder order);

// The order chosen, and why (the worker's "interleave" event).
struct InterleaveChoice {
  InterleaveOrder order = InterleaveOrder::kModelAfterModel;
  bool forced = false;  // set by the caller rather than measured
  std::vector<std::string> tasks;
  std::vector<double> compute_s, copy_s;              // per task: one step's visits, summed
  double round_robin_s = 0, model_after_model_s = 0;  // predicted round time
  // {"event":"interleave","order":"round_robin","forced":false,"tasks":[..],
  //  "compute_s":[..],"copy_s":[..],"predicted_round_s":{"round_robin":..,
  //  "model_after_model":..}}
  std::string ToJson() const;
};

struct InterleavedStats {
  double busy_s = 0;  // turns' time not spent waiting on copies
  double wait_s = 0;  // turns' time waiting on copies
  int64_t turns = 0;
  int64_t peak_device_bytes = 0;
  int64_t budget_bytes = 0;
  double busy_fraction() const { return busy_s / std::max(busy_s + wait_s, 1e-12); }
};

class InterleavedDevice {
 public:
  // `budget_bytes` is the device memory all tasks' resident shards share;
  // kAuto measures the first round and chooses.
  // `link_bytes_per_s`: StrategyConfig::spill_link_bytes_per_s.
  static StatusOr<std::shared_ptr<InterleavedDevice>> Create(
      c10::Device device, int64_t budget_bytes, InterleaveOrder order = InterleaveOrder::kAuto,
      int64_t link_bytes_per_s = 0);
  ~InterleavedDevice();

  // A spill strategy for `task` on this device: `config` must name spill on
  // this device; its budget is the device's. Single process (no data
  // parallelism). The strategy leaves the group when destroyed. Its Step()
  // must run on a thread of its own, while the other members step on theirs.
  StatusOr<std::unique_ptr<Strategy>> Join(const std::string& task, const model::ModelConfig& mc,
                                           StrategyConfig config, const OptimizerConfig& opt);

  std::optional<InterleaveChoice> choice() const;
  // Called once, on the thread whose turn completes the first round.
  void OnChoice(std::function<void(const InterleaveChoice&)> f);
  InterleavedStats stats() const;

 private:
  explicit InterleavedDevice(std::shared_ptr<internal::ShardGroup> group);
  std::shared_ptr<internal::ShardGroup> group_;
};

// One task of TrainInterleaved: steps [start_step, steps) on batch(step).
struct InterleavedTask {
  std::string name;
  model::ModelConfig model;
  StrategyConfig strategy;  // spill; device and budget come from the device
  OptimizerConfig optimizer;
  std::function<model::Batch(int64_t step)> batch;
  int64_t start_step = 0;
  int64_t steps = 0;
  // A checkpoint to resume from (both empty: the model's initial parameters).
  model::NamedTensors params, optimizer_state;
  // Polled after each step: true stops the task there (the others go on).
  std::function<bool(int64_t step)> stop;
};

struct InterleavedResult {
  Status status;
  std::string outcome;  // completed | stopped | failed
  int64_t step = 0;     // steps completed (from step 0)
  std::vector<double> losses;
  // The task's state when it ended: what a checkpoint holds.
  model::NamedTensors params, optimizer_state;
};

// Trains every task on `device`, each on its own thread; a task that ends
// (finished, stopped or failed) leaves the others running.
std::vector<InterleavedResult> TrainInterleaved(InterleavedDevice& device,
                                                const std::vector<InterleavedTask>& tasks);

}  // namespace orrery::parallel
