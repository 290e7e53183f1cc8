// The device a rank computes on: `orrery-worker train|profile --device cpu|cuda`. Every build runs
// on CPU (gloo). "cuda" needs a binary built with the GPU path (ORRERY_WITH_CUDA: CUDA + NCCL,
// ORRERY_HAVE_CUDA) and a visible NVIDIA GPU; the templates (worker/parallel) then keep the
// model, its gradients, the optimizer state and every batch on the rank's GPU (RankDevice), NCCL
// moves them, and spill streams host shards in on a side CUDA stream. CheckDevice decides before
// any model is built, so an unusable choice is one clear error naming the device and the fix,
// never a crash mid-step. The CUDA runtime calls below are compiled only with the GPU path; in the
// CPU build they refuse a CUDA device with a Status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "common/status.h"

namespace orrery::dist {

// True when this binary was built with the GPU path (CUDA + NCCL compiled in).
bool BuiltWithCuda();

// One line on the GPU path: "CPU only (built without CUDA)" or "CUDA 12.6, NCCL
// 2.26.2, N devices visible".
std::string GpuPathSummary();

// Removes `--device X` or `--device=X` from args and returns X; "" when the flag
// is absent (the worker then runs on CPU and checks nothing, as before the flag
// existed). INVALID_ARGUMENT for a missing value.
StatusOr<std::string> TakeDeviceFlag(std::vector<std::string>& args);

// OK when a rank of this binary on this machine can compute on `device` ("cpu"
// or "cuda") and communicate with `backend` ("gloo" or "nccl"); otherwise an
// error that names the device and says what to do instead:
//   INVALID_ARGUMENT     an unknown device or backend, or nccl with --device cpu
//   FAILED_PRECONDITION  cuda on a binary without the GPU path, or with no GPU visible
// cuda with gloo is allowed (the communicator stages CUDA tensors through host
// memory, see communicator.h); nccl is what a GPU job should use.
Status CheckDevice(const std::string& device, const std::string& backend);

// The device `rank` computes on: CPU for "cpu"; for "cuda", cuda:LOCAL_RANK when
// that variable is set (torchrun and the operator set it per pod), else
// cuda:(rank % visible devices). `local_rank` is LOCAL_RANK's value (nullptr:
// unset). FAILED_PRECONDITION when the index is not a visible device (or the build
// has no GPU path), INVALID_ARGUMENT for a malformed LOCAL_RANK or device.
StatusOr<c10::Device> RankDevice(const std::string& device, int rank, const char* local_rank);

// Makes `device` the calling thread's current CUDA device (NCCL binds its
// communicator to it, and allocations without an index land there); a no-op for
// CPU. Call before creating NCCL groups.
Status UseDevice(c10::Device device);

// Waits for all work queued on `device` (CUDA kernels are asynchronous: timing a
// step needs it). A no-op for CPU.
void SynchronizeDevice(c10::Device device);

// The most bytes of tensors the CUDA caching allocator had allocated on `device`
// since the last ResetPeakDeviceMemory (torch.cuda.max_memory_allocated). On the
// CPU the same figure from the counting allocator InstallCpuMemoryCounter puts
// in front of LibTorch's own: the bytes CPU tensors held at once, requested
// sizes as the CUDA figure counts them; -1 until it is installed. The count is
// the process's: one rank's where ranks are processes (the worker's case), the
// sum of all where ranks are threads of one process (tests).
int64_t PeakDeviceMemory(c10::Device device);
void ResetPeakDeviceMemory(c10::Device device);

// What a CUDA device holds beyond the tensors PeakDeviceMemory counts, for
// sizing the planner's reserve (engine::GpuMemoryReserve): the caching
// allocator's peak of reserved bytes since the last ResetPeakDeviceMemory
// (torch.cuda.max_memory_reserved: its segments, tensors and the slack
// between them), and the bytes in use on the device now by every process
// (cudaMemGetInfo's total less free: the CUDA context, NCCL's buffers and the
// allocator's segments; the worker's alone on a device it has to itself).
// -1 on the CPU and without CUDA.
int64_t PeakReservedDeviceMemory(c10::Device device);
int64_t DeviceMemoryInUse(c10::Device device);

// Puts a counting allocator in front of LibTorch's CPU allocator (idempotent,
// thread-safe). Tensors allocated before it are freed by their own deleter and
// never counted. orrery-worker installs it at start.
void InstallCpuMemoryCounter();
// The bytes CPU tensors hold now, counted since the install (0 before).
int64_t CpuAllocatedBytes();

}  // namespace orrery::dist
