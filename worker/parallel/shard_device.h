// The device side of spill, factored out so that several spilled models can
// share one device (interleaved execution, interleaved.h): the memory budget
// (MemoryAccountant), the copier (ShardCopier) and the one prefetch it may
// have in flight, remembered with the shard it is for. A spill strategy alone
// owns one; an interleaved group shares one among its members, whose turns on
// the device (ShardGroup) make sure one thread at a time uses it.
// Private to worker/parallel.
#pragma once

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "common/status.h"
#include "worker/parallel/memory_accountant.h"
#include "worker/parallel/shard_copier.h"

namespace orrery::parallel::internal {

class ShardDevice {
 public:
  ShardDevice(int64_t budget_bytes, std::unique_ptr<ShardCopier> copier)
      : accountant_(budget_bytes), copier_(std::move(copier)) {}
  ~ShardDevice() { Drop(); }
  ShardDevice(const ShardDevice&) = delete;
  ShardDevice& operator=(const ShardDevice&) = delete;

  MemoryAccountant& accountant() { return accountant_; }

  // The device copy of shard `unit` of `owner` (whose host master is `host`):
  // the prefetched buffer when the prefetch is that shard, else (after
  // dropping any other prefetch) charged as `what` and copied now. Adds the
  // seconds spent waiting for the copy to `wait_s`. `timed`: the copy is
  // waited for on the host (ShardCopier::Synchronize), so that on CUDA the
  // seconds are the copy's, not its queueing's (an interleaved group's
  // measuring round; otherwise the compute stream waits for it on the device).
  StatusOr<at::Tensor> Take(const void* owner, size_t unit, const at::Tensor& host,
                            const std::string& what, double& wait_s, bool timed = false);
  // Charges `host`'s bytes as `what` and starts copying it in the background.
  // An earlier prefetch must have been taken or dropped.
  Status Prefetch(const void* owner, size_t unit, const at::Tensor& host, const std::string& what);
  // Waits out a prefetch nobody will use and returns its budget.
  void Drop();
  bool pending() const { return copier_->pending(); }
  // ShardCopier::Synchronize.
  void Synchronize() { copier_->Synchronize(); }

 private:
  MemoryAccountant accountant_;
  std::unique_ptr<ShardCopier> copier_;
  // The prefetch in flight: whose shard, and its host master (kept alive
  // until the copy is done, whatever becomes of its owner).
  const void* owner_ = nullptr;
  size_t unit_ = 0;
  at::Tensor host_;
};

}  // namespace orrery::parallel::internal
