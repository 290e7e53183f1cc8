// Lease-based leader election (see leader_election.h).
#include "operator/kube/leader_election.h"

#include <ctime>
#include <thread>

#include "common/log.h"
#include "operator/kube/api_error.h"
#include "operator/kube/store.h"

namespace orrery::kube {

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof(out), "%s.%06lldZ", buf, static_cast<long long>(us % 1000000));
  return out;
}

LeaderElector::LeaderElector(Client* client, LeaderElectionConfig config, Clock* clock)
    : client_(client),
      config_(std::move(config)),
      clock_(clock != nullptr ? clock : SystemClock::Get()) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

bool LeaderElector::WaitFor(Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stop_.load(); });
}

std::string LeaderElector::ObservedLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!observed_spec_.is_object()) return "";
  return observed_spec_.value("holderIdentity", "");
}

bool LeaderElector::TryAcquireOrRenew() {
  const std::string now_wall = FormatMicroTime(std::chrono::system_clock::now());
  const int64_t lease_seconds = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  Object desired = {{"holderIdentity", config_.identity},
                    {"leaseDurationSeconds", lease_seconds},
                    {"acquireTime", now_wall},
                    {"renewTime", now_wall},
                    {"leaseTransitions", 0}};

  auto current = client_->Get(Leases(), config_.lease_namespace, config_.lease_name);
  if (!current.ok()) {
    if (!IsNotFound(current.status())) {
      Log(LogLevel::kWarning, "Failed to read lease",
          {{"lease", config_.lease_name}, {"error", current.status().ToString()}});
      return false;
    }
    Object lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec", desired}};
    auto created = client_->Create(Leases(), config_.lease_namespace, lease);
    if (!created.ok()) return false;  // someone else created it first: campaign on
    std::lock_guard<std::mutex> lock(mu_);
    observed_spec_ = (*created)["spec"];
    observed_resource_version_ = ResourceVersionOf(*created);
    observed_time_ = clock_->Now();
    return true;
  }

  Object spec = current->value("spec", Object::object());
  std::string holder = spec.value("holderIdentity", "");
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string rv = ResourceVersionOf(*current);
    if (rv != observed_resource_version_) {
      observed_spec_ = spec;
      observed_resource_version_ = rv;
      observed_time_ = clock_->Now();
    }
    bool expired = clock_->Now() >= observed_time_ + config_.lease_duration;
    if (!holder.empty() && holder != config_.identity && !expired) return false;
  }
  if (holder == config_.identity) {
    desired["acquireTime"] = spec.value("acquireTime", now_wall);
    desired["leaseTransitions"] = spec.value("leaseTransitions", 0);
  } else {
    desired["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  Object updated_lease = *current;
  updated_lease["spec"] = desired;  // metadata.resourceVersion kept: optimistic write
  auto updated = client_->Update(Leases(), config_.lease_namespace, updated_lease);
  if (!updated.ok()) {
    if (!IsConflict(updated.status()))
      Log(LogLevel::kWarning, "Failed to update lease",
          {{"lease", config_.lease_name}, {"error", updated.status().ToString()}});
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  observed_spec_ = (*updated)["spec"];
  observed_resource_version_ = ResourceVersionOf(*updated);
  observed_time_ = clock_->Now();
  return true;
}

void LeaderElector::Release() {
  auto current = client_->Get(Leases(), config_.lease_namespace, config_.lease_name);
  if (!current.ok()) return;
  Object spec = current->value("spec", Object::object());
  if (spec.value("holderIdentity", "") != config_.identity) return;
  Object lease = *current;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = FormatMicroTime(std::chrono::system_clock::now());
  auto s = client_->Update(Leases(), config_.lease_namespace, lease);
  if (!s.ok())
    Log(LogLevel::kWarning, "Failed to release lease",
        {{"lease", config_.lease_name}, {"error", s.status().ToString()}});
}

Status LeaderElector::Run() {
  if (config_.lease_name.empty() || config_.identity.empty())
    return InvalidArgumentError("leader election needs a lease name and an identity");
  if (config_.lease_duration <= config_.renew_deadline)
    return InvalidArgumentError("lease_duration must be greater than renew_deadline");
  if (config_.renew_deadline <= config_.retry_period)
    return InvalidArgumentError("renew_deadline must be greater than retry_period");

  auto report_leader = [&] {
    std::string leader = ObservedLeader();
    if (leader != reported_leader_) {
      reported_leader_ = leader;
      if (config_.on_new_leader && !leader.empty()) config_.on_new_leader(leader);
    }
  };

  // Campaign.
  while (!stop_) {
    bool acquired = TryAcquireOrRenew();
    report_leader();
    if (acquired) break;
    if (!WaitFor(config_.retry_period)) break;
  }
  if (stop_) return OkStatus();

  Log(LogLevel::kInfo, "Acquired lease",
      {{"lease", config_.lease_namespace + "/" + config_.lease_name},
       {"identity", config_.identity}});
  leading_ = true;
  std::jthread leading;
  if (config_.on_started_leading) leading = std::jthread(config_.on_started_leading);

  // Renew until a renew deadline passes without success, or until stopped.
  TimePoint last_renew = clock_->Now();
  bool lost = false;
  while (WaitFor(config_.retry_period)) {
    if (TryAcquireOrRenew()) {
      last_renew = clock_->Now();
      report_leader();
      continue;
    }
    report_leader();
    if (clock_->Now() >= last_renew + config_.renew_deadline ||
        (ObservedLeader() != config_.identity && !ObservedLeader().empty())) {
      lost = true;
      break;
    }
  }
  leading_ = false;
  // The controllers finish what they are doing before the lease is given up, so
  // a successor never works beside them.
  if (leading.joinable()) {
    leading.request_stop();
    leading.join();
  }
  if (!lost && config_.release_on_cancel) Release();
  Log(lost ? LogLevel::kWarning : LogLevel::kInfo, lost ? "Lost lease" : "Stopped leading",
      {{"lease", config_.lease_namespace + "/" + config_.lease_name},
       {"identity", config_.identity}});
  if (config_.on_stopped_leading) config_.on_stopped_leading();
  return lost ? AbortedError("lost lease " + config_.lease_namespace + "/" + config_.lease_name)
              : OkStatus();
}

}  // namespace orrery::kube
