#include "operator/controller/progress.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "operator/controller/gang.h"
#include "operator/controller/names.h"
#include "operator/kube/client.h"
#include "operator/kube/controller.h"

namespace orrery::controller {

namespace {

// The labels of a sample line from its '{' (`at`); sets `end` past the '}'.
// Escapes in values (\\, \", \n) are undone. nullopt when malformed.
std::optional<std::map<std::string, std::string>> Labels(const std::string& line, size_t at,
                                                         size_t* end) {
  std::map<std::string, std::string> labels;
  size_t i = at + 1;
  while (i < line.size() && line[i] != '}') {
    if (line[i] == ',' || line[i] == ' ') {
      ++i;
      continue;
    }
    size_t eq = line.find('=', i);
    if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
      return std::nullopt;
    std::string key = line.substr(i, eq - i);
    std::string value;
    size_t j = eq + 2;
    for (; j < line.size() && line[j] != '"'; ++j) {
      if (line[j] == '\\' && j + 1 < line.size()) {
        ++j;
        value += line[j] == 'n' ? '\n' : line[j];
      } else {
        value += line[j];
      }
    }
    if (j >= line.size()) return std::nullopt;
    labels[key] = value;
    i = j + 1;
  }
  if (i >= line.size()) return std::nullopt;
  *end = i + 1;
  return labels;
}

// The value of the first sample of `family` in a text exposition whose labels
// include every pair of `want`, if any; its labels into `found` when given.
std::optional<double> Sample(const std::string& text, const std::string& family,
                             const std::map<std::string, std::string>& want = {},
                             std::map<std::string, std::string>* found = nullptr) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, family.size(), family) != 0) continue;
    size_t after = family.size();
    if (after < line.size() && line[after] != '{' && line[after] != ' ') continue;  // a longer name
    size_t value_at = after;
    if (after < line.size() && line[after] == '{') {
      auto labels = Labels(line, after, &value_at);
      if (!labels) continue;
      bool match = true;
      for (const auto& [k, v] : want) {
        auto it = labels->find(k);
        match = match && it != labels->end() && it->second == v;
      }
      if (!match) continue;
      if (found != nullptr) *found = std::move(*labels);
    } else if (!want.empty()) {
      continue;
    }
    value_at = line.find(' ', value_at);
    if (value_at == std::string::npos) continue;
    try {
      return std::stod(line.substr(value_at + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

int64_t Int(const std::optional<double>& v, int64_t fallback) {
  return v ? static_cast<int64_t>(std::llround(*v)) : fallback;
}

// One operation's series: op is "save" or "load".
StateIoProgress StateIo(const std::string& text, const char* op) {
  StateIoProgress io;
  const std::string duration = "orrery_worker_checkpoint_duration_seconds";
  io.count = Int(Sample(text, duration + "_count", {{"op", op}}), 0);
  io.seconds_total = Sample(text, duration + "_sum", {{"op", op}}).value_or(0);
  if (io.count == 1) io.last_seconds = io.seconds_total;
  // The gang's sums, which rank 0 exports; else rank 0's own series (the only
  // rank its process serves).
  const std::string gang = "orrery_worker_checkpoint_gang_bytes";
  const std::string rank = "orrery_worker_checkpoint_rank_bytes";
  io.whole_gang = Sample(text, gang, {{"op", op}, {"kind", "moved"}}).has_value();
  const std::string& bytes = io.whole_gang ? gang : rank;
  io.bytes_moved = Int(Sample(text, bytes, {{"op", op}, {"kind", "moved"}}), -1);
  io.bytes_needed = Int(Sample(text, bytes, {{"op", op}, {"kind", "needed"}}), -1);
  io.peak_rss_bytes = Int(Sample(text,
                                 io.whole_gang ? "orrery_worker_checkpoint_gang_peak_rss_bytes"
                                               : "orrery_worker_checkpoint_peak_rss_bytes",
                                 {{"op", op}}),
                          -1);
  return io;
}

}  // namespace

std::optional<TaskProgress> ParseWorkerMetrics(const std::string& text) {
  std::optional<double> step = Sample(text, "orrery_worker_step");
  if (!step) return std::nullopt;
  TaskProgress p;
  p.step = Int(step, 0);
  std::optional<double> ckpt = Sample(text, "orrery_worker_checkpoint_step");
  p.checkpoint_step = ckpt && *ckpt >= 0 ? Int(ckpt, -1) : -1;
  std::optional<double> samples = Sample(text, "orrery_worker_checkpoint_samples");
  p.checkpoint_samples = p.checkpoint_step >= 0 && samples && *samples > 0 ? Int(samples, 0) : 0;
  p.samples_per_second = Sample(text, "orrery_worker_samples_per_second").value_or(0);
  if (std::optional<double> loss = Sample(text, "orrery_worker_loss")) {
    p.loss = *loss;
    p.has_loss = true;
  }
  p.save = StateIo(text, "save");
  p.load = StateIo(text, "load");
  std::map<std::string, std::string> restore;
  if (Sample(text, "orrery_worker_restore_info", {}, &restore)) {
    p.restore_from_layout = restore["from_layout"];
    p.restore_layout = restore["layout"];
  }
  // Until the gang's first save the checkpoint gauge is the one it loaded.
  if (p.load.count > 0 && p.save.count == 0) p.restore_step = p.checkpoint_step;
  return p;
}

void CarryOver(const TaskProgress& previous, TaskProgress* next) {
  if (previous.generation != next->generation) return;
  for (auto [before, now] :
       {std::pair{&previous.save, &next->save}, std::pair{&previous.load, &next->load}}) {
    if (now->last_seconds >= 0) continue;
    if (now->count == before->count) {
      now->last_seconds = before->last_seconds;
    } else if (now->count == before->count + 1) {
      now->last_seconds = std::max(0.0, now->seconds_total - before->seconds_total);
    }
  }
  if (next->restore_step < 0) next->restore_step = previous.restore_step;
}

std::optional<api::CheckpointRef> LastCheckpoint(const std::optional<api::CheckpointRef>& last,
                                                 const TaskProgress& p, const std::string& path,
                                                 const std::string& now) {
  if (p.checkpoint_step < 0) return last;
  api::CheckpointRef ref;
  if (last && last->step == p.checkpoint_step) {
    ref = *last;
    if (p.checkpoint_samples > 0) ref.samples = p.checkpoint_samples;
  } else {
    ref.step = p.checkpoint_step;
    ref.samples = p.checkpoint_samples;
    ref.path = path;
    ref.time = now;
  }
  // Saves come after the gang's load, so its latest save wrote this checkpoint.
  if (p.save.count > 0) {
    if (p.save.last_seconds >= 0) ref.seconds = p.save.last_seconds;
    if (p.save.bytes_moved >= 0) ref.bytes_written = p.save.bytes_moved;
    if (p.save.bytes_needed >= 0) ref.bytes_needed = p.save.bytes_needed;
    if (p.save.peak_rss_bytes >= 0) ref.peak_rss_bytes = p.save.peak_rss_bytes;
  }
  if (last && *last == ref) return last;
  return ref;
}

std::optional<api::RestoreRef> LastRestore(const std::optional<api::RestoreRef>& last,
                                           const TaskProgress& p, const std::string& now) {
  if (p.load.count == 0) return last;
  api::RestoreRef ref;
  if (last && last->generation == p.generation) {
    ref = *last;
  } else {
    ref.generation = p.generation;
    ref.time = now;
  }
  if (p.restore_step >= 0) ref.step = p.restore_step;
  if (p.load.last_seconds >= 0) ref.seconds = p.load.last_seconds;
  if (p.load.bytes_moved >= 0) ref.bytes_read = p.load.bytes_moved;
  if (p.load.bytes_needed >= 0) ref.bytes_needed = p.load.bytes_needed;
  if (p.load.peak_rss_bytes >= 0) ref.peak_rss_bytes = p.load.peak_rss_bytes;
  if (!p.restore_layout.empty()) {
    ref.from_layout = p.restore_from_layout;
    ref.layout = p.restore_layout;
  }
  return ref;
}

StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                              int timeout_ms) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("not an IPv4 address: " + host);
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    return static_cast<int>(ms > 0 ? ms : 0);
  };
  std::string where = host + ":" + std::to_string(port) + path;
  auto fail = [&](const std::string& what) {
    ::close(fd);
    return UnavailableError("GET " + where + ": " + what);
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    return fail(std::strerror(errno));
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, left()) <= 0) return fail("connect timed out");
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return fail(std::strerror(err));
  std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) {
      pollfd w{fd, POLLOUT, 0};
      if (::poll(&w, 1, left()) <= 0) return fail("send timed out");
      continue;
    }
    if (n <= 0) return fail("send failed");
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[8192];
  while (true) {
    pollfd r{fd, POLLIN, 0};
    if (::poll(&r, 1, left()) <= 0) return fail("read timed out");
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EAGAIN) continue;
    if (n < 0) return fail(std::strerror(errno));
    if (n == 0) break;
    response.append(buffer, static_cast<size_t>(n));
    if (response.size() > (16u << 20)) return fail("answer over 16 MiB");
  }
  ::close(fd);
  size_t head_end = response.find("\r\n\r\n");
  if (response.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    return UnavailableError("GET " + where + ": not an HTTP answer");
  }
  size_t sp = response.find(' ');
  std::string code = response.substr(sp + 1, 3);
  if (code != "200") return UnavailableError("GET " + where + ": HTTP " + code);
  return response.substr(head_end + 4);
}

bool ProgressBoard::Set(const std::string& job, const std::string& task, const TaskProgress& p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& tasks = by_job_[job];
  auto it = tasks.find(task);
  if (it != tasks.end() && it->second == p) return false;
  tasks[task] = p;
  return true;
}

std::optional<TaskProgress> ProgressBoard::Get(const std::string& job,
                                               const std::string& task) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto j = by_job_.find(job);
  if (j == by_job_.end()) return std::nullopt;
  auto t = j->second.find(task);
  if (t == j->second.end()) return std::nullopt;
  return t->second;
}

std::map<std::string, TaskProgress> ProgressBoard::ForJob(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_job_.find(job);
  return it == by_job_.end() ? std::map<std::string, TaskProgress>{} : it->second;
}

void ProgressBoard::ForgetJob(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  by_job_.erase(job);
}

ProgressScraper::ProgressScraper(const kube::Store* pods, ProgressBoard* board,
                                 std::function<void(const std::string&)> on_change,
                                 ProgressScraperOptions options)
    : pods_(pods), board_(board), on_change_(std::move(on_change)), options_(options) {}

ProgressScraper::~ProgressScraper() { Stop(); }

void ProgressScraper::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void ProgressScraper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressScraper::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    ScrapeOnce();
    lock.lock();
    cv_.wait_for(lock, options_.period, [this] { return stop_; });
  }
}

void ProgressScraper::ScrapeOnce() {
  for (const kube::ObjectPtr& pod : pods_->List()) {
    const kube::Object& meta = (*pod)["metadata"];
    const kube::Object labels = meta.value("labels", kube::Object::object());
    if (labels.value(kManagedByLabel, "") != kManagedByValue) continue;
    if (!labels.contains(kGangLabel) || labels.value(kRankLabel, "") != "0") continue;
    if ((*pod)["status"].value("phase", "") != "Running") continue;
    std::string ip = (*pod)["status"].value("podIP", "");
    if (ip.empty()) continue;
    std::string job = kube::ControllerOwnerKey(*pod, "ModelSelectionJob");
    if (job.empty()) continue;
    int port = options_.port;
    if (port == 0) {
      for (const kube::Object& c : (*pod)["spec"].value("containers", kube::Object::array())) {
        for (const kube::Object& p : c.value("ports", kube::Object::array())) {
          if (p.value("name", "") == "metrics") port = p.value("containerPort", 0);
        }
      }
    }
    if (port == 0) continue;
    auto body = HttpGet(ip, port, "/metrics", options_.timeout_ms);
    if (!body.ok()) continue;  // not serving yet, or gone: the next pass tries again
    std::optional<TaskProgress> progress = ParseWorkerMetrics(*body);
    if (!progress) continue;
    const kube::Object annotations = meta.value("annotations", kube::Object::object());
    try {
      progress->generation = std::stoi(annotations.value(kGenerationAnnotation, "0"));
    } catch (const std::exception&) {
      progress->generation = 0;
    }
    const std::string task = labels.value(kTaskLabel, "");
    if (std::optional<TaskProgress> previous = board_->Get(job, task)) {
      CarryOver(*previous, &*progress);
    }
    if (board_->Set(job, task, *progress) && on_change_) on_change_(job);
  }
}

}  // namespace orrery::controller
