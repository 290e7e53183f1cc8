// The progress display: bars, durations, and the two output modes.
#include "operator/local/progress.h"

#include <sstream>

#include <gtest/gtest.h>

namespace orrery::local {
namespace {

TEST(FormatDuration, MinutesAndHours) {
  EXPECT_EQ(FormatDuration(7), "0:07");
  EXPECT_EQ(FormatDuration(245), "4:05");
  EXPECT_EQ(FormatDuration(3909), "1:05:09");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(ProgressLine, ShowsStepsLossRateAndEta) {
  TaskProgress t{"tiny-gpt-lr-1e-3", "running", "ddp×2", 50, 200, 2.5, 640, 12};
  std::string line = ProgressLine(t, 20, 10, false);
  EXPECT_EQ(line.rfind("tiny-gpt-lr-1e-3     [##........]  25% 50/200", 0), 0u) << line;
  EXPECT_NE(line.find("loss 2.500"), std::string::npos);
  EXPECT_NE(line.find("640 samples/s"), std::string::npos);
  EXPECT_NE(line.find("ETA 0:12"), std::string::npos);
  EXPECT_NE(line.find("running ddp×2"), std::string::npos);
  t.state = "pending";
  line = ProgressLine(t, 0, 10, false);
  EXPECT_EQ(line.find("samples/s"), std::string::npos);
}

TEST(ProgressDisplay, PipedOutputPrintsEachTenthOnce) {
  std::ostringstream os;
  ProgressDisplay d(os, /*tty=*/false);
  std::vector<TaskProgress> tasks = {{"a", "running", "", 0, 100, 0, 0, -1}};
  for (int step = 0; step <= 100; step += 5) {
    tasks[0].step = step;
    d.Update(step, tasks, 50);
  }
  std::string out = os.str();
  EXPECT_EQ(out.find("\x1b["), std::string::npos);  // no terminal codes in a file
  int lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 11);  // 0%, 10%, ..., 100%
  d.Event(3.5, "plan 1 adopted");
  EXPECT_NE(os.str().find("[    3.5s] plan 1 adopted"), std::string::npos);
}

TEST(ProgressDisplay, TerminalRedrawsInPlace) {
  std::ostringstream os;
  ProgressDisplay d(os, /*tty=*/true);
  std::vector<TaskProgress> tasks = {{"a", "running", "", 1, 10, 0, 0, -1},
                                     {"b", "pending", "", 0, 10, 0, 0, -1}};
  d.Update(1, tasks, 5);
  d.Update(2, tasks, 5);
  // The second draw moves up over the first's 3 lines (2 bars, 1 summary).
  EXPECT_NE(os.str().find("\x1b[3A\x1b[J"), std::string::npos);
  EXPECT_NE(os.str().find("plan finishes at 0:05"), std::string::npos);
}

}  // namespace
}  // namespace orrery::local
