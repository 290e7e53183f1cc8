// The NCCL process group for the GPU path. Compiled only when CMake found CUDA
// and NCCL (ORRERY_HAVE_CUDA): CI builds it with scripts/test-gpu-path, where
// without a GPU ProcessGroupNCCL's constructor refuses (a Status, see
// tests/worker/dist/device_test.cc); its collectives run only on a GPU machine.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "worker/dist/c10d_internal.h"

namespace orrery::dist::internal {

c10::intrusive_ptr<Group> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  // Asynchronous error handling makes a dead peer abort the communicator instead
  // of hanging the surviving ranks inside a kernel (TORCH_NCCL_ASYNC_ERROR_HANDLING).
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

}  // namespace orrery::dist::internal
