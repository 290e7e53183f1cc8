// The autoscaler's decision: one knapsack over values that charge every change
// its rescale cost, and one without the charges to name the changes it refused;
// for tasks with a base batch, that knapsack on the base batch's options (the
// shadow) settles GPU counts, and the batch follows (autoscaler.h).
#include "operator/engine/autoscaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
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

// Per-option values of every task under the options' objective, with and
// without the rescale charges, and what each change costs.
struct Values {
  std::vector<std::vector<double>> raw;       // the allocator's objective (a rate)
  std::vector<std::vector<double>> deadline;  // the deadline bonus an option earns, or 0
  std::vector<std::vector<double>> free;      // raw + deadline: the allocator alone
  std::vector<std::vector<double>> charged;   // free, less (1 + hysteresis) x each change's
                                              // cost spread, plus the dwell bonus
  std::vector<std::vector<double>> cost;      // [i][j + 1]: cost of moving i to j (-1: queued)
  std::vector<double> scale;                  // seconds over which task i's change pays
};

// A bonus above the sum of every task's largest value, so that what earns it
// comes before anything the values weigh (a lexicographic objective in one DP).
double Dominating(const std::vector<std::vector<double>>& values) {
  double total = 0;
  for (const auto& row : values) {
    double top = 0;
    for (double x : row) top = std::max(top, std::abs(x));
    total += top;
  }
  return 2 * (1 + total);
}

Values Evaluate(const std::vector<ScaleTask>& tasks, const elastic::Capacity& capacity,
                const AutoscalerOptions& o, double now, const std::vector<bool>& dwelling,
                const std::vector<std::vector<double>>* speeds) {
  const size_t n = tasks.size();
  const double charge = 1 + o.hysteresis;
  Values v;
  v.raw.resize(n);
  v.charged.resize(n);
  v.cost.resize(n);
  v.scale.assign(n, o.horizon_s);
  v.deadline.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const ScaleTask& t = tasks[i];
    const size_t m = t.options.size();
    for (const elastic::Option& opt : t.options)
      v.raw[i].push_back(elastic::OptionValue(t, opt, o.value));
    v.cost[i].assign(m + 1, 0);
    v.deadline[i].assign(m, 0);
    v.charged[i] = v.raw[i];
    if (t.current < 0) continue;
    const size_t cur = static_cast<size_t>(t.current);
    const elastic::Option& running_as = t.options[cur];
    // The change pays only until the task would have finished as it runs: then
    // its GPUs come free and are re-allocated anyway. The pause is paid at the
    // new option's rate.
    if (running_as.throughput > 0)
      v.scale[i] = std::min(o.horizon_s, t.remaining_work / running_as.throughput);
    // A preempted task stalls until GPUs come back, not for the pause only: its
    // progress at the current rate is lost over the horizon as well as the
    // restart. (Charged the pause alone, a job about to finish preempted several
    // long ones to run a little faster, which raised mean completion time.)
    v.cost[i][0] = (o.rescale_cost_s + o.horizon_s) * v.raw[i][cur];
    for (size_t j = 0; j < m; ++j)
      if (j != cur) v.cost[i][j + 1] = o.rescale_cost_s * v.raw[i][j];
    // Queued is worth 0 to the DP: every running option is shifted up by what
    // queueing would cost, so the differences between options are the charged
    // ones. Costs are spread over the seconds the change pays for.
    const double per = 1 / std::max(v.scale[i], 1e-9);
    for (size_t j = 0; j < m; ++j)
      v.charged[i][j] += charge * per * (v.cost[i][0] - v.cost[i][j + 1]);
  }
  // Tasks changed less than the dwell time ago keep their option whenever the
  // capacity allows, and shrink rather than wait in the queue when it does not.
  if (std::find(dwelling.begin(), dwelling.end(), true) != dwelling.end()) {
    const double hold = Dominating(v.charged);
    for (size_t i = 0; i < n; ++i) {
      if (!dwelling[i]) continue;
      for (size_t j = 0; j < tasks[i].options.size(); ++j)
        v.charged[i][j] += static_cast<int>(j) == tasks[i].current ? 2 * hold : hold;
    }
  }
  v.free = v.raw;
  if (!std::isfinite(o.deadline_s) || now < o.deadline_s - o.horizon_s) return v;
  // The deadline: in the last horizon before it, an option under which a task
  // still finishes in time, rescale pause included, earns a bonus above every
  // other value together.
  const double bonus = Dominating(v.charged);
  for (size_t i = 0; i < n; ++i) {
    const ScaleTask& t = tasks[i];
    auto speed = [&](size_t j) {
      return speeds != nullptr ? (*speeds)[i][j] : t.options[j].throughput;
    };
    double best = 0;
    for (size_t j = 0; j < t.options.size(); ++j)
      if (elastic::Fits(t.options[j], capacity)) best = std::max(best, speed(j));
    if (!(best > 0)) continue;
    if (now + t.remaining_work / best > o.deadline_s) continue;
    for (size_t j = 0; j < t.options.size(); ++j) {
      const elastic::Option& opt = t.options[j];
      if (!(speed(j) > 0) || !elastic::Fits(opt, capacity)) continue;
      const bool paused = t.current >= 0 && static_cast<int>(j) != t.current;
      const double finish = now + (paused ? o.rescale_cost_s : 0) + t.remaining_work / speed(j);
      if (finish > o.deadline_s) continue;
      v.deadline[i][j] = bonus;
      v.free[i][j] += bonus;
      v.charged[i][j] += bonus;
    }
  }
  return v;
}

}  // namespace

StatusOr<ScalePlan> Autoscaler::Decide(const std::vector<ScaleTask>& tasks, int capacity,
                                       ScaleTrigger trigger, double now) {
  if (capacity < 0) return InvalidArgumentError("capacity: must be at least 0");
  return Decide(tasks, elastic::Capacity{capacity}, trigger, now);
}

StatusOr<ScalePlan> Autoscaler::Decide(const std::vector<ScaleTask>& tasks,
                                       const elastic::Capacity& capacity, ScaleTrigger trigger,
                                       double now) {
  bool shadow = false;
  for (const ScaleTask& t : tasks) shadow = shadow || t.base_batch > 0;
  if (capacity.size() > 1 && !options_.shadow_across_types) shadow = false;
  StatusOr<ScalePlan> plan = shadow ? DecideShadow(tasks, capacity, trigger, now)
                                    : DecideJoint(tasks, capacity, trigger, now, nullptr);
  if (plan.ok()) log_.insert(log_.end(), plan->decisions.begin(), plan->decisions.end());
  return plan;
}

namespace {

// A plan's progress (the objective, no bonus), how many of its tasks are on
// course to finish by the deadline, and how many dwelling tasks it keeps.
struct PlanScore {
  const std::vector<ScaleTask>& tasks;
  const Values& v;
  const std::vector<bool>& dwelling;

  double Progress(const std::vector<int>& choice) const {
    double sum = 0;
    for (size_t k = 0; k < tasks.size(); ++k)
      if (choice[k] >= 0) sum += v.raw[k][static_cast<size_t>(choice[k])];
    return sum;
  }
  int OnCourse(const std::vector<int>& choice) const {
    int count = 0;
    for (size_t k = 0; k < tasks.size(); ++k)
      if (choice[k] >= 0 && v.deadline[k][static_cast<size_t>(choice[k])] > 0) ++count;
    return count;
  }
  int KeptDwelling(const std::vector<int>& choice) const {
    int count = 0;
    for (size_t k = 0; k < tasks.size(); ++k)
      if (dwelling[k] && choice[k] == tasks[k].current) ++count;
    return count;
  }
  // The bonuses that weighed in a choice of `chosen` over `other`, for the
  // reason (the dwell bonus only where the plan weighed it).
  std::string Bonuses(const std::vector<int>& chosen, const std::vector<int>& other,
                      bool with_dwell) const {
    std::string said;
    if (OnCourse(chosen) != OnCourse(other))
      said += "; deadline bonus: " + std::to_string(OnCourse(chosen)) +
              " tasks on course to finish by the deadline against " +
              std::to_string(OnCourse(other));
    if (with_dwell && KeptDwelling(chosen) != KeptDwelling(other))
      said += "; dwell bonus: " + std::to_string(KeptDwelling(chosen)) +
              " tasks within their dwell time kept where they are against " +
              std::to_string(KeptDwelling(other));
    return said;
  }
};

// The decisions of a joint plan, task by task, with the gain, the cost and the
// reason (the deadline and dwell bonuses stated apart).
void ExplainJoint(const AutoscalerOptions& options,
                  const std::map<std::string, double>& last_change,
                  const std::vector<ScaleTask>& tasks, const Values& v,
                  const std::vector<bool>& dwelling, const elastic::Knapsack& plan,
                  const std::optional<elastic::Knapsack>& free, const elastic::Capacity& capacity,
                  const elastic::Capacity& held, ScaleTrigger trigger, double now,
                  ScalePlan* out_plan) {
  ScalePlan& out = *out_plan;
  const size_t n = tasks.size();
  const double charge = 1 + options.hysteresis;
  const double dwell = options.dwell * options.rescale_cost_s;
  auto over = [&](int pool) {
    return held[static_cast<size_t>(pool)] > capacity[static_cast<size_t>(pool)];
  };
  auto option = [&](size_t i, int j) -> const elastic::Option& {
    return tasks[i].options[static_cast<size_t>(j)];
  };
  const PlanScore score{tasks, v, dwelling};
  auto progress = [&](const std::vector<int>& choice) { return score.Progress(choice); };
  auto bonuses = [&](const std::vector<int>& chosen, const std::vector<int>& other,
                     bool with_dwell) { return score.Bonuses(chosen, other, with_dwell); };
  for (size_t i = 0; i < n; ++i) {
    const ScaleTask& t = tasks[i];
    const int from = t.current, to = out.choice[i];
    if (to >= 0) out.gpus_used += option(i, to).gpus;
    ScaleDecision d;
    d.time = now;
    d.trigger = trigger;
    d.task = t.name;
    if (from >= 0) {
      d.from_gpus = option(i, from).gpus;
      d.from_batch = option(i, from).batch_size;
      d.from_type = option(i, from).type;
    }
    if (to >= 0) {
      d.to_gpus = option(i, to).gpus;
      d.to_batch = option(i, to).batch_size;
      d.to_type = option(i, to).type;
    }
    if (from < 0) {
      d.action = to >= 0 ? ScaleDecision::Action::kStart : ScaleDecision::Action::kQueue;
      d.reason = to >= 0             ? "started: the allocator gave it GPUs"
                 : t.options.empty() ? "queued: no feasible option"
                                     : "queued: capacity is better used by other tasks";
      out.decisions.push_back(std::move(d));
      continue;
    }
    if (from == to) {
      const int wanted = free->allocation().choice[i];
      if (wanted == from) continue;  // unchanged, and the allocator agrees
      d.action = ScaleDecision::Action::kKeep;
      d.to_gpus = wanted >= 0 ? option(i, wanted).gpus : 0;
      d.to_batch = wanted >= 0 ? option(i, wanted).batch_size : 0;
      d.to_type = wanted >= 0 ? option(i, wanted).type : 0;
      // The progress the allocator's plan makes over the horizon beyond the best
      // plan that leaves this task where it is.
      const std::vector<int> stay = free->PlanWith(i, from);
      d.gain = (progress(free->allocation().choice) - progress(stay)) * v.scale[i];
      d.cost = v.cost[i][static_cast<size_t>(wanted) + 1];
      d.reason = dwelling[i]
                     ? Fmt("kept: changed %.0f s ago, within the dwell time %.0f s",
                           now - last_change.at(t.name), dwell)
                     : Fmt("kept: gain %.4g over the horizon does not beat the rescale cost %.4g",
                           d.gain, d.cost) +
                           " with hysteresis";
      d.reason += bonuses(free->allocation().choice, stay, false);
      out.decisions.push_back(std::move(d));
      continue;
    }
    d.action = to >= 0 ? ScaleDecision::Action::kRescale : ScaleDecision::Action::kPreempt;
    d.cost = v.cost[i][static_cast<size_t>(to) + 1];
    // The cluster's gain from this change: the progress of the plan over the
    // horizon against the best plan that holds this task where it is (exact, from
    // the DP's tables), without the deadline and dwell bonuses, which the reason
    // states apart.
    const std::vector<int> stay = plan.PlanWith(i, from);
    d.gain = stay.empty() ? std::numeric_limits<double>::infinity()
                          : (progress(plan.allocation().choice) - progress(stay)) * v.scale[i];
    if (over(d.from_type) && (d.to_gpus < d.from_gpus || d.to_type != d.from_type)) {
      const size_t p = static_cast<size_t>(d.from_type);
      d.reason = (capacity.size() > 1 ? "forced: pool " + std::to_string(p) + " capacity "
                                      : std::string("forced: capacity ")) +
                 std::to_string(capacity[p]) + " is below the " + std::to_string(held[p]) +
                 " GPUs running tasks hold";
    } else {
      d.reason =
          d.gain > charge * d.cost
              ? Fmt("gain %.4g over the horizon beats the rescale cost %.4g", d.gain, d.cost) +
                    " with hysteresis"
              : Fmt("gain %.4g over the horizon, rescale cost %.4g", d.gain, d.cost);
      const std::string why = bonuses(plan.allocation().choice, stay, true);
      d.reason += why.empty() && !(d.gain > charge * d.cost)
                      ? "; holding it would cost the other tasks more in rescales"
                      : why;
    }
    out.decisions.push_back(std::move(d));
  }
}

}  // namespace

StatusOr<ScalePlan> Autoscaler::DecideJoint(const std::vector<ScaleTask>& tasks,
                                            const elastic::Capacity& capacity, ScaleTrigger trigger,
                                            double now,
                                            const std::vector<std::vector<double>>* speeds) {
  // The option tables' and the capacity's own checks, named by the caller's indices.
  ORRERY_RETURN_IF_ERROR(elastic::CheckInput(tasks, capacity));
  elastic::Capacity held(capacity.size(), 0);
  bool running = false;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].current < -1 || tasks[i].current >= static_cast<int>(tasks[i].options.size()))
      return InvalidArgumentError("tasks[" + std::to_string(i) +
                                  "].current: must be -1 or an index into options");
    if (tasks[i].current >= 0) {
      const elastic::Option& o = tasks[i].options[static_cast<size_t>(tasks[i].current)];
      held[static_cast<size_t>(o.type)] += o.gpus;
      running = true;
    }
  }
  const size_t n = tasks.size();
  // Who is still dwelling after its last change; forget tasks no longer active.
  std::map<std::string, double> last;
  std::vector<bool> dwelling(n, false);
  const double dwell = options_.dwell * options_.rescale_cost_s;
  for (size_t i = 0; i < n; ++i) {
    auto it = last_change_.find(tasks[i].name);
    if (it == last_change_.end()) continue;
    last.insert(*it);
    dwelling[i] = tasks[i].current >= 0 && now - it->second < dwell;
  }
  last_change_ = std::move(last);
  const Values v = Evaluate(tasks, capacity, options_, now, dwelling, speeds);
  ORRERY_ASSIGN_OR_RETURN(elastic::Knapsack plan,
                          elastic::Knapsack::Solve(tasks, v.charged, capacity, running));
  ScalePlan out;
  out.choice = plan.allocation().choice;
  out.allocator_runs = 1;
  // What the allocator alone would do: only needed to tell kept tasks apart.
  std::optional<elastic::Knapsack> free;
  if (running) {
    ORRERY_ASSIGN_OR_RETURN(free, elastic::Knapsack::Solve(tasks, v.free, capacity, true));
    ++out.allocator_runs;
  }
  ExplainJoint(options_, last_change_, tasks, v, dwelling, plan, free, capacity, held, trigger, now,
               &out);
  for (const ScaleDecision& d : out.decisions)
    if (d.action == ScaleDecision::Action::kStart || d.action == ScaleDecision::Action::kRescale ||
        d.action == ScaleDecision::Action::kPreempt)
      last_change_[d.task] = now;
  return out;
}

// The shadow problem and what DecideShadow derives from it.
struct Autoscaler::Shadow {
  // Per task: the fastest option at each (pool, GPU count).
  std::vector<std::map<std::pair<int, int>, int>> fastest;
  // Each task's options at its base batch, one per pool and GPU count (a task
  // without options at its base batch follows its fastest option per pool and
  // GPU count), running at the pool and GPU count the shadow gave it.
  std::vector<ScaleTask> tasks;
  // [i][k]: the speed task i really runs at under shadow option k.
  std::vector<std::vector<double>> speeds;
  // Filled by ChooseUnderShadow: the option each task runs under, the shadow's
  // GPU count for it, and the seconds a batch change or growth saves it.
  std::vector<int> choice;
  std::vector<int> shadow_gpus;
  std::vector<int> shadow_type;
  std::vector<double> saved;

  int FastestAt(size_t i, int type, int g) const {
    auto it = fastest[i].find({type, g});
    return it == fastest[i].end() ? -1 : it->second;
  }
};

StatusOr<Autoscaler::Shadow> Autoscaler::MakeShadow(const std::vector<ScaleTask>& tasks,
                                                    const elastic::Capacity& capacity) {
  const size_t n = tasks.size();
  // The option tables' own checks, named by the caller's indices.
  ORRERY_RETURN_IF_ERROR(elastic::CheckInput(tasks, capacity));
  for (size_t i = 0; i < n; ++i)
    if (tasks[i].current < -1 || tasks[i].current >= static_cast<int>(tasks[i].options.size()))
      return InvalidArgumentError("tasks[" + std::to_string(i) +
                                  "].current: must be -1 or an index into options");
  auto option = [&](size_t i, int j) -> const elastic::Option& {
    return tasks[i].options[static_cast<size_t>(j)];
  };
  Shadow sh;
  sh.fastest.resize(n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < tasks[i].options.size(); ++j) {
      const elastic::Option& o = tasks[i].options[j];
      auto [it, fresh] = sh.fastest[i].emplace(std::make_pair(o.type, o.gpus), static_cast<int>(j));
      if (!fresh && tasks[i].options[j].throughput > option(i, it->second).throughput)
        it->second = static_cast<int>(j);
    }
  std::map<std::string, int> entitled;
  sh.tasks.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const ScaleTask& t = tasks[i];
    ScaleTask& s = sh.tasks[i];
    s.name = t.name;
    s.total_work = t.total_work;
    s.remaining_work = t.remaining_work;
    s.weight = t.weight;
    auto add = [&](const elastic::Option& o) {
      for (elastic::Option& have : s.options) {
        if (have.gpus != o.gpus || have.type != o.type) continue;
        if (o.throughput > have.throughput) have = o;
        return;
      }
      s.options.push_back(o);
    };
    for (const elastic::Option& o : t.options)
      if (o.batch_size == t.base_batch) add(o);
    if (s.options.empty())
      for (const elastic::Option& o : t.options) add(o);
    if (t.current < 0) continue;
    int g = option(i, t.current).gpus;
    const int type = option(i, t.current).type;
    auto it = entitled_.find(t.name);
    if (it != entitled_.end() && it->second < g) {
      g = it->second;
      entitled.insert(*it);
    }
    int near = -1;  // its GPU count in its pool, else the largest below it there
    for (size_t k = 0; k < s.options.size(); ++k) {
      const int h = s.options[k].gpus;
      if (s.options[k].type != type) continue;
      if (h <= g && (near < 0 || h > s.options[static_cast<size_t>(near)].gpus))
        near = static_cast<int>(k);
    }
    s.current = near;
  }
  entitled_ = std::move(entitled);
  sh.speeds.resize(n);
  for (size_t i = 0; i < n; ++i)
    for (const elastic::Option& o : sh.tasks[i].options)
      sh.speeds[i].push_back(option(i, sh.FastestAt(i, o.type, o.gpus)).throughput);
  return sh;
}

void Autoscaler::ChooseUnderShadow(const std::vector<ScaleTask>& tasks,
                                   const elastic::Capacity& capacity, const ScalePlan& sp,
                                   Shadow& sh) const {
  const size_t n = tasks.size();
  auto option = [&](size_t i, int j) -> const elastic::Option& {
    return tasks[i].options[static_cast<size_t>(j)];
  };
  const double charge = 1 + options_.hysteresis;
  const double pause = options_.rescale_cost_s;
  std::vector<int>& choice = sh.choice;
  std::vector<int>& shadow_gpus = sh.shadow_gpus;
  std::vector<int>& shadow_type = sh.shadow_type;
  std::vector<double>& saved = sh.saved;
  choice.assign(n, -1);
  shadow_gpus.assign(n, 0);
  shadow_type.assign(n, 0);
  saved.assign(n, 0);
  elastic::Capacity idle = capacity;  // per pool
  auto pool = [&](size_t i, int j) { return static_cast<size_t>(option(i, j).type); };
  for (size_t i = 0; i < n; ++i) {
    const int sj = sp.choice[i];
    if (sj < 0) continue;
    const int g = sh.tasks[i].options[static_cast<size_t>(sj)].gpus;
    const int type = sh.tasks[i].options[static_cast<size_t>(sj)].type;
    shadow_gpus[i] = g;
    shadow_type[i] = type;
    const int best = sh.FastestAt(i, type, g);
    const int cur = tasks[i].current;
    const double rem = tasks[i].remaining_work;
    if (cur >= 0 && option(i, cur).gpus == g && option(i, cur).type == type) {
      choice[i] = cur;
      const double a = option(i, cur).throughput, b = option(i, best).throughput;
      const double s = a > 0 && b > 0 ? rem / a - rem / b : 0;
      if (best != cur && s > charge * pause) {
        choice[i] = best;
        saved[i] = s;
      }
    } else {
      choice[i] = best;
    }
    idle[pool(i, choice[i])] -= option(i, choice[i]).gpus;
  }
  // A grown task keeps its growth while the shadow keeps its GPU count and the
  // GPUs it grew onto are still idle.
  for (size_t i = 0; i < n; ++i) {
    const int cur = tasks[i].current;
    if (cur < 0 || choice[i] < 0 || sh.tasks[i].current < 0) continue;
    const int g = sh.tasks[i].options[static_cast<size_t>(sh.tasks[i].current)].gpus;
    const int extra = option(i, cur).gpus - option(i, choice[i]).gpus;
    if (g != shadow_gpus[i] || option(i, cur).type != shadow_type[i] || option(i, cur).gpus <= g ||
        extra > idle[pool(i, cur)])
      continue;
    idle[pool(i, cur)] -= extra;
    choice[i] = cur;
  }
  // New growth, the largest saving first, at another batch than the base (the
  // shadow had the base batch's wider options and left them), when the saving
  // beats two rescale costs: the growth and the shrink back.
  for (;;) {
    double top = 0;
    size_t ti = n;
    int tj = -1;
    for (size_t i = 0; i < n; ++i) {
      if (choice[i] < 0 || option(i, choice[i]).gpus != shadow_gpus[i]) continue;
      const double a = option(i, choice[i]).throughput;
      if (!(a > 0)) continue;
      const bool moving = tasks[i].current != choice[i];
      for (size_t j = 0; j < tasks[i].options.size(); ++j) {
        const elastic::Option& o = tasks[i].options[j];
        if (o.type != shadow_type[i] || o.gpus <= shadow_gpus[i] ||
            o.gpus - shadow_gpus[i] > idle[static_cast<size_t>(o.type)])
          continue;
        if (o.batch_size == tasks[i].base_batch ||
            sh.FastestAt(i, o.type, o.gpus) != static_cast<int>(j) || !(o.throughput > a))
          continue;
        const double s = tasks[i].remaining_work / a - tasks[i].remaining_work / o.throughput;
        const double need = 2 * pause * charge + (moving ? 0 : pause);
        if (s > need && s > top) {
          top = s;
          ti = i;
          tj = static_cast<int>(j);
        }
      }
    }
    if (ti == n) break;
    idle[pool(ti, tj)] -= option(ti, tj).gpus - shadow_gpus[ti];
    choice[ti] = tj;
    saved[ti] = top;
  }
}

ScalePlan Autoscaler::ExplainShadow(const std::vector<ScaleTask>& tasks, const ScalePlan& sp,
                                    const Shadow& sh, ScaleTrigger trigger, double now) const {
  const size_t n = tasks.size();
  auto option = [&](size_t i, int j) -> const elastic::Option& {
    return tasks[i].options[static_cast<size_t>(j)];
  };
  const double pause = options_.rescale_cost_s;
  // The decisions: the shadow's, on the options the tasks really run under.
  std::map<std::string, const ScaleDecision*> said;
  for (const ScaleDecision& d : sp.decisions) said[d.task] = &d;
  ScalePlan out;
  out.choice = sh.choice;
  out.allocator_runs = sp.allocator_runs;
  for (size_t i = 0; i < n; ++i) {
    const ScaleTask& t = tasks[i];
    const int from = t.current, to = sh.choice[i];
    if (to >= 0) out.gpus_used += option(i, to).gpus;
    auto it = said.find(t.name);
    const ScaleDecision* sd = it == said.end() ? nullptr : it->second;
    if (from == to && sd == nullptr) continue;
    ScaleDecision d = sd != nullptr ? *sd : ScaleDecision{};
    d.time = now;
    d.trigger = trigger;
    d.task = t.name;
    d.from_gpus = from >= 0 ? option(i, from).gpus : 0;
    d.from_batch = from >= 0 ? option(i, from).batch_size : 0;
    d.from_type = from >= 0 ? option(i, from).type : 0;
    if (from == to) {
      if (d.action == ScaleDecision::Action::kKeep) {
        const int wanted = d.to_gpus > 0 ? sh.FastestAt(i, d.to_type, d.to_gpus) : -1;
        d.to_batch = wanted >= 0 ? option(i, wanted).batch_size : 0;
      } else if (d.action != ScaleDecision::Action::kQueue) {
        d.action = ScaleDecision::Action::kKeep;
        d.reason = "kept: the fixed-batch decision's change maps to the option it runs under";
      }
      if (d.action == ScaleDecision::Action::kQueue) d.to_gpus = d.to_batch = 0;
      out.decisions.push_back(std::move(d));
      continue;
    }
    d.action = from < 0 ? ScaleDecision::Action::kStart
               : to < 0 ? ScaleDecision::Action::kPreempt
                        : ScaleDecision::Action::kRescale;
    d.to_gpus = to >= 0 ? option(i, to).gpus : 0;
    d.to_batch = to >= 0 ? option(i, to).batch_size : 0;
    d.to_type = to >= 0 ? option(i, to).type : 0;
    const bool shadow_moved = sd != nullptr && sd->action != ScaleDecision::Action::kKeep &&
                              sd->action != ScaleDecision::Action::kQueue;
    const int shadow_gpus = sh.shadow_gpus[i];
    const double saved = sh.saved[i];
    if (to >= 0 && d.to_gpus > shadow_gpus) {
      d.gain = saved;
      d.cost = 2 * pause;
      d.reason = Fmt("grown onto GPUs the fixed-batch decision leaves idle (it gave %.0f): "
                     "saves %.0f s",
                     shadow_gpus, saved) +
                 ", more than two rescale costs with hysteresis";
    } else if (shadow_moved && sd->to_gpus == d.to_gpus && sd->to_type == d.to_type) {
      if (to >= 0 && d.to_batch != t.base_batch)
        d.reason += "; batch " + std::to_string(d.to_batch) + ", the fastest at " +
                    std::to_string(d.to_gpus) + " GPUs";
    } else if (from >= 0 && to >= 0 && d.from_gpus == d.to_gpus && d.from_type == d.to_type) {
      d.gain = saved;
      d.cost = pause;
      d.reason = Fmt("batch change at the same GPUs saves %.0f s, beating the rescale cost %.0f s",
                     saved, pause) +
                 " with hysteresis";
    } else {
      d.gain = 0;
      d.cost = pause;
      d.reason =
          Fmt("shrunk back to the %.0f GPUs of the fixed-batch decision from %.0f: the "
              "GPUs it grew onto are needed",
              shadow_gpus, d.from_gpus);
    }
    out.decisions.push_back(std::move(d));
  }
  return out;
}

StatusOr<ScalePlan> Autoscaler::DecideShadow(const std::vector<ScaleTask>& tasks,
                                             const elastic::Capacity& capacity,
                                             ScaleTrigger trigger, double now) {
  ORRERY_ASSIGN_OR_RETURN(Shadow sh, MakeShadow(tasks, capacity));
  // The deadline's on-course test at the speeds the tasks will really run at:
  // judged at the base batch's speed, a job about to finish looked off course
  // and was shrunk to start another that could have waited. The objective
  // stays the base batch's, so batch never decides GPU counts.
  ORRERY_ASSIGN_OR_RETURN(ScalePlan sp, DecideJoint(sh.tasks, capacity, trigger, now, &sh.speeds));
  ChooseUnderShadow(tasks, capacity, sp, sh);
  for (size_t i = 0; i < tasks.size(); ++i)
    if (sh.choice[i] >= 0 &&
        tasks[i].options[static_cast<size_t>(sh.choice[i])].gpus != sh.shadow_gpus[i])
      entitled_[tasks[i].name] = sh.shadow_gpus[i];
  return ExplainShadow(tasks, sp, sh, trigger, now);
}

}  // namespace orrery::engine
