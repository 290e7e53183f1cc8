#include "operator/engine/journal.h"

#include <cstdio>

#include "operator/engine/engine.h"
#include "operator/engine/profile_step.h"

namespace orrery::engine {

namespace {
std::string ConfigText(const TaskView& v, int config) {
  if (config < 0 || static_cast<size_t>(config) >= v.profile.size()) return "?";
  const planner::Config& c = v.profile[static_cast<size_t>(config)];
  std::string text = c.template_name + " x" + std::to_string(c.gpus);
  if (c.batch_size > 0) text += " b" + std::to_string(c.batch_size);
  if (c.recompute == "unit") text += " recompute";
  return text;
}
}  // namespace

void ActionJournal::Issued(const StepResult& result, const WorldView& world) {
  ++steps_;
  owed_launch_.clear();
  owed_stop_.clear();
  const std::string trigger = result.decision && result.decision->solved && result.trigger
                                  ? TriggerName(*result.trigger)
                                  : "";
  auto name = [&](size_t task) {
    return task < world.tasks.size() ? world.tasks[task].name : "#" + std::to_string(task);
  };
  for (const StopAction& s : result.stops) {
    entries_.push_back(
        {steps_, world.now, trigger, "stop", name(s.task), StopReasonName(s.reason)});
    owed_stop_.insert(name(s.task));
  }
  auto launch = [&](const LaunchAction& l, const std::string& gang) {
    const std::string detail =
        (l.task < world.tasks.size() ? ConfigText(world.tasks[l.task], l.config) : "?") + gang;
    entries_.push_back({steps_, world.now, trigger, "launch", name(l.task), detail});
    owed_launch_[name(l.task)] = l.config;
  };
  for (const LaunchAction& l : result.launches) {
    // An interleaved gang: each member journaled, naming the gang.
    std::string gang;
    if (!l.interleaved.empty()) {
      gang = " interleaved ";
      gang += name(l.task);
      for (const LaunchAction& m : l.interleaved) gang += "+" + name(m.task);
    }
    launch(l, gang);
    for (const LaunchAction& m : l.interleaved) launch(m, gang);
  }
}

void ActionJournal::IssuedShareStop(const std::string& task, double at) {
  entries_.push_back({steps_, at, "", "stop", task, StopReasonName(StopReason::kShare)});
  owed_stop_.insert(task);
}

void ActionJournal::Launched(const std::string& task, int config) {
  auto it = owed_launch_.find(task);
  if (it == owed_launch_.end()) {
    violations_.push_back("launched " + task + " without the engine saying so (after step " +
                          std::to_string(steps_) + ")");
    return;
  }
  if (it->second != config) {
    violations_.push_back("launched " + task + " in configuration " + std::to_string(config) +
                          ", the engine said " + std::to_string(it->second));
  }
  owed_launch_.erase(it);
}

void ActionJournal::Stopped(const std::string& task) {
  if (owed_stop_.erase(task) == 0) {
    violations_.push_back("stopped " + task + " without the engine saying so (after step " +
                          std::to_string(steps_) + ")");
  }
}

void ActionJournal::IssuedProfiles(const ProfileStep& step, double at) {
  owed_profiles_.clear();
  for (const ProfileAction& a : step.start) {
    profiles_.push_back({steps_, at, "", "profile", a.task, a.what});
    owed_profiles_.insert(a.key);
  }
}

void ActionJournal::Profiling(const std::string& key) {
  if (owed_profiles_.erase(key) == 0) {
    violations_.push_back("started the profiling trial " + key +
                          " without the engine saying so (after step " + std::to_string(steps_) +
                          ")");
  }
}

std::map<std::string, std::vector<std::string>> ActionJournal::ByTask() const {
  std::map<std::string, std::vector<std::string>> out;
  for (const JournalEntry& e : entries_) out[e.task].push_back(e.kind + " " + e.detail);
  return out;
}

std::string ActionJournal::Text() const {
  std::string text;
  for (const JournalEntry& e : entries_) {
    char at[32];
    std::snprintf(at, sizeof(at), "%.1f", e.at);
    text += "step " + std::to_string(e.step) + " t=" + at + " " + e.kind + " " + e.task + " " +
            e.detail + (e.trigger.empty() ? "" : " (plan on " + e.trigger + ")") + "\n";
  }
  return text;
}

}  // namespace orrery::engine
