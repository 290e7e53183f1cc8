// See shard_copier.h. The CUDA copier is compiled only with the GPU path
// (ORRERY_HAVE_CUDA); the CPU one everywhere.
#include "worker/parallel/shard_copier.h"

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>

#ifdef ORRERY_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace orrery::parallel::internal {
namespace {

Status CopyFailed(const std::exception& e) {
  std::string msg = e.what();
  return InternalError("copying a spill shard to the device: " + msg.substr(0, msg.find('\n')));
}

// A clone, over the emulated link when there is one: the process's one link
// is held for bytes / bandwidth seconds (at least the clone's own time).
at::Tensor CloneOverLink(const at::Tensor& host, int64_t link_bytes_per_s) {
  if (link_bytes_per_s <= 0) return host.clone();
  static std::mutex link;
  std::lock_guard<std::mutex> lock(link);
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = host.clone();
  const double seconds = static_cast<double>(host.numel() * host.element_size()) /
                         static_cast<double>(link_bytes_per_s);
  std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::duration<double>(seconds)));
  return out;
}

class CpuShardCopier final : public ShardCopier {
 public:
  explicit CpuShardCopier(int64_t link_bytes_per_s) : link_(link_bytes_per_s) {}
  ~CpuShardCopier() override {
    if (copy_.valid()) copy_.wait();
  }
  at::Tensor CopyNow(const at::Tensor& host) override { return CloneOverLink(host, link_); }
  void Start(const at::Tensor& host) override {
    copy_ = std::async(std::launch::async,
                       [host, link = link_]() { return CloneOverLink(host, link); });
  }
  bool pending() const override { return copy_.valid(); }
  StatusOr<at::Tensor> Finish() override {
    try {
      return copy_.get();
    } catch (const std::exception& e) {
      return CopyFailed(e);
    }
  }

 private:
  int64_t link_;
  std::future<at::Tensor> copy_;
};

#ifdef ORRERY_HAVE_CUDA
class CudaShardCopier final : public ShardCopier {
 public:
  explicit CudaShardCopier(c10::Device device)
      : device_(device), side_(c10::cuda::getStreamFromPool(false, device.index())) {}

  ~CudaShardCopier() override {
    // The copy may still be reading its pinned source.
    if (pending_) side_.synchronize();
  }

  at::Tensor CopyNow(const at::Tensor& host) override {
    c10::cuda::CUDAGuard guard(device_);
    return host.to(at::TensorOptions().device(device_), /*non_blocking=*/true);
  }

  void Start(const at::Tensor& host) override {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    // Allocated while the compute stream is current, so the caching allocator
    // frees and reuses it in compute-stream order; the compute stream waits for
    // the copy before any use, so no record_stream is needed.
    buffer_ = at::empty(host.sizes(), host.options().device(device_).pinned_memory(false));
    at::cuda::CUDAEvent queued;
    queued.record(compute);
    queued.block(side_);
    {
      c10::cuda::CUDAStreamGuard on_side(side_);
      buffer_.copy_(host, /*non_blocking=*/true);
    }
    copied_.record(side_);
    pending_ = true;
  }

  bool pending() const override { return pending_; }

  StatusOr<at::Tensor> Finish() override {
    try {
      c10::cuda::CUDAGuard guard(device_);
      copied_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
      pending_ = false;
      return std::move(buffer_);
    } catch (const std::exception& e) {
      pending_ = false;
      return CopyFailed(e);
    }
  }

  void Synchronize() override {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream side_;
  at::cuda::CUDAEvent copied_;
  at::Tensor buffer_;
  bool pending_ = false;
};
#endif

}  // namespace

StatusOr<std::unique_ptr<ShardCopier>> MakeShardCopier(c10::Device device,
                                                       int64_t link_bytes_per_s) {
  if (device.is_cpu()) {
    return std::unique_ptr<ShardCopier>(std::make_unique<CpuShardCopier>(link_bytes_per_s));
  }
#ifdef ORRERY_HAVE_CUDA
  if (device.is_cuda()) {
    try {
      return std::unique_ptr<ShardCopier>(std::make_unique<CudaShardCopier>(device));
    } catch (const std::exception& e) {
      return CopyFailed(e);
    }
  }
#endif
  return FailedPreconditionError("spill cannot stream shards to " + device.str() +
                                 " in this build (CPU, or CUDA with the GPU path)");
}

at::Tensor HostBuffer(int64_t numel, c10::Device device) {
  return at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).pinned_memory(device.is_cuda()));
}

}  // namespace orrery::parallel::internal
