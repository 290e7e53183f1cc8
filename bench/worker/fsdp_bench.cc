// fsdp at full speed, in one run, same model, global batch and threads (one
// intra-op thread per rank, 2 ranks as threads of this process over gloo):
//  1. the worker's fsdp without activation recomputation, with it, and without
//     prefetch (gathers and reduce-scatters not overlapped), each against the
//     worker's own ddp: the ratio of samples/s, and the share of each step
//     every template spent waiting on communication (StrategyInfo);
//  2. the same templates in PyTorch (bench/worker/fsdp_baseline.py in the venv
//     bench/worker/setup_venv.sh makes): DistributedDataParallel and
//     FullyShardedDataParallel with and without activation checkpointing, as
//     processes on CPU and gloo; the worker's figure over PyTorch's for each.
// The worker links Debian's LibTorch (its version is printed), the baseline
// runs the venv's torch (printed too). Timings are medians over the steps; on
// a shared machine they are noisy: compare within one run only.
//
//   fsdp_bench [--smoke] [--steps N] [--warmup N] [--layers N --hidden N --heads N
//              --seq N --vocab N --batch N] [--python PATH]
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
#include <torch/version.h>

#include "worker/dist/communicator.h"
#include "worker/parallel/strategy.h"

namespace {

using orrery::Status;
using orrery::StatusOr;
using Json = nlohmann::json;
namespace model = orrery::model;
namespace parallel = orrery::parallel;
namespace dist = orrery::dist;

constexpr int kWorld = 2;

struct Options {
  bool smoke = false;
  int steps = 10;
  int warmup = 3;
  std::string python;
  model::ModelConfig model;
  int64_t batch = 16;
};

struct Figures {
  double step_s = 0;
  double wait_fraction = 0;  // rank 0's, averaged over the timed steps
};

// Median step time of `config` on kWorld ranks (the slowest rank's, per step).
StatusOr<Figures> Measure(const Options& o, const parallel::StrategyConfig& config,
                          const std::string& label) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("orrery-fsdp-bench-" + std::to_string(::getpid()) + "-" + label))
                              .string();
  std::filesystem::create_directories(dir);
  std::vector<std::vector<double>> times(kWorld), waits(kWorld);
  std::vector<Status> statuses(kWorld);
  auto body = [&](int rank) -> Status {
    at::set_num_threads(1);
    dist::RendezvousConfig c;
    c.rank = rank;
    c.world_size = kWorld;
    c.store_path = dir + "/store";
    ORRERY_ASSIGN_OR_RETURN(auto rdv, dist::Connect(c));
    ORRERY_ASSIGN_OR_RETURN(auto strategy, parallel::MakeStrategy(o.model, config, {}, rdv.get()));
    ORRERY_ASSIGN_OR_RETURN(auto all, rdv->NewGroup("bench", {0, 1}));
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      model::Batch batch = model::SyntheticBatch(o.model, o.batch, i);
      ORRERY_RETURN_IF_ERROR(all->Barrier());
      const auto t0 = std::chrono::steady_clock::now();
      ORRERY_ASSIGN_OR_RETURN(double loss, strategy->Step(batch));
      (void)loss;
      at::Tensor t = at::full(
          {1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          at::kDouble);
      ORRERY_RETURN_IF_ERROR(all->AllReduce(t, dist::ReduceOp::kMax));
      if (i >= o.warmup) {
        times[static_cast<size_t>(rank)].push_back(t.item<double>());
        waits[static_cast<size_t>(rank)].push_back(strategy->Info().wait_fraction);
      }
    }
    return orrery::OkStatus();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r]() { statuses[static_cast<size_t>(r)] = body(r); });
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  for (const auto& s : statuses) {
    if (!s.ok()) return s;
  }
  Figures f;
  std::vector<double> v = times[0];
  std::sort(v.begin(), v.end());
  f.step_s = v.empty() ? 0.0 : v[v.size() / 2];
  for (double w : waits[0]) f.wait_fraction += w / static_cast<double>(waits[0].size());
  return f;
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
  const std::string cmd =
      "OMP_NUM_THREADS=1 " + python + " " + ORRERY_SOURCE_DIR +
      "/bench/worker/fsdp_baseline.py --layers " + std::to_string(g.layers) + " --hidden " +
      std::to_string(g.hidden) + " --heads " + std::to_string(g.heads) + " --seq " +
      std::to_string(g.seq) + " --vocab " + std::to_string(g.vocab) + " --batch " +
      std::to_string(o.batch) + " --threads 1 --world " + std::to_string(kWorld) + " --warmup " +
      std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return orrery::InternalError("cannot run " + python);
  std::string text;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p) != nullptr) text += buf;
  if (pclose(p) != 0) return orrery::InternalError("fsdp_baseline.py failed: " + text);
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    return orrery::InternalError(std::string("bad baseline output: ") + e.what());
  }
}

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--smoke") {
      o.smoke = true;
    } else if (a == "--steps") {
      o.steps = next();
    } else if (a == "--warmup") {
      o.warmup = next();
    } else if (a == "--layers") {
      o.model.gpt.layers = next();
    } else if (a == "--hidden") {
      o.model.gpt.hidden = next();
    } else if (a == "--heads") {
      o.model.gpt.heads = next();
    } else if (a == "--seq") {
      o.model.gpt.seq = next();
    } else if (a == "--vocab") {
      o.model.gpt.vocab = next();
    } else if (a == "--batch") {
      o.batch = next();
    } else if (a == "--python" && i + 1 < argc) {
      o.python = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.model.kind = "gpt";
  o.model.gpt = {4, 128, 4, 64, 256};
  if (!ParseArgs(argc, argv, o)) {
    std::cerr << "usage: fsdp_bench [--smoke] [--steps N] [--warmup N] [--layers N] [--hidden N] "
                 "[--heads N] [--seq N] [--vocab N] [--batch N] [--python PATH]\n";
    return 2;
  }
  if (o.smoke) {
    o.model.gpt = {2, 32, 4, 16, 64};
    o.batch = 8;
    o.steps = 2;
    o.warmup = 1;
  }
  const auto& g = o.model.gpt;
  std::printf(
      "fsdp benchmark: GPT layers=%d hidden=%d heads=%d seq=%d vocab=%d, global batch %lld, "
      "%d ranks x 1 intra-op thread, gloo on CPU, median of %d steps after %d warm-up; worker "
      "LibTorch %s\n",
      g.layers, g.hidden, g.heads, g.seq, g.vocab, static_cast<long long>(o.batch), kWorld, o.steps,
      o.warmup, TORCH_VERSION);
  Json report = {{"model",
                  {{"layers", g.layers},
                   {"hidden", g.hidden},
                   {"heads", g.heads},
                   {"seq", g.seq},
                   {"vocab", g.vocab}}},
                 {"global_batch", o.batch},
                 {"worker_libtorch", TORCH_VERSION}};
  struct Row {
    std::string label, template_name, recompute;
    bool prefetch = true;
  };
  const std::vector<Row> rows = {{"ddp", "ddp", "none"},
                                 {"ddp_recompute", "ddp", "unit"},
                                 {"fsdp", "fsdp", "none"},
                                 {"fsdp_recompute", "fsdp", "unit"},
                                 {"fsdp_no_prefetch", "fsdp", "none", false}};
  int failures = 0;
  Json ours = Json::object();
  std::printf("\n%-18s %12s %10s %13s\n", "worker template", "samples/s", "vs ddp", "waiting");
  double ddp_rate = 0;
  for (const Row& r : rows) {
    parallel::StrategyConfig c;
    c.name = r.template_name;
    c.recompute = r.recompute;
    c.fsdp_prefetch = r.prefetch;
    auto f = Measure(o, c, r.label);
    if (!f.ok()) {
      std::printf("%-18s failed: %s\n", r.label.c_str(), f.status().ToString().c_str());
      ++failures;
      continue;
    }
    const double rate = static_cast<double>(o.batch) / f->step_s;
    if (r.label == "ddp") ddp_rate = rate;
    std::printf("%-18s %12.1f %9.2fx %12.1f%%\n", r.label.c_str(), rate,
                ddp_rate > 0 ? rate / ddp_rate : 0.0, 100 * f->wait_fraction);
    ours[r.label] = {{"samples_per_s", rate},
                     {"vs_ddp", ddp_rate > 0 ? rate / ddp_rate : 0.0},
                     {"wait_fraction", f->wait_fraction}};
  }
  report["worker"] = ours;

  auto py = PythonBaseline(o);
  if (py.ok()) {
    std::printf("\nPyTorch %s (venv), same model/batch/threads, %d processes over gloo:\n",
                py->value("torch", std::string("?")).c_str(), kWorld);
    std::printf("%-18s %12s %16s\n", "PyTorch", "samples/s", "worker/PyTorch");
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"ddp", "ddp"}, {"fsdp", "fsdp"}, {"fsdp_recompute", "fsdp_recompute"}};
    Json cmp = Json::object();
    for (const auto& [theirs, mine] : pairs) {
      const Json& t = (*py)[theirs];
      if (!t.contains("samples_per_s") || !ours.contains(mine)) {
        std::printf("%-18s %s\n", theirs.c_str(), t.dump().c_str());
        continue;
      }
      const double their_rate = t["samples_per_s"].get<double>();
      const double ratio = ours[mine]["samples_per_s"].get<double>() / their_rate;
      std::printf("%-18s %12.1f %15.2fx\n", theirs.c_str(), their_rate, ratio);
      cmp[theirs] = {{"pytorch_samples_per_s", their_rate}, {"worker_over_pytorch", ratio}};
    }
    report["pytorch"] = {{"torch", py->value("torch", std::string("?"))}, {"figures", cmp}};
  } else {
    std::printf("\nPyTorch baseline skipped: %s\n", py.status().ToString().c_str());
    report["pytorch"] = {{"skipped", py.status().ToString()}};
  }
  std::printf("\n%s\n", report.dump().c_str());
  return failures == 0 ? 0 : 1;
}
