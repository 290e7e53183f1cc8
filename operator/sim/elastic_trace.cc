// Elastic traces: the throughput model, seeded Poisson arrivals, and the
// yaml-cpp adapter (every yaml-cpp exception is caught here and becomes a Status
// naming the field being read).
#include "operator/sim/elastic_trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "common/random.h"

namespace orrery::sim {
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

Status Positive(double v, const std::string& path) {
  if (!(v > 0) || !std::isfinite(v)) return InvalidArgumentError(path + ": must be positive");
  return OkStatus();
}

Status NonNegative(double v, const std::string& path) {
  if (!(v >= 0) || !std::isfinite(v)) return InvalidArgumentError(path + ": must be at least 0");
  return OkStatus();
}

using Rng = SplitMix64;  // common/random.h

Status ValidateKind(const JobKind& k, const ElasticCluster& c, const std::string& path) {
  if (k.name.empty()) return InvalidArgumentError(path + ".name: must not be empty");
  ORRERY_RETURN_IF_ERROR(Positive(k.compute_s_per_sample, path + ".computeSPerSample"));
  ORRERY_RETURN_IF_ERROR(NonNegative(k.overhead_s, path + ".overheadS"));
  ORRERY_RETURN_IF_ERROR(NonNegative(k.gradient_mb, path + ".gradientMB"));
  ORRERY_RETURN_IF_ERROR(Positive(k.work, path + ".work"));
  if (k.max_batch_per_gpu < 1)
    return InvalidArgumentError(path + ".maxBatchPerGpu: must be at least 1");
  if (k.min_batch < 1) return InvalidArgumentError(path + ".minBatch: must be at least 1");
  if (k.max_batch < k.min_batch)
    return InvalidArgumentError(path + ".maxBatch: must be at least minBatch");
  if (k.base_batch < k.min_batch || k.base_batch > k.max_batch)
    return InvalidArgumentError(path + ".baseBatch: must be within [minBatch, maxBatch]");
  if (k.batch_step < 0) return InvalidArgumentError(path + ".batchStep: must be at least 0");
  if (k.requested_gpus < 0)
    return InvalidArgumentError(path + ".requestedGpus: must be at least 0");
  ORRERY_RETURN_IF_ERROR(NonNegative(k.memory_gb, path + ".memoryGiB"));
  const std::vector<GpuPool> pools = Pools(c);
  int largest = 0;  // GPUs of the largest pool the kind fits
  double memory = 0;
  for (const GpuPool& p : pools) {
    memory = std::max(memory, p.memory_gb);
    if (KindFits(k, p)) largest = std::max(largest, p.gpus());
  }
  if (largest == 0)
    return InvalidArgumentError(path + ".memoryGiB: " + std::to_string(k.memory_gb) +
                                " fits no pool (the most memory per GPU is " +
                                std::to_string(memory) + "); lower it or add a pool");
  for (const auto& entry : k.speed_by_type) {
    const std::string& type = entry.first;
    std::string at = path + ".speedByType.";
    at += type;
    if (std::none_of(pools.begin(), pools.end(), [&](const GpuPool& p) { return p.type == type; }))
      return InvalidArgumentError(at + ": no pool of this type in cluster.pools");
    ORRERY_RETURN_IF_ERROR(Positive(entry.second, at));
  }
  if (k.requested_gpus > 0 && (k.requested_gpus > largest || k.base_batch % k.requested_gpus != 0 ||
                               k.base_batch / k.requested_gpus > k.max_batch_per_gpu))
    return InvalidArgumentError(path +
                                ".requestedGpus: must divide baseBatch, hold it in GPU memory "
                                "and fit a pool the kind fits");
  return OkStatus();
}

StatusOr<GpuPool> ParsePool(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) return InvalidArgumentError(path + ": must be a mapping");
  GpuPool p;
  ORRERY_RETURN_IF_ERROR(Read(n, "gpuType", path, true, &p.type));
  ORRERY_RETURN_IF_ERROR(Read(n, "nodes", path, true, &p.nodes));
  ORRERY_RETURN_IF_ERROR(Read(n, "gpusPerNode", path, true, &p.gpus_per_node));
  ORRERY_RETURN_IF_ERROR(Read(n, "speed", path, false, &p.speed));
  ORRERY_RETURN_IF_ERROR(Read(n, "gpuMemoryGiB", path, false, &p.memory_gb));
  if (p.type.empty()) return InvalidArgumentError(path + ".gpuType: must not be empty");
  if (p.nodes < 1) return InvalidArgumentError(path + ".nodes: must be positive");
  if (p.gpus_per_node < 1) return InvalidArgumentError(path + ".gpusPerNode: must be positive");
  ORRERY_RETURN_IF_ERROR(Positive(p.speed, path + ".speed"));
  ORRERY_RETURN_IF_ERROR(NonNegative(p.memory_gb, path + ".gpuMemoryGiB"));
  return p;
}

// cluster: nodes and gpusPerNode, or pools of GPU types; the links either way.
Status ParseCluster(const YAML::Node& c, ElasticCluster* cluster) {
  if (!c || !c.IsMap()) return InvalidArgumentError("cluster: required mapping");
  if (YAML::Node pools = c["pools"]) {
    if (!pools.IsSequence() || pools.size() == 0)
      return InvalidArgumentError("cluster.pools: must be a non-empty list");
    if (c["nodes"] || c["gpusPerNode"])
      return InvalidArgumentError(
          "cluster.nodes: give nodes and gpusPerNode per pool when cluster.pools is set");
    for (size_t i = 0; i < pools.size(); ++i) {
      const std::string path = "cluster.pools[" + std::to_string(i) + "]";
      ORRERY_ASSIGN_OR_RETURN(GpuPool p, ParsePool(pools[i], path));
      for (const GpuPool& other : cluster->pools)
        if (other.type == p.type)
          return InvalidArgumentError(path + ".gpuType: duplicate " + p.type);
      cluster->pools.push_back(p);
    }
  } else {
    ORRERY_RETURN_IF_ERROR(Read(c, "nodes", "cluster", true, &cluster->nodes));
    ORRERY_RETURN_IF_ERROR(Read(c, "gpusPerNode", "cluster", true, &cluster->gpus_per_node));
    if (cluster->nodes < 1) return InvalidArgumentError("cluster.nodes: must be positive");
    if (cluster->gpus_per_node < 1)
      return InvalidArgumentError("cluster.gpusPerNode: must be positive");
  }
  ORRERY_RETURN_IF_ERROR(Read(c, "intraNodeGBps", "cluster", false, &cluster->intra_node_gbps));
  ORRERY_RETURN_IF_ERROR(Read(c, "interNodeGBps", "cluster", false, &cluster->inter_node_gbps));
  ORRERY_RETURN_IF_ERROR(
      Read(c, "allreduceLatencyS", "cluster", false, &cluster->allreduce_latency_s));
  ORRERY_RETURN_IF_ERROR(Positive(cluster->intra_node_gbps, "cluster.intraNodeGBps"));
  ORRERY_RETURN_IF_ERROR(Positive(cluster->inter_node_gbps, "cluster.interNodeGBps"));
  return NonNegative(cluster->allreduce_latency_s, "cluster.allreduceLatencyS");
}

StatusOr<JobKind> ParseKind(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) return InvalidArgumentError(path + ": must be a mapping");
  JobKind k;
  ORRERY_RETURN_IF_ERROR(Read(n, "name", path, true, &k.name));
  ORRERY_RETURN_IF_ERROR(Read(n, "computeSPerSample", path, true, &k.compute_s_per_sample));
  ORRERY_RETURN_IF_ERROR(Read(n, "overheadS", path, false, &k.overhead_s));
  ORRERY_RETURN_IF_ERROR(Read(n, "gradientMB", path, true, &k.gradient_mb));
  ORRERY_RETURN_IF_ERROR(Read(n, "maxBatchPerGpu", path, true, &k.max_batch_per_gpu));
  ORRERY_RETURN_IF_ERROR(Read(n, "minBatch", path, true, &k.min_batch));
  ORRERY_RETURN_IF_ERROR(Read(n, "maxBatch", path, true, &k.max_batch));
  ORRERY_RETURN_IF_ERROR(Read(n, "baseBatch", path, true, &k.base_batch));
  ORRERY_RETURN_IF_ERROR(Read(n, "requestedGpus", path, false, &k.requested_gpus));
  ORRERY_RETURN_IF_ERROR(Read(n, "batchStep", path, false, &k.batch_step));
  ORRERY_RETURN_IF_ERROR(Read(n, "work", path, true, &k.work));
  ORRERY_RETURN_IF_ERROR(Read(n, "memoryGiB", path, false, &k.memory_gb));
  if (YAML::Node speeds = n["speedByType"]) {
    if (!speeds.IsMap()) return InvalidArgumentError(path + ".speedByType: must be a mapping");
    for (const auto& kv : speeds) {
      std::string type;
      try {
        type = kv.first.as<std::string>();
        k.speed_by_type.emplace_back(type, kv.second.as<double>());
      } catch (const YAML::Exception&) {
        std::string at = path + ".speedByType.";
        at += type;
        return InvalidArgumentError(at + ": wrong type");
      }
    }
  }
  return k;
}

StatusOr<ElasticJob> ParseJob(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) return InvalidArgumentError(path + ": must be a mapping");
  ElasticJob j;
  ORRERY_RETURN_IF_ERROR(Read(n, "name", path, false, &j.name));
  ORRERY_RETURN_IF_ERROR(Read(n, "kind", path, true, &j.kind));
  ORRERY_RETURN_IF_ERROR(Read(n, "arrival", path, true, &j.arrival));
  ORRERY_RETURN_IF_ERROR(Read(n, "work", path, false, &j.work));
  ORRERY_RETURN_IF_ERROR(Read(n, "minBatch", path, false, &j.min_batch));
  ORRERY_RETURN_IF_ERROR(Read(n, "maxBatch", path, false, &j.max_batch));
  ORRERY_RETURN_IF_ERROR(Read(n, "baseBatch", path, false, &j.base_batch));
  return j;
}

StatusOr<ElasticTrace> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) return InvalidArgumentError("trace: must be a mapping");
  ElasticTrace t;
  ORRERY_RETURN_IF_ERROR(Read(root, "name", "", false, &t.name));
  ORRERY_RETURN_IF_ERROR(ParseCluster(root["cluster"], &t.cluster));
  ORRERY_RETURN_IF_ERROR(Read(root, "horizonS", "", false, &t.horizon_s));
  ORRERY_RETURN_IF_ERROR(Read(root, "rescaleCostS", "", false, &t.rescale_cost_s));
  ORRERY_RETURN_IF_ERROR(Read(root, "intervalS", "", false, &t.interval_s));
  ORRERY_RETURN_IF_ERROR(Positive(t.horizon_s, "horizonS"));
  ORRERY_RETURN_IF_ERROR(NonNegative(t.rescale_cost_s, "rescaleCostS"));
  ORRERY_RETURN_IF_ERROR(Positive(t.interval_s, "intervalS"));

  YAML::Node kinds = root["kinds"];
  if (!kinds || !kinds.IsSequence() || kinds.size() == 0)
    return InvalidArgumentError("kinds: required non-empty list");
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string path = "kinds[" + std::to_string(i) + "]";
    ORRERY_ASSIGN_OR_RETURN(JobKind k, ParseKind(kinds[i], path));
    ORRERY_RETURN_IF_ERROR(ValidateKind(k, t.cluster, path));
    for (const JobKind& other : t.kinds)
      if (other.name == k.name) return InvalidArgumentError(path + ".name: duplicate " + k.name);
    t.kinds.push_back(k);
  }
  if (YAML::Node jobs = root["jobs"]) {
    if (!jobs.IsSequence()) return InvalidArgumentError("jobs: must be a list");
    for (size_t i = 0; i < jobs.size(); ++i) {
      ORRERY_ASSIGN_OR_RETURN(ElasticJob j, ParseJob(jobs[i], "jobs[" + std::to_string(i) + "]"));
      t.jobs.push_back(j);
    }
  }
  if (YAML::Node a = root["arrivals"]) {
    if (!a.IsMap()) return InvalidArgumentError("arrivals: must be a mapping");
    PoissonArrivals p;
    int seed = 1;
    ORRERY_RETURN_IF_ERROR(Read(a, "ratePerHour", "arrivals", true, &p.rate_per_hour));
    ORRERY_RETURN_IF_ERROR(Read(a, "seed", "arrivals", false, &seed));
    ORRERY_RETURN_IF_ERROR(Read(a, "sizeSpread", "arrivals", false, &p.size_spread));
    p.seed = static_cast<uint64_t>(seed);
    YAML::Node mix = a["mix"];
    if (mix) {
      if (!mix.IsMap()) return InvalidArgumentError("arrivals.mix: must be a mapping");
      for (const auto& kv : mix) {
        std::string kind;
        double w = 0;
        try {
          kind = kv.first.as<std::string>();
          w = kv.second.as<double>();
        } catch (const YAML::Exception&) {
          return InvalidArgumentError("arrivals.mix: wrong type");
        }
        p.mix.emplace_back(kind, w);
      }
    }
    auto drawn = DrawPoisson(t.kinds, p, t.horizon_s);
    if (!drawn.ok()) return InvalidArgumentError("arrivals." + drawn.status().message());
    t.jobs.insert(t.jobs.end(), drawn->begin(), drawn->end());
    t.arrivals = p;
  }
  if (YAML::Node cap = root["capacity"]) {
    if (!cap.IsSequence()) return InvalidArgumentError("capacity: must be a list");
    for (size_t i = 0; i < cap.size(); ++i) {
      const std::string path = "capacity[" + std::to_string(i) + "]";
      if (!cap[i].IsMap()) return InvalidArgumentError(path + ": must be a mapping");
      CapacityEvent e;
      ORRERY_RETURN_IF_ERROR(Read(cap[i], "time", path, true, &e.time));
      ORRERY_RETURN_IF_ERROR(Read(cap[i], "gpus", path, true, &e.gpus));
      ORRERY_RETURN_IF_ERROR(Read(cap[i], "pool", path, false, &e.pool));
      ORRERY_RETURN_IF_ERROR(NonNegative(e.time, path + ".time"));
      if (e.gpus < 0) return InvalidArgumentError(path + ".gpus: must be at least 0");
      if (PoolIndex(t.cluster, e.pool) < 0)
        return InvalidArgumentError(path + ".pool: " +
                                    (e.pool.empty()
                                         ? std::string("required: the cluster has several pools")
                                         : "no pool of type " + e.pool + " in cluster.pools"));
      t.capacity.push_back(e);
    }
    std::stable_sort(
        t.capacity.begin(), t.capacity.end(),
        [](const CapacityEvent& a, const CapacityEvent& b) { return a.time < b.time; });
  }
  ORRERY_RETURN_IF_ERROR(ValidateTrace(&t));
  return t;
}

std::vector<std::string> SplitCsv(std::string_view line) {
  std::vector<std::string> out(1);
  for (char ch : line) {
    if (ch == ',') {
      out.emplace_back();
    } else if (ch != ' ' && ch != '\t' && ch != '\r') {
      out.back().push_back(ch);
    }
  }
  return out;
}

}  // namespace

int ElasticCluster::gpus() const {
  if (pools.empty()) return nodes * gpus_per_node;
  int sum = 0;
  for (const GpuPool& p : pools) sum += p.gpus();
  return sum;
}

std::vector<GpuPool> Pools(const ElasticCluster& cluster) {
  if (!cluster.pools.empty()) return cluster.pools;
  GpuPool p;
  p.type = "gpu";
  p.nodes = cluster.nodes;
  p.gpus_per_node = cluster.gpus_per_node;
  return {p};
}

int PoolIndex(const ElasticCluster& cluster, const std::string& type) {
  if (cluster.pools.empty()) return type.empty() || type == "gpu" ? 0 : -1;
  if (type.empty()) return cluster.pools.size() == 1 ? 0 : -1;
  for (size_t i = 0; i < cluster.pools.size(); ++i)
    if (cluster.pools[i].type == type) return static_cast<int>(i);
  return -1;
}

double KindSpeed(const JobKind& kind, const GpuPool& pool) {
  for (const auto& [type, speed] : kind.speed_by_type)
    if (type == pool.type) return speed;
  return pool.speed;
}

bool KindFits(const JobKind& kind, const GpuPool& pool) {
  return pool.memory_gb <= 0 || kind.memory_gb <= pool.memory_gb;
}

namespace {

double IterationRate(const JobKind& kind, const ElasticCluster& cluster, int gpus_per_node,
                     double speed, int gpus, int batch) {
  if (gpus <= 0 || batch <= 0) return 0;
  const double g = gpus;
  const double per_gpu = static_cast<double>(batch) / g;
  double comm = 0;
  if (gpus > 1) {
    const double bw = gpus <= gpus_per_node ? cluster.intra_node_gbps : cluster.inter_node_gbps;
    comm = 2 * (g - 1) / g * kind.gradient_mb / 1000.0 / bw +
           2 * (g - 1) * cluster.allreduce_latency_s;
  }
  const double t = kind.overhead_s + kind.compute_s_per_sample / speed * per_gpu + comm;
  return static_cast<double>(batch) / t;
}

}  // namespace

double Throughput(const JobKind& kind, const ElasticCluster& cluster, int gpus, int batch) {
  return IterationRate(kind, cluster, cluster.gpus_per_node, 1.0, gpus, batch);
}

double Throughput(const JobKind& kind, const ElasticCluster& cluster, const GpuPool& pool, int gpus,
                  int batch) {
  if (!KindFits(kind, pool)) return 0;
  return IterationRate(kind, cluster, pool.gpus_per_node, KindSpeed(kind, pool), gpus, batch);
}

int FewestGpus(const JobKind& kind, int batch, int max_gpus) {
  for (int g = 1; g <= max_gpus; ++g)
    if (batch % g == 0 && batch / g <= kind.max_batch_per_gpu) return g;
  return 0;
}

StatusOr<std::vector<ElasticJob>> DrawPoisson(const std::vector<JobKind>& kinds,
                                              const PoissonArrivals& a, double horizon_s) {
  ORRERY_RETURN_IF_ERROR(Positive(a.rate_per_hour, "ratePerHour"));
  if (!(a.size_spread >= 1) || !std::isfinite(a.size_spread))
    return InvalidArgumentError("sizeSpread: must be at least 1");
  // The mix: by weight over named kinds, or uniform over all kinds.
  std::vector<std::pair<size_t, double>> mix;
  double total = 0;
  for (size_t m = 0; m < a.mix.size(); ++m) {
    // Plain references, not a structured binding: clang 14 cannot capture one.
    const std::string& name = a.mix[m].first;
    const double w = a.mix[m].second;
    auto it =
        std::find_if(kinds.begin(), kinds.end(), [&](const JobKind& k) { return k.name == name; });
    if (it == kinds.end()) return InvalidArgumentError("mix." + name + ": unknown kind");
    ORRERY_RETURN_IF_ERROR(NonNegative(w, "mix." + name));
    mix.emplace_back(static_cast<size_t>(it - kinds.begin()), w);
    total += w;
  }
  if (a.mix.empty()) {
    for (size_t k = 0; k < kinds.size(); ++k) mix.emplace_back(k, 1.0);
    total = static_cast<double>(kinds.size());
  }
  if (!(total > 0)) return InvalidArgumentError("mix: weights must not all be 0");
  Rng rng{a.seed};
  std::vector<ElasticJob> jobs;
  std::map<std::string, int> counts;
  const double rate_per_s = a.rate_per_hour / 3600.0;
  double t = 0;
  for (;;) {
    t += -std::log(1 - rng.Uniform01()) / rate_per_s;
    if (t >= horizon_s) break;
    double pick = rng.Uniform01() * total;
    size_t k = mix.back().first;
    for (const auto& [index, w] : mix) {
      if (pick < w) {
        k = index;
        break;
      }
      pick -= w;
    }
    const double factor = std::exp((2 * rng.Uniform01() - 1) * std::log(a.size_spread));
    ElasticJob j;
    j.kind = kinds[k].name;
    j.name = j.kind + "-" + std::to_string(counts[j.kind]++);
    j.arrival = t;
    j.work = kinds[k].work * factor;
    jobs.push_back(j);
  }
  return jobs;
}

Status ValidateTrace(ElasticTrace* t) {
  std::map<std::string, int> counts;
  for (size_t i = 0; i < t->jobs.size(); ++i) {
    ElasticJob& j = t->jobs[i];
    const std::string path = "jobs[" + std::to_string(i) + "]";
    auto it = std::find_if(t->kinds.begin(), t->kinds.end(),
                           [&](const JobKind& k) { return k.name == j.kind; });
    if (it == t->kinds.end()) return InvalidArgumentError(path + ".kind: unknown kind " + j.kind);
    const JobKind& k = *it;
    ORRERY_RETURN_IF_ERROR(NonNegative(j.arrival, path + ".arrival"));
    if (j.work == 0) j.work = k.work;
    ORRERY_RETURN_IF_ERROR(Positive(j.work, path + ".work"));
    if (j.min_batch == 0) j.min_batch = k.min_batch;
    if (j.max_batch == 0) j.max_batch = k.max_batch;
    if (j.base_batch == 0) j.base_batch = std::clamp(k.base_batch, j.min_batch, j.max_batch);
    if (j.min_batch < 1) return InvalidArgumentError(path + ".minBatch: must be at least 1");
    if (j.max_batch < j.min_batch)
      return InvalidArgumentError(path + ".maxBatch: must be at least minBatch");
    if (j.base_batch < j.min_batch || j.base_batch > j.max_batch)
      return InvalidArgumentError(path + ".baseBatch: must be within [minBatch, maxBatch]");
    int largest = 0;  // the largest pool the kind fits: a job never spans pools
    for (const GpuPool& p : Pools(t->cluster))
      if (KindFits(k, p)) largest = std::max(largest, p.gpus());
    if (FewestGpus(k, j.base_batch, largest) == 0)
      return InvalidArgumentError(
          path + ".baseBatch: no GPU count up to " + std::to_string(largest) +
          (t->cluster.pools.size() > 1 ? " (the largest pool its kind fits) holds it"
                                       : " holds it"));
    if (j.name.empty()) j.name = j.kind + "-job-" + std::to_string(counts[j.kind]++);
  }
  std::stable_sort(t->jobs.begin(), t->jobs.end(),
                   [](const ElasticJob& a, const ElasticJob& b) { return a.arrival < b.arrival; });
  return OkStatus();
}

StatusOr<ElasticTrace> ParseElasticTrace(std::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("trace: not YAML: " + std::string(e.what()));
  }
  try {
    return ParseRoot(root);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("trace: " + std::string(e.what()));
  }
}

Status AppendJobsCsv(std::string_view csv, ElasticTrace* trace) {
  std::istringstream in{std::string(csv)};
  std::string line;
  int number = 0;
  bool header = false;
  const size_t first = trace->jobs.size();
  while (std::getline(in, line)) {
    ++number;
    const std::string at = "csv line " + std::to_string(number);
    std::vector<std::string> f = SplitCsv(line);
    if (f.size() == 1 && f[0].empty()) continue;
    if (f[0].rfind('#', 0) == 0) continue;
    if (!header) {
      if (f.size() < 5 || f[0] != "arrival" || f[1] != "kind" || f[2] != "work" ||
          f[3] != "minBatch" || f[4] != "maxBatch" || (f.size() > 5 && f[5] != "baseBatch") ||
          f.size() > 6)
        return InvalidArgumentError(at +
                                    ": header must be arrival,kind,work,minBatch,maxBatch[,"
                                    "baseBatch]");
      header = true;
      continue;
    }
    if (f.size() < 5 || f.size() > 6) return InvalidArgumentError(at + ": expected 5 or 6 fields");
    ElasticJob j;
    j.kind = f[1];
    const char* names[] = {"arrival", "work", "minBatch", "maxBatch", "baseBatch"};
    const size_t cols[] = {0, 2, 3, 4, 5};
    double values[5] = {0, 0, 0, 0, 0};
    for (size_t c = 0; c < 5; ++c) {
      if (cols[c] >= f.size()) break;
      try {
        size_t used = 0;
        values[c] = std::stod(f[cols[c]], &used);
        if (used != f[cols[c]].size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        return InvalidArgumentError(at + "." + names[c] + ": not a number");
      }
    }
    j.arrival = values[0];
    j.work = values[1];
    for (int c = 2; c < 5; ++c) {
      if (values[c] != std::floor(values[c]) || std::abs(values[c]) > 1e9)
        return InvalidArgumentError(at + "." + names[c] + ": must be an integer");
    }
    j.min_batch = static_cast<int>(values[2]);
    j.max_batch = static_cast<int>(values[3]);
    j.base_batch = static_cast<int>(values[4]);
    if (j.work <= 0) return InvalidArgumentError(at + ".work: must be positive");
    trace->jobs.push_back(j);
  }
  if (!header) return InvalidArgumentError("csv line 1: header required");
  // Field paths of the rows' checks name the CSV lines, not jobs[i].
  ElasticTrace rows;
  rows.cluster = trace->cluster;
  rows.kinds = trace->kinds;
  rows.jobs.assign(trace->jobs.begin() + static_cast<long>(first), trace->jobs.end());
  Status s = ValidateTrace(&rows);
  if (!s.ok()) {
    trace->jobs.resize(first);
    return InvalidArgumentError("csv " + s.message());
  }
  return ValidateTrace(trace);
}

}  // namespace orrery::sim
