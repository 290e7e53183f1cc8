// Discrete-event simulation of a cluster running the engine's plans.
#include "operator/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <queue>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace orrery::sim {
namespace {

enum class Kind { kArrival, kNodeLost, kNodeJoined, kFinish, kMeasure, kTick };

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
};

class Sim {
 public:
  Sim(const planner::Workload& w, const SimOptions& o, const Clock* clock)
      : w_(w), o_(o), engine_(o.engine, clock) {}

  StatusOr<SimResult> Run();

 private:
  void Push(double t, Kind k, int index, int epoch = 0) {
    queue_.push({t, seq_++, k, index, epoch});
  }
  double TrueThroughput(const SimTask& t) const {
    return t.spec->configs[static_cast<size_t>(t.config)].throughput * t.true_speed;
  }
  void Advance(SimTask& t) {
    if (!t.running) return;
    double from = std::max(t.last_advance, t.progress_from);
    if (now_ > from) t.remaining -= (now_ - from) * TrueThroughput(t);
    t.last_advance = std::max(t.last_advance, now_);
    if (t.remaining < 0) t.remaining = 0;
  }
  void Stop(size_t i, const std::string& why) {
    SimTask& t = tasks_[i];
    Advance(t);
    if (why == "node-lost" && now_ > t.progress_from) {
      // Lose what was done since the last periodic checkpoint.
      double ran = now_ - t.progress_from;
      double lost = std::fmod(ran, o_.checkpoint_interval_s);
      t.remaining = std::min(t.spec->work, t.remaining + lost * TrueThroughput(t));
    }
    Record(i, why);
    for (const planner::GpuSlot& g : t.gpus) owner_[g] = -1;
    t.running = false;
    ++t.epoch;
  }
  void Record(size_t i, const std::string& why) {
    const SimTask& t = tasks_[i];
    if (now_ <= t.start) return;
    const planner::Config& c = t.spec->configs[static_cast<size_t>(t.config)];
    result_.intervals.push_back(
        {t.spec->name, t.start, now_, c.template_name, c.gpus, c.batch_size, t.gpus, why});
  }
  engine::WorldView View() const;
  Status Trigger(engine::Trigger trigger);
  void Dispatch();
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
  std::optional<planner::Plan> plan_;
  SimResult result_;
  // GPU-seconds alive, integrated as nodes come and go.
  double alive_gpu_seconds_ = 0;
  double alive_since_ = 0;
  int alive_gpus_ = 0;
};

engine::WorldView Sim::View() const {
  engine::WorldView v;
  v.now = now_;
  v.gpu_cap = w_.problem.gpu_cap;
  for (size_t n = 0; n < nodes_.size(); ++n)
    v.nodes.push_back(
        {nodes_[n].name, nodes_[n].gpus, nodes_[n].gpu_memory_gib, static_cast<bool>(alive_[n])});
  for (const SimTask& t : tasks_) {
    engine::TaskView tv;
    tv.name = t.spec->name;
    tv.remaining_work = t.remaining;
    tv.arrival = t.spec->arrival;
    tv.weight = t.spec->weight;
    tv.profile = t.spec->configs;
    tv.arrived = t.arrived;
    tv.done = t.done;
    tv.speed_factor = t.speed_factor;
    if (t.running) tv.running = engine::RunningView{t.config, t.gpus};
    v.tasks.push_back(std::move(tv));
  }
  return v;
}

Status Sim::Trigger(engine::Trigger trigger) {
  for (SimTask& t : tasks_) Advance(t);
  ORRERY_ASSIGN_OR_RETURN(engine::Decision d, engine_.Decide(View(), trigger));
  result_.solver_seconds += d.solver_seconds;
  if (!d.adopted) return OkStatus();
  plan_ = d.plan;
  // The running tasks the engine stops are checkpointed now and restarted by
  // Dispatch, paying the switching cost.
  for (const engine::StopAction& stop : d.stops) {
    if (stop.task >= tasks_.size() || !tasks_[stop.task].running) continue;
    Stop(stop.task, "preempted");
    ++result_.switches;
  }
  return OkStatus();
}

void Sim::Dispatch() {
  if (!plan_) return;
  // Waiting tasks in planned start order; a task may start when its GPUs are
  // free and no earlier-planned waiting task claims any of them.
  std::vector<size_t> waiting;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const SimTask& t = tasks_[i];
    if (t.arrived && !t.done && !t.running && plan_->assignments[i].config >= 0)
      waiting.push_back(i);
  }
  std::stable_sort(waiting.begin(), waiting.end(), [&](size_t a, size_t b) {
    return plan_->assignments[a].start < plan_->assignments[b].start;
  });
  std::set<planner::GpuSlot> claimed;
  for (size_t i : waiting) {
    const planner::Assignment& a = plan_->assignments[i];
    bool ok = true;
    for (const planner::GpuSlot& g : a.gpus) ok = ok && GpuUsable(g) && !claimed.count(g);
    for (const planner::GpuSlot& g : a.gpus) claimed.insert(g);
    if (!ok) continue;
    SimTask& t = tasks_[i];
    t.running = true;
    t.config = a.config;
    t.gpus = a.gpus;
    t.start = now_;
    t.progress_from = now_ + (t.ever_started ? o_.engine.switch_cost_s : 0);
    t.last_advance = now_;
    t.ever_started = true;
    ++t.epoch;
    for (const planner::GpuSlot& g : t.gpus) owner_[g] = static_cast<int>(i);
    Push(t.progress_from + t.remaining / TrueThroughput(t), Kind::kFinish, static_cast<int>(i),
         t.epoch);
    if (!t.measured)
      Push(t.progress_from + o_.measure_after_s, Kind::kMeasure, static_cast<int>(i), t.epoch);
  }
}

StatusOr<SimResult> Sim::Run() {
  result_.workload = w_.name;
  result_.policy = o_.engine.policy + (o_.engine.introspect ? "" : "-static");
  result_.gpus_per_node = w_.gpus_per_node;
  nodes_ = w_.problem.nodes;
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
  for (const planner::ClusterEvent& e : w_.events)
    Push(e.time,
         e.kind == planner::ClusterEvent::Kind::kNodeLost ? Kind::kNodeLost : Kind::kNodeJoined,
         e.node);
  if (o_.engine.introspect) Push(o_.engine.replan_interval_s, Kind::kTick, 0);
  ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kStart));
  Dispatch();
  size_t done = 0;
  while (!queue_.empty() && done < tasks_.size()) {
    Event e = queue_.top();
    queue_.pop();
    if (e.time > o_.max_time_s) return DeadlineExceededError("simulation passed its time limit");
    now_ = e.time;
    size_t i = static_cast<size_t>(std::max(0, e.index));
    switch (e.kind) {
      case Kind::kArrival:
        tasks_[i].arrived = true;
        ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kTaskArrived));
        break;
      case Kind::kFinish: {
        SimTask& t = tasks_[i];
        if (!t.running || e.epoch != t.epoch) break;
        Advance(t);
        Record(i, "finished");
        for (const planner::GpuSlot& g : t.gpus) owner_[g] = -1;
        t.running = false;
        t.done = true;
        t.remaining = 0;
        t.completion = now_;
        ++done;
        ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kTaskFinished));
        break;
      }
      case Kind::kMeasure: {
        SimTask& t = tasks_[i];
        if (!t.running || e.epoch != t.epoch || t.measured) break;
        t.measured = true;
        t.speed_factor = t.true_speed;
        if (std::abs(t.true_speed - 1) > o_.engine.drift_tolerance)
          ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kThroughputDrift));
        break;
      }
      case Kind::kNodeLost: {
        if (i >= alive_.size() || !alive_[i]) break;
        alive_gpu_seconds_ += alive_gpus_ * (now_ - alive_since_);
        alive_since_ = now_;
        alive_gpus_ -= nodes_[i].gpus;
        alive_[i] = false;
        for (size_t k = 0; k < tasks_.size(); ++k) {
          if (!tasks_[k].running) continue;
          bool hit = false;
          for (const planner::GpuSlot& g : tasks_[k].gpus)
            hit = hit || g.node == static_cast<int>(i);
          if (hit) Stop(k, "node-lost");
        }
        ++result_.node_events;
        ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kCapacityChanged));
        break;
      }
      case Kind::kNodeJoined: {
        alive_gpu_seconds_ += alive_gpus_ * (now_ - alive_since_);
        alive_since_ = now_;
        nodes_.push_back(
            {"node-" + std::to_string(nodes_.size()), w_.gpus_per_node, w_.gpu_memory_gib});
        alive_.push_back(true);
        alive_gpus_ += w_.gpus_per_node;
        ++result_.node_events;
        ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kCapacityChanged));
        break;
      }
      case Kind::kTick:
        ORRERY_RETURN_IF_ERROR(Trigger(engine::Trigger::kInterval));
        if (done < tasks_.size()) Push(now_ + o_.engine.replan_interval_s, Kind::kTick, 0);
        break;
    }
    Dispatch();
  }
  if (done < tasks_.size())
    return InternalError("simulation stalled with tasks left (no plan places them)");
  std::vector<double> ct;
  for (const SimTask& t : tasks_) {
    result_.makespan = std::max(result_.makespan, t.completion);
    result_.completion.push_back(t.completion);
    ct.push_back(t.completion - t.spec->arrival);
  }
  alive_gpu_seconds_ += alive_gpus_ * (result_.makespan - alive_since_);
  double used = 0;
  for (const RunInterval& r : result_.intervals) used += r.gpus * (r.end - r.start);
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
  result_.replans = engine_.solves();
  result_.adoptions = engine_.adoptions();
  result_.tasks = static_cast<int>(tasks_.size());
  result_.nodes_total = static_cast<int>(nodes_.size());
  return result_;
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
                         {"endedBy", iv.ended_by}});
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
  return out.str();
}

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
  for (const RunInterval& iv : r.intervals) {
    const size_t hash = std::hash<std::string>{}(iv.task);
    const int hue = static_cast<int>(hash % 360);
    const double x = left + iv.start / span * width;
    const double w = std::max(0.5, (iv.end - iv.start) / span * width);
    const std::string title =
        escape(iv.task) + " " + iv.template_name + " x" + std::to_string(iv.gpus) + ", batch " +
        std::to_string(iv.batch_size) + ", " + std::to_string(static_cast<int>(iv.start)) + "-" +
        std::to_string(static_cast<int>(iv.end)) + " s, ended by " + iv.ended_by;
    double first_y = 1e300;
    for (const planner::GpuSlot& g : iv.slots) {
      const double y = lane_y(g);
      first_y = std::min(first_y, y);
      svg << "<rect class=\"bar\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << w
          << "\" height=\"" << lane - 1 << "\" fill=\"hsl(" << hue
          << ",60%,60%)\" stroke=\"white\" stroke-width=\"0.3\"><title>" << title
          << "</title></rect>\n";
    }
    // Label the bar when the name fits (about 6 px per character at 10 px).
    if (!iv.slots.empty() && w > 6.0 * static_cast<double>(iv.task.size()) + 4) {
      svg << "<text x=\"" << x + 2 << "\" y=\"" << first_y + 9 << "\" font-size=\"9\">"
          << escape(iv.task) << " " << iv.template_name << "</text>\n";
    }
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace orrery::sim
