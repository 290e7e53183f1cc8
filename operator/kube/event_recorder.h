// Events for `kubectl describe` (events.k8s.io/v1), with repeats folded into one
// Event's series the way client-go's events broadcaster does: an event with the
// same regarding object, type, reason, action and note as one recorded within
// the last kDedupWindow updates that Event's series (count, lastObservedTime)
// instead of creating another object. The controller calls Record inline; it is
// one API call.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "operator/kube/client.h"

namespace orrery::kube {

enum class EventType { kNormal, kWarning };

struct EventRecorderOptions {
  std::string reporting_controller = "orrery.dev/operator";
  std::string reporting_instance;  // e.g. the pod name; required by the API
  // Repeats within this window join the first event's series (client-go: 6 min).
  Duration dedup_window = std::chrono::minutes(6);
  size_t max_tracked = 4096;  // series remembered at once; the oldest are forgotten
};

class EventRecorder {
 public:
  // `client` and `clock` (nullptr: system clock) must outlive the recorder.
  EventRecorder(Client* client, EventRecorderOptions options, Clock* clock = nullptr);

  // Records that `action` happened to `regarding` (any object with apiVersion,
  // kind and metadata) for `reason`, with a human `note`. Thread-safe.
  Status Record(const Object& regarding, EventType type, const std::string& reason,
                const std::string& action, const std::string& note);

 private:
  struct Series {
    std::string ns;
    std::string name;
    int64_t count = 1;
    TimePoint last{};
  };
  void ForgetOldLocked(TimePoint now);

  Client* client_;
  EventRecorderOptions options_;
  Clock* clock_;
  std::mutex mu_;
  std::map<std::string, Series> series_;
  uint64_t sequence_ = 0;
};

}  // namespace orrery::kube
