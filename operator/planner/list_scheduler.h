// List scheduling: turns a configuration choice per task and a priority order
// into a concrete schedule on nodes and GPU indices. Each task in turn starts as
// early as enough GPUs on one node (or on as many nodes as its configuration
// spans) are free and it has arrived, on the GPUs that leave the least idle time.
// Running tasks that keep their configuration stay on their GPUs from time 0.
// Every planner ends here, so every plan is concrete and checkable.
#pragma once

#include <vector>

#include "operator/planner/problem.h"

namespace orrery::planner {

// GPUs a schedule's tasks hold over time, against the problem's cap (a job's
// gpuQuota; 0 means none, and every query answers at once).
class CapTimeline {
 public:
  explicit CapTimeline(int cap);
  void Add(double start, double end, int gpus);
  // The earliest t >= from at which `gpus` more GPUs stay under the cap for
  // `run` seconds; infinity when they never fit.
  double Earliest(double from, double run, int gpus) const;

 private:
  struct Span {
    double start, end;
    int gpus;
  };
  int Peak(double s, double e) const;  // most GPUs held at any moment of [s, e)
  int cap_;
  std::vector<Span> spans_;
};

enum class OrderRule {
  kLongestFirst,        // LPT on run time
  kWidestFirst,         // most GPUs first, then longest
  kMostGpuTimeFirst,    // GPUs x run time
  kArrivalThenLongest,  // earliest arrival, then longest
  kSmithRatio,          // weight / (GPUs x run time), best first: for weighted completion
};

// Task indices in the order `rule` gives for `choice`; ties by task index.
std::vector<int> OrderTasks(const Problem& problem, const std::vector<int>& choice, OrderRule rule);

enum class Placement {
  kAppend,    // a GPU takes the next task only after its last one: O(tasks x GPUs)
  kBackfill,  // a task may fill an earlier hole long enough for it
};

// Schedules in `order`; `choice[t]` must be a config of task t that fits the
// cluster. The plan's lower bound is left 0.
Plan ListSchedule(const Problem& problem, const std::vector<int>& choice,
                  const std::vector<int>& order, Placement placement = Placement::kBackfill);

// Deadline-driven list scheduling, for malleable tasks: the configuration of a
// task is chosen when it is placed, not before. Each task in `order` goes
// where one of its `candidates` (config indices) finishes by `deadline` at the
// least cost (GPU-time, times the price of the GPU type it lands on when
// `type_price` has one per GpuTypes(problem) entry; ties: earlier finish), or,
// when none can, where it
// finishes first. A task that starts late thus runs wide and fast, one that
// starts early narrow and efficient: the fixed choice of ListSchedule leaves
// the schedule's tail to whatever the choice was. Running tasks whose
// configuration is a candidate keep their GPUs from time 0. Append placement
// is O(tasks x candidates x nodes); backfill fills earlier holes (the ones
// late arrivals leave) at ListSchedule's backfill cost per candidate.
Plan DeadlineSchedule(const Problem& problem, const std::vector<std::vector<int>>& candidates,
                      const std::vector<int>& order, double deadline,
                      const std::vector<double>& type_price = {},
                      Placement placement = Placement::kAppend);

// The best ListSchedule over the order rules suited to the problem's objective
// and both placements.
// Reports the winning rule and placement when asked.
Plan BestListSchedule(const Problem& problem, const std::vector<int>& choice,
                      OrderRule* rule = nullptr, Placement* placement = nullptr);

}  // namespace orrery::planner
