// See device.h. The GPU path's parts are compiled only with ORRERY_HAVE_CUDA;
// their CUDA and NCCL versions come from the headers the build found.
#include "worker/dist/device.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <torch/cuda.h>
#include <torch/version.h>

#ifdef ORRERY_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace orrery::dist {
namespace {

constexpr char kCpuFix[] = "run with --device cpu (the default; gloo between ranks)";

}  // namespace

bool BuiltWithCuda() {
#ifdef ORRERY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string GpuPathSummary() {
#ifdef ORRERY_HAVE_CUDA
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
         std::to_string(CUDART_VERSION % 1000 / 10) + ", NCCL " + std::to_string(NCCL_MAJOR) + "." +
         std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH) + ", " +
         std::to_string(torch::cuda::device_count()) + " CUDA devices visible";
#else
  return "CPU only (built without the GPU path)";
#endif
}

StatusOr<std::string> TakeDeviceFlag(std::vector<std::string>& args) {
  std::string device;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--device") {
      if (i + 1 >= args.size()) return InvalidArgumentError("--device needs a value: cpu or cuda");
      device = args[++i];
    } else if (a.rfind("--device=", 0) == 0) {
      device = a.substr(9);
      if (device.empty()) return InvalidArgumentError("--device needs a value: cpu or cuda");
    } else {
      rest.push_back(a);
    }
  }
  args = std::move(rest);
  return device;
}

Status CheckDevice(const std::string& device, const std::string& backend) {
  if (backend != "gloo" && backend != "nccl")
    return InvalidArgumentError("communicator backend '" + backend + "': expected gloo or nccl");
  if (device == "cpu") {
    if (backend == "nccl")
      return InvalidArgumentError(
          "--device cpu with ORRERY_BACKEND=nccl: NCCL moves CUDA tensors only; use "
          "ORRERY_BACKEND=gloo (the default) on CPU");
    return OkStatus();
  }
  if (device != "cuda")
    return InvalidArgumentError("--device '" + device + "': expected cpu or cuda");
  if (!BuiltWithCuda())
    return FailedPreconditionError(
        "--device cuda: this orrery-worker was built without the GPU path (CUDA + NCCL); "
        "build one with -DORRERY_WITH_CUDA=ON and the flags `scripts/cuda-toolkit "
        "--cmake-args` prints, or " +
        std::string(kCpuFix));
  int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (gpus == 0)
    return FailedPreconditionError(
        "--device cuda: this orrery-worker has the GPU path (" + GpuPathSummary() +
        ") but no CUDA device is visible on this machine (no NVIDIA GPU or driver: check "
        "nvidia-smi, and the pod's nvidia.com/gpu limit); " +
        std::string(kCpuFix));
  return OkStatus();
}

StatusOr<c10::Device> RankDevice(const std::string& device, int rank, const char* local_rank) {
  if (device == "cpu" || device.empty()) return c10::Device(c10::kCPU);
  if (device != "cuda")
    return InvalidArgumentError("--device '" + device + "': expected cpu or cuda");
  if (!BuiltWithCuda())
    return FailedPreconditionError(
        "--device cuda: this orrery-worker was built without the GPU path");
  auto visible = static_cast<int64_t>(torch::cuda::device_count());
  int64_t index = 0;
  if (local_rank != nullptr && *local_rank != '\0') {
    char* end = nullptr;
    long long v = std::strtoll(local_rank, &end, 10);
    if (*end != '\0' || v < 0)
      return InvalidArgumentError(std::string("LOCAL_RANK='") + local_rank +
                                  "' is not a non-negative integer");
    index = v;
  } else {
    if (visible == 0)
      return FailedPreconditionError("--device cuda: no CUDA device is visible; " +
                                     std::string(kCpuFix));
    index = rank % visible;
  }
  if (index >= visible)
    return FailedPreconditionError("--device cuda: this rank wants cuda:" + std::to_string(index) +
                                   " but " + std::to_string(visible) +
                                   " CUDA devices are visible (LOCAL_RANK, CUDA_VISIBLE_DEVICES)");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

Status UseDevice(c10::Device device) {
  if (!device.is_cuda()) return OkStatus();
#ifdef ORRERY_HAVE_CUDA
  try {
    c10::cuda::set_device(device.index() < 0 ? 0 : device.index());
    // One allocation initialises the CUDA context and the caching allocator now,
    // so a broken driver is this clear error, not a throw mid-step, and the
    // allocator's statistics (PeakDeviceMemory) exist before the first tensor:
    // resetting them earlier throws "Invalid device argument" (seen on an H100).
    (void)at::empty({1}, at::TensorOptions().device(device));
    return OkStatus();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return FailedPreconditionError("selecting " + device.str() + ": " +
                                   msg.substr(0, msg.find('\n')));
  }
#else
  return FailedPreconditionError(device.str() +
                                 ": this orrery-worker was built without the GPU path");
#endif
}

void SynchronizeDevice(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

namespace {
#ifdef ORRERY_HAVE_CUDA
// The device's index (-1, "the current device", resolved) once the caching
// allocator has state for it; -1 when it has none (nothing allocated there yet).
c10::DeviceIndex AllocatorIndex(c10::Device device) {
  c10::DeviceIndex index = device.index() < 0 ? c10::cuda::current_device() : device.index();
  try {
    (void)at::empty({1}, at::TensorOptions().device(c10::Device(c10::kCUDA, index)));
  } catch (const std::exception&) {
    return -1;
  }
  return index;
}
#endif
}  // namespace

namespace {

// Counts what LibTorch's CPU allocator hands out. LibTorch's raw_allocate
// wants a DataPtr whose context is its data and a raw_deleter, so the size
// rides in a header of kHeader bytes (LibTorch's own 64-byte alignment kept)
// in front of the block the tensor sees. The peak is a running maximum
// (atomic, lock-free: every tensor passes here).
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) {
    base_ = base;
    base_deleter_ = base->raw_deleter();
  }
  // Whether LibTorch's allocator is one this can wrap (a raw deleter).
  static bool CanWrap(c10::Allocator* base) { return base->raw_deleter() != nullptr; }

  // LibTorch 2.3 made allocate non-const and added copy_data (pure virtual).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    auto* block = static_cast<char*>(base_->raw_allocate(n + kHeader));
    *reinterpret_cast<int64_t*>(block) = static_cast<int64_t>(n);
    const int64_t now = current_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) +
                        static_cast<int64_t>(n);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* data = block + kHeader;
    return {data, data, &Release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Release; }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  static int64_t current() { return current_.load(std::memory_order_relaxed); }
  static int64_t peak() { return peak_.load(std::memory_order_relaxed); }
  static void ResetPeak() { peak_.store(current(), std::memory_order_relaxed); }

 private:
  static constexpr size_t kHeader = 64;
  static void Release(void* data) {
    if (data == nullptr) return;
    char* block = static_cast<char*>(data) - kHeader;
    current_.fetch_sub(*reinterpret_cast<int64_t*>(block), std::memory_order_relaxed);
    base_deleter_(block);
  }

  static inline c10::Allocator* base_ = nullptr;
  static inline c10::DeleterFnPtr base_deleter_ = nullptr;
  static inline std::atomic<int64_t> current_{0};
  static inline std::atomic<int64_t> peak_{0};
};

CountingCpuAllocator* cpu_counter = nullptr;
std::once_flag cpu_counter_once;

}  // namespace

void InstallCpuMemoryCounter() {
  std::call_once(cpu_counter_once, [] {
    c10::Allocator* base = c10::GetAllocator(c10::kCPU);
    if (!CountingCpuAllocator::CanWrap(base)) return;  // no CPU peak then (-1)
    // Leaked on purpose: tensors freed during static destruction still call it.
    cpu_counter = new CountingCpuAllocator(base);
    c10::SetAllocator(c10::kCPU, cpu_counter, /*priority=*/1);
  });
}

int64_t CpuAllocatedBytes() { return cpu_counter != nullptr ? cpu_counter->current() : 0; }

int64_t PeakDeviceMemory(c10::Device device) {
#ifdef ORRERY_HAVE_CUDA
  if (device.is_cuda()) {
    c10::DeviceIndex index = AllocatorIndex(device);
    if (index < 0) return -1;
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .peak;
  }
#endif
  if (device.is_cpu() && cpu_counter != nullptr) return cpu_counter->peak();
  return -1;
}

int64_t PeakReservedDeviceMemory(c10::Device device) {
#ifdef ORRERY_HAVE_CUDA
  if (device.is_cuda()) {
    c10::DeviceIndex index = AllocatorIndex(device);
    if (index < 0) return -1;
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .peak;
  }
#endif
  (void)device;
  return -1;
}

int64_t DeviceMemoryInUse(c10::Device device) {
#ifdef ORRERY_HAVE_CUDA
  if (device.is_cuda()) {
    c10::DeviceIndex index = AllocatorIndex(device);
    if (index < 0) return -1;
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return -1;
    size_t free = 0, total = 0;
    const bool ok =
        cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess;
    (void)cudaSetDevice(previous);
    return ok ? static_cast<int64_t>(total - free) : -1;
  }
#endif
  (void)device;
  return -1;
}

void ResetPeakDeviceMemory(c10::Device device) {
#ifdef ORRERY_HAVE_CUDA
  if (device.is_cuda()) {
    c10::DeviceIndex index = AllocatorIndex(device);
    if (index >= 0) c10::cuda::CUDACachingAllocator::resetPeakStats(index);
  }
#endif
  if (device.is_cpu() && cpu_counter != nullptr) cpu_counter->ResetPeak();
}

}  // namespace orrery::dist
