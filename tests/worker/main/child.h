// Test helper: `orrery-worker` as a child process with its stdout on a pipe,
// read line by line, and the environment that makes it one rank of a gang
// meeting through a file store.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace orrery::testing_worker {

inline const std::string& WorkerBinary() {
  static const std::string* path =
      new std::string(std::string(ORRERY_BINARY_DIR) + "/bin/orrery-worker");
  return *path;
}

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
      argv.push_back(const_cast<char*>(WorkerBinary().c_str()));
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(WorkerBinary().c_str(), argv.data());
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
  std::vector<nlohmann::json> ReadAll(double timeout_s = 120) {
    std::vector<nlohmann::json> lines;
    for (std::string l = ReadLine(timeout_s); !l.empty(); l = ReadLine(timeout_s))
      lines.push_back(nlohmann::json::parse(l));
    return lines;
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Signal(int sig) { kill(pid_, sig); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

inline std::vector<std::string> RankEnv(const std::string& store, int rank, int world) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
          "ORRERY_STORE_PATH=" + store, "ORRERY_COMM_TIMEOUT_MS=60000"};
}

}  // namespace orrery::testing_worker
