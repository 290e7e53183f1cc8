// The device a rank computes on: `orrery-worker train|profile --device cpu|cuda`. Every build runs
// on CPU (gloo). "cuda" needs a binary built with the GPU path (ORRERY_WITH_CUDA: CUDA + NCCL,
// ORRERY_HAVE_CUDA), a visible NVIDIA GPU, and templates that put their tensors there, which
// worker/parallel does not do yet. CheckDevice decides before any model is built, so an unusable
// choice is one clear error naming the device and the fix, never a crash mid-step.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::dist {

// True when this binary was built with the GPU path (CUDA + NCCL compiled in).
bool BuiltWithCuda();

// One line on the GPU path: "CPU only (built without CUDA)" or "CUDA 12.6, NCCL
// 2.26.2, N devices visible".
std::string GpuPathSummary();

// Removes `--device X` or `--device=X` from args and returns X; "" when the flag
// is absent (the worker then runs on CPU and checks nothing, as before the flag
// existed: the operator sets ORRERY_BACKEND=nccl for GPU runs but no --device
// yet). INVALID_ARGUMENT for a missing value.
StatusOr<std::string> TakeDeviceFlag(std::vector<std::string>& args);

// OK when a rank of this binary on this machine can compute on `device` ("cpu"
// or "cuda") and communicate with `backend` ("gloo" or "nccl"); otherwise an
// error that names the device and says what to do instead:
//   INVALID_ARGUMENT     an unknown device or backend, or nccl with --device cpu
//   FAILED_PRECONDITION  cuda on a binary without the GPU path, or with no GPU visible
//   UNIMPLEMENTED        cuda with a GPU visible (the templates compute on CPU)
Status CheckDevice(const std::string& device, const std::string& backend);

}  // namespace orrery::dist
