// Discrete-event simulation of a cluster running the engine's plans.
#include "operator/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "operator/planner/interleave.h"

namespace orrery::sim {
namespace {

enum class Kind {
  kArrival,
  kNodeLost,
  kNodeJoined,
  kPoolLost,
  kQuota,
  kFinish,
  kMeasure,
  kGangMeasure,  // index: the gang
  kTick,
  kOtherJob,  // index: the other job; epoch 0: it arrives, 1: it leaves
};

struct Event {
  double time;
  long seq;
  Kind kind;
  int index;  // task or node
  int epoch;  // task run epoch for finish/measure
  bool operator>(const Event& o) const { return time > o.time || (time == o.time && seq > o.seq); }
};

struct SimTask {
  const planner::Task* spec = nullptr;
  double true_speed = 1;
  double remaining = 0;
  bool arrived = false;
  bool done = false;
  bool ever_started = false;
  bool running = false;
  int config = -1;
  std::vector<planner::GpuSlot> gpus;
  double start = 0;          // run start (GPUs held)
  double progress_from = 0;  // after the switching delay
  double last_advance = 0;
  int epoch = 0;
  bool measured = false;
  double speed_factor = 1;  // what the engine knows
  double completion = 0;
  int gang = -1;          // the interleaved gang it runs in (Sim::gangs_); -1: alone
  std::string gang_name;  // that gang's name, for its intervals
  double share = 1;       // its speed in the gang over its speed alone
};

// An interleaved gang: one process on its GPUs running its members, each at
// its share of the device (planner::GangShares); a member that finishes or
// stops leaves it, and the rest share the device again.
struct SimGang {
  std::string name;
  std::vector<size_t> members;  // those still in it
  std::vector<planner::GpuSlot> gpus;
  bool measured = false;
};

// The engine plans for the workload's objective, as the operator plans for
// the job's spec.scheduling.objective.
engine::EngineOptions WithObjective(engine::EngineOptions o, planner::Objective objective) {
  o.objective = objective;
  return o;
}

class Sim {
 public:
  Sim(const planner::Workload& w, const SimOptions& o, const Clock* clock)
      : w_(w),
        o_(o),
        engine_(WithObjective(o.engine, w.problem.objective), clock),
        gang_speedup_(o.gang_speedup > 0 ? o.gang_speedup : o.engine.interleave_speedup) {}

  StatusOr<SimResult> Run();
  void Init();                  // tasks, arrivals and the workload's cluster events
  bool Handle(const Event& e);  // one event; true when it finished a task
  void NodeLost(size_t node);
  void Summarize();  // the result's figures from the finished run

 private:
  void Push(double t, Kind k, int index, int epoch = 0) {
    queue_.push({t, seq_++, k, index, epoch});
  }
  // Its speed alone (its configuration's profiled throughput times its true speed).
  double TrueThroughput(const SimTask& t) const {
    return t.spec->configs[static_cast<size_t>(t.config)].throughput * t.true_speed;
  }
  // Its speed now: alone, or its share of its gang's device.
  double Rate(const SimTask& t) const { return TrueThroughput(t) * t.share; }
  void Advance(SimTask& t) {
    if (!t.running) return;
    double from = std::max(t.last_advance, t.progress_from);
    if (now_ > from) t.remaining -= (now_ - from) * Rate(t);
    t.last_advance = std::max(t.last_advance, now_);
    // What rounding leaves of a task that finishes now.
    if (t.remaining < 1e-9 * t.spec->work) t.remaining = 0;
  }
  void Stop(size_t i, const std::string& why) {
    SimTask& t = tasks_[i];
    Advance(t);
    if (why == "node-lost" && now_ > t.progress_from) {
      // Lose what was done since the last periodic checkpoint.
      double ran = now_ - t.progress_from;
      double lost = std::fmod(ran, o_.checkpoint_interval_s);
      t.remaining = std::min(t.spec->work, t.remaining + lost * Rate(t));
    }
    Record(i, why);
    t.running = false;
    ++t.epoch;
    Release(i);
  }
  void Record(size_t i, const std::string& why) {
    const SimTask& t = tasks_[i];
    if (now_ <= t.start) return;
    const planner::Config& c = t.spec->configs[static_cast<size_t>(t.config)];
    result_.intervals.push_back({t.spec->name, t.start, now_, c.template_name, c.gpus, c.batch_size,
                                 t.gpus, why, t.gang_name});
  }
  // Task i no longer runs: its GPUs are free, unless its gang's other members
  // still run on them (they share the device again).
  void Release(size_t i);
  // The members of gang `id` share its device on what each has left, and
  // finish by their new speeds.
  void Reshare(int id);
  void ScheduleFinish(size_t i);
  void MeasureGang(int id);  // as `orrery run`'s Runner::MeasureInterleaved
  engine::WorldView View() const;
  // Observe, step, apply: the engine's stops and launches, and a wake-up for
  // its next periodic re-plan. The simulator decides nothing itself.
  Status Step();
  // The cluster share (with otherJobs): updates every job's demand, stops what
  // its decision shrinks and sets the cap the job's plan and launches keep
  // within (`cap`: what its tasks may hold, in: its quota or -1, out: its
  // share's launch cap); `others` gets the GPUs the other jobs are given.
  Status Share(engine::StepInput& in, int* others, int* cap);
  engine::JobDemand OtherDemand(size_t job) const;
  const std::string& JobName() const { return job_name_; }
  void Start(const engine::LaunchAction& launch);
  // Task `task` runs from now in `config` on `gpus` (alone or in gang `gang`).
  void StartOne(size_t task, int config, const std::vector<planner::GpuSlot>& gpus, int gang,
                double progress_from);
  // The planned GPUs where they are free, else any free GPU of the same node.
  std::vector<planner::GpuSlot> PickGpus(const std::vector<planner::GpuSlot>& planned) const;
  bool GpuUsable(const planner::GpuSlot& g) const {
    if (g.node < 0 || g.node >= static_cast<int>(alive_.size()) ||
        !alive_[static_cast<size_t>(g.node)])
      return false;
    auto it = owner_.find(g);
    return it == owner_.end() || it->second < 0;
  }

  const planner::Workload& w_;
  SimOptions o_;
  engine::Engine engine_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  long seq_ = 0;
  double now_ = 0;
  std::vector<SimTask> tasks_;
  std::vector<bool> alive_;
  std::vector<planner::Node> nodes_;
  std::map<planner::GpuSlot, int> owner_;
  std::map<int, SimGang> gangs_;  // running interleaved gangs by id
  int next_gang_ = 0;
  double gang_speedup_ = 1;  // what gangs truly run at (SimOptions::gang_speedup)
  double tick_at_ = -1;      // the wake-up already queued for the engine
  SimResult result_;
  // GPU-seconds alive, integrated as nodes come and go.
  double alive_gpu_seconds_ = 0;
  double alive_since_ = 0;
  int alive_gpus_ = 0;
  int cap_ = 0;  // the job's GPU cap now (quota events edit it)
  // The cluster share with the workload's otherJobs: which are on the
  // cluster, the configuration each of their tasks was last given ("job/task"
  // -> gpus, batch), and the decision last applied.
  std::optional<engine::ClusterShares> shares_;
  std::string job_name_;
  std::vector<bool> other_present_;
  std::map<std::string, std::pair<int, int>> other_current_;
  size_t share_log_seen_ = 0;
  int applied_share_ = 0;
  // The workload's tasks' batch and sample budget, as their demand reads them.
  std::vector<int> own_base_batch_;
  std::vector<double> own_total_work_;
};

engine::WorldView Sim::View() const {
  engine::WorldView v;
  v.now = now_;
  v.gpu_cap = cap_;
  for (size_t n = 0; n < nodes_.size(); ++n)
    v.nodes.push_back({nodes_[n].name, nodes_[n].gpus, nodes_[n].gpu_memory_gib,
                       static_cast<bool>(alive_[n]), nodes_[n].gpu_type});
  for (const SimTask& t : tasks_) {
    engine::TaskView tv;
    tv.name = t.spec->name;
    tv.remaining_work = t.remaining;
    tv.arrival = t.spec->arrival;
    tv.weight = t.spec->weight;
    tv.profile = t.spec->configs;
    tv.gpu_types = t.spec->gpu_types;
    tv.arrived = t.arrived;
    tv.done = t.done;
    tv.speed_factor = t.speed_factor;
    if (t.running) tv.running = engine::RunningView{t.config, t.gpus};
    v.tasks.push_back(std::move(tv));
  }
  return v;
}

Status Sim::Step() {
  for (SimTask& t : tasks_) Advance(t);
  engine::StepInput in;
  in.world = View();
  int others = 0;
  int cap = cap_ > 0 ? cap_ : -1;  // the GPUs the job may hold; -1: no cap
  if (shares_) ORRERY_RETURN_IF_ERROR(Share(in, &others, &cap));
  // A switch is charged as lost progress (switch_cost_s), so a stopped task's
  // GPUs are free at once.
  in.stops_free_at_once = true;
  in.free_gpus.assign(nodes_.size(), 0);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (int g = 0; g < nodes_[n].gpus; ++g) {
      if (GpuUsable({static_cast<int>(n), g})) ++in.free_gpus[n];
    }
  }
  // The other jobs' GPUs are theirs (from the last nodes: which ones is the
  // other jobs' business, not simulated).
  for (size_t n = nodes_.size(); n-- > 0 && others > 0;) {
    const int taken = std::min(others, in.free_gpus[n]);
    in.free_gpus[n] -= taken;
    others -= taken;
  }
  // The GPUs the job holds (a gang's members share theirs).
  std::set<planner::GpuSlot> held_slots;
  for (const SimTask& t : tasks_) {
    if (t.running) held_slots.insert(t.gpus.begin(), t.gpus.end());
  }
  const int held = static_cast<int>(held_slots.size());
  if (cap >= 0) in.launch_budget = std::max(0, cap - held);
  engine::StepResult r = engine_.Step(in);
  ORRERY_RETURN_IF_ERROR(r.error);
  if (r.decision) result_.solver_seconds += r.decision->solver_seconds;
  // The log is of solves: an adopted plan with nothing to solve is not one.
  if (r.status && r.decision->solved) result_.replan_log.push_back(*r.status);
  if (r.deferred) ++result_.coalesced;
  for (const engine::StopAction& stop : r.stops) {
    if (stop.task >= tasks_.size() || !tasks_[stop.task].running) continue;
    engine_.journal().Stopped(tasks_[stop.task].spec->name);
    Stop(stop.task, "preempted");
    ++result_.switches;
  }
  for (const engine::LaunchAction& l : r.launches) Start(l);
  if (std::isfinite(r.next_step_at) && r.next_step_at > now_ && r.next_step_at != tick_at_) {
    tick_at_ = r.next_step_at;
    Push(r.next_step_at, Kind::kTick, 0);
  }
  return OkStatus();
}

// A task's own batch as the cluster share reads it: the smallest a
// configuration names (1 when none does).
int BaseBatch(const planner::Task& t) {
  int b = 0;
  for (const planner::Config& c : t.configs) {
    if (c.batch_size > 0 && (b == 0 || c.batch_size < b)) b = c.batch_size;
  }
  return std::max(b, 1);
}

engine::JobDemand Sim::OtherDemand(size_t j) const {
  const planner::OtherJob& job = w_.other_jobs[j];
  engine::WorldView v;
  v.now = now_;
  // The cluster's nodes: its pools of GPU types.
  for (size_t n = 0; n < nodes_.size(); ++n) {
    v.nodes.push_back({nodes_[n].name, nodes_[n].gpus, nodes_[n].gpu_memory_gib,
                       static_cast<bool>(alive_[n]), nodes_[n].gpu_type});
  }
  std::vector<int> base;
  std::vector<double> total;
  for (const planner::Task& t : job.tasks) {
    engine::TaskView tv;
    tv.name = t.name;
    tv.remaining_work = t.work;
    tv.weight = t.weight;
    tv.profile = t.configs;
    base.push_back(BaseBatch(t));
    total.push_back(t.work);
    auto cur = other_current_.find(job.name + "/" + t.name);
    for (size_t c = 0; cur != other_current_.end() && c < t.configs.size(); ++c) {
      const planner::Config& config = t.configs[c];
      if (config.gpus == cur->second.first &&
          (config.batch_size > 0 ? config.batch_size : base.back()) == cur->second.second) {
        tv.running = engine::RunningView{static_cast<int>(c), {}};
        break;
      }
    }
    v.tasks.push_back(std::move(tv));
  }
  return engine::DemandFromView(job.name, job.quota, v, base, total);
}

Status Sim::Share(engine::StepInput& in, int* others, int* cap) {
  // The alive GPUs by type: the shares are decided per type.
  std::map<std::string, int> capacity;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (alive_[n]) capacity[nodes_[n].gpu_type] += nodes_[n].gpus;
  }
  // The job's own demand first, as it is now (its tasks running or not), then
  // the other jobs': a decision any of them triggers sees every job as it is.
  bool decided = false;
  StatusOr<engine::ShareUpdate> u = shares_->Update(
      engine::DemandFromView(JobName(), cap_, in.world, own_base_batch_, own_total_work_), capacity,
      now_);
  ORRERY_RETURN_IF_ERROR(u.status());
  decided = u->decided;
  for (size_t j = 0; j < w_.other_jobs.size(); ++j) {
    if (!other_present_[j]) continue;
    u = shares_->Update(OtherDemand(j), capacity, now_);
    ORRERY_RETURN_IF_ERROR(u.status());
    decided = decided || u->decided;
  }
  // What each other job's tasks were given: their state in the next demand.
  const std::vector<engine::ScaleDecision>& log = shares_->log();
  for (; share_log_seen_ < log.size(); ++share_log_seen_) {
    const engine::ScaleDecision& d = log[share_log_seen_];
    if (d.action == engine::ScaleDecision::Action::kStart ||
        d.action == engine::ScaleDecision::Action::kRescale) {
      other_current_[d.task] = {d.to_gpus, d.to_batch};
    } else if (d.action == engine::ScaleDecision::Action::kPreempt) {
      other_current_.erase(d.task);
    }
  }
  result_.share_decisions = shares_->decisions();
  if (decided) Push(now_ + o_.cluster_share.interval_s, Kind::kTick, 0);
  for (const auto& [job, share] : u->shares) {
    if (job != JobName()) *others += share.gpus;
  }
  auto mine = u->shares.find(JobName());
  if (mine == u->shares.end()) return OkStatus();  // nothing of the job's waits
  const engine::ShareStep step = engine::StepShare(mine->second, *cap, in.world, applied_share_);
  applied_share_ = std::max(applied_share_, mine->second.decision);
  for (const engine::StopAction& stop : step.stops) {
    const std::string& name = tasks_[stop.task].spec->name;
    engine_.journal().IssuedShareStop(name, now_);
    engine_.journal().Stopped(name);
    Stop(stop.task, "preempted");
    ++result_.switches;
    ++result_.share_stops;
    in.also = engine::Trigger::kCapacityChanged;  // as the operator's: plan again on it
  }
  if (!step.stops.empty()) in.world = View();
  in.world.gpu_cap = step.plan_cap;
  *cap = step.launch_cap;
  return OkStatus();
}

std::vector<planner::GpuSlot> Sim::PickGpus(const std::vector<planner::GpuSlot>& planned) const {
  std::vector<planner::GpuSlot> gpus;
  std::set<planner::GpuSlot> taken;
  for (const planner::GpuSlot& g : planned) {
    if (GpuUsable(g) && taken.insert(g).second) gpus.push_back(g);
  }
  for (const planner::GpuSlot& g : planned) {
    if (std::find(gpus.begin(), gpus.end(), g) != gpus.end()) continue;
    for (int k = 0; k < nodes_[static_cast<size_t>(g.node)].gpus; ++k) {
      planner::GpuSlot other{g.node, k};
      if (GpuUsable(other) && taken.insert(other).second) {
        gpus.push_back(other);
        break;
      }
    }
  }
  return gpus;
}

void Sim::Start(const engine::LaunchAction& l) {
  const std::vector<planner::GpuSlot> gpus = PickGpus(l.gpus);
  if (gpus.size() != l.gpus.size()) {
    ++result_.launches_refused;  // never onto fewer GPUs than asked, or shared ones
    return;
  }
  std::vector<const engine::LaunchAction*> all = {&l};
  for (const engine::LaunchAction& m : l.interleaved) all.push_back(&m);
  // A gang's process restores every member before any trains: it pays the
  // switch once, when one of them ran before.
  bool restarted = false;
  for (const engine::LaunchAction* a : all) restarted = restarted || tasks_[a->task].ever_started;
  const double progress_from = now_ + (restarted ? o_.engine.switch_cost_s : 0);
  if (l.interleaved.empty()) {
    StartOne(l.task, l.config, gpus, -1, progress_from);
    ScheduleFinish(l.task);
    Push(progress_from + o_.measure_after_s, Kind::kMeasure, static_cast<int>(l.task),
         tasks_[l.task].epoch);
    return;
  }
  const int id = next_gang_++;
  SimGang& gang = gangs_[id];
  std::vector<std::string> names;
  for (const engine::LaunchAction* a : all) {
    names.push_back(tasks_[a->task].spec->name);
    gang.members.push_back(a->task);
  }
  gang.name = planner::GangName(names);
  gang.gpus = gpus;
  for (const engine::LaunchAction* a : all) StartOne(a->task, a->config, gpus, id, progress_from);
  ++result_.gangs;
  Reshare(id);
  Push(progress_from + o_.measure_after_s, Kind::kGangMeasure, id);
}

void Sim::StartOne(size_t i, int config, const std::vector<planner::GpuSlot>& gpus, int gang,
                   double progress_from) {
  SimTask& t = tasks_[i];
  engine_.journal().Launched(t.spec->name, config);
  t.running = true;
  t.config = config;
  t.gpus = gpus;
  t.start = now_;
  t.progress_from = progress_from;
  t.last_advance = now_;
  t.ever_started = true;
  t.gang = gang;
  t.gang_name = gang >= 0 ? gangs_.at(gang).name : std::string();
  t.share = 1;
  for (const planner::GpuSlot& g : t.gpus) owner_[g] = static_cast<int>(i);
}

void Sim::ScheduleFinish(size_t i) {
  SimTask& t = tasks_[i];
  ++t.epoch;
  const double rate = Rate(t);
  const double from = std::max(now_, t.progress_from);
  Push(rate > 0 ? from + t.remaining / rate : from, Kind::kFinish, static_cast<int>(i), t.epoch);
}

void Sim::Reshare(int id) {
  SimGang& gang = gangs_.at(id);
  // The device is shared as the plan timed the gang: on each member's alone
  // seconds left by what the engine knows of its speed (the planner's own
  // model, interleave.h), at the speedup gangs truly run at. A member truly
  // faster than its profile finishes first and leaves the rest the device.
  std::vector<double> alone;
  for (size_t m : gang.members) {
    SimTask& t = tasks_[m];
    Advance(t);
    const double known = t.spec->configs[static_cast<size_t>(t.config)].throughput * t.speed_factor;
    alone.push_back(known > 0 ? t.remaining / known : 0);
  }
  const std::vector<double> shares = planner::GangShares(alone, gang_speedup_);
  for (size_t k = 0; k < gang.members.size(); ++k) {
    tasks_[gang.members[k]].share = shares[k];
    ScheduleFinish(gang.members[k]);
  }
}

void Sim::Release(size_t i) {
  SimTask& t = tasks_[i];
  const int id = t.gang;
  if (id >= 0) {
    // A gang whose first member completes before its measuring time is
    // measured then, as `orrery run` measures it from the members' reports.
    if (t.done) MeasureGang(id);
    SimGang& gang = gangs_.at(id);
    gang.members.erase(std::remove(gang.members.begin(), gang.members.end(), i),
                       gang.members.end());
    t.gang = -1;
    t.share = 1;
    if (!gang.members.empty()) {
      for (const planner::GpuSlot& g : gang.gpus) owner_[g] = static_cast<int>(gang.members[0]);
      Reshare(id);
      return;
    }
    gangs_.erase(id);
  }
  for (const planner::GpuSlot& g : t.gpus) owner_[g] = -1;
}

void Sim::MeasureGang(int id) {
  auto it = gangs_.find(id);
  if (it == gangs_.end() || it->second.measured || it->second.members.size() < 2) return;
  it->second.measured = true;
  // Each member's speed over its profiled speed alone, summed: the gang's
  // speed over its members one after the other.
  double speedup = 0;
  for (size_t m : it->second.members) {
    const SimTask& t = tasks_[m];
    speedup += Rate(t) / t.spec->configs[static_cast<size_t>(t.config)].throughput;
  }
  result_.gang_speedups.push_back(speedup);
  engine::EngineOptions o = engine_.options();
  if (o.interleave_speedup > 0 &&
      std::abs(speedup / o.interleave_speedup - 1) > o.drift_tolerance) {
    o.interleave_speedup = speedup;  // the next plan's gangs are timed with it
    engine_.UpdateOptions(o, engine::Trigger::kGangSpeedMeasured);
  }
}

void Sim::Init() {
  result_.workload = w_.name;
  result_.policy = o_.engine.policy + (o_.engine.introspect ? "" : "-static");
  result_.gpus_per_node = w_.gpus_per_node;
  nodes_ = w_.problem.nodes;
  cap_ = w_.problem.gpu_cap;
  job_name_ = w_.name.empty() ? "workload" : w_.name;
  if (!w_.other_jobs.empty()) {
    engine::ClusterShareOptions so = o_.cluster_share;
    so.autoscaler.rescale_cost_s = o_.engine.switch_cost_s;  // as the operator's
    shares_.emplace(so);
    for (const planner::Task& t : w_.problem.tasks) {
      own_base_batch_.push_back(BaseBatch(t));
      own_total_work_.push_back(t.work);
    }
    other_present_.assign(w_.other_jobs.size(), false);
    for (size_t j = 0; j < w_.other_jobs.size(); ++j) {
      const planner::OtherJob& o = w_.other_jobs[j];
      if (o.arrival > 0) {
        Push(o.arrival, Kind::kOtherJob, static_cast<int>(j), 0);
      } else {
        other_present_[j] = true;
      }
      if (o.leave > o.arrival) Push(o.leave, Kind::kOtherJob, static_cast<int>(j), 1);
    }
  }
  alive_.assign(nodes_.size(), true);
  for (const planner::Node& n : nodes_) alive_gpus_ += n.gpus;
  for (size_t i = 0; i < w_.problem.tasks.size(); ++i) {
    SimTask t;
    t.spec = &w_.problem.tasks[i];
    t.true_speed = i < w_.true_speed.size() ? w_.true_speed[i] : 1.0;
    t.remaining = t.spec->work;
    tasks_.push_back(t);
    if (t.spec->arrival > 0)
      Push(t.spec->arrival, Kind::kArrival, static_cast<int>(i));
    else
      tasks_.back().arrived = true;
  }
  for (size_t k = 0; k < w_.events.size(); ++k) {
    const planner::ClusterEvent& e = w_.events[k];
    switch (e.kind) {
      case planner::ClusterEvent::Kind::kNodeLost: Push(e.time, Kind::kNodeLost, e.node); break;
      case planner::ClusterEvent::Kind::kNodeJoined:
        Push(e.time, Kind::kNodeJoined, static_cast<int>(k));
        break;
      case planner::ClusterEvent::Kind::kPoolLost:
        Push(e.time, Kind::kPoolLost, static_cast<int>(k));
        break;
      case planner::ClusterEvent::Kind::kQuota: Push(e.time, Kind::kQuota, e.gpus); break;
    }
  }
}

void Sim::NodeLost(size_t i) {
  if (i >= alive_.size() || !alive_[i]) return;
  alive_gpu_seconds_ += alive_gpus_ * (now_ - alive_since_);
  alive_since_ = now_;
  alive_gpus_ -= nodes_[i].gpus;
  alive_[i] = false;
  for (size_t k = 0; k < tasks_.size(); ++k) {
    if (!tasks_[k].running) continue;
    bool hit = false;
    for (const planner::GpuSlot& g : tasks_[k].gpus) hit = hit || g.node == static_cast<int>(i);
    if (hit) Stop(k, "node-lost");
  }
  ++result_.node_events;
}

bool Sim::Handle(const Event& e) {
  const size_t i = static_cast<size_t>(std::max(0, e.index));
  switch (e.kind) {
    case Kind::kArrival: tasks_[i].arrived = true; break;
    case Kind::kFinish: {
      SimTask& t = tasks_[i];
      if (!t.running || e.epoch != t.epoch) break;
      Advance(t);
      Record(i, "finished");
      t.running = false;
      t.done = true;
      t.remaining = 0;
      t.completion = now_;
      Release(i);  // a gang's other members share its device again
      return true;
    }
    case Kind::kMeasure: {
      SimTask& t = tasks_[i];
      // A gang member's speed is its gang's, measured as a whole (kGangMeasure).
      if (!t.running || e.epoch != t.epoch || t.measured || t.gang >= 0) break;
      t.measured = true;
      t.speed_factor = t.true_speed;
      break;
    }
    case Kind::kGangMeasure: MeasureGang(e.index); break;
    case Kind::kNodeLost: NodeLost(i); break;
    case Kind::kNodeJoined: {
      alive_gpu_seconds_ += alive_gpus_ * (now_ - alive_since_);
      alive_since_ = now_;
      // A node like its pool's (the first pool's when the event names none).
      planner::Node node{"node-" + std::to_string(nodes_.size()), w_.gpus_per_node,
                         w_.gpu_memory_gib};
      const std::string& type = w_.events[i].gpu_type;
      for (const planner::Pool& p : w_.pools) {
        if (p.gpu_type == type || (type.empty() && &p == &w_.pools.front()))
          node = {node.name, p.gpus_per_node, p.gpu_memory_gib, p.gpu_type};
      }
      nodes_.push_back(node);
      alive_.push_back(true);
      alive_gpus_ += node.gpus;
      ++result_.node_events;
      break;
    }
    case Kind::kPoolLost:
      for (size_t n = 0; n < nodes_.size(); ++n)
        if (nodes_[n].gpu_type == w_.events[i].gpu_type) NodeLost(n);
      break;
    case Kind::kQuota:  // the job's gpuQuota edited: the engine stops or plans
      cap_ = e.index;
      break;
    case Kind::kTick:  // the engine asked to be asked again now
      break;
    case Kind::kOtherJob:  // another job on the cluster arrives or leaves
      other_present_[i] = e.epoch == 0;
      if (e.epoch == 1) shares_->Remove(w_.other_jobs[i].name);
      break;
  }
  return false;
}

StatusOr<SimResult> Sim::Run() {
  Init();
  ORRERY_RETURN_IF_ERROR(Step());
  size_t done = 0;
  while (!queue_.empty() && done < tasks_.size()) {
    Event e = queue_.top();
    queue_.pop();
    if (e.time > o_.max_time_s) return DeadlineExceededError("simulation passed its time limit");
    now_ = e.time;
    if (Handle(e)) ++done;
    // Events at the same instant are observed together: one step for all.
    if (!queue_.empty() && queue_.top().time == now_) continue;
    ORRERY_RETURN_IF_ERROR(Step());
  }
  if (done < tasks_.size())
    return InternalError("simulation stalled with tasks left (no plan places them)");
  Summarize();
  return result_;
}

void Sim::Summarize() {
  std::vector<double> ct;
  for (const SimTask& t : tasks_) {
    result_.makespan = std::max(result_.makespan, t.completion);
    result_.completion.push_back(t.completion);
    ct.push_back(t.completion - t.spec->arrival);
  }
  alive_gpu_seconds_ += alive_gpus_ * (result_.makespan - alive_since_);
  // GPU-seconds held: each GPU's busy time once, though a gang's members
  // share it.
  std::map<planner::GpuSlot, std::vector<std::pair<double, double>>> busy;
  for (const RunInterval& r : result_.intervals) {
    for (const planner::GpuSlot& g : r.slots) busy[g].push_back({r.start, r.end});
  }
  double used = 0;
  for (auto& [slot, spans] : busy) {
    std::sort(spans.begin(), spans.end());
    double until = -std::numeric_limits<double>::infinity();
    for (const auto& [from, to] : spans) {
      if (to > until) used += to - std::max(from, until);
      until = std::max(until, to);
    }
  }
  result_.gpu_utilisation = alive_gpu_seconds_ > 0 ? used / alive_gpu_seconds_ : 0;
  std::sort(ct.begin(), ct.end());
  double sum = 0;
  for (double c : ct) sum += c;
  result_.mean_completion = ct.empty() ? 0 : sum / static_cast<double>(ct.size());
  result_.p95_completion =
      ct.empty()
          ? 0
          : ct[std::min(ct.size() - 1,
                        static_cast<size_t>(std::ceil(0.95 * static_cast<double>(ct.size()))) - 1)];
  result_.actions = engine_.journal().entries();
  result_.violations = engine_.journal().violations();
  result_.replans = engine_.solves();
  result_.adoptions = engine_.adoptions();
  result_.tasks = static_cast<int>(tasks_.size());
  result_.nodes_total = static_cast<int>(nodes_.size());
}

}  // namespace

StatusOr<SimResult> Simulate(const planner::Workload& workload, const SimOptions& options,
                             const Clock* clock) {
  ORRERY_RETURN_IF_ERROR(planner::ValidateProblem(workload.problem));
  Sim sim(workload, options, clock);
  return sim.Run();
}

std::string ResultJson(const SimResult& r) {
  nlohmann::json j;
  j["workload"] = r.workload;
  j["policy"] = r.policy;
  j["makespanSeconds"] = r.makespan;
  j["meanCompletionSeconds"] = r.mean_completion;
  j["p95CompletionSeconds"] = r.p95_completion;
  j["gpuUtilisation"] = r.gpu_utilisation;
  j["solverSeconds"] = r.solver_seconds;
  j["replans"] = r.replans;
  j["adoptions"] = r.adoptions;
  j["switches"] = r.switches;
  j["coalescedSteps"] = r.coalesced;
  j["gangs"] = r.gangs;
  j["shareStops"] = r.share_stops;
  j["shareDecisions"] = r.share_decisions;
  j["gangSpeedups"] = r.gang_speedups;
  nlohmann::json log = nlohmann::json::array();
  for (const Replan& p : r.replan_log)
    log.push_back({{"time", p.at},
                   {"trigger", p.trigger},
                   {"solverSeconds", p.solver_seconds},
                   {"gap", p.solve_gap},
                   {"lowerBound", p.lower_bound},
                   {"objective", p.objective},
                   {"tasks", p.tasks_planned},
                   {"adopted", p.adopted},
                   {"warmStart", p.warm},
                   {"keptRunning", p.kept_running}});
  j["replanLog"] = log;
  nlohmann::json intervals = nlohmann::json::array();
  for (const RunInterval& iv : r.intervals) {
    nlohmann::json slots = nlohmann::json::array();
    for (const planner::GpuSlot& g : iv.slots) slots.push_back({{"node", g.node}, {"gpu", g.gpu}});
    intervals.push_back({{"task", iv.task},
                         {"start", iv.start},
                         {"end", iv.end},
                         {"template", iv.template_name},
                         {"gpus", iv.gpus},
                         {"batchSize", iv.batch_size},
                         {"slots", slots},
                         {"endedBy", iv.ended_by},
                         {"gang", iv.gang}});
  }
  j["intervals"] = intervals;
  return j.dump(2) + "\n";
}

std::string ResultTable(const SimResult& r) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  out << "workload " << r.workload << ", policy " << r.policy << ", " << r.tasks << " tasks\n";
  out << "  makespan            " << r.makespan / 3600 << " h\n";
  out << "  mean completion     " << r.mean_completion / 3600 << " h\n";
  out << "  p95 completion      " << r.p95_completion / 3600 << " h\n";
  out << "  GPU utilisation     " << 100 * r.gpu_utilisation << " %\n";
  out << "  solver time         " << r.solver_seconds << " s\n";
  out << "  re-plans / adopted  " << r.replans << " / " << r.adoptions << "\n";
  out << "  switches            " << r.switches << "\n";
  out << "  coalesced steps     " << r.coalesced << "\n";
  if (r.share_decisions > 0) {
    out << "  share stops         " << r.share_stops << " (of " << r.share_decisions
        << " cluster-share decisions with the other jobs)\n";
  }
  if (r.launches_refused > 0) {
    out << "  launches refused    " << r.launches_refused
        << " (the engine counted GPUs that were not free)\n";
  }
  if (r.gangs > 0) {
    out << "  interleaved gangs   " << r.gangs;
    if (!r.gang_speedups.empty()) out << " (measured";
    for (double s : r.gang_speedups) out << " " << s << "x";
    if (!r.gang_speedups.empty()) out << ")";
    out << "\n";
  }
  // Per trigger: solves, solver seconds (total and most), mean and worst gap.
  struct Row {
    int n = 0;
    double seconds = 0, most = 0, gap = 0, worst = 0;
  };
  std::map<std::string, Row> by;
  for (const Replan& p : r.replan_log) {
    Row& row = by[p.trigger];
    ++row.n;
    row.seconds += p.solver_seconds;
    row.most = std::max(row.most, p.solver_seconds);
    row.gap += p.solve_gap;
    row.worst = std::max(row.worst, p.solve_gap);
  }
  if (!by.empty()) out << "  re-plans by trigger (solves, solver s total / max, gap mean / max):\n";
  for (const auto& [trigger, row] : by)
    out << "    " << std::left << std::setw(18) << trigger << std::right << std::setw(5) << row.n
        << std::setw(10) << row.seconds << std::setw(8) << row.most << std::setw(8)
        << 100 * row.gap / row.n << "%" << std::setw(7) << 100 * row.worst << "%\n";
  return out.str();
}

std::string ReplanTable(const SimResult& r) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3);
  out << "  re-plans: time[h] trigger solver[s] gap tasks adopted warm kept-running\n";
  for (const Replan& p : r.replan_log)
    out << "    " << p.at / 3600 << " " << p.trigger << " " << p.solver_seconds << " "
        << 100 * p.solve_gap << "% " << p.tasks_planned << " " << (p.adopted ? "yes" : "no") << " "
        << (p.warm ? "yes" : "no") << " " << (p.kept_running ? "yes" : "no") << "\n";
  return out.str();
}

namespace {
// The band of its lanes an interval draws and how many there are: a gang
// member's place in the gang's name ("a+b") and the gang's size; (0, 1) alone.
std::pair<int, int> GangBand(const RunInterval& iv) {
  if (iv.gang.empty()) return {0, 1};
  std::vector<std::string> names;
  std::stringstream in(iv.gang);
  for (std::string n; std::getline(in, n, '+');) names.push_back(n);
  const auto it = std::find(names.begin(), names.end(), iv.task);
  if (names.empty() || it == names.end()) return {0, 1};
  return {static_cast<int>(it - names.begin()), static_cast<int>(names.size())};
}
}  // namespace

std::string GanttSvg(const SimResult& r) {
  // One lane per GPU, grouped by node; a time axis in hours; every interval a bar
  // coloured by task, labelled with the task name where it is wide enough, with
  // the full details in its tooltip.
  const double width = 1200, lane = 12, left = 80, top = 28, axis = 26;
  const int lanes = r.nodes_total * r.gpus_per_node;
  const double span = std::max(1.0, r.makespan);
  const double height = top + lanes * lane + r.nodes_total * 4 + axis;
  auto lane_y = [&](const planner::GpuSlot& g) {
    return top + (g.node * r.gpus_per_node + g.gpu) * lane + g.node * 4;
  };
  auto escape = [](const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '<')
        out += "&lt;";
      else if (c == '>')
        out += "&gt;";
      else if (c == '&')
        out += "&amp;";
      else
        out += c;
    }
    return out;
  };
  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width + left + 20 << "\" height=\""
      << height << "\" font-family=\"sans-serif\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"4\" y=\"16\" font-size=\"13\" font-weight=\"bold\">" << escape(r.workload)
      << " / " << escape(r.policy) << ": makespan " << r.makespan / 3600 << " h, " << r.tasks
      << " tasks on " << lanes << " GPUs</text>\n";
  for (int n = 0; n < r.nodes_total; ++n) {
    const double y = lane_y({n, 0});
    svg << "<text x=\"4\" y=\"" << y + 9 << "\" font-size=\"10\">node " << n << "</text>\n";
    svg << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << width << "\" height=\""
        << r.gpus_per_node * lane << "\" fill=\"#f4f4f4\"/>\n";
  }
  // Hour ticks, about ten of them.
  const double hours = span / 3600;
  const double step_h = hours <= 10 ? 1 : std::ceil(hours / 10);
  const double axis_y = height - axis + 4;
  for (double h = 0; h <= hours + 1e-9; h += step_h) {
    const double x = left + h * 3600 / span * width;
    svg << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << axis_y
        << "\" stroke=\"#ccc\" stroke-width=\"0.5\"/>\n";
    svg << "<text x=\"" << x << "\" y=\"" << axis_y + 12
        << "\" font-size=\"10\" text-anchor=\"middle\">" << h << " h</text>\n";
  }
  std::ostringstream labels;  // over every bar: a gang's later bands do not hide its name
  labels << std::fixed << std::setprecision(1);
  for (const RunInterval& iv : r.intervals) {
    const size_t hash = std::hash<std::string>{}(iv.task);
    const int hue = static_cast<int>(hash % 360);
    const double x = left + iv.start / span * width;
    const double w = std::max(0.5, (iv.end - iv.start) / span * width);
    const std::string title =
        escape(iv.task) + " " + iv.template_name + " x" + std::to_string(iv.gpus) + ", batch " +
        std::to_string(iv.batch_size) + ", " + std::to_string(static_cast<int>(iv.start)) + "-" +
        std::to_string(static_cast<int>(iv.end)) + " s, ended by " + iv.ended_by +
        (iv.gang.empty() ? "" : ", interleaved gang " + escape(iv.gang));
    // A gang's members share their lanes, as in `orrery run`'s report: each
    // draws its own band of them, in the gang's order, outlined in black.
    auto [band, bands] = GangBand(iv);
    const double band_h = (lane - 1) / bands;
    double first_y = 1e300;
    for (const planner::GpuSlot& g : iv.slots) {
      const double y = lane_y(g) + band * band_h;
      first_y = std::min(first_y, y);
      svg << "<rect class=\"bar\" data-gang=\"" << escape(iv.gang) << "\" x=\"" << x << "\" y=\""
          << y << "\" width=\"" << w << "\" height=\"" << band_h << "\" fill=\"hsl(" << hue
          << ",60%,60%)\" stroke=\"" << (iv.gang.empty() ? "white" : "black")
          << "\" stroke-width=\"0.3\"><title>" << title << "</title></rect>\n";
    }
    // Label the bar when the name fits (about 6 px per character at 10 px);
    // a gang once, over its members' bands, by its name.
    const std::string label = bands == 1 ? iv.task : iv.gang;
    if (!iv.slots.empty() && band == 0 && w > 6.0 * static_cast<double>(label.size()) + 4) {
      labels << "<text x=\"" << x + 2 << "\" y=\"" << first_y + 9 << "\" font-size=\"9\">"
             << escape(label) << " " << (bands == 1 ? iv.template_name : "interleaved")
             << "</text>\n";
    }
  }
  svg << labels.str() << "</svg>\n";
  return svg.str();
}

}  // namespace orrery::sim
