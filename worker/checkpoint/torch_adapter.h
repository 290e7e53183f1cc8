// The thin LibTorch side of the checkpoint (built only with ORRERY_WITH_TORCH):
// at::Tensor <-> the raw bytes the torch-free library moves, and capture/restore
// of the CPU RNG state. Everything that decides what goes where lives in the
// torch-free part; this file only views tensors as bytes.
//
// Local tensor shapes: a rank's piece of a tensor is, without fsdp, the tp-sliced
// rectangle (LocalPiece::region.sizes); with fsdp, a 1-D tensor of
// LocalPiece::buffer_elements (the flattened slice, zero-padded), as FSDP keeps it.
// c10::Error is caught here and returned as a Status.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/writer.h"

namespace orrery::checkpoint {

StatusOr<DType> DTypeOf(at::ScalarType type);
at::ScalarType ScalarTypeOf(DType dtype);

// The shape of rank's local tensor for `piece` (see above).
std::vector<int64_t> LocalShape(const LocalPiece& piece);

// Adds this rank's local tensor (any device; copied to contiguous CPU if needed).
Status AddTensor(ShardWriter& writer, const TensorSpec& spec, const at::Tensor& local);

struct TensorSlot {
  TensorSpec spec;
  at::Tensor* tensor =
      nullptr;  // defined: loaded in place (shape must match); undefined: allocated on CPU
};

// Loads every slot the rank holds under `layout` with one parallel read plan.
// Slots for tensors the rank does not hold are left untouched.
Status LoadTensors(const CheckpointReader& reader, const std::vector<TensorSlot>& slots,
                   const Layout& layout, int rank, const StageFn& stages,
                   const LoadOptions& options, LoadStats* stats = nullptr);

// The default CPU generator's state as opaque bytes, and back.
StatusOr<std::string> CaptureCpuRngState();
Status RestoreCpuRngState(const std::string& state);

}  // namespace orrery::checkpoint
