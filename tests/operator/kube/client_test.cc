// Tests of the transport-independent client parts: REST paths for core, grouped,
// namespaced and cluster-scoped resources, watch event lines, cache keys and the
// conflict retry loop.
#include "operator/kube/client.h"

#include <gtest/gtest.h>

#include "operator/kube/api_error.h"

namespace orrery::kube {
namespace {

TEST(ResourceTest, CollectionPaths) {
  EXPECT_EQ(ConfigMaps().CollectionPath("ns"), "/api/v1/namespaces/ns/configmaps");
  EXPECT_EQ(ConfigMaps().CollectionPath(""), "/api/v1/configmaps");
  EXPECT_EQ(Nodes().CollectionPath("ignored"), "/api/v1/nodes");
  EXPECT_EQ(Leases().CollectionPath("kube-system"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
  Resource crd{"test.orrery.dev", "v1", "widgets", true};
  EXPECT_EQ(crd.Name(), "widgets.test.orrery.dev");
  EXPECT_EQ(crd.ApiVersion(), "test.orrery.dev/v1");
  EXPECT_EQ(CustomResourceDefinitions().CollectionPath(""),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions");
}

TEST(WatchEventTest, ParsesEveryType) {
  auto added = ParseWatchEvent(
      R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"7"}}})");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->type, WatchEvent::Type::kAdded);
  EXPECT_EQ(added->object["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(ParseWatchEvent(R"({"type":"MODIFIED","object":{}})")->type,
            WatchEvent::Type::kModified);
  EXPECT_EQ(ParseWatchEvent(R"({"type":"DELETED","object":{}})")->type, WatchEvent::Type::kDeleted);
  auto bookmark = ParseWatchEvent(
      R"({"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"99"}}})");
  EXPECT_EQ(bookmark->type, WatchEvent::Type::kBookmark);
  auto error = ParseWatchEvent(
      R"({"type":"ERROR","object":{"kind":"Status","status":"Failure","message":"too old resource version","reason":"Expired","code":410}})");
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->type, WatchEvent::Type::kError);
  EXPECT_TRUE(IsGone(error->ErrorStatus("watch")));
}

TEST(WatchEventTest, MalformedLinesAreDataLoss) {
  EXPECT_EQ(ParseWatchEvent("{not json").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseWatchEvent(R"({"type":"ADDED"})").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseWatchEvent(R"({"type":"EXPLODED","object":{}})").status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(ParseWatchEvent("[]").status().code(), StatusCode::kDataLoss);
}

TEST(KeyTest, NamespacedAndClusterScoped) {
  EXPECT_EQ(KeyOf({{"metadata", {{"namespace", "ns"}, {"name", "a"}}}}), "ns/a");
  EXPECT_EQ(KeyOf({{"metadata", {{"name", "node-1"}}}}), "node-1");
  EXPECT_EQ(KeyOf(Object::object()), "");
  EXPECT_EQ(KeyFor("", "x"), "x");
}

TEST(RetryOnConflictTest, RetriesOnlyConflicts) {
  Status conflict =
      ApiError::FromResponse(409, R"({"kind":"Status","reason":"Conflict","code":409})")
          .ToStatus("");
  int calls = 0;
  Status s = RetryOnConflict([&] { return ++calls < 3 ? conflict : OkStatus(); });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3);
  calls = 0;
  s = RetryOnConflict([&] {
    ++calls;
    return NotFoundError("x");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(IsNotFound(s));
  calls = 0;
  s = RetryOnConflict(
      [&] {
        ++calls;
        return conflict;
      },
      4);
  EXPECT_EQ(calls, 4);
  EXPECT_TRUE(IsConflict(s));
}

}  // namespace
}  // namespace orrery::kube
