// The subcommand registry.
#include "operator/cli/commands.h"

#include <sstream>

#include <gtest/gtest.h>

namespace orrery::cli {
namespace {

int RunEcho(Invocation& in) {
  for (const auto& a : in.args) in.out << a << ";";
  return 7;
}

ORRERY_CLI_COMMAND(zz_echo, "zz_echo ARGS", "Echo for tests", RunEcho);

TEST(CommandsTest, SelfRegisteredCommandIsFoundAndRuns) {
  const Command* c = FindCommand("zz_echo");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->summary, "Echo for tests");
  std::ostringstream out, err;
  Invocation in{{"a", "b"}, out, err};
  EXPECT_EQ(c->run(in), 7);
  EXPECT_EQ(out.str(), "a;b;");
  EXPECT_EQ(FindCommand("nope"), nullptr);
}

TEST(CommandsTest, CommandsAreSortedByName) {
  RegisterCommand({"aa_first", "aa_first", "x", [](Invocation&) { return 0; }});
  auto all = Commands();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all.front()->name, "aa_first");
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1]->name, all[i]->name);
}

TEST(CommandsTest, WantsHelp) {
  EXPECT_TRUE(WantsHelp({"x", "--help"}));
  EXPECT_TRUE(WantsHelp({"-h"}));
  EXPECT_FALSE(WantsHelp({"help"}));
}

}  // namespace
}  // namespace orrery::cli
