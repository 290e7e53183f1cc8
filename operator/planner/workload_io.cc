// yaml-cpp adapter for workload files: every yaml-cpp exception is caught here
// and turned into a Status with the field path being read.
#include "operator/planner/workload_io.h"

#include <cmath>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "worker/contract/templates.h"

namespace orrery::planner {
namespace {

std::string Join(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

template <typename T>
Status Read(const YAML::Node& parent, const char* key, const std::string& path, bool required,
            T* out) {
  YAML::Node n = parent[key];
  if (!n) {
    if (required) return InvalidArgumentError(Join(path, key) + ": required");
    return OkStatus();
  }
  try {
    *out = n.as<T>();
  } catch (const YAML::Exception&) {
    return InvalidArgumentError(Join(path, key) + ": wrong type");
  }
  return OkStatus();
}

Status ParsePools(const YAML::Node& cluster, Workload& w) {
  YAML::Node pools = cluster["pools"];
  if (!pools.IsSequence() || pools.size() == 0)
    return InvalidArgumentError("cluster.pools: must be a non-empty list");
  if (cluster["nodes"] || cluster["gpusPerNode"] || cluster["gpuMemoryGiB"])
    return InvalidArgumentError(
        "cluster.pools: give either pools or nodes/gpusPerNode/gpuMemoryGiB, not both");
  for (size_t i = 0; i < pools.size(); ++i) {
    std::string path = "cluster.pools[" + std::to_string(i) + "]";
    Pool pool;
    ORRERY_RETURN_IF_ERROR(Read(pools[i], "gpuType", path, true, &pool.gpu_type));
    ORRERY_RETURN_IF_ERROR(Read(pools[i], "nodes", path, true, &pool.nodes));
    ORRERY_RETURN_IF_ERROR(Read(pools[i], "gpusPerNode", path, true, &pool.gpus_per_node));
    ORRERY_RETURN_IF_ERROR(Read(pools[i], "gpuMemoryGiB", path, true, &pool.gpu_memory_gib));
    ORRERY_RETURN_IF_ERROR(Read(pools[i], "speed", path, false, &pool.speed));
    if (pool.gpu_type.empty()) return InvalidArgumentError(path + ".gpuType: must not be empty");
    for (const Pool& other : w.pools) {
      if (other.gpu_type == pool.gpu_type)
        return InvalidArgumentError(path + ".gpuType: duplicate " + pool.gpu_type +
                                    " (one pool per GPU type)");
    }
    if (pool.nodes < 0) return InvalidArgumentError(path + ".nodes: must not be negative");
    if (pool.gpus_per_node < 1)
      return InvalidArgumentError(path + ".gpusPerNode: must be positive");
    if (!(pool.gpu_memory_gib > 0))
      return InvalidArgumentError(path + ".gpuMemoryGiB: must be positive");
    if (pool.speed < 0 || !std::isfinite(pool.speed))
      return InvalidArgumentError(path + ".speed: must be positive (omit it to measure)");
    for (int n = 0; n < pool.nodes; ++n)
      w.problem.nodes.push_back({"node-" + std::to_string(w.problem.nodes.size()),
                                 pool.gpus_per_node, pool.gpu_memory_gib, pool.gpu_type});
    w.pools.push_back(pool);
  }
  if (w.problem.nodes.empty())
    return InvalidArgumentError("cluster.pools: must have at least one node");
  w.gpus_per_node = w.pools.front().gpus_per_node;
  w.gpu_memory_gib = w.pools.front().gpu_memory_gib;
  return OkStatus();
}

Status ParseCluster(const YAML::Node& root, Workload& w) {
  YAML::Node cluster = root["cluster"];
  if (!cluster || !cluster.IsMap()) return InvalidArgumentError("cluster: required mapping");
  if (cluster["pools"]) {
    ORRERY_RETURN_IF_ERROR(ParsePools(cluster, w));
  } else {
    int nodes = 0;
    ORRERY_RETURN_IF_ERROR(Read(cluster, "nodes", "cluster", true, &nodes));
    ORRERY_RETURN_IF_ERROR(Read(cluster, "gpusPerNode", "cluster", true, &w.gpus_per_node));
    ORRERY_RETURN_IF_ERROR(Read(cluster, "gpuMemoryGiB", "cluster", true, &w.gpu_memory_gib));
    if (nodes < 1) return InvalidArgumentError("cluster.nodes: must be positive");
    if (w.gpus_per_node < 1) return InvalidArgumentError("cluster.gpusPerNode: must be positive");
    if (!(w.gpu_memory_gib > 0))
      return InvalidArgumentError("cluster.gpuMemoryGiB: must be positive");
    for (int n = 0; n < nodes; ++n)
      w.problem.nodes.push_back({"node-" + std::to_string(n), w.gpus_per_node, w.gpu_memory_gib});
  }
  ORRERY_RETURN_IF_ERROR(Read(cluster, "gpuQuota", "cluster", false, &w.problem.gpu_cap));
  if (w.problem.gpu_cap < 0)
    return InvalidArgumentError("cluster.gpuQuota: must not be negative (omit it for no quota)");
  return OkStatus();
}

const Pool* FindPool(const Workload& w, const std::string& type) {
  for (const Pool& p : w.pools)
    if (p.gpu_type == type) return &p;
  return nullptr;
}

StatusOr<Config> ParseProfile(const YAML::Node& pn, const std::string& pp, const Workload& w) {
  if (!pn.IsMap()) return InvalidArgumentError(pp + ": must be a mapping");
  Config c;
  ORRERY_RETURN_IF_ERROR(Read(pn, "template", pp, true, &c.template_name));
  ORRERY_RETURN_IF_ERROR(Read(pn, "gpus", pp, true, &c.gpus));
  ORRERY_RETURN_IF_ERROR(Read(pn, "batchSize", pp, true, &c.batch_size));
  ORRERY_RETURN_IF_ERROR(Read(pn, "throughput", pp, true, &c.throughput));
  ORRERY_RETURN_IF_ERROR(Read(pn, "memoryGiB", pp, true, &c.memory_gib));
  ORRERY_RETURN_IF_ERROR(Read(pn, "gpuType", pp, false, &c.gpu_type));
  const contract::TemplateTraits* traits = contract::FindTemplate(c.template_name);
  if (traits == nullptr || !traits->plannable)
    return InvalidArgumentError(pp + ".template: must be one of " +
                                contract::TemplateNames(/*plannable_only=*/true));
  if (c.gpus < 1) return InvalidArgumentError(pp + ".gpus: must be positive");
  if (c.batch_size < 1) return InvalidArgumentError(pp + ".batchSize: must be positive");
  if (!(c.throughput > 0) || !std::isfinite(c.throughput))
    return InvalidArgumentError(pp + ".throughput: must be positive");
  if (c.memory_gib < 0) return InvalidArgumentError(pp + ".memoryGiB: must not be negative");
  int per_node = w.gpus_per_node;
  if (!w.pools.empty()) {
    // Measured on the first pool's type unless it names another.
    if (c.gpu_type.empty()) c.gpu_type = w.pools.front().gpu_type;
    const Pool* pool = FindPool(w, c.gpu_type);
    if (pool == nullptr)
      return InvalidArgumentError(pp + ".gpuType: no pool has GPU type " + c.gpu_type);
    per_node = pool->gpus_per_node;
  } else if (!c.gpu_type.empty()) {
    return InvalidArgumentError(pp + ".gpuType: the cluster has no pools (add cluster.pools)");
  }
  c.nodes = (c.gpus + per_node - 1) / per_node;
  if (c.nodes > 1) {
    if (!traits->multi_node)
      return InvalidArgumentError(pp + ".gpus: template " + c.template_name + " cannot span nodes");
    if (c.gpus % c.nodes != 0)
      return InvalidArgumentError(pp + ".gpus: must split evenly over the nodes it spans");
  }
  return c;
}

Status ParseTask(const YAML::Node& tn, const std::string& path, Workload& w) {
  if (!tn.IsMap()) return InvalidArgumentError(path + ": must be a mapping");
  Task task;
  double speed = 1;
  ORRERY_RETURN_IF_ERROR(Read(tn, "name", path, true, &task.name));
  ORRERY_RETURN_IF_ERROR(Read(tn, "work", path, true, &task.work));
  ORRERY_RETURN_IF_ERROR(Read(tn, "arrival", path, false, &task.arrival));
  ORRERY_RETURN_IF_ERROR(Read(tn, "weight", path, false, &task.weight));
  ORRERY_RETURN_IF_ERROR(Read(tn, "trueSpeed", path, false, &speed));
  ORRERY_RETURN_IF_ERROR(Read(tn, "gpuTypes", path, false, &task.gpu_types));
  if (task.name.empty()) return InvalidArgumentError(path + ".name: must not be empty");
  if (!(task.work > 0) || !std::isfinite(task.work))
    return InvalidArgumentError(path + ".work: must be positive");
  if (task.arrival < 0 || !std::isfinite(task.arrival))
    return InvalidArgumentError(path + ".arrival: must not be negative");
  if (!(task.weight > 0)) return InvalidArgumentError(path + ".weight: must be positive");
  if (!(speed > 0)) return InvalidArgumentError(path + ".trueSpeed: must be positive");
  for (size_t k = 0; k < task.gpu_types.size(); ++k) {
    if (FindPool(w, task.gpu_types[k]) == nullptr)
      return InvalidArgumentError(path + ".gpuTypes[" + std::to_string(k) +
                                  "]: no pool has GPU type " + task.gpu_types[k]);
  }
  for (const Task& other : w.problem.tasks) {
    if (other.name == task.name)
      return InvalidArgumentError(path + ".name: duplicate " + task.name);
  }
  YAML::Node profiles = tn["profiles"];
  if (!profiles || !profiles.IsSequence() || profiles.size() == 0)
    return InvalidArgumentError(path + ".profiles: required non-empty list");
  for (size_t k = 0; k < profiles.size(); ++k) {
    ORRERY_ASSIGN_OR_RETURN(
        Config c, ParseProfile(profiles[k], path + ".profiles[" + std::to_string(k) + "]", w));
    task.configs.push_back(c);
  }
  w.problem.tasks.push_back(std::move(task));
  w.true_speed.push_back(speed);
  return OkStatus();
}

StatusOr<ClusterEvent> ParseEvent(const YAML::Node& en, const std::string& path,
                                  const Workload& w) {
  ClusterEvent e;
  std::string type;
  ORRERY_RETURN_IF_ERROR(Read(en, "type", path, true, &type));
  ORRERY_RETURN_IF_ERROR(Read(en, "time", path, true, &e.time));
  if (e.time < 0) return InvalidArgumentError(path + ".time: must not be negative");
  if (type == "nodeLost") {
    e.kind = ClusterEvent::Kind::kNodeLost;
    ORRERY_RETURN_IF_ERROR(Read(en, "node", path, true, &e.node));
    if (e.node < 0 || e.node >= static_cast<int>(w.problem.nodes.size()))
      return InvalidArgumentError(path + ".node: no such node");
  } else if (type == "nodeJoined" || type == "poolLost") {
    e.kind = type == "nodeJoined" ? ClusterEvent::Kind::kNodeJoined : ClusterEvent::Kind::kPoolLost;
    ORRERY_RETURN_IF_ERROR(Read(en, "gpuType", path, type == "poolLost", &e.gpu_type));
    if (!e.gpu_type.empty() && FindPool(w, e.gpu_type) == nullptr)
      return InvalidArgumentError(path + ".gpuType: no pool has GPU type " + e.gpu_type);
  } else if (type == "quota") {
    e.kind = ClusterEvent::Kind::kQuota;
    ORRERY_RETURN_IF_ERROR(Read(en, "gpus", path, true, &e.gpus));
    if (e.gpus < 0) return InvalidArgumentError(path + ".gpus: must not be negative (0: no cap)");
  } else {
    return InvalidArgumentError(path + ".type: must be nodeLost, nodeJoined, poolLost or quota");
  }
  return e;
}

// `otherJobs[i]`: a name, when it arrives and leaves, its quota and its tasks
// (as the workload's: names, work and profiles; they run on any pool).
Status ParseOtherJobs(const YAML::Node& list, Workload& w) {
  if (!list) return OkStatus();
  if (!list.IsSequence()) return InvalidArgumentError("otherJobs: must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "otherJobs[" + std::to_string(i) + "]";
    const YAML::Node& jn = list[i];
    if (!jn.IsMap()) return InvalidArgumentError(path + ": must be a mapping");
    OtherJob job;
    ORRERY_RETURN_IF_ERROR(Read(jn, "name", path, true, &job.name));
    ORRERY_RETURN_IF_ERROR(Read(jn, "arrival", path, false, &job.arrival));
    ORRERY_RETURN_IF_ERROR(Read(jn, "leave", path, false, &job.leave));
    ORRERY_RETURN_IF_ERROR(Read(jn, "gpuQuota", path, false, &job.quota));
    if (job.name.empty() || job.name == w.name)
      return InvalidArgumentError(path + ".name: must be non-empty and not the workload's name");
    for (const OtherJob& o : w.other_jobs) {
      if (o.name == job.name) return InvalidArgumentError(path + ".name: duplicate " + job.name);
    }
    if (job.arrival < 0 || !std::isfinite(job.arrival))
      return InvalidArgumentError(path + ".arrival: must not be negative");
    if (!std::isfinite(job.leave))
      return InvalidArgumentError(path + ".leave: must be a time (omit it: it stays)");
    if (job.quota < 0) return InvalidArgumentError(path + ".gpuQuota: must not be negative");
    YAML::Node tasks = jn["tasks"];
    if (!tasks || !tasks.IsSequence() || tasks.size() == 0)
      return InvalidArgumentError(path + ".tasks: required non-empty list");
    Workload own = w;  // its tasks parsed as a workload's, on this cluster
    own.problem.tasks.clear();
    for (size_t t = 0; t < tasks.size(); ++t) {
      ORRERY_RETURN_IF_ERROR(ParseTask(tasks[t], path + ".tasks[" + std::to_string(t) + "]", own));
    }
    job.tasks = std::move(own.problem.tasks);
    w.other_jobs.push_back(std::move(job));
  }
  return OkStatus();
}

StatusOr<Workload> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) return InvalidArgumentError("workload: must be a mapping");
  Workload w;
  ORRERY_RETURN_IF_ERROR(Read(root, "name", "", false, &w.name));
  ORRERY_RETURN_IF_ERROR(ParseCluster(root, w));
  std::string objective = "makespan";
  ORRERY_RETURN_IF_ERROR(Read(root, "objective", "", false, &objective));
  if (objective == "makespan") {
    w.problem.objective = Objective::kMakespan;
  } else if (objective == "weightedCompletion") {
    w.problem.objective = Objective::kWeightedCompletion;
  } else {
    return InvalidArgumentError("objective: must be makespan or weightedCompletion");
  }
  YAML::Node tasks = root["tasks"];
  if (!tasks || !tasks.IsSequence() || tasks.size() == 0)
    return InvalidArgumentError("tasks: required non-empty list");
  for (size_t i = 0; i < tasks.size(); ++i)
    ORRERY_RETURN_IF_ERROR(ParseTask(tasks[i], "tasks[" + std::to_string(i) + "]", w));
  if (w.pools.size() > 1) {
    std::map<std::string, double> speed;
    for (const Pool& p : w.pools)
      if (p.speed > 0) speed[p.gpu_type] = p.speed;
    EstimateMissingTypes(w.problem, speed);
  }
  YAML::Node events = root["events"];
  if (events) {
    if (!events.IsSequence()) return InvalidArgumentError("events: must be a list");
    for (size_t i = 0; i < events.size(); ++i) {
      ORRERY_ASSIGN_OR_RETURN(ClusterEvent e,
                              ParseEvent(events[i], "events[" + std::to_string(i) + "]", w));
      w.events.push_back(e);
    }
  }
  ORRERY_RETURN_IF_ERROR(ParseOtherJobs(root["otherJobs"], w));
  return w;
}

void EmitTask(YAML::Emitter& out, const Task& task, double true_speed) {
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << task.name << YAML::Key << "work"
      << YAML::Value << task.work;
  if (task.arrival > 0) out << YAML::Key << "arrival" << YAML::Value << task.arrival;
  if (task.weight != 1) out << YAML::Key << "weight" << YAML::Value << task.weight;
  if (true_speed != 1) out << YAML::Key << "trueSpeed" << YAML::Value << true_speed;
  if (!task.gpu_types.empty())
    out << YAML::Key << "gpuTypes" << YAML::Value << YAML::Flow << task.gpu_types;
  out << YAML::Key << "profiles" << YAML::Value << YAML::BeginSeq;
  for (const Config& c : task.configs) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "template" << YAML::Value << c.template_name
        << YAML::Key << "gpus" << YAML::Value << c.gpus << YAML::Key << "batchSize" << YAML::Value
        << c.batch_size << YAML::Key << "throughput" << YAML::Value << c.throughput << YAML::Key
        << "memoryGiB" << YAML::Value << c.memory_gib;
    if (!c.gpu_type.empty()) out << YAML::Key << "gpuType" << YAML::Value << c.gpu_type;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
}

}  // namespace

StatusOr<Workload> ParseWorkload(std::string_view yaml) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    return ParseRoot(root);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("workload: ") + e.what());
  }
}

std::string FormatWorkload(const Workload& w) {
  YAML::Emitter out;
  out.SetDoublePrecision(10);
  out << YAML::BeginMap;
  if (!w.name.empty()) out << YAML::Key << "name" << YAML::Value << w.name;
  if (w.problem.objective == Objective::kWeightedCompletion)
    out << YAML::Key << "objective" << YAML::Value << "weightedCompletion";
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  if (w.pools.empty()) {
    out << YAML::Key << "nodes" << YAML::Value << w.problem.nodes.size() << YAML::Key
        << "gpusPerNode" << YAML::Value << w.gpus_per_node << YAML::Key << "gpuMemoryGiB"
        << YAML::Value << w.gpu_memory_gib;
  } else {
    out << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
    for (const Pool& p : w.pools) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "gpuType" << YAML::Value << p.gpu_type
          << YAML::Key << "nodes" << YAML::Value << p.nodes << YAML::Key << "gpusPerNode"
          << YAML::Value << p.gpus_per_node << YAML::Key << "gpuMemoryGiB" << YAML::Value
          << p.gpu_memory_gib;
      if (p.speed > 0) out << YAML::Key << "speed" << YAML::Value << p.speed;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (w.problem.gpu_cap > 0) out << YAML::Key << "gpuQuota" << YAML::Value << w.problem.gpu_cap;
  out << YAML::EndMap;
  out << YAML::Key << "tasks" << YAML::Value << YAML::BeginSeq;
  for (size_t t = 0; t < w.problem.tasks.size(); ++t) {
    EmitTask(out, w.problem.tasks[t], t < w.true_speed.size() ? w.true_speed[t] : 1.0);
  }
  out << YAML::EndSeq;
  if (!w.events.empty()) {
    out << YAML::Key << "events" << YAML::Value << YAML::BeginSeq;
    for (const ClusterEvent& e : w.events) {
      const char* type = e.kind == ClusterEvent::Kind::kNodeLost     ? "nodeLost"
                         : e.kind == ClusterEvent::Kind::kNodeJoined ? "nodeJoined"
                         : e.kind == ClusterEvent::Kind::kPoolLost   ? "poolLost"
                                                                     : "quota";
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value << type << YAML::Key
          << "time" << YAML::Value << e.time;
      if (e.kind == ClusterEvent::Kind::kNodeLost)
        out << YAML::Key << "node" << YAML::Value << e.node;
      if (e.kind == ClusterEvent::Kind::kQuota) out << YAML::Key << "gpus" << YAML::Value << e.gpus;
      if (!e.gpu_type.empty()) out << YAML::Key << "gpuType" << YAML::Value << e.gpu_type;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!w.other_jobs.empty()) {
    out << YAML::Key << "otherJobs" << YAML::Value << YAML::BeginSeq;
    for (const OtherJob& o : w.other_jobs) {
      out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << o.name;
      if (o.arrival > 0) out << YAML::Key << "arrival" << YAML::Value << o.arrival;
      if (o.leave > o.arrival) out << YAML::Key << "leave" << YAML::Value << o.leave;
      if (o.quota > 0) out << YAML::Key << "gpuQuota" << YAML::Value << o.quota;
      out << YAML::Key << "tasks" << YAML::Value << YAML::BeginSeq;
      for (const Task& t : o.tasks) EmitTask(out, t, 1.0);
      out << YAML::EndSeq << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace orrery::planner
