// Moves spill's shards (flat host tensors) to the device, now or in the
// background, so that with double buffering the copy of the next shard overlaps
// the current shard's compute (Hydra's prefetch). Two implementations:
//   CPU   the "device" is a pool of host tensors the MemoryAccountant charges;
//         a background copy is a clone on another thread.
//   CUDA  (the GPU path only) a background copy is a non-blocking host-to-device
//         copy from pinned memory on a side CUDA stream, ordered by events: the
//         side stream first waits for the work the compute stream has queued
//         (the buffer may reuse memory a queued kernel still reads), and the
//         compute stream waits for the copy before it uses the buffer.
// Private to worker/parallel. One thread (the compute thread) calls it.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "common/status.h"

namespace orrery::parallel::internal {

class ShardCopier {
 public:
  virtual ~ShardCopier() = default;
  // The device copy of `host`, usable at once on the compute stream.
  virtual at::Tensor CopyNow(const at::Tensor& host) = 0;
  // Starts copying `host` to a new device buffer; at most one copy is in flight.
  // `host` must not change until Finish() (CUDA: pinned memory, read by DMA).
  virtual void Start(const at::Tensor& host) = 0;
  virtual bool pending() const = 0;
  // The buffer Start() filled, ordered before whatever the compute stream runs
  // next. INTERNAL if the copy failed.
  virtual StatusOr<at::Tensor> Finish() = 0;
  // Waits, on the host, for everything queued on the compute stream (and so
  // for any copy it was told to wait for). CUDA kernels and copies run
  // asynchronously, so host clocks read around them time only their queueing;
  // a caller that times a turn (an interleaved group's measuring round) calls
  // this before reading the clock. The CPU's work is done when it returns.
  virtual void Synchronize() {}
};

// CUDA devices need the GPU path (FAILED_PRECONDITION otherwise).
// `link_bytes_per_s` > 0 (CPU only): StrategyConfig::spill_link_bytes_per_s.
StatusOr<std::unique_ptr<ShardCopier>> MakeShardCopier(c10::Device device,
                                                       int64_t link_bytes_per_s = 0);

// Host memory for spill's master copies: pinned (page-locked, so host-to-device
// copies run asynchronously by DMA) when the device is CUDA, ordinary otherwise.
at::Tensor HostBuffer(int64_t numel, c10::Device device);

}  // namespace orrery::parallel::internal
