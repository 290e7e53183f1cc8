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
