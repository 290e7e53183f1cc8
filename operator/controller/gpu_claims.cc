#include "operator/controller/gpu_claims.h"

#include <algorithm>

namespace orrery::controller {

std::string GangKey(const std::string& job_label, const std::string& gang_label) {
  return job_label + "/" + gang_label;
}

std::string ProfileGangKey(const std::string& job_label, const std::string& profile_hash) {
  return job_label + "/profile-" + profile_hash;
}

void GpuClaims::Expire(TimePoint now) {
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (ToSeconds(now - it->second.at) > ttl_s_) {
      it = claims_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t GpuClaims::Begin(const std::function<void()>& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  active_.insert(ticket);
  snapshot();
  return ticket;
}

void GpuClaims::End(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(ticket);
  Prune();
}

void GpuClaims::Prune() {
  // Snapshots are ordered by ticket: once the oldest pass in flight began
  // after the pass that saw a claim's pods, every pass counts those pods.
  const uint64_t oldest = active_.empty() ? UINT64_MAX : *active_.begin();
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (it->second.seen < oldest) {
      it = claims_.erase(it);
    } else {
      ++it;
    }
  }
}

GpuClaims::View GpuClaims::Others(const std::string& owner, const Shown& cached, TimePoint now,
                                  uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  Expire(now);
  View view;
  view.seq = seq_;
  static const std::map<std::string, int> kNone;
  for (auto& [gang, claim] : claims_) {
    auto shown_it = cached.find(gang);
    const std::map<std::string, int>& shown = shown_it == cached.end() ? kNone : shown_it->second;
    std::map<std::string, int> want;
    for (const std::string& node : claim.nodes) ++want[node];
    int missing = 0;
    for (const auto& [node, n] : want) {
      auto s = shown.find(node);
      const int left = std::max(0, n - (s == shown.end() ? 0 : s->second));
      missing += left;
      if (claim.owner != owner && left > 0) view.by_node[node] += left;
    }
    // Every pod in this snapshot: it counts them all.
    if (missing == 0) claim.seen = std::min(claim.seen, ticket);
  }
  Prune();
  return view;
}

bool GpuClaims::TryClaim(const std::string& owner, const std::string& gang,
                         const std::vector<std::string>& nodes, std::map<std::string, int>* free,
                         uint64_t seq, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  Expire(now);
  std::map<std::string, int> need;
  for (const std::string& node : nodes) ++need[node];
  std::map<std::string, int> since;  // other owners' claims after the pass's snapshot
  for (const auto& [key, c] : claims_) {
    if (c.owner == owner || c.seq <= seq) continue;
    for (const std::string& node : c.nodes) ++since[node];
  }
  for (const auto& [node, n] : need) {
    auto f = free->find(node);
    int left = (f == free->end() ? 0 : f->second) - since[node];
    if (left < n) return false;
  }
  for (const auto& [node, n] : need) (*free)[node] -= n;
  claims_[gang] = Claim{owner, nodes, ++seq_, now};
  return true;
}

void GpuClaims::Release(const std::string& owner, const std::string& gang) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = claims_.find(gang);
  if (it != claims_.end() && it->second.owner == owner) claims_.erase(it);
}

void GpuClaims::Forget(const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (it->second.owner == owner) {
      it = claims_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t GpuClaims::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return claims_.size();
}

}  // namespace orrery::controller
