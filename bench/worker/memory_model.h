// The planner's memory model against what the profiler measures: for one case
// (model, template, ranks, recomputation, batch) the planner's estimate of one
// device's peak, from the very functions the planner composes
// (engine::EstimateConfig's state bytes plus engine::ActivationBytes, as
// operator/engine/profile_configs.cc adds them), and the peak
// `orrery-worker profile` measures: peak_memory_bytes.device_allocated, the
// counting CPU allocator's (or CUDA's) peak of tensor bytes, the largest over
// ranks, each rank its own process as in a real gang.
// Shared by bench/worker/memory_model_bench.cc and
// tests/integration/memory_model_test.cc. Torch-free: the worker runs as a
// separate program.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/types.h"
#include "operator/engine/estimate.h"
#include "worker/contract/templates.h"

namespace orrery::memory_model {

struct Case {
  std::string model;  // a label: "gpt-2L-h64"
  api::TaskSpec task;
  std::string template_name;  // the planner's (and the worker's) name
  int ranks = 1;
  std::string recompute = "none";
};

inline api::TaskSpec Gpt(int layers, int hidden, int heads, int seq, int vocab, int64_t batch) {
  api::TaskSpec t;
  t.model.gpt = api::GptModel{layers, hidden, heads, seq, vocab};
  t.training.batch_size = batch;
  return t;
}

inline api::TaskSpec Mlp(int layers, int hidden, int inputs, int outputs, int64_t batch) {
  api::TaskSpec t;
  t.model.mlp = api::MlpModel{layers, hidden, inputs, outputs};
  t.training.batch_size = batch;
  return t;
}

// The planner's bytes for one device of `kind` (cpu | cuda); nullopt where it
// offers no configuration.
inline std::optional<double> EstimateBytes(const Case& c, const std::string& kind = "cpu") {
  auto config =
      engine::EstimateConfig(c.task, c.template_name, c.ranks, engine::DefaultDevice(kind));
  if (!config) return std::nullopt;
  double bytes = config->memory_gib * (1024.0 * 1024.0 * 1024.0);
  if (auto a = engine::ActivationBytes(c.task, c.template_name, c.ranks, c.task.training.batch_size,
                                       c.recompute))
    bytes += *a;
  return bytes;
}

// The worker's flags for the case's model, batch and knobs (AdamW: the
// optimizer the estimate's 16 bytes per parameter assume), on `device` (cpu or
// cuda: every rank on the first GPU, over gloo).
inline std::string WorkerFlags(const Case& c, const std::string& device = "cpu") {
  std::string f = " --optimizer=adamw --threads=1 --profile-warmup=1 --profile-steps=2";
  f += " --device=" + device;
  f += " --batch=" + std::to_string(c.task.training.batch_size);
  // What the launchers run for the plan's template on this many ranks.
  f += " --template=" + contract::WorkerTemplate(c.template_name, c.ranks) +
       " --recompute=" + c.recompute;
  if (c.task.model.gpt) {
    const api::GptModel& g = *c.task.model.gpt;
    f += " --model=gpt --layers=" + std::to_string(g.layers) +
         " --hidden=" + std::to_string(g.hidden) + " --heads=" + std::to_string(g.heads) +
         " --seq=" + std::to_string(g.seq_len) + " --vocab=" + std::to_string(g.vocab);
  } else if (c.task.model.mlp) {
    const api::MlpModel& m = *c.task.model.mlp;
    f += " --model=mlp --mlp-layers=" + std::to_string(m.layers) +
         " --mlp-hidden=" + std::to_string(m.hidden) + " --mlp-input=" + std::to_string(m.inputs) +
         " --classes=" + std::to_string(m.outputs);
  }
  return f;
}

// Runs the case's ranks as processes of `worker` (rendezvous over a file store
// in `scratch`) and returns the profile's device_allocated peak.
// `peaks`, when given, receives the profile's whole peak_memory_bytes (on
// CUDA also device_reserved and device_in_use).
inline StatusOr<double> MeasureBytes(const std::string& worker, const Case& c,
                                     const std::string& scratch, const std::string& device = "cpu",
                                     nlohmann::json* peaks = nullptr) {
  std::filesystem::remove_all(scratch);
  std::filesystem::create_directories(scratch);
  std::vector<FILE*> ranks;
  for (int r = 0; r < c.ranks; ++r) {
    std::string cmd = "RANK=" + std::to_string(r);
    cmd += " WORLD_SIZE=" + std::to_string(c.ranks);
    cmd += " LOCAL_RANK=0";
    cmd += " ORRERY_STORE_PATH=";
    cmd += scratch;
    cmd += "/store ";
    cmd += worker;
    cmd += " profile";
    cmd += WorkerFlags(c, device);
    cmd += " 2>";
    cmd += scratch;
    cmd += "/rank" + std::to_string(r) + ".err";
    ranks.push_back(popen(cmd.c_str(), "r"));
    if (ranks.back() == nullptr) return InternalError("cannot start " + worker);
  }
  std::vector<std::string> outs(ranks.size());
  bool failed = false;
  for (size_t r = 0; r < ranks.size(); ++r) {
    char buf[4096];
    while (fgets(buf, sizeof(buf), ranks[r]) != nullptr) outs[r] += buf;
    failed |= pclose(ranks[r]) != 0;
  }
  if (failed) {
    // The first rank's last line of stderr says why.
    std::ifstream err(scratch + "/rank0.err");
    std::string line, last_line;
    while (std::getline(err, line))
      if (!line.empty()) last_line = line;
    return InternalError("orrery-worker profile" + WorkerFlags(c, device) +
                         " failed: " + last_line.substr(0, 300));
  }
  std::string last = outs[0];
  last = last.substr(last.rfind('{', last.find("\"event\"")));
  nlohmann::json doc = nlohmann::json::parse(last, nullptr, false);
  if (doc.is_discarded() || !doc.contains("peak_memory_bytes") ||
      !doc["peak_memory_bytes"].contains("device_allocated"))
    return InternalError("no device_allocated in the profile: " + outs[0].substr(0, 300));
  if (peaks != nullptr) *peaks = doc["peak_memory_bytes"];
  return doc["peak_memory_bytes"]["device_allocated"].get<double>();
}

}  // namespace orrery::memory_model
