#include "operator/kube/delegated_auth.h"

#include <cctype>
#include <utility>

#include <openssl/evp.h>

#include "operator/kube/api_error.h"

namespace orrery::kube {

Resource TokenReviews() { return {"authentication.k8s.io", "v1", "tokenreviews", false}; }
Resource SubjectAccessReviews() {
  return {"authorization.k8s.io", "v1", "subjectaccessreviews", false};
}

namespace {

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

// The token of "Bearer TOKEN" (scheme case-insensitive), or "".
std::string BearerToken(const std::string& authorization) {
  const std::string scheme = "bearer ";
  if (authorization.size() <= scheme.size()) return "";
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return "";
  }
  const size_t start = authorization.find_first_not_of(' ', scheme.size());
  return start == std::string::npos ? "" : authorization.substr(start);
}

// A failed review request: the operator's own RBAC or the API server, not the
// caller, so the scrape gets 503 and the log says what to fix.
Status ReviewFailed(const Resource& r, const Status& s) {
  std::string message = "cannot create " + r.Name() + ": " + s.message();
  if (IsForbidden(s)) {
    message += " (fix: grant the operator's service account create on " + r.Name() +
               "; the Helm chart does when metrics.secure is true)";
  }
  return UnavailableError(message);
}

}  // namespace

DelegatedAuthorizer::DelegatedAuthorizer(Client* client, const Clock* clock,
                                         DelegatedAuthOptions options)
    : client_(client), clock_(clock), options_(options) {}

DelegatedAuthorizer::Stats DelegatedAuthorizer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status DelegatedAuthorizer::Check(const std::string& authorization, const std::string& verb,
                                  const std::string& path) {
  const std::string token = BearerToken(authorization);
  if (token.empty()) {
    return UnauthenticatedError(
        "a bearer token is required (fix: scrape with a service account token whose account "
        "may get " +
        path + ")");
  }
  const std::string key = Sha256Hex(token) + " " + verb + " " + path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && clock_->Now() < it->second.expires) {
      ++stats_.cache_hits;
      return it->second.answer;
    }
  }
  Status answer = Review(token, verb, path);
  if (answer.code() == StatusCode::kUnavailable) return answer;
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= options_.max_cached) cache_.clear();
  cache_[key] = {answer,
                 clock_->Now() + (answer.ok() ? options_.allowed_ttl : options_.denied_ttl)};
  return answer;
}

Status DelegatedAuthorizer::Review(const std::string& token, const std::string& verb,
                                   const std::string& path) {
  Object token_review = {{"apiVersion", TokenReviews().ApiVersion()},
                         {"kind", "TokenReview"},
                         {"spec", {{"token", token}}}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.token_reviews;
  }
  StatusOr<Object> reviewed = client_->Create(TokenReviews(), "", token_review);
  if (!reviewed.ok()) return ReviewFailed(TokenReviews(), reviewed.status());
  const Object& ts = reviewed->value("status", Object::object());
  if (!ts.value("authenticated", false)) {
    std::string why = ts.value("error", std::string());
    return UnauthenticatedError("the token was not accepted" + (why.empty() ? "" : ": " + why));
  }
  const Object& user = ts.value("user", Object::object());
  Object spec = {{"user", user.value("username", std::string())},
                 {"nonResourceAttributes", {{"path", path}, {"verb", verb}}}};
  if (user.contains("uid")) spec["uid"] = user["uid"];
  if (user.contains("groups")) spec["groups"] = user["groups"];
  if (user.contains("extra")) spec["extra"] = user["extra"];
  Object access_review = {{"apiVersion", SubjectAccessReviews().ApiVersion()},
                          {"kind", "SubjectAccessReview"},
                          {"spec", spec}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.access_reviews;
  }
  StatusOr<Object> decided = client_->Create(SubjectAccessReviews(), "", access_review);
  if (!decided.ok()) return ReviewFailed(SubjectAccessReviews(), decided.status());
  const Object& as = decided->value("status", Object::object());
  if (as.value("allowed", false) && !as.value("denied", false)) return OkStatus();
  std::string reason = as.value("reason", std::string());
  return PermissionDeniedError(user.value("username", std::string("the user")) + " may not " +
                               verb + " " + path + (reason.empty() ? "" : ": " + reason) +
                               " (fix: bind it to a ClusterRole with nonResourceURLs [\"" + path +
                               "\"] and verb " + verb + ", such as the chart's metrics-reader)");
}

}  // namespace orrery::kube
