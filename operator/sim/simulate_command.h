// `orrery simulate WORKLOAD.yaml --policy P [--seed S] [--json FILE] [--svg FILE]`:
// reads a workload file, runs the simulator and prints the table (and JSON to
// stdout with --json -). Policies are planner names; a "-static" suffix turns
// re-planning off (plans only at start, arrivals and capacity changes).
// `orrery simulate --elastic TRACE.yaml [--policy elastic|gpu-only|static|all]
// [--jobs-csv FILE] [--decisions FILE|-]` runs an elastic trace (elastic_trace.h)
// under the autoscaler and its baselines and prints one row per policy.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace orrery::sim {

// Returns a process exit code: 0 ok, 1 failure, 2 usage.
int SimulateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace orrery::sim
