// The GoogleTest side of the test control plane: it drives e2e/cluster, reads the
// env file the script writes, and ties the plane's life to this process through
// the script's watchdog (--owner), so a crashing test leaves nothing behind.
#include "tests/testing/control_plane.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <sys/wait.h>

#ifndef ORRERY_SOURCE_DIR
#error "ORRERY_SOURCE_DIR must be defined by the build"
#endif

namespace orrery::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string ClusterScript() { return std::string(ORRERY_SOURCE_DIR) + "/e2e/cluster"; }

std::string NewStateDir() {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  std::string base = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  return base + "/orrery-plane-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

}  // namespace

CommandResult RunCommand(const std::string& command, const std::string& input) {
  CommandResult result;
  // The input goes through a temporary file so a large manifest cannot deadlock
  // against a full output pipe.
  char in_path[] = "/tmp/orrery-cmd-in-XXXXXX";
  const int fd = mkstemp(in_path);
  if (fd < 0) {
    result.output = "mkstemp failed";
    return result;
  }
  size_t written = 0;
  while (written < input.size()) {
    const ssize_t n = write(fd, input.data() + written, input.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fd);
  const std::string full = "bash -c " + ShellQuote(command) + " < " + in_path + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) {
    unlink(in_path);
    result.output = "popen failed";
    return result;
  }
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  const int status = pclose(pipe);
  unlink(in_path);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(const ControlPlaneOptions& options) {
  std::unique_ptr<ControlPlane> plane(new ControlPlane());
  plane->dir_ = NewStateDir();
  std::string with;
  auto add = [&with](const char* c) { with += with.empty() ? c : std::string(",") + c; };
  if (options.controller_manager) add("controller-manager");
  if (options.scheduler) add("scheduler");
  if (options.kwok) add("kwok");
  if (options.kueue) add("kueue");
  std::string cmd = ClusterScript() + " up --dir " + ShellQuote(plane->dir_) + " --owner " +
                    std::to_string(getpid());
  if (!with.empty()) cmd += " --with " + with;
  const CommandResult r = RunCommand(cmd);
  if (r.exit_code != 0) {
    plane->stopped_ = true;
    RunCommand(ClusterScript() + " down --dir " + ShellQuote(plane->dir_));
    return UnavailableError("starting the test control plane failed: " + r.output);
  }
  ORRERY_RETURN_IF_ERROR(plane->ReadEnv());
  return plane;
}

Status ControlPlane::ReadEnv() {
  std::ifstream in(dir_ + "/env");
  if (!in) return NotFoundError("no env file in " + dir_);
  std::map<std::string, std::string> env;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  kubeconfig_ = env["KUBECONFIG"];
  server_ = env["ORRERY_SERVER"];
  token_ = env["ORRERY_TOKEN"];
  ca_file_ = env["ORRERY_CA_FILE"];
  bin_dir_ = env["ORRERY_BIN"];
  etcd_ = env["ORRERY_ETCD"];
  if (server_.empty() || token_.empty()) return InternalError("incomplete env file in " + dir_);
  return OkStatus();
}

ControlPlane::~ControlPlane() { (void)Stop(); }

Status ControlPlane::Stop() {
  if (stopped_) return OkStatus();
  stopped_ = true;
  const CommandResult r = RunCommand(ClusterScript() + " down --dir " + ShellQuote(dir_));
  if (r.exit_code != 0) return InternalError("stopping the control plane failed: " + r.output);
  return OkStatus();
}

CommandResult ControlPlane::Kubectl(const std::string& args, const std::string& input) const {
  return RunCommand(
      ShellQuote(bin_dir_ + "/kubectl") + " --kubeconfig " + ShellQuote(kubeconfig_) + " " + args,
      input);
}

CommandResult ControlPlane::WaitEstablished(const std::string& name, int timeout_s) const {
  CommandResult all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(
        deadline - std::chrono::steady_clock::now());
    const CommandResult r =
        Kubectl("wait --for condition=established --timeout=" +
                std::to_string(std::max<int64_t>(1, left.count())) + "s crd/" + ShellQuote(name));
    all.output += r.output;
    all.exit_code = r.exit_code;
    if (r.exit_code == 0 || std::chrono::steady_clock::now() >= deadline) return all;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

Status ControlPlane::RestartApiServer() {
  const CommandResult r =
      RunCommand(ClusterScript() + " restart-apiserver --dir " + ShellQuote(dir_));
  if (r.exit_code != 0) return UnavailableError("restarting kube-apiserver failed: " + r.output);
  return OkStatus();
}

Status ControlPlane::CompactEtcd() {
  const CommandResult r = RunCommand(ClusterScript() + " compact --dir " + ShellQuote(dir_));
  if (r.exit_code != 0) return UnavailableError("etcd compaction failed: " + r.output);
  return OkStatus();
}

std::unique_ptr<ControlPlane> ControlPlaneTest::shared_;
std::string ControlPlaneTest::start_error_;

void ControlPlaneTest::StartShared(const ControlPlaneOptions& options) {
  auto plane = ControlPlane::Start(options);
  if (plane.ok()) {
    shared_ = std::move(plane).value();
    start_error_.clear();
  } else {
    start_error_ = plane.status().ToString();
  }
}

void ControlPlaneTest::StopShared() {
  if (shared_) {
    const Status s = shared_->Stop();
    if (!s.ok()) ADD_FAILURE() << s;
    shared_.reset();
  }
}

}  // namespace orrery::testing
