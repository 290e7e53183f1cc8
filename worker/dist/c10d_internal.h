// Private to worker/dist: the c10d adapter shared by the gloo and NCCL backends.
// Includes LibTorch's distributed headers, so only dist's .cc files include it.
#pragma once

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/status.h"
#include "worker/dist/communicator.h"

namespace orrery::dist::internal {

// Turns an exception from c10d/gloo into a Status: a closed peer is UNAVAILABLE
// (a rank died), a timeout DEADLINE_EXCEEDED, anything else INTERNAL.
Status StatusFromException(const std::exception& e, const std::string& what);

std::unique_ptr<Communicator> WrapProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                               std::string backend);

#ifdef ORRERY_HAVE_CUDA
// nccl_group.cc: a ProcessGroupNCCL over the store (GPU path only).
c10::intrusive_ptr<c10d::ProcessGroup> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);
#endif

}  // namespace orrery::dist::internal
