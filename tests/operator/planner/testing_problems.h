// Small problem builders shared by the planner tests, and an exact solver by
// enumeration: every configuration choice x every task order through a
// per-GPU ready-time placement that tries every GPU subset, which is exact for
// makespan on tiny instances (any optimal schedule is a list schedule for some
// order when each task may take any free GPUs of one node).
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "operator/planner/problem.h"

namespace orrery::planner::testing {

inline Config Cfg(const char* tmpl, int gpus, double throughput, double memory = 10,
                  int nodes = 1) {
  Config c;
  c.template_name = tmpl;
  c.gpus = gpus;
  c.nodes = nodes;
  c.batch_size = 8 * gpus;
  c.throughput = throughput;
  c.memory_gib = memory;
  return c;
}

inline Task MakeTask(const std::string& name, double work, std::vector<Config> configs,
                     double arrival = 0) {
  Task t;
  t.name = name;
  t.work = work;
  t.arrival = arrival;
  t.configs = std::move(configs);
  return t;
}

inline Problem Cluster(int nodes, int gpus_per_node, double memory = 40) {
  Problem p;
  for (int n = 0; n < nodes; ++n)
    p.nodes.push_back({"n" + std::to_string(n), gpus_per_node, memory});
  return p;
}

// Exact optimal makespan by enumeration over single-node configurations, task
// orders and GPU subsets. Exact because any schedule, replayed in order of start
// times on the same GPUs with each task started as soon as its GPUs are free and
// it has arrived, ends no later.
inline double OptimalMakespan(const Problem& p) {
  size_t n = p.tasks.size();
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> choice(n, 0);
  std::function<void(size_t)> choose = [&](size_t t) {
    if (t == n) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      do {
        // DFS over GPU subsets for each task in order.
        std::vector<std::vector<double>> ready(p.nodes.size());
        for (size_t k = 0; k < p.nodes.size(); ++k)
          ready[k].assign(static_cast<size_t>(p.nodes[k].gpus), 0.0);
        std::function<void(size_t, double)> place = [&](size_t i, double span) {
          if (span >= best) return;
          if (i == n) {
            best = span;
            return;
          }
          size_t ti = static_cast<size_t>(order[i]);
          const Task& task = p.tasks[ti];
          const Config& c = task.configs[static_cast<size_t>(choice[ti])];
          double run = task.work / c.throughput;
          for (size_t node = 0; node < p.nodes.size(); ++node) {
            size_t g = ready[node].size();
            if (p.nodes[node].gpu_memory_gib < c.memory_gib || static_cast<int>(g) < c.gpus)
              continue;
            for (unsigned mask = 0; mask < (1u << g); ++mask) {
              if (__builtin_popcount(mask) != c.gpus) continue;
              double start = task.arrival;
              for (size_t k = 0; k < g; ++k)
                if (mask & (1u << k)) start = std::max(start, ready[node][k]);
              std::vector<double> saved = ready[node];
              for (size_t k = 0; k < g; ++k)
                if (mask & (1u << k)) ready[node][k] = start + run;
              place(i + 1, std::max(span, start + run));
              ready[node] = saved;
            }
          }
        };
        place(0, 0);
      } while (std::next_permutation(order.begin(), order.end()));
      return;
    }
    for (size_t c = 0; c < p.tasks[t].configs.size(); ++c) {
      const Config& cfg = p.tasks[t].configs[c];
      if (cfg.nodes != 1) continue;
      choice[t] = static_cast<int>(c);
      choose(t + 1);
    }
  };
  choose(0);
  return best;
}

}  // namespace orrery::planner::testing
