// An informer: list-then-watch of one resource into an indexed cache (store.h),
// with handlers told of every add, update and delete, like client-go's shared
// informer. The reflector inside
//  - lists in pages (a consistent snapshot) and replaces the cache, telling the
//    handlers what the relist changed (deletions it missed come with
//    final_state_unknown);
//  - watches from the list's resourceVersion with bookmarks, tracking the
//    resourceVersion of every event, so a dropped connection or a restarted API
//    server is answered by a new watch from where it stopped: nothing missed,
//    nothing repeated;
//  - answers 410 Gone (as an HTTP status or as an ERROR event, e.g. after etcd
//    compaction) with a fresh list;
//  - backs off exponentially between failures (0.8s doubling to 30s by default).
// Handlers run on the informer's threads, one at a time, in event order; they
// should only enqueue keys (STYLE.md: level-triggered controllers) and must not
// block. Resync (if set) calls on_update(obj, obj) for every cached object at the
// period, on the Clock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "operator/kube/client.h"
#include "operator/kube/store.h"

namespace orrery::kube {

struct EventHandlers {
  std::function<void(const ObjectPtr& obj)> on_add;
  std::function<void(const ObjectPtr& old_obj, const ObjectPtr& new_obj)> on_update;
  // `final_state_unknown`: the delete was inferred by a relist, and `last` is the
  // last state the cache saw, not the state at deletion.
  std::function<void(const ObjectPtr& last, bool final_state_unknown)> on_delete;
};

struct InformerOptions {
  std::string ns;  // "" for all namespaces (and for cluster-scoped resources)
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  Duration resync_period = Duration::zero();  // zero: no resync
  // The server ends each watch after a random time in [t, 2t), as client-go does,
  // so that watches of many clients do not expire together.
  int watch_timeout_seconds = 300;
  Duration initial_backoff = std::chrono::milliseconds(800);
  Duration max_backoff = std::chrono::seconds(30);
  std::map<std::string, IndexFunc> indexers;  // kByNamespace is always there
  uint32_t seed = 1;                          // for the watch timeout jitter
};

class Informer {
 public:
  // `client` and `clock` (nullptr: system clock) must outlive the informer.
  Informer(Client* client, Resource resource, InformerOptions options = {}, Clock* clock = nullptr);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Handlers added after the cache holds objects are first told of each as an add.
  void AddEventHandler(EventHandlers handlers);
  void Start();
  // Stops the threads; handlers are not called after Stop returns.
  void Stop();

  // True once the first list has been stored and its adds handed to the handlers.
  bool HasSynced() const { return synced_.load(); }
  // Waits (real time) until synced or stopped; returns HasSynced().
  bool WaitForSync(Duration timeout);

  const Store& store() const { return store_; }
  const Resource& resource() const { return resource_; }
  // The resourceVersion the informer has seen up to.
  std::string LastResourceVersion() const;

  struct Stats {
    int64_t lists = 0;         // completed lists (the first and every relist)
    int64_t gone_relists = 0;  // lists caused by 410 Gone
    int64_t watches = 0;       // watch requests opened
    int64_t events = 0;        // watch events handled (bookmarks excluded)
    int64_t bookmarks = 0;
    int64_t failures = 0;  // failed lists and broken watches
  };
  Stats stats() const;

 private:
  void Run();
  void RunResync();
  Status ListAndReplace();
  // Watches until the stream ends; sets `need_list` on 410 Gone.
  Status WatchOnce(bool* need_list);
  void Dispatch(const std::vector<StoreDelta>& deltas);
  void DispatchAdd(const ObjectPtr& obj);
  void DispatchUpdate(const ObjectPtr& old_obj, const ObjectPtr& new_obj);
  void DispatchDelete(const ObjectPtr& obj, bool unknown);
  // Sleeps `d` of real time unless stopped first; returns false when stopped.
  bool WaitFor(Duration d);

  Client* client_;
  Resource resource_;
  InformerOptions options_;
  Clock* clock_;
  Store store_;

  std::atomic<bool> synced_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::string resource_version_;
  WatchStream* current_watch_ = nullptr;
  Stats stats_;
  uint32_t rng_state_;

  std::mutex handlers_mu_;  // serializes handler calls
  std::vector<EventHandlers> handlers_;

  std::thread thread_;
  std::thread resync_thread_;
};

}  // namespace orrery::kube
