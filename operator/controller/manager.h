// The operator process's controller wiring: informers on ModelSelectionJobs,
// pods, nodes and the profile ConfigMap; one work queue of job keys fed by them
// (a job's own changes, its pods' changes through their controller owner
// reference, and any node or profile-cache change for every job, since those
// change what every job may plan); a pool of workers calling the Reconciler;
// and the operator's Prometheus metrics, sampled from the same caches.
//
// `orrery operator` builds one Manager per leadership term: the caches start
// empty, so a new leader rebuilds everything from the cluster (the reconciler's
// restart contract).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/metrics/metrics.h"
#include "common/status.h"
#include "operator/controller/progress.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/client.h"
#include "operator/kube/controller.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"

namespace orrery::controller {

struct ManagerOptions {
  // Namespaces whose jobs are reconciled; empty: every namespace. Pods and nodes
  // are always watched cluster-wide (other workloads' GPU requests count).
  std::vector<std::string> namespaces;
  ReconcilerOptions reconciler;  // its profile_namespace names the ConfigMap's
  std::string gpu_resource = "nvidia.com/gpu";
  int workers = 2;
  Duration resync_period = std::chrono::minutes(5);
  Duration sync_timeout = std::chrono::minutes(2);
  Duration metrics_period = std::chrono::seconds(2);
  std::string identity = "orrery-operator";  // the events' reportingInstance
  ProgressScraperOptions progress;           // how rank 0 of each gang is polled
  // Kueue admission (kueue.h): "auto" watches Workloads and ResourceFlavors when
  // the API server serves kueue.x-k8s.io/v1beta2 workloads, "true" requires
  // it, "false" never looks (a job labelled for a queue then waits).
  std::string kueue = "auto";
};

// A Client that counts every request in orrery_kube_requests_total{verb, code}.
class InstrumentedClient final : public kube::Client {
 public:
  InstrumentedClient(kube::Client* inner, metrics::OperatorMetrics* metrics)
      : inner_(inner), metrics_(metrics) {}
  StatusOr<kube::Object> Get(const kube::Resource& r, const std::string& ns,
                             const std::string& name) override;
  StatusOr<kube::Object> List(const kube::Resource& r, const std::string& ns,
                              const kube::ListOptions& options) override;
  StatusOr<kube::Object> Create(const kube::Resource& r, const std::string& ns,
                                const kube::Object& obj) override;
  StatusOr<kube::Object> Update(const kube::Resource& r, const std::string& ns,
                                const kube::Object& obj) override;
  StatusOr<kube::Object> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                      const kube::Object& obj) override;
  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                const kube::DeleteOptions& options) override;
  StatusOr<kube::Object> Patch(const kube::Resource& r, const std::string& ns,
                               const std::string& name, kube::PatchType type,
                               const kube::Object& patch,
                               const kube::PatchOptions& options) override;
  StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource& r, const std::string& ns,
                                                     const kube::ListOptions& options) override;

 private:
  void Count(const char* verb, const Status& status);
  kube::Client* inner_;
  metrics::OperatorMetrics* metrics_;
};

// kube-system, kube-public, kube-node-lease: never managed, even when the
// operator watches every namespace.
bool IsSystemNamespace(const std::string& ns);

class Manager {
 public:
  // `client`, `metrics` (may be null) and `clock` must outlive the manager.
  Manager(kube::Client* client, ManagerOptions options, metrics::OperatorMetrics* metrics,
          const Clock* clock);
  ~Manager();  // Stop()
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Starts the informers, waits for their caches (or `stop`), then the workers.
  Status Run(const std::atomic<bool>& stop);
  // Finishes the reconciles in progress and stops everything; idempotent.
  void Stop();

  // "" once every cache has synced and the workers run, else what it waits for.
  std::string NotReadyReason() const;

  const Reconciler* reconciler() const { return reconciler_.get(); }
  kube::Controller* controller() { return controller_.get(); }

 private:
  bool Watched(const std::string& ns) const;
  void EnqueueAllJobs();
  Status StartKueueInformers(Clock* clock);
  // Run's steps, in order.
  void MakeInformers(Clock* clock);
  Status MakeReconciler(Clock* clock);
  StatusOr<kube::Result> ReconcileOne(const std::string& key);
  void AddEventHandlers();
  Status SyncInformers(const std::atomic<bool>& stop);
  void SampleMetrics();
  void MetricsLoop();

  kube::Client* client_;
  ManagerOptions options_;
  metrics::OperatorMetrics* metrics_;
  const Clock* clock_;
  std::set<std::string> namespaces_;
  // One per watched namespace (one for all when none is named).
  std::vector<std::unique_ptr<kube::Informer>> jobs_;
  std::unique_ptr<kube::Informer> pods_, nodes_, configmaps_;
  std::unique_ptr<kube::Informer> workloads_, flavors_;  // when Kueue is served
  // Every informer, for starting, syncing and stopping them together.
  std::vector<kube::Informer*> Informers() const;
  std::unique_ptr<kube::EventRecorder> events_;
  ProgressBoard progress_;
  std::unique_ptr<ProgressScraper> scraper_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<kube::Controller> controller_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stopped_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread metrics_thread_;
  std::set<std::string> sampled_jobs_;  // msj label values with gauges set
};

}  // namespace orrery::controller
