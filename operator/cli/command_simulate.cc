// `orrery simulate WORKLOAD.yaml --policy P [--seed S] [--json F|-] [--svg F]`: the
// planner and engine on a simulated cluster (operator/sim), with baselines as
// policies, so a policy can be judged without a cluster.
#include "operator/cli/commands.h"
#include "operator/sim/simulate_command.h"

namespace {

int RunSimulate(orrery::cli::Invocation& in) {
  return orrery::sim::SimulateCommand(in.args, in.out, in.err);
}

}  // namespace

ORRERY_CLI_COMMAND(simulate, "simulate WORKLOAD.yaml [--policy P] [--seed S] [--svg F]",
                   "Run a workload on a simulated cluster against the baseline policies",
                   RunSimulate);
