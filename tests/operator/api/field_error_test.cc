// Formatting of field errors and path helpers.
#include "operator/api/field_error.h"

#include <gtest/gtest.h>

namespace orrery::api {
namespace {

TEST(FieldErrorTest, FormatsPathMessageAndFix) {
  EXPECT_EQ(
      FormatFieldError({"spec.tasks[2].training.batchSize", "must be at least 1", "use 1 or more"}),
      "spec.tasks[2].training.batchSize: must be at least 1 (fix: use 1 or more)");
  EXPECT_EQ(FormatFieldError({"kind", "wrong", ""}), "kind: wrong");
  EXPECT_EQ(FormatFieldError({"", "not an object", ""}), "<document>: not an object");
}

TEST(FieldErrorTest, StatusListsEveryError) {
  EXPECT_TRUE(FieldErrorsToStatus({}, "x").ok());
  Status s = FieldErrorsToStatus({{"a", "m1", ""}, {"b", "m2", "f"}}, "checking");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "checking: 2 errors\n  a: m1\n  b: m2 (fix: f)");
  EXPECT_EQ(FieldErrorsToStatus({{"a", "m", ""}}, "c").message(), "c: 1 error\n  a: m");
}

TEST(FieldErrorTest, Paths) {
  EXPECT_EQ(ChildPath("", "spec"), "spec");
  EXPECT_EQ(ChildPath("spec", "tasks"), "spec.tasks");
  EXPECT_EQ(IndexPath("spec.tasks", 2), "spec.tasks[2]");
  EXPECT_EQ(KeyPath("metadata.labels", "a.b/c"), "metadata.labels[a.b/c]");
}

}  // namespace
}  // namespace orrery::api
