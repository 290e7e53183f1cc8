// What one rank did in one save or load of its live state (live_state.h):
// the figures the trainer reports per rank in its progress lines, its metrics
// and its result. Torch-free.
#pragma once

#include <cstdint>

namespace orrery::train {

struct StateIoStats {
  uint64_t bytes = 0;         // written (save) or read from files (load)
  uint64_t bytes_needed = 0;  // the rank's own share: what it must write or read
  uint64_t reads = 0;         // load: read calls issued
  double seconds = 0.0;
  // The process's peak resident memory during the operation (Linux: VmHWM after
  // resetting it through /proc/self/clear_refs; 0 where that cannot be read). In
  // tests that run ranks as threads of one process this is the process's.
  uint64_t peak_rss_bytes = 0;
  uint64_t rss_before_bytes = 0;  // resident memory when the operation began
};

}  // namespace orrery::train
