#include "operator/engine/profile_step.h"

#include <algorithm>

#include "operator/api/types.h"

namespace orrery::engine {

std::vector<std::string> FirstFitPlacement(const std::vector<ProfileNode>& nodes, int ranks) {
  if (ranks <= 0) return {};
  for (const ProfileNode& n : nodes) {  // one node when one has room: no cross-node traffic
    if (n.free >= ranks) return std::vector<std::string>(static_cast<size_t>(ranks), n.name);
  }
  std::vector<std::string> placement;
  for (const ProfileNode& n : nodes) {
    for (int i = 0; i < n.free && static_cast<int>(placement.size()) < ranks; ++i) {
      placement.push_back(n.name);
    }
  }
  if (static_cast<int>(placement.size()) < ranks) return {};
  return placement;
}

std::string TrialText(const ProfileKeyRef& key) {
  return std::string(api::EnumName(key.template_)) + " x" + std::to_string(key.gpus) + " b" +
         std::to_string(key.batch_size);
}

ProfileStep StepProfiles(const std::vector<ProfileWant>& wants, const ProfileRoom& room) {
  ProfileStep step;
  std::vector<ProfileNode> nodes = room.nodes;
  int budget = room.budget;
  std::set<std::string> seen;
  for (const ProfileWant& w : wants) {
    if (!seen.insert(w.key).second) continue;  // one trial serves every task of the key
    if (room.running.count(w.key) > 0) {
      ++step.running;
      continue;
    }
    if ((room.max_start >= 0 && static_cast<int>(step.start.size()) >= room.max_start) ||
        (budget >= 0 && w.gpus > budget)) {
      ++step.waiting;
      continue;
    }
    std::vector<ProfileNode> typed;
    for (const ProfileNode& n : nodes) {
      if (planner::AllowsGpuType(w.gpu_types, n.gpu_type)) {
        typed.push_back(n);
      }
    }
    std::vector<std::string> placement = FirstFitPlacement(typed, w.gpus);
    if (placement.empty()) {
      ++step.waiting;
      continue;
    }
    for (const std::string& node : placement) {
      for (ProfileNode& n : nodes) n.free -= n.name == node ? 1 : 0;
    }
    if (budget >= 0) budget -= w.gpus;
    step.start.push_back({w.task, w.key, w.what, w.gpus, std::move(placement)});
  }
  return step;
}

}  // namespace orrery::engine
