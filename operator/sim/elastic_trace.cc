// Elastic traces: the throughput model, seeded Poisson arrivals, and the
// yaml-cpp adapter (every yaml-cpp exception is caught here and becomes a Status
// naming the field being read).
#include "operator/sim/elastic_trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

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

// splitmix64: the same stream on every platform, unlike std:: distributions.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Unit() { return static_cast<double>(Next() >> 11) / 9007199254740992.0; }  // [0, 1)
};

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
  if (k.requested_gpus > 0 &&
      (k.requested_gpus > c.gpus() || k.base_batch % k.requested_gpus != 0 ||
       k.base_batch / k.requested_gpus > k.max_batch_per_gpu))
    return InvalidArgumentError(path +
                                ".requestedGpus: must divide baseBatch, hold it in GPU memory "
                                "and fit the cluster");
  return OkStatus();
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
  YAML::Node c = root["cluster"];
  if (!c || !c.IsMap()) return InvalidArgumentError("cluster: required mapping");
  ORRERY_RETURN_IF_ERROR(Read(c, "nodes", "cluster", true, &t.cluster.nodes));
  ORRERY_RETURN_IF_ERROR(Read(c, "gpusPerNode", "cluster", true, &t.cluster.gpus_per_node));
  ORRERY_RETURN_IF_ERROR(Read(c, "intraNodeGBps", "cluster", false, &t.cluster.intra_node_gbps));
  ORRERY_RETURN_IF_ERROR(Read(c, "interNodeGBps", "cluster", false, &t.cluster.inter_node_gbps));
  ORRERY_RETURN_IF_ERROR(
      Read(c, "allreduceLatencyS", "cluster", false, &t.cluster.allreduce_latency_s));
  ORRERY_RETURN_IF_ERROR(Read(root, "horizonS", "", false, &t.horizon_s));
  ORRERY_RETURN_IF_ERROR(Read(root, "rescaleCostS", "", false, &t.rescale_cost_s));
  ORRERY_RETURN_IF_ERROR(Read(root, "intervalS", "", false, &t.interval_s));
  if (t.cluster.nodes < 1) return InvalidArgumentError("cluster.nodes: must be positive");
  if (t.cluster.gpus_per_node < 1)
    return InvalidArgumentError("cluster.gpusPerNode: must be positive");
  ORRERY_RETURN_IF_ERROR(Positive(t.cluster.intra_node_gbps, "cluster.intraNodeGBps"));
  ORRERY_RETURN_IF_ERROR(Positive(t.cluster.inter_node_gbps, "cluster.interNodeGBps"));
  ORRERY_RETURN_IF_ERROR(NonNegative(t.cluster.allreduce_latency_s, "cluster.allreduceLatencyS"));
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
      ORRERY_RETURN_IF_ERROR(NonNegative(e.time, path + ".time"));
      if (e.gpus < 0) return InvalidArgumentError(path + ".gpus: must be at least 0");
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

double Throughput(const JobKind& kind, const ElasticCluster& cluster, int gpus, int batch) {
  if (gpus <= 0 || batch <= 0) return 0;
  const double g = gpus;
  const double per_gpu = static_cast<double>(batch) / g;
  double comm = 0;
  if (gpus > 1) {
    const double bw =
        gpus <= cluster.gpus_per_node ? cluster.intra_node_gbps : cluster.inter_node_gbps;
    comm = 2 * (g - 1) / g * kind.gradient_mb / 1000.0 / bw +
           2 * (g - 1) * cluster.allreduce_latency_s;
  }
  const double t = kind.overhead_s + kind.compute_s_per_sample * per_gpu + comm;
  return static_cast<double>(batch) / t;
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
    t += -std::log(1 - rng.Unit()) / rate_per_s;
    if (t >= horizon_s) break;
    double pick = rng.Unit() * total;
    size_t k = mix.back().first;
    for (const auto& [index, w] : mix) {
      if (pick < w) {
        k = index;
        break;
      }
      pick -= w;
    }
    const double factor = std::exp((2 * rng.Unit() - 1) * std::log(a.size_spread));
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
    if (FewestGpus(k, j.base_batch, t->cluster.gpus()) == 0)
      return InvalidArgumentError(path + ".baseBatch: no GPU count up to " +
                                  std::to_string(t->cluster.gpus()) + " holds it");
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
