// The small world the engine's tests share: two nodes of 2 GPUs at time 1000,
// three tasks of 100, 200 and 300 samples that each run as ddp on 1 GPU (1
// sample/s) or 2 GPUs (1.8 samples/s).
#pragma once

#include <string>

#include "operator/engine/engine.h"

namespace orrery::engine::testing {

inline planner::Config Cfg(int gpus, double thr) {
  planner::Config c;
  c.template_name = "ddp";
  c.gpus = gpus;
  c.batch_size = 8 * gpus;
  c.throughput = thr;
  c.memory_gib = 10;
  return c;
}

inline WorldView TwoNodes() {
  WorldView w;
  w.now = 1000;
  w.nodes = {{"a", 2, 40, true}, {"b", 2, 40, true}};
  for (int i = 0; i < 3; ++i) {
    TaskView t;
    t.name = "t" + std::to_string(i);
    t.remaining_work = 100.0 * (i + 1);
    t.profile = {Cfg(1, 1), Cfg(2, 1.8)};
    w.tasks.push_back(t);
  }
  return w;
}

}  // namespace orrery::engine::testing
