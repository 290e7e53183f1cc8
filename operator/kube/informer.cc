// The list-then-watch reflector and the informer around it (see informer.h).
#include "operator/kube/informer.h"

#include <algorithm>

#include "common/log.h"
#include "operator/kube/api_error.h"

namespace orrery::kube {

Informer::Informer(Client* client, Resource resource, InformerOptions options, Clock* clock)
    : client_(client),
      resource_(std::move(resource)),
      options_(std::move(options)),
      clock_(clock != nullptr ? clock : SystemClock::Get()),
      store_(options_.indexers),
      rng_state_(options_.seed == 0 ? 1 : options_.seed) {}

Informer::~Informer() { Stop(); }

void Informer::AddEventHandler(EventHandlers handlers) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  if (handlers.on_add) {
    for (const auto& obj : store_.List()) handlers.on_add(obj);
  }
  handlers_.push_back(std::move(handlers));
}

void Informer::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
  if (options_.resync_period > Duration::zero())
    resync_thread_ = std::thread([this] { RunResync(); });
}

void Informer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (current_watch_ != nullptr) current_watch_->Cancel();
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (resync_thread_.joinable()) resync_thread_.join();
}

bool Informer::WaitForSync(Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return synced_.load() || stop_.load(); });
  return synced_.load();
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

Informer::Stats Informer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool Informer::WaitFor(Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stop_.load(); });
}

void Informer::DispatchAdd(const ObjectPtr& obj) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  for (const auto& h : handlers_)
    if (h.on_add) h.on_add(obj);
}

void Informer::DispatchUpdate(const ObjectPtr& old_obj, const ObjectPtr& new_obj) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  for (const auto& h : handlers_)
    if (h.on_update) h.on_update(old_obj, new_obj);
}

void Informer::DispatchDelete(const ObjectPtr& obj, bool unknown) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  for (const auto& h : handlers_)
    if (h.on_delete) h.on_delete(obj, unknown);
}

void Informer::Dispatch(const std::vector<StoreDelta>& deltas) {
  for (const auto& d : deltas) {
    switch (d.type) {
      case StoreDelta::Type::kAdded: DispatchAdd(d.object); break;
      case StoreDelta::Type::kUpdated: DispatchUpdate(d.old_object, d.object); break;
      case StoreDelta::Type::kDeleted: DispatchDelete(d.old_object, /*unknown=*/true); break;
    }
  }
}

Status Informer::ListAndReplace() {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  lo.limit = options_.page_size;
  // "" asks for the most recent state (a quorum read): after a 410 the cache must
  // catch up with etcd, not with a lagging watch cache.
  ORRERY_ASSIGN_OR_RETURN(Object list, ListAll(*client_, resource_, options_.ns, lo));
  std::vector<ObjectPtr> objects;
  objects.reserve(list["items"].size());
  for (auto& item : list["items"]) {
    objects.push_back(std::make_shared<const Object>(std::move(item)));
  }
  auto deltas = store_.Replace(std::move(objects));
  {
    std::lock_guard<std::mutex> lock(mu_);
    resource_version_ = list["metadata"].value("resourceVersion", "");
    ++stats_.lists;
  }
  Dispatch(deltas);
  if (!synced_.exchange(true)) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  return OkStatus();
}

Status Informer::WatchOnce(bool* need_list) {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  lo.allow_watch_bookmarks = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lo.resource_version = resource_version_;
    // A small LCG is enough for jitter and keeps runs reproducible.
    rng_state_ = rng_state_ * 1103515245u + 12345u;
    double u = static_cast<double>((rng_state_ >> 8) & 0xFFFF) / 65536.0;
    lo.timeout_seconds = std::max(1, static_cast<int>(options_.watch_timeout_seconds * (1.0 + u)));
    ++stats_.watches;
  }
  auto stream = client_->Watch(resource_, options_.ns, lo);
  if (!stream.ok()) {
    if (IsGone(stream.status())) *need_list = true;
    return stream.status();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return CancelledError("informer stopped");
    current_watch_ = stream->get();
  }
  Status result;
  while (!stop_) {
    auto next = (*stream)->Next();
    if (!next.ok()) {
      result = next.status();
      break;
    }
    if (!next->has_value()) break;  // the server ended the watch: watch again from here
    WatchEvent& ev = **next;
    if (ev.type == WatchEvent::Type::kError) {
      result = ev.ErrorStatus("watch " + resource_.Name());
      if (IsGone(result)) *need_list = true;
      break;
    }
    std::string rv = ResourceVersionOf(ev.object);
    if (ev.type == WatchEvent::Type::kBookmark) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!rv.empty()) resource_version_ = rv;
      ++stats_.bookmarks;
      continue;
    }
    auto obj = std::make_shared<const Object>(std::move(ev.object));
    if (ev.type == WatchEvent::Type::kDeleted) {
      store_.Remove(KeyOf(*obj));
      DispatchDelete(obj, /*unknown=*/false);
    } else {
      ObjectPtr old = store_.Upsert(obj);
      if (old)
        DispatchUpdate(old, obj);
      else
        DispatchAdd(obj);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!rv.empty()) resource_version_ = rv;
    ++stats_.events;
  }
  std::lock_guard<std::mutex> lock(mu_);
  current_watch_ = nullptr;
  return result;
}

void Informer::Run() {
  bool need_list = true;
  Duration backoff = options_.initial_backoff;
  while (!stop_) {
    if (need_list) {
      Status s = ListAndReplace();
      if (!s.ok()) {
        if (stop_) break;
        Log(LogLevel::kWarning, "Failed to list",
            {{"resource", resource_.Name()}, {"error", s.ToString()}});
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.failures;
        }
        if (!WaitFor(backoff)) break;
        backoff = std::min(backoff * 2, options_.max_backoff);
        continue;
      }
      need_list = false;
      backoff = options_.initial_backoff;
    }
    int64_t events_before = stats().events;
    Status s = WatchOnce(&need_list);
    if (stop_) break;
    if (need_list) {
      Log(LogLevel::kInfo, "Relisting after 410 Gone",
          {{"resource", resource_.Name()}, {"error", s.ToString()}});
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.gone_relists;
      continue;
    }
    if (s.ok()) {
      backoff = options_.initial_backoff;
      continue;
    }
    // A watch that delivered events was healthy: its loss starts a new backoff.
    if (stats().events > events_before) backoff = options_.initial_backoff;
    Log(LogLevel::kWarning, "Watch failed",
        {{"resource", resource_.Name()},
         {"error", s.ToString()},
         {"retry_in", std::to_string(ToSeconds(backoff)) + "s"}});
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.failures;
    }
    if (!WaitFor(backoff)) break;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void Informer::RunResync() {
  TimePoint next = clock_->Now() + options_.resync_period;
  while (!stop_) {
    if (clock_->Now() >= next) {
      if (synced_) {
        for (const auto& obj : store_.List()) {
          if (stop_) return;
          DispatchUpdate(obj, obj);
        }
      }
      next = clock_->Now() + options_.resync_period;
      continue;
    }
    // Real-time naps bounded so that a FakeClock moved by a test is noticed soon.
    Duration nap = std::clamp(next - clock_->Now(), Duration(std::chrono::milliseconds(1)),
                              Duration(std::chrono::milliseconds(20)));
    if (!WaitFor(nap)) return;
  }
}

}  // namespace orrery::kube
