// Names and sizes of the element types a checkpoint can hold.
#include "worker/checkpoint/dtype.h"

#include <array>
#include <utility>

namespace orrery::checkpoint {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kInt64, "int64", 8},
    {DType::kInt32, "int32", 4},
    {DType::kInt16, "int16", 2},
    {DType::kInt8, "int8", 1},
    {DType::kUInt8, "uint8", 1},
    {DType::kBool, "bool", 1},
}};

const DTypeInfo& Info(DType dtype) {
  for (const auto& i : kDTypes) {
    if (i.dtype == dtype) return i;
  }
  return kDTypes[0];  // unreachable: every enumerator is listed above
}

}  // namespace

const char* DTypeName(DType dtype) { return Info(dtype).name; }
size_t DTypeSize(DType dtype) { return Info(dtype).size; }

StatusOr<DType> ParseDType(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (name == i.name) return i.dtype;
  }
  return InvalidArgumentError("unknown dtype \"" + std::string(name) + "\"");
}

}  // namespace orrery::checkpoint
