// Introspective re-planning: when to solve, what the remaining problem is, and
// the adoption rule (gain over the re-timed current plan above a threshold).
#include "operator/engine/engine.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "operator/planner/list_scheduler.h"

namespace orrery::engine {

const char* TriggerName(Trigger trigger) {
  switch (trigger) {
    case Trigger::kStart: return "start";
    case Trigger::kInterval: return "interval";
    case Trigger::kTaskFinished: return "task-finished";
    case Trigger::kTaskArrived: return "task-arrived";
    case Trigger::kCapacityChanged: return "capacity-changed";
    case Trigger::kThroughputDrift: return "throughput-drift";
  }
  return "unknown";
}

namespace {
bool Forced(Trigger t) {
  return t == Trigger::kStart || t == Trigger::kTaskArrived || t == Trigger::kCapacityChanged;
}

// Whether the plan stops a running task: another configuration, or other nodes.
bool MovesRunning(const planner::Problem& problem, const planner::Plan& plan) {
  for (size_t t = 0; t < problem.tasks.size() && t < plan.assignments.size(); ++t) {
    const planner::Task& task = problem.tasks[t];
    if (!task.running) continue;
    const planner::Assignment& a = plan.assignments[t];
    if (a.config != task.running->config) return true;
    std::vector<int> planned, held;
    for (const planner::GpuSlot& g : a.gpus) planned.push_back(g.node);
    for (const planner::GpuSlot& g : task.running->gpus) held.push_back(g.node);
    std::sort(planned.begin(), planned.end());
    std::sort(held.begin(), held.end());
    if (planned != held) return true;
  }
  return false;
}

// `plan` with every running task kept as it runs, the rest re-timed around them.
planner::Plan KeepRunning(const planner::Problem& problem, const planner::Plan& plan) {
  std::vector<int> choice(problem.tasks.size(), -1);
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const planner::Task& task = problem.tasks[t];
    choice[t] = task.running ? task.running->config : plan.assignments[t].config;
  }
  planner::Plan kept = planner::BestListSchedule(problem, choice);
  kept.planner = plan.planner;
  kept.lower_bound = plan.lower_bound;
  kept.solve_seconds = plan.solve_seconds;
  kept.note = plan.note + "; running tasks kept: moving them gained less than the threshold";
  planner::Summarize(problem, kept);
  return kept;
}
// The running tasks `plan` (in world terms) does not keep running as they are,
// among those it planned (`planned`: world indices; a task with no work left
// is not planned and finishes where it runs).
std::vector<StopAction> RunningStops(const WorldView& world, const planner::Plan& plan,
                                     const std::vector<int>& planned_tasks) {
  std::vector<bool> in_plan(world.tasks.size(), false);
  for (int t : planned_tasks) {
    if (t >= 0 && static_cast<size_t>(t) < in_plan.size()) in_plan[static_cast<size_t>(t)] = true;
  }
  int running_gpus = 0;
  for (const TaskView& v : world.tasks) {
    if (v.running && !v.done) running_gpus += static_cast<int>(v.running->gpus.size());
  }
  const bool over_cap = world.gpu_cap > 0 && running_gpus > world.gpu_cap;
  std::vector<StopAction> stops;
  for (size_t t = 0; t < world.tasks.size() && t < plan.assignments.size(); ++t) {
    const TaskView& v = world.tasks[t];
    if (!v.running || v.done || !in_plan[t]) continue;
    const planner::Assignment& a = plan.assignments[t];
    std::vector<planner::GpuSlot> planned = a.gpus, held = v.running->gpus;
    std::sort(planned.begin(), planned.end());
    std::sort(held.begin(), held.end());
    const bool kept = a.config == v.running->config && planned == held && a.start <= world.now;
    if (kept) continue;
    stops.push_back({t, over_cap ? StopReason::kQuota : StopReason::kReplan});
  }
  return stops;
}

}  // namespace

const char* StopReasonName(StopReason reason) {
  return reason == StopReason::kQuota ? "quota" : "replan";
}

RemainingProblem BuildRemainingProblem(const WorldView& world, double switch_cost_s) {
  RemainingProblem rp;
  rp.problem.gpu_cap = world.gpu_cap;
  std::map<int, int> node_of;  // world -> problem
  for (size_t n = 0; n < world.nodes.size(); ++n) {
    const NodeView& nv = world.nodes[n];
    if (!nv.alive) continue;
    node_of[static_cast<int>(n)] = static_cast<int>(rp.problem.nodes.size());
    rp.node_index.push_back(static_cast<int>(n));
    rp.problem.nodes.push_back({nv.name, nv.gpus, nv.gpu_memory_gib});
  }
  for (size_t t = 0; t < world.tasks.size(); ++t) {
    const TaskView& tv = world.tasks[t];
    if (tv.done || !tv.arrived || tv.remaining_work <= 0) continue;
    planner::Task task;
    task.name = tv.name;
    task.work = tv.remaining_work;
    task.arrival = 0;  // it is here
    task.weight = tv.weight;
    task.configs = tv.profile;
    for (planner::Config& c : task.configs) c.throughput *= tv.speed_factor;
    if (tv.running) {
      planner::RunningState rs;
      rs.config = tv.running->config;
      rs.switch_cost_s = switch_cost_s;
      bool alive = true;
      for (const planner::GpuSlot& g : tv.running->gpus) {
        auto it = node_of.find(g.node);
        if (it == node_of.end())
          alive = false;
        else
          rs.gpus.push_back({it->second, g.gpu});
      }
      if (alive) task.running = rs;
    }
    rp.task_index.push_back(static_cast<int>(t));
    rp.problem.tasks.push_back(std::move(task));
  }
  return rp;
}

Engine::Engine(EngineOptions options, const Clock* clock)
    : options_(std::move(options)), clock_(clock) {
  auto p = planner::MakePlanner(options_.policy);
  planner_ = p.ok() ? std::move(p).value() : planner::MakeGreedyPlanner();
}

bool Engine::ShouldSolve(Trigger trigger) const {
  if (Forced(trigger) || !current_) return true;
  return options_.introspect;
}

StatusOr<Decision> Engine::Decide(const WorldView& world, Trigger trigger) {
  Decision d;
  if (!ShouldSolve(trigger)) {
    d.reason = std::string("no re-plan on ") + TriggerName(trigger);
    return d;
  }
  RemainingProblem rp = BuildRemainingProblem(world, options_.switch_cost_s);
  planner::Plan fresh;
  if (!rp.problem.tasks.empty()) {
    planner::PlanOptions po;
    po.time_limit_s = options_.solver_time_limit_s;
    po.clock = clock_;
    po.seed = options_.seed;
    ORRERY_ASSIGN_OR_RETURN(fresh, planner_->Solve(rp.problem, po));
    d.solved = true;
    d.solver_seconds = fresh.solve_seconds;
    ++solves_;
  }
  d.new_objective = fresh.objective;

  bool adopt = Forced(trigger) || !current_;
  if (!adopt) {
    // Re-time the current plan with what is known now: same configurations
    // and order, running tasks kept where they are.
    std::vector<int> choice(rp.problem.tasks.size(), -1);
    std::vector<double> planned_start(rp.problem.tasks.size(), 0);
    bool complete = true;
    for (size_t i = 0; i < rp.problem.tasks.size(); ++i) {
      const planner::Assignment& a = current_->assignments[static_cast<size_t>(rp.task_index[i])];
      if (a.config < 0) complete = false;
      choice[i] = a.config;
      planned_start[i] = a.start;
    }
    if (!complete) {
      adopt = true;
    } else if (!rp.problem.tasks.empty()) {
      std::vector<int> order(choice.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return planned_start[static_cast<size_t>(a)] < planned_start[static_cast<size_t>(b)];
      });
      // The better of the planned order and the scheduler's own orders, so a
      // poor re-timing does not make a new plan look better than it is.
      planner::Plan retimed = planner::ListSchedule(rp.problem, choice, order);
      planner::Plan best_retimed = planner::BestListSchedule(rp.problem, choice);
      if (best_retimed.objective < retimed.objective) retimed = best_retimed;
      d.current_objective = retimed.objective;
      adopt = fresh.objective < retimed.objective * (1 - options_.adopt_gain);
    }
  }
  if (!adopt) {
    d.reason = "kept the current plan: gain below threshold";
    return d;
  }
  // A plan that must be adopted (start, arrivals, capacity) still stops a running
  // task only when that beats keeping it by the threshold: each stop costs a
  // checkpoint and a restart, and small gains are within the profiles' noise.
  if (d.solved && MovesRunning(rp.problem, fresh)) {
    planner::Plan kept = KeepRunning(rp.problem, fresh);
    if (!(fresh.objective < kept.objective * (1 - options_.adopt_gain))) {
      fresh = kept;
      d.new_objective = fresh.objective;
    }
  }
  // To world terms.
  planner::Plan world_plan = fresh;
  world_plan.assignments.assign(world.tasks.size(), planner::Assignment{});
  for (size_t i = 0; i < rp.task_index.size(); ++i) {
    planner::Assignment a = fresh.assignments[i];
    a.start += world.now;
    a.end += world.now;
    for (planner::GpuSlot& g : a.gpus) g.node = rp.node_index[static_cast<size_t>(g.node)];
    world_plan.assignments[static_cast<size_t>(rp.task_index[i])] = a;
  }
  world_plan.makespan += world.now;
  d.stops = RunningStops(world, world_plan, rp.task_index);
  current_ = world_plan;
  d.adopted = true;
  d.plan = world_plan;
  d.reason = std::string("adopted on ") + TriggerName(trigger);
  ++adoptions_;
  return d;
}

}  // namespace orrery::engine
