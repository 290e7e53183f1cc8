// Metric definitions, the worker's recorder and the /metrics HTTP server.
#include "common/metrics/metrics.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/stat.h>

namespace orrery::metrics {
const std::vector<MetricDef>& AllMetricDefs() {
  static const auto* defs = new std::vector<MetricDef>{
      {"orrery_reconcile_total",
       MetricKind::kCounter,
       "Reconciles by controller and result (success, error, requeue).",
       {"controller", "result"}},
      {"orrery_reconcile_duration_seconds",
       MetricKind::kHistogram,
       "Time one reconcile took.",
       {"controller"}},
      {"orrery_workqueue_depth", MetricKind::kGauge, "Keys waiting in a work queue.", {"queue"}},
      {"orrery_workqueue_adds_total",
       MetricKind::kCounter,
       "Keys added to a work queue.",
       {"queue"}},
      {"orrery_workqueue_queue_duration_seconds",
       MetricKind::kHistogram,
       "Time a key waited in a work queue before a worker took it.",
       {"queue"}},
      {"orrery_planner_solve_duration_seconds",
       MetricKind::kHistogram,
       "Time the planner took for one plan, by planner.",
       {"planner"}},
      {"orrery_plan_makespan_seconds",
       MetricKind::kGauge,
       "Makespan of the adopted plan, from the time it was made.",
       {"msj"}},
      {"orrery_plan_lower_bound_seconds",
       MetricKind::kGauge,
       "Lower bound on the makespan the planner proved.",
       {"msj"}},
      {"orrery_replans_total",
       MetricKind::kCounter,
       "Re-plans, by whether the new plan was adopted.",
       {"msj", "adopted"}},
      {"orrery_job_gpus_planned",
       MetricKind::kGauge,
       "GPUs the adopted plan gives a job now.",
       {"msj"}},
      {"orrery_job_gpus_held",
       MetricKind::kGauge,
       "GPUs a job's running pods request now.",
       {"msj"}},
      {"orrery_job_gpu_share",
       MetricKind::kGauge,
       "GPUs a job may hold: its share of the cluster-wide allocation across jobs.",
       {"msj"}},
      {"orrery_cluster_gpus",
       MetricKind::kGauge,
       "GPUs in the cluster by state: allocatable, held (by Orrery), idle.",
       {"state"}},
      {"orrery_job_tasks",
       MetricKind::kGauge,
       "Tasks of a job by state (pending, profiling, running, succeeded, failed).",
       {"msj", "state"}},
      {"orrery_jobs", MetricKind::kGauge, "ModelSelectionJobs by phase.", {"phase"}},
      {"orrery_profiling_runs_total",
       MetricKind::kCounter,
       "Profiling trial runs by result (ok, oom, crash, timeout, cached).",
       {"result"}},
      {"orrery_rescales_total",
       MetricKind::kCounter,
       "Task rescales by reason (node_lost, failure, timeout, replan, share, quota).",
       {"msj", "reason"}},
      {"orrery_kube_requests_total",
       MetricKind::kCounter,
       "Requests to the Kubernetes API by verb and HTTP status code.",
       {"verb", "code"}},
      {"orrery_leader",
       MetricKind::kGauge,
       "1 while this operator replica holds the leader lease, else 0.",
       {}},
      {"orrery_worker_step_duration_seconds",
       MetricKind::kHistogram,
       "Time of one training step on one rank.",
       {"msj", "task", "rank"}},
      {"orrery_worker_samples_total",
       MetricKind::kCounter,
       "Samples one rank has trained on.",
       {"msj", "task", "rank"}},
      {"orrery_worker_loss",
       MetricKind::kGauge,
       "Latest training loss of a task.",
       {"msj", "task"}},
      {"orrery_worker_checkpoint_duration_seconds",
       MetricKind::kHistogram,
       "Time to save or load a checkpoint, by operation.",
       {"msj", "task", "op"}},
      {"orrery_worker_checkpoint_bytes",
       MetricKind::kGauge,
       "Size of the task's last committed checkpoint.",
       {"msj", "task"}},
      {"orrery_plan_gap_ratio",
       MetricKind::kGauge,
       "Relative gap between the adopted plan and its lower bound (0 = proven optimal).",
       {"msj"}},
      {"orrery_rescale_duration_seconds",
       MetricKind::kHistogram,
       "From the decision to rescale to the task running in its new layout.",
       {"msj"}},
      {"orrery_worker_samples_per_second",
       MetricKind::kGauge,
       "Training throughput of one rank, over the last report interval.",
       {"msj", "task", "rank"}},
      {"orrery_worker_step",
       MetricKind::kGauge,
       "Last completed optimizer step of a task (counted from step 0, across resumes).",
       {"msj", "task"}},
      {"orrery_worker_checkpoint_step",
       MetricKind::kGauge,
       "Step of the task's last committed checkpoint, or of the one it resumed from.",
       {"msj", "task"}},
      {"orrery_worker_checkpoint_rank_bytes",
       MetricKind::kGauge,
       "Bytes one rank wrote (save) or read (load) in its last checkpoint operation "
       "(kind=moved), and the bytes of its own state it needed (kind=needed).",
       {"msj", "task", "rank", "op", "kind"}},
      {"orrery_worker_checkpoint_peak_rss_bytes",
       MetricKind::kGauge,
       "Peak resident memory of one rank's process during its last checkpoint save or load.",
       {"msj", "task", "rank", "op"}},
      {"orrery_worker_checkpoint_gang_bytes",
       MetricKind::kGauge,
       "Bytes the whole gang wrote (save) or read (load) in its last checkpoint operation, "
       "summed over its ranks (kind=moved), and the bytes of state its ranks needed "
       "(kind=needed); exported by rank 0.",
       {"msj", "task", "op", "kind"}},
      {"orrery_worker_checkpoint_gang_peak_rss_bytes",
       MetricKind::kGauge,
       "The largest peak resident memory of any of the gang's ranks during its last "
       "checkpoint save or load; exported by rank 0.",
       {"msj", "task", "op"}},
      {"orrery_worker_restore_info",
       MetricKind::kGauge,
       "1 for the task's latest resume: the layout that wrote the checkpoint (from_layout) and "
       "the one that loaded it (layout); they differ when the resume re-sharded.",
       {"msj", "task", "from_layout", "layout"}},
  };
  return *defs;
}

namespace {

const MetricDef& Def(const std::string& name) {
  for (const MetricDef& d : AllMetricDefs()) {
    if (d.name == name) return d;
  }
  std::fprintf(stderr, "metric %s is not in AllMetricDefs()\n", name.c_str());
  std::abort();  // a broken invariant: every family is declared in the table
}

prometheus::Family<prometheus::Counter>& MakeCounter(prometheus::Registry& r,
                                                     const std::string& n) {
  return prometheus::BuildCounter().Name(n).Help(Def(n).help).Register(r);
}
prometheus::Family<prometheus::Gauge>& MakeGauge(prometheus::Registry& r, const std::string& n) {
  return prometheus::BuildGauge().Name(n).Help(Def(n).help).Register(r);
}
prometheus::Family<prometheus::Histogram>& MakeHistogram(prometheus::Registry& r,
                                                         const std::string& n) {
  return prometheus::BuildHistogram().Name(n).Help(Def(n).help).Register(r);
}

}  // namespace

OperatorMetrics::OperatorMetrics(prometheus::Registry& r)
    : reconciles(MakeCounter(r, "orrery_reconcile_total")),
      reconcile_seconds(MakeHistogram(r, "orrery_reconcile_duration_seconds")),
      queue_depth(MakeGauge(r, "orrery_workqueue_depth")),
      queue_adds(MakeCounter(r, "orrery_workqueue_adds_total")),
      queue_wait_seconds(MakeHistogram(r, "orrery_workqueue_queue_duration_seconds")),
      solve_seconds(MakeHistogram(r, "orrery_planner_solve_duration_seconds")),
      plan_gap(MakeGauge(r, "orrery_plan_gap_ratio")),
      plan_makespan_seconds(MakeGauge(r, "orrery_plan_makespan_seconds")),
      plan_lower_bound_seconds(MakeGauge(r, "orrery_plan_lower_bound_seconds")),
      replans(MakeCounter(r, "orrery_replans_total")),
      gpus_planned(MakeGauge(r, "orrery_job_gpus_planned")),
      gpus_held(MakeGauge(r, "orrery_job_gpus_held")),
      gpu_share(MakeGauge(r, "orrery_job_gpu_share")),
      cluster_gpus(MakeGauge(r, "orrery_cluster_gpus")),
      tasks(MakeGauge(r, "orrery_job_tasks")),
      jobs(MakeGauge(r, "orrery_jobs")),
      profiling_runs(MakeCounter(r, "orrery_profiling_runs_total")),
      rescales(MakeCounter(r, "orrery_rescales_total")),
      rescale_seconds(MakeHistogram(r, "orrery_rescale_duration_seconds")),
      api_requests(MakeCounter(r, "orrery_kube_requests_total")),
      leader(MakeGauge(r, "orrery_leader")) {}

WorkerMetrics::WorkerMetrics(prometheus::Registry& r)
    : step_seconds(MakeHistogram(r, "orrery_worker_step_duration_seconds")),
      samples_per_second(MakeGauge(r, "orrery_worker_samples_per_second")),
      samples(MakeCounter(r, "orrery_worker_samples_total")),
      loss(MakeGauge(r, "orrery_worker_loss")),
      step(MakeGauge(r, "orrery_worker_step")),
      checkpoint_seconds(MakeHistogram(r, "orrery_worker_checkpoint_duration_seconds")),
      checkpoint_bytes(MakeGauge(r, "orrery_worker_checkpoint_bytes")),
      checkpoint_step(MakeGauge(r, "orrery_worker_checkpoint_step")),
      checkpoint_rank_bytes(MakeGauge(r, "orrery_worker_checkpoint_rank_bytes")),
      checkpoint_peak_rss(MakeGauge(r, "orrery_worker_checkpoint_peak_rss_bytes")),
      checkpoint_gang_bytes(MakeGauge(r, "orrery_worker_checkpoint_gang_bytes")),
      checkpoint_gang_peak_rss(MakeGauge(r, "orrery_worker_checkpoint_gang_peak_rss_bytes")),
      restore_info(MakeGauge(r, "orrery_worker_restore_info")) {}

namespace {

prometheus::Histogram::BucketBoundaries Doubling(double first, int count) {
  prometheus::Histogram::BucketBoundaries b;
  for (int i = 0; i < count; ++i) b.push_back(first * static_cast<double>(int64_t{1} << i));
  return b;
}

}  // namespace

const prometheus::Histogram::BucketBoundaries& StepSecondsBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries(Doubling(0.001, 18));
  return *b;
}

const prometheus::Histogram::BucketBoundaries& CheckpointSecondsBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries(Doubling(0.01, 18));
  return *b;
}

WorkerRecorder::WorkerRecorder(WorkerMetrics& m, const std::string& msj, const std::string& task,
                               int rank, bool task_level)
    : metrics_(m),
      task_labels_{{"msj", msj}, {"task", task}},
      rank_labels_{{"msj", msj}, {"task", task}, {"rank", std::to_string(rank)}},
      task_level_(task_level),
      step_seconds_(m.step_seconds.Add(
          {{"msj", msj}, {"task", task}, {"rank", std::to_string(rank)}}, StepSecondsBuckets())),
      samples_(m.samples.Add({{"msj", msj}, {"task", task}, {"rank", std::to_string(rank)}})),
      samples_per_second_(m.samples_per_second.Add(
          {{"msj", msj}, {"task", task}, {"rank", std::to_string(rank)}})) {
  if (!task_level_) return;
  for (const char* op : {"save", "load"}) {
    auto labels = task_labels_;
    labels["op"] = op;
    m.checkpoint_seconds.Add(labels, CheckpointSecondsBuckets());
  }
}

void WorkerRecorder::RecordRestoreLayouts(const std::string& from_layout,
                                          const std::string& layout) {
  if (!task_level_) return;
  auto labels = task_labels_;
  labels["from_layout"] = from_layout;
  labels["layout"] = layout;
  std::lock_guard<std::mutex> lock(restore_mu_);
  prometheus::Gauge* now = &metrics_.restore_info.Add(labels);
  if (restore_info_ != nullptr && restore_info_ != now) metrics_.restore_info.Remove(restore_info_);
  restore_info_ = now;
  now->Set(1);
}

void WorkerRecorder::RecordStart(int64_t step) {
  if (task_level_) metrics_.step.Add(task_labels_).Set(static_cast<double>(step));
}

void WorkerRecorder::RecordStep(int64_t step, double seconds, double samples, double loss) {
  step_seconds_.Observe(seconds);
  samples_.Increment(samples);
  if (!task_level_) return;
  metrics_.loss.Add(task_labels_).Set(loss);
  metrics_.step.Add(task_labels_).Set(static_cast<double>(step));
}

void WorkerRecorder::RecordThroughput(double samples_per_second) {
  samples_per_second_.Set(samples_per_second);
}

void WorkerRecorder::RecordCheckpoint(CheckpointOp op, int64_t step, double seconds,
                                      uint64_t bytes) {
  if (!task_level_) return;
  auto labels = task_labels_;
  labels["op"] = op == CheckpointOp::kSave ? "save" : "load";
  metrics_.checkpoint_seconds.Add(labels, CheckpointSecondsBuckets()).Observe(seconds);
  metrics_.checkpoint_step.Add(task_labels_).Set(static_cast<double>(step));
  metrics_.checkpoint_bytes.Add(task_labels_).Set(static_cast<double>(bytes));
}

namespace {

// One save's or load's bytes (kind moved / needed) and peak memory under `labels`.
void SetStateIo(prometheus::Family<prometheus::Gauge>& bytes_family,
                prometheus::Family<prometheus::Gauge>& peak_family,
                std::map<std::string, std::string> labels, WorkerRecorder::CheckpointOp op,
                uint64_t bytes, uint64_t bytes_needed, uint64_t peak_rss_bytes) {
  labels["op"] = op == WorkerRecorder::CheckpointOp::kSave ? "save" : "load";
  peak_family.Add(labels).Set(static_cast<double>(peak_rss_bytes));
  labels["kind"] = "moved";
  bytes_family.Add(labels).Set(static_cast<double>(bytes));
  labels["kind"] = "needed";
  bytes_family.Add(labels).Set(static_cast<double>(bytes_needed));
}

}  // namespace

void WorkerRecorder::RecordStateIo(CheckpointOp op, uint64_t bytes, uint64_t bytes_needed,
                                   uint64_t peak_rss_bytes) {
  SetStateIo(metrics_.checkpoint_rank_bytes, metrics_.checkpoint_peak_rss, rank_labels_, op, bytes,
             bytes_needed, peak_rss_bytes);
}

void WorkerRecorder::RecordGangStateIo(CheckpointOp op, uint64_t bytes, uint64_t bytes_needed,
                                       uint64_t max_peak_rss_bytes) {
  if (!task_level_) return;
  SetStateIo(metrics_.checkpoint_gang_bytes, metrics_.checkpoint_gang_peak_rss, task_labels_, op,
             bytes, bytes_needed, max_peak_rss_bytes);
}

namespace {

constexpr int kClientTimeoutSeconds = 5;
constexpr size_t kMaxRequestBytes = 16 * 1024;

// Sends all of `data`; false when the client went away.
bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<Exposer>> Exposer::Start(const std::string& address,
                                                  std::shared_ptr<prometheus::Registry> registry,
                                                  const std::string& flag, ExposerOptions options) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size() ||
      address.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return InvalidArgumentError(flag + ": '" + address + "' is not HOST:PORT or :PORT");
  }
  std::string host = colon == 0 ? "0.0.0.0" : address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  std::string lookup = host;  // "[::1]" is looked up as "::1"
  if (lookup.size() > 2 && lookup.front() == '[' && lookup.back() == ']')
    lookup = lookup.substr(1, lookup.size() - 2);
  const std::string hint = " (fix: pick a free port with " + flag + ")";

  addrinfo want{};
  want.ai_family = AF_UNSPEC;
  want.ai_socktype = SOCK_STREAM;
  want.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(lookup.c_str(), port.c_str(), &want, &found); rc != 0) {
    return InvalidArgumentError(flag + ": cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  // Freed on every return below, the refusals of a bad certificate included.
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> found_guard(found, freeaddrinfo);
  std::unique_ptr<Exposer> e(new Exposer());
  e->options_ = std::move(options);
  if (e->options_.https) {
    // A bad certificate fails the start, not the first scrape.
    const bool files = !e->options_.cert_file.empty() || !e->options_.key_file.empty();
    if (!files && e->options_.tls.cert_pem.empty()) {
      return InvalidArgumentError(flag + ": HTTPS needs a certificate and key");
    }
    if (e->CurrentTls() == nullptr) {
      StatusOr<std::unique_ptr<TlsServerContext>> why =
          InternalError("the metrics certificate did not load");
      if (files) {
        ORRERY_ASSIGN_OR_RETURN(TlsMaterial m,
                                ReadTlsFiles(e->options_.cert_file, e->options_.key_file));
        why = TlsServerContext::FromPem(m, e->options_.cert_file);
      } else {
        why = TlsServerContext::FromPem(e->options_.tls, "the metrics certificate");
      }
      return why.ok() ? InternalError("the metrics certificate did not load") : why.status();
    }
  }
  std::string bind_error = "no address";
  for (addrinfo* a = found; a != nullptr && e->listen_fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      e->listen_fd_ = fd;
    } else {
      bind_error = std::strerror(errno);
      close(fd);
    }
  }
  found_guard.reset();
  if (e->listen_fd_ < 0) {
    return UnavailableError("cannot serve metrics on " + host + ":" + port + ": " + bind_error +
                            hint);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(e->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0 ||
      pipe2(e->wake_fds_, O_CLOEXEC) != 0) {
    return UnavailableError("metrics exposer on " + host + ":" + port + ": " +
                            std::strerror(errno));
  }
  e->port_ = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  e->address_ = host + ":" + std::to_string(e->port_);
  e->registry_ = std::move(registry);
  e->thread_ = std::thread([raw = e.get()] { raw->Serve(); });
  return e;
}

Exposer::~Exposer() {
  if (thread_.joinable()) {
    const char stop = 1;
    while (write(wake_fds_[1], &stop, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]}) {
    if (fd >= 0) close(fd);
  }
}

namespace {

// "size:mtime" of each file, to notice a rotated certificate.
std::string FilesStamp(const std::vector<std::string>& files) {
  std::string stamp;
  for (const std::string& f : files) {
    struct stat st {};
    if (stat(f.c_str(), &st) != 0) return "";
    stamp += std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return stamp;
}

// The value of header `name` (lower case) in a raw request head, or "".
std::string HeaderValue(const std::string& request, const std::string& name) {
  size_t line = request.find("\r\n");
  while (line != std::string::npos) {
    const size_t start = line + 2;
    const size_t end = request.find("\r\n", start);
    if (end == std::string::npos || end == start) break;
    const size_t colon = request.find(':', start);
    if (colon != std::string::npos && colon < end && colon - start == name.size()) {
      bool same = true;
      for (size_t i = 0; i < name.size() && same; ++i) {
        same = std::tolower(static_cast<unsigned char>(request[start + i])) == name[i];
      }
      if (same) {
        size_t v = request.find_first_not_of(" \t", colon + 1);
        size_t v_end = request.find_last_not_of(" \t", end - 1);
        return v == std::string::npos || v >= end ? "" : request.substr(v, v_end - v + 1);
      }
    }
    line = end;
  }
  return "";
}

}  // namespace

const TlsServerContext* Exposer::CurrentTls() {
  if (options_.cert_file.empty() && options_.key_file.empty()) {
    if (!tls_) {
      auto made = TlsServerContext::FromPem(options_.tls, "the metrics certificate");
      if (made.ok()) tls_ = std::move(*made);
    }
    return tls_.get();
  }
  const std::string stamp = FilesStamp({options_.cert_file, options_.key_file});
  if (tls_ && (stamp.empty() || stamp == tls_files_stamp_)) return tls_.get();
  // Changed (or first): a pair that does not load yet (one file written, the
  // other not) keeps the previous certificate in service.
  auto material = ReadTlsFiles(options_.cert_file, options_.key_file);
  if (!material.ok()) return tls_.get();
  auto made = TlsServerContext::FromPem(*material, options_.cert_file);
  if (made.ok()) {
    tls_ = std::move(*made);
    tls_files_stamp_ = stamp;
  }
  return tls_.get();
}

void Exposer::Serve() {
  // A client that hangs up mid-answer must not kill the process: TLS writes go
  // through write(2), which raises SIGPIPE on this thread.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    timeval timeout{kClientTimeoutSeconds, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (options_.https) {
      const TlsServerContext* tls = CurrentTls();
      std::unique_ptr<TlsServerContext::Connection> conn =
          tls == nullptr ? nullptr : tls->Accept(client);
      if (conn != nullptr && conn->Handshake().ok()) {
        Answer([&](char* buffer, int size) { return conn->Read(buffer, size); },
               [&](const std::string& bytes) { return conn->WriteAll(bytes); });
      }
    } else {
      Answer(
          [&](char* buffer, int size) -> long {  // NOLINT(google-runtime-int)
            ssize_t n;
            do {
              n = recv(client, buffer, static_cast<size_t>(size), 0);
            } while (n < 0 && errno == EINTR);
            return n;
          },
          [&](const std::string& bytes) { return SendAll(client, bytes); });
    }
    close(client);
  }
}

void Exposer::Answer(const std::function<long(char*, int)>& read,  // NOLINT(google-runtime-int)
                     const std::function<bool(const std::string&)>& write) const {
  std::string request;
  char chunk[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    auto n = read(chunk, sizeof(chunk));
    if (n <= 0) return;
    request.append(chunk, static_cast<size_t>(n));
  }
  // "GET /metrics?x=y HTTP/1.1": the method, then the path up to '?' or ' '.
  const size_t space = request.find(' ');
  const std::string method = request.substr(0, space);
  std::string path;
  if (space != std::string::npos) {
    const size_t end = request.find_first_of(" ?\r\n", space + 1);
    path = request.substr(space + 1, end == std::string::npos ? end : end - space - 1);
  }
  std::string status = "200 OK", body;
  Status allowed = OkStatus();
  if (options_.authorize)
    allowed = options_.authorize(method, path, HeaderValue(request, "authorization"));
  std::string extra_head;
  if (!allowed.ok()) {
    // Refused before anything about the server is said, the path included.
    switch (allowed.code()) {
      case StatusCode::kUnauthenticated:
        status = "401 Unauthorized";
        extra_head = "\r\nWWW-Authenticate: Bearer realm=\"orrery\"";
        break;
      case StatusCode::kPermissionDenied: status = "403 Forbidden"; break;
      default: status = "503 Service Unavailable"; break;
    }
    body = std::string(allowed.message()) + "\n";
  } else if (method != "GET" && method != "HEAD") {
    status = "405 Method Not Allowed";
  } else if (path != "/metrics") {
    status = "404 Not Found";
    body = "only /metrics is served here\n";
  } else {
    body = Serialize(*registry_);
  }
  std::string head = "HTTP/1.1 " + status +
                     "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"
                     "\r\nContent-Length: " +
                     std::to_string(body.size()) + extra_head + "\r\nConnection: close\r\n\r\n";
  if (method == "HEAD") body.clear();
  write(head + body);
}

std::string Serialize(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace orrery::metrics
