// The `orrery` entry point: help, version, unknown commands.
#include <gtest/gtest.h>

#include "tests/operator/cli/run_orrery.h"

namespace orrery::cli::testing {
namespace {

TEST(MainTest, HelpListsTheCommands) {
  RunResult r = RunOrrery("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* c : {"validate FILE", "expand FILE", "version"}) {
    EXPECT_NE(r.output.find(c), std::string::npos) << c << " in\n" << r.output;
  }
}

TEST(MainTest, NoArgumentsIsAUsageError) {
  RunResult r = RunOrrery("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("Usage: orrery COMMAND"), std::string::npos);
}

TEST(MainTest, Version) {
  for (const char* arg : {"version", "--version"}) {
    RunResult r = RunOrrery(arg);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.output.find("orrery 0."), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("orrery.dev/v1alpha1"), std::string::npos) << r.output;
  }
}

TEST(MainTest, UnknownCommand) {
  RunResult r = RunOrrery("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown command \"frobnicate\""), std::string::npos) << r.output;
}

}  // namespace
}  // namespace orrery::cli::testing
