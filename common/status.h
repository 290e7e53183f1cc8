// Errors as values. Every failure that can happen in normal operation (bad input,
// network and API errors, infeasible plans, bad files) travels as a Status or a
// StatusOr<T>; exceptions from third-party libraries are caught in their adapter
// and converted here. Abort is reserved for broken invariants.
#pragma once

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>

namespace orrery {

// Codes follow the canonical gRPC/Abseil space so callers can branch on them.
enum class StatusCode {
  kOk = 0,
  kCancelled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,  // e.g. an optimistic-concurrency conflict
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
  kUnauthenticated,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: pod default/x not found"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with context: "loading plan: <msg>".
  Status WithContext(const std::string& context) const;

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status UnauthenticatedError(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status UnknownError(std::string m) { return {StatusCode::kUnknown, std::move(m)}; }

std::ostream& operator<<(std::ostream& os, const Status& s);

// A value or the Status explaining why there is none. Constructing from an OK
// Status is a broken invariant.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}             // NOLINT(google-explicit-constructor)
  StatusOr(T&& value) : value_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "StatusOr built from an OK status");
    if (status_.ok()) status_ = InternalError("StatusOr built from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }
  T value_or(T other) const { return value_ ? *value_ : std::move(other); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace orrery

// Propagates a non-OK Status from the enclosing function.
#define ORRERY_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::orrery::Status orrery_status_ = (expr);        \
    if (!orrery_status_.ok()) return orrery_status_; \
  } while (0)

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration ("auto x") and
// `tmp` a generated name; neither can be parenthesised.
#define ORRERY_CONCAT_INNER_(a, b) a##b
#define ORRERY_CONCAT_(a, b) ORRERY_CONCAT_INNER_(a, b)
// ORRERY_ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define ORRERY_ASSIGN_OR_RETURN(lhs, expr) \
  ORRERY_ASSIGN_OR_RETURN_IMPL_(ORRERY_CONCAT_(orrery_statusor_, __LINE__), lhs, expr)
#define ORRERY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
