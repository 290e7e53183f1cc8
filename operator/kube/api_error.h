// Kubernetes API errors as orrery::Status values. The API server answers a failed
// request with an HTTP code and a `Status` object carrying a machine-readable
// reason (NotFound, Conflict, ...), sometimes causes (which fields are invalid) and
// a Retry-After. Callers branch on those, so they travel inside the Status:
//
//   HTTP  reason                 StatusCode            helper
//   404   NotFound               kNotFound             IsNotFound
//   409   AlreadyExists          kAlreadyExists        IsAlreadyExists
//   409   Conflict               kAborted              IsConflict
//   410   Gone / Expired         kOutOfRange           IsGone
//   403   Forbidden              kPermissionDenied     IsForbidden
//   401   Unauthorized           kUnauthenticated      IsUnauthorized
//   422   Invalid                kInvalidArgument      IsInvalid (+ InvalidCauses)
//   400   BadRequest             kInvalidArgument
//   429   TooManyRequests        kResourceExhausted    IsTooManyRequests (+ RetryAfter)
//   504 / client timeout         kDeadlineExceeded     IsTimeout
//   5xx, connection failures     kUnavailable
//
// The reason, the HTTP code, the retry-after and the causes are written into the
// message in a fixed bracketed form ("[k8s reason=Conflict code=409]") that the
// helpers read back, because orrery::Status carries only a code and a message.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"

namespace orrery::kube {

// One entry of status.details.causes: which field is wrong and why.
struct StatusCause {
  std::string field;    // e.g. "spec.replicas"
  std::string reason;   // e.g. "FieldValueInvalid"
  std::string message;  // human text
  bool operator==(const StatusCause&) const = default;
};

// A decoded API error.
struct ApiError {
  int http_code = 0;
  std::string reason;   // metav1.StatusReason, e.g. "Conflict"; may be empty
  std::string message;  // the server's message
  std::vector<StatusCause> causes;
  std::optional<Duration> retry_after;

  // Builds an ApiError from the HTTP code, the response body (a metav1.Status
  // when the server wrote one, anything else otherwise) and the Retry-After header.
  static ApiError FromResponse(int http_code, const std::string& body,
                               const std::string& retry_after_header = "");
  // Builds one from a metav1.Status object (as in a watch ERROR event).
  static ApiError FromStatusObject(const nlohmann::json& status, int http_code = 0);

  // The Status for this error, prefixed with `context` ("get configmaps default/x").
  Status ToStatus(const std::string& context) const;
};

// The canonical code used for an HTTP code and reason (see the table above).
StatusCode CodeFor(int http_code, const std::string& reason);

bool IsNotFound(const Status& s);
bool IsAlreadyExists(const Status& s);
bool IsConflict(const Status& s);
bool IsGone(const Status& s);
bool IsForbidden(const Status& s);
bool IsUnauthorized(const Status& s);
bool IsInvalid(const Status& s);
bool IsTooManyRequests(const Status& s);
bool IsTimeout(const Status& s);

// The Kubernetes reason written into the status, or "" when there is none.
std::string ReasonOf(const Status& s);
// The HTTP code written into the status, or 0.
int HttpCodeOf(const Status& s);
// The server's Retry-After (429 and some 5xx), when it gave one.
std::optional<Duration> RetryAfter(const Status& s);
// The causes of an Invalid error, in the server's order.
std::vector<StatusCause> InvalidCauses(const Status& s);
// The message for people: the context and the server's text, without the
// machine-readable part the helpers above read.
std::string HumanMessage(const Status& s);

}  // namespace orrery::kube
