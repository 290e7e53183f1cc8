// Encoding and decoding of Kubernetes API errors in orrery::Status (see api_error.h).
// The machine-readable part is a JSON trailer at the end of the message, after the
// marker " k8s-error=", so that Status::WithContext (which prefixes) keeps it intact.
#include "operator/kube/api_error.h"

#include <cmath>
#include <cstdlib>

namespace orrery::kube {
namespace {

constexpr const char* kMarker = " k8s-error=";

std::optional<nlohmann::json> Trailer(const Status& s) {
  if (s.ok()) return std::nullopt;
  const std::string& m = s.message();
  size_t pos = m.rfind(kMarker);
  if (pos == std::string::npos) return std::nullopt;
  nlohmann::json j =
      nlohmann::json::parse(m.substr(pos + std::char_traits<char>::length(kMarker)), nullptr,
                            /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// Retry-After is either delta-seconds or an HTTP date; the API server sends seconds.
std::optional<Duration> ParseRetryAfter(const std::string& header) {
  if (header.empty()) return std::nullopt;
  char* end = nullptr;
  long v = std::strtol(header.c_str(), &end, 10);
  if (end == header.c_str() || v < 0) return std::nullopt;
  return std::chrono::seconds(v);
}

}  // namespace

StatusCode CodeFor(int http_code, const std::string& reason) {
  if (reason == "NotFound") return StatusCode::kNotFound;
  if (reason == "AlreadyExists") return StatusCode::kAlreadyExists;
  if (reason == "Conflict") return StatusCode::kAborted;
  if (reason == "Gone" || reason == "Expired") return StatusCode::kOutOfRange;
  if (reason == "Forbidden") return StatusCode::kPermissionDenied;
  if (reason == "Unauthorized") return StatusCode::kUnauthenticated;
  if (reason == "Invalid" || reason == "BadRequest") return StatusCode::kInvalidArgument;
  if (reason == "TooManyRequests") return StatusCode::kResourceExhausted;
  if (reason == "Timeout" || reason == "ServerTimeout") return StatusCode::kDeadlineExceeded;
  if (reason == "MethodNotAllowed" || reason == "NotAcceptable" || reason == "UnsupportedMediaType")
    return StatusCode::kUnimplemented;
  switch (http_code) {
    case 400: return StatusCode::kInvalidArgument;
    case 401: return StatusCode::kUnauthenticated;
    case 403: return StatusCode::kPermissionDenied;
    case 404: return StatusCode::kNotFound;
    case 405:
    case 406:
    case 415: return StatusCode::kUnimplemented;
    case 409: return StatusCode::kAborted;
    case 410: return StatusCode::kOutOfRange;
    case 422: return StatusCode::kInvalidArgument;
    case 429: return StatusCode::kResourceExhausted;
    case 504: return StatusCode::kDeadlineExceeded;
    default: break;
  }
  if (http_code >= 500) return StatusCode::kUnavailable;
  return StatusCode::kUnknown;
}

ApiError ApiError::FromStatusObject(const nlohmann::json& status, int http_code) {
  ApiError e;
  e.http_code = http_code;
  if (!status.is_object()) return e;
  if (auto it = status.find("code");
      it != status.end() && it->is_number_integer() && http_code == 0)
    e.http_code = it->get<int>();
  e.reason = StringField(status, "reason");
  e.message = StringField(status, "message");
  if (auto d = status.find("details"); d != status.end() && d->is_object()) {
    if (auto c = d->find("causes"); c != d->end() && c->is_array()) {
      for (const auto& cause : *c) {
        if (!cause.is_object()) continue;
        e.causes.push_back({StringField(cause, "field"), StringField(cause, "reason"),
                            StringField(cause, "message")});
      }
    }
    if (auto r = d->find("retryAfterSeconds"); r != d->end() && r->is_number_integer())
      e.retry_after = std::chrono::seconds(r->get<int64_t>());
  }
  return e;
}

ApiError ApiError::FromResponse(int http_code, const std::string& body,
                                const std::string& retry_after_header) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  ApiError e;
  if (!j.is_discarded() && j.is_object() && j.value("kind", "") == "Status") {
    e = FromStatusObject(j, http_code);
  } else {
    e.http_code = http_code;
    // Not a Status (a proxy, a crashed server): keep a short excerpt for the log.
    e.message = body.size() > 200 ? body.substr(0, 200) + "..." : body;
    if (e.message.empty()) e.message = "HTTP " + std::to_string(http_code);
  }
  // The header wins over the body's retryAfterSeconds: it is what the server enforces.
  if (auto h = ParseRetryAfter(retry_after_header)) e.retry_after = h;
  return e;
}

Status ApiError::ToStatus(const std::string& context) const {
  nlohmann::json t = {{"code", http_code}, {"reason", reason}};
  if (retry_after) t["retryAfterSeconds"] = ToSeconds(*retry_after);
  if (!causes.empty()) {
    nlohmann::json cs = nlohmann::json::array();
    for (const auto& c : causes)
      cs.push_back({{"field", c.field}, {"reason", c.reason}, {"message", c.message}});
    t["causes"] = cs;
  }
  std::string text = context.empty() ? message : context + ": " + message;
  return Status(CodeFor(http_code, reason), text + kMarker + t.dump());
}

std::string ReasonOf(const Status& s) {
  auto t = Trailer(s);
  return t ? StringField(*t, "reason") : "";
}

int HttpCodeOf(const Status& s) {
  auto t = Trailer(s);
  if (!t) return 0;
  return t->value("code", 0);
}

bool IsNotFound(const Status& s) { return s.code() == StatusCode::kNotFound; }
bool IsAlreadyExists(const Status& s) { return s.code() == StatusCode::kAlreadyExists; }
bool IsConflict(const Status& s) { return s.code() == StatusCode::kAborted; }
bool IsGone(const Status& s) { return s.code() == StatusCode::kOutOfRange; }
bool IsForbidden(const Status& s) { return s.code() == StatusCode::kPermissionDenied; }
bool IsUnauthorized(const Status& s) { return s.code() == StatusCode::kUnauthenticated; }
bool IsInvalid(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument &&
         (ReasonOf(s) == "Invalid" || HttpCodeOf(s) == 422);
}
bool IsTooManyRequests(const Status& s) { return s.code() == StatusCode::kResourceExhausted; }
bool IsTimeout(const Status& s) { return s.code() == StatusCode::kDeadlineExceeded; }

std::optional<Duration> RetryAfter(const Status& s) {
  auto t = Trailer(s);
  if (!t) return std::nullopt;
  auto it = t->find("retryAfterSeconds");
  if (it == t->end() || !it->is_number()) return std::nullopt;
  return FromSeconds(it->get<double>());
}

std::vector<StatusCause> InvalidCauses(const Status& s) {
  std::vector<StatusCause> out;
  auto t = Trailer(s);
  if (!t) return out;
  auto it = t->find("causes");
  if (it == t->end() || !it->is_array()) return out;
  for (const auto& c : *it)
    out.push_back({StringField(c, "field"), StringField(c, "reason"), StringField(c, "message")});
  return out;
}

std::string HumanMessage(const Status& s) {
  const std::string& m = s.message();
  return m.substr(0, m.find(kMarker));
}

}  // namespace orrery::kube
