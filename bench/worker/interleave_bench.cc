// Interleaved multi-model execution (worker/parallel/interleaved.h) against
// the two ways to train the same K spilled models without it, in one run, same
// models, batches, steps and device budget:
//   interleaved     the K tasks share the device, their shards in one
//                   schedule (the order chosen from a measured first round;
//                   also each order forced);
//   one after other each task spilled alone with the whole budget, in turn;
//   side by side    each task spilled alone on its own thread with 1/K of the
//                   budget (so together they stay within it), uncoordinated.
// Every model is larger than the budget. The tasks alternate between a small
// model on a large batch (compute-heavy) and a wide one on a batch of one
// (copy-heavy), the case where a model's compute can hide another's copies.
// Copies go over an emulated link (StrategyConfig::spill_link_bytes_per_s,
// --link-mbps; 0 for plain memcpy), as a GPU's would over PCIe: the CPU
// path's memcpy is otherwise far faster against its compute than a link is
// against a GPU's. Printed: wall seconds of all
// tasks' steps, the speedup over one after other, and the device-busy
// fraction: compute seconds (turns, or steps, less the time waiting on shard
// copies) over wall seconds. The "device" is the CPU path's (a memory budget
// and a copy thread, one intra-op thread per task): side by side gets one
// core per thread on a multi-core host, where on one GPU its kernels would
// share the device; its fraction may then pass 1 (compute-seconds per wall
// second). Timings on a shared machine are noisy: compare within one run.
//
// --device cuda (the GPU path, a visible GPU): the device is cuda:0, its copies
// real host-to-device ones over the machine's link (pinned masters, a side
// stream), no emulated link, larger default models (--hidden 2048,4096
// --batches 8192,1), every row on all the host's cores (spill's optimizer
// steps on the host masters). Host clocks cannot see how busy a GPU is, so
// there the busy column is a floor over the wall time: each task's same steps
// with the whole model resident on the GPU (the `single` template, the same
// recomputation; no copies), summed.
//
//   interleave_bench [--smoke] [--device cpu|cuda] [--models K] [--steps N]
//                    [--hidden H1,H2,..] [--batches B1,B2,..] [--link-mbps N]
//                    [--repeats N] [--thread-arenas]
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#include "worker/dist/device.h"
#include "worker/parallel/interleaved.h"

namespace {

using orrery::Status;
using orrery::StatusOr;
namespace model = orrery::model;
namespace parallel = orrery::parallel;

struct Options {
  bool smoke = false;
  bool cuda = false;
  bool hidden_set = false, batches_set = false, link_set = false;
  int models = 2;
  int steps = 8;
  std::vector<int64_t> hidden = {768, 1536};
  std::vector<int64_t> batches = {128, 1};
  int64_t link_mbps = 400;  // the emulated host-to-device link, MB/s (0: memcpy)
  int repeats = 3;
  bool thread_arenas = false;
};

std::vector<int64_t> ParseList(const char* v) {
  std::vector<int64_t> out;
  std::stringstream in(v);
  for (std::string b; std::getline(in, b, ',');) out.push_back(std::atoll(b.c_str()));
  if (std::any_of(out.begin(), out.end(), [](int64_t b) { return b <= 0; })) out.clear();
  return out;
}

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--smoke") {
      o.smoke = true;
    } else if (a == "--device" && (v = next()) != nullptr) {
      if (std::string(v) != "cpu" && std::string(v) != "cuda") return false;
      o.cuda = std::string(v) == "cuda";
    } else if (a == "--thread-arenas") {
      o.thread_arenas = true;
    } else if ((a == "--models" || a == "--steps" || a == "--repeats") && (v = next()) != nullptr) {
      const int n = std::atoi(v);
      if (n <= 0) return false;
      (a == "--models" ? o.models : a == "--steps" ? o.steps : o.repeats) = n;
    } else if (a == "--link-mbps" && (v = next()) != nullptr) {
      o.link_mbps = std::atoll(v);
      o.link_set = true;
      if (o.link_mbps < 0) return false;
    } else if ((a == "--batches" || a == "--hidden") && (v = next()) != nullptr) {
      (a == "--batches" ? o.batches : o.hidden) = ParseList(v);
      (a == "--batches" ? o.batches_set : o.hidden_set) = true;
      if ((a == "--batches" ? o.batches : o.hidden).empty()) return false;
    } else {
      return false;
    }
  }
  // A real device has a real link: an emulated one would only slow it.
  return o.models >= 2 && !(o.cuda && o.link_set && o.link_mbps > 0);
}

c10::Device DeviceOf(const Options& o) {
  return o.cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
}

// Intra-op threads: one per task on the CPU path (the schedule is what is
// compared); every core on CUDA, where the host runs spill's optimizer steps.
int Threads(const Options& o) {
  return o.cuda ? std::max(1, static_cast<int>(std::thread::hardware_concurrency())) : 1;
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Figures {
  double wall_s = 0;
  double busy_s = 0;
};

template <typename T>
T Cycle(const std::vector<T>& v, int k) {
  return v[static_cast<size_t>(k) % v.size()];
}

int64_t LayerBytes(int64_t hidden) { return 4 * (hidden * hidden + hidden); }

// Side by side each task has 1/K of the budget, a third of which (spill's
// double buffering) must hold its largest layer.
int64_t Budget(const Options& o) {
  int64_t largest = 0;
  for (int k = 0; k < o.models; ++k) largest = std::max(largest, LayerBytes(Cycle(o.hidden, k)));
  return 3 * o.models * largest + 4096;
}

// Each model has enough layers to pass the budget by one.
std::vector<parallel::InterleavedTask> Tasks(const Options& o, int64_t budget) {
  std::vector<parallel::InterleavedTask> tasks;
  for (int k = 0; k < o.models; ++k) {
    parallel::InterleavedTask t;
    t.name = "model" + std::to_string(k);
    t.model.kind = "mlp";
    const int hidden = static_cast<int>(Cycle(o.hidden, k));
    const int layers = static_cast<int>(budget / LayerBytes(hidden)) + 1;
    t.model.mlp = {hidden, hidden, layers, 10};
    t.model.seed = 100 + k;
    t.strategy.name = "spill";
    t.strategy.recompute = "unit";
    t.strategy.spill_link_bytes_per_s = o.cuda ? 0 : o.link_mbps * 1000000;
    t.strategy.device = DeviceOf(o);
    const int64_t rows = Cycle(o.batches, k);
    const model::ModelConfig mc = t.model;
    t.batch = [mc, rows](int64_t step) { return model::SyntheticBatch(mc, rows, step); };
    t.steps = o.steps;
    tasks.push_back(std::move(t));
  }
  return tasks;
}

// Task `t` spilled alone under `budget`: its steps' wall and busy seconds.
StatusOr<Figures> Alone(const parallel::InterleavedTask& t, int64_t budget) {
  parallel::StrategyConfig sc = t.strategy;
  sc.spill_budget_bytes = budget;
  const auto start = std::chrono::steady_clock::now();
  ORRERY_ASSIGN_OR_RETURN(auto s, parallel::MakeStrategy(t.model, sc, t.optimizer, nullptr));
  Figures f;
  for (int64_t step = 0; step < t.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    ORRERY_ASSIGN_OR_RETURN(double loss, s->Step(t.batch(step)));
    (void)loss;
    f.busy_s += Since(step_start) * (1 - s->Info().wait_fraction);
  }
  f.wall_s = Since(start);
  return f;
}

StatusOr<Figures> OneAfterOther(const std::vector<parallel::InterleavedTask>& tasks,
                                int64_t budget) {
  Figures total;
  for (const auto& t : tasks) {
    ORRERY_ASSIGN_OR_RETURN(Figures f, Alone(t, budget));
    total.wall_s += f.wall_s;
    total.busy_s += f.busy_s;
  }
  return total;
}

StatusOr<Figures> SideBySide(const std::vector<parallel::InterleavedTask>& tasks, int64_t budget) {
  std::vector<StatusOr<Figures>> out(tasks.size(), Figures{});
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  const int64_t share = budget / static_cast<int64_t>(tasks.size());
  // OpenMP's thread count is per thread: each computes with its share.
  const int each = std::max(1, at::get_num_threads() / static_cast<int>(tasks.size()));
  for (size_t i = 0; i < tasks.size(); ++i) {
    threads.emplace_back([&, i]() {
      at::set_num_threads(each);
      out[i] = Alone(tasks[i], share);
    });
  }
  for (auto& t : threads) t.join();
  Figures total;
  total.wall_s = Since(start);
  for (auto& f : out) {
    if (!f.ok()) return f.status();
    total.busy_s += f->busy_s;
  }
  return total;
}

StatusOr<Figures> Interleaved(const std::vector<parallel::InterleavedTask>& tasks, int64_t budget,
                              parallel::InterleaveOrder order, std::string* choice) {
  ORRERY_ASSIGN_OR_RETURN(auto device, parallel::InterleavedDevice::Create(
                                           tasks.front().strategy.device, budget, order,
                                           tasks.front().strategy.spill_link_bytes_per_s));
  const auto start = std::chrono::steady_clock::now();
  auto results = parallel::TrainInterleaved(*device, tasks);
  Figures f;
  f.wall_s = Since(start);
  for (const auto& r : results)
    if (!r.status.ok()) return r.status;
  f.busy_s = device->stats().busy_s;
  if (device->choice().has_value()) *choice = device->choice()->ToJson();
  return f;
}

// The GPU's floor: each task's steps with its whole model resident (single,
// same recomputation), summed; its wall seconds are the busy seconds.
StatusOr<double> ResidentSeconds(const std::vector<parallel::InterleavedTask>& tasks) {
  double total = 0;
  for (const auto& t : tasks) {
    parallel::StrategyConfig sc = t.strategy;
    sc.name = "single";
    sc.spill_budget_bytes = 0;
    ORRERY_ASSIGN_OR_RETURN(auto s, parallel::MakeStrategy(t.model, sc, t.optimizer, nullptr));
    ORRERY_ASSIGN_OR_RETURN(double warm, s->Step(t.batch(0)));
    (void)warm;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < t.steps; ++step) {
      // The loss is read back each step: the GPU's work is done when it returns.
      ORRERY_ASSIGN_OR_RETURN(double loss, s->Step(t.batch(step)));
      (void)loss;
    }
    total += Since(start);
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, o)) {
    std::cerr << "usage: interleave_bench [--smoke] [--device cpu|cuda] [--models K>=2] "
                 "[--steps N] [--hidden H1,H2,..] [--batches B1,B2,..] [--link-mbps N (cpu "
                 "only)] [--repeats N] [--thread-arenas]\n";
    return 2;
  }
  if (o.cuda) {
    // The worker's own check: the GPU path built and a GPU visible, or why not.
    if (auto gpu = orrery::dist::RankDevice("cuda", 0, nullptr); !gpu.ok()) {
      std::cerr << "interleave_bench: " << gpu.status().ToString() << "\n";
      return 1;
    }
    if (!o.hidden_set) o.hidden = {2048, 4096};
    if (!o.batches_set) o.batches = {8192, 1};
  }
  if (o.smoke) {
    if (!o.hidden_set) o.hidden = {64, 96};
    o.steps = 3;
    o.link_mbps = 1000;
    o.repeats = 1;
  }
  at::set_num_threads(Threads(o));
  // glibc gives each thread its own malloc arena, where a block as large as a
  // shard or its activations is a fresh mmap each time (page faults and
  // zeroing), while the main thread's heap reuses its blocks: the rows that
  // compute on threads (side by side, interleaved) would pay that and one
  // after other would not (25% of the wall time here). One arena for all
  // compares the schedules; --thread-arenas keeps glibc's default.
  if (!o.thread_arenas) mallopt(M_ARENA_MAX, 1);
  const int64_t budget = Budget(o);
  const auto tasks = Tasks(o, budget);
  std::printf(
      "interleave benchmark: %d MLPs, device budget %.1f MB, %d steps each; per model "
      "(layers x hidden, MB of parameters, batch):",
      o.models, static_cast<double>(budget) / 1e6, o.steps);
  for (const auto& t : tasks) {
    std::printf(
        " %dx%d %.1f MB %lld;", t.model.mlp.layers + 1, t.model.mlp.hidden,
        static_cast<double>((t.model.mlp.layers + 1) * LayerBytes(t.model.mlp.hidden)) / 1e6,
        static_cast<long long>(t.batch(0).inputs.size(0)));
  }
  if (o.cuda) {
    std::printf(" cuda:0 (%s), its own host-to-device link, %d intra-op threads; LibTorch %s\n",
                orrery::dist::GpuPathSummary().c_str(), Threads(o), TORCH_VERSION);
  } else {
    std::printf(
        " CPU path, emulated link %lld MB/s (one per process), 1 intra-op thread per task, %s, "
        "%u hardware threads; LibTorch %s\n",
        static_cast<long long>(o.link_mbps),
        o.thread_arenas ? "a malloc arena per thread" : "one malloc arena",
        std::thread::hardware_concurrency(), TORCH_VERSION);
  }
  struct Row {
    std::string label;
    std::function<StatusOr<Figures>(std::string*)> run;
  };
  const std::vector<Row> rows = {
      {"one after other", [&](std::string*) { return OneAfterOther(tasks, budget); }},
      {"side by side", [&](std::string*) { return SideBySide(tasks, budget); }},
      {"interleaved (auto)",
       [&](std::string* c) {
         return Interleaved(tasks, budget, parallel::InterleaveOrder::kAuto, c);
       }},
      {"interleaved rr",
       [&](std::string* c) {
         return Interleaved(tasks, budget, parallel::InterleaveOrder::kRoundRobin, c);
       }},
      {"interleaved mam", [&](std::string* c) {
         return Interleaved(tasks, budget, parallel::InterleaveOrder::kModelAfterModel, c);
       }}};
  // Warm-up (allocator, LibTorch's first calls), not timed.
  if (auto warm = OneAfterOther(tasks, budget); !warm.ok()) {
    std::printf("warm-up failed: %s\n", warm.status().ToString().c_str());
    return 1;
  }
  double floor_s = 0;
  if (o.cuda) {
    StatusOr<double> f = ResidentSeconds(tasks);
    if (!f.ok()) {
      std::printf("resident floor failed: %s\n", f.status().ToString().c_str());
      return 1;
    }
    floor_s = *f;
    std::printf("resident floor (each task's steps, whole model on the GPU, no copies): %.3f s\n",
                floor_s);
  }
  std::printf("\n%-20s %10s %14s %12s   (median of %d, rows taking turns)\n", "execution", "wall s",
              "vs one-after", o.cuda ? "floor/wall" : "device busy", o.repeats);
  double baseline = 0;
  int failures = 0;
  std::string auto_choice;
  // The rows take turns, `repeats` times, so load from elsewhere on a shared
  // machine falls on all of them alike; each row's median run is printed.
  std::vector<std::vector<Figures>> runs(rows.size());
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (size_t i = 0; i < rows.size(); ++i) {
      std::string choice;
      StatusOr<Figures> f = rows[i].run(&choice);
      if (!f.ok()) {
        std::printf("%-20s failed: %s\n", rows[i].label.c_str(), f.status().ToString().c_str());
        ++failures;
        continue;
      }
      if (rows[i].label == "interleaved (auto)") auto_choice = choice;
      runs[i].push_back(*f);
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (runs[i].empty()) continue;
    std::sort(runs[i].begin(), runs[i].end(),
              [](const Figures& a, const Figures& b) { return a.wall_s < b.wall_s; });
    const Figures& f = runs[i][runs[i].size() / 2];
    if (baseline == 0) baseline = f.wall_s;
    const double busy = o.cuda ? floor_s : f.busy_s;
    std::printf("%-20s %10.3f %13.2fx %11.1f%%\n", rows[i].label.c_str(), f.wall_s,
                baseline / f.wall_s, 100 * busy / f.wall_s);
  }
  std::printf("\nauto's choice: %s\n", auto_choice.c_str());
  return failures == 0 ? 0 : 1;
}
