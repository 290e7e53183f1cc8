// The autoscaler's decision loop: the allocator's best allocation, then running
// tasks whose change does not pay for its rescale pinned to what they run, one
// at a time (the worst first), re-allocating the rest after each pin.
#include "operator/engine/autoscaler.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

namespace orrery::engine {

namespace elastic = planner::elastic;

const char* ScaleTriggerName(ScaleTrigger trigger) {
  switch (trigger) {
    case ScaleTrigger::kArrival: return "arrival";
    case ScaleTrigger::kCompletion: return "completion";
    case ScaleTrigger::kCapacityChanged: return "capacity-changed";
    case ScaleTrigger::kInterval: return "interval";
  }
  return "unknown";
}

const char* ActionName(ScaleDecision::Action action) {
  switch (action) {
    case ScaleDecision::Action::kStart: return "start";
    case ScaleDecision::Action::kRescale: return "rescale";
    case ScaleDecision::Action::kPreempt: return "preempt";
    case ScaleDecision::Action::kKeep: return "keep";
    case ScaleDecision::Action::kQueue: return "queue";
  }
  return "unknown";
}

namespace {

std::string Fmt(const char* format, double a, double b) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), format, a, b);
  return buf;
}

struct Candidate {
  std::vector<int> choice;
  double value = 0;  // the allocator's objective, per second
  double cost = 0;   // objective lost to rescale pauses
};

class Planner {
 public:
  Planner(const std::vector<ScaleTask>& tasks, int capacity, const AutoscalerOptions& options)
      : tasks_(tasks), capacity_(capacity), options_(options) {}

  int runs() const { return runs_; }

  // The best allocation with `pinned` tasks held at their current option.
  // Nullopt-like failure (ok=false) when the pinned tasks do not fit.
  StatusOr<Candidate> Solve(const std::vector<bool>& pinned) {
    int free = capacity_;
    std::vector<ScaleTask> rest;
    std::vector<size_t> index;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (pinned[i]) {
        free -= Option(i, tasks_[i].current).gpus;
      } else {
        rest.push_back(tasks_[i]);
        index.push_back(i);
      }
    }
    if (free < 0) return FailedPreconditionError("pinned tasks exceed capacity");
    ++runs_;
    ORRERY_ASSIGN_OR_RETURN(elastic::Allocation a, elastic::Allocate(rest, free, options_.value));
    Candidate c;
    c.choice.assign(tasks_.size(), -1);
    for (size_t i = 0; i < tasks_.size(); ++i)
      if (pinned[i]) c.choice[i] = tasks_[i].current;
    for (size_t k = 0; k < index.size(); ++k) c.choice[index[k]] = a.choice[k];
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (c.choice[i] >= 0) c.value += Value(i, c.choice[i]);
      c.cost += ChangeCost(i, c.choice[i]);
    }
    return c;
  }

  const elastic::Option& Option(size_t i, int j) const {
    return tasks_[i].options[static_cast<size_t>(j)];
  }
  double Value(size_t i, int j) const {
    return elastic::OptionValue(tasks_[i], Option(i, j), options_.value);
  }
  bool Changes(size_t i, int choice) const {
    return tasks_[i].current >= 0 && choice != tasks_[i].current;
  }
  // What a running task's change costs in the objective: no progress for the
  // rescale time at the new option's rate, or, when it is queued, the same pause
  // paid at its current rate when it restarts.
  double ChangeCost(size_t i, int choice) const {
    if (!Changes(i, choice)) return 0;
    const int paid_at = choice >= 0 ? choice : tasks_[i].current;
    return options_.rescale_cost_s * Value(i, paid_at);
  }

 private:
  const std::vector<ScaleTask>& tasks_;
  int capacity_;
  const AutoscalerOptions& options_;
  int runs_ = 0;
};

}  // namespace

StatusOr<ScalePlan> Autoscaler::Decide(const std::vector<ScaleTask>& tasks, int capacity,
                                       ScaleTrigger trigger, double now) {
  if (capacity < 0) return InvalidArgumentError("capacity: must be at least 0");
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].current < -1 || tasks[i].current >= static_cast<int>(tasks[i].options.size()))
      return InvalidArgumentError("tasks[" + std::to_string(i) +
                                  "].current: must be -1 or an index into options");
  }
  Planner planner(tasks, capacity, options_);
  const size_t n = tasks.size();
  const double h = options_.horizon_s;
  std::vector<bool> pinned(n, false);
  std::vector<double> gain(n, 0), cost(n, 0);
  std::vector<bool> forced(n, false), kept(n, false);
  std::vector<int> proposed(n, -1);  // what the allocator wanted for a kept task
  ORRERY_ASSIGN_OR_RETURN(Candidate plan, planner.Solve(pinned));
  for (;;) {
    // The change whose gain least covers its cost, among those that can be pinned.
    size_t worst = n;
    double worst_margin = std::numeric_limits<double>::infinity();
    bool any_changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (pinned[i] || !planner.Changes(i, plan.choice[i])) continue;
      any_changed = true;
      std::vector<bool> with = pinned;
      with[i] = true;
      auto alt = planner.Solve(with);
      if (!alt.ok()) {
        if (alt.status().code() != StatusCode::kFailedPrecondition) return alt.status();
        forced[i] = true;  // capacity no longer holds it as it is
        continue;
      }
      forced[i] = false;
      // The change pays only until the task would have finished as it runs: then
      // its GPUs come free and are re-allocated anyway.
      const elastic::Option& now_option = planner.Option(i, tasks[i].current);
      const double finish_s = now_option.throughput > 0
                                  ? tasks[i].remaining_work / now_option.throughput
                                  : options_.horizon_s;
      gain[i] = (plan.value - alt->value) * std::min(h, finish_s);
      cost[i] = plan.cost - alt->cost;
      const double margin = gain[i] - (1 + options_.hysteresis) * cost[i];
      if (margin < worst_margin) {
        worst_margin = margin;
        worst = i;
      }
    }
    if (!any_changed || worst == n || worst_margin > 0) break;
    pinned[worst] = true;
    kept[worst] = true;
    proposed[worst] = plan.choice[worst];
    ORRERY_ASSIGN_OR_RETURN(plan, planner.Solve(pinned));
  }

  ScalePlan out;
  out.choice = plan.choice;
  out.allocator_runs = planner.runs();
  for (size_t i = 0; i < n; ++i) {
    const ScaleTask& t = tasks[i];
    const int from = t.current, to = plan.choice[i];
    if (to >= 0) out.gpus_used += planner.Option(i, to).gpus;
    ScaleDecision d;
    d.time = now;
    d.trigger = trigger;
    d.task = t.name;
    if (from >= 0) {
      d.from_gpus = planner.Option(i, from).gpus;
      d.from_batch = planner.Option(i, from).batch_size;
    }
    const int shown = kept[i] ? proposed[i] : to;
    if (shown >= 0) {
      d.to_gpus = planner.Option(i, shown).gpus;
      d.to_batch = planner.Option(i, shown).batch_size;
    }
    d.gain = gain[i];
    d.cost = cost[i];
    if (kept[i]) {
      d.action = ScaleDecision::Action::kKeep;
      d.reason = Fmt("kept: gain %.4g over the horizon does not beat the rescale cost %.4g", d.gain,
                     d.cost) +
                 " with hysteresis";
    } else if (from < 0 && to >= 0) {
      d.action = ScaleDecision::Action::kStart;
      d.reason = "started: the allocator gave it GPUs";
    } else if (from < 0) {
      d.action = ScaleDecision::Action::kQueue;
      d.reason = t.options.empty() ? "queued: no feasible option"
                                   : "queued: capacity is better used by other tasks";
    } else if (from == to) {
      continue;
    } else {
      d.action = to >= 0 ? ScaleDecision::Action::kRescale : ScaleDecision::Action::kPreempt;
      d.reason = forced[i] ? "forced: capacity no longer holds the GPUs it had"
                           : Fmt("gain %.4g over the horizon beats the rescale cost %.4g", d.gain,
                                 d.cost) +
                                 " with hysteresis";
    }
    out.decisions.push_back(d);
  }
  log_.insert(log_.end(), out.decisions.begin(), out.decisions.end());
  return out;
}

}  // namespace orrery::engine
