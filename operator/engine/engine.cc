// Introspective re-planning: when to solve, what the remaining problem is, and
// the adoption rule (gain over the re-timed current plan above a threshold).
#include "operator/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

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
    case Trigger::kQuotaChanged: return "quota-changed";
    case Trigger::kSpecChanged: return "spec-changed";
    case Trigger::kGangSpeedMeasured: return "gang-speed-measured";
  }
  return "unknown";
}

namespace {
// The job's options changed (its spec, or a measured gang speedup): solved
// at once under them, adopted by the usual rules.
bool OptionsChanged(Trigger t) {
  return t == Trigger::kSpecChanged || t == Trigger::kGangSpeedMeasured;
}

bool Forced(Trigger t) {
  return t == Trigger::kStart || t == Trigger::kTaskArrived || t == Trigger::kCapacityChanged ||
         t == Trigger::kQuotaChanged;
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
// Whether the job's running tasks hold more GPUs than its cap. A GPU the
// members of an interleaved gang share counts once.
bool OverCap(const WorldView& world) {
  std::set<planner::GpuSlot> held;
  for (const TaskView& v : world.tasks) {
    if (v.running && !v.done) held.insert(v.running->gpus.begin(), v.running->gpus.end());
  }
  return world.gpu_cap > 0 && static_cast<int>(held.size()) > world.gpu_cap;
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
  const bool over_cap = OverCap(world);
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

// The index of `task`'s fastest one-GPU spill configuration of `gpu_type`
// (any type when empty), the one the gang's time assumed; -1 when it has none.
int SpillConfig(const planner::Task& task, const std::string& gpu_type) {
  int best = -1;
  for (size_t c = 0; c < task.configs.size(); ++c) {
    const planner::Config& cfg = task.configs[c];
    if (cfg.template_name != "spill" || cfg.gpus != 1) continue;
    if (!gpu_type.empty() && !cfg.gpu_type.empty() && cfg.gpu_type != gpu_type) continue;
    if (best < 0 || cfg.throughput > task.configs[static_cast<size_t>(best)].throughput)
      best = static_cast<int>(c);
  }
  return best;
}

// `world` with the running members of `gangs` as waiting tasks: the planners
// model one task per GPU, so a running gang's members are planned afresh; a
// plan that keeps a member where it runs, from now, keeps it running
// (RunningStops), one that moves it stops that member (StopGangMembers).
WorldView GangsAsWaiting(const WorldView& world, const std::vector<std::vector<size_t>>& gangs) {
  WorldView view = world;
  for (const std::vector<size_t>& gang : gangs) {
    for (size_t t : gang) {
      if (t < view.tasks.size()) view.tasks[t].running.reset();
    }
  }
  return view;
}

// Gangs of problem indices as world task indices.
std::vector<std::vector<size_t>> GangsInWorld(const std::vector<std::vector<int>>& gangs,
                                              const std::vector<int>& task_index) {
  std::vector<std::vector<size_t>> out;
  for (const std::vector<int>& gang : gangs) {
    std::vector<size_t>& members = out.emplace_back();
    for (int m : gang) members.push_back(static_cast<size_t>(task_index[static_cast<size_t>(m)]));
  }
  return out;
}

// A running gang is one process whose members stop one at a time (the
// worker's --stop-file): a member the plan moves stops alone, and one it keeps
// where it runs runs on in that process, unless the plan puts it in a new gang
// (`planned`), which a process already running cannot join: it stops too.
void StopGangMembers(const WorldView& world, const std::vector<std::vector<size_t>>& running,
                     const std::vector<std::vector<size_t>>& planned,
                     std::vector<StopAction>* stops) {
  auto stopping = [&](size_t t) {
    return std::any_of(stops->begin(), stops->end(),
                       [&](const StopAction& s) { return s.task == t; });
  };
  auto in_new_gang = [&](size_t t) {
    return std::any_of(planned.begin(), planned.end(), [&](const std::vector<size_t>& g) {
      return std::find(g.begin(), g.end(), t) != g.end();
    });
  };
  for (const std::vector<size_t>& gang : running) {
    if (!std::any_of(gang.begin(), gang.end(), stopping)) continue;
    for (size_t t : gang) {
      if (t < world.tasks.size() && world.tasks[t].running && !world.tasks[t].done &&
          !stopping(t) && in_new_gang(t))
        stops->push_back({t, StopReason::kReplan});
    }
  }
}

// The current plan re-timed with what is known now: each task in its planned
// configuration, in the planned order or the scheduler's own better one (so a
// poor re-timing does not make a new plan look better than it is), and each
// of its gangs (`gangs`, world indices) as one task at the interleaving
// `speedup` now known (planner::GroupAs): a running gang measured slower than
// it was planned is as slow here as it is. `choice` and `planned_start` are by
// task of rp.problem.
double RetimedObjective(const RemainingProblem& rp, const std::vector<int>& choice,
                        const std::vector<double>& planned_start,
                        const std::vector<std::vector<size_t>>& gangs, double speedup) {
  std::map<size_t, int> problem_of;  // world -> problem index
  for (size_t i = 0; i < rp.task_index.size(); ++i)
    problem_of[static_cast<size_t>(rp.task_index[i])] = static_cast<int>(i);
  std::vector<std::vector<int>> in_problem;
  for (const std::vector<size_t>& gang : speedup > 0 ? gangs : std::vector<std::vector<size_t>>{}) {
    std::vector<int> members;
    for (size_t t : gang) {
      if (auto it = problem_of.find(t); it != problem_of.end()) members.push_back(it->second);
    }
    if (members.size() >= 2) in_problem.push_back(members);
  }
  const planner::GangedProblem g = planner::GroupAs(rp.problem, in_problem, speedup);
  std::vector<int> g_choice;
  std::vector<double> g_start;
  for (size_t k = 0; k < g.problem.tasks.size(); ++k) {
    const auto first = static_cast<size_t>(g.members[k].front());
    g_start.push_back(planned_start[first]);
    if (g.members[k].size() == 1) {
      g_choice.push_back(choice[first]);
      continue;
    }
    // The gang's configuration on the GPU type its members were planned on.
    const std::string& type =
        rp.problem.tasks[first].configs[static_cast<size_t>(choice[first])].gpu_type;
    int pick = 0;
    const std::vector<planner::Config>& configs = g.problem.tasks[k].configs;
    for (size_t c = 0; c < configs.size(); ++c) {
      if (configs[c].gpu_type == type) pick = static_cast<int>(c);
    }
    g_choice.push_back(pick);
  }
  std::vector<int> order(g_choice.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return g_start[static_cast<size_t>(a)] < g_start[static_cast<size_t>(b)];
  });
  planner::Plan retimed = planner::ListSchedule(g.problem, g_choice, order);
  planner::Plan best_retimed = planner::BestListSchedule(g.problem, g_choice);
  return std::min(retimed.objective, best_retimed.objective);
}

}  // namespace

StatusOr<planner::Plan> SolveWithGangs(planner::Planner& planner, const planner::Problem& problem,
                                       const planner::PlanOptions& options, double speedup,
                                       std::vector<std::vector<int>>* gangs) {
  planner::InterleaveOptions io;
  io.speedup = speedup;
  ORRERY_ASSIGN_OR_RETURN(planner::InterleavedPlan ip,
                          planner::SolveInterleaved(planner, problem, options, io));
  gangs->clear();
  if (!ip.interleaved()) return ip.plan;
  // Each member takes its gang's assignment, at its own spill configuration.
  planner::Plan out = ip.plan;
  out.assignments.assign(problem.tasks.size(), planner::Assignment{});
  for (size_t g = 0; g < ip.ganged.members.size(); ++g) {
    const std::vector<int>& members = ip.ganged.members[g];
    const planner::Assignment& a = ip.plan.assignments[g];
    if (members.size() == 1) {
      out.assignments[static_cast<size_t>(members[0])] = a;
      continue;
    }
    const planner::Task& gang = ip.ganged.problem.tasks[g];
    const std::string type =
        a.config >= 0 ? gang.configs[static_cast<size_t>(a.config)].gpu_type : std::string();
    for (int m : members) {
      planner::Assignment ma = a;
      ma.config = a.config >= 0 ? SpillConfig(problem.tasks[static_cast<size_t>(m)], type) : -1;
      out.assignments[static_cast<size_t>(m)] = ma;
    }
    gangs->push_back(members);
  }
  return out;
}

namespace {
// The remaining problem's plan `fresh` in world terms: absolute times, world
// task and node indices.
planner::Plan InWorldTerms(const WorldView& world, const RemainingProblem& rp,
                           const planner::Plan& fresh, planner::Objective objective) {
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
  // A makespan bound on the same clock as the makespan (the worlds show both
  // from their start, the controller both from now). Under weighted
  // completion the bound stays the remaining problem's, as the gap does.
  if (objective == planner::Objective::kMakespan) {
    world_plan.lower_bound += world.now;
    world_plan.objective += world.now;
  }
  return world_plan;
}
}  // namespace

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kReplan: return "replan";
    case StopReason::kQuota: return "quota";
    case StopReason::kShare: return "share";
    case StopReason::kSpec: return "spec";
  }
  return "replan";
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
    rp.problem.nodes.push_back({nv.name, nv.gpus, nv.gpu_memory_gib, nv.gpu_type});
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
    task.gpu_types = tv.gpu_types;
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

void Engine::Forget() {
  current_.reset();
  plan_nodes_.clear();
  gangs_.clear();
  solved_.reset();
  pending_.reset();
  stale_resolved_at_.clear();
}

bool Engine::UpdateOptions(const EngineOptions& options, Trigger why) {
  if (options == options_) return false;
  if (options.policy != options_.policy) {
    auto p = planner::MakePlanner(options.policy);
    planner_ = p.ok() ? std::move(p).value() : planner::MakeGreedyPlanner();
  }
  options_ = options;
  // A more urgent trigger waiting for a solve keeps its place; either way the
  // next solve is under the new options.
  if (current_ && !pending_) pending_ = why;
  return true;
}

bool Engine::WaitingGangStale(const WorldView& world) const {
  if (options_.interleave_speedup == gangs_speedup_) return false;
  for (const std::vector<size_t>& gang : gangs_) {
    const bool waiting = std::all_of(gang.begin(), gang.end(), [&](size_t t) {
      return t < world.tasks.size() && !world.tasks[t].running && !world.tasks[t].done;
    });
    if (waiting) return true;
  }
  return false;
}

bool Engine::ShouldSolve(Trigger trigger) const {
  if (Forced(trigger) || OptionsChanged(trigger) || !current_) return true;
  return options_.introspect;
}

StatusOr<Decision> Engine::Decide(const WorldView& world, Trigger trigger) {
  Decision d;
  if (!ShouldSolve(trigger)) {
    d.reason = std::string("no re-plan on ") + TriggerName(trigger);
    return d;
  }
  RemainingProblem rp =
      BuildRemainingProblem(GangsAsWaiting(world, gangs_), options_.switch_cost_s);
  rp.problem.objective = options_.objective;
  std::vector<std::vector<int>> gangs;  // problem indices
  planner::Plan fresh;
  d.trigger = trigger;
  if (!rp.problem.tasks.empty()) {
    planner::PlanOptions po;
    po.time_limit_s = options_.solver_time_limit_s;
    po.clock = clock_;
    po.seed = options_.seed;
    if (options_.warm_start && current_) {
      po.hint.assign(rp.problem.tasks.size(), -1);
      for (size_t i = 0; i < rp.task_index.size(); ++i) {
        const auto w = static_cast<size_t>(rp.task_index[i]);
        if (w < current_->assignments.size()) po.hint[i] = current_->assignments[w].config;
      }
      // An arrival or a finish changes only what waits: running gangs stay.
      po.keep_running = trigger == Trigger::kTaskArrived || trigger == Trigger::kTaskFinished;
      d.warm = true;
      d.kept_running = po.keep_running;
    }
    if (options_.interleave) {
      ORRERY_ASSIGN_OR_RETURN(
          fresh, SolveWithGangs(*planner_, rp.problem, po, options_.interleave_speedup, &gangs));
    } else {
      ORRERY_ASSIGN_OR_RETURN(fresh, planner_->Solve(rp.problem, po));
    }
    d.solved = true;
    d.solver_seconds = fresh.solve_seconds;
    d.gap = fresh.gap;
    d.lower_bound = fresh.lower_bound;
    d.tasks_planned = static_cast<int>(rp.problem.tasks.size());
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
    if (!complete || WaitingGangStale(world)) {
      adopt = true;
    } else if (!rp.problem.tasks.empty()) {
      d.current_objective = RetimedObjective(rp, choice, planned_start, gangs_,
                                             options_.interleave ? options_.interleave_speedup : 0);
      adopt = fresh.objective < d.current_objective * (1 - options_.adopt_gain);
    }
  }
  if (!adopt) {
    d.reason = "kept the current plan: gain below threshold";
    return d;
  }
  // A plan that must be adopted (start, arrivals, capacity) still stops a running
  // task only when that beats keeping it by the threshold: each stop costs a
  // checkpoint and a restart, and small gains are within the profiles' noise.
  // On kStart with gangs already running (an operator restarted, or a job
  // resumed, finds its gangs in the cluster) they are kept whatever the gain,
  // within the cap: the plan that placed them is gone, a fresh solve under a
  // time limit differs from it by the solver's noise, and a restart must not
  // churn what runs. The next trigger (interval, drift, a finish) weighs moving
  // them by the usual rule.
  if (d.solved && MovesRunning(rp.problem, fresh)) {
    planner::Plan kept = KeepRunning(rp.problem, fresh);
    const bool adopting_gangs = trigger == Trigger::kStart && !OverCap(world);
    if (adopting_gangs || !(fresh.objective < kept.objective * (1 - options_.adopt_gain))) {
      fresh = kept;
      d.new_objective = fresh.objective;
      gangs.clear();  // list-scheduled one task per GPU
    }
  }
  const planner::Plan world_plan = InWorldTerms(world, rp, fresh, options_.objective);
  d.stops = RunningStops(world, world_plan, rp.task_index);
  d.gangs = GangsInWorld(gangs, rp.task_index);
  StopGangMembers(world, gangs_, d.gangs, &d.stops);
  gangs_ = d.gangs;
  gangs_speedup_ = options_.interleave_speedup;
  current_ = world_plan;
  plan_nodes_.clear();
  for (const NodeView& n : world.nodes) plan_nodes_.push_back(n.name);
  d.adopted = true;
  d.plan = world_plan;
  d.reason = std::string("adopted on ") + TriggerName(trigger);
  ++adoptions_;
  return d;
}

PlanStatusUpdate PlanStatusOf(const Decision& d, double now, int revision,
                              planner::Objective objective) {
  PlanStatusUpdate u;
  u.at = now;
  u.trigger = d.trigger ? TriggerName(*d.trigger) : "";
  u.adopted = d.adopted;
  u.revision = revision;
  u.solve_gap = d.gap;
  u.lower_bound = d.lower_bound;
  u.objective = d.new_objective;
  u.solver_seconds = d.solver_seconds;
  u.tasks_planned = d.tasks_planned;
  u.warm = d.warm;
  u.kept_running = d.kept_running;
  if (d.adopted) {
    u.planner = d.plan.planner;
    u.ends_at = d.plan.makespan;
    u.plan_gap = d.plan.gap;
    // Decide put a makespan plan's bound on the world's clock (and left a
    // weighted-completion bound on its objective).
    if (objective == planner::Objective::kMakespan) u.ends_at_bound = d.plan.lower_bound;
  }
  return u;
}

// ---- the step ------------------------------------------------------------------

namespace {

bool Waiting(const TaskView& v) { return v.arrived && !v.done && v.remaining_work > 0; }

bool PlannedIn(const std::optional<planner::Plan>& plan, size_t t) {
  return plan && t < plan->assignments.size() && plan->assignments[t].config >= 0;
}

}  // namespace

Engine::Snapshot Engine::Observe(const StepInput& in) const {
  const WorldView& w = in.world;
  Snapshot s;
  for (const NodeView& n : w.nodes) {
    s.nodes += n.name + ":" + std::to_string(n.gpus) + (n.alive ? "" : ":down") + " ";
  }
  s.cap = w.gpu_cap;
  s.at = w.now;
  for (size_t t = 0; t < w.tasks.size(); ++t) {
    const TaskView& v = w.tasks[t];
    if (v.done) s.done.insert(v.name);
    if (!Waiting(v)) continue;
    s.arrived.insert(v.name);
    s.speed[v.name] = v.speed_factor;
    if (!v.running && in.blocked.count(t) == 0 && !PlannedIn(current_, t)) {
      s.unplanned.insert(v.name);
    }
  }
  return s;
}

std::optional<Trigger> Engine::DetectTrigger(const StepInput& in) const {
  if (!current_ || !solved_) return Trigger::kStart;
  const Snapshot now = Observe(in);
  const Snapshot& then = *solved_;
  if (now.nodes != then.nodes) return Trigger::kCapacityChanged;
  if (now.cap != then.cap) return Trigger::kQuotaChanged;
  const bool new_arrival = !std::includes(then.arrived.begin(), then.arrived.end(),
                                          now.arrived.begin(), now.arrived.end());
  // A task waiting outside the plan (it arrived when the plan had no room, or
  // the plan was made without it) asks for a plan once per such set.
  if (new_arrival || (!now.unplanned.empty() && now.unplanned != then.unplanned)) {
    return Trigger::kTaskArrived;
  }
  if (now.done != then.done) return Trigger::kTaskFinished;
  for (const auto& [task, factor] : now.speed) {
    auto it = then.speed.find(task);
    const double planned_with = it == then.speed.end() ? 1.0 : it->second;
    if (planned_with > 0 && std::abs(factor / planned_with - 1) > options_.drift_tolerance) {
      return Trigger::kThroughputDrift;
    }
  }
  if (in.world.now - then.at >= options_.replan_interval_s) return Trigger::kInterval;
  return std::nullopt;
}

std::vector<LaunchAction> SelectLaunches(const StepInput& in, const planner::Plan& plan,
                                         const std::vector<std::string>& plan_nodes,
                                         const std::vector<StopAction>& stops,
                                         const std::vector<std::vector<size_t>>& gangs) {
  const WorldView& w = in.world;
  std::map<std::string, size_t> node_of;  // current world index by name
  for (size_t n = 0; n < w.nodes.size(); ++n) node_of[w.nodes[n].name] = n;
  std::vector<int> free = in.free_gpus;
  if (free.empty()) {
    for (const NodeView& n : w.nodes) free.push_back(n.alive ? n.gpus : 0);
    std::set<planner::GpuSlot> held;  // an interleaved gang's members share theirs
    for (const TaskView& v : w.tasks) {
      if (!v.running || v.done) continue;
      for (const planner::GpuSlot& g : v.running->gpus) {
        if (!held.insert(g).second) continue;
        if (g.node >= 0 && static_cast<size_t>(g.node) < free.size()) --free[g.node];
      }
    }
  }
  free.resize(w.nodes.size(), 0);
  int budget = in.launch_budget;
  std::set<size_t> stopped;
  if (in.stops_free_at_once) {
    for (const StopAction& s : stops) {
      if (s.task < w.tasks.size() && w.tasks[s.task].running) stopped.insert(s.task);
    }
    // An interleaved gang's members share their GPU: it is freed once, and not
    // while a member that is not stopping runs on in the gang.
    std::set<planner::GpuSlot> freed;
    for (size_t t = 0; t < w.tasks.size(); ++t) {
      if (!w.tasks[t].running || stopped.count(t) > 0) continue;
      for (const planner::GpuSlot& g : w.tasks[t].running->gpus) freed.insert(g);
    }
    for (size_t t : stopped) {
      for (const planner::GpuSlot& g : w.tasks[t].running->gpus) {
        if (!freed.insert(g).second) continue;
        if (g.node >= 0 && static_cast<size_t>(g.node) < free.size()) ++free[g.node];
        if (budget >= 0) ++budget;
      }
    }
  }
  std::vector<size_t> waiting;
  for (size_t t = 0; t < w.tasks.size() && t < plan.assignments.size(); ++t) {
    const TaskView& v = w.tasks[t];
    if (!v.arrived || v.done || in.blocked.count(t) > 0 || plan.assignments[t].config < 0) continue;
    if (v.running && stopped.count(t) == 0) continue;
    waiting.push_back(t);
  }
  std::stable_sort(waiting.begin(), waiting.end(), [&](size_t a, size_t b) {
    return plan.assignments[a].start < plan.assignments[b].start;
  });
  std::map<size_t, size_t> gang_of;  // task -> index into gangs
  for (size_t g = 0; g < gangs.size(); ++g) {
    for (size_t t : gangs[g]) gang_of[t] = g;
  }
  std::set<size_t> gangs_seen;
  std::vector<LaunchAction> out;
  for (size_t t : waiting) {
    const planner::Assignment& a = plan.assignments[t];
    LaunchAction l{t, a.config, {}, {}};
    if (auto it = gang_of.find(t); it != gang_of.end()) {
      // The gang's first waiting member launches the waiting rest with it.
      if (!gangs_seen.insert(it->second).second) continue;
      for (size_t m : gangs[it->second]) {
        if (m != t && std::find(waiting.begin(), waiting.end(), m) != waiting.end())
          l.interleaved.push_back({m, plan.assignments[m].config, {}, {}});
      }
    }
    std::map<size_t, int> need;
    bool valid = !a.gpus.empty();
    for (const planner::GpuSlot& g : a.gpus) {
      auto it = g.node >= 0 && static_cast<size_t>(g.node) < plan_nodes.size()
                    ? node_of.find(plan_nodes[static_cast<size_t>(g.node)])
                    : node_of.end();
      if (it == node_of.end() || !w.nodes[it->second].alive) {
        valid = false;
        break;
      }
      l.gpus.push_back({static_cast<int>(it->second), g.gpu});
      ++need[it->second];
    }
    if (!valid) continue;  // planned on a node that is gone: the next plan places it
    const int gpus = static_cast<int>(l.gpus.size());
    if (budget >= 0 && gpus > budget) break;
    bool fits = true;
    for (const auto& [node, n] : need) fits = fits && free[node] >= n;
    for (const auto& [node, n] : need) free[node] -= n;  // claimed either way
    if (!fits) continue;
    std::sort(l.gpus.begin(), l.gpus.end());
    for (LaunchAction& m : l.interleaved) m.gpus = l.gpus;
    out.push_back(std::move(l));
    if (budget >= 0) budget -= gpus;
  }
  return out;
}

namespace {
// Each outdated task (TaskView::outdated) the plan does not stop already stops
// for the edit; it starts again as the plan has it, under the new settings.
void AddSpecStops(const WorldView& w, std::vector<StopAction>* stops) {
  for (size_t t = 0; t < w.tasks.size(); ++t) {
    if (!w.tasks[t].outdated || w.tasks[t].done) continue;
    const bool stopping =
        std::any_of(stops->begin(), stops->end(), [&](const StopAction& s) { return s.task == t; });
    if (!stopping) stops->push_back({t, StopReason::kSpec});
  }
}
}  // namespace

StepResult Engine::Step(const StepInput& in) {
  StepResult r;
  const WorldView& w = in.world;
  // A change only the world saw waits, like any other, until a solve can use it.
  if (in.also) pending_ = in.also;
  r.trigger = pending_ ? pending_ : DetectTrigger(in);
  if (pending_ && OptionsChanged(*pending_)) {
    // A change that forces adoption outranks the edited settings (which the
    // solve uses either way).
    if (std::optional<Trigger> seen = DetectTrigger(in); seen && Forced(*seen)) r.trigger = seen;
  }
  int alive_gpus = 0;
  for (const NodeView& n : w.nodes) alive_gpus += n.alive ? n.gpus : 0;
  bool any_waiting = false;
  for (const TaskView& v : w.tasks) any_waiting = any_waiting || Waiting(v);
  // With nothing left to plan, or no GPU to plan onto, a step only launches:
  // the trigger stays until a solve can use it.
  auto solve = [&](Trigger trigger) {
    if (!any_waiting || alive_gpus == 0 || !ShouldSolve(trigger)) return;
    pending_.reset();
    solved_ = Observe(in);
    StatusOr<Decision> d = Decide(w, trigger);
    if (!d.ok()) {
      r.error = d.status();
      return;
    }
    if (d->adopted) {
      r.stops = d->stops;
      // Observed against the adopted plan: tasks it leaves out are known.
      solved_ = Observe(in);
    }
    r.decision = std::move(d).value();
    if (r.decision->solved || r.decision->adopted)
      r.status = PlanStatusOf(*r.decision, w.now, adoptions_, options_.objective);
  };
  // Coalescing: a trigger within the window after the last solve waits for
  // the window's end (the plan in force keeps launching); what must not wait
  // (no plan, capacity, quota, spec) solves at once.
  const bool urgent =
      r.trigger &&
      (*r.trigger == Trigger::kStart || *r.trigger == Trigger::kCapacityChanged ||
       *r.trigger == Trigger::kQuotaChanged || OptionsChanged(*r.trigger) || pending_.has_value());
  double coalesce_until = -std::numeric_limits<double>::infinity();
  if (r.trigger && !urgent && options_.coalesce_window_s > 0 && solved_ &&
      w.now < solved_->at + options_.coalesce_window_s) {
    coalesce_until = solved_->at + options_.coalesce_window_s;
    r.deferred = r.trigger;
    r.trigger.reset();
  }
  if (r.trigger) solve(*r.trigger);
  AddSpecStops(w, &r.stops);
  if (current_) r.launches = SelectLaunches(in, *current_, plan_nodes_, r.stops, gangs_);
  // A plan under which nothing runs and nothing can start is stale (made for
  // GPUs that are gone, or under a cap since lifted): plan again, once for
  // this capacity.
  if (current_ && r.launches.empty() && !r.decision) {
    bool active = !in.blocked.empty();
    for (const TaskView& v : w.tasks) active = active || (v.running && !v.done);
    const std::string nodes = Observe(in).nodes;
    if (!active && any_waiting && nodes != stale_resolved_at_) {
      stale_resolved_at_ = nodes;
      r.trigger = Trigger::kCapacityChanged;
      solve(Trigger::kCapacityChanged);
      if (current_) r.launches = SelectLaunches(in, *current_, plan_nodes_, r.stops, gangs_);
    }
  }
  if (options_.introspect && solved_ && any_waiting) {
    r.next_step_at = solved_->at + options_.replan_interval_s;
  }
  if (r.deferred && coalesce_until > w.now)
    r.next_step_at = std::min(r.next_step_at, coalesce_until);
  journal_.Issued(r, w);
  return r;
}

}  // namespace orrery::engine
