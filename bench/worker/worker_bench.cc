// The worker benchmark, in one run:
//  1. samples/s of every template at 1 and 2 ranks on the same GPT (ranks are
//     threads of this process meeting over a file store, one intra-op thread
//     each: on a 2-core machine, 2 ranks can at best double the throughput),
//     the pipeline under both schedules (GPipe and 1F1B), then both again at 2
//     ranks with 8 micro-batches, with the most micro-batches' activations
//     each stage held;
//  2. spill's overhead against the unspilled loop, with and without double
//     buffering, at a device budget of three times the largest layer;
//  3. single-process throughput against PyTorch's eager Python loop on the same
//     model, optimizer and thread count (bench/worker/pytorch_baseline.py in the
//     venv bench/worker/setup_venv.sh makes; skipped with a note if absent).
// Prints a table and one JSON line with every figure.
//
//   worker_bench [--smoke] [--steps N] [--warmup N] [--python PATH]
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "worker/dist/communicator.h"
#include "worker/parallel/strategy.h"

namespace {

using orrery::Status;
using orrery::StatusOr;
using Json = nlohmann::json;
namespace model = orrery::model;
namespace parallel = orrery::parallel;
namespace dist = orrery::dist;

struct Options {
  bool smoke = false;
  int steps = 10;
  int warmup = 3;
  std::string python;
  model::ModelConfig model;
  int64_t batch = 16;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Median step time of `config` on `world` ranks (the slowest rank's, per step).
// `infos`, if given, receives every rank's StrategyInfo after the run.
StatusOr<double> Measure(const Options& o, const parallel::StrategyConfig& config, int world,
                         std::vector<parallel::StrategyInfo>* infos = nullptr) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("orrery-bench-" + std::to_string(::getpid()) +
                                                 "-" + config.name + "-" + std::to_string(world)))
          .string();
  std::filesystem::create_directories(dir);
  std::vector<std::vector<double>> times(static_cast<size_t>(world));
  std::vector<Status> statuses(static_cast<size_t>(world));
  std::vector<parallel::StrategyInfo> rank_infos(static_cast<size_t>(world));
  parallel::OptimizerConfig opt;
  auto body = [&](int rank) -> Status {
    std::unique_ptr<dist::Rendezvous> rdv;
    std::unique_ptr<dist::Communicator> all;
    if (world > 1) {
      dist::RendezvousConfig c;
      c.rank = rank;
      c.world_size = world;
      c.store_path = dir + "/store";
      ORRERY_ASSIGN_OR_RETURN(rdv, dist::Connect(c));
    }
    ORRERY_ASSIGN_OR_RETURN(auto strategy, parallel::MakeStrategy(o.model, config, opt, rdv.get()));
    if (rdv) {
      std::vector<int> ranks;
      for (int r = 0; r < world; ++r) ranks.push_back(r);
      ORRERY_ASSIGN_OR_RETURN(all, rdv->NewGroup("bench", ranks));
    }
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      model::Batch batch = model::SyntheticBatch(o.model, o.batch, i);
      if (all) ORRERY_RETURN_IF_ERROR(all->Barrier());
      auto t0 = std::chrono::steady_clock::now();
      ORRERY_ASSIGN_OR_RETURN(double loss, strategy->Step(batch));
      (void)loss;
      at::Tensor t = at::full(
          {1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          at::kDouble);
      if (all) ORRERY_RETURN_IF_ERROR(all->AllReduce(t, dist::ReduceOp::kMax));
      if (i >= o.warmup) times[static_cast<size_t>(rank)].push_back(t.item<double>());
    }
    rank_infos[static_cast<size_t>(rank)] = strategy->Info();
    return orrery::OkStatus();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r]() { statuses[static_cast<size_t>(r)] = body(r); });
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  for (const auto& s : statuses) {
    if (!s.ok()) return s;
  }
  if (infos != nullptr) *infos = rank_infos;
  return Median(times[0]);
}

int64_t LargestLayerBytes(const model::ModelConfig& mc) {
  auto m = model::BuildModel(mc);
  int64_t largest = 0;
  for (const auto& l : m->layers) {
    int64_t b = 0;
    for (const auto& [n, t] : l->NamedParameters()) b += t.numel() * 4;
    largest = std::max(largest, b);
  }
  return largest;
}

StatusOr<Json> PythonBaseline(const Options& o) {
  std::string python = o.python;
  if (python.empty()) {
    const char* home = std::getenv("HOME");
    python = std::string(home != nullptr ? home : "") + "/.cache/orrery/bench-venv/bin/python";
  }
  if (!std::filesystem::exists(python)) {
    return orrery::NotFoundError("no Python at " + python + "; run bench/worker/setup_venv.sh");
  }
  const model::GptConfig& g = o.model.gpt;
  std::string cmd =
      python + " " + ORRERY_SOURCE_DIR + "/bench/worker/pytorch_baseline.py --layers " +
      std::to_string(g.layers) + " --hidden " + std::to_string(g.hidden) + " --heads " +
      std::to_string(g.heads) + " --seq " + std::to_string(g.seq) + " --vocab " +
      std::to_string(g.vocab) + " --batch " + std::to_string(o.batch) + " --threads 1 --warmup " +
      std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return orrery::InternalError("cannot run " + python);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  int rc = pclose(p);
  if (rc != 0 || out.empty())
    return orrery::InternalError("the Python baseline failed (exit " + std::to_string(rc) + ")");
  try {
    return Json::parse(out.substr(out.rfind('{')));
  } catch (const std::exception& e) {
    return orrery::InternalError(std::string("bad baseline output: ") + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.model.kind = "gpt";
  o.model.gpt = {4, 128, 4, 64, 256};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--smoke") {
      o.smoke = true;
    } else if (a == "--steps") {
      o.steps = std::atoi(next().c_str());
    } else if (a == "--warmup") {
      o.warmup = std::atoi(next().c_str());
    } else if (a == "--python") {
      o.python = next();
    } else {
      std::cerr << "usage: worker_bench [--smoke] [--steps N] [--warmup N] [--python PATH]\n";
      return 2;
    }
  }
  if (o.smoke) {
    o.model.gpt = {2, 32, 4, 16, 64};
    o.batch = 8;
    o.steps = 2;
    o.warmup = 1;
  }
  at::set_num_threads(1);
  const auto& g = o.model.gpt;
  std::printf(
      "worker benchmark: GPT layers=%d hidden=%d heads=%d seq=%d vocab=%d, global batch %lld, "
      "1 intra-op thread per rank, median of %d steps after %d warm-up\n",
      g.layers, g.hidden, g.heads, g.seq, g.vocab, static_cast<long long>(o.batch), o.steps,
      o.warmup);
  Json report = {{"model",
                  {{"layers", g.layers},
                   {"hidden", g.hidden},
                   {"heads", g.heads},
                   {"seq", g.seq},
                   {"vocab", g.vocab}}},
                 {"global_batch", o.batch}};
  int failures = 0;

  // 1. Templates at 1 and 2 ranks.
  int64_t spill_budget = 3 * LargestLayerBytes(o.model);
  std::printf("\n%-15s %12s %14s %9s\n", "template", "1 rank (s/s)", "2 ranks (s/s)", "speedup");
  Json templates = Json::object();
  // The pipeline template once under each schedule (template/schedule).
  for (const char* label :
       {"single", "ddp", "fsdp", "tensor", "pipeline/gpipe", "pipeline/1f1b", "spill"}) {
    std::string name = label;
    parallel::StrategyConfig c;
    if (auto slash = name.find('/'); slash != std::string::npos) {
      c.pipeline_schedule = name.substr(slash + 1);
      name = name.substr(0, slash);
    }
    c.name = name;
    c.spill_budget_bytes = spill_budget;
    double sps[2] = {0, 0};
    for (int world : {1, 2}) {
      if (name == "single" && world == 2) continue;
      auto t = Measure(o, c, world);
      if (!t.ok()) {
        std::printf("  %s at %d ranks failed: %s\n", label, world, t.status().ToString().c_str());
        ++failures;
        continue;
      }
      sps[world - 1] = static_cast<double>(o.batch) / *t;
    }
    templates[label] = {{"samples_per_s_1", sps[0]}, {"samples_per_s_2", sps[1]}};
    std::printf("%-15s %12.1f %14.1f %8.2fx\n", label, sps[0], sps[1],
                sps[0] > 0 && sps[1] > 0 ? sps[1] / sps[0] : 0.0);
  }
  report["templates"] = templates;

  // 1b. The two pipeline schedules at 2 ranks with more micro-batches than
  // stages, where 1F1B holds fewer activations (pp - stage instead of M).
  constexpr int kScheduleMicroBatches = 8;
  std::printf("\npipeline at 2 ranks, %d micro-batches:\n", kScheduleMicroBatches);
  Json schedules = Json::object();
  for (const char* schedule : {"gpipe", "1f1b"}) {
    parallel::StrategyConfig c;
    c.name = "pipeline";
    c.pipeline_schedule = schedule;
    c.micro_batches = kScheduleMicroBatches;
    std::vector<parallel::StrategyInfo> infos;
    auto t = Measure(o, c, 2, &infos);
    if (!t.ok()) {
      std::printf("  %s failed: %s\n", schedule, t.status().ToString().c_str());
      ++failures;
      continue;
    }
    double sps = static_cast<double>(o.batch) / *t;
    std::vector<int> peaks;
    for (const auto& info : infos) peaks.push_back(info.peak_live_micro_batches);
    schedules[schedule] = {{"samples_per_s", sps}, {"peak_live_micro_batches", peaks}};
    std::printf("  %-6s %8.1f samples/s, micro-batches held at once per stage: %d, %d\n", schedule,
                sps, peaks[0], peaks[1]);
  }
  report["pipeline_schedules"] = schedules;

  // 2. Spill overhead.
  parallel::StrategyConfig single;
  single.name = "single";
  auto base = Measure(o, single, 1);
  Json spill = {{"budget_bytes", spill_budget}};
  if (base.ok()) {
    spill["unspilled_step_s"] = *base;
    std::printf("\nspill (budget %lld bytes = 3 x largest layer) vs unspilled %.4f s/step:\n",
                static_cast<long long>(spill_budget), *base);
    for (bool db : {true, false}) {
      parallel::StrategyConfig c;
      c.name = "spill";
      c.spill_budget_bytes = spill_budget;
      c.spill_double_buffer = db;
      if (!db)
        c.spill_budget_bytes = spill_budget * 2 / 3;  // same shard size: half the budget per shard
      auto t = Measure(o, c, 1);
      if (!t.ok()) {
        ++failures;
        continue;
      }
      double overhead = (*t / *base - 1.0) * 100.0;
      spill[db ? "double_buffered" : "single_buffered"] = {{"step_s", *t},
                                                           {"overhead_percent", overhead}};
      std::printf("  %-16s %.4f s/step, overhead %+.1f%%\n",
                  db ? "double-buffered" : "single-buffered", *t, overhead);
    }
  }
  report["spill"] = spill;

  // 3. Against PyTorch's Python loop.
  auto py = PythonBaseline(o);
  if (py.ok() && base.ok()) {
    double ours = static_cast<double>(o.batch) / *base, theirs = (*py)["samples_per_s"];
    report["pytorch_python"] = {{"orrery_samples_per_s", ours},
                                {"python_samples_per_s", theirs},
                                {"ratio", ours / theirs},
                                {"torch", (*py)["torch"]}};
    std::printf(
        "\nsingle process, 1 thread: orrery %.1f samples/s, PyTorch %s Python loop %.1f samples/s "
        "(%.2fx)\n",
        ours, (*py)["torch"].get<std::string>().c_str(), theirs, ours / theirs);
  } else {
    std::string why = py.ok() ? base.status().ToString() : py.status().ToString();
    report["pytorch_python"] = {{"skipped", why}};
    std::printf("\nPyTorch Python baseline skipped: %s\n", why.c_str());
  }
  std::printf("\n%s\n", report.dump().c_str());
  return failures == 0 ? 0 : 1;
}
