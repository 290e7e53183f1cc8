// The real control plane as every integration test uses it: a CRD applied with
// kubectl, an object created through it and watched while it changes, and a
// teardown that leaves no process running, even when the test process dies.
#include "tests/testing/control_plane.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/wait.h>

namespace orrery::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kWidgetCrd[] = R"(apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.orrery.dev
spec:
  group: test.orrery.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
)";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<pid_t> PlanePids(const std::string& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator(dir + "/pids")) {
    pids.push_back(static_cast<pid_t>(std::stol(ReadFile(entry.path().string()))));
  }
  return pids;
}

bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  // A zombie is not running; it only waits for its reaper.
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Polls `pred` every 100 ms for up to `seconds`.
template <typename Pred>
bool Eventually(Pred pred, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

TEST(ControlPlaneTest, AppliesCrdCreatesWatchesAndStopsClean) {
  auto started = ControlPlane::Start();
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<ControlPlane> plane = std::move(started).value();
  const std::vector<pid_t> pids = PlanePids(plane->dir());
  ASSERT_EQ(pids.size(), 2u);  // etcd and kube-apiserver
  for (pid_t pid : pids) EXPECT_TRUE(Alive(pid)) << pid;

  // The server really is an API server we can reach with the generated kubeconfig.
  CommandResult version = plane->Kubectl("version -o json");
  ASSERT_EQ(version.exit_code, 0) << version.output;
  EXPECT_NE(version.output.find("\"gitVersion\": \"v1."), std::string::npos) << version.output;

  CommandResult r = plane->Kubectl("apply -f -", kWidgetCrd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = plane->WaitEstablished("widgets.test.orrery.dev");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Schema validation is the server's: a bad object is refused.
  r = plane->Kubectl("apply -f -",
                     "apiVersion: test.orrery.dev/v1\nkind: Widget\nmetadata: {name: bad}\n"
                     "spec: {size: 0}\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("spec.size"), std::string::npos) << r.output;

  r = plane->Kubectl("apply -f -",
                     "apiVersion: test.orrery.dev/v1\nkind: Widget\nmetadata: {name: w1}\n"
                     "spec: {size: 3}\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Watch the object in the background, change it, and see the change arrive.
  const std::string watch_out = plane->dir() + "/watch.out";
  r = RunCommand("timeout 60 " + plane->bin_dir() + "/kubectl --kubeconfig " + plane->kubeconfig() +
                 " get widget w1 --watch -o jsonpath='{.spec.size}{\"\\n\"}' > " + watch_out +
                 " 2>&1 & echo $!");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const pid_t watcher = static_cast<pid_t>(std::stol(r.output));
  EXPECT_TRUE(Eventually([&] { return ReadFile(watch_out).find("3\n") != std::string::npos; }, 30))
      << ReadFile(watch_out);
  r = plane->Kubectl("patch widget w1 --type=merge -p '{\"spec\":{\"size\":7}}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      Eventually([&] { return ReadFile(watch_out).find("3\n7\n") != std::string::npos; }, 30))
      << ReadFile(watch_out);
  kill(watcher, SIGTERM);

  const std::string dir = plane->dir();
  ASSERT_TRUE(plane->Stop().ok());
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "process " << pid << " left running";
  EXPECT_FALSE(fs::exists(dir));
}

TEST(ControlPlaneTest, WatchdogStopsPlaneWhenOwnerDies) {
  // A child process starts a plane and is killed without tearing it down, as a
  // crashing test would be; the watchdog must stop the plane on its own.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto plane = ControlPlane::Start();
    std::string msg =
        plane.ok() ? (*plane)->dir() + "\n" : "ERROR " + plane.status().ToString() + "\n";
    if (write(fds[1], msg.data(), msg.size()) < 0) _exit(2);
    close(fds[1]);
    pause();  // killed below, never reaching the destructor
    _exit(0);
  }
  close(fds[1]);
  std::string dir;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') dir += c;
  close(fds[0]);
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(dir.rfind("ERROR", 0), std::string::npos) << dir;
  const std::vector<pid_t> pids = PlanePids(dir);
  ASSERT_FALSE(pids.empty());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(Eventually(
      [&] {
        for (pid_t pid : pids) {
          if (Alive(pid)) return false;
        }
        return !fs::exists(dir);
      },
      60))
      << "plane at " << dir << " outlived its owner";
}

TEST(ControlPlaneTest, TwoPlanesRunSideBySide) {
  auto a = ControlPlane::Start();
  auto b = ControlPlane::Start();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)->server(), (*b)->server());
  CommandResult ra = (*a)->Kubectl("create namespace only-in-a");
  ASSERT_EQ(ra.exit_code, 0) << ra.output;
  EXPECT_EQ((*b)->Kubectl("get namespace only-in-a").exit_code, 1);
  EXPECT_TRUE((*a)->Stop().ok());
  EXPECT_TRUE((*b)->Stop().ok());
}

}  // namespace
}  // namespace orrery::testing
