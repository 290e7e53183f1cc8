#include "operator/local/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <sys/prctl.h>
#include <sys/wait.h>

extern char** environ;

namespace orrery::local {

StatusOr<Process> Process::Spawn(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& stderr_path, bool capture_stdout) {
  if (argv.empty()) return InvalidArgumentError("no program to start");
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(merged.size());
  for (const auto& [k, v] : merged) {
    std::string kv = k;
    kv.append("=").append(v);
    env_strings.push_back(std::move(kv));
  }
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int err_fd = open(stderr_path.empty() ? "/dev/null" : stderr_path.c_str(),
                    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err_fd < 0) {
    return UnavailableError("cannot open " + stderr_path + ": " + std::strerror(errno));
  }
  int out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  int pipe_fds[2] = {-1, -1};
  if (capture_stdout && pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(err_fd);
    close(out_fd);
    return UnavailableError(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(err_fd);
    close(out_fd);
    if (capture_stdout) {
      close(pipe_fds[0]);
      close(pipe_fds[1]);
    }
    return UnavailableError(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    dup2(capture_stdout ? pipe_fds[1] : out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, STDIN_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;  // the parent may block signals it waits for in a thread
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(args[0], args.data(), envp.data());
    const char msg[] = "orrery: cannot execute the worker\n";
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(err_fd);
  close(out_fd);
  Process p;
  p.pid_ = pid;
  if (capture_stdout) {
    close(pipe_fds[1]);
    p.stdout_fd_ = pipe_fds[0];
    fcntl(p.stdout_fd_, F_SETFL, fcntl(p.stdout_fd_, F_GETFL) | O_NONBLOCK);
  }
  return p;
}

Process::Process(Process&& other) noexcept
    : pid_(other.pid_),
      stdout_fd_(other.stdout_fd_),
      partial_(std::move(other.partial_)),
      status_(other.status_) {
  other.pid_ = -1;
  other.stdout_fd_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    Reset();
    pid_ = other.pid_;
    stdout_fd_ = other.stdout_fd_;
    partial_ = std::move(other.partial_);
    status_ = other.status_;
    other.pid_ = -1;
    other.stdout_fd_ = -1;
  }
  return *this;
}

Process::~Process() { Reset(); }

void Process::Reset() {
  if (pid_ > 0 && !status_) {
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  pid_ = -1;
  stdout_fd_ = -1;
}

std::vector<std::string> Process::ReadLines() {
  std::vector<std::string> lines;
  if (stdout_fd_ < 0) return lines;
  char buf[8192];
  while (true) {
    ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n > 0) {
      partial_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // end of file: the last line may lack its newline
      close(stdout_fd_);
      stdout_fd_ = -1;
      if (!partial_.empty() && partial_.back() != '\n') partial_ += '\n';
    }
    break;
  }
  size_t start = 0, nl;
  while ((nl = partial_.find('\n', start)) != std::string::npos) {
    lines.push_back(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
  return lines;
}

std::optional<int> Process::Poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  return status_;
}

void Process::Signal(int signal) const {
  if (pid_ > 0 && !status_) kill(pid_, signal);
}

int Process::WaitOrKill(double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!Poll()) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, 0);
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return *status_;
}

}  // namespace orrery::local
