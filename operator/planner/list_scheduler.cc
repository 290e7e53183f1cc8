// List scheduler over per-GPU ready times. A GPU is handed to the next task only
// after its previous task ends (no backfilling into earlier holes), which keeps
// placement O(tasks x GPUs) and the result easy to reason about; the planners
// compensate by trying several orders and configuration choices.
#include "operator/planner/list_scheduler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string>

namespace orrery::planner {
namespace {

struct NodeOffer {
  int node = -1;
  double start = 0;
  double idle = 0;  // GPU-seconds left idle before `start` on the chosen GPUs
};

// The earliest start on `node` for `k` GPUs no earlier than `ready`, and the
// GPUs to use: among those free by then, the ones freed last (best fit).
NodeOffer Offer(const std::vector<double>& free_at, int node, int k, double ready,
                std::vector<int>* pick) {
  thread_local std::vector<int> idx;  // once per node per task per schedule: no malloc
  idx.resize(free_at.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) {
    return free_at[static_cast<size_t>(a)] < free_at[static_cast<size_t>(b)] ||
           (free_at[static_cast<size_t>(a)] == free_at[static_cast<size_t>(b)] && a < b);
  });
  NodeOffer offer;
  offer.node = node;
  offer.start = std::max(ready, free_at[static_cast<size_t>(idx[static_cast<size_t>(k - 1)])]);
  // GPUs free by `start`, take the k latest-freed.
  size_t usable = 0;
  while (usable < idx.size() && free_at[static_cast<size_t>(idx[usable])] <= offer.start) ++usable;
  if (pick) pick->clear();
  for (size_t i = usable - static_cast<size_t>(k); i < usable; ++i) {
    offer.idle += offer.start - free_at[static_cast<size_t>(idx[i])];
    if (pick) pick->push_back(idx[i]);
  }
  return offer;
}

// A gang never spans GPU types: of offers sorted best first, keeps the first
// `nodes` of the one type whose `nodes`-th offer starts earliest.
void KeepOneType(const Problem& problem, std::vector<NodeOffer>& offers, int nodes) {
  std::map<std::string, int> seen;
  std::string type;
  for (const NodeOffer& o : offers) {
    const std::string& t = problem.nodes[static_cast<size_t>(o.node)].gpu_type;
    if (++seen[t] == nodes) {
      type = t;
      break;
    }
  }
  std::vector<NodeOffer> kept;
  for (const NodeOffer& o : offers) {
    if (static_cast<int>(kept.size()) < nodes &&
        problem.nodes[static_cast<size_t>(o.node)].gpu_type == type)
      kept.push_back(o);
  }
  offers = std::move(kept);
}

// The deadline rule (DeadlineSchedule): among a task's placements, the least
// cost that finishes by the deadline (ties: the earlier finish), else the
// earliest finish.
struct DeadlinePick {
  double deadline = 0;
  int config = -1;
  double start = 0, run = 0, cost = 0;
  bool in_time = false;
  // Takes the placement when it is better than the one held.
  bool Offer(int ci, double s, double r, double c) {
    const bool met = s + r <= deadline;
    const bool take =
        config < 0 || (met && !in_time) ||
        (met && in_time &&
         (c < cost * (1 - 1e-12) || (c <= cost * (1 + 1e-12) && s + r < start + run))) ||
        (!met && !in_time && s + r < start + run);
    if (take) config = ci, start = s, run = r, cost = c, in_time = met;
    return take;
  }
};

// A GPU-second's price on each node: its type's in `type_price` (one per
// GpuTypes entry; a typeless configuration pays the type it lands on), else 1.
std::vector<double> NodePrices(const Problem& problem, const std::vector<double>& type_price) {
  const std::vector<std::string> types = GpuTypes(problem);
  std::vector<double> price(problem.nodes.size(), 1.0);
  if (type_price.size() == types.size())
    for (size_t n = 0; n < problem.nodes.size(); ++n)
      price[n] = type_price[static_cast<size_t>(
          std::lower_bound(types.begin(), types.end(), problem.nodes[n].gpu_type) - types.begin())];
  return price;
}

// Per task, the running configuration when it is among the task's candidates
// (the task keeps its GPUs), else -1.
std::vector<int> KeptRunning(const Problem& problem,
                             const std::vector<std::vector<int>>& candidates) {
  std::vector<int> keep(problem.tasks.size(), -1);
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const Task& task = problem.tasks[t];
    if (task.running && std::find(candidates[t].begin(), candidates[t].end(),
                                  task.running->config) != candidates[t].end())
      keep[t] = task.running->config;
  }
  return keep;
}

}  // namespace

CapTimeline::CapTimeline(int cap) : cap_(cap) {}

void CapTimeline::Add(double start, double end, int gpus) {
  if (cap_ > 0) spans_.push_back({start, end, gpus});
}

double CapTimeline::Earliest(double from, double run, int gpus) const {
  if (cap_ <= 0) return from;
  if (gpus > cap_) return std::numeric_limits<double>::infinity();
  // Holdings only fall when a span ends, so those are the only candidates.
  std::vector<double> cands = {from};
  for (const Span& sp : spans_)
    if (sp.end > from) cands.push_back(sp.end);
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  for (double t : cands)
    if (Peak(t, t + run) + gpus <= cap_) return t;
  return std::numeric_limits<double>::infinity();
}

int CapTimeline::Peak(double s, double e) const {
  std::vector<std::pair<double, int>> events;  // ends sort before starts at a tie
  for (const Span& sp : spans_) {
    if (sp.end <= s || sp.start >= e) continue;
    events.push_back({std::max(sp.start, s), sp.gpus});
    events.push_back({sp.end, -sp.gpus});
  }
  std::sort(events.begin(), events.end());
  int held = 0, peak = 0;
  for (const auto& [t, d] : events) {
    held += d;
    peak = std::max(peak, held);
  }
  return peak;
}

std::vector<int> OrderTasks(const Problem& problem, const std::vector<int>& choice,
                            OrderRule rule) {
  size_t n = problem.tasks.size();
  std::vector<double> key(n), key2(n);
  for (size_t t = 0; t < n; ++t) {
    const Task& task = problem.tasks[t];
    double run = RunSeconds(task, choice[t]);
    int gpus = task.configs[static_cast<size_t>(choice[t])].gpus;
    switch (rule) {
      case OrderRule::kLongestFirst:
        key[t] = -run;
        key2[t] = 0;
        break;
      case OrderRule::kWidestFirst:
        key[t] = -gpus;
        key2[t] = -run;
        break;
      case OrderRule::kMostGpuTimeFirst:
        key[t] = -gpus * run;
        key2[t] = 0;
        break;
      case OrderRule::kArrivalThenLongest:
        key[t] = task.arrival;
        key2[t] = -run;
        break;
      case OrderRule::kSmithRatio:
        key[t] = -task.weight / (gpus * run);
        key2[t] = task.arrival;
        break;
    }
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    if (key[ua] != key[ub]) return key[ua] < key[ub];
    return key2[ua] < key2[ub];
  });
  return order;
}

namespace {

// Pins the running tasks that keep their configuration to the GPUs they hold,
// from time 0, visiting them in `order` (then any task `order` leaves out). A
// task whose GPUs would take the job over its cap (a gpuQuota lowered under
// what runs) is not pinned: it is scheduled again like any other task, paying
// its switch cost, so the plan stops it now and runs it later. `free(g)` says
// GPU g is still untaken; `take(g, end)` holds it until `end`. Returns which
// tasks were pinned.
std::vector<bool> PinRunning(const Problem& problem, const std::vector<int>& choice,
                             const std::vector<int>& order, Plan& plan, CapTimeline& usage,
                             const std::function<bool(const GpuSlot&)>& free,
                             const std::function<void(const GpuSlot&, double)>& take) {
  std::vector<bool> pinned(problem.tasks.size(), false);
  std::vector<int> visit = order;
  std::vector<bool> listed(problem.tasks.size(), false);
  for (int t : order) {
    if (t >= 0 && static_cast<size_t>(t) < listed.size()) listed[static_cast<size_t>(t)] = true;
  }
  for (size_t t = 0; t < listed.size(); ++t) {
    if (!listed[t]) visit.push_back(static_cast<int>(t));
  }
  for (int ti : visit) {
    if (ti < 0 || static_cast<size_t>(ti) >= problem.tasks.size()) continue;
    const auto t = static_cast<size_t>(ti);
    const Task& task = problem.tasks[t];
    if (pinned[t] || !task.running || choice[t] < 0 || task.running->config != choice[t]) continue;
    bool ok = true;
    for (const GpuSlot& g : task.running->gpus) {
      if (g.node < 0 || g.node >= static_cast<int>(problem.nodes.size()) || g.gpu < 0 ||
          g.gpu >= problem.nodes[static_cast<size_t>(g.node)].gpus || !free(g))
        ok = false;
    }
    const double end = RunSeconds(task, choice[t]);
    const int gpus = static_cast<int>(task.running->gpus.size());
    if (!ok || usage.Earliest(0, end, gpus) > 0) continue;
    Assignment& a = plan.assignments[t];
    a.config = choice[t];
    a.gpus = task.running->gpus;
    std::sort(a.gpus.begin(), a.gpus.end());
    a.start = 0;
    a.end = end;
    for (const GpuSlot& g : a.gpus) take(g, end);
    usage.Add(0, end, gpus);
    pinned[t] = true;
  }
  return pinned;
}

// Per node, when each GPU is next free (append placement): all at time 0.
std::vector<std::vector<double>> FreeTimes(const Problem& problem) {
  std::vector<std::vector<double>> free_at(problem.nodes.size());
  for (size_t n = 0; n < problem.nodes.size(); ++n)
    free_at[n].assign(static_cast<size_t>(problem.nodes[n].gpus), 0.0);
  return free_at;
}

// PinRunning over per-GPU free times (append placement).
std::vector<bool> PinOnFreeTimes(const Problem& problem, const std::vector<int>& keep,
                                 const std::vector<int>& order, Plan& plan,
                                 std::vector<std::vector<double>>& free_at, CapTimeline& usage) {
  return PinRunning(
      problem, keep, order, plan, usage,
      [&](const GpuSlot& g) {
        return free_at[static_cast<size_t>(g.node)][static_cast<size_t>(g.gpu)] <= 0;
      },
      [&](const GpuSlot& g, double end) {
        free_at[static_cast<size_t>(g.node)][static_cast<size_t>(g.gpu)] = end;
      });
}

// Commits an append-schedule placement: `k` GPUs on each offered node (the
// latest-freed of those free by `start`), held until start + run.
void TakeOffers(Assignment& a, int config, double start, double run,
                const std::vector<NodeOffer>& offers, int k,
                std::vector<std::vector<double>>& free_at, CapTimeline& usage) {
  thread_local std::vector<int> pick;
  a.config = config;
  a.start = start;
  a.end = start + run;
  a.gpus.clear();
  for (const NodeOffer& o : offers) {
    (void)Offer(free_at[static_cast<size_t>(o.node)], o.node, k, start, &pick);
    for (int g : pick) {
      a.gpus.push_back({o.node, g});
      free_at[static_cast<size_t>(o.node)][static_cast<size_t>(g)] = a.end;
    }
  }
  std::sort(a.gpus.begin(), a.gpus.end());
  usage.Add(a.start, a.end, static_cast<int>(a.gpus.size()));
}

Plan AppendSchedule(const Problem& problem, const std::vector<int>& choice,
                    const std::vector<int>& order) {
  Plan plan;
  plan.assignments.resize(problem.tasks.size());
  std::vector<std::vector<double>> free_at = FreeTimes(problem);
  CapTimeline usage(problem.gpu_cap);
  std::vector<bool> pinned = PinOnFreeTimes(problem, choice, order, plan, free_at, usage);

  std::vector<NodeOffer> offers;
  for (int ti : order) {
    size_t t = static_cast<size_t>(ti);
    if (pinned[t]) continue;
    const Task& task = problem.tasks[t];
    const Config& c = task.configs[static_cast<size_t>(choice[t])];
    int k = c.GpusPerNode();
    // A task moved off its GPUs (same config, other GPUs) pays the switch cost.
    double run = RunSeconds(task, choice[t]);
    if (task.running && task.running->config == choice[t]) run += task.running->switch_cost_s;
    double ready = task.arrival;
    double start = 0;
    // The earliest start the GPUs allow, pushed later while the cap does not.
    for (;;) {
      offers.clear();
      for (size_t n = 0; n < problem.nodes.size(); ++n) {
        if (!NodeServes(problem.nodes[n], task, c)) continue;
        offers.push_back(Offer(free_at[n], static_cast<int>(n), k, ready, nullptr));
      }
      // Cheapest nodes first: earliest start, then least idle, then index.
      std::sort(offers.begin(), offers.end(), [](const NodeOffer& a, const NodeOffer& b) {
        if (a.start != b.start) return a.start < b.start;
        if (a.idle != b.idle) return a.idle < b.idle;
        return a.node < b.node;
      });
      KeepOneType(problem, offers, c.nodes);
      start = 0;
      for (const NodeOffer& o : offers) start = std::max(start, o.start);
      double allowed = usage.Earliest(start, run, c.gpus);
      if (allowed <= start) break;
      ready = allowed;  // finite: ConfigFits keeps every configuration within the cap
    }
    TakeOffers(plan.assignments[t], choice[t], start, run, offers, k, free_at, usage);
  }
  Summarize(problem, plan);
  return plan;
}

// Where one configuration of a task would start in an append schedule: per
// node the GPUs' free times sorted (`sorted`), the gang on the nodes of one
// type whose `nodes`-th best offer starts first.
struct AppendPlace {
  double start = std::numeric_limits<double>::infinity();
  std::vector<NodeOffer> offers;  // the nodes it takes
};

AppendPlace PlaceAppend(const Problem& problem, const std::vector<std::vector<double>>& sorted,
                        const Task& task, const Config& c, double ready,
                        std::vector<NodeOffer>& scratch) {
  const int k = c.GpusPerNode();
  scratch.clear();
  for (size_t n = 0; n < problem.nodes.size(); ++n) {
    if (!NodeServes(problem.nodes[n], task, c)) continue;
    const std::vector<double>& f = sorted[n];
    NodeOffer o;
    o.node = static_cast<int>(n);
    o.start = std::max(ready, f[static_cast<size_t>(k - 1)]);
    // The k latest-freed GPUs among those free by the start.
    const auto usable =
        static_cast<size_t>(std::upper_bound(f.begin(), f.end(), o.start) - f.begin());
    for (size_t i = usable - static_cast<size_t>(k); i < usable; ++i) o.idle += o.start - f[i];
    scratch.push_back(o);
  }
  AppendPlace place;
  if (static_cast<int>(scratch.size()) < c.nodes) return place;
  auto better = [](const NodeOffer& a, const NodeOffer& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.idle != b.idle) return a.idle < b.idle;
    return a.node < b.node;
  };
  if (c.nodes == 1) {
    const NodeOffer* best = &scratch.front();
    for (const NodeOffer& o : scratch)
      if (better(o, *best)) best = &o;
    place.start = best->start;
    place.offers = {*best};
    return place;
  }
  std::sort(scratch.begin(), scratch.end(), better);
  KeepOneType(problem, scratch, c.nodes);
  if (static_cast<int>(scratch.size()) < c.nodes) return place;
  place.start = 0;
  for (const NodeOffer& o : scratch) place.start = std::max(place.start, o.start);
  place.offers = scratch;
  return place;
}

}  // namespace

namespace {

Plan DeadlineAppend(const Problem& problem, const std::vector<std::vector<int>>& candidates,
                    const std::vector<int>& order, double deadline,
                    const std::vector<double>& node_price) {
  Plan plan;
  plan.assignments.resize(problem.tasks.size());
  std::vector<std::vector<double>> free_at = FreeTimes(problem);
  CapTimeline usage(problem.gpu_cap);
  std::vector<bool> pinned =
      PinOnFreeTimes(problem, KeptRunning(problem, candidates), order, plan, free_at, usage);
  std::vector<std::vector<double>> sorted(problem.nodes.size());
  std::vector<NodeOffer> scratch;
  for (int ti : order) {
    const auto t = static_cast<size_t>(ti);
    if (pinned[t] || candidates[t].empty()) continue;
    const Task& task = problem.tasks[t];
    for (size_t n = 0; n < problem.nodes.size(); ++n) {
      sorted[n] = free_at[n];
      std::sort(sorted[n].begin(), sorted[n].end());
    }
    DeadlinePick pick{deadline};
    AppendPlace best_place;
    for (int ci : candidates[t]) {
      const Config& c = task.configs[static_cast<size_t>(ci)];
      double run = RunSeconds(task, ci);
      if (task.running && task.running->config == ci) run += task.running->switch_cost_s;
      double ready = task.arrival;
      AppendPlace place;
      for (;;) {  // the earliest start the GPUs allow, later while the cap does not
        place = PlaceAppend(problem, sorted, task, c, ready, scratch);
        if (!std::isfinite(place.start)) break;
        const double allowed = usage.Earliest(place.start, run, c.gpus);
        if (allowed <= place.start) break;
        ready = allowed;
        if (!std::isfinite(ready)) {
          place.start = ready;
          break;
        }
      }
      if (!std::isfinite(place.start)) continue;
      const double cost = node_price[static_cast<size_t>(place.offers.front().node)] * c.gpus * run;
      if (pick.Offer(ci, place.start, run, cost)) best_place = std::move(place);
    }
    if (pick.config < 0) continue;  // fits nowhere (the caller's candidates fit)
    TakeOffers(plan.assignments[t], pick.config, pick.start, pick.run, best_place.offers,
               task.configs[static_cast<size_t>(pick.config)].GpusPerNode(), free_at, usage);
  }
  Summarize(problem, plan);
  return plan;
}

// Busy intervals per GPU, sorted by start.
using Timeline = std::vector<std::pair<double, double>>;

bool FreeDuring(const Timeline& tl, double s, double e) {
  for (const auto& [a, b] : tl) {
    if (a >= e) break;
    if (b > s && a < e) return false;
  }
  return true;
}

double PrevEnd(const Timeline& tl, double s) {
  double prev = 0;
  for (const auto& [a, b] : tl) {
    if (b <= s) prev = std::max(prev, b);
    if (a > s) break;
  }
  return prev;
}

void Occupy(Timeline& tl, double s, double e) {
  auto it = std::lower_bound(tl.begin(), tl.end(), std::make_pair(s, e));
  tl.insert(it, {s, e});
}

struct Slot {
  double start = std::numeric_limits<double>::infinity();
  double idle = 0;
  std::vector<int> gpus;
};

// Earliest start >= ready (and < bound) on this node where k GPUs are free for
// `run` seconds, with the k free GPUs whose previous task ended last.
Slot EarliestSlot(const std::vector<Timeline>& node, int k, double ready, double run,
                  double bound) {
  // Reused across calls: this runs once per node per task per schedule.
  thread_local std::vector<double> cands;
  thread_local std::vector<std::pair<double, int>> free;
  thread_local std::vector<int> free_gpus;
  cands.assign(1, ready);
  for (const Timeline& tl : node)
    for (const auto& iv : tl)
      if (iv.second > ready && iv.second < bound) cands.push_back(iv.second);
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  Slot slot;
  for (double s : cands) {
    if (s >= bound) break;
    free_gpus.clear();
    for (size_t g = 0; g < node.size(); ++g)
      if (FreeDuring(node[g], s, s + run)) free_gpus.push_back(static_cast<int>(g));
    if (static_cast<int>(free_gpus.size()) < k) continue;
    free.clear();
    for (int g : free_gpus) free.push_back({s - PrevEnd(node[static_cast<size_t>(g)], s), g});
    std::sort(free.begin(), free.end());
    slot.start = s;
    for (int i = 0; i < k; ++i) {
      slot.idle += free[static_cast<size_t>(i)].first;
      slot.gpus.push_back(free[static_cast<size_t>(i)].second);
    }
    return slot;
  }
  return slot;
}

struct Placed {
  double start = std::numeric_limits<double>::infinity();
  double run = 0;
  std::vector<GpuSlot> gpus;
};

// Spanning nodes: the earliest time `nodes` of `eligible` each have k GPUs
// free for `run` seconds, before `bound`. Each node's earliest slot from s is
// monotone in s, so jump s to the nodes-th smallest of them until that many
// nodes can start exactly at s.
Placed SpanningSlot(const std::vector<std::vector<Timeline>>& busy,
                    const std::vector<size_t>& eligible, int nodes, int k, double ready, double run,
                    double bound) {
  Placed placed;
  double s = ready;
  for (int guard = 0; guard < 100000 && s < bound; ++guard) {
    std::vector<std::pair<double, size_t>> at;  // (earliest start, index into slots)
    std::vector<Slot> slots;
    for (size_t n : eligible) {
      Slot slot = EarliestSlot(busy[n], k, s, run, std::numeric_limits<double>::infinity());
      slot.gpus.push_back(static_cast<int>(n));  // node index rides at the back
      at.push_back({slot.start, slots.size()});
      slots.push_back(std::move(slot));
    }
    std::sort(at.begin(), at.end());
    double next = at[static_cast<size_t>(nodes - 1)].first;
    if (next > s + 1e-9) {
      s = next;
      continue;
    }
    // At least `nodes` nodes start at s: least idle first.
    std::vector<size_t> hosts;
    for (const auto& [start_at, i] : at)
      if (start_at <= s + 1e-9) hosts.push_back(i);
    std::stable_sort(hosts.begin(), hosts.end(),
                     [&](size_t x, size_t y) { return slots[x].idle < slots[y].idle; });
    placed.start = s;
    for (int i = 0; i < nodes; ++i) {
      std::vector<int>& g = slots[hosts[static_cast<size_t>(i)]].gpus;
      int node = g.back();
      g.pop_back();
      for (int gpu : g) placed.gpus.push_back({node, gpu});
    }
    break;
  }
  return placed;
}

// Where task t would start under config `config` given what is already busy.
Placed FindSlot(const Problem& problem, const std::vector<std::vector<Timeline>>& busy, size_t t,
                int config, double ready, double bound = std::numeric_limits<double>::infinity()) {
  const Task& task = problem.tasks[t];
  const Config& c = task.configs[static_cast<size_t>(config)];
  int k = c.GpusPerNode();
  Placed placed;
  placed.run = RunSeconds(task, config);
  // Same configuration on other GPUs still pays the move.
  if (task.running && task.running->config == config) placed.run += task.running->switch_cost_s;
  double run = placed.run;
  if (c.nodes == 1) {
    Slot best;
    best.start = bound;
    int best_node = -1;
    // Nodes with nothing scheduled yet are interchangeable within their
    // shape (GPUs, memory, type): only the first of each can win, as ties go
    // to the lower index. On a large cluster most nodes start out so.
    std::vector<const Node*> empty_seen;
    for (size_t n = 0; n < problem.nodes.size(); ++n) {
      const Node& node = problem.nodes[n];
      if (!NodeServes(node, task, c)) continue;
      bool empty = std::all_of(busy[n].begin(), busy[n].end(),
                               [](const Timeline& tl) { return tl.empty(); });
      if (empty) {
        bool seen = std::any_of(empty_seen.begin(), empty_seen.end(), [&](const Node* o) {
          return o->gpus == node.gpus && o->gpu_memory_gib == node.gpu_memory_gib &&
                 o->gpu_type == node.gpu_type;
        });
        if (seen) continue;
        empty_seen.push_back(&node);
      }
      // Only a start no later than the best so far can win.
      Slot s = EarliestSlot(busy[n], k, ready, run, best.start + 1e-9);
      if (s.gpus.empty()) continue;
      if (best_node < 0 || s.start < best.start - 1e-9 ||
          (s.start <= best.start + 1e-9 && s.idle < best.idle)) {
        best = std::move(s);
        best_node = static_cast<int>(n);
      }
    }
    if (best_node < 0) return placed;
    placed.start = best.start;
    for (int g : best.gpus) placed.gpus.push_back({best_node, g});
  } else {
    // A gang never spans GPU types: the earliest gang within each type.
    std::map<std::string, std::vector<size_t>> eligible;
    for (size_t n = 0; n < problem.nodes.size(); ++n)
      if (NodeServes(problem.nodes[n], task, c)) eligible[problem.nodes[n].gpu_type].push_back(n);
    for (const auto& [type, hosts] : eligible) {
      if (static_cast<int>(hosts.size()) < c.nodes) continue;
      Placed p = SpanningSlot(busy, hosts, c.nodes, k, ready, run, std::min(bound, placed.start));
      if (p.start < placed.start) {
        placed.start = p.start;
        placed.gpus = std::move(p.gpus);
      }
    }
  }
  std::sort(placed.gpus.begin(), placed.gpus.end());
  return placed;
}

// The earliest slot on the GPUs that the cap also allows.
Placed FindCappedSlot(const Problem& problem, const std::vector<std::vector<Timeline>>& busy,
                      const CapTimeline& usage, size_t t, int config) {
  int gpus = problem.tasks[t].configs[static_cast<size_t>(config)].gpus;
  double ready = problem.tasks[t].arrival;
  for (;;) {
    Placed p = FindSlot(problem, busy, t, config, ready);
    if (!std::isfinite(p.start)) return p;
    double allowed = usage.Earliest(p.start, p.run, gpus);
    if (allowed <= p.start) return p;
    if (!std::isfinite(allowed)) return Placed{};
    ready = allowed;
  }
}

std::vector<std::vector<Timeline>> EmptyTimelines(const Problem& problem) {
  std::vector<std::vector<Timeline>> busy(problem.nodes.size());
  for (size_t n = 0; n < problem.nodes.size(); ++n)
    busy[n].resize(static_cast<size_t>(problem.nodes[n].gpus));
  return busy;
}

void Commit(std::vector<std::vector<Timeline>>& busy, Assignment& a, int config, const Placed& p) {
  a.config = config;
  a.start = p.start;
  a.end = p.start + p.run;
  a.gpus = p.gpus;
  for (const GpuSlot& g : a.gpus)
    Occupy(busy[static_cast<size_t>(g.node)][static_cast<size_t>(g.gpu)], a.start, a.end);
}

// PinRunning over per-GPU busy timelines.
std::vector<bool> PinOnTimelines(const Problem& problem, const std::vector<int>& keep,
                                 const std::vector<int>& order, Plan& plan,
                                 std::vector<std::vector<Timeline>>& busy, CapTimeline& usage) {
  return PinRunning(
      problem, keep, order, plan, usage,
      [&](const GpuSlot& g) {
        return busy[static_cast<size_t>(g.node)][static_cast<size_t>(g.gpu)].empty();
      },
      [&](const GpuSlot& g, double end) {
        Occupy(busy[static_cast<size_t>(g.node)][static_cast<size_t>(g.gpu)], 0, end);
      });
}

Plan BackfillSchedule(const Problem& problem, const std::vector<int>& choice,
                      const std::vector<int>& order) {
  Plan plan;
  plan.assignments.resize(problem.tasks.size());
  auto busy = EmptyTimelines(problem);
  CapTimeline usage(problem.gpu_cap);
  std::vector<bool> pinned = PinOnTimelines(problem, choice, order, plan, busy, usage);
  for (int ti : order) {
    size_t t = static_cast<size_t>(ti);
    if (pinned[t]) continue;
    Assignment& a = plan.assignments[t];
    Commit(busy, a, choice[t], FindCappedSlot(problem, busy, usage, t, choice[t]));
    usage.Add(a.start, a.end, static_cast<int>(a.gpus.size()));
  }
  Summarize(problem, plan);
  return plan;
}

Plan DeadlineBackfill(const Problem& problem, const std::vector<std::vector<int>>& candidates,
                      const std::vector<int>& order, double deadline,
                      const std::vector<double>& node_price) {
  Plan plan;
  plan.assignments.resize(problem.tasks.size());
  auto busy = EmptyTimelines(problem);
  CapTimeline usage(problem.gpu_cap);
  std::vector<bool> pinned =
      PinOnTimelines(problem, KeptRunning(problem, candidates), order, plan, busy, usage);
  for (int ti : order) {
    const auto t = static_cast<size_t>(ti);
    if (pinned[t] || candidates[t].empty()) continue;
    DeadlinePick pick{deadline};
    Placed best;
    for (int ci : candidates[t]) {
      Placed p = FindCappedSlot(problem, busy, usage, t, ci);
      if (!std::isfinite(p.start) || p.gpus.empty()) continue;
      const double cost = node_price[static_cast<size_t>(p.gpus.front().node)] *
                          static_cast<double>(p.gpus.size()) * p.run;
      if (pick.Offer(ci, p.start, p.run, cost)) best = std::move(p);
    }
    if (pick.config < 0) continue;
    Assignment& a = plan.assignments[t];
    Commit(busy, a, pick.config, best);
    usage.Add(a.start, a.end, static_cast<int>(a.gpus.size()));
  }
  Summarize(problem, plan);
  return plan;
}

}  // namespace

Plan DeadlineSchedule(const Problem& problem, const std::vector<std::vector<int>>& candidates,
                      const std::vector<int>& order, double deadline,
                      const std::vector<double>& type_price, Placement placement) {
  const std::vector<double> node_price = NodePrices(problem, type_price);
  return placement == Placement::kAppend
             ? DeadlineAppend(problem, candidates, order, deadline, node_price)
             : DeadlineBackfill(problem, candidates, order, deadline, node_price);
}

Plan ListSchedule(const Problem& problem, const std::vector<int>& choice,
                  const std::vector<int>& order, Placement placement) {
  return placement == Placement::kAppend ? AppendSchedule(problem, choice, order)
                                         : BackfillSchedule(problem, choice, order);
}

Plan BestListSchedule(const Problem& problem, const std::vector<int>& choice, OrderRule* rule,
                      Placement* placement) {
  std::vector<OrderRule> rules;
  if (problem.objective == Objective::kMakespan) {
    rules = {OrderRule::kLongestFirst, OrderRule::kWidestFirst, OrderRule::kMostGpuTimeFirst,
             OrderRule::kArrivalThenLongest};
  } else {
    rules = {OrderRule::kSmithRatio, OrderRule::kArrivalThenLongest, OrderRule::kLongestFirst};
  }
  Plan best;
  bool have = false;
  for (OrderRule r : rules) {
    std::vector<int> order = OrderTasks(problem, choice, r);
    for (Placement pl : {Placement::kBackfill, Placement::kAppend}) {
      Plan p = ListSchedule(problem, choice, order, pl);
      if (!have || p.objective < best.objective) {
        best = std::move(p);
        have = true;
        if (rule) *rule = r;
        if (placement) *placement = pl;
      }
    }
  }
  return best;
}

}  // namespace orrery::planner
