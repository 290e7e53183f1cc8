// Workers, enqueue handlers and the retry contract (see controller.h).
#include "operator/kube/controller.h"

#include "common/log.h"
#include "operator/kube/api_error.h"

namespace orrery::kube {

Controller::Controller(std::string name, Reconciler reconcile, int workers, Clock* clock,
                       std::unique_ptr<RateLimiter> limiter)
    : name_(std::move(name)),
      reconcile_(std::move(reconcile)),
      workers_(workers < 1 ? 1 : workers),
      queue_(clock != nullptr ? clock : SystemClock::Get(), std::move(limiter)) {}

Controller::~Controller() { Stop(); }

std::string ControllerOwnerKey(const Object& obj, const std::string& owner_kind) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  auto refs = m->find("ownerReferences");
  if (refs == m->end() || !refs->is_array()) return "";
  for (const auto& r : *refs) {
    if (r.is_object() && r.value("controller", false) && r.value("kind", "") == owner_kind)
      return KeyFor(m->value("namespace", ""), r.value("name", ""));
  }
  return "";
}

EventHandlers Controller::EnqueueHandlers() {
  return {[this](const ObjectPtr& o) { queue_.Add(KeyOf(*o)); },
          [this](const ObjectPtr&, const ObjectPtr& o) { queue_.Add(KeyOf(*o)); },
          [this](const ObjectPtr& o, bool) { queue_.Add(KeyOf(*o)); }};
}

EventHandlers Controller::EnqueueOwnerHandlers(const std::string& owner_kind) {
  auto enqueue = [this, owner_kind](const Object& o) {
    std::string key = ControllerOwnerKey(o, owner_kind);
    if (!key.empty()) queue_.Add(key);
  };
  return {[enqueue](const ObjectPtr& o) { enqueue(*o); },
          [enqueue](const ObjectPtr& old_obj, const ObjectPtr& o) {
            // An owner change must wake both the old and the new owner.
            enqueue(*old_obj);
            enqueue(*o);
          },
          [enqueue](const ObjectPtr& o, bool) { enqueue(*o); }};
}

void Controller::Start() {
  if (!threads_.empty()) return;
  for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { Work(); });
}

void Controller::Stop() {
  queue_.ShutDownWithDrain();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void Controller::Work() {
  while (auto key = queue_.Get()) {
    ++reconciles_;
    StatusOr<Result> r = reconcile_(*key);
    if (!r.ok()) {
      ++failures_;
      if (!IsConflict(r.status()))
        Log(LogLevel::kWarning, "Failed to reconcile",
            {{"controller", name_},
             {"key", *key},
             {"error", r.status().ToString()},
             {"requeues", std::to_string(queue_.NumRequeues(*key))}});
      queue_.AddRateLimited(*key);
    } else if (r->requeue_after > Duration::zero()) {
      queue_.Forget(*key);
      queue_.AddAfter(*key, r->requeue_after);
    } else if (r->requeue) {
      queue_.AddRateLimited(*key);
    } else {
      queue_.Forget(*key);
    }
    queue_.Done(*key);
  }
}

}  // namespace orrery::kube
