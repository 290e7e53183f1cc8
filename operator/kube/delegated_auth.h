// Delegated authentication and authorisation of the bearer tokens that reach the
// operator's /metrics, as Kubernetes' own components and kube-rbac-proxy guard
// theirs: a TokenReview asks the API server whose token it is, and a
// SubjectAccessReview whether that user may `get` the path (a non-resource URL;
// RBAC grants it with `nonResourceURLs: ["/metrics"]`). Answers are cached for a
// short while per token (its SHA-256, never the token itself), so a scrape every
// few seconds costs the API server two requests a minute.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "operator/kube/client.h"

namespace orrery::kube {

Resource TokenReviews();          // authentication.k8s.io/v1, cluster scope
Resource SubjectAccessReviews();  // authorization.k8s.io/v1, cluster scope

struct DelegatedAuthOptions {
  Duration allowed_ttl = std::chrono::minutes(1);
  Duration denied_ttl = std::chrono::seconds(10);
  size_t max_cached = 1024;  // the cache is emptied when it grows past this
};

class DelegatedAuthorizer {
 public:
  // `client` and `clock` must outlive the authorizer.
  DelegatedAuthorizer(Client* client, const Clock* clock, DelegatedAuthOptions options = {});

  // OK when the token in `authorization` ("Bearer TOKEN") is valid and its user
  // may `verb` the non-resource `path`; Unauthenticated without a valid token;
  // PermissionDenied when RBAC says no; Unavailable when the API server could not
  // be asked (not cached, so the next scrape asks again).
  Status Check(const std::string& authorization, const std::string& verb, const std::string& path);

  struct Stats {
    int64_t token_reviews = 0;
    int64_t access_reviews = 0;
    int64_t cache_hits = 0;
  };
  Stats stats() const;

 private:
  Status Review(const std::string& token, const std::string& verb, const std::string& path);

  Client* client_;
  const Clock* clock_;
  DelegatedAuthOptions options_;
  mutable std::mutex mu_;
  struct Entry {
    Status answer;
    TimePoint expires;
  };
  std::map<std::string, Entry> cache_;  // by SHA-256(token) + verb + path
  Stats stats_;
};

}  // namespace orrery::kube
