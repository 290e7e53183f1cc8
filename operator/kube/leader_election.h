// Leader election on a coordination.k8s.io/v1 Lease, following client-go's
// leaderelection semantics:
//  - a candidate takes the lease when it is free or expired, where "expired" is
//    judged by this process's own clock: lease_duration after it last saw the
//    lease record change (clocks of different machines are never compared);
//  - the leader renews every retry_period; if it cannot renew within
//    renew_deadline of its last successful renew, it stops leading (before any
//    other candidate may take over, since renew_deadline < lease_duration);
//  - every write carries the lease's resourceVersion, so two candidates racing
//    for a free lease cannot both win.
// on_started_leading runs on its own thread with a stop_token that is signalled
// when leadership is lost or Stop() is called; controllers run inside it and stop
// with it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>

#include "common/clock.h"
#include "operator/kube/client.h"

namespace orrery::kube {

struct LeaderElectionConfig {
  std::string lease_namespace = "default";
  std::string lease_name;
  std::string identity;  // unique per candidate, e.g. the pod name
  Duration lease_duration = std::chrono::seconds(15);
  Duration renew_deadline = std::chrono::seconds(10);
  Duration retry_period = std::chrono::seconds(2);
  // On a graceful Stop, the leader empties the lease so a successor need not wait.
  bool release_on_cancel = true;
  std::function<void(std::stop_token)> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;
};

class LeaderElector {
 public:
  // `client` and `clock` (nullptr: system clock) must outlive the elector.
  LeaderElector(Client* client, LeaderElectionConfig config, Clock* clock = nullptr);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Validates the config, then campaigns, leads and renews; returns when
  // leadership is lost (Aborted) or Stop() is called (OK). Blocks the caller.
  Status Run();
  // Makes Run return soon; callable from any thread (e.g. a signal watcher).
  void Stop();

  bool IsLeader() const { return leading_.load(); }
  // The holder of the lease as last observed ("" when unknown or free).
  std::string ObservedLeader() const;

  // One attempt to take or renew the lease; true when this candidate holds it
  // after the call. Public for tests that step the election by hand.
  bool TryAcquireOrRenew();

 private:
  bool WaitFor(Duration d);  // false when stopped
  void Release();

  Client* client_;
  LeaderElectionConfig config_;
  Clock* clock_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // The lease spec as last observed, and when (by clock_) it last changed.
  Object observed_spec_;
  std::string observed_resource_version_;
  TimePoint observed_time_{};
  std::string reported_leader_;
};

// Kubernetes MicroTime ("2026-01-02T15:04:05.000000Z") of a wall-clock instant.
// Lease and Event timestamps are wall-clock by API contract; nothing in Orrery
// compares them for timing decisions.
std::string FormatMicroTime(std::chrono::system_clock::time_point t);

}  // namespace orrery::kube
