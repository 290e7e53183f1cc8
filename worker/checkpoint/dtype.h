// Element types of checkpointed tensors. The checkpoint moves raw bytes, so all it
// needs of a dtype is its name (as written in the metadata) and its size.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace orrery::checkpoint {

enum class DType {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool
};

// "float32", "bfloat16", ... (the names torch.distributed.checkpoint users expect).
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);
StatusOr<DType> ParseDType(std::string_view name);

}  // namespace orrery::checkpoint
