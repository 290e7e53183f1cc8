// Runs Debian's Prometheus for a test. The process gets its own session so it can
// be killed as a group, and a PR_SET_PDEATHSIG so it dies with the test process.
#include "tests/testing/prometheus.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "tests/testing/control_plane.h"

namespace orrery::testing {
namespace {

namespace fs = std::filesystem;

// A free port chosen by the kernel; the tiny race until Prometheus binds it is
// acceptable for tests (a clash fails loudly at readiness).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

void ReplaceAll(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
}

}  // namespace

StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(
    const std::vector<std::string>& targets, const std::vector<SecureTarget>& secure) {
  if (!fs::exists("/usr/bin/prometheus")) {
    return NotFoundError("prometheus not found; run scripts/setup (Debian package prometheus)");
  }
  std::unique_ptr<PrometheusServer> p(new PrometheusServer());
  const char* tmp = std::getenv("TMPDIR");
  p->dir_ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/orrery-prometheus-" +
            std::to_string(getpid()) + "-" + std::to_string(std::random_device{}());
  fs::create_directories(p->dir_ + "/data");
  {
    std::ofstream cfg(p->dir_ + "/prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n";
    if (!targets.empty()) {
      cfg << "  - job_name: orrery\n    static_configs:\n      - targets: [";
      for (size_t i = 0; i < targets.size(); ++i) {
        cfg << (i ? ", " : "") << '"' << targets[i] << '"';
      }
      cfg << "]\n";
    }
    // One job per secure target: each has its own token file.
    for (size_t i = 0; i < secure.size(); ++i) {
      const std::string token_file = p->dir_ + "/token-" + std::to_string(i);
      std::ofstream(token_file) << secure[i].token;
      cfg << "  - job_name: orrery-secure-" << i << "\n    scheme: https\n"
          << "    tls_config: {insecure_skip_verify: true}\n"
          << "    authorization: {type: Bearer, credentials_file: " << token_file << "}\n"
          << "    static_configs:\n      - targets: [\"" << secure[i].address << "\"]\n";
    }
  }
  p->port_ = FreePort();
  if (p->port_ == 0) return UnavailableError("no free port for prometheus");
  const std::string config = p->dir_ + "/prometheus.yml";
  const std::string data = "--storage.tsdb.path=" + p->dir_ + "/data";
  const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(p->port_);
  const std::string log = p->dir_ + "/prometheus.log";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return InternalError("fork failed");
  if (pid == 0) {
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(1);
    const std::string config_flag = "--config.file=" + config;
    execl("/usr/bin/prometheus", "prometheus", config_flag.c_str(), data.c_str(), listen.c_str(),
          "--web.enable-lifecycle", static_cast<char*>(nullptr));
    _exit(127);
  }
  p->pid_ = pid;
  const std::string ready = "curl -sf http://127.0.0.1:" + std::to_string(p->port_) + "/-/ready";
  for (int i = 0; i < 300; ++i) {
    if (RunCommand(ready).exit_code == 0) return p;
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      p->pid_ = -1;
      return UnavailableError("prometheus exited: " + RunCommand("tail -n 5 " + log).output);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceededError("prometheus not ready after 30 s");
}

PrometheusServer::~PrometheusServer() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, WNOHANG);
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

StatusOr<nlohmann::json> PrometheusServer::Query(const std::string& promql) const {
  std::string quoted = promql;
  ReplaceAll(quoted, "'", "'\\''");
  const CommandResult r =
      RunCommand("curl -s --data-urlencode 'query=" + quoted +
                 "' http://127.0.0.1:" + std::to_string(port_) + "/api/v1/query");
  if (r.exit_code != 0) return UnavailableError("query failed: " + r.output);
  nlohmann::json answer = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded()) return InternalError("prometheus answered non-JSON: " + r.output);
  if (answer.value("status", "") != "success") {
    return InvalidArgumentError(promql + ": " + answer.value("error", r.output));
  }
  return answer["data"];
}

Status PrometheusServer::WaitForScrapes(int scrapes, int timeout_seconds) const {
  for (int i = 0; i < timeout_seconds * 10; ++i) {
    auto up = Query("min(count_over_time(up[1h]))");
    auto down = Query("sum(1 - up)");
    if (up.ok() && down.ok() && !(*up)["result"].empty() && !(*down)["result"].empty() &&
        std::stod((*up)["result"][0]["value"][1].get<std::string>()) >= scrapes &&
        std::stod((*down)["result"][0]["value"][1].get<std::string>()) == 0) {
      return OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceededError("targets not scraped " + std::to_string(scrapes) + " times");
}

std::vector<std::string> DashboardQueries(const nlohmann::json& dashboard) {
  std::vector<std::string> out;
  for (const auto& panel : dashboard.value("panels", nlohmann::json::array())) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      std::string expr = target.value("expr", "");
      if (expr.empty()) continue;
      ReplaceAll(expr, "=~\"$msj\"", "=~\".*\"");
      ReplaceAll(expr, "$__rate_interval", "1m");
      out.push_back(expr);
    }
  }
  return out;
}

}  // namespace orrery::testing
