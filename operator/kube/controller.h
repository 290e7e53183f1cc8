// A controller runtime in the sample-controller shape: informer handlers enqueue
// keys ("ns/name"), workers take keys from a rate-limited WorkQueue and call the
// reconciler, and the retry contract is applied in one place:
//   - success: Forget the key (its backoff starts over);
//   - Result.requeue_after > 0: a timed wait, AddAfter, not an error;
//   - Result.requeue: AddRateLimited without logging an error;
//   - error: AddRateLimited (per-item exponential backoff and the overall token
//     bucket); a Conflict is requeued the same way but not logged as a failure.
// The reconciler reads the current state from informer caches: it is
// level-triggered and never sees what an event said.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "operator/kube/informer.h"
#include "operator/kube/work_queue.h"

namespace orrery::kube {

struct Result {
  bool requeue = false;
  Duration requeue_after = Duration::zero();
};

using Reconciler = std::function<StatusOr<Result>(const std::string& key)>;

class Controller {
 public:
  // `clock` (nullptr: system clock) times the queue's delays and backoff.
  Controller(std::string name, Reconciler reconcile, int workers = 2, Clock* clock = nullptr,
             std::unique_ptr<RateLimiter> limiter = nullptr);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Handlers that enqueue the object's own key on add, update and delete.
  EventHandlers EnqueueHandlers();
  // Handlers that enqueue the key of the object's controlling owner of kind
  // `owner_kind` (ownerReferences[].controller == true), for child kinds.
  EventHandlers EnqueueOwnerHandlers(const std::string& owner_kind);

  void Start();
  // Stops taking new keys, waits for the reconciles in progress, joins workers.
  void Stop();

  WorkQueue& queue() { return queue_; }
  int64_t reconciles() const { return reconciles_.load(); }
  int64_t failures() const { return failures_.load(); }

 private:
  void Work();

  std::string name_;
  Reconciler reconcile_;
  int workers_;
  WorkQueue queue_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> reconciles_{0};
  std::atomic<int64_t> failures_{0};
};

// The key of `obj`'s controlling owner of kind `owner_kind` in obj's namespace,
// or "" when it has none.
std::string ControllerOwnerKey(const Object& obj, const std::string& owner_kind);

}  // namespace orrery::kube
