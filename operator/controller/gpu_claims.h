// GPUs claimed by gangs and profile trials the operator created whose pods the
// informer cache may not show yet. Reconciles of different jobs run in
// parallel (the work queue never hands one key to two workers), each over its
// own snapshot of the pod cache; this ledger is what they share, so two jobs
// never launch onto the same free GPUs:
// - a pass reads the claims of other jobs that its snapshot does not show
//   (Others), and plans on the GPUs left;
// - before it creates a gang it claims the gang's GPUs (TryClaim), which
//   succeeds only if they are still free after the claims other jobs made since
//   its snapshot; a refused claim is retried by the next pass, over a fresh
//   snapshot.
// A claim ends once every pass in flight took its snapshot after one that
// showed the gang's pods (they count there now: a pass with an older snapshot
// still needs the claim), when its owner releases it (a failed create, a
// deleted job), or after `ttl` (pods that never appeared). Snapshots are taken
// through Begin, under the ledger's lock, so their order is known.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"

namespace orrery::controller {

class GpuClaims {
 public:
  explicit GpuClaims(double ttl_s) : ttl_s_(ttl_s) {}

  // A pass begins: `snapshot` reads the caches it plans over (under the
  // ledger's lock: keep it to copying pointers). The ticket names the pass
  // until End.
  uint64_t Begin(const std::function<void()>& snapshot);
  void End(uint64_t ticket);

  // What a pass of `owner` (a job key) must count besides its pod snapshot:
  // GPUs by node claimed by other owners for gang pods that `cached` (the
  // pass's snapshot: pods by node of each gang, as GangKey names them) does
  // not show; a gang's pods are created one by one, so a snapshot may show
  // some. `seq` marks the view for TryClaim. `ticket` is the pass's (Begin);
  // 0: a pass outside Begin/End (tests), whose snapshot ends the claims it
  // shows whole at once.
  struct View {
    uint64_t seq = 0;
    std::map<std::string, int> by_node;
  };
  using Shown = std::map<std::string, std::map<std::string, int>>;  // gang -> node -> pods
  View Others(const std::string& owner, const Shown& cached, TimePoint now, uint64_t ticket = 0);

  // Claims one GPU per entry of `nodes` for `owner`'s gang `gang` when every
  // node's `free` GPUs (as the pass counted them at view `seq`, its own earlier
  // claims of the pass subtracted) still cover them after the claims other
  // owners made since `seq`. True: claimed, and `free` is reduced by them.
  bool TryClaim(const std::string& owner, const std::string& gang,
                const std::vector<std::string>& nodes, std::map<std::string, int>* free,
                uint64_t seq, TimePoint now);

  // Ends one claim (its create failed) or every claim of an owner (deleted).
  void Release(const std::string& owner, const std::string& gang);
  void Forget(const std::string& owner);

  size_t size() const;

 private:
  struct Claim {
    std::string owner;
    std::vector<std::string> nodes;
    uint64_t seq = 0;
    TimePoint at;
    uint64_t seen = UINT64_MAX;  // the first pass whose snapshot showed all its pods
  };
  void Expire(TimePoint now);  // mu_ held
  void Prune();                // mu_ held: claims every pass in flight sees

  const double ttl_s_;
  mutable std::mutex mu_;
  uint64_t seq_ = 0;
  uint64_t next_ticket_ = 1;
  std::set<uint64_t> active_;            // passes in flight
  std::map<std::string, Claim> claims_;  // by gang key
};

// The ledger's name for a gang: "<job label>/<gang label>" for a training gang,
// "<job label>/profile-<profile hash>" for a profile trial.
std::string GangKey(const std::string& job_label, const std::string& gang_label);
std::string ProfileGangKey(const std::string& job_label, const std::string& profile_hash);

}  // namespace orrery::controller
