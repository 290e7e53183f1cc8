// Discrete-event simulation of online elastic jobs under one policy. Events at
// the same instant are applied together and followed by one policy decision.
#include "operator/sim/elastic_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <sstream>

namespace orrery::sim {

namespace elastic = planner::elastic;

namespace {
// The optimum policy checks an event's DP against an exhaustive search up to
// this many combinations of options.
constexpr double kExhaustiveCheck = 2e5;
}  // namespace

const char* ElasticPolicyName(ElasticPolicy policy) {
  switch (policy) {
    case ElasticPolicy::kElastic: return "elastic";
    case ElasticPolicy::kGpuOnly: return "gpu-only";
    case ElasticPolicy::kStatic: return "static";
    case ElasticPolicy::kOptimum: return "optimum";
  }
  return "unknown";
}

StatusOr<ElasticPolicy> ParseElasticPolicy(std::string_view name) {
  if (name == "elastic") return ElasticPolicy::kElastic;
  if (name == "gpu-only") return ElasticPolicy::kGpuOnly;
  if (name == "static") return ElasticPolicy::kStatic;
  if (name == "optimum") return ElasticPolicy::kOptimum;
  return InvalidArgumentError("policy: must be elastic, gpu-only, static or optimum");
}

namespace {

const JobKind& KindOf(const ElasticTrace& trace, const ElasticJob& job) {
  for (const JobKind& k : trace.kinds)
    if (k.name == job.kind) return k;
  return trace.kinds.front();  // unreachable for a validated trace
}

// GPU counts a job may be given: powers of two up to a node, then whole nodes.
// Fewer counts keep the allocator fast; these are the shapes a data-parallel
// job is usually given anyway.
std::vector<int> GpuCounts(const GpuPool& pool, int max_gpus) {
  std::vector<int> counts;
  for (int g = 1; g < pool.gpus_per_node && g <= max_gpus; g *= 2) counts.push_back(g);
  for (int g = pool.gpus_per_node; g <= max_gpus; g += pool.gpus_per_node) counts.push_back(g);
  return counts;
}

// The most GPUs pool p ever has.
int MaxCapacity(const ElasticTrace& trace, size_t p) {
  int m = Pools(trace.cluster)[p].gpus();
  for (const CapacityEvent& e : trace.capacity)
    if (PoolIndex(trace.cluster, e.pool) == static_cast<int>(p)) m = std::max(m, e.gpus);
  return m;
}

// What gpu-only believes an option runs at: the reference GPU's speed on the
// option's pool shape, whatever its type.
double BlindThroughput(const ElasticTrace& trace, const JobKind& kind, const elastic::Option& o) {
  GpuPool reference = Pools(trace.cluster)[static_cast<size_t>(o.type)];
  reference.speed = 1;
  reference.memory_gb = 0;
  JobKind blind = kind;
  blind.speed_by_type.clear();
  return Throughput(blind, trace.cluster, reference, o.gpus, o.batch_size);
}

}  // namespace

std::vector<elastic::Option> JobOptions(const ElasticTrace& trace, const ElasticJob& job,
                                        ElasticPolicy policy) {
  const JobKind& kind = KindOf(trace, job);
  std::vector<elastic::Option> options;
  const std::vector<GpuPool> pools = Pools(trace.cluster);
  for (size_t p = 0; p < pools.size(); ++p) {
    const GpuPool& pool = pools[p];
    if (!KindFits(kind, pool)) continue;
    const int type = static_cast<int>(p);
    const int most = MaxCapacity(trace, p);
    if (policy == ElasticPolicy::kStatic) {
      int g = kind.requested_gpus > 0 && kind.requested_gpus <= most &&
                      job.base_batch % kind.requested_gpus == 0 &&
                      job.base_batch / kind.requested_gpus <= kind.max_batch_per_gpu
                  ? kind.requested_gpus
                  : FewestGpus(kind, job.base_batch, most);
      if (g > 0)
        options.push_back(
            {g, job.base_batch, Throughput(kind, trace.cluster, pool, g, job.base_batch), type});
      continue;
    }
    const int step = kind.batch_step > 0 ? kind.batch_step : job.min_batch;
    const bool batch_moves = policy == ElasticPolicy::kElastic || policy == ElasticPolicy::kOptimum;
    for (int g : GpuCounts(pool, most)) {
      elastic::Option best{g, 0, 0, type};
      auto consider = [&](int b) {
        if (b % g != 0 || b / g > kind.max_batch_per_gpu || b / g < 1) return;
        const double t = Throughput(kind, trace.cluster, pool, g, b);
        if (t > best.throughput) best = {g, b, t, type};
      };
      consider(job.base_batch);
      const elastic::Option base = best;
      if (batch_moves) {
        for (long b = job.min_batch; b <= job.max_batch; b += step) consider(static_cast<int>(b));
        consider(job.max_batch);
      }
      // The base batch's option too, where another is faster: the autoscaler
      // decides GPU counts on the base batch's options (ElasticTask::base_batch).
      if (base.batch_size > 0 && base.batch_size != best.batch_size) options.push_back(base);
      if (best.batch_size > 0) options.push_back(best);
    }
  }
  return options;
}

namespace {

enum class Kind { kCapacity, kFinish, kArrival, kTick };

struct Event {
  double time;
  long seq;
  Kind kind;
  int index;
  int epoch;
  bool operator>(const Event& o) const { return time > o.time || (time == o.time && seq > o.seq); }
};

struct Job {
  const ElasticJob* spec = nullptr;
  std::vector<elastic::Option> options;   // true throughputs
  std::vector<elastic::Option> believed;  // what the policy weighs (gpu-only: type-blind)
  bool arrived = false;
  bool done = false;
  int current = -1;  // option index while running
  double remaining = 0;
  double paused_until = 0;
  double last_advance = 0;
  double started = 0;  // last start, for static's preemption order
  bool ever_started = false;
  int epoch = 0;
  int rescales = 0;
  double completion = 0;
};

class ElasticSim {
 public:
  ElasticSim(const ElasticTrace& trace, ElasticPolicy policy, const ElasticSimOptions& options)
      : trace_(trace),
        policy_(policy),
        options_(options),
        autoscaler_(Autoscaling(trace, options)) {}

  StatusOr<ElasticResult> Run();

 private:
  static engine::AutoscalerOptions Autoscaling(const ElasticTrace& t, const ElasticSimOptions& o) {
    engine::AutoscalerOptions a = o.autoscaler;
    a.rescale_cost_s = t.rescale_cost_s;
    // Completions count until the horizon: the autoscaler is told so.
    if (o.horizon_aware) a.deadline_s = t.horizon_s;
    return a;
  }
  void Push(double t, Kind k, int index, int epoch = 0) {
    queue_.push({t, seq_++, k, index, epoch});
  }
  double Rate(const Job& j) const {
    return j.current >= 0 ? j.options[static_cast<size_t>(j.current)].throughput : 0;
  }
  int Gpus(const Job& j) const {
    return j.current >= 0 ? j.options[static_cast<size_t>(j.current)].gpus : 0;
  }
  size_t Pool(const Job& j) const {
    return static_cast<size_t>(j.options[static_cast<size_t>(j.current)].type);
  }
  void Advance(Job& j) {
    if (j.current >= 0) {
      const double from = std::max(j.last_advance, j.paused_until);
      if (now_ > from) j.remaining = std::max(0.0, j.remaining - (now_ - from) * Rate(j));
    }
    j.last_advance = now_;
  }
  // Moves every job to `choice`, paying the rescale cost for running jobs that
  // change and for restarts.
  void Apply(const std::vector<int>& choice, const std::vector<size_t>& active);
  Status Decide(engine::ScaleTrigger trigger);
  std::vector<int> StaticChoice(const std::vector<size_t>& active) const;
  StatusOr<std::vector<int>> OptimumChoice(const std::vector<engine::ScaleTask>& tasks);
  void Integrate() {
    int held = 0, present = 0;
    for (const Job& j : jobs_) held += Gpus(j);
    for (int c : capacity_) present += c;
    held_gpu_seconds_ += held * (now_ - integrated_to_);
    capacity_gpu_seconds_ += present * (now_ - integrated_to_);
    integrated_to_ = now_;
  }

  const ElasticTrace& trace_;
  ElasticPolicy policy_;
  ElasticSimOptions options_;
  engine::Autoscaler autoscaler_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  long seq_ = 0;
  double now_ = 0;
  elastic::Capacity capacity_;  // per pool
  std::vector<Job> jobs_;
  ElasticResult result_;
  double held_gpu_seconds_ = 0, capacity_gpu_seconds_ = 0, integrated_to_ = 0;
};

std::vector<int> ElasticSim::StaticChoice(const std::vector<size_t>& active) const {
  std::vector<int> choice(active.size(), -1);
  elastic::Capacity used(capacity_.size(), 0);
  std::vector<size_t> running;  // positions in active
  for (size_t k = 0; k < active.size(); ++k) {
    const Job& j = jobs_[active[k]];
    if (j.current >= 0) {
      choice[k] = j.current;
      used[Pool(j)] += Gpus(j);
      running.push_back(k);
    }
  }
  // Capacity lost: the latest started on the pool give their GPUs back first.
  std::stable_sort(running.begin(), running.end(), [&](size_t a, size_t b) {
    return jobs_[active[a]].started > jobs_[active[b]].started;
  });
  for (size_t k : running) {
    const Job& j = jobs_[active[k]];
    if (used[Pool(j)] <= capacity_[Pool(j)]) continue;
    used[Pool(j)] -= Gpus(j);
    choice[k] = -1;
  }
  // Strict FIFO: the queue's head takes the first pool with room for its
  // request, else waits, and nobody passes it.
  for (size_t k = 0; k < active.size(); ++k) {
    const Job& j = jobs_[active[k]];
    if (choice[k] >= 0 || j.current >= 0) continue;
    int pick = -1;
    for (size_t o = 0; o < j.options.size() && pick < 0; ++o) {
      const size_t p = static_cast<size_t>(j.options[o].type);
      if (used[p] + j.options[o].gpus <= capacity_[p]) pick = static_cast<int>(o);
    }
    if (pick < 0) break;
    choice[k] = pick;
    used[static_cast<size_t>(j.options[static_cast<size_t>(pick)].type)] +=
        j.options[static_cast<size_t>(pick)].gpus;
  }
  return choice;
}

StatusOr<std::vector<int>> ElasticSim::OptimumChoice(const std::vector<engine::ScaleTask>& tasks) {
  const elastic::Value value = options_.autoscaler.value;
  ORRERY_ASSIGN_OR_RETURN(elastic::Allocation a, elastic::Allocate(tasks, capacity_, value));
  // Where the event is small enough, an exhaustive search must agree.
  double combinations = 1;
  for (const engine::ScaleTask& t : tasks)
    combinations *= static_cast<double>(t.options.size() + 1);
  if (combinations <= kExhaustiveCheck) {
    std::vector<std::vector<double>> values(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i)
      for (const elastic::Option& o : tasks[i].options)
        values[i].push_back(elastic::OptionValue(tasks[i], o, value));
    ORRERY_ASSIGN_OR_RETURN(elastic::Allocation exact,
                            elastic::Exhaustive(tasks, values, capacity_, kExhaustiveCheck));
    if (std::abs(exact.value - a.value) > 1e-9 * std::max(1.0, exact.value))
      return InternalError("optimum: the DP's value " + std::to_string(a.value) +
                           " differs from the exhaustive optimum " + std::to_string(exact.value));
    ++result_.optimum_checked;
  }
  return a.choice;
}

void ElasticSim::Apply(const std::vector<int>& choice, const std::vector<size_t>& active) {
  for (size_t k = 0; k < active.size(); ++k) {
    Job& j = jobs_[active[k]];
    const int to = choice[k];
    if (to == j.current) continue;
    Advance(j);
    if (j.current >= 0) {
      if (to >= 0) {
        ++result_.rescales;
        ++j.rescales;
        j.paused_until = now_ + trace_.rescale_cost_s;
      } else {
        ++result_.preemptions;
      }
    } else {
      // A first start is free (every policy pays it alike); a restart after a
      // preemption pays the checkpoint restore.
      j.paused_until = now_ + (j.ever_started ? trace_.rescale_cost_s : 0);
      j.ever_started = true;
      j.started = now_;
    }
    j.current = to;
    ++j.epoch;
    if (to >= 0)
      Push(std::max(now_, j.paused_until) + j.remaining / Rate(j), Kind::kFinish,
           static_cast<int>(active[k]), j.epoch);
  }
}

Status ElasticSim::Decide(engine::ScaleTrigger trigger) {
  std::vector<size_t> active;
  for (size_t i = 0; i < jobs_.size(); ++i)
    if (jobs_[i].arrived && !jobs_[i].done) active.push_back(i);
  if (active.empty()) return OkStatus();
  for (size_t i : active) Advance(jobs_[i]);
  std::vector<int> choice;
  if (policy_ == ElasticPolicy::kStatic) {
    choice = StaticChoice(active);
  } else {
    std::vector<engine::ScaleTask> tasks;
    tasks.reserve(active.size());
    for (size_t i : active) {
      const Job& j = jobs_[i];
      engine::ScaleTask t;
      t.name = j.spec->name;
      t.total_work = j.spec->work;
      // A job finishing this instant still counts a sliver of work, so its value
      // stays finite and it keeps its GPUs until its finish event.
      t.remaining_work = std::max(j.remaining, 1e-9 * j.spec->work);
      t.options = j.believed;
      t.current = j.current;
      t.base_batch = policy_ == ElasticPolicy::kOptimum ? 0 : j.spec->base_batch;
      tasks.push_back(std::move(t));
    }
    if (policy_ == ElasticPolicy::kOptimum) {
      ORRERY_ASSIGN_OR_RETURN(choice, OptimumChoice(tasks));
    } else {
      ORRERY_ASSIGN_OR_RETURN(engine::ScalePlan plan,
                              autoscaler_.Decide(tasks, capacity_, trigger, now_));
      choice = std::move(plan.choice);
    }
    ++result_.autoscaler_runs;
  }
  Apply(choice, active);
  return OkStatus();
}

StatusOr<ElasticResult> ElasticSim::Run() {
  result_.trace = trace_.name;
  result_.policy = ElasticPolicyName(policy_);
  for (const GpuPool& p : Pools(trace_.cluster)) capacity_.push_back(p.gpus());
  jobs_.resize(trace_.jobs.size());
  for (size_t i = 0; i < trace_.jobs.size(); ++i) {
    Job& j = jobs_[i];
    j.spec = &trace_.jobs[i];
    j.remaining = j.spec->work;
    j.options = JobOptions(trace_, *j.spec, policy_);
    j.believed = j.options;
    if (policy_ == ElasticPolicy::kGpuOnly)
      for (elastic::Option& o : j.believed)
        o.throughput = BlindThroughput(trace_, KindOf(trace_, *j.spec), o);
    if (j.options.empty())
      return InvalidArgumentError("jobs[" + std::to_string(i) + "]: no feasible option under " +
                                  result_.policy);
    Push(j.spec->arrival, Kind::kArrival, static_cast<int>(i));
  }
  for (size_t e = 0; e < trace_.capacity.size(); ++e)
    Push(trace_.capacity[e].time, Kind::kCapacity, static_cast<int>(e));
  Push(trace_.interval_s, Kind::kTick, 0);
  const double stop = trace_.horizon_s * options_.max_time_factor;
  size_t done = 0;
  while (done < jobs_.size()) {
    if (queue_.empty()) return InternalError("elastic simulation stalled with jobs left");
    const double t = queue_.top().time;
    if (t > stop)
      return DeadlineExceededError("elastic simulation passed " + std::to_string(stop) +
                                   " s with jobs left (capacity too small?)");
    now_ = t;
    Integrate();
    // Everything at this instant, then one decision for the strongest trigger.
    bool arrival = false, completion = false, capacity = false, tick = false;
    while (!queue_.empty() && queue_.top().time == t) {
      Event e = queue_.top();
      queue_.pop();
      switch (e.kind) {
        case Kind::kArrival:
          jobs_[static_cast<size_t>(e.index)].arrived = true;
          jobs_[static_cast<size_t>(e.index)].last_advance = now_;
          arrival = true;
          break;
        case Kind::kFinish: {
          Job& j = jobs_[static_cast<size_t>(e.index)];
          if (j.done || e.epoch != j.epoch) break;
          j.remaining = 0;
          j.current = -1;
          j.done = true;
          j.completion = now_;
          ++done;
          completion = true;
          break;
        }
        case Kind::kCapacity: {
          const CapacityEvent& c = trace_.capacity[static_cast<size_t>(e.index)];
          capacity_[static_cast<size_t>(PoolIndex(trace_.cluster, c.pool))] = c.gpus;
          capacity = true;
          break;
        }
        case Kind::kTick:
          tick = true;
          if (done < jobs_.size()) Push(now_ + trace_.interval_s, Kind::kTick, 0);
          break;
      }
    }
    const engine::ScaleTrigger trigger = capacity     ? engine::ScaleTrigger::kCapacityChanged
                                         : arrival    ? engine::ScaleTrigger::kArrival
                                         : completion ? engine::ScaleTrigger::kCompletion
                                                      : engine::ScaleTrigger::kInterval;
    if (arrival || completion || capacity || tick) ORRERY_RETURN_IF_ERROR(Decide(trigger));
  }
  double sum = 0, sum_in = 0;
  for (const Job& j : jobs_) {
    const double jct = j.completion - j.spec->arrival;
    result_.makespan = std::max(result_.makespan, j.completion);
    sum += jct;
    if (j.completion <= trace_.horizon_s) {
      ++result_.completed_in_horizon;
      sum_in += jct;
    }
    result_.outcomes.push_back({j.spec->name, j.spec->arrival, j.completion, j.rescales});
  }
  result_.jobs = static_cast<int>(jobs_.size());
  result_.mean_jct = jobs_.empty() ? 0 : sum / static_cast<double>(jobs_.size());
  result_.mean_jct_in_horizon =
      result_.completed_in_horizon > 0 ? sum_in / result_.completed_in_horizon : 0;
  result_.gpu_utilisation =
      capacity_gpu_seconds_ > 0 ? held_gpu_seconds_ / capacity_gpu_seconds_ : 0;
  if (options_.keep_decisions) result_.decisions = autoscaler_.log();
  return result_;
}

}  // namespace

StatusOr<ElasticResult> SimulateElastic(const ElasticTrace& trace, ElasticPolicy policy,
                                        const ElasticSimOptions& options) {
  ElasticTrace checked = trace;
  ORRERY_RETURN_IF_ERROR(ValidateTrace(&checked));
  ElasticSim sim(checked, policy, options);
  return sim.Run();
}

std::string ElasticTable(const std::vector<ElasticResult>& results) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-10s %6s %10s %12s %14s %10s %9s %9s %6s\n", "policy", "jobs",
                "completed", "mean JCT s", "JCT(in hzn) s", "makespan", "rescales", "preempts",
                "util");
  out << line;
  for (const ElasticResult& r : results) {
    std::snprintf(line, sizeof(line), "%-10s %6d %10d %12.0f %14.0f %10.0f %9d %9d %5.0f%%\n",
                  r.policy.c_str(), r.jobs, r.completed_in_horizon, r.mean_jct,
                  r.mean_jct_in_horizon, r.makespan, r.rescales, r.preemptions,
                  100 * r.gpu_utilisation);
    out << line;
  }
  return out.str();
}

}  // namespace orrery::sim
