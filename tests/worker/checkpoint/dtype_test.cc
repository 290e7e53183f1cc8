// DType names round-trip and sizes are right.
#include "worker/checkpoint/dtype.h"

#include <gtest/gtest.h>

namespace orrery::checkpoint {
namespace {

TEST(DTypeTest, NamesRoundTripAndSizes) {
  for (DType d :
       {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt64,
        DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << DTypeName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_FALSE(ParseDType("float128").ok());
}

}  // namespace
}  // namespace orrery::checkpoint
