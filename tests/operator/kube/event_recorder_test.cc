// Integration tests of the event recorder on a real API server: an event is
// created with the fields `kubectl describe` shows, repeats within the window join
// its series, and distinct events or repeats after the window are new objects.
#include "operator/kube/event_recorder.h"

#include <gtest/gtest.h>

#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"

namespace orrery::kube {
namespace {

using namespace testutil;  // NOLINT(google-build-using-namespace): test helpers

class EventRecorderTest : public orrery::testing::ControlPlaneTest {};

std::vector<Object> EventsAbout(Client& c, const std::string& ns, const std::string& name) {
  ListOptions lo;
  lo.field_selector = "regarding.name=" + name;
  auto list = c.List(Events(), ns, lo);
  EXPECT_TRUE(list.ok()) << list.status();
  if (!list.ok()) return {};
  return (*list)["items"].get<std::vector<Object>>();
}

TEST_F(EventRecorderTest, RepeatsJoinASeriesWithinTheWindow) {
  auto client = PlaneClient(*plane());
  ASSERT_NE(client, nullptr);
  auto cm = client->Create(ConfigMaps(), "default", ConfigMap("default", "subject"));
  ASSERT_TRUE(cm.ok()) << cm.status();
  Object regarding = *cm;
  regarding["apiVersion"] = "v1";
  regarding["kind"] = "ConfigMap";

  FakeClock clock;
  EventRecorderOptions opts;
  opts.reporting_instance = "test-0";
  EventRecorder rec(client.get(), opts, &clock);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        rec.Record(regarding, EventType::kWarning, "BackOff", "Retrying", "profile failed").ok());
    clock.Advance(std::chrono::seconds(10));
  }
  ASSERT_TRUE(rec.Record(regarding, EventType::kNormal, "Planned", "Plan", "makespan 3h").ok());

  auto events = EventsAbout(*client, "default", "subject");
  ASSERT_EQ(events.size(), 2u);
  const Object* backoff = nullptr;
  for (const auto& e : events)
    if (e.value("reason", "") == "BackOff") backoff = &e;
  ASSERT_NE(backoff, nullptr);
  EXPECT_EQ((*backoff)["type"], "Warning");
  EXPECT_EQ((*backoff)["regarding"]["uid"], (*cm)["metadata"]["uid"]);
  EXPECT_EQ((*backoff)["reportingController"], "orrery.dev/operator");
  EXPECT_EQ((*backoff)["series"]["count"], 3);

  // After the window, the same event starts a new object.
  clock.Advance(std::chrono::minutes(7));
  ASSERT_TRUE(
      rec.Record(regarding, EventType::kWarning, "BackOff", "Retrying", "profile failed").ok());
  EXPECT_EQ(EventsAbout(*client, "default", "subject").size(), 3u);

  EXPECT_EQ(rec.Record(Object::object(), EventType::kNormal, "R", "A", "n").code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace orrery::kube
