// See memory_accountant.h.
#include "worker/parallel/memory_accountant.h"

#include <algorithm>
#include <cassert>

namespace orrery::parallel {

Status MemoryAccountant::Reserve(int64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes < 0) return InvalidArgumentError("negative reservation for " + what);
  if (resident_ + bytes > budget_) {
    return ResourceExhaustedError(what + " needs " + std::to_string(bytes) + " bytes but only " +
                                  std::to_string(budget_ - resident_) + " of the " +
                                  std::to_string(budget_) + "-byte device budget are free");
  }
  resident_ += bytes;
  peak_ = std::max(peak_, resident_);
  return OkStatus();
}

void MemoryAccountant::Release(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  assert(bytes <= resident_);
  resident_ -= bytes;
}

int64_t MemoryAccountant::resident() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resident_;
}

int64_t MemoryAccountant::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace orrery::parallel
