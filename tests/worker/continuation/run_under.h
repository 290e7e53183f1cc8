// Test helper: trains a task under a template and layout, ranks as threads of
// this process (each with its own rendezvous), and returns rank 0's result
// after checking every rank saw the same losses.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "tests/worker/dist/run_ranks.h"
#include "worker/train/trainer.h"

namespace orrery::train::testing {

// The continuation tests' model: a GPT of 2 blocks (hidden 32, 4 heads, 16
// tokens, vocabulary 64) under AdamW, whose moments and step count carry the
// trajectory across a resume; `steps` steps of 8 samples.
inline TaskConfig ContinuationGpt(int64_t steps) {
  TaskConfig t;
  t.model.kind = "gpt";
  t.model.gpt = {2, 32, 4, 16, 64};  // layers, hidden, heads, seq, vocab
  t.optimizer.kind = "adamw";
  t.optimizer.lr = 1e-2;
  t.optimizer.weight_decay = 0.01;
  t.global_batch = 8;
  t.steps = steps;
  t.report_every = 100;
  t.data.samples = 4096;
  return t;
}

struct RunLayout {
  std::string name;     // the template
  int world = 1;        // 1: no rendezvous
  dist::Layout layout;  // hybrid only
};

inline StatusOr<TrainResult> RunUnder(const TaskConfig& task, const RunLayout& layout) {
  TaskConfig t = task;
  t.strategy.name = layout.name;
  t.strategy.layout = layout.layout;
  if (layout.world == 1) {
    std::ostringstream sink;
    return Train(t, nullptr, sink, nullptr);
  }
  std::vector<TrainResult> results(static_cast<size_t>(layout.world));
  auto statuses =
      testing_worker::RunRanks(layout.world, [&](int rank, dist::Rendezvous* rdv) -> Status {
        std::ostringstream sink;
        ORRERY_ASSIGN_OR_RETURN(results[static_cast<size_t>(rank)], Train(t, rdv, sink, nullptr));
        return OkStatus();
      });
  for (const auto& s : statuses) ORRERY_RETURN_IF_ERROR(s);
  for (const auto& r : results) {
    if (r.losses != results[0].losses) return InternalError("ranks disagree on the losses");
  }
  return results[0];
}

}  // namespace orrery::train::testing
