// Counts the bytes resident in a simulated (or real) device-memory pool against
// a budget, and remembers the peak. The spill template charges every shard's
// parameters and gradients here before they exist on the device, so "the peak
// never exceeded the budget" is checked by construction and asserted in tests.
// Thread-safe: the prefetch thread reserves while the compute thread releases.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "common/status.h"

namespace orrery::parallel {

class MemoryAccountant {
 public:
  explicit MemoryAccountant(int64_t budget_bytes) : budget_(budget_bytes) {}

  // RESOURCE_EXHAUSTED (and nothing charged) when it would pass the budget.
  [[nodiscard]] Status Reserve(int64_t bytes, const std::string& what);
  void Release(int64_t bytes);

  int64_t budget() const { return budget_; }
  int64_t resident() const;
  int64_t peak() const;

 private:
  const int64_t budget_;
  mutable std::mutex mu_;
  int64_t resident_ = 0;
  int64_t peak_ = 0;
};

}  // namespace orrery::parallel
