// See gang_command.h.
#include "operator/engine/gang_command.h"

#include "worker/contract/gang_args.h"
#include "worker/contract/worker_args.h"

namespace orrery::engine {

StatusOr<std::vector<std::string>> GangFlags(const std::vector<GangMember>& members,
                                             int64_t spill_budget_bytes,
                                             const std::string& stop_file) {
  if (members.size() < 2) {
    return InvalidArgumentError("an interleaved gang needs at least two tasks, got " +
                                std::to_string(members.size()));
  }
  contract::GangArgs gang;
  gang.spill_budget_bytes = spill_budget_bytes;
  if (!stop_file.empty()) gang.stop_file = stop_file;
  for (const GangMember& m : members) {
    const std::string& name = m.task->name;
    if (m.config.template_name != "spill" || m.config.gpus != 1) {
      return InvalidArgumentError("task " + name + " runs " + m.config.template_name + " on " +
                                  std::to_string(m.config.gpus) +
                                  " GPU(s); only spill on one GPU interleaves");
    }
    if (m.config.device != members.front().config.device) {
      return InvalidArgumentError("task " + name + " computes on '" + m.config.device +
                                  "', the gang's first task on '" + members.front().config.device +
                                  "'; a gang shares one device");
    }
    ORRERY_ASSIGN_OR_RETURN(contract::WorkerArgs args,
                            contract::ParseWorkerArgs(TrainFlags(*m.task, m.config)));
    args.task = name;
    args.device.reset();  // the gang's
    args.template_name.reset();
    gang.tasks.push_back(std::move(args));
  }
  if (!members.front().config.device.empty()) gang.device = members.front().config.device;
  // The worker's own checks (names, checkpoint directories, budget), before
  // any process starts.
  std::vector<std::string> flags = contract::ToGangArgs(gang);
  ORRERY_RETURN_IF_ERROR(contract::ParseGangArgs(flags).status());
  return flags;
}

}  // namespace orrery::engine
