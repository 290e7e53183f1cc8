// Seeded generator of the planner benchmark's workloads (bench/workloads/*.yaml).
// Profile tables are derived, not measured:
//  - per-GPU throughput from FLOPs: training costs about 6 x parameters x tokens
//    per sample (Kaplan et al., "Scaling Laws for Neural Language Models",
//    2020), on an A100 at 312 TFLOP/s bf16 dense peak (NVIDIA A100 datasheet)
//    and an assumed 40% model-FLOPs utilisation;
//  - memory: 16 bytes per parameter for mixed-precision Adam state (Rajbhandari
//    et al., "ZeRO", SC 2020), divided by the GPU count for sharded templates,
//    plus activations;
//  - scaling sub-linear in GPUs with a per-template efficiency per doubling and
//    a further loss across nodes; spilling (Hydra) fits anything at a fraction
//    of the speed. Configurations that do not fit in GPU memory are left out,
//    as a profiler would record them as out-of-memory.
// Usage: gen_workloads OUT_DIR   (rewrites the generated files; deterministic)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "operator/planner/workload_io.h"

namespace {

using orrery::planner::ClusterEvent;
using orrery::planner::Config;
using orrery::planner::Node;
using orrery::planner::Task;
using orrery::planner::Workload;

struct Family {
  const char* name;
  double params_b;        // billions of parameters
  double tokens;          // tokens per sample
  double activation_gib;  // per GPU at the profiled micro-batch
};

// GPT-2/GPT-J/ViT-scale models as in Saturn's evaluation, plus neighbours.
const std::vector<Family> kFamilies = {
    {"bert-large", 0.34, 512, 4},  {"gpt2-medium", 0.35, 1024, 6}, {"gpt2-xl", 1.5, 1024, 10},
    {"vit-h", 0.63, 257, 8},       {"vit-g", 1.8, 257, 12},        {"gpt-j", 6.0, 2048, 14},
    {"llama-13b", 13.0, 2048, 18},
};

constexpr double kPeakFlops = 312e12;
constexpr double kMfu = 0.40;

double PerGpuThroughput(const Family& f) {
  return kPeakFlops * kMfu / (6.0 * f.params_b * 1e9 * f.tokens);
}

std::vector<Config> Profiles(const Family& f, int gpus_per_node, int nodes, double mem,
                             std::mt19937& rng) {
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  double state = 16.0 * f.params_b;  // GiB (1e9 params x 16 B ~ 14.9 GiB; kept round)
  double base = PerGpuThroughput(f);
  std::vector<int> counts;
  for (int g = 1; g <= gpus_per_node * nodes && g <= 64; g *= 2) counts.push_back(g);
  std::vector<Config> out;
  struct Tmpl {
    const char* name;
    double eff_per_doubling;
    bool multi_node;
  };
  const Tmpl kTemplates[] = {{"ddp", 0.96, true},
                             {"fsdp", 0.92, true},
                             {"pipeline", 0.88, true},
                             {"tensor", 0.85, false},
                             {"spill", 0.93, false}};
  for (const Tmpl& t : kTemplates) {
    for (int g : counts) {
      int span = (g + gpus_per_node - 1) / gpus_per_node;
      if (span > 1 && !t.multi_node) continue;
      std::string name = t.name;
      if ((name == "pipeline" || name == "tensor") && g == 1) continue;  // same as ddp on one GPU
      double memory = 0;
      if (name == "ddp") memory = state + f.activation_gib;
      if (name == "fsdp") memory = state / g + 0.1 * state / std::max(1, g) + f.activation_gib;
      if (name == "pipeline") memory = state / g + 1.3 * f.activation_gib;
      if (name == "tensor") memory = state / g + 2.0 * f.activation_gib / g + 1;
      if (name == "spill") memory = std::min(0.85 * mem, state + f.activation_gib);
      if (memory > mem) continue;  // out of memory: the profiler records nothing
      double eff = std::pow(t.eff_per_doubling, std::log2(g));
      if (span > 1) eff *= std::pow(0.88, std::log2(span));  // inter-node links
      double speed = base * g * eff;
      if (name == "spill") speed *= memory < state + f.activation_gib ? 0.35 : 0.9;
      Config c;
      c.template_name = name;
      c.gpus = g;
      c.nodes = span;
      c.batch_size = (name == "pipeline" ? 16 : 8) * (name == "tensor" ? 1 : g);
      c.throughput = std::round(speed * noise(rng) * 1000) / 1000;
      c.memory_gib = std::round(memory * 10) / 10;
      out.push_back(c);
    }
  }
  return out;
}

Workload Generate(const std::string& name, int tasks, int gpus, double mem, double arrival_span,
                  bool speeds, unsigned seed, std::vector<int> families) {
  std::mt19937 rng(seed);
  Workload w;
  w.name = name;
  w.gpus_per_node = 8;
  w.gpu_memory_gib = mem;
  int nodes = std::max(1, gpus / 8);
  for (int n = 0; n < nodes; ++n) w.problem.nodes.push_back({"node-" + std::to_string(n), 8, mem});
  std::uniform_int_distribution<size_t> pick(0, families.size() - 1);
  std::uniform_real_distribution<double> hours(std::log(2.0), std::log(40.0));
  std::uniform_real_distribution<double> arrive(0, arrival_span);
  std::uniform_real_distribution<double> speed(0.7, 1.3);
  for (int t = 0; t < tasks; ++t) {
    const Family& f = kFamilies[static_cast<size_t>(families[pick(rng)])];
    Task task;
    task.name = std::string(f.name) + "-" + std::to_string(t);
    // Work sized in single-GPU-equivalent hours at the profiled speed.
    task.work = std::round(PerGpuThroughput(f) * 3600 * std::exp(hours(rng)));
    task.arrival = arrival_span > 0 ? std::round(arrive(rng)) : 0;
    task.configs = Profiles(f, 8, nodes, mem, rng);
    w.problem.tasks.push_back(task);
    w.true_speed.push_back(speeds ? std::round(speed(rng) * 100) / 100 : 1.0);
  }
  return w;
}

bool Write(const std::string& dir, const Workload& w) {
  std::ofstream out(dir + "/" + w.name + ".yaml");
  out << "# Generated by bench/planner/gen_workloads (seeded); do not edit by hand.\n";
  out << orrery::planner::FormatWorkload(w);
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gen_workloads OUT_DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6};
  std::vector<Workload> ws;
  // Saturn-shaped: a dozen GPT-2 / GPT-J / ViT fine-tuning tasks on 8 and 16 GPUs.
  ws.push_back(Generate("saturn-12x8", 12, 8, 40, 0, false, 101, {2, 3, 5}));
  ws.push_back(Generate("saturn-12x16", 12, 16, 40, 0, false, 102, {2, 3, 5}));
  ws.push_back(Generate("gen-10x8", 10, 8, 80, 0, false, 201, all));
  ws.push_back(Generate("gen-25x16", 25, 16, 40, 0, false, 202, all));
  ws.push_back(Generate("gen-50x32", 50, 32, 80, 0, false, 203, all));
  ws.push_back(Generate("gen-100x64", 100, 64, 40, 0, false, 204, all));
  ws.push_back(Generate("gen-100x64-arrivals", 100, 64, 80, 36000, false, 205, all));
  ws.push_back(Generate("gen-200x128", 200, 128, 80, 0, false, 206, all));
  ws.push_back(Generate("gen-500x512", 500, 512, 80, 0, false, 207, all));
  // Introspection: true speeds off the profiles by up to +-30%, a node lost and one joining.
  Workload intro = Generate("introspect-30x32", 30, 32, 80, 0, true, 301, all);
  intro.events.push_back({ClusterEvent::Kind::kNodeLost, 20000, 3});
  intro.events.push_back({ClusterEvent::Kind::kNodeJoined, 40000, -1});
  ws.push_back(intro);
  for (const Workload& w : ws) {
    if (!Write(dir, w)) {
      std::cerr << "cannot write " << dir << "/" << w.name << ".yaml\n";
      return 1;
    }
    std::cout << "wrote " << w.name << ".yaml (" << w.problem.tasks.size() << " tasks)\n";
  }
  return 0;
}
