// events.k8s.io/v1 Events with de-duplication of repeats (see event_recorder.h).
#include "operator/kube/event_recorder.h"

#include <cstdio>

#include "operator/kube/api_error.h"
#include "operator/kube/leader_election.h"

namespace orrery::kube {
namespace {

// The isomorphic key: everything that makes two events "the same event".
std::string SeriesKey(const Object& regarding, EventType type, const std::string& reason,
                      const std::string& action, const std::string& note) {
  const Object& m = regarding["metadata"];
  return Object::array({regarding.value("apiVersion", ""), regarding.value("kind", ""),
                        m.value("namespace", ""), m.value("name", ""), m.value("uid", ""),
                        type == EventType::kWarning ? "Warning" : "Normal", reason, action, note})
      .dump();
}

}  // namespace

EventRecorder::EventRecorder(Client* client, EventRecorderOptions options, Clock* clock)
    : client_(client),
      options_(std::move(options)),
      clock_(clock != nullptr ? clock : SystemClock::Get()) {}

void EventRecorder::ForgetOldLocked(TimePoint now) {
  for (auto it = series_.begin(); it != series_.end();) {
    if (now - it->second.last > options_.dedup_window)
      it = series_.erase(it);
    else
      ++it;
  }
  while (series_.size() >= options_.max_tracked) {
    auto oldest = series_.begin();
    for (auto it = series_.begin(); it != series_.end(); ++it)
      if (it->second.last < oldest->second.last) oldest = it;
    series_.erase(oldest);
  }
}

Status EventRecorder::Record(const Object& regarding, EventType type, const std::string& reason,
                             const std::string& action, const std::string& note) {
  if (!regarding.is_object() || !regarding.contains("metadata") ||
      regarding["metadata"].value("name", "").empty())
    return InvalidArgumentError("event regarding an object without metadata.name");
  const Object& meta = regarding["metadata"];
  std::string ns = meta.value("namespace", "");
  if (ns.empty()) ns = "default";  // events about cluster-scoped objects live in default
  std::string key = SeriesKey(regarding, type, reason, action, note);
  TimePoint now = clock_->Now();
  std::string now_wall = FormatMicroTime(std::chrono::system_clock::now());

  std::unique_lock<std::mutex> lock(mu_);
  auto it = series_.find(key);
  if (it != series_.end() && now - it->second.last <= options_.dedup_window) {
    Series s = it->second;
    s.count += 1;
    s.last = now;
    it->second = s;
    lock.unlock();
    Object patch = {{"series", {{"count", s.count}, {"lastObservedTime", now_wall}}}};
    auto r = client_->Patch(Events(), s.ns, s.name, PatchType::kMerge, patch);
    if (r.ok()) return OkStatus();
    if (!IsNotFound(r.status())) return r.status();
    // The event expired on the server (its TTL): start a new one below.
    lock.lock();
    series_.erase(key);
  }
  char suffix[32];
  std::snprintf(
      suffix, sizeof(suffix), ".%llx%04llx",
      static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count()),
      static_cast<unsigned long long>(++sequence_ & 0xffff));
  std::string name = meta.value("name", "") + suffix;
  lock.unlock();

  Object event = {
      {"apiVersion", "events.k8s.io/v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"eventTime", now_wall},
      {"reportingController", options_.reporting_controller},
      {"reportingInstance", options_.reporting_instance},
      {"action", action},
      {"reason", reason},
      {"note", note.size() > 1024 ? note.substr(0, 1024) : note},  // the API caps note at 1kB
      {"type", type == EventType::kWarning ? "Warning" : "Normal"},
      {"regarding",
       {{"apiVersion", regarding.value("apiVersion", "")},
        {"kind", regarding.value("kind", "")},
        {"name", meta.value("name", "")},
        {"namespace", meta.value("namespace", "")},
        {"uid", meta.value("uid", "")},
        {"resourceVersion", meta.value("resourceVersion", "")}}}};
  auto created = client_->Create(Events(), ns, event);
  if (!created.ok()) return created.status();
  lock.lock();
  ForgetOldLocked(now);
  series_[key] = Series{ns, name, 1, now};
  return OkStatus();
}

}  // namespace orrery::kube
