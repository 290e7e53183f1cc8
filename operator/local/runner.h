// The local world: `orrery run` on one machine. It runs the same engine and
// planner as the operator, with worker processes in place of pods (one process
// per device, a gang per task, rendezvous through a file store) and a work
// directory in place of the checkpoint volume:
//
//   WORKDIR/job.json           the job as run (a resume must run the same job)
//   WORKDIR/report.json|html   the record (report.h), rewritten as the run goes
//   WORKDIR/checkpoints/TASK/  each task's checkpoints (worker/checkpoint)
//   WORKDIR/logs/TASK.N.rR.log each launch's stderr, per rank
//   WORKDIR/control            lines "fail DEV", "restore DEV", "quota GPUS" act on a
//                              live run (the last edits the job's gpuQuota)
//
// Flow: profile every model signature not in the profile cache under each
// allowed template and GPU count (and, for an elastic job, each global batch the
// task may run at: engine/profile_configs.h); ask the engine for a plan; launch gangs in each
// device's planned order as devices free up; read progress; re-plan when a task
// finishes, throughput drifts, the interval passes or devices are lost or come
// back; rescale a running task (checkpoint, relaunch in its new configuration)
// when an adopted plan changes it. Spilled tasks the plan puts in an
// interleaved gang (engine::LaunchAction::interleaved) run in one
// `orrery-worker gang` process on their device, each with its own progress
// and checkpoints; one that completes leaves the others running. A lost
// device kills its gang at once (what a dead GPU does); the task restarts
// from its last checkpoint on what remains. Stop (Ctrl-C) asks every gang to
// checkpoint, waits, writes the report and exits; the same command resumes
// from the work directory.
#pragma once

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/api/load.h"
#include "operator/engine/engine.h"

namespace orrery::local {

struct DeviceSet {
  std::string kind = "cpu";  // cpu | cuda
  std::vector<int> ids;      // cuda ordinals; 0..n-1 for cpu
  std::string text;          // as given
  // Each device's GPU type (by index, as ids), or empty: one untyped pool.
  std::vector<std::string> types = {};
  // The GPU types in the order they were first given ({""} when untyped): the
  // local world's nodes, one per type.
  std::vector<std::string> Pools() const;
  const std::string& TypeOf(size_t device) const;  // "" when untyped
};
// "cpu:2", "cpu" (= cpu:1), "cuda:0-7", "cuda:0,2,3"; with GPU types, groups
// joined by '+', each "DEVICES=TYPE": "cpu:2=big+cpu:2=small" (cpu devices
// numbered on across groups: 0-1 big, 2-3 small), "cuda:0-3=H100+cuda:4-7=L4".
// Every group names a type and all are of one kind; a type is a node label
// value (letters, digits, '-', '_', '.').
StatusOr<DeviceSet> ParseDevices(const std::string& text);

struct DeviceEvent {
  double at_s = 0;  // seconds after this invocation's first task starts
  int device = 0;   // index into the device set
  bool fail = true;
};
// "T:DEV" (e.g. "30:1").
StatusOr<DeviceEvent> ParseFailDevice(const std::string& text);

struct RunOptions {
  DeviceSet devices;
  std::string workdir;
  std::string worker;         // path of orrery-worker
  std::string profile_cache;  // path of the cache file
  std::string job_dir;        // relative data paths are resolved against it
  std::vector<DeviceEvent> device_events;
  bool tty = false;          // redraw progress bars in place
  double tick_s = 0.1;       // polling period
  int report_every = 10;     // steps between worker progress lines
  double switch_cost_s = 5;  // checkpoint + relaunch of a local gang
  // Behaves as on Ctrl-C once any task reports this step (for tests and demos of
  // resuming); < 0: never.
  int64_t stop_at_step = -1;
  const std::atomic<bool>* stop = nullptr;  // set by the caller's signal handler
};

// The engine's options `orrery run` runs `job` under: the job's
// spec.scheduling over this world's own (its switch cost), with interleaved
// gangs of spilled tasks offered where the plan finds them sooner. The
// simulator takes these to decide as `orrery run` does.
engine::EngineOptions RunEngineOptions(const api::LoadedJob& job, const RunOptions& options);

// Exit codes: 0 every task completed; 1 a task failed or the input is wrong;
// 130 interrupted (resumable).
int RunJob(const api::LoadedJob& job, const RunOptions& options, std::ostream& out,
           std::ostream& err);

}  // namespace orrery::local
