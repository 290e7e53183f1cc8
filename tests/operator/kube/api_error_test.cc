// Tests of the mapping from API server answers to typed statuses: every reason in
// the table of api_error.h, causes and Retry-After surviving a round trip through
// Status (and through added context), and answers that are not a metav1.Status.
#include "operator/kube/api_error.h"

#include <gtest/gtest.h>

namespace orrery::kube {
namespace {

std::string StatusBody(int code, const std::string& reason, const std::string& message,
                       nlohmann::json details = nullptr) {
  nlohmann::json j = {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                      {"code", code},     {"reason", reason},   {"message", message}};
  if (!details.is_null()) j["details"] = details;
  return j.dump();
}

TEST(ApiErrorTest, ReasonsMapToTheirCodesAndHelpers) {
  struct Case {
    int http;
    const char* reason;
    StatusCode code;
    bool (*helper)(const Status&);
  };
  const Case cases[] = {
      {404, "NotFound", StatusCode::kNotFound, IsNotFound},
      {409, "AlreadyExists", StatusCode::kAlreadyExists, IsAlreadyExists},
      {409, "Conflict", StatusCode::kAborted, IsConflict},
      {410, "Gone", StatusCode::kOutOfRange, IsGone},
      {410, "Expired", StatusCode::kOutOfRange, IsGone},
      {403, "Forbidden", StatusCode::kPermissionDenied, IsForbidden},
      {401, "Unauthorized", StatusCode::kUnauthenticated, IsUnauthorized},
      {422, "Invalid", StatusCode::kInvalidArgument, IsInvalid},
      {429, "TooManyRequests", StatusCode::kResourceExhausted, IsTooManyRequests},
      {504, "Timeout", StatusCode::kDeadlineExceeded, IsTimeout},
  };
  for (const auto& c : cases) {
    Status s =
        ApiError::FromResponse(c.http, StatusBody(c.http, c.reason, "msg")).ToStatus("get x");
    EXPECT_EQ(s.code(), c.code) << c.reason;
    EXPECT_TRUE(c.helper(s)) << c.reason;
    EXPECT_EQ(ReasonOf(s), c.reason);
    EXPECT_EQ(HttpCodeOf(s), c.http);
  }
  // The helpers tell the two 409s apart.
  Status conflict = ApiError::FromResponse(409, StatusBody(409, "Conflict", "m")).ToStatus("");
  EXPECT_FALSE(IsAlreadyExists(conflict));
  EXPECT_FALSE(IsNotFound(conflict));
}

TEST(ApiErrorTest, HttpCodeAloneDecidesWhenThereIsNoStatusBody) {
  Status s = ApiError::FromResponse(404, "<html>not here</html>").ToStatus("get pods ns/x");
  EXPECT_TRUE(IsNotFound(s));
  EXPECT_NE(s.message().find("get pods ns/x"), std::string::npos);
  EXPECT_EQ(ApiError::FromResponse(503, "").ToStatus("").code(), StatusCode::kUnavailable);
  EXPECT_EQ(ApiError::FromResponse(410, "").ToStatus("").code(), StatusCode::kOutOfRange);
}

TEST(ApiErrorTest, InvalidCausesSurviveContext) {
  nlohmann::json details = {
      {"name", "x"},
      {"causes",
       {{{"reason", "FieldValueRequired"}, {"message", "Required value"}, {"field", "data.a"}},
        {{"reason", "FieldValueInvalid"}, {"message", "bad"}, {"field", "metadata.name"}}}}};
  Status s = ApiError::FromResponse(422, StatusBody(422, "Invalid", "x is invalid", details))
                 .ToStatus("create");
  s = s.WithContext("reconciling ns/x");
  ASSERT_TRUE(IsInvalid(s));
  auto causes = InvalidCauses(s);
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0], (StatusCause{"data.a", "FieldValueRequired", "Required value"}));
  EXPECT_EQ(causes[1].field, "metadata.name");
  EXPECT_NE(s.message().find("x is invalid"), std::string::npos);
}

TEST(ApiErrorTest, RetryAfterFromHeaderWinsOverBody) {
  std::string body = StatusBody(429, "TooManyRequests", "slow down", {{"retryAfterSeconds", 7}});
  Status from_body = ApiError::FromResponse(429, body).ToStatus("list");
  ASSERT_TRUE(RetryAfter(from_body).has_value());
  EXPECT_EQ(*RetryAfter(from_body), std::chrono::seconds(7));
  Status from_header = ApiError::FromResponse(429, body, "3").ToStatus("list");
  EXPECT_EQ(*RetryAfter(from_header), std::chrono::seconds(3));
  EXPECT_FALSE(RetryAfter(ApiError::FromResponse(429, "").ToStatus("")).has_value());
  EXPECT_FALSE(RetryAfter(ApiError::FromResponse(429, "", "soon").ToStatus("")).has_value());
}

TEST(ApiErrorTest, WatchErrorEventObjectDecodes) {
  nlohmann::json st =
      nlohmann::json::parse(StatusBody(410, "Expired", "too old resource version: 5 (90)"));
  Status s = ApiError::FromStatusObject(st).ToStatus("watch configmaps");
  EXPECT_TRUE(IsGone(s));
  EXPECT_EQ(HttpCodeOf(s), 410);
}

TEST(ApiErrorTest, HelpersOnPlainStatusesDoNotCrash) {
  Status plain = UnavailableError("connection refused");
  EXPECT_EQ(ReasonOf(plain), "");
  EXPECT_EQ(HttpCodeOf(plain), 0);
  EXPECT_FALSE(RetryAfter(plain).has_value());
  EXPECT_TRUE(InvalidCauses(plain).empty());
  EXPECT_FALSE(IsInvalid(InvalidArgumentError("not from the server")));
  EXPECT_FALSE(IsGone(OkStatus()));
}

}  // namespace
}  // namespace orrery::kube
