// The engine's Profile action (engine/profile_step.h): which trials start now
// and where, without any world.
#include "operator/engine/profile_step.h"

#include <gtest/gtest.h>

#include "operator/engine/journal.h"

namespace orrery::engine {
namespace {

ProfileWant Want(const std::string& task, const std::string& key, int gpus,
                 std::vector<std::string> types = {}) {
  return {task, key, key, gpus, std::move(types)};
}

std::vector<std::string> Keys(const ProfileStep& step) {
  std::vector<std::string> keys;
  for (const ProfileAction& a : step.start) keys.push_back(a.key);
  return keys;
}

TEST(FirstFitPlacementTest, TrialsGoToOneNodeWhenOneHasRoomElseSpreadInOrder) {
  const std::vector<ProfileNode> nodes = {{"a", "", 1}, {"b", "", 3}, {"c", "", 2}};
  EXPECT_EQ(FirstFitPlacement(nodes, 1), (std::vector<std::string>{"a"}));
  EXPECT_EQ(FirstFitPlacement(nodes, 2), (std::vector<std::string>{"b", "b"}));
  EXPECT_EQ(FirstFitPlacement(nodes, 4), (std::vector<std::string>{"a", "b", "b", "b"}));
  EXPECT_TRUE(FirstFitPlacement(nodes, 7).empty());
  EXPECT_TRUE(FirstFitPlacement({{"a", "", -1}}, 1).empty());
  EXPECT_TRUE(FirstFitPlacement(nodes, 0).empty());
}

TEST(StepProfilesTest, EachKeyStartsOnceInTheOrderWantedAndWhatRunsIsNotStartedAgain) {
  ProfileRoom room;
  room.nodes = {{"n1", "", 4}};
  room.running = {"k0"};
  // Two tasks of one signature want the same keys; k0 runs already.
  const std::vector<ProfileWant> wants = {Want("t1", "k0", 1), Want("t1", "k1", 1),
                                          Want("t1", "k2", 2), Want("t2", "k1", 1),
                                          Want("t2", "k2", 2)};
  const ProfileStep step = StepProfiles(wants, room);
  EXPECT_EQ(Keys(step), (std::vector<std::string>{"k1", "k2"}));
  EXPECT_EQ(step.start[0].task, "t1");
  EXPECT_EQ(step.start[1].placement, (std::vector<std::string>{"n1", "n1"}));
  EXPECT_EQ(step.running, 1);
  EXPECT_EQ(step.waiting, 0);
}

TEST(StepProfilesTest, ATrialThatDoesNotFitWaitsWithoutHoldingBackASmallerOne) {
  ProfileRoom room;
  room.nodes = {{"a", "", 1}, {"b", "", 2}};
  const ProfileStep step =
      StepProfiles({Want("t", "x2", 2), Want("t", "x4", 4), Want("t", "x1", 1)}, room);
  // x2 takes b; x4 cannot fit in what is left (1 GPU); x1 takes a.
  EXPECT_EQ(Keys(step), (std::vector<std::string>{"x2", "x1"}));
  EXPECT_EQ(step.start[0].placement, (std::vector<std::string>{"b", "b"}));
  EXPECT_EQ(step.start[1].placement, (std::vector<std::string>{"a"}));
  EXPECT_EQ(step.waiting, 1);
}

TEST(StepProfilesTest, TrialsRunOnlyOnTheirGpuTypes) {
  ProfileRoom room;
  room.nodes = {{"a100-0", "a100", 2}, {"h100-0", "h100", 2}};
  const ProfileStep step =
      StepProfiles({Want("t", "k1", 2, {"h100"}), Want("u", "k2", 1, {"v100"})}, room);
  ASSERT_EQ(Keys(step), (std::vector<std::string>{"k1"}));
  EXPECT_EQ(step.start[0].placement, (std::vector<std::string>{"h100-0", "h100-0"}));
  EXPECT_EQ(step.waiting, 1);  // no v100 node: it waits for one
}

TEST(StepProfilesTest, AKueueAdmissionBoundsAllTrialsTogether) {
  ProfileRoom room;
  room.nodes = {{"a", "", 8}};
  room.budget = 3;
  const ProfileStep step =
      StepProfiles({Want("t", "x2", 2), Want("t", "x2b", 2), Want("t", "x1", 1)}, room);
  EXPECT_EQ(Keys(step), (std::vector<std::string>{"x2", "x1"}));
  EXPECT_EQ(step.waiting, 1);
  room.budget = 0;  // the admission is full: nothing starts
  EXPECT_TRUE(StepProfiles({Want("t", "x1", 1)}, room).start.empty());
}

TEST(StepProfilesTest, AWorldThatRunsOneTrialAtATimeGetsOnePlacedAsIfAlone) {
  ProfileRoom room;
  room.nodes = {{"big", "big", 2}, {"small", "small", 2}};
  room.max_start = 1;
  const std::vector<ProfileWant> wants = {Want("t", "x1", 1), Want("t", "x2", 2)};
  ProfileStep step = StepProfiles(wants, room);
  ASSERT_EQ(Keys(step), (std::vector<std::string>{"x1"}));
  EXPECT_EQ(step.waiting, 1);
  // The next step, after x1 ran: x2 goes to the first node, not the other
  // type it would have taken beside x1.
  step = StepProfiles({wants[1]}, room);
  ASSERT_EQ(Keys(step), (std::vector<std::string>{"x2"}));
  EXPECT_EQ(step.start[0].placement, (std::vector<std::string>{"big", "big"}));
}

TEST(StepProfilesTest, TheJournalHoldsAWorldToTheTrialsTheStepStarted) {
  ProfileRoom room;
  room.nodes = {{"a", "", 1}};
  const ProfileStep step = StepProfiles({Want("t", "ddp x1 b16", 1)}, room);
  ActionJournal journal;
  journal.IssuedProfiles(step, 10);
  journal.Profiling("ddp x1 b16");
  EXPECT_TRUE(journal.violations().empty());
  ASSERT_EQ(journal.profiles().size(), 1u);
  EXPECT_EQ(journal.profiles()[0].kind, "profile");
  EXPECT_EQ(journal.profiles()[0].detail, "ddp x1 b16");
  EXPECT_TRUE(journal.entries().empty());  // launches and stops only
  journal.Profiling("ddp x1 b16");         // once only
  journal.Profiling("ddp x2 b16");         // never issued
  EXPECT_EQ(journal.violations().size(), 2u);
  // A step's trials the world did not start lapse at the next step.
  journal.IssuedProfiles(step, 20);
  journal.IssuedProfiles(ProfileStep{}, 30);
  journal.Profiling("ddp x1 b16");
  EXPECT_EQ(journal.violations().size(), 3u);
}

}  // namespace
}  // namespace orrery::engine
