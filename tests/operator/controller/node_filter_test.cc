// Which nodes a job's pods can run on: cordons, nodeSelector, taints against
// tolerations as Kubernetes matches them, and how long a node has been
// NotReady (the grace before its gangs are lost).
#include "operator/controller/node_filter.h"

#include <gtest/gtest.h>

#include "operator/controller/reconciler.h"

namespace orrery::controller {
namespace {

Json GpuNode(const std::string& name, Json labels = Json::object(), Json taints = Json::array(),
             bool cordoned = false, const std::string& ready = "True",
             const std::string& since = "2026-01-01T00:00:00Z") {
  Json spec = Json::object();
  if (!taints.empty()) spec["taints"] = taints;
  if (cordoned) spec["unschedulable"] = true;
  return Json{
      {"metadata", {{"name", name}, {"labels", labels}}},
      {"spec", spec},
      {"status",
       {{"allocatable", {{"nvidia.com/gpu", "8"}}},
        {"conditions",
         Json::array({{{"type", "Ready"}, {"status", ready}, {"lastTransitionTime", since}}})}}}};
}

Json Taint(const std::string& key, const std::string& value, const std::string& effect) {
  Json t = {{"key", key}, {"effect", effect}};
  if (!value.empty()) t["value"] = value;
  return t;
}

api::Toleration Tol(const std::string& key, const std::string& op, const std::string& value,
                    const std::string& effect) {
  api::Toleration t;
  t.key = key;
  t.operator_ = op;
  t.value = value;
  t.effect = effect;
  return t;
}

TEST(NodeFilter, TolerationsMatchAsKubernetesDoes) {
  const Json gpu = Taint("nvidia.com/gpu", "present", "NoSchedule");
  EXPECT_TRUE(Tolerates(Tol("nvidia.com/gpu", "Equal", "present", "NoSchedule"), gpu));
  EXPECT_TRUE(Tolerates(Tol("nvidia.com/gpu", "Equal", "present", ""), gpu));  // every effect
  EXPECT_FALSE(Tolerates(Tol("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), gpu));
  EXPECT_FALSE(Tolerates(Tol("nvidia.com/gpu", "Equal", "present", "NoExecute"), gpu));
  EXPECT_TRUE(Tolerates(Tol("nvidia.com/gpu", "Exists", "", ""), gpu));
  EXPECT_TRUE(Tolerates(Tol("", "Exists", "", ""), gpu));  // tolerates everything
  EXPECT_FALSE(Tolerates(Tol("other", "Exists", "", ""), gpu));
  EXPECT_FALSE(Tolerates(Tol("", "Exists", "", "NoExecute"), gpu));
}

TEST(NodeFilter, RefusesCordonedMismatchedAndUntoleratedNodes) {
  api::ResourcesSpec res;
  EXPECT_EQ(NodeRefusal(GpuNode("a"), res), "");
  EXPECT_EQ(NodeRefusal(GpuNode("a", {}, {}, /*cordoned=*/true), res), "node a is cordoned");
  // A taint that only prefers is no refusal.
  EXPECT_EQ(
      NodeRefusal(GpuNode("a", {}, Json::array({Taint("spot", "", "PreferNoSchedule")})), res), "");
  const Json tainted = GpuNode("b", {}, Json::array({Taint("pool", "a100", "NoSchedule")}));
  EXPECT_EQ(NodeRefusal(tainted, res),
            "node b has taint pool=a100:NoSchedule that spec.resources.tolerations do not "
            "tolerate");
  res.tolerations = {Tol("pool", "Equal", "a100", "NoSchedule")};
  EXPECT_EQ(NodeRefusal(tainted, res), "");
  const Json exec = GpuNode("c", {}, Json::array({Taint("maint", "", "NoExecute")}));
  EXPECT_NE(NodeRefusal(exec, res), "");
  res.node_selector = {{"pool", "h100"}};
  EXPECT_EQ(NodeRefusal(GpuNode("d", {{"pool", "h100"}}), res), "");
  EXPECT_EQ(NodeRefusal(GpuNode("e", {{"pool", "a100"}}), res),
            "node e does not match spec.resources.nodeSelector pool=h100");
  EXPECT_NE(NodeRefusal(GpuNode("f"), res), "");  // no label at all
}

TEST(NodeFilter, CapacityCountsOnlyAdmittingNodesAndKeepsRunningGangs) {
  api::ResourcesSpec res;
  res.tolerations = {Tol("pool", "Equal", "a100", "NoSchedule")};
  std::vector<Json> nodes = {
      GpuNode("free"), GpuNode("cordoned", {}, {}, true),
      GpuNode("tainted", {}, Json::array({Taint("team", "x", "NoSchedule")})),
      GpuNode("tolerated", {}, Json::array({Taint("pool", "a100", "NoSchedule")}))};
  // The job's gang runs on the node cordoned since.
  Json pod = {
      {"metadata",
       {{"name", "p"},
        {"labels",
         {{"orrery.dev/job", "sweep"},
          {"orrery.dev/gang", "t-g0"},
          {"app.kubernetes.io/managed-by", "orrery"}}}}},
      {"spec",
       {{"nodeName", "cordoned"},
        {"containers",
         Json::array({{{"name", "w"}, {"resources", {{"limits", {{"nvidia.com/gpu", "2"}}}}}}})}}},
      {"status", {{"phase", "Running"}}}};
  std::vector<std::string> refusals;
  auto caps = NodeCapacities(nodes, {pod}, "nvidia.com/gpu", "sweep", &res, &refusals);
  std::map<std::string, int> free;
  for (const NodeCapacity& c : caps) free[c.name] = c.allocatable;
  EXPECT_EQ(free, (std::map<std::string, int>{{"cordoned", 2}, {"free", 8}, {"tolerated", 8}}));
  EXPECT_EQ(refusals.size(), 2u);
}

TEST(NodeFilter, NotReadyNodesAreLostOnlyAfterTheGracePeriod) {
  const std::time_t now = *ParseRfc3339("2026-01-01T00:10:00Z");
  std::vector<Json> nodes = {GpuNode("blip", {}, {}, false, "False", "2026-01-01T00:09:50Z"),
                             GpuNode("down", {}, {}, false, "Unknown", "2026-01-01T00:01:00Z"),
                             GpuNode("up")};
  EXPECT_EQ(*UnreadySeconds(nodes[0], now), 10);
  EXPECT_FALSE(UnreadySeconds(nodes[2], now).has_value());
  EXPECT_EQ(LostNodes(nodes, {}, now, 300), (std::set<std::string>{"down"}));
  EXPECT_EQ(LostNodes(nodes, {}, now, 0), (std::set<std::string>{"blip", "down"}));
}

TEST(NodeFilter, ParsesRfc3339) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339("2026-01-01T00:00:00Z"), 1767225600);
  EXPECT_EQ(ParseRfc3339("2026-01-01T01:00:00.25+01:00"), 1767225600);
  EXPECT_FALSE(ParseRfc3339("yesterday").has_value());
  EXPECT_FALSE(ParseRfc3339("2026-13-01T00:00:00Z").has_value());
}

}  // namespace
}  // namespace orrery::controller
