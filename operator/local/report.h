// The report `orrery run` writes to its work directory when it stops (finished,
// interrupted or failed): report.html, one self-contained page (inline SVG and
// CSS, no scripts or fetches) with the Gantt chart of what actually ran against
// what was planned, per-task loss curves, the configurations chosen, the
// profiling results and the events; and report.json with the same figures, which
// a resumed run reads back to continue the record. Pure: strings in, strings out.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace orrery::local {

// One bar: a gang of worker processes on some devices for a while. Times are
// seconds since the run (the first `orrery run` of this work directory) began.
struct ReportBar {
  std::string task;
  std::vector<int> devices;  // local device indices (lanes)
  double start_s = 0;
  double end_s = 0;
  std::string template_name;
  int gpus = 0;
  int batch_size = 0;
  // Actual bars: completed | interrupted | device-lost | rescaled | failed | running.
  // Planned bars: "".
  std::string ended_by;
  std::string gpu_type = {};  // its devices' GPU type; "" = untyped devices
  // The interleaved gang it ran (or is planned to run) in, "a+b": one
  // `orrery-worker gang` process on its device shared with the other members.
  // Empty: it ran alone.
  std::string gang = {};
};

struct ReportLossPoint {
  int64_t step = 0;
  double loss = 0;
  double time_s = 0;
};

// A checkpoint save or a restore of a task, as its rank 0 reported it (the
// worker's "checkpoint" and "restore" lines: worker/train/trainer.h). A restore
// into another layout than the one that wrote the checkpoint is a re-shard:
// each rank read only the regions its new slices cover.
struct ReportStateIo {
  std::string op;  // save | restore
  double time_s = 0;
  int64_t step = 0;
  std::string reason;        // save: periodic | signal | final; restore: ""
  std::string from_layout;   // restore: the layout that wrote the checkpoint; save: ""
  std::string layout;        // the layout that wrote (save) or read (restore) it; "" unknown
  int64_t bytes = 0;         // written (save) or read (restore), summed over ranks
  int64_t bytes_needed = 0;  // the state the ranks needed, summed over ranks
  double seconds = 0;
  int64_t peak_rss_bytes = 0;  // the largest rank's peak resident memory
  int ranks = 0;               // ranks reported
};

struct ReportTask {
  std::string name;
  std::string source;                                      // the spec task it was expanded from
  std::vector<std::pair<std::string, std::string>> hyper;  // {"learningRate", "0.001"}
  std::string state;          // pending | profiling | running | completed | failed | interrupted
  std::string template_name;  // the configuration it last ran (or is planned) in
  int gpus = 0;
  int batch_size = 0;
  int64_t steps_done = 0;
  int64_t steps_total = 0;
  double final_loss = 0;     // last reported loss; 0 before the first report
  double samples_per_s = 0;  // measured over its last run
  int restarts = 0;          // rescales and resumes
  std::vector<ReportLossPoint> losses;
  // Saves and restores in order (report.json "state_io"; absent in a report of
  // an older Orrery: none).
  std::vector<ReportStateIo> state_io;
  // The Hugging Face directory the worker exported the trained model to (its
  // "export" line; a LoRA run's adapter, the merged model in <dir>/merged), ""
  // when none (report.json "export", absent in a report of an older Orrery).
  std::string export_path;
  std::string gpu_type = {};  // the GPU type it last ran (or is planned) on; "" = untyped
};

struct ReportProfile {
  std::string signature;  // the model signature the cache is keyed by
  std::string tasks;      // the tasks it stands for, comma-separated
  std::string template_name;
  int gpus = 0;
  int batch_size = 0;
  double samples_per_s = 0;
  double step_time_s = 0;
  double peak_memory_mib = 0;  // parameter (and gradient) state per GPU
  bool from_cache = false;     // reused, not measured in this run
  // The measured peak of all allocated bytes per GPU and the recomputation
  // mode it was measured in (contract::ProfileEntry); 0 and "" where the
  // profile predates them (report.json "device_allocated_mib", "recompute").
  double device_allocated_mib = 0;
  std::string recompute = {};
};

struct ReportPlan {
  double at_s = 0;  // when it was adopted
  std::string trigger;
  std::string planner;
  double makespan_s = 0;  // estimated, from the run's start
  double lower_bound_s = 0;
  double gap = 0;
  double solve_s = 0;
  // Whether lower_bound_s (and gap) bound the makespan; false under the
  // weightedCompletionTime objective, whose bound is on the sum of weight x
  // completion time: no duration to show beside the makespan.
  bool makespan_bound = true;
};

struct ReportEvent {
  double time_s = 0;
  std::string text;
};

// One action of the engine, as its journal recorded it (engine/journal.h).
struct ReportAction {
  double time_s = 0;
  std::string kind;  // launch | stop
  std::string task;
  std::string detail;   // "<template> x<gpus>[ b<batch>]" | the stop's reason
  std::string trigger;  // the re-plan that issued it; "" when none
};

struct RunReport {
  std::string job;
  std::string devices;  // as given: "cpu:2"
  int device_count = 0;
  // Each device's GPU type (--devices cpu:2=big+cpu:2=small); empty: untyped.
  std::vector<std::string> device_types = {};
  std::string started_at;  // RFC 3339, UTC
  double wall_s = 0;       // elapsed at the time of writing
  std::string outcome;     // completed | interrupted | failed | running
  std::vector<ReportTask> tasks;
  std::vector<ReportBar> planned;  // the latest adopted plan
  std::vector<ReportBar> actual;
  std::vector<ReportProfile> profiles;
  std::vector<ReportPlan> plans;  // every adopted plan, in order
  std::vector<ReportEvent> events;
  // Every launch and stop the engine issued, in order (this invocation's), and
  // any the runner took without it (none, or the runner is wrong).
  std::vector<ReportAction> actions;
  std::vector<std::string> violations;
};

// Colour of the i-th task (the same in every chart of the page and in the
// terminal): a fixed palette of distinct hues, as "#rrggbb".
std::string TaskColour(size_t index);

// "0 B", "950 B", "12.3 MB", "1.25 GB" (decimal units, 3 significant digits).
std::string FormatBytes(int64_t bytes);

std::string ReportHtml(const RunReport& report);
std::string ReportJson(const RunReport& report);
StatusOr<RunReport> ReportFromJson(const std::string& text);

}  // namespace orrery::local
