// at::Tensor views over checkpoint bytes, and RNG state (see torch_adapter.h).
#include "worker/checkpoint/torch_adapter.h"

#include <cstring>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

namespace orrery::checkpoint {

StatusOr<DType> DTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kLong: return DType::kInt64;
    case at::kInt: return DType::kInt32;
    case at::kShort: return DType::kInt16;
    case at::kChar: return DType::kInt8;
    case at::kByte: return DType::kUInt8;
    case at::kBool: return DType::kBool;
    default:
      return InvalidArgumentError(std::string("checkpoint cannot hold tensors of type ") +
                                  c10::toString(type));
  }
}

at::ScalarType ScalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat64: return at::kDouble;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kInt64: return at::kLong;
    case DType::kInt32: return at::kInt;
    case DType::kInt16: return at::kShort;
    case DType::kInt8: return at::kChar;
    case DType::kUInt8: return at::kByte;
    case DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

std::vector<int64_t> LocalShape(const LocalPiece& piece) {
  if (piece.flat) return {piece.buffer_elements};
  return piece.region.sizes;
}

Status AddTensor(ShardWriter& writer, const TensorSpec& spec, const at::Tensor& local) {
  try {
    ORRERY_ASSIGN_OR_RETURN(DType dt, DTypeOf(local.scalar_type()));
    if (dt != spec.dtype) {
      return InvalidArgumentError("tensor " + spec.name + " is " + DTypeName(dt) +
                                  ", its spec says " + DTypeName(spec.dtype));
    }
    const at::Tensor cpu = local.detach().to(at::kCPU).contiguous();
    return writer.Add(spec, cpu.data_ptr(), static_cast<uint64_t>(cpu.nbytes()));
  } catch (const c10::Error& e) {
    return InternalError("saving tensor " + spec.name + ": " + e.what_without_backtrace());
  }
}

Status LoadTensors(const CheckpointReader& reader, const std::vector<TensorSlot>& slots,
                   const Layout& layout, int rank, const StageFn& stages,
                   const LoadOptions& options, LoadStats* stats) {
  try {
    std::vector<RankBuffer> buffers;
    std::vector<std::pair<at::Tensor, at::Tensor*>> copy_back;  // CPU staging -> destination
    for (const TensorSlot& slot : slots) {
      ORRERY_ASSIGN_OR_RETURN(LocalPiece piece, LocalPieceOf(slot.spec, layout, rank, stages));
      if (!piece.present) continue;
      const std::vector<int64_t> shape = LocalShape(piece);
      at::Tensor& dst = *slot.tensor;
      at::Tensor staging;
      if (!dst.defined()) {
        dst = at::empty(shape, at::TensorOptions().dtype(ScalarTypeOf(slot.spec.dtype)));
        staging = dst;
      } else {
        if (dst.numel() != piece.buffer_elements ||
            dst.scalar_type() != ScalarTypeOf(slot.spec.dtype)) {
          return InvalidArgumentError("tensor " + slot.spec.name + ": destination has " +
                                      std::to_string(dst.numel()) + " elements, rank " +
                                      std::to_string(rank) + " holds " +
                                      std::to_string(piece.buffer_elements));
        }
        if (dst.is_cpu() && dst.is_contiguous()) {
          staging = dst;
        } else {
          staging = at::empty(dst.sizes(), at::TensorOptions().dtype(dst.scalar_type()));
          copy_back.emplace_back(staging, slot.tensor);
        }
      }
      buffers.push_back({slot.spec, staging.data_ptr(), static_cast<uint64_t>(staging.nbytes())});
    }
    ORRERY_RETURN_IF_ERROR(LoadRank(reader, buffers, layout, rank, stages, options, stats));
    at::NoGradGuard no_grad;
    for (auto& [staging, dst] : copy_back) dst->copy_(staging);
    return OkStatus();
  } catch (const c10::Error& e) {
    return InternalError(std::string("loading tensors: ") + e.what_without_backtrace());
  }
}

StatusOr<std::string> CaptureCpuRngState() {
  try {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    const at::Tensor state = gen.get_state();
    return std::string(static_cast<const char*>(state.data_ptr()),
                       static_cast<size_t>(state.nbytes()));
  } catch (const c10::Error& e) {
    return InternalError(std::string("capturing the CPU RNG state: ") + e.what_without_backtrace());
  }
}

Status RestoreCpuRngState(const std::string& bytes) {
  try {
    at::Tensor state =
        at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
    return OkStatus();
  } catch (const c10::Error& e) {
    return DataLossError(std::string("restoring the CPU RNG state: ") + e.what_without_backtrace());
  }
}

}  // namespace orrery::checkpoint
