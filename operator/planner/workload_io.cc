// yaml-cpp adapter for workload files: every yaml-cpp exception is caught here
// and turned into a Status with the field path being read.
#include "operator/planner/workload_io.h"

#include <cmath>
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

StatusOr<Workload> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) return InvalidArgumentError("workload: must be a mapping");
  Workload w;
  ORRERY_RETURN_IF_ERROR(Read(root, "name", "", false, &w.name));
  YAML::Node cluster = root["cluster"];
  if (!cluster || !cluster.IsMap()) return InvalidArgumentError("cluster: required mapping");
  int nodes = 0;
  ORRERY_RETURN_IF_ERROR(Read(cluster, "nodes", "cluster", true, &nodes));
  ORRERY_RETURN_IF_ERROR(Read(cluster, "gpusPerNode", "cluster", true, &w.gpus_per_node));
  ORRERY_RETURN_IF_ERROR(Read(cluster, "gpuMemoryGiB", "cluster", true, &w.gpu_memory_gib));
  if (nodes < 1) return InvalidArgumentError("cluster.nodes: must be positive");
  if (w.gpus_per_node < 1) return InvalidArgumentError("cluster.gpusPerNode: must be positive");
  if (!(w.gpu_memory_gib > 0))
    return InvalidArgumentError("cluster.gpuMemoryGiB: must be positive");
  ORRERY_RETURN_IF_ERROR(Read(cluster, "gpuQuota", "cluster", false, &w.problem.gpu_cap));
  if (w.problem.gpu_cap < 0)
    return InvalidArgumentError("cluster.gpuQuota: must not be negative (omit it for no quota)");
  for (int n = 0; n < nodes; ++n)
    w.problem.nodes.push_back({"node-" + std::to_string(n), w.gpus_per_node, w.gpu_memory_gib});
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
  for (size_t i = 0; i < tasks.size(); ++i) {
    std::string path = "tasks[" + std::to_string(i) + "]";
    const YAML::Node& tn = tasks[i];
    if (!tn.IsMap()) return InvalidArgumentError(path + ": must be a mapping");
    Task task;
    double speed = 1;
    ORRERY_RETURN_IF_ERROR(Read(tn, "name", path, true, &task.name));
    ORRERY_RETURN_IF_ERROR(Read(tn, "work", path, true, &task.work));
    ORRERY_RETURN_IF_ERROR(Read(tn, "arrival", path, false, &task.arrival));
    ORRERY_RETURN_IF_ERROR(Read(tn, "weight", path, false, &task.weight));
    ORRERY_RETURN_IF_ERROR(Read(tn, "trueSpeed", path, false, &speed));
    if (task.name.empty()) return InvalidArgumentError(path + ".name: must not be empty");
    if (!(task.work > 0) || !std::isfinite(task.work))
      return InvalidArgumentError(path + ".work: must be positive");
    if (task.arrival < 0 || !std::isfinite(task.arrival))
      return InvalidArgumentError(path + ".arrival: must not be negative");
    if (!(task.weight > 0)) return InvalidArgumentError(path + ".weight: must be positive");
    if (!(speed > 0)) return InvalidArgumentError(path + ".trueSpeed: must be positive");
    for (size_t j = 0; j < i; ++j) {
      if (w.problem.tasks[j].name == task.name)
        return InvalidArgumentError(path + ".name: duplicate " + task.name);
    }
    YAML::Node profiles = tn["profiles"];
    if (!profiles || !profiles.IsSequence() || profiles.size() == 0)
      return InvalidArgumentError(path + ".profiles: required non-empty list");
    for (size_t k = 0; k < profiles.size(); ++k) {
      std::string pp = path + ".profiles[" + std::to_string(k) + "]";
      const YAML::Node& pn = profiles[k];
      if (!pn.IsMap()) return InvalidArgumentError(pp + ": must be a mapping");
      Config c;
      ORRERY_RETURN_IF_ERROR(Read(pn, "template", pp, true, &c.template_name));
      ORRERY_RETURN_IF_ERROR(Read(pn, "gpus", pp, true, &c.gpus));
      ORRERY_RETURN_IF_ERROR(Read(pn, "batchSize", pp, true, &c.batch_size));
      ORRERY_RETURN_IF_ERROR(Read(pn, "throughput", pp, true, &c.throughput));
      ORRERY_RETURN_IF_ERROR(Read(pn, "memoryGiB", pp, true, &c.memory_gib));
      const contract::TemplateTraits* traits = contract::FindTemplate(c.template_name);
      if (traits == nullptr || !traits->plannable)
        return InvalidArgumentError(pp + ".template: must be one of " +
                                    contract::TemplateNames(/*plannable_only=*/true));
      if (c.gpus < 1) return InvalidArgumentError(pp + ".gpus: must be positive");
      if (c.batch_size < 1) return InvalidArgumentError(pp + ".batchSize: must be positive");
      if (!(c.throughput > 0) || !std::isfinite(c.throughput))
        return InvalidArgumentError(pp + ".throughput: must be positive");
      if (c.memory_gib < 0) return InvalidArgumentError(pp + ".memoryGiB: must not be negative");
      c.nodes = (c.gpus + w.gpus_per_node - 1) / w.gpus_per_node;
      if (c.nodes > 1) {
        if (!traits->multi_node)
          return InvalidArgumentError(pp + ".gpus: template " + c.template_name +
                                      " cannot span nodes");
        if (c.gpus % c.nodes != 0)
          return InvalidArgumentError(pp + ".gpus: must split evenly over the nodes it spans");
      }
      task.configs.push_back(c);
    }
    w.problem.tasks.push_back(std::move(task));
    w.true_speed.push_back(speed);
  }

  YAML::Node events = root["events"];
  if (events) {
    if (!events.IsSequence()) return InvalidArgumentError("events: must be a list");
    for (size_t i = 0; i < events.size(); ++i) {
      std::string path = "events[" + std::to_string(i) + "]";
      ClusterEvent e;
      std::string type;
      ORRERY_RETURN_IF_ERROR(Read(events[i], "type", path, true, &type));
      ORRERY_RETURN_IF_ERROR(Read(events[i], "time", path, true, &e.time));
      if (e.time < 0) return InvalidArgumentError(path + ".time: must not be negative");
      if (type == "nodeLost") {
        e.kind = ClusterEvent::Kind::kNodeLost;
        ORRERY_RETURN_IF_ERROR(Read(events[i], "node", path, true, &e.node));
        if (e.node < 0 || e.node >= nodes)
          return InvalidArgumentError(path + ".node: no such node");
      } else if (type == "nodeJoined") {
        e.kind = ClusterEvent::Kind::kNodeJoined;
      } else if (type == "quota") {
        e.kind = ClusterEvent::Kind::kQuota;
        ORRERY_RETURN_IF_ERROR(Read(events[i], "gpus", path, true, &e.gpus));
        if (e.gpus < 0)
          return InvalidArgumentError(path + ".gpus: must not be negative (0: no cap)");
      } else {
        return InvalidArgumentError(path + ".type: must be nodeLost, nodeJoined or quota");
      }
      w.events.push_back(e);
    }
  }
  return w;
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
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap << YAML::Key << "nodes"
      << YAML::Value << w.problem.nodes.size() << YAML::Key << "gpusPerNode" << YAML::Value
      << w.gpus_per_node << YAML::Key << "gpuMemoryGiB" << YAML::Value << w.gpu_memory_gib;
  if (w.problem.gpu_cap > 0) out << YAML::Key << "gpuQuota" << YAML::Value << w.problem.gpu_cap;
  out << YAML::EndMap;
  out << YAML::Key << "tasks" << YAML::Value << YAML::BeginSeq;
  for (size_t t = 0; t < w.problem.tasks.size(); ++t) {
    const Task& task = w.problem.tasks[t];
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << task.name << YAML::Key << "work"
        << YAML::Value << task.work;
    if (task.arrival > 0) out << YAML::Key << "arrival" << YAML::Value << task.arrival;
    if (task.weight != 1) out << YAML::Key << "weight" << YAML::Value << task.weight;
    if (t < w.true_speed.size() && w.true_speed[t] != 1)
      out << YAML::Key << "trueSpeed" << YAML::Value << w.true_speed[t];
    out << YAML::Key << "profiles" << YAML::Value << YAML::BeginSeq;
    for (const Config& c : task.configs) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "template" << YAML::Value
          << c.template_name << YAML::Key << "gpus" << YAML::Value << c.gpus << YAML::Key
          << "batchSize" << YAML::Value << c.batch_size << YAML::Key << "throughput" << YAML::Value
          << c.throughput << YAML::Key << "memoryGiB" << YAML::Value << c.memory_gib
          << YAML::EndMap;
    }
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (!w.events.empty()) {
    out << YAML::Key << "events" << YAML::Value << YAML::BeginSeq;
    for (const ClusterEvent& e : w.events) {
      const char* type = e.kind == ClusterEvent::Kind::kNodeLost     ? "nodeLost"
                         : e.kind == ClusterEvent::Kind::kNodeJoined ? "nodeJoined"
                                                                     : "quota";
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value << type << YAML::Key
          << "time" << YAML::Value << e.time;
      if (e.kind == ClusterEvent::Kind::kNodeLost)
        out << YAML::Key << "node" << YAML::Value << e.node;
      if (e.kind == ClusterEvent::Kind::kQuota) out << YAML::Key << "gpus" << YAML::Value << e.gpus;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace orrery::planner
