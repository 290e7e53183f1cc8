// Child processes of the local world: lines read without blocking, exit codes,
// signals, stderr logs, and no child left behind.
#include "operator/local/process.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace orrery::local {
namespace {

std::vector<std::string> ReadAll(Process& p) {
  std::vector<std::string> lines;
  for (int i = 0; i < 500; ++i) {
    for (auto& l : p.ReadLines()) lines.push_back(l);
    if (!p.Running()) {
      for (auto& l : p.ReadLines()) lines.push_back(l);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return lines;
}

TEST(Process, ReadsLinesAndExitCode) {
  auto p =
      Process::Spawn({"/bin/sh", "-c", "echo one; printf 'two\\nthree'; exit 3"}, {}, "", true);
  ASSERT_TRUE(p.ok()) << p.status();
  auto lines = ReadAll(*p);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(p->Poll(), 3);
}

TEST(Process, EnvironmentIsAddedAndStderrLogged) {
  std::string log = ::testing::TempDir() + "/process_test_stderr.log";
  std::filesystem::remove(log);
  auto p = Process::Spawn({"/bin/sh", "-c", "echo \"$ORRERY_X\"; echo oops >&2"},
                          {{"ORRERY_X", "hello"}}, log, true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(ReadAll(*p), (std::vector<std::string>{"hello"}));
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "oops\n");
}

TEST(Process, SignalAndWaitOrKill) {
  auto p = Process::Spawn({"/bin/sh", "-c", "trap 'exit 7' TERM; while :; do sleep 0.05; done"}, {},
                          "", false);
  ASSERT_TRUE(p.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the trap be set
  EXPECT_TRUE(p->Running());
  p->Signal(SIGTERM);
  EXPECT_EQ(p->WaitOrKill(10), 7);
  // A process that ignores SIGTERM is killed when the wait runs out.
  auto stubborn = Process::Spawn({"/bin/sh", "-c", "trap '' TERM; sleep 30"}, {}, "", false);
  ASSERT_TRUE(stubborn.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stubborn->Signal(SIGTERM);
  EXPECT_EQ(stubborn->WaitOrKill(0.3), 128 + SIGKILL);
}

TEST(Process, DestructorKillsARunningChild) {
  pid_t pid = -1;
  {
    auto p = Process::Spawn({"/bin/sleep", "30"}, {}, "", false);
    ASSERT_TRUE(p.ok());
    pid = p->pid();
    EXPECT_EQ(kill(pid, 0), 0);
  }
  EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process
}

TEST(Process, MissingProgramExits127) {
  auto p = Process::Spawn({"/nonexistent/orrery-worker"}, {}, "", true);
  ASSERT_TRUE(p.ok());
  ReadAll(*p);
  EXPECT_EQ(p->Poll(), 127);
}

}  // namespace
}  // namespace orrery::local
