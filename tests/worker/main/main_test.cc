// orrery-worker as a process: two ranks meeting through a file store, SIGTERM
// checkpointing before exit (and the checkpoint subcommand reading it), a
// killed rank making its peer fail fast, /metrics served while it trains, a
// gang of two tasks stopped and resumed, and usage errors.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "tests/worker/dist/run_ranks.h"
#include "tests/worker/main/child.h"
#include "tests/worker/train/scrape.h"

namespace {

using Json = nlohmann::json;
using orrery::testing_worker::Child;
using orrery::testing_worker::RankEnv;
using orrery::testing_worker::TempDir;

const std::vector<std::string> kTiny = {"--model=gpt", "--layers=2",      "--hidden=32",
                                        "--heads=4",   "--seq=16",        "--vocab=64",
                                        "--batch=8",   "--report-every=1"};

// The subcommand and its flags, then the tiny model's flags.
std::vector<std::string> With(const std::vector<std::string>& model,
                              std::vector<std::string> command) {
  command.insert(command.end(), model.begin(), model.end());
  return command;
}

TEST(WorkerBinaryTest, TwoRanksTrainWithDdp) {
  TempDir dir;
  auto args = With(kTiny, {"train", "--template=ddp", "--steps=3"});
  Child r0(args, RankEnv(dir.path() + "/store", 0, 2));
  Child r1(args, RankEnv(dir.path() + "/store", 1, 2));
  auto lines = r0.ReadAll();
  EXPECT_TRUE(r1.ReadAll().empty());  // only rank 0 reports
  EXPECT_EQ(r0.Wait(), 0);
  EXPECT_EQ(r1.Wait(), 0);
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines.front()["layout"], "dp=2,tp=1,pp=1");
  EXPECT_EQ(lines.back()["event"], "done");
  EXPECT_EQ(lines.back()["status"], "completed");
  EXPECT_EQ(lines.back()["step"], 3);
}

TEST(WorkerBinaryTest, SigtermCheckpointsBeforeExit) {
  TempDir dir;
  std::string ckpt = dir.path() + "/ckpt";
  Child w(With(kTiny, {"train", "--steps=1000000", "--checkpoint-dir=" + ckpt}), {});
  ASSERT_EQ(Json::parse(w.ReadLine())["event"], "start");
  ASSERT_EQ(Json::parse(w.ReadLine())["event"], "progress");
  w.Signal(SIGTERM);
  auto rest = w.ReadAll();
  EXPECT_EQ(w.Wait(), 0);
  ASSERT_GE(rest.size(), 2u);
  const Json& saved = rest[rest.size() - 2];
  EXPECT_EQ(saved["event"], "checkpoint");
  EXPECT_EQ(saved["reason"], "signal");
  EXPECT_EQ(rest.back()["status"], "preempted");
  EXPECT_EQ(rest.back()["checkpoint"], saved["path"]);
  // The checkpoint subcommand reads what was written.
  Child inspect({"checkpoint", "inspect", saved["path"].get<std::string>()}, {});
  while (!inspect.ReadLine(30).empty()) {
  }
  EXPECT_EQ(inspect.Wait(), 0);
}

TEST(WorkerBinaryTest, AKilledRankMakesItsPeerFailFast) {
  TempDir dir;
  auto args = With(kTiny, {"train", "--template=ddp", "--steps=1000000"});
  Child r0(args, RankEnv(dir.path() + "/store", 0, 2));
  Child r1(args, RankEnv(dir.path() + "/store", 1, 2));
  ASSERT_EQ(Json::parse(r0.ReadLine())["event"], "start");
  ASSERT_EQ(Json::parse(r0.ReadLine())["event"], "progress");
  auto killed_at = std::chrono::steady_clock::now();
  r1.Signal(SIGKILL);
  std::vector<Json> rest = r0.ReadAll(60);
  int code = r0.Wait();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(code, 1);
  EXPECT_LT(seconds, 20.0);  // far below the 60 s communicator timeout
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back()["status"], "failed");
  EXPECT_NE(rest.back()["error"].get<std::string>().find("UNAVAILABLE"), std::string::npos)
      << rest.back().dump();
}

TEST(WorkerBinaryTest, ServesMetricsWhileTraining) {
  TempDir dir;
  Child w(With(kTiny, {"train", "--steps=1000000", "--checkpoint-dir=" + dir.path() + "/ckpt",
                       "--task=lr-3e-4"}),
          {"ORRERY_METRICS_ADDRESS=127.0.0.1:0", "ORRERY_MSJ=ns/sweep", "ORRERY_TASK=ignored"});
  Json announced = Json::parse(w.ReadLine());
  ASSERT_EQ(announced["event"], "metrics") << announced.dump();
  const std::string address = announced["address"];
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  const int port = std::stoi(address.substr(address.find(':') + 1));
  ASSERT_EQ(Json::parse(w.ReadLine())["event"], "start");
  for (int step = 1; step <= 3; ++step) ASSERT_EQ(Json::parse(w.ReadLine())["step"], step);

  auto text = orrery::testing_worker::ScrapeMetrics(port);
  ASSERT_TRUE(text.ok()) << text.status();
  auto samples = orrery::testing_worker::ParseExposition(*text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  const std::map<std::string, std::string> task = {{"msj", "ns/sweep"}, {"task", "lr-3e-4"}},
                                           rank0 = {{"msj", "ns/sweep"},
                                                    {"task", "lr-3e-4"},
                                                    {"rank", "0"}};
  // Training goes on while the scrape runs: at least what the progress showed.
  EXPECT_GE(orrery::testing_worker::ValueOf(*samples, "orrery_worker_step", task).value_or(0), 3);
  EXPECT_GE(
      orrery::testing_worker::ValueOf(*samples, "orrery_worker_samples_total", rank0).value_or(0),
      3 * 8);
  EXPECT_TRUE(orrery::testing_worker::ValueOf(*samples, "orrery_worker_loss", task).has_value());
  EXPECT_TRUE(orrery::testing_worker::Select(*samples, "orrery_worker_step", {{"task", "ignored"}})
                  .empty());

  w.Signal(SIGTERM);
  auto rest = w.ReadAll();
  EXPECT_EQ(w.Wait(), 0);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back()["status"], "preempted");
}

// Two spilled MLPs in one gang process (worker/train/gang.h): SIGTERM
// checkpoints each in its own directory, and the gang started again resumes
// each from its own step.
std::vector<std::string> GangArgs(const std::string& dir, int64_t steps) {
  std::vector<std::string> args = {"gang", "--spill-budget-bytes=120000"};
  for (const auto& [name, width] : {std::pair<std::string, std::string>{"a", "64"}, {"b", "96"}}) {
    for (const std::string& a :
         {std::string("--"), "--task=" + name, std::string("--model=mlp"),
          std::string("--mlp-input=32"), "--mlp-hidden=" + width, std::string("--mlp-layers=4"),
          std::string("--classes=10"), std::string("--batch=8"), std::string("--report-every=1"),
          "--steps=" + std::to_string(steps), "--checkpoint-dir=" + dir + "/" + name})
      args.push_back(a);
  }
  return args;
}

TEST(WorkerBinaryTest, SigtermCheckpointsEveryGangTaskAndEachResumes) {
  TempDir dir;
  Child w(GangArgs(dir.path(), 1000000), {});
  std::set<std::string> progressed;
  while (progressed.size() < 2) {
    const std::string line = w.ReadLine();
    ASSERT_FALSE(line.empty());
    const Json j = Json::parse(line);
    if (j["event"] == "progress") progressed.insert(j["task"].get<std::string>());
  }
  w.Signal(SIGTERM);
  std::map<std::string, int64_t> stopped;
  for (const Json& j : w.ReadAll()) {
    if (j["event"] == "checkpoint") {
      EXPECT_EQ(j["reason"], "signal") << j.dump();
    }
    if (j["event"] != "done") continue;
    EXPECT_EQ(j["status"], "preempted") << j.dump();
    EXPECT_NE(
        j["checkpoint"].get<std::string>().find(dir.path() + "/" + j["task"].get<std::string>()),
        std::string::npos);
    stopped[j["task"]] = j["step"];
  }
  EXPECT_EQ(w.Wait(), 0);
  ASSERT_EQ(stopped.size(), 2u);
  // Started again, to two steps past the later of the two.
  const int64_t steps = std::max(stopped["a"], stopped["b"]) + 2;
  Child again(GangArgs(dir.path(), steps), {});
  std::map<std::string, int64_t> restored, done;
  for (const Json& j : again.ReadAll()) {
    if (j["event"] == "restore") restored[j["task"]] = j["step"];
    if (j["event"] == "done" && j["status"] == "completed") done[j["task"]] = j["step"];
  }
  EXPECT_EQ(again.Wait(), 0);
  EXPECT_EQ(restored, stopped);
  EXPECT_EQ(done, (std::map<std::string, int64_t>{{"a", steps}, {"b", steps}}));
}

TEST(WorkerBinaryTest, UsageErrors) {
  Child none({"fly"}, {});
  EXPECT_EQ(none.Wait(), 2);
  Child bad({"train", "--warp=9"}, {});
  EXPECT_EQ(bad.Wait(), 2);
  Child lone_gang({"gang", "--spill-budget-bytes=4096", "--", "--task=a"}, {});
  EXPECT_EQ(lone_gang.Wait(), 2);  // a gang of one
  Child no_port({"train", "--metrics-address=localhost"}, {});
  EXPECT_EQ(no_port.Wait(), 1);
}

}  // namespace
