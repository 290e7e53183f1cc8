// See shard_group.h.
#include "worker/parallel/shard_group.h"

#include <algorithm>

namespace orrery::parallel::internal {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

int ShardGroup::Join(const std::string& task, const void* owner, std::vector<at::Tensor> host,
                     std::vector<size_t> visits) {
  std::lock_guard<std::mutex> lock(mu_);
  Member m{task, owner, std::move(host), std::move(visits), true, {}, {}};
  m.compute_s.assign(m.visits.size(), 0.0);
  m.copy_s.assign(m.visits.size(), 0.0);
  members_.push_back(std::move(m));
  // No round yet: the first Enter() builds one with every member joined by then.
  return static_cast<int>(members_.size()) - 1;
}

void ShardGroup::Leave(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (holder_ == id) {
    if (solo_) {
      holder_ = -1;
      solo_ = false;
    } else {
      HandOffLocked();
    }
  }
  members_[id].active = false;
  std::erase_if(slots_, [id](const Slot& s) { return s.id == id; });
  RefillLocked();
  cv_.notify_all();
}

Status ShardGroup::Enter(int id, size_t visit) {
  std::unique_lock<std::mutex> lock(mu_);
  if (holder_ == id && !solo_) HandOffLocked();
  RefillLocked();
  cv_.wait(lock, [&] { return holder_ == -1 && !slots_.empty() && slots_.front().id == id; });
  if (slots_.front().visit != visit) {
    return InternalError("interleaved task " + members_[id].task + " reached visit " +
                         std::to_string(visit) + " of its step where the schedule expects visit " +
                         std::to_string(slots_.front().visit));
  }
  holder_ = id;
  turn_start_ = std::chrono::steady_clock::now();
  turn_wait_s_ = 0;
  return OkStatus();
}

void ShardGroup::EndStep(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t round = -1;
  if (holder_ == id && !solo_) {
    round = slots_.front().round;
    HandOffLocked();
  } else {
    for (const Slot& s : slots_) {
      if (s.id == id) {
        round = s.round;
        break;
      }
    }
  }
  // After a failed visit, the rest of this step's slots go unused.
  std::erase_if(slots_, [&](const Slot& s) { return s.id == id && s.round == round; });
  RefillLocked();
  cv_.notify_all();
}

bool ShardGroup::Holds(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  return holder_ == id;
}

void ShardGroup::EnterSolo(int id) {
  std::unique_lock<std::mutex> lock(mu_);
  RefillLocked();
  cv_.wait(lock, [&] { return holder_ == -1 && (slots_.empty() || slots_.front().id == id); });
  holder_ = id;
  solo_ = true;
}

void ShardGroup::ExitSolo(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (holder_ == id) {
    holder_ = -1;
    solo_ = false;
  }
  cv_.notify_all();
}

std::optional<ShardGroup::Next> ShardGroup::NextShard() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!choice_.has_value() || slots_.size() < 2) return std::nullopt;
  const Slot& s = slots_[1];
  // The holder's own next step: its optimizer has yet to update the masters
  // (it steps at the end of this step's last turn). Other members stepped
  // within turns that came before.
  if (s.id == slots_.front().id && s.round != slots_.front().round) return std::nullopt;
  const Member& m = members_[s.id];
  const size_t unit = m.visits[s.visit];
  return Next{m.owner, unit, m.host[unit]};
}

bool ShardGroup::prefetching() {
  std::lock_guard<std::mutex> lock(mu_);
  return choice_.has_value();
}

void ShardGroup::AddWait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  turn_wait_s_ += seconds;
}

std::optional<InterleaveChoice> ShardGroup::choice() {
  std::lock_guard<std::mutex> lock(mu_);
  return choice_;
}

void ShardGroup::OnChoice(std::function<void(const InterleaveChoice&)> f) {
  std::lock_guard<std::mutex> lock(mu_);
  on_choice_ = std::move(f);
}

InterleavedStats ShardGroup::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  InterleavedStats s = stats_;
  s.peak_device_bytes = shard_device_.accountant().peak();
  s.budget_bytes = shard_device_.accountant().budget();
  return s;
}

void ShardGroup::HandOffLocked() {
  const Slot s = slots_.front();
  slots_.pop_front();
  // The measuring round times each turn's work: on CUDA, once the device has
  // done it (the holder's thread, whose stream it queued on, calls this).
  if (s.round == 0 && !choice_.has_value()) shard_device_.Synchronize();
  const double turn = Since(turn_start_);
  const double compute = std::max(0.0, turn - turn_wait_s_);
  stats_.busy_s += compute;
  stats_.wait_s += turn_wait_s_;
  ++stats_.turns;
  if (s.round == 0 && !choice_.has_value()) {
    members_[s.id].compute_s[s.visit] = compute;
    members_[s.id].copy_s[s.visit] = turn_wait_s_;
  }
  holder_ = -1;
  RefillLocked();
  cv_.notify_all();
}

void ShardGroup::RefillLocked() {
  while (slots_.size() < 2) {
    std::vector<int> active;
    for (size_t i = 0; i < members_.size(); ++i)
      if (members_[i].active) active.push_back(static_cast<int>(i));
    if (active.empty()) return;
    InterleaveOrder order = InterleaveOrder::kModelAfterModel;  // round 0 measures
    if (rounds_ > 0 || forced_ != InterleaveOrder::kAuto) {
      if (!choice_.has_value()) {
        // The measuring round must finish before the order is known.
        if (std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.round == 0; }))
          return;
        ChooseLocked();
      }
      order = choice_->order;
    }
    size_t longest = 0;
    for (int id : active) longest = std::max(longest, members_[id].visits.size());
    if (order == InterleaveOrder::kRoundRobin) {
      for (size_t v = 0; v < longest; ++v)
        for (int id : active)
          if (v < members_[id].visits.size()) slots_.push_back({id, v, rounds_});
    } else {
      for (int id : active)
        for (size_t v = 0; v < members_[id].visits.size(); ++v) slots_.push_back({id, v, rounds_});
    }
    ++rounds_;
  }
}

void ShardGroup::ChooseLocked() {
  InterleaveChoice c;
  std::vector<std::vector<double>> compute, copy;
  for (const Member& m : members_) {
    if (!m.active) continue;
    c.tasks.push_back(m.task);
    c.compute_s.push_back(Sum(m.compute_s));
    c.copy_s.push_back(Sum(m.copy_s));
    compute.push_back(m.compute_s);
    copy.push_back(m.copy_s);
  }
  if (forced_ != InterleaveOrder::kAuto) {
    c.order = forced_;
    c.forced = true;
  } else {
    c.round_robin_s = PredictRoundSeconds(compute, copy, InterleaveOrder::kRoundRobin);
    c.model_after_model_s = PredictRoundSeconds(compute, copy, InterleaveOrder::kModelAfterModel);
    // Round robin only when it is clearly shorter (2%: the measurement's
    // noise); a tie keeps each task's step together, fewer activations alive.
    c.order = c.round_robin_s < 0.98 * c.model_after_model_s ? InterleaveOrder::kRoundRobin
                                                             : InterleaveOrder::kModelAfterModel;
  }
  choice_ = c;
  if (on_choice_) on_choice_(c);
}

}  // namespace orrery::parallel::internal
