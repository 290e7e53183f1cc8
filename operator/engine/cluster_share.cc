// The upper level: one autoscaler decision over every job's tasks, read back as
// per-job shares and caps.
#include "operator/engine/cluster_share.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "operator/engine/profile_configs.h"

namespace orrery::engine {

JobDemand DemandFromWorld(const std::string& job, int quota, const WorldView& world,
                          const std::vector<api::ExpandedTask>& tasks) {
  std::vector<int> base;
  std::vector<double> total;
  for (size_t t = 0; t < world.tasks.size() && t < tasks.size(); ++t) {
    base.push_back(static_cast<int>(tasks[t].task.training.batch_size));
    total.push_back(static_cast<double>(SampleBudget(tasks[t].task)));
  }
  return DemandFromView(job, quota, world, base, total);
}

JobDemand DemandFromView(const std::string& job, int quota, const WorldView& world,
                         const std::vector<int>& base_batch,
                         const std::vector<double>& total_work) {
  JobDemand d;
  d.job = job;
  d.quota = quota;
  // The GPU types of the alive nodes ("" for unlabelled ones), each option in
  // one of them.
  std::set<std::string> types;
  for (const NodeView& n : world.nodes) {
    if (n.alive) types.insert(n.gpu_type);
  }
  d.pools.assign(types.begin(), types.end());
  auto pool_of = [&](const std::string& type) {
    auto it = std::find(d.pools.begin(), d.pools.end(), type);
    return it == d.pools.end() ? -1 : static_cast<int>(it - d.pools.begin());
  };
  for (size_t t = 0; t < world.tasks.size() && t < base_batch.size() && t < total_work.size();
       ++t) {
    const TaskView& v = world.tasks[t];
    if (!v.arrived || v.done || v.remaining_work <= 0 || v.profile.empty()) continue;
    const int base = base_batch[t];
    ScaleTask s;
    s.name = v.name;
    s.weight = v.weight;
    s.base_batch = base;
    s.remaining_work = v.remaining_work;
    s.total_work = std::max(v.remaining_work, total_work[t]);
    // The pools a configuration runs in: its type's, or (typeless) every pool
    // of a type the task may use.
    auto pools_of = [&](const planner::Config& c) {
      std::vector<int> out;
      if (d.pools.empty()) {
        out.push_back(0);  // a view without nodes: any
      } else if (!c.gpu_type.empty()) {
        if (int p = pool_of(c.gpu_type); p >= 0) out.push_back(p);
      } else {
        for (size_t p = 0; p < d.pools.size(); ++p) {
          if (planner::AllowsGpuType(v.gpu_types, d.pools[p])) out.push_back(static_cast<int>(p));
        }
      }
      return out;
    };
    // (pool, gpus, batch) -> fastest throughput
    std::map<std::tuple<int, int, int>, double> best;
    for (const planner::Config& c : v.profile) {
      if (c.gpus < 1 || !(c.throughput > 0)) continue;
      if (quota > 0 && c.gpus > quota) continue;
      for (int p : pools_of(c)) {
        double& x = best[{p, c.gpus, c.batch_size > 0 ? c.batch_size : base}];
        x = std::max(x, c.throughput * v.speed_factor);
      }
    }
    if (best.empty()) continue;
    for (const auto& [key, throughput] : best) {
      s.options.push_back({std::get<1>(key), std::get<2>(key), throughput, std::get<0>(key)});
    }
    if (v.running && v.running->config >= 0 &&
        static_cast<size_t>(v.running->config) < v.profile.size()) {
      const planner::Config& c = v.profile[static_cast<size_t>(v.running->config)];
      const int batch = c.batch_size > 0 ? c.batch_size : base;
      // Its pool: its type's, or the type of the node it runs on.
      std::string type = c.gpu_type;
      if (type.empty() && !v.running->gpus.empty()) {
        const size_t node = static_cast<size_t>(v.running->gpus.front().node);
        if (node < world.nodes.size()) type = world.nodes[node].gpu_type;
      }
      const int pool = d.pools.size() <= 1 ? 0 : pool_of(type);
      for (size_t j = 0; j < s.options.size(); ++j) {
        if (s.options[j].gpus == c.gpus && s.options[j].batch_size == batch &&
            s.options[j].type == pool)
          s.current = static_cast<int>(j);
      }
    }
    d.tasks.push_back(std::move(s));
  }
  return d;
}

bool ClusterShares::QuotasMoved() const {
  for (const auto& [job, d] : demands_) {
    auto it = decided_quotas_.find(job);
    if (it != decided_quotas_.end() && it->second != d.quota) return true;
  }
  return false;
}

StatusOr<ShareUpdate> ClusterShares::Update(JobDemand demand, int capacity, double now) {
  if (capacity < 0) return InvalidArgumentError("capacity: must not be negative");
  return Update(std::move(demand), std::map<std::string, int>{{"", capacity}}, now);
}

StatusOr<ShareUpdate> ClusterShares::Update(JobDemand demand,
                                            const std::map<std::string, int>& capacity,
                                            double now) {
  for (const auto& [type, gpus] : capacity) {
    if (gpus < 0) return InvalidArgumentError("capacity[" + type + "]: must not be negative");
  }
  for (size_t i = 0; i < demand.tasks.size(); ++i) {
    for (size_t j = 0; j < demand.tasks[i].options.size(); ++j) {
      const int type = demand.tasks[i].options[j].type;
      if (type < 0 || (type > 0 && static_cast<size_t>(type) >= demand.pools.size()))
        return InvalidArgumentError("demand.tasks[" + std::to_string(i) + "].options[" +
                                    std::to_string(j) + "].type: " + std::to_string(type) +
                                    " names no pool of demand.pools");
    }
  }
  if (demand.job.empty()) return InvalidArgumentError("demand.job: must name the job");
  if (demand.quota < 0)
    return InvalidArgumentError("demand.quota: must not be negative (0 means none)");
  if (demand.tasks.empty()) {
    demands_.erase(demand.job);
  } else {
    demands_[demand.job] = std::move(demand);
  }
  std::set<std::string> tasks;
  for (const auto& [job, d] : demands_) {
    for (const ScaleTask& t : d.tasks) tasks.insert(job + "/" + t.name);
  }
  std::optional<ScaleTrigger> trigger;
  if (!std::includes(decided_tasks_.begin(), decided_tasks_.end(), tasks.begin(), tasks.end())) {
    trigger = ScaleTrigger::kArrival;
  } else if (tasks != decided_tasks_) {
    trigger = ScaleTrigger::kCompletion;
  } else if (capacity != decided_capacity_ || QuotasMoved()) {
    // A job's gpuQuota edited is capacity moved for it: decided again now.
    trigger = ScaleTrigger::kCapacityChanged;
  } else if (!tasks.empty() && now - last_decision_ >= options_.interval_s) {
    trigger = ScaleTrigger::kInterval;
  }
  capacity_ = capacity;
  if (!trigger) {
    ShareUpdate u;
    u.shares = shares_;
    return u;
  }
  return Decide(*trigger, now);
}

namespace {

// Every job's tasks as one autoscaler problem, named "job/task", each task's
// options bounded by its job's quota (no single task may hold more); `owner`
// gets each task's job.
std::vector<ScaleTask> CombinedTasks(const std::map<std::string, JobDemand>& demands,
                                     std::vector<std::string>* owner) {
  std::vector<ScaleTask> all;
  for (const auto& [job, d] : demands) {
    for (const ScaleTask& t : d.tasks) {
      ScaleTask s = t;
      s.name = job + "/" + t.name;
      if (d.quota > 0) {
        s.options.clear();
        s.current = -1;
        for (size_t j = 0; j < t.options.size(); ++j) {
          if (t.options[j].gpus > d.quota) continue;
          if (static_cast<int>(j) == t.current) s.current = static_cast<int>(s.options.size());
          s.options.push_back(t.options[j]);
        }
        if (s.options.empty()) continue;
      }
      all.push_back(std::move(s));
      owner->push_back(job);
    }
  }
  return all;
}

// Per job, what the decision did to each of its tasks, as an event note.
std::map<std::string, std::string> DecisionNotes(const std::vector<ScaleDecision>& decisions) {
  std::map<std::string, std::string> reasons;
  for (const ScaleDecision& d : decisions) {
    const std::string job = d.task.substr(0, d.task.rfind('/'));
    std::string& r = reasons[job];
    if (r.size() > 700) continue;  // an event note, not the log: the log has every decision
    char line[200];
    if (d.to_gpus > 0) {
      std::snprintf(line, sizeof(line), "%s%s %s %d GPUs at batch %d", r.empty() ? "" : "; ",
                    d.task.substr(job.size() + 1).c_str(), ActionName(d.action), d.to_gpus,
                    d.to_batch);
    } else {
      std::snprintf(line, sizeof(line), "%s%s %s", r.empty() ? "" : "; ",
                    d.task.substr(job.size() + 1).c_str(),
                    d.action == ScaleDecision::Action::kQueue ? "queued" : ActionName(d.action));
    }
    r += line;
  }
  return reasons;
}

// Shrinks that give GPUs to other jobs: a job the decision leaves as many GPUs
// as it holds moves GPUs among its own tasks, and that is its own engine's
// business, not the level above's.
std::map<std::string, std::vector<ShareShrink>> ShrinksAcrossJobs(
    const std::vector<ScaleTask>& all, const std::vector<std::string>& owner,
    const std::map<std::string, int>& given, const std::vector<ScaleDecision>& decisions) {
  std::map<std::string, int> holds;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].current >= 0)
      holds[owner[i]] += all[i].options[static_cast<size_t>(all[i].current)].gpus;
  }
  std::map<std::string, std::vector<ShareShrink>> shrinks;
  for (const ScaleDecision& d : decisions) {
    const bool preempt = d.action == ScaleDecision::Action::kPreempt;
    if (!preempt && !(d.action == ScaleDecision::Action::kRescale && d.to_gpus < d.from_gpus))
      continue;
    const std::string job = d.task.substr(0, d.task.rfind('/'));
    auto g = given.find(job);
    if ((g == given.end() ? 0 : g->second) >= holds[job]) continue;
    shrinks[job].push_back({d.task.substr(job.size() + 1), d.from_gpus, preempt ? 0 : d.to_gpus});
  }
  return shrinks;
}

}  // namespace

namespace {
// Each task's options in the capacity's pools: with `typed`, an option of a
// job's pool (JobDemand::pools) moves to that pool's index in `names` (a type
// the capacity lacks has no GPUs for it, and the option goes), and a demand
// that names no pools runs in any; without, every option is in the one pool.
void ToPools(const std::map<std::string, JobDemand>& demands, const std::vector<std::string>& owner,
             const std::vector<std::string>& names, bool typed, std::vector<ScaleTask>* all) {
  for (size_t i = 0; i < all->size(); ++i) {
    const std::vector<std::string>& job_pools = demands.at(owner[i]).pools;
    ScaleTask& t = (*all)[i];
    std::vector<planner::elastic::Option> kept;
    int current = -1;
    for (size_t j = 0; j < t.options.size(); ++j) {
      planner::elastic::Option o = t.options[j];
      if (static_cast<int>(j) == t.current) current = static_cast<int>(kept.size());
      if (!typed) {
        o.type = 0;
        kept.push_back(o);
      } else if (job_pools.empty()) {
        // A demand that names no pools runs in any.
        for (size_t p = 0; p < names.size(); ++p) {
          o.type = static_cast<int>(p);
          kept.push_back(o);
        }
      } else {
        // The job's pool by name in the cluster's; a type the capacity lacks
        // has no GPUs for it.
        auto it = std::find(names.begin(), names.end(), job_pools[static_cast<size_t>(o.type)]);
        if (it == names.end()) {
          if (static_cast<int>(j) == t.current) current = -1;
          continue;
        }
        o.type = static_cast<int>(it - names.begin());
        kept.push_back(o);
      }
    }
    t.options = std::move(kept);
    t.current = current;
  }
}

}  // namespace

StatusOr<ShareUpdate> ClusterShares::Decide(ScaleTrigger trigger, double now) {
  std::vector<std::string> owner;  // per task in `all`: its job
  std::vector<ScaleTask> all = CombinedTasks(demands_, &owner);
  // One pool per GPU type where there are two or more and their states are
  // few enough; else one pool of them all.
  std::vector<std::string> names;
  planner::elastic::Capacity pools;
  int capacity = 0;
  for (const auto& [type, gpus] : capacity_) {
    names.push_back(type);
    pools.push_back(gpus);
    capacity += gpus;
  }
  double options = 0;
  for (const ScaleTask& t : all) options += static_cast<double>(t.options.size());
  const bool typed =
      pools.size() >= 2 &&
      static_cast<double>(planner::elastic::States(pools)) * options <= kTypedShareWork;
  ToPools(demands_, owner, names, typed, &all);
  // A task left with no option (no GPUs of its types) asks for nothing.
  for (size_t i = all.size(); i-- > 0;) {
    if (!all[i].options.empty()) continue;
    all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
    owner.erase(owner.begin() + static_cast<std::ptrdiff_t>(i));
  }
  StatusOr<ScalePlan> plan =
      autoscaler_.Decide(all, typed ? pools : planner::elastic::Capacity{capacity}, trigger, now);
  if (!plan.ok()) {
    // Name the job and task behind the autoscaler's tasks[i] path.
    std::string message = plan.status().message();
    for (size_t i = all.size(); i-- > 0;) {
      std::string path = "tasks[" + std::to_string(i) + "]";
      size_t at = message.find(path);
      if (at != std::string::npos) {
        message.replace(at, path.size(), "demand of " + all[i].name);
        break;
      }
    }
    return InvalidArgumentError(message);
  }
  ShareUpdate u;
  u.decided = true;
  u.trigger = trigger;
  std::map<std::string, int> given;
  for (size_t i = 0; i < all.size(); ++i) {
    const int c = plan->choice[i];
    given[owner[i]] += c >= 0 ? all[i].options[static_cast<size_t>(c)].gpus : 0;
  }
  // The knapsack bounds each task by its job's quota, not the job's sum: GPUs
  // it gives a job past its quota are nobody's, so they count as idle.
  int used = 0;
  for (const auto& [job, d] : demands_) {
    used += d.quota > 0 ? std::min(given[job], d.quota) : given[job];
  }
  const int idle = std::max(0, capacity - used);
  std::map<std::string, std::string> reasons = DecisionNotes(plan->decisions);
  std::map<std::string, std::vector<ShareShrink>> shrinks =
      ShrinksAcrossJobs(all, owner, given, plan->decisions);
  for (const auto& [job, d] : demands_) {
    JobShare s;
    s.decision = decisions_ + 1;
    s.shrinks = shrinks[job];
    s.gpus = given[job];
    s.cap = s.gpus + idle;
    if (d.quota > 0) {
      s.gpus = std::min(s.gpus, d.quota);
      s.cap = std::min(s.cap, d.quota);
    }
    char head[160];
    std::snprintf(head, sizeof(head), "%d of %d GPUs (%d idle) on %s", s.gpus, capacity, idle,
                  ScaleTriggerName(trigger));
    s.reason = head;
    if (!reasons[job].empty()) s.reason += ": " + reasons[job];
    auto old = shares_.find(job);
    if (old == shares_.end() || old->second.cap != s.cap) u.changed.push_back(job);
    u.shares[job] = s;
  }
  shares_ = u.shares;
  decided_tasks_.clear();
  for (const auto& [job, d] : demands_) {
    for (const ScaleTask& t : d.tasks) decided_tasks_.insert(job + "/" + t.name);
  }
  decided_capacity_ = capacity_;
  decided_quotas_.clear();
  for (const auto& [job, d] : demands_) decided_quotas_[job] = d.quota;
  last_decision_ = now;
  ++decisions_;
  return u;
}

void ClusterShares::Remove(const std::string& job) {
  demands_.erase(job);
  shares_.erase(job);
}

ShareStep StepShare(const JobShare& share, int quota, const WorldView& world,
                    int applied_decision) {
  ShareStep out;
  out.launch_cap = quota >= 0 ? std::min(quota, share.cap) : share.cap;
  // What the job holds: each GPU once (an interleaved gang's members share
  // theirs), with how many of its running tasks use it.
  std::map<planner::GpuSlot, int> users;
  for (const TaskView& v : world.tasks) {
    if (!v.running) continue;
    for (const planner::GpuSlot& g : v.running->gpus) ++users[g];
  }
  out.held = static_cast<int>(users.size());
  if (share.decision > applied_decision) {
    for (const ShareShrink& shrink : share.shrinks) {
      if (out.held <= out.launch_cap) break;  // within its share again
      for (size_t t = 0; t < world.tasks.size(); ++t) {
        const TaskView& v = world.tasks[t];
        if (v.name != shrink.task) continue;
        if (!v.running || v.running->config < 0 ||
            static_cast<size_t>(v.running->config) >= v.profile.size() ||
            v.profile[static_cast<size_t>(v.running->config)].gpus != shrink.from_gpus) {
          break;  // not running as the decision saw it
        }
        out.stops.push_back({t, StopReason::kShare});
        for (const planner::GpuSlot& g : v.running->gpus) {
          if (--users[g] == 0) users.erase(g);
        }
        out.held = static_cast<int>(users.size());
        break;
      }
    }
  }
  int narrowest = 0;
  for (const TaskView& v : world.tasks) {
    if (!v.arrived || v.done || v.profile.empty()) continue;
    int least = v.profile.front().gpus;
    for (const planner::Config& c : v.profile) least = std::min(least, c.gpus);
    narrowest = std::max(narrowest, least);
  }
  out.plan_cap = std::max({out.launch_cap, out.held, narrowest});
  if (quota >= 0) out.plan_cap = std::min(quota, out.plan_cap);
  return out;
}

std::optional<JobShare> ClusterShares::Share(const std::string& job) const {
  auto it = shares_.find(job);
  if (it == shares_.end()) return std::nullopt;
  return it->second;
}

}  // namespace orrery::engine
