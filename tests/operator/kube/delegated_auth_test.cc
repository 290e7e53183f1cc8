// Delegated authn/authz of /metrics scrapes against a scripted API server: who
// the token is, whether RBAC lets them, what is cached and for how long, and
// that an API server outage is neither cached nor blamed on the caller.
#include "operator/kube/delegated_auth.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "operator/kube/api_error.h"

namespace orrery::kube {
namespace {

// Answers TokenReviews from a token table and SubjectAccessReviews from a set
// of users allowed, and records what it was asked.
class ReviewingClient : public Client {
 public:
  std::map<std::string, std::string> users;  // token -> username
  std::set<std::string> allowed;             // usernames that may get /metrics
  Status failure = OkStatus();               // when set, every request fails so
  std::vector<Object> requests;

  StatusOr<Object> Create(const Resource& r, const std::string&, const Object& obj) override {
    requests.push_back(obj);
    if (!failure.ok()) return failure;
    Object answer = obj;
    if (r == TokenReviews()) {
      auto it = users.find(obj["spec"]["token"].get<std::string>());
      answer["status"] = it == users.end()
                             ? Object{{"authenticated", false}, {"error", "invalid bearer token"}}
                             : Object{{"authenticated", true},
                                      {"user",
                                       {{"username", it->second},
                                        {"uid", "u-" + it->second},
                                        {"groups", {"system:serviceaccounts"}}}}};
    } else if (r == SubjectAccessReviews()) {
      const std::string user = obj["spec"]["user"].get<std::string>();
      answer["status"] = {{"allowed", allowed.count(user) > 0}};
      if (!allowed.count(user)) answer["status"]["reason"] = "no RBAC policy matched";
    } else {
      return NotFoundError("unexpected " + r.Name());
    }
    return answer;
  }
  StatusOr<Object> Get(const Resource&, const std::string&, const std::string&) override {
    return UnimplementedError("get");
  }
  StatusOr<Object> List(const Resource&, const std::string&, const ListOptions&) override {
    return UnimplementedError("list");
  }
  StatusOr<Object> Update(const Resource&, const std::string&, const Object&) override {
    return UnimplementedError("update");
  }
  StatusOr<Object> UpdateStatus(const Resource&, const std::string&, const Object&) override {
    return UnimplementedError("update status");
  }
  Status Delete(const Resource&, const std::string&, const std::string&,
                const DeleteOptions&) override {
    return UnimplementedError("delete");
  }
  StatusOr<Object> Patch(const Resource&, const std::string&, const std::string&, PatchType,
                         const Object&, const PatchOptions&) override {
    return UnimplementedError("patch");
  }
  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource&, const std::string&,
                                               const ListOptions&) override {
    return UnimplementedError("watch");
  }
};

class DelegatedAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_.users = {{"reader-token", "system:serviceaccount:monitoring:prometheus"},
                     {"other-token", "system:serviceaccount:default:app"}};
    client_.allowed = {"system:serviceaccount:monitoring:prometheus"};
  }
  ReviewingClient client_;
  FakeClock clock_;
};

TEST_F(DelegatedAuthTest, AnswersByTokenAndPermission) {
  DelegatedAuthorizer auth(&client_, &clock_);
  EXPECT_EQ(auth.Check("", "get", "/metrics").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Basic dXNlcjpwdw==", "get", "/metrics").code(),
            StatusCode::kUnauthenticated);
  EXPECT_TRUE(client_.requests.empty()) << "no token, no request to the API server";
  Status bad = auth.Check("Bearer forged", "get", "/metrics");
  EXPECT_EQ(bad.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(bad.message().find("invalid bearer token"), std::string::npos) << bad;
  Status other = auth.Check("Bearer other-token", "get", "/metrics");
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("system:serviceaccount:default:app"), std::string::npos);
  EXPECT_NE(other.message().find("nonResourceURLs"), std::string::npos) << "says the fix";
  EXPECT_TRUE(auth.Check("bearer reader-token", "get", "/metrics").ok());

  // The access review carries who the token review said, and what is asked.
  const Object& review = client_.requests.back();
  EXPECT_EQ(review["kind"], "SubjectAccessReview");
  EXPECT_EQ(review["spec"]["user"], "system:serviceaccount:monitoring:prometheus");
  EXPECT_EQ(review["spec"]["uid"], "u-system:serviceaccount:monitoring:prometheus");
  EXPECT_EQ(review["spec"]["groups"][0], "system:serviceaccounts");
  EXPECT_EQ(review["spec"]["nonResourceAttributes"]["path"], "/metrics");
  EXPECT_EQ(review["spec"]["nonResourceAttributes"]["verb"], "get");
}

TEST_F(DelegatedAuthTest, CachesAnswersForTheirTtlAndNeverTheTokenItself) {
  DelegatedAuthOptions options;
  options.allowed_ttl = std::chrono::seconds(60);
  options.denied_ttl = std::chrono::seconds(10);
  DelegatedAuthorizer auth(&client_, &clock_, options);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(auth.Check("Bearer reader-token", "get", "/metrics").ok());
    EXPECT_EQ(auth.Check("Bearer other-token", "get", "/metrics").code(),
              StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(auth.stats().token_reviews, 2);
  EXPECT_EQ(auth.stats().cache_hits, 8);
  // A denial is asked again after 10 s, an allowance after 60 s: revoking the
  // binding takes effect within a minute.
  clock_.Advance(std::chrono::seconds(11));
  (void)auth.Check("Bearer reader-token", "get", "/metrics");
  (void)auth.Check("Bearer other-token", "get", "/metrics");
  EXPECT_EQ(auth.stats().token_reviews, 3);
  client_.allowed.clear();
  clock_.Advance(std::chrono::seconds(50));
  EXPECT_EQ(auth.Check("Bearer reader-token", "get", "/metrics").code(),
            StatusCode::kPermissionDenied);
  // Another path is another question.
  EXPECT_EQ(auth.Check("Bearer other-token", "get", "/debug").code(),
            StatusCode::kPermissionDenied);
}

TEST_F(DelegatedAuthTest, ApiServerTroubleIsUnavailableAndNotCached) {
  DelegatedAuthorizer auth(&client_, &clock_);
  client_.failure = PermissionDeniedError("tokenreviews.authentication.k8s.io is forbidden");
  Status s = auth.Check("Bearer reader-token", "get", "/metrics");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("grant the operator's service account create on tokenreviews"),
            std::string::npos)
      << s;
  client_.failure = OkStatus();
  EXPECT_TRUE(auth.Check("Bearer reader-token", "get", "/metrics").ok()) << "asked again";
}

}  // namespace
}  // namespace orrery::kube
