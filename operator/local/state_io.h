// The state a task's gang moves: the worker's "checkpoint" and "restore"
// progress lines (worker/train/trainer.h) read into the report's records
// (report.h ReportStateIo), and the event line `orrery run` prints for a
// restore. A restore is where a rescale pays: each rank of the new layout reads
// the regions of the checkpoint its own slices cover, so the line says how many
// bytes were read against how many the ranks needed, how long it took and the
// largest rank's peak memory.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/local/report.h"

namespace orrery::local {

// A "checkpoint" line as a save, a "restore" line as a restore, stamped with
// `time_s` (run time); any other line, or one without an integer step, is
// nullopt. Totals are summed over the line's "ranks" when it carries them
// (bytes, bytes_needed) and taken from its own fields otherwise ("bytes" of a
// save, "bytes_read"/"bytes_needed" of a restore); fields of the wrong type
// count as absent (the worker's lines are parsed, not trusted).
std::optional<ReportStateIo> ParseStateIo(const nlohmann::json& line, double time_s);

// "lr-1e-3 re-sharded step 40 from dp=4,tp=1,pp=1,fsdp=4 into dp=1,tp=2,pp=2:
// read 12.3 MB of 12.3 MB needed in 0.08 s (peak RSS 210 MB)"; "restored step
// 40 in LAYOUT" when the layout did not change.
std::string RestoreEventText(const std::string& task, const ReportStateIo& restore);

// Appends `io` to a task's records, keeping at most `max_saves` saves (the
// oldest go first; restores are all kept): a long run with frequent periodic
// checkpoints keeps report.json small.
void AppendStateIo(std::vector<ReportStateIo>* records, ReportStateIo io, size_t max_saves = 200);

}  // namespace orrery::local
