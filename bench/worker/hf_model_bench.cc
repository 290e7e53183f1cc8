// Real architectures at full size (issue 19): samples/s of a GPT-2-small-shaped
// model and a small Llama (grouped-query attention, SwiGLU) trained by the
// `orrery-worker` binary against the same architecture in transformers trained
// by PyTorch's eager Python loop, in the same run: single process and data
// parallel over 2 ranks on gloo (Orrery's ddp template, torch's
// DistributedDataParallel), AdamW, random tokens, one intra-op thread per rank,
// the same global batch. Orrery's figure is its median step time after warm-up
// (from the worker's progress lines), the baseline's likewise
// (bench/worker/hf_baseline.py, run with scripts/reference-venv's interpreter).
// Prints a table, the ratios (goal >= 1.0) and one JSON line.
//
//   hf_model_bench [--smoke] [--steps N] [--warmup N] [--python PATH] [--worker PATH]
//                  [--device cpu|cuda] [--precision fp32|bf16] [--seq N] [--batch N]
//                  [--ranks 1,2] [--baseline PATH/hf_baseline.py]
//   --smoke: tiny shapes, 2 steps (checks the bench runs; figures meaningless)
//   --device cuda: both sides on the GPU (the worker built with the GPU path, the
//     baseline's torch with CUDA); one rank by default (NCCL refuses two ranks on
//     one GPU), sequences of 1024 and a batch of 8 unless --seq/--batch say else.
//   --precision bf16: bfloat16 autocast on both sides, float32 master weights.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct Shape {
  std::string name, family;
  int layers, hidden, heads, kv_heads, intermediate, vocab, seq, batch;
};

struct Options {
  bool smoke = false;
  int steps = 3;
  int warmup = 1;
  std::string python, worker, baseline;
  std::string device = "cpu", precision = "fp32";
  int seq = 0, batch = 0;  // 0: the shape's own
  std::vector<int> ranks;
};

std::string Capture(const std::string& cmd, int* rc) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return "";
  }
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  *rc = pclose(p);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Orrery: `world` orrery-worker processes meeting over a file store; rank 0's
// progress lines give each step's time (the step ends on every rank together).
double RunOrrery(const Options& o, const Shape& s, int world, std::string* error) {
  const fs::path dir = fs::temp_directory_path() / ("orrery-hfbench-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ostringstream flags;
  flags << " train --model gpt --family " << s.family << " --layers " << s.layers << " --hidden "
        << s.hidden << " --heads " << s.heads << " --vocab " << s.vocab << " --seq " << s.seq
        << " --batch " << s.batch << " --steps " << (o.warmup + o.steps)
        << " --report-every 1 --optimizer adamw --lr 1e-4 --threads 1 --data synthetic"
        << " --template " << (world == 1 ? "single" : "ddp") << " --device " << o.device
        << " --precision " << o.precision;
  if (s.family == "llama") {
    flags << " --kv-heads " << s.kv_heads << " --intermediate " << s.intermediate;
  }
  std::string cmd;
  for (int r = world - 1; r >= 0; --r) {
    std::string env = "RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
                      " ORRERY_STORE_PATH=" + (dir / "store").string() + " OPENBLAS_NUM_THREADS=1";
    std::string one = env + " " + o.worker + flags.str();
    if (r > 0) {
      cmd +=
          one + " >/dev/null 2>" + (dir / ("rank" + std::to_string(r) + ".err")).string() + " & ";
    } else {
      cmd += one + " 2>" + (dir / "rank0.err").string() + "; wait";
    }
  }
  int rc = 0;
  std::string out = Capture(cmd, &rc);
  std::vector<double> times;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("event", "") != "progress") continue;
    if (j.value("step", 0) > o.warmup) times.push_back(j.value("step_time_s", 0.0));
  }
  if (rc != 0 || times.empty()) {
    std::ifstream err(dir / "rank0.err");
    std::string tail, l;
    while (std::getline(err, l)) tail = l;  // the last line: the worker's error
    *error = "orrery-worker failed (exit " + std::to_string(rc) + "): " + tail;
    fs::remove_all(dir);
    return 0.0;
  }
  fs::remove_all(dir);
  return static_cast<double>(s.batch) / Median(times);
}

double RunPyTorch(const Options& o, const Shape& s, int world, std::string* error) {
  std::ostringstream cmd;
  cmd << "OPENBLAS_NUM_THREADS=1 " << o.python << " " << o.baseline << " --family " << s.family
      << " --layers " << s.layers << " --hidden " << s.hidden << " --heads " << s.heads
      << " --kv-heads " << s.kv_heads << " --intermediate " << s.intermediate << " --vocab "
      << s.vocab << " --seq " << s.seq << " --batch " << s.batch << " --world " << world
      << " --threads 1 --steps " << o.steps << " --warmup " << o.warmup << " --device " << o.device
      << " --precision " << o.precision;  // its errors (and warnings) go to this bench's stderr
  int rc = 0;
  std::string out = Capture(cmd.str(), &rc);
  Json j = Json::parse(out.empty() ? "x" : out.substr(out.rfind('{')), nullptr, false);
  if (rc != 0 || j.is_discarded()) {
    *error = "the PyTorch baseline failed (exit " + std::to_string(rc) + ")";
    return 0.0;
  }
  return j.value("samples_per_s", 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--smoke") {
      o.smoke = true;
    } else if (a == "--steps") {
      o.steps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--python") {
      o.python = next();
    } else if (a == "--worker") {
      o.worker = next();
    } else if (a == "--baseline") {
      o.baseline = next();
    } else if (a == "--device" || a == "--precision") {
      (a == "--device" ? o.device : o.precision) = next();
    } else if (a == "--seq" || a == "--batch") {
      (a == "--seq" ? o.seq : o.batch) = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--ranks") {
      std::istringstream list(next());
      std::string one;
      while (std::getline(list, one, ',')) o.ranks.push_back(std::max(1, std::atoi(one.c_str())));
    } else {
      std::cerr << "usage: hf_model_bench [--smoke] [--steps N] [--warmup N] [--python PATH] "
                   "[--worker PATH] [--baseline hf_baseline.py] [--device cpu|cuda] [--precision "
                   "fp32|bf16] [--seq N] "
                   "[--batch N] [--ranks 1,2]\n";
      return 2;
    }
  }
  if ((o.device != "cpu" && o.device != "cuda") ||
      (o.precision != "fp32" && o.precision != "bf16")) {
    std::cerr << "hf_model_bench: --device must be cpu or cuda and --precision fp32 or bf16\n";
    return 2;
  }
  const bool gpu = o.device == "cuda";
  if (o.ranks.empty()) o.ranks = gpu ? std::vector<int>{1} : std::vector<int>{1, 2};
  if (gpu && o.seq == 0) o.seq = 1024;
  if (gpu && o.batch == 0) o.batch = 8;
  if (o.python.empty()) {
    const char* home = std::getenv("HOME");
    o.python = std::string(home != nullptr ? home : "") + "/.cache/orrery/bench-venv/bin/python";
  }
  if (o.worker.empty()) o.worker = std::string(ORRERY_BINARY_DIR) + "/bin/orrery-worker";
  if (o.baseline.empty())
    o.baseline = std::string(ORRERY_SOURCE_DIR) + "/bench/worker/hf_baseline.py";
  std::vector<Shape> shapes = {
      // GPT-2 small (Radford et al. 2019: 12 layers, 768 wide, 12 heads, 50257 tokens).
      {"gpt2-small", "gpt2", 12, 768, 12, 12, 3072, 50257, 64, 4},
      // A small Llama: grouped-query attention (4 key/value heads for 16), SwiGLU.
      {"llama-small", "llama", 8, 1024, 16, 4, 2816, 32000, 64, 4},
  };
  if (o.smoke) {
    shapes = {{"gpt2-tiny", "gpt2", 2, 64, 4, 4, 256, 256, 16, 4},
              {"llama-tiny", "llama", 2, 64, 4, 2, 160, 256, 16, 4}};
    o.steps = 2;
    o.warmup = 1;
  }
  for (Shape& s : shapes) {
    if (o.seq > 0 && !o.smoke) s.seq = o.seq;
    if (o.batch > 0 && !o.smoke) s.batch = o.batch;
  }
  // A bare name (python3) is looked up on PATH, as the shell that runs it would.
  bool have_python = fs::exists(o.python);
  if (!have_python && o.python.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    std::istringstream dirs(path != nullptr ? path : "");
    for (std::string d; !have_python && std::getline(dirs, d, ':');)
      have_python = !d.empty() && fs::exists(fs::path(d) / o.python);
  }
  Json report = Json::array();
  std::printf("device %s, precision %s\n", o.device.c_str(), o.precision.c_str());
  std::printf("%-12s %5s %14s %14s %7s\n", "model", "ranks", "orrery s/s", "pytorch s/s", "ratio");
  for (const Shape& s : shapes) {
    for (int world : o.ranks) {
      std::string err_o, err_p;
      double ours = RunOrrery(o, s, world, &err_o);
      double theirs = have_python ? RunPyTorch(o, s, world, &err_p) : 0.0;
      if (!have_python) err_p = "no Python at " + o.python + " (run scripts/reference-venv)";
      double ratio = theirs > 0 ? ours / theirs : 0.0;
      std::printf("%-12s %5d %14.3f %14.3f %7.2f %s %s\n", s.name.c_str(), world, ours, theirs,
                  ratio, err_o.c_str(), err_p.c_str());
      report.push_back({{"model", s.name},
                        {"ranks", world},
                        {"orrery_samples_per_s", ours},
                        {"pytorch_samples_per_s", theirs},
                        {"ratio", ratio},
                        {"device", o.device},
                        {"precision", o.precision},
                        {"seq", s.seq},
                        {"batch", s.batch},
                        {"errors", err_o + err_p}});
      if (!err_o.empty()) {
        std::cout << Json{{"hf_model_bench", report}}.dump() << "\n";
        return 1;
      }
    }
  }
  std::cout << Json{{"hf_model_bench", report}}.dump() << "\n";
  return 0;
}
