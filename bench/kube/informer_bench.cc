// Informer benchmark: fills the API server with N ConfigMaps (8 creates in
// flight), then measures, in the same run and against the same objects,
//  - the informer's initial sync time and its memory, beside `kubectl get -o name`
//    listing the same objects;
//  - event throughput during a burst of N updates (one merge patch per object),
//    for the informer and for `kubectl get --watch-only -o name` consuming the
//    same burst at the same time: events delivered per second and how long after
//    the last write each consumer had seen everything.
//
//   kube_informer_bench [--objects N] [--kubeconfig PATH] [--parallel P]
// Without --kubeconfig it starts its own control plane (tests/testing).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include "common/log.h"
#include "operator/kube/informer.h"
#include "operator/kube/rest_client.h"
#include "tests/testing/control_plane.h"

namespace {

using orrery::kube::Object;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Resident set size of this process in bytes.
long RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      long kb = 0;
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

// Runs `fn(i)` for i in [0, n) with `parallel` threads; returns the failures.
int ParallelFor(int n, int parallel, const std::function<bool(int)>& fn) {
  std::atomic<int> next{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < n; i = next++)
        if (!fn(i)) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  return failures.load();
}

// A kubectl child process whose output lines are counted as they arrive: lines
// containing `counted` are burst events, a line containing `sentinel` says the
// watch is live.
class KubectlWatch {
 public:
  KubectlWatch(std::vector<std::string> args, std::string counted, std::string sentinel)
      : counted_(std::move(counted)), sentinel_(std::move(sentinel)) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] {
      std::string pending;
      char buf[65536];
      ssize_t n;
      while ((n = read(fd_, buf, sizeof(buf))) > 0) {
        pending.append(buf, static_cast<size_t>(n));
        size_t start = 0, nl;
        while ((nl = pending.find('\n', start)) != std::string::npos) {
          std::string line = pending.substr(start, nl - start);
          start = nl + 1;
          std::lock_guard<std::mutex> lock(mu_);
          if (line.find(counted_) != std::string::npos) {
            ++burst_lines_;
            last_ = Clock::now();
          } else if (!sentinel_.empty() && line.find(sentinel_) != std::string::npos) {
            saw_sentinel_ = true;
          }
        }
        pending.erase(0, start);
      }
    });
  }
  ~KubectlWatch() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
  }
  // CPU seconds the child has used so far (user + system).
  double CpuSeconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t p = s.rfind(')');
    if (p == std::string::npos) return -1;
    std::istringstream rest(s.substr(p + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stol(field);
      if (i == 15) stime = std::stol(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  bool SawSentinel() {
    std::lock_guard<std::mutex> lock(mu_);
    return saw_sentinel_;
  }
  int BurstLines(Clock::time_point* last) {
    std::lock_guard<std::mutex> lock(mu_);
    *last = last_;
    return burst_lines_;
  }

 private:
  std::string counted_, sentinel_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  bool saw_sentinel_ = false;
  int burst_lines_ = 0;
  Clock::time_point last_{};
};

}  // namespace

int main(int argc, char** argv) {
  int n = 10000, parallel = 8;
  std::string kubeconfig;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--objects" && i + 1 < argc)
      n = std::atoi(argv[++i]);
    else if (a == "--parallel" && i + 1 < argc)
      parallel = std::atoi(argv[++i]);
    else if (a == "--kubeconfig" && i + 1 < argc)
      kubeconfig = argv[++i];
    else {
      std::cerr << "usage: " << argv[0] << " [--objects N] [--parallel P] [--kubeconfig PATH]\n";
      return 2;
    }
  }
  orrery::SetLogLevel(orrery::LogLevel::kWarning);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress visible when piped to a file

  std::unique_ptr<orrery::testing::ControlPlane> plane;
  orrery::kube::ClientConfig cfg;
  std::string kubectl = "kubectl";
  if (kubeconfig.empty()) {
    auto t = Clock::now();
    auto p = orrery::testing::ControlPlane::Start();
    if (!p.ok()) {
      std::cerr << "starting a control plane: " << p.status() << "\n";
      return 1;
    }
    plane = std::move(*p);
    kubeconfig = plane->kubeconfig();
    kubectl = plane->bin_dir() + "/kubectl";
    std::printf("control plane started in %.1f s\n", Since(t));
  } else if (const char* home = std::getenv("HOME")) {
    std::string cached = std::string(home) + "/.cache/orrery/tools/current/bin/kubectl";
    if (access(cached.c_str(), X_OK) == 0) kubectl = cached;
  }
  auto loaded = orrery::kube::LoadKubeconfig(kubeconfig);
  if (!loaded.ok()) {
    std::cerr << loaded.status() << "\n";
    return 1;
  }
  cfg = *loaded;
  auto client_or = orrery::kube::RestClient::Create(cfg);
  if (!client_or.ok()) {
    std::cerr << client_or.status() << "\n";
    return 1;
  }
  orrery::kube::RestClient& client = **client_or;
  const orrery::kube::Resource cms = orrery::kube::ConfigMaps();
  const std::string ns = "bench-informer-" + std::to_string(getpid());
  if (auto r = client.Create(
          orrery::kube::Namespaces(), "",
          {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
      !r.ok()) {
    std::cerr << r.status() << "\n";
    return 1;
  }

  // 1. Fill.
  auto t_fill = Clock::now();
  int failed = ParallelFor(n, parallel, [&](int i) {
    Object cm = {{"apiVersion", "v1"},
                 {"kind", "ConfigMap"},
                 {"metadata",
                  {{"name", "cm-" + std::to_string(i)},
                   {"namespace", ns},
                   {"labels", {{"app", "bench"}, {"shard", std::to_string(i % 16)}}}}},
                 {"data", {{"index", std::to_string(i)}, {"payload", std::string(64, 'x')}}}};
    return client.Create(cms, ns, cm).ok();
  });
  double fill_s = Since(t_fill);
  std::printf("filled %d ConfigMaps in %.1f s (%.0f creates/s, %d in flight, %d failed)\n", n,
              fill_s, n / fill_s, parallel, failed);

  // 2. Initial sync: the informer, then kubectl listing the same objects.
  long rss_before = RssBytes();
  std::atomic<int> burst_updates{0};
  std::atomic<int64_t> last_update_ns{0};
  orrery::kube::InformerOptions opts;
  opts.ns = ns;
  opts.page_size = 500;
  orrery::kube::Informer informer(&client, cms, opts);
  informer.AddEventHandler(
      {nullptr,
       [&](const orrery::kube::ObjectPtr&, const orrery::kube::ObjectPtr& obj) {
         const Object& data = (*obj)["data"];
         if (data.contains("burst")) {
           ++burst_updates;
           last_update_ns = Clock::now().time_since_epoch().count();
         }
       },
       nullptr});
  auto t_sync = Clock::now();
  informer.Start();
  if (!informer.WaitForSync(std::chrono::minutes(5))) {
    std::cerr << "informer did not sync\n";
    return 1;
  }
  double sync_s = Since(t_sync);
  long rss_after = RssBytes();
  size_t cached = informer.store().Size();
  auto t_kubectl_list = Clock::now();
  auto listed =
      orrery::testing::RunCommand(kubectl + " --kubeconfig " + kubeconfig + " get configmaps -n " +
                                  ns + " -o name | grep -c '^configmap/cm-'");
  double kubectl_list_s = Since(t_kubectl_list);
  std::printf(
      "initial sync: informer %.2f s for %zu objects (%.0f objects/s), kubectl get -o name %.2f s "
      "(%s objects)\n",
      sync_s, cached, cached / sync_s, kubectl_list_s,
      listed.output.substr(0, listed.output.find('\n')).c_str());
  std::printf("informer memory: %.1f MiB RSS growth, %.0f bytes per cached object\n",
              (rss_after - rss_before) / 1048576.0,
              static_cast<double>(rss_after - rss_before) / std::max<size_t>(1, cached));

  // 3. Burst: both consumers watch; wait until kubectl's watch is live (it sees
  // the sentinel), then patch every object once.
  KubectlWatch kwatch({kubectl, "--kubeconfig", kubeconfig, "get", "configmaps", "-n", ns,
                       "--watch-only", "-o", "name"},
                      "configmap/cm-", "configmap/sentinel");
  auto rv_before_burst = client.List(cms, ns, [] {
    orrery::kube::ListOptions o;
    o.limit = 1;
    return o;
  }());
  if (!client
           .Create(
               cms, ns,
               {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "sentinel"}}}})
           .ok()) {
    std::cerr << "sentinel create failed\n";
    return 1;
  }
  for (int i = 0; i < 600 && !kwatch.SawSentinel(); ++i) {
    (void)client.Patch(cms, ns, "sentinel", orrery::kube::PatchType::kMerge,
                       {{"data", {{"tick", std::to_string(i)}}}});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!kwatch.SawSentinel()) {
    std::cerr << "kubectl --watch never became live\n";
    return 1;
  }
  double kubectl_cpu_before = kwatch.CpuSeconds();
  auto t_burst = Clock::now();
  int burst_failed = ParallelFor(n, parallel, [&](int i) {
    return client
        .Patch(cms, ns, "cm-" + std::to_string(i), orrery::kube::PatchType::kMerge,
               {{"data", {{"burst", "1"}}}})
        .ok();
  });
  auto t_writes_done = Clock::now();
  double write_s = std::chrono::duration<double>(t_writes_done - t_burst).count();
  int expected = n - burst_failed;
  Clock::time_point kubectl_last{};
  auto deadline = Clock::now() + std::chrono::minutes(3);
  while (Clock::now() < deadline &&
         (burst_updates.load() < expected || kwatch.BurstLines(&kubectl_last) < expected)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int kubectl_seen = kwatch.BurstLines(&kubectl_last);
  double kubectl_cpu = kwatch.CpuSeconds() - kubectl_cpu_before;
  Clock::time_point informer_last{Clock::duration(last_update_ns.load())};
  auto rate = [&](int seen, Clock::time_point last) {
    double s = std::chrono::duration<double>(last - t_burst).count();
    return s > 0 ? seen / s : 0.0;
  };
  auto lag = [&](Clock::time_point last) {
    return std::chrono::duration<double>(last - t_writes_done).count();
  };
  std::printf("burst: %d updates written in %.1f s (%.0f writes/s, %d failed)\n", expected, write_s,
              expected / write_s, burst_failed);
  std::printf(
      "  informer:             %d/%d events, %.0f events/s, all seen %.3f s after the last write\n",
      burst_updates.load(), expected, rate(burst_updates.load(), informer_last),
      lag(informer_last));
  std::printf(
      "  kubectl get --watch:  %d/%d events, %.0f events/s, all seen %.3f s after the last write, "
      "%.2f CPU s\n",
      kubectl_seen, expected, rate(kubectl_seen, kubectl_last), lag(kubectl_last), kubectl_cpu);
  auto st = informer.stats();
  std::printf("informer stats: lists=%lld watches=%lld events=%lld bookmarks=%lld failures=%lld\n",
              static_cast<long long>(st.lists), static_cast<long long>(st.watches),
              static_cast<long long>(st.events), static_cast<long long>(st.bookmarks),
              static_cast<long long>(st.failures));
  informer.Stop();

  // 4. Replay: the same burst read back from the API server's watch cache as fast
  // as each consumer can take it, by our WatchStream and by kubectl's raw watch.
  if (rv_before_burst.ok()) {
    std::string rv = (*rv_before_burst)["metadata"].value("resourceVersion", "");
    orrery::kube::ListOptions lo;
    lo.resource_version = rv;
    lo.timeout_seconds = 120;
    lo.allow_watch_bookmarks = false;
    auto t_replay = Clock::now();
    auto stream = client.Watch(cms, ns, lo);
    int replayed = 0;
    std::string replay_error;
    if (!stream.ok()) {
      replay_error = stream.status().ToString();
    } else {
      while (replayed < expected) {
        auto ev = (*stream)->Next();
        if (!ev.ok() || !ev->has_value()) {
          replay_error = ev.ok() ? "watch ended" : ev.status().ToString();
          break;
        }
        if ((*ev)->type == orrery::kube::WatchEvent::Type::kError) {
          replay_error = (*ev)->ErrorStatus("replay").ToString();
          break;
        }
        if ((*ev)->object.contains("data") && (*ev)->object["data"].contains("burst")) ++replayed;
      }
    }
    double ours_s = Since(t_replay);
    if (!replay_error.empty()) {
      std::printf("replay: not available (%s)\n", replay_error.c_str());
    } else {
      auto t_k = Clock::now();
      std::string path = "/api/v1/namespaces/" + ns + "/configmaps?watch=1&resourceVersion=" + rv +
                         "&timeoutSeconds=120";
      KubectlWatch raw({kubectl, "--kubeconfig", kubeconfig, "get", "--raw", path},
                       "\"burst\":\"1\"", "");
      Clock::time_point last{};
      auto end = Clock::now() + std::chrono::minutes(2);
      while (raw.BurstLines(&last) < expected && Clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      int k_seen = raw.BurstLines(&last);
      double k_s = std::chrono::duration<double>(last - t_k).count();
      std::printf(
          "replay of the burst from the watch cache: orrery WatchStream %d events in %.2f s (%.0f "
          "events/s); "
          "kubectl get --raw watch %d events in %.2f s (%.0f events/s)\n",
          replayed, ours_s, replayed / ours_s, k_seen, k_s, k_seen / k_s);
    }
  }
  (void)client.Delete(orrery::kube::Namespaces(), "", ns);
  return (burst_updates.load() == expected && kubectl_seen == expected) ? 0 : 1;
}
