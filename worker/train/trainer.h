// `orrery-worker train`: runs a task's steps under its template, with the
// learning-rate schedule, periodic checkpoints, a checkpoint on SIGTERM before
// exiting, resume from the newest usable checkpoint, and progress on stdout.
//
// Progress format (rank 0 only; one JSON object per line, parsed by the local
// runner and the Kubernetes controller; unknown keys must be ignored):
//   {"event":"start","world_size":4,"template":"hybrid","layout":"dp=2,tp=1,pp=2",
//    "model":"gpt","parameters":123456,"global_batch":8,"steps":100,
//    "resumed_from_step":null}
//   {"event":"progress","step":10,"steps":100,"epoch":0,"samples":80,"loss":3.21,
//    "lr":0.001,"step_time_s":0.012,"samples_per_s":640.0,"checkpoint":null}
//   {"event":"checkpoint","step":50,"path":"/ckpt/step-000000000050",
//    "reason":"periodic"|"signal"|"final","seconds":0.02,"bytes":123456,
//    "ranks":[{"bytes":..,"bytes_needed":..,"reads":0,"seconds":..,
//              "peak_rss_bytes":..,"rss_before_bytes":..}, ...one per rank]}
//   {"event":"restore","step":50,"path":"...",
//    "from_layout":"fsdp dp=4,tp=1,pp=1,fsdp=4","layout":"hybrid dp=1,tp=2,pp=2,fsdp=1",
//    "seconds":0.05,"bytes_read":..,"bytes_needed":..,
//    "ranks":[... as in "checkpoint", bytes = bytes read]}   (after "start", on a resume)
//   {"event":"done","status":"completed"|"preempted"|"failed","step":100,
//    "memory":[{"peak_rss_bytes":..,"rss_start_bytes":..}, ...one per rank],
//    "loss":1.05,"samples_per_s":655.1,"wall_s":1.6,"checkpoint":"/ckpt/..."|null,
//    "export":"/out/model"|null,"error":null|"UNAVAILABLE: ..."}
//   {"event":"export","path":"/out/model","dtype":"bfloat16","seconds":1.2}
//     (before "done", when --export-dir is set and the task completed)
// `orrery-worker train` prints {"event":"metrics","address":"127.0.0.1:41234"}
// before "start" when it serves /metrics (metrics_export.h).
// "step" counts completed optimizer steps; "samples" the samples consumed in
// total (since step 0, across resumes). samples_per_s is over the last report
// interval in progress lines and over this process's whole run in "done".
//
// Checkpoints go through worker/checkpoint's CheckpointStore and hold the whole
// training state as a tensor collection (live_state.h): parameters
// ("model/<name>"), optimizer state ("optim/<slot>/<name>", "optim/step"), the
// step, the schedule (base_lr and the global batch it belongs to, and
// ScheduleClock's position in samples; task.h), the dataset cursor (its
// position is the samples consumed) and each rank's CPU RNG state (blob
// "rng/cpu"; a resume restores rank 0's on every rank). Every rank writes the
// slices it owns under the running template into its own shard file and
// fsyncs it; when all have, rank 0 commits the metadata atomically. A resume
// under any layout has each rank read exactly the regions its own slices
// cover, checking the checksums of what it read (blocks read in part by
// several ranks are checked from their pieces together); a checkpoint that
// fails on any rank is skipped by all for the next older one.
//
// A resume at another global batch (elastic scaling, issue #10) continues the
// cursor at the exact sample it stopped at, rescales the checkpoint's base rate
// by --lr-scaling, and moves the schedule by samples rather than steps
// (ScheduleClock): the rate does not jump at the change and the schedule ends
// with the run's last step. --steps keeps counting steps from step 0 across the
// change; with --epochs, the steps that finish the epochs' samples.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <ostream>

#include "common/status.h"
#include "worker/dist/communicator.h"
#include "worker/train/state_io.h"
#include "worker/train/task.h"

namespace orrery::train {

class TrainRecorder;  // metrics_export.h

struct TrainResult {
  std::string status;  // completed | preempted
  int64_t step = 0;
  double loss = 0.0;
  std::vector<double> losses;  // every step this process ran
  std::string checkpoint;      // last checkpoint written or loaded, "" if none
  std::string exported;        // the Hugging Face directory written (--export-dir), or
  int64_t resumed_from_step = -1;
  double base_lr = 0.0;            // after any --lr-scaling on resume
  std::vector<double> lrs;         // the rate of every step this process ran
  std::vector<int64_t> positions;  // dataset cursor Position() before each step
  int64_t steps = 0;               // the run's budget in steps (from step 0)
  // Per rank (rank order): each save this process made, and the resume's load.
  std::vector<std::vector<StateIoStats>> saves;
  std::vector<StateIoStats> load;
  // Per rank: peak_rss_bytes over the run, rss_before_bytes when Train began.
  std::vector<StateIoStats> memory;
};

// How a task of an interleaved gang (gang.h) differs from a lone one: its
// strategy joins the gang's shared device instead of parallel::MakeStrategy
// making its own, and `ready` is called once the task is built and resumed,
// before its first step (it blocks until every task of the gang is: a joined
// member's host masters may be copied once any member steps).
struct TrainHooks {
  std::function<StatusOr<std::unique_ptr<parallel::Strategy>>(const TaskConfig&)> make_strategy;
  std::function<void()> ready;
};

// `stop` (may be null) is polled between steps; when any rank sees it set, all
// ranks checkpoint (if a directory is configured) and return "preempted".
// `metrics` (may be null; see metrics_export.h) gets every step's time, this
// rank's samples (its data-parallel share of the global batch) and loss, the
// throughput at each report, checkpoint saves and the resume's load, with the
// samples consumed at each.
StatusOr<TrainResult> Train(TaskConfig task, dist::Rendezvous* rendezvous, std::ostream& out,
                            const std::atomic<bool>* stop, TrainRecorder* metrics = nullptr,
                            const TrainHooks* hooks = nullptr);

}  // namespace orrery::train
