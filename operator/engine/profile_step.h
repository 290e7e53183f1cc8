// The engine's Profile action: which profiling trials a world starts now. A
// task's configurations come from profiles (profile_configs.h); the keys its
// store lacks are wanted, and this step decides which of them run now and on
// which GPUs, the same in every world that profiles:
//   - one trial per key: tasks of one signature share it, and a key whose
//     trial already runs is not started twice;
//   - in the order wanted (a task's keys in build order, tasks in spec order);
//   - on GPUs free now, of a type the task may use (its profiled type when it
//     has one), all on one node when one has room, else spread in node order;
//     a trial that does not fit waits for a later step and never holds back a
//     smaller one behind it; at most `max_start` start;
//   - within `budget` GPUs for all trials together when set: a Kueue admission
//     counts trials against the GPUs it admitted, as it counts gangs.
// The controller turns each action into a profile gang (pods pinned to the
// placement, so their GPUs are counted like a gang's); the local runner runs
// them one after another on its devices. Pure: no I/O.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "operator/engine/profile_configs.h"

namespace orrery::engine {

// One key a task's store lacks.
struct ProfileWant {
  std::string task;  // the task that needs it (the first of its signature)
  std::string key;   // the trial's identity: equal keys are one trial
  std::string what;  // "<template> x<gpus> b<batch>", for the journal and events
  int gpus = 1;      // ranks of the trial
  // The GPU types it may run on (the task's profiled type, or the types its
  // spec allows); empty: any.
  std::vector<std::string> gpu_types;
};

struct ProfileNode {
  std::string name;
  std::string gpu_type;  // "" when unlabelled
  int free = 0;          // GPUs free now: used by no gang, trial or other job
};

struct ProfileRoom {
  std::vector<ProfileNode> nodes;  // in the order a placement fills them
  std::set<std::string> running;   // keys whose trial runs now
  int budget = -1;                 // GPUs all new trials may take together; < 0: no bound
  // Trials this step may start; < 0: no bound. A world that runs its trials
  // one at a time asks for one (the local runner: trials side by side would
  // share the host's cores and time each other), so each is placed as if alone.
  int max_start = -1;
};

struct ProfileAction {
  std::string task;
  std::string key;
  std::string what;
  int gpus = 1;
  std::vector<std::string> placement;  // one node name per rank
};

// How long a trial may run before every world ends it and stores its key as
// infeasible (a trial that hangs, or is too slow to plan with): the
// controller's profile gangs (activeDeadlineSeconds, ReconcilerOptions::
// profile_deadline_s) and the local runner's processes alike.
inline constexpr int64_t kProfileDeadlineS = 900;

struct ProfileStep {
  std::vector<ProfileAction> start;  // in the order wanted
  int running = 0;                   // wanted keys whose trial runs already
  int waiting = 0;                   // wanted keys with no room now (GPUs or budget)
};

ProfileStep StepProfiles(const std::vector<ProfileWant>& wants, const ProfileRoom& room);

// A trial as the journal and events name it: "<template> x<gpus> b<batch>".
std::string TrialText(const ProfileKeyRef& key);

// Nodes for `ranks` ranks among `nodes`' free GPUs: all on the first node with
// room, else spread in node order; empty when they do not fit.
std::vector<std::string> FirstFitPlacement(const std::vector<ProfileNode>& nodes, int ranks);

}  // namespace orrery::engine
