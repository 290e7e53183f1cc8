// `orrery operator [flags]`: the Kubernetes operator process. It connects to the
// API server (--kubeconfig, $KUBECONFIG, or the pod's service account), serves
// /healthz and /readyz and Prometheus /metrics, campaigns for a Lease when
// --leader-elect, and while it leads runs the ModelSelectionJob controller
// (operator/controller/manager.h). SIGTERM stops it gracefully: reconciles in
// progress finish, the lease is released so a successor starts at once.
// A replica that loses its lease exits (status 1) rather than keep caches that
// a new leader may already be contradicting; the Deployment restarts it.
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <stop_token>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/metrics/metrics.h"
#include "common/metrics/tls.h"
#include "operator/cli/commands.h"
#include "operator/cli/stop_signals.h"
#include "operator/controller/manager.h"
#include "operator/controller/probe_server.h"
#include "operator/engine/estimate.h"
#include "operator/kube/config.h"
#include "operator/kube/delegated_auth.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/rest_client.h"

namespace orrery::cli {
namespace {

constexpr const char* kUsage =
    "Usage: orrery operator [--kubeconfig FILE] [--namespace NS]...\n"
    "         [--leader-elect=true|false] [--leader-election-namespace NS]\n"
    "         [--leader-election-id NAME] [--lease-duration 15s] [--renew-deadline 10s]\n"
    "         [--retry-period 2s] [--metrics-bind-address :8443] [--health-probe-bind-address "
    ":8081]\n"
    "         [--metrics-secure=true|false] [--metrics-cert-dir DIR]\n"
    "         [--worker-image IMAGE] [--gpu-resource nvidia.com/gpu] [--device cuda|cpu]\n"
    "         [--profile-namespace NS] [--workers 2] [--gang-timeout 10m] [--solver-time-limit "
    "10s]\n"
    "         [--node-lost-grace 5m] [--gpu-type-label nvidia.com/gpu.product]\n"
    "         [--gpu-type-speeds NVIDIA-H100-80GB-HBM3=3,NVIDIA-L4=1] [--gpu-memory-reserve "
    "1.5Gi+5%]\n"
    "         [--progress-period 5s] [--cluster-shares=true|false] [--kueue=auto|true|false]\n"
    "         [--log-level debug|info|warning|error]\n";

struct OperatorFlags {
  std::string kubeconfig;
  std::vector<std::string> namespaces;
  bool leader_elect = false;
  // Jobs plan within their share of the cluster-wide allocation across jobs;
  // false: first come, first served on free GPUs.
  bool cluster_shares = true;
  std::string kueue = "auto";  // Kueue admission of labelled jobs (controller/kueue.h)
  std::string lease_namespace;
  std::string lease_name = "orrery-operator";
  Duration lease_duration = std::chrono::seconds(15);
  Duration renew_deadline = std::chrono::seconds(10);
  Duration retry_period = std::chrono::seconds(2);
  std::string metrics_address = ":8443";
  // HTTPS, and every scrape's bearer token reviewed by the API server (TokenReview,
  // then SubjectAccessReview for GET /metrics); false: plain HTTP, open to all.
  bool metrics_secure = true;
  std::string metrics_cert_dir;  // tls.crt and tls.key; "" = self-signed at start
  std::string health_address = ":8081";
  std::string worker_image;
  std::string gpu_resource = "nvidia.com/gpu";
  std::string device = "cuda";
  // The node label whose value is a node's GPU type: the planner's pools and
  // what spec.tasks[].gpuTypes names ("" = every node is of one type).
  std::string gpu_type_label = controller::kDefaultGpuTypeLabel;
  // Relative throughput by GPU type: a task profiled on one type is estimated
  // on the others. Empty: measured (one trial per task on each other type).
  std::map<std::string, double> gpu_type_speeds;
  // What of a GPU's labelled memory a plan leaves to CUDA's context, NCCL and
  // the caching allocator (engine::GpuMemoryReserve).
  engine::GpuMemoryReserve gpu_memory_reserve;
  std::string profile_namespace;
  int workers = 2;
  Duration gang_timeout = std::chrono::minutes(10);
  // A node NotReady or unreachable this long loses its gangs; a shorter blip
  // tears nothing down (Kubernetes evicts after 300 s by default).
  Duration node_lost_grace = std::chrono::minutes(5);
  double solver_time_limit_s = 10;
  Duration progress_period = std::chrono::seconds(5);
  LogLevel log_level = LogLevel::kInfo;
};

// "TYPE=SPEED,...": each GPU type's throughput relative to the others'.
StatusOr<std::map<std::string, double>> ParseGpuTypeSpeeds(const std::string& text) {
  std::map<std::string, double> speeds;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.rfind('=');
    double speed = 0;
    bool parsed = false;
    if (eq != std::string::npos && eq > 0) {
      try {
        size_t used = 0;
        speed = std::stod(item.substr(eq + 1), &used);
        parsed = used == item.size() - eq - 1;
      } catch (const std::exception&) {
        parsed = false;
      }
    }
    if (!parsed || !(speed > 0) || !std::isfinite(speed)) {
      std::string message = "--gpu-type-speeds=" + text;
      message += ": '";
      message += item;
      message +=
          "' is not TYPE=SPEED with a positive SPEED (fix: write it like "
          "NVIDIA-H100-80GB-HBM3=3,NVIDIA-L4=1)";
      return InvalidArgumentError(message);
    }
    speeds[item.substr(0, eq)] = speed;
  }
  return speeds;
}

// A Go-style duration as Kubernetes flags take them: "15s", "1m30s", "500ms", "2h".
StatusOr<Duration> ParseGoDuration(const std::string& flag, const std::string& text) {
  double total_ms = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string number = text.substr(start, unit_start - start);
    std::string unit = text.substr(unit_start, i - unit_start);
    double scale = unit == "ms"  ? 1
                   : unit == "s" ? 1e3
                   : unit == "m" ? 6e4
                   : unit == "h" ? 3.6e6
                                 : -1;
    if (number.empty() || scale < 0) {
      std::string message = flag;
      message += "=";
      message += text;
      message += ": not a duration (fix: write it like 15s, 1m30s or 500ms)";
      return InvalidArgumentError(message);
    }
    total_ms += std::stod(number) * scale;
    any = true;
  }
  if (!any || total_ms <= 0) {
    return InvalidArgumentError(flag + "=" + text + ": must be a positive duration such as 15s");
  }
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(total_ms));
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

StatusOr<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args) {
  OperatorFlags f;
  f.lease_namespace = EnvOr("POD_NAMESPACE", "orrery-system");
  f.profile_namespace = f.lease_namespace;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto take = [&]() -> StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size()) return InvalidArgumentError(name + " needs a value");
      return args[++i];
    };
    if (name == "--leader-elect" || name == "--cluster-shares" || name == "--metrics-secure") {
      std::string v = has_value ? value : "true";
      if (v != "true" && v != "false") {
        std::string message = name;
        message += "=" + v + ": expected true or false";
        return InvalidArgumentError(message);
      }
      (name == "--leader-elect"     ? f.leader_elect
       : name == "--cluster-shares" ? f.cluster_shares
                                    : f.metrics_secure) = v == "true";
      continue;
    }
    static const std::set<std::string> kValued = {"--kubeconfig",
                                                  "--namespace",
                                                  "--leader-election-namespace",
                                                  "--leader-election-id",
                                                  "--lease-duration",
                                                  "--renew-deadline",
                                                  "--retry-period",
                                                  "--gang-timeout",
                                                  "--node-lost-grace",
                                                  "--solver-time-limit",
                                                  "--metrics-bind-address",
                                                  "--metrics-cert-dir",
                                                  "--health-probe-bind-address",
                                                  "--worker-image",
                                                  "--gpu-resource",
                                                  "--gpu-type-label",
                                                  "--gpu-type-speeds",
                                                  "--gpu-memory-reserve",
                                                  "--kueue",
                                                  "--device",
                                                  "--profile-namespace",
                                                  "--workers",
                                                  "--log-level",
                                                  "--progress-period"};
    if (kValued.count(name) == 0) {
      return InvalidArgumentError("unknown flag " + name + " (see orrery operator --help)");
    }
    ORRERY_ASSIGN_OR_RETURN(std::string v, take());
    if (name == "--kubeconfig") {
      f.kubeconfig = v;
    } else if (name == "--namespace") {
      if (controller::IsSystemNamespace(v)) {
        return InvalidArgumentError("--namespace=" + v +
                                    ": the operator never runs workers in a system namespace "
                                    "(fix: put ModelSelectionJobs in a namespace of their own)");
      }
      if (!v.empty()) f.namespaces.push_back(v);
    } else if (name == "--leader-election-namespace") {
      f.lease_namespace = v;
    } else if (name == "--leader-election-id") {
      f.lease_name = v;
    } else if (name == "--lease-duration") {
      ORRERY_ASSIGN_OR_RETURN(f.lease_duration, ParseGoDuration(name, v));
    } else if (name == "--renew-deadline") {
      ORRERY_ASSIGN_OR_RETURN(f.renew_deadline, ParseGoDuration(name, v));
    } else if (name == "--retry-period") {
      ORRERY_ASSIGN_OR_RETURN(f.retry_period, ParseGoDuration(name, v));
    } else if (name == "--gang-timeout") {
      ORRERY_ASSIGN_OR_RETURN(f.gang_timeout, ParseGoDuration(name, v));
    } else if (name == "--node-lost-grace") {
      ORRERY_ASSIGN_OR_RETURN(f.node_lost_grace, ParseGoDuration(name, v));
    } else if (name == "--progress-period") {
      ORRERY_ASSIGN_OR_RETURN(f.progress_period, ParseGoDuration(name, v));
    } else if (name == "--solver-time-limit") {
      ORRERY_ASSIGN_OR_RETURN(Duration d, ParseGoDuration(name, v));
      f.solver_time_limit_s = std::chrono::duration<double>(d).count();
    } else if (name == "--metrics-bind-address") {
      f.metrics_address = v;
    } else if (name == "--metrics-cert-dir") {
      f.metrics_cert_dir = v;
    } else if (name == "--health-probe-bind-address") {
      f.health_address = v;
    } else if (name == "--worker-image") {
      f.worker_image = v;
    } else if (name == "--gpu-resource") {
      f.gpu_resource = v;
    } else if (name == "--gpu-type-label") {
      f.gpu_type_label = v;
    } else if (name == "--gpu-type-speeds") {
      ORRERY_ASSIGN_OR_RETURN(f.gpu_type_speeds, ParseGpuTypeSpeeds(v));
    } else if (name == "--gpu-memory-reserve") {
      ORRERY_ASSIGN_OR_RETURN(f.gpu_memory_reserve, engine::ParseGpuMemoryReserve(v, name));
    } else if (name == "--device") {
      if (v != "cuda" && v != "cpu") {
        return InvalidArgumentError("--device=" + v +
                                    ": expected cuda or cpu (cpu runs "
                                    "workers with gloo on CPU-only nodes)");
      }
      f.device = v;
    } else if (name == "--kueue") {
      if (v != "auto" && v != "true" && v != "false") {
        return InvalidArgumentError("--kueue=" + v +
                                    ": expected auto (use Kueue when it is installed), true or "
                                    "false");
      }
      f.kueue = v;
    } else if (name == "--profile-namespace") {
      f.profile_namespace = v;
    } else if (name == "--workers") {
      try {
        f.workers = std::stoi(v);
      } catch (const std::exception&) {
        f.workers = 0;
      }
      if (f.workers < 1 || f.workers > 64) {
        return InvalidArgumentError("--workers=" + v + ": expected an integer in 1..64");
      }
    } else if (name == "--log-level") {
      if (v == "debug") {
        f.log_level = LogLevel::kDebug;
      } else if (v == "info") {
        f.log_level = LogLevel::kInfo;
      } else if (v == "warning" || v == "warn") {
        f.log_level = LogLevel::kWarning;
      } else if (v == "error") {
        f.log_level = LogLevel::kError;
      } else {
        return InvalidArgumentError("--log-level=" + v +
                                    ": expected debug, info, warning or error");
      }
    } else {
      return InvalidArgumentError("unknown flag " + name);
    }
  }
  if (f.metrics_address != "0") {
    ORRERY_RETURN_IF_ERROR(
        controller::ParseBindAddress(f.metrics_address, "--metrics-bind-address").status());
  }
  ORRERY_RETURN_IF_ERROR(
      controller::ParseBindAddress(f.health_address, "--health-probe-bind-address").status());
  if (!f.metrics_cert_dir.empty() && !f.metrics_secure) {
    return InvalidArgumentError(
        "--metrics-cert-dir is set but --metrics-secure=false serves plain HTTP "
        "(fix: drop one of them)");
  }
  if (f.leader_elect &&
      !(f.retry_period < f.renew_deadline && f.renew_deadline < f.lease_duration)) {
    return InvalidArgumentError(
        "leader election needs --retry-period < --renew-deadline < --lease-duration "
        "(fix: e.g. 2s, 10s, 15s)");
  }
  return f;
}

StatusOr<kube::ClientConfig> LoadConfig(const std::string& kubeconfig) {
  if (!kubeconfig.empty()) return kube::LoadKubeconfig(kubeconfig);
  return kube::DefaultConfig();
}

std::string Identity() {
  std::string pod = EnvOr("POD_NAME", "");
  if (!pod.empty()) return pod;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return std::string(host) + "_" + std::to_string(getpid()) + "_" + std::to_string(rd() % 100000);
}

std::atomic<bool> g_stop{false};

int RunOperator(Invocation& in) {
  if (WantsHelp(in.args)) {
    in.out << kUsage;
    return kExitOk;
  }
  auto flags = ParseOperatorFlags(in.args);
  if (!flags.ok()) {
    in.err << "orrery operator: " << flags.status().message() << "\n" << kUsage;
    return kExitUsage;
  }
  const OperatorFlags& f = *flags;
  SetLogLevel(f.log_level);
  // Before any thread exists (the API client's pool, the metrics server): a
  // thread created earlier would not block SIGTERM and would swallow it.
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<controller::Manager*> manager{nullptr};
  std::atomic<bool> leading{false};
  std::atomic<kube::LeaderElector*> elector{nullptr};
  StopSignals signals(&g_stop, [&] {
    Log(LogLevel::kInfo, "Stopping", {{"reason", "signal"}});
    if (kube::LeaderElector* e = elector.load()) e->Stop();
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  });

  auto config = LoadConfig(f.kubeconfig);
  if (!config.ok()) {
    in.err << "orrery operator: " << config.status()
           << " (fix: pass --kubeconfig FILE or run in a pod with a service account)\n";
    return kExitInvalid;
  }
  config->user_agent = "orrery-operator/" ORRERY_VERSION;
  auto rest = kube::RestClient::Create(*config);
  if (!rest.ok()) {
    in.err << "orrery operator: " << rest.status() << "\n";
    return kExitInvalid;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  metrics::OperatorMetrics metrics(*registry);
  controller::InstrumentedClient client(rest->get(), &metrics);
  // Declared before the exposer, which calls it until it is destroyed.
  std::unique_ptr<kube::DelegatedAuthorizer> authorizer;
  std::unique_ptr<metrics::Exposer> exposer;
  if (f.metrics_address != "0") {
    auto bind = controller::ParseBindAddress(f.metrics_address, "--metrics-bind-address");
    if (!bind.ok()) {
      in.err << "orrery operator: " << bind.status().message() << "\n";
      return kExitUsage;
    }
    std::string host = bind->first.empty() ? "0.0.0.0" : bind->first;
    metrics::ExposerOptions secure;
    if (f.metrics_secure) {
      secure.https = true;
      if (!f.metrics_cert_dir.empty()) {
        secure.cert_file = f.metrics_cert_dir + "/tls.crt";
        secure.key_file = f.metrics_cert_dir + "/tls.key";
      } else {
        // No certificate given: one made now, for this process only (scrapers
        // then skip verification or pin nothing, as with controller-runtime's).
        char hostname[256] = {0};
        gethostname(hostname, sizeof(hostname) - 1);
        auto made = metrics::SelfSignedCertificate({"localhost", "127.0.0.1", hostname});
        if (!made.ok()) {
          in.err << "orrery operator: " << made.status() << "\n";
          return kExitInvalid;
        }
        secure.tls = std::move(*made);
      }
      authorizer = std::make_unique<kube::DelegatedAuthorizer>(rest->get(), SystemClock::Get());
      secure.authorize = [a = authorizer.get()](const std::string& method, const std::string& path,
                                                const std::string& authorization) {
        // Verbs as the API server names HTTP methods on non-resource URLs.
        std::string verb = method == "HEAD" ? "get" : method;
        for (char& c : verb) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return a->Check(authorization, verb, path);
      };
    }
    auto started = metrics::Exposer::Start(host + ":" + std::to_string(bind->second), registry,
                                           "--metrics-bind-address", std::move(secure));
    if (!started.ok()) {
      in.err << "orrery operator: " << started.status() << "\n";
      return kExitInvalid;
    }
    exposer = std::move(*started);
    Log(LogLevel::kInfo, "Serving metrics",
        {{"address", host + ":" + std::to_string(exposer->port())},
         {"path", "/metrics"},
         {"scheme", f.metrics_secure ? "https" : "http"},
         {"auth", f.metrics_secure ? "TokenReview+SubjectAccessReview" : "none"}});
  }

  auto probes = controller::ProbeServer::Start(f.health_address, [&]() -> std::string {
    if (g_stop.load()) return "stopping";
    if (f.leader_elect && !leading.load()) return "";  // a standby is ready to take over
    controller::Manager* m = manager.load();
    return m == nullptr ? "starting" : m->NotReadyReason();
  });
  if (!probes.ok()) {
    in.err << "orrery operator: " << probes.status() << "\n";
    return kExitInvalid;
  }
  Log(LogLevel::kInfo, "Serving probes",
      {{"port", std::to_string((*probes)->port())}, {"paths", "/healthz /readyz"}});

  controller::ManagerOptions mo;
  mo.namespaces = f.namespaces;
  mo.gpu_resource = f.gpu_resource;
  mo.workers = f.workers;
  mo.identity = Identity();
  mo.reconciler.profile_namespace = f.profile_namespace;
  mo.reconciler.device = f.device;
  mo.reconciler.gpu_type_label = f.gpu_type_label;
  mo.reconciler.gpu_type_speeds = f.gpu_type_speeds;
  mo.reconciler.gpu_memory_reserve = f.gpu_memory_reserve;
  mo.reconciler.cluster_shares = f.cluster_shares;
  mo.kueue = f.kueue;
  // CPU-only nodes run the workers on gloo; GPU nodes on NCCL.
  mo.reconciler.gang.backend = f.device == "cpu" ? "gloo" : "nccl";
  mo.progress.period = std::chrono::duration_cast<std::chrono::milliseconds>(f.progress_period);
  mo.reconciler.worker_image = f.worker_image;
  mo.reconciler.gang_timeout_s = std::chrono::duration<double>(f.gang_timeout).count();
  mo.reconciler.node_lost_grace_s = std::chrono::duration<double>(f.node_lost_grace).count();
  mo.reconciler.engine.solver_time_limit_s = f.solver_time_limit_s;
  SystemClock clock;

  // Leads until `stop` says otherwise; false when the manager could not start.
  auto lead = [&](const std::function<bool()>& stop) -> Status {
    metrics.leader.Add({}).Set(1);
    leading.store(true);
    controller::Manager m(&client, mo, &metrics, &clock);
    manager.store(&m);
    std::atomic<bool> stop_flag{false};
    std::thread watcher([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (!stop()) cv.wait_for(lock, std::chrono::milliseconds(200));
      stop_flag.store(true);
    });
    Status started = m.Run(stop_flag);
    if (started.ok()) {
      Log(LogLevel::kInfo, "Controllers started",
          {{"namespaces",
            f.namespaces.empty() ? std::string("all") : std::to_string(f.namespaces.size())},
           {"workers", std::to_string(f.workers)}});
    } else {
      Log(LogLevel::kError, "Controllers did not start", {{"error", started.ToString()}});
    }
    watcher.join();
    manager.store(nullptr);
    m.Stop();
    leading.store(false);
    metrics.leader.Add({}).Set(0);
    return started;
  };

  if (!f.leader_elect) {
    Status s = lead([&] { return g_stop.load(); });
    Log(LogLevel::kInfo, "Stopped");
    return s.ok() ? kExitOk : kExitInvalid;
  }

  kube::LeaderElectionConfig lc;
  lc.lease_namespace = f.lease_namespace;
  lc.lease_name = f.lease_name;
  lc.identity = mo.identity;
  lc.lease_duration = f.lease_duration;
  lc.renew_deadline = f.renew_deadline;
  lc.retry_period = f.retry_period;
  Status lead_status;
  lc.on_started_leading = [&](std::stop_token token) {
    std::stop_callback wake(token, [&] {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    });
    lead_status = lead([&] { return g_stop.load() || token.stop_requested(); });
    if (kube::LeaderElector* e = elector.load(); !lead_status.ok() && e != nullptr) e->Stop();
  };
  lc.on_new_leader = [](const std::string& id) {
    Log(LogLevel::kInfo, "New leader", {{"identity", id}});
  };
  metrics.leader.Add({}).Set(0);
  kube::LeaderElector le(&client, lc);
  elector.store(&le);
  if (g_stop.load()) return kExitOk;
  Status run = le.Run();
  elector.store(nullptr);
  if (!run.ok()) {
    Log(LogLevel::kError, "Leader election ended", {{"error", run.ToString()}});
    return kExitInvalid;
  }
  Log(LogLevel::kInfo, "Stopped");
  return lead_status.ok() ? kExitOk : kExitInvalid;
}

}  // namespace
}  // namespace orrery::cli

ORRERY_CLI_COMMAND(operator, "operator [--kubeconfig FILE] [--leader-elect]",
                   "Run the Kubernetes operator (controllers, probes, metrics)",
                   orrery::cli::RunOperator);
