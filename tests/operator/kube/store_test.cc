// Tests of the informer cache: keys, the built-in indexes kept in step with
// updates and deletes, and the changes a relist (Replace) reports.
#include "operator/kube/store.h"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

namespace orrery::kube {
namespace {

ObjectPtr Pod(const std::string& ns, const std::string& name, const std::string& rv,
              const std::string& node = "", const std::string& owner_uid = "") {
  Object o = {{"metadata", {{"namespace", ns}, {"name", name}, {"resourceVersion", rv}}}};
  if (!node.empty()) o["spec"]["nodeName"] = node;
  if (!owner_uid.empty())
    o["metadata"]["ownerReferences"] = {{{"uid", owner_uid}, {"kind", "Job"}, {"name", "j"}}};
  return std::make_shared<const Object>(o);
}

std::vector<std::string> Names(const std::vector<ObjectPtr>& objs) {
  std::vector<std::string> out;
  for (const auto& o : objs) out.push_back((*o)["metadata"]["name"]);
  std::sort(out.begin(), out.end());
  return out;
}

Store MakeStore() { return Store({{kByNode, NodeIndex}, {kByOwner, OwnerIndex}}); }

TEST(StoreTest, UpsertGetAndRemoveByKey) {
  Store s = MakeStore();
  EXPECT_EQ(s.Upsert(Pod("ns", "a", "1")), nullptr);
  ObjectPtr old = s.Upsert(Pod("ns", "a", "2"));
  ASSERT_NE(old, nullptr);
  EXPECT_EQ(ResourceVersionOf(*old), "1");
  EXPECT_EQ(ResourceVersionOf(*s.Get("ns/a")), "2");
  EXPECT_EQ(s.Get("other/a"), nullptr);
  EXPECT_NE(s.Remove("ns/a"), nullptr);
  EXPECT_EQ(s.Remove("ns/a"), nullptr);
  EXPECT_EQ(s.Size(), 0u);
}

TEST(StoreTest, IndexesFollowUpdatesAndDeletes) {
  Store s = MakeStore();
  (void)s.Upsert(Pod("ns1", "a", "1", "node-1", "uid-j1"));
  (void)s.Upsert(Pod("ns1", "b", "1", "node-2", "uid-j1"));
  (void)s.Upsert(Pod("ns2", "c", "1", "node-1", "uid-j2"));
  EXPECT_EQ(Names(s.ByIndex(kByNamespace, "ns1")), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Names(s.ByIndex(kByNode, "node-1")), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Names(s.ByIndex(kByOwner, "uid-j1")), (std::vector<std::string>{"a", "b"}));
  // Moving "a" to node-2 re-files it.
  (void)s.Upsert(Pod("ns1", "a", "2", "node-2", "uid-j1"));
  EXPECT_EQ(Names(s.ByIndex(kByNode, "node-1")), (std::vector<std::string>{"c"}));
  EXPECT_EQ(Names(s.ByIndex(kByNode, "node-2")), (std::vector<std::string>{"a", "b"}));
  (void)s.Remove("ns1/b");
  EXPECT_EQ(s.IndexKeys(kByOwner, "uid-j1"), (std::vector<std::string>{"ns1/a"}));
  EXPECT_TRUE(s.ByIndex("no-such-index", "x").empty());
}

TEST(StoreTest, ClusterScopedKeysHaveNoNamespace) {
  Store s;
  (void)s.Upsert(std::make_shared<const Object>(Object{{"metadata", {{"name", "node-1"}}}}));
  EXPECT_EQ(s.Keys(), (std::vector<std::string>{"node-1"}));
  EXPECT_TRUE(s.ByIndex(kByNamespace, "").empty());
}

TEST(StoreTest, ReplaceReportsAddsUpdatesAndInferredDeletes) {
  Store s = MakeStore();
  (void)s.Upsert(Pod("ns", "keep", "1", "n1"));
  (void)s.Upsert(Pod("ns", "changed", "1", "n1"));
  (void)s.Upsert(Pod("ns", "gone", "1", "n1"));
  auto deltas = s.Replace(
      {Pod("ns", "keep", "1", "n1"), Pod("ns", "changed", "5", "n2"), Pod("ns", "new", "6")});
  std::map<std::string, StoreDelta::Type> by_name;
  for (const auto& d : deltas) {
    const ObjectPtr& o = d.object ? d.object : d.old_object;
    by_name[(*o)["metadata"]["name"]] = d.type;
  }
  EXPECT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name["changed"], StoreDelta::Type::kUpdated);
  EXPECT_EQ(by_name["gone"], StoreDelta::Type::kDeleted);
  EXPECT_EQ(by_name["new"], StoreDelta::Type::kAdded);
  EXPECT_EQ(s.Size(), 3u);
  // The indexes were rebuilt from the new content.
  EXPECT_EQ(Names(s.ByIndex(kByNode, "n1")), (std::vector<std::string>{"keep"}));
  EXPECT_EQ(Names(s.ByIndex(kByNode, "n2")), (std::vector<std::string>{"changed"}));
}

TEST(StoreTest, SnapshotsSurviveLaterChanges) {
  Store s;
  (void)s.Upsert(Pod("ns", "a", "1"));
  ObjectPtr held = s.Get("ns/a");
  (void)s.Upsert(Pod("ns", "a", "2"));
  (void)s.Remove("ns/a");
  EXPECT_EQ(ResourceVersionOf(*held), "1");
}

}  // namespace
}  // namespace orrery::kube
