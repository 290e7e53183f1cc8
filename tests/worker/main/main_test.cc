// orrery-worker as a process: two ranks meeting through a file store, SIGTERM
// checkpointing before exit (and the checkpoint subcommand reading it), a
// killed rank making its peer fail fast, /metrics served while it trains, and
// usage errors.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "tests/worker/dist/run_ranks.h"
#include "tests/worker/train/scrape.h"

namespace {

using Json = nlohmann::json;
using orrery::testing_worker::TempDir;

const std::string kBinary = std::string(ORRERY_BINARY_DIR) + "/bin/orrery-worker";

// A child process with its stdout on a pipe.
class Child {
 public:
  Child(std::vector<std::string> args, std::vector<std::string> env) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, 2);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(kBinary.c_str()));
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(kBinary.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The next stdout line, or "" at end of output or after `timeout_s`.
  std::string ReadLine(double timeout_s = 60) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (true) {
      auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) return "";
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  std::vector<Json> ReadAll(double timeout_s = 120) {
    std::vector<Json> lines;
    for (std::string l = ReadLine(timeout_s); !l.empty(); l = ReadLine(timeout_s))
      lines.push_back(Json::parse(l));
    return lines;
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Signal(int sig) { kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

std::vector<std::string> RankEnv(const std::string& store, int rank, int world) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
          "ORRERY_STORE_PATH=" + store, "ORRERY_COMM_TIMEOUT_MS=60000"};
}

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

TEST(WorkerBinaryTest, UsageErrors) {
  Child none({"fly"}, {});
  EXPECT_EQ(none.Wait(), 2);
  Child bad({"train", "--warp=9"}, {});
  EXPECT_EQ(bad.Wait(), 2);
  Child no_port({"train", "--metrics-address=localhost"}, {});
  EXPECT_EQ(no_port.Wait(), 1);
}

}  // namespace
