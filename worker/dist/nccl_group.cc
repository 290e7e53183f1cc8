// The NCCL process group for the GPU path. Compiled only when CMake found CUDA
// and NCCL (ORRERY_HAVE_CUDA); this machine has no GPU, so this file is built
// and exercised only on GPU builders.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "worker/dist/c10d_internal.h"

namespace orrery::dist::internal {

c10::intrusive_ptr<Group> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  // Asynchronous error handling makes a dead peer abort the communicator instead
  // of hanging the surviving ranks inside a kernel.
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

}  // namespace orrery::dist::internal
