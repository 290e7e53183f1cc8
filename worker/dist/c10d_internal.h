// Private to worker/dist: the c10d adapter shared by the gloo and NCCL backends.
// Includes LibTorch's distributed headers, so only dist's .cc files include it.
#pragma once

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <chrono>
#include <string>

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "common/status.h"
#include "worker/dist/communicator.h"

namespace orrery::dist::internal {

// What a backend's constructor returns: LibTorch 1.13's ProcessGroupGloo and
// ProcessGroupNCCL are ProcessGroups; from 2.0 on they are c10d::Backends (a
// ProcessGroup became a dispatcher over backends), with the same collectives.
#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

// Turns an exception from c10d/gloo into a Status: a closed peer is UNAVAILABLE
// (a rank died), a timeout DEADLINE_EXCEEDED, anything else INTERNAL.
Status StatusFromException(const std::exception& e, const std::string& what);

std::unique_ptr<Communicator> WrapProcessGroup(c10::intrusive_ptr<Group> group,
                                               std::string backend);

#ifdef ORRERY_HAVE_CUDA
// nccl_group.cc: a ProcessGroupNCCL over the store (GPU path only).
c10::intrusive_ptr<Group> NewNcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout);
#endif

}  // namespace orrery::dist::internal
