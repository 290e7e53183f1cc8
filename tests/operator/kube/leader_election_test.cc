// Integration tests of Lease leader election on a real API server: two
// processes contend, the leader is killed with SIGKILL and the other takes over
// within the lease duration (plus the polling granularity); a graceful stop
// releases the lease at once; a leader whose lease is taken stops leading and
// signals its controllers.
#include "operator/kube/leader_election.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <future>
#include <thread>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include "operator/kube/api_error.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"

namespace orrery::kube {
namespace {

using namespace testutil;  // NOLINT(google-build-using-namespace): test helpers
using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyTime = std::chrono::steady_clock::time_point;

// A child process whose stdout lines are collected with their arrival times.
class Contender {
 public:
  Contender(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] {
      std::string pending;
      char buf[256];
      ssize_t n;
      while ((n = read(fd_, buf, sizeof(buf))) > 0) {
        pending.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = pending.find('\n')) != std::string::npos) {
          std::lock_guard<std::mutex> lock(mu_);
          lines_.push_back({pending.substr(0, nl), std::chrono::steady_clock::now()});
          pending.erase(0, nl + 1);
          cv_.notify_all();
        }
      }
    });
  }
  ~Contender() {
    Kill();
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
  }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // Waits until a line starting with `prefix` arrives; returns when it did.
  std::optional<SteadyTime> WaitLine(const std::string& prefix, Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<SteadyTime> at;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& [line, t] : lines_)
        if (line.rfind(prefix, 0) == 0) at = t;
      return at.has_value();
    });
    return at;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, SteadyTime>> lines_;
};

class LeaderElectionTest : public orrery::testing::ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<RestClient> client_;
};

constexpr int kLeaseMs = 3000, kRenewMs = 2000, kRetryMs = 500;

TEST_F(LeaderElectionTest, SecondProcessTakesOverWhenTheLeaderIsKilled) {
  std::string bin = std::string(ORRERY_BINARY_DIR) + "/bin/kube_lease_contender";
  auto args = [&](const std::string& id) {
    return std::vector<std::string>{bin,
                                    plane()->server(),
                                    plane()->ca_file(),
                                    plane()->token(),
                                    "default",
                                    "contended",
                                    id,
                                    std::to_string(kLeaseMs),
                                    std::to_string(kRenewMs),
                                    std::to_string(kRetryMs)};
  };
  auto a = std::make_unique<Contender>(args("a"));
  auto b = std::make_unique<Contender>(args("b"));
  // Exactly one leads.
  std::optional<SteadyTime> a_led, b_led;
  for (int i = 0; i < 200 && !a_led && !b_led; ++i) {
    a_led = a->WaitLine("LEADING", milliseconds(50));
    b_led = b->WaitLine("LEADING", milliseconds(50));
  }
  ASSERT_TRUE(a_led || b_led) << "nobody took the lease";
  std::this_thread::sleep_for(
      milliseconds(2 * kLeaseMs));  // long enough for a wrong second leader to appear
  bool a_leads = a->WaitLine("LEADING", Duration::zero()).has_value();
  bool b_leads = b->WaitLine("LEADING", Duration::zero()).has_value();
  ASSERT_NE(a_leads, b_leads) << "both or neither lead";
  Contender& leader = a_leads ? *a : *b;
  Contender& follower = a_leads ? *b : *a;

  leader.Kill();
  SteadyTime killed = std::chrono::steady_clock::now();
  auto took_over = follower.WaitLine("LEADING", seconds(30));
  ASSERT_TRUE(took_over.has_value()) << "the follower never took over";
  double takeover_s = std::chrono::duration<double>(*took_over - killed).count();
  std::cout << "takeover after SIGKILL: " << takeover_s << " s (lease " << kLeaseMs / 1000.0
            << " s, retry " << kRetryMs / 1000.0 << " s)\n";
  // The follower waits out the lease from when it last saw the record change,
  // which it checks every retry period.
  EXPECT_LE(takeover_s, (kLeaseMs + 2 * kRetryMs) / 1000.0 + 0.5);
  auto lease = client_->Get(Leases(), "default", "contended");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], a_leads ? "b" : "a");
  EXPECT_GE((*lease)["spec"]["leaseTransitions"].get<int>(), 1);
}

LeaderElectionConfig Config(const std::string& lease, const std::string& id) {
  LeaderElectionConfig c;
  c.lease_namespace = "default";
  c.lease_name = lease;
  c.identity = id;
  c.lease_duration = milliseconds(kLeaseMs);
  c.renew_deadline = milliseconds(kRenewMs);
  c.retry_period = milliseconds(kRetryMs);
  return c;
}

TEST_F(LeaderElectionTest, GracefulStopReleasesTheLease) {
  std::promise<void> a_leading;
  LeaderElectionConfig ca = Config("released", "a");
  ca.on_started_leading = [&](std::stop_token) { a_leading.set_value(); };
  LeaderElector a(client_.get(), ca);
  auto a_run = std::async(std::launch::async, [&] { return a.Run(); });
  ASSERT_EQ(a_leading.get_future().wait_for(seconds(10)), std::future_status::ready);

  std::promise<SteadyTime> b_leading;
  LeaderElectionConfig cb = Config("released", "b");
  cb.on_started_leading = [&](std::stop_token) {
    b_leading.set_value(std::chrono::steady_clock::now());
  };
  LeaderElector b(client_.get(), cb);
  auto b_run = std::async(std::launch::async, [&] { return b.Run(); });
  std::this_thread::sleep_for(milliseconds(kRetryMs * 2));
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(b.ObservedLeader(), "a");

  SteadyTime stopped = std::chrono::steady_clock::now();
  a.Stop();
  EXPECT_TRUE(a_run.get().ok());
  auto f = b_leading.get_future();
  ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
  // The released lease (duration 1s) is taken well before a full lease duration.
  EXPECT_LT(std::chrono::duration<double>(f.get() - stopped).count(), kLeaseMs / 1000.0);
  b.Stop();
  EXPECT_TRUE(b_run.get().ok());
}

TEST_F(LeaderElectionTest, LosingTheLeaseStopsTheControllers) {
  std::promise<void> stopped_by_token;
  std::atomic<bool> stopped_leading{false};
  LeaderElectionConfig c = Config("stolen", "victim");
  c.on_started_leading = [&](std::stop_token token) {
    while (!token.stop_requested()) std::this_thread::sleep_for(milliseconds(10));
    stopped_by_token.set_value();
  };
  c.on_stopped_leading = [&] { stopped_leading = true; };
  LeaderElector victim(client_.get(), c);
  auto run = std::async(std::launch::async, [&] { return victim.Run(); });
  ASSERT_TRUE(Eventually([&] { return victim.IsLeader(); }));

  // Someone else writes the lease (as an operator with another identity would
  // after a partition): the victim must notice and stop.
  ASSERT_TRUE(RetryOnConflict([&]() -> Status {
                ORRERY_ASSIGN_OR_RETURN(Object lease, client_->Get(Leases(), "default", "stolen"));
                lease["spec"]["holderIdentity"] = "thief";
                lease["spec"]["leaseDurationSeconds"] = 3600;
                auto r = client_->Update(Leases(), "default", lease);
                return r.ok() ? OkStatus() : r.status();
              }).ok());
  ASSERT_EQ(run.wait_for(seconds(10)), std::future_status::ready);
  Status s = run.get();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;  // lost
  EXPECT_TRUE(stopped_leading.load());
  EXPECT_EQ(stopped_by_token.get_future().wait_for(seconds(1)), std::future_status::ready);
  EXPECT_FALSE(victim.IsLeader());
}

TEST_F(LeaderElectionTest, RejectsInconsistentDurations) {
  LeaderElectionConfig c = Config("bad", "x");
  c.renew_deadline = c.lease_duration;
  LeaderElector e(client_.get(), c);
  EXPECT_EQ(e.Run().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace orrery::kube
