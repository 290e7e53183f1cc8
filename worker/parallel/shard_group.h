// The turns of an interleaved group (interleaved.h) on its shared device:
// each member (a spill strategy, one task) runs its steps on its own thread,
// and every shard visit of every member's step is a slot in one schedule;
// a member's thread computes only while its slot is the schedule's front, so
// one model's shard computes at a time while the copier brings in the shard
// of the next slot, whichever model it belongs to.
//
// A member holds the turn from Enter() (its visit's slot came up) until its
// next Enter() or EndStep(): the work between two visits (releasing the
// shard, flattening its gradients, the optimizer step after the last visit)
// belongs to its turn. Rounds are appended as the schedule runs low: a round
// holds one step of every active member, in the group's order. The first
// round runs model after model without prefetching and measures each slot's
// copy and compute; from those the group chooses the order of the rest
// (ChooseInterleaveOrder) and reports it.
//
// A member must keep stepping or Leave(): the others wait for its slots.
// Private to worker/parallel.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "worker/parallel/interleaved.h"
#include "worker/parallel/shard_device.h"

namespace orrery::parallel::internal {

class ShardGroup {
 public:
  ShardGroup(c10::Device device, int64_t budget_bytes, std::unique_ptr<ShardCopier> copier,
             InterleaveOrder order)
      : device_(device), shard_device_(budget_bytes, std::move(copier)), forced_(order) {}

  c10::Device device() const { return device_; }
  ShardDevice& shard_device() { return shard_device_; }

  // `host[u]` is shard u's host master; `visits` the units a step visits in
  // order. Returns the member's id.
  int Join(const std::string& task, const void* owner, std::vector<at::Tensor> host,
           std::vector<size_t> visits);
  void Leave(int id);
  // Hands over the turn `id` holds, if any, and blocks until visit `visit` of
  // its step is the front slot. INTERNAL if the schedule expects another
  // visit of this member (a step that ended early without EndStep).
  Status Enter(int id, size_t visit);
  // Hands over the turn and drops the member's slots left in this round.
  void EndStep(int id);
  bool Holds(int id);
  // A turn outside the schedule (a forward pass): blocks until the member's
  // next slot is the front, and holds the device until ExitSolo().
  void EnterSolo(int id);
  void ExitSolo(int id);

  // The shard to prefetch for the slot after the front, if any: none while
  // the first round measures, nor when it is the holder's own next step.
  struct Next {
    const void* owner = nullptr;
    size_t unit = 0;
    at::Tensor host;
  };
  std::optional<Next> NextShard();
  bool prefetching();
  // The holder's seconds waiting on copies in its current turn.
  void AddWait(double seconds);

  std::optional<InterleaveChoice> choice();
  void OnChoice(std::function<void(const InterleaveChoice&)> f);
  InterleavedStats stats();

 private:
  struct Slot {
    int id;
    size_t visit;
    int64_t round;
  };
  struct Member {
    std::string task;
    const void* owner;
    std::vector<at::Tensor> host;
    std::vector<size_t> visits;
    bool active = true;
    std::vector<double> compute_s, copy_s;  // per visit, measured in round 0
  };
  // Pops the front slot the holder is done with and appends rounds.
  void HandOffLocked();
  void RefillLocked();
  void ChooseLocked();

  const c10::Device device_;
  ShardDevice shard_device_;
  const InterleaveOrder forced_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Member> members_;
  std::deque<Slot> slots_;
  int64_t rounds_ = 0;  // appended so far
  int holder_ = -1;
  bool solo_ = false;
  std::chrono::steady_clock::time_point turn_start_;
  double turn_wait_s_ = 0;
  std::optional<InterleaveChoice> choice_;
  std::function<void(const InterleaveChoice&)> on_choice_;
  InterleavedStats stats_;
};

}  // namespace orrery::parallel::internal
