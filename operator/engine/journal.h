// The record of what the engine told a world to do and what the world did.
// Every world (simulator, local runner, controller) feeds the same journal:
// the engine's step records its actions (Issued), the world reports each
// launch and each stop it carries out (Launched, Stopped). A launch or a stop
// the latest step did not ask for is a violation: a world acting on its own
// judgement. (A failed gang, a lost node or a finished task ends by itself and
// is not a stop.) The journal is what the conformance suite compares across
// worlds, and what the report and the simulator print.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace orrery::engine {

struct ProfileStep;
struct StepResult;
struct WorldView;

struct JournalEntry {
  int step = 0;         // the engine step that issued it (1, 2, ...)
  double at = 0;        // world time of that step
  std::string trigger;  // what the step re-planned on; "" when it did not
  std::string kind;     // "launch" | "stop" | "profile"
  std::string task;
  // A launch's "<template> x<gpus>[ b<batch>]", a stop's reason, a profiling
  // trial's "<template> x<gpus> b<batch>".
  std::string detail;
};

class ActionJournal {
 public:
  // A step's actions, task names and configurations from `world`. What the
  // step before issued and the world did not do lapses (a launch that waited
  // for GPUs is issued again when they are free).
  void Issued(const StepResult& result, const WorldView& world);
  // A stop the cluster-wide share (engine/cluster_share.h) decided for the
  // job: issued and owed like an engine step's stop, with reason "share".
  void IssuedShareStop(const std::string& task, double at);
  // The world launched `task` in its configuration `config` (index into the
  // task's profile) / stopped it: a violation unless the latest step issued it.
  void Launched(const std::string& task, int config);
  void Stopped(const std::string& task);
  // The profiling trials a profile step (profile_step.h) started, kept apart
  // from the launches and stops (a world that holds every profile starts
  // none, so they are not what the worlds are compared on); what the step
  // before issued and the world did not start lapses. Profiling: the world
  // started the trial of `key`, a violation unless the latest step issued it.
  void IssuedProfiles(const ProfileStep& step, double at);
  void Profiling(const std::string& key);
  const std::vector<JournalEntry>& profiles() const { return profiles_; }

  const std::vector<JournalEntry>& entries() const { return entries_; }
  const std::vector<std::string>& violations() const { return violations_; }
  int steps() const { return steps_; }
  // Each task's actions in order ("launch ddp x4", "stop quota", ...): what the
  // conformance suite compares across worlds (up to timing).
  std::map<std::string, std::vector<std::string>> ByTask() const;
  // One line per entry, for logs and reports.
  std::string Text() const;

 private:
  int steps_ = 0;
  std::vector<JournalEntry> entries_;
  std::vector<std::string> violations_;
  std::map<std::string, int> owed_launch_;  // task -> configuration
  std::set<std::string> owed_stop_;
  std::vector<JournalEntry> profiles_;
  std::set<std::string> owed_profiles_;  // keys
};

}  // namespace orrery::engine
