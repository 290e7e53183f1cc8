// Seeded synthetic workloads with GPU types, shared by the planner benchmarks
// and the tests of planning at scale: clusters of one type (a100-80gb) or
// three (h100, a100-40gb, l4) with a mix of small models (as fast on any
// type), mid-size ones and memory-bound large ones (only 80 GiB types unless
// sharded wide); and a stream of such tasks with seeded Poisson arrivals.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "operator/planner/problem.h"
#include "operator/planner/workload_io.h"

namespace orrery::bench {

using planner::Config;
using planner::Problem;
using planner::Task;

struct GpuType {
  const char* name;
  double memory_gib;
  double speed;  // relative to a100 on compute-bound models
};

// Speeds are rough public ratios for large-model training (H100 ~2x A100,
// L4 ~0.4x A100 on dense BF16); only their spread matters here.
inline const GpuType kH100{"h100", 80, 2.0};
inline const GpuType kA100{"a100-80gb", 80, 1.0};
inline const GpuType kA100s{"a100-40gb", 40, 1.0};
inline const GpuType kL4{"l4", 24, 0.4};

struct Family {
  double model_gib;  // weights + optimizer state
  double act_gib;    // activations per GPU
  double base;       // samples/s on one a100
  double bound;      // 0: input-bound (as fast anywhere) .. 1: compute-bound
  double hours;      // run time on one a100, before scaling
};

// Throughput on `g` GPUs of `type`: ddp replicates the model, fsdp shards it.
inline std::vector<Config> Profiles(const Family& f, const std::vector<GpuType>& types,
                                    int per_node) {
  std::vector<Config> out;
  for (const GpuType& t : types) {
    double speed = std::pow(t.speed, f.bound);
    for (int g = 1; g <= 2 * per_node; g *= 2) {
      for (const char* tmpl : {"ddp", "fsdp"}) {
        bool fsdp = std::string(tmpl) == "fsdp";
        if (!fsdp && g > per_node) continue;  // only fsdp spans nodes here
        Config c;
        c.template_name = tmpl;
        c.gpus = g;
        c.nodes = (g + per_node - 1) / per_node;
        c.batch_size = 8 * g;
        c.memory_gib = (fsdp ? f.model_gib / g : f.model_gib) + f.act_gib;
        c.throughput = f.base * speed * std::pow(g, fsdp ? 0.8 : 0.9) * (c.nodes > 1 ? 0.85 : 1);
        c.gpu_type = t.name;
        if (c.memory_gib <= t.memory_gib) out.push_back(c);
      }
    }
  }
  return out;
}

inline Problem Make(int gpus, bool three_types, int tasks, unsigned seed) {
  const int per_node = 8;
  const int nodes = gpus / per_node;
  std::vector<GpuType> types =
      three_types ? std::vector<GpuType>{kH100, kA100s, kL4} : std::vector<GpuType>{kA100};
  Problem p;
  for (int n = 0; n < nodes; ++n) {
    const GpuType& t = types[static_cast<size_t>(n) * types.size() / static_cast<size_t>(nodes)];
    p.nodes.push_back({"node-" + std::to_string(n), per_node, t.memory_gib, t.name});
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const Family families[] = {
      {2, 4, 400, 0.1, 1.0},    // small: input-bound, runs as fast on l4
      {12, 8, 120, 0.7, 3.0},   // mid-size
      {90, 20, 30, 1.0, 12.0},  // large: needs fsdp over 2+ 80 GiB GPUs
  };
  for (int i = 0; i < tasks; ++i) {
    double r = u(rng);
    const Family& f = families[r < 0.5 ? 0 : (r < 0.85 ? 1 : 2)];
    Task task;
    task.name = "t" + std::to_string(i);
    task.configs = Profiles(f, types, per_node);
    task.work = f.base * f.hours * 3600 * (0.5 + u(rng));
    p.tasks.push_back(std::move(task));
  }
  return p;
}

// A stream over the three-type cluster of `gpus` GPUs: `tasks` tasks of
// Make's mix arriving as a Poisson process (exponential gaps of mean
// `mean_gap_s`, the first at time 0), each with a true speed within +-15% of
// its profile (so measured speeds drift and the engine re-plans on them).
inline planner::Workload PoissonStream(int gpus, int tasks, double mean_gap_s, unsigned seed) {
  planner::Workload w;
  w.name = "poisson-" + std::to_string(gpus) + "x" + std::to_string(tasks);
  w.problem = Make(gpus, true, tasks, seed);
  w.gpus_per_node = 8;
  w.gpu_memory_gib = w.problem.nodes.front().gpu_memory_gib;
  for (const GpuType& t : {kH100, kA100s, kL4}) {
    int nodes = 0;
    for (const planner::Node& n : w.problem.nodes) nodes += n.gpu_type == t.name ? 1 : 0;
    w.pools.push_back({t.name, nodes, 8, t.memory_gib, t.speed});
  }
  std::mt19937 rng(seed + 1000);
  std::exponential_distribution<double> gap(1.0 / mean_gap_s);
  std::uniform_real_distribution<double> noise(0.85, 1.15);
  double at = 0;
  for (Task& t : w.problem.tasks) {
    t.arrival = at;
    at += gap(rng);
    w.true_speed.push_back(noise(rng));
  }
  return w;
}

}  // namespace orrery::bench
