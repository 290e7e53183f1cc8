// The Kubernetes client interface: REST verbs on any group/version/resource and a
// watch stream, with objects as nlohmann::json. Callers (informers, the leader
// elector, controllers) depend on this interface; RestClient (rest_client.h) is the
// implementation that talks to an API server, and tests may wrap it.
//
// Every method is thread-safe and never throws: failures come back as Status with
// the Kubernetes reason kept (api_error.h) and the verb, resource and name as
// context.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"

namespace orrery::kube {

using Object = nlohmann::json;

// A resource kind as the REST API names it.
struct Resource {
  std::string group;     // "" for the core group
  std::string version;   // "v1"
  std::string resource;  // plural, lower case: "configmaps"
  bool namespaced = true;

  // "configmaps" or "leases.coordination.k8s.io", for messages.
  std::string Name() const { return group.empty() ? resource : resource + "." + group; }
  // "v1" or "coordination.k8s.io/v1", as in an object's apiVersion.
  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  // The collection path: /api/v1/namespaces/ns/configmaps, /apis/g/v/things.
  std::string CollectionPath(const std::string& ns) const;
  bool operator==(const Resource&) const = default;
};

// Well-known resources.
Resource ConfigMaps();
Resource Pods();
Resource Nodes();
Resource Namespaces();
Resource Leases();
Resource Events();  // events.k8s.io/v1
Resource CustomResourceDefinitions();

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // 0: no paging
  std::string continue_token;
  std::string resource_version;        // "" most recent (quorum read), "0" any
  std::string resource_version_match;  // "", "NotOlderThan", "Exact"
  // Watch only:
  int timeout_seconds = 0;  // server closes the watch after this; 0: server default
  bool allow_watch_bookmarks = true;
};

enum class PropagationPolicy { kDefault, kOrphan, kBackground, kForeground };

struct DeleteOptions {
  PropagationPolicy propagation = PropagationPolicy::kDefault;
  std::optional<int64_t> grace_period_seconds;
  // Preconditions: the delete fails with Conflict unless these match.
  std::string precondition_uid;
  std::string precondition_resource_version;
};

enum class PatchType { kMerge, kJson, kStrategicMerge, kApply };

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take ownership of conflicting fields
  std::string subresource;    // "" or "status"
};

// One watch event.
struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  Object object;  // the object; for kError a metav1.Status
  // For kError: the status the server sent, with its reason (IsGone for 410).
  Status ErrorStatus(const std::string& context) const;
};

const char* WatchEventTypeName(WatchEvent::Type t);
// Parses one line of a watch response ({"type":"ADDED","object":{...}}).
StatusOr<WatchEvent> ParseWatchEvent(const std::string& line);

// A server-sent stream of events. Next() blocks until an event, the end of the
// stream (nullopt: the server closed the watch cleanly, e.g. at timeoutSeconds) or
// an error. Cancel() may be called from any thread and makes a blocked Next()
// return soon.
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  virtual StatusOr<std::optional<WatchEvent>> Next() = 0;
  virtual void Cancel() = 0;
};

class Client {
 public:
  virtual ~Client() = default;

  // For cluster-scoped resources `ns` is ignored.
  virtual StatusOr<Object> Get(const Resource& r, const std::string& ns,
                               const std::string& name) = 0;
  // One page (or everything when options.limit == 0); the list's metadata has
  // resourceVersion and, when more pages remain, continue.
  virtual StatusOr<Object> List(const Resource& r, const std::string& ns,
                                const ListOptions& options) = 0;
  virtual StatusOr<Object> Create(const Resource& r, const std::string& ns, const Object& obj) = 0;
  // Replaces the object named by obj.metadata.name; fails with Conflict when
  // obj.metadata.resourceVersion is stale.
  virtual StatusOr<Object> Update(const Resource& r, const std::string& ns, const Object& obj) = 0;
  // The same on the /status subresource.
  virtual StatusOr<Object> UpdateStatus(const Resource& r, const std::string& ns,
                                        const Object& obj) = 0;
  virtual Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                        const DeleteOptions& options = {}) = 0;
  virtual StatusOr<Object> Patch(const Resource& r, const std::string& ns, const std::string& name,
                                 PatchType type, const Object& patch,
                                 const PatchOptions& options = {}) = 0;
  // Starts a watch from options.resource_version.
  virtual StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                       const ListOptions& options) = 0;
};

// Lists every page (options.limit per page) and returns a List holding all items
// and the resourceVersion of the first page's snapshot, which the pages share.
StatusOr<Object> ListAll(Client& client, const Resource& r, const std::string& ns,
                         ListOptions options);

// Runs `fn` until it returns anything but Conflict, at most `attempts` times: the
// standard answer to optimistic-concurrency failures (re-read, re-apply, re-write).
Status RetryOnConflict(const std::function<Status()>& fn, int attempts = 5);

// "ns/name" or "name": the cache key of an object.
std::string KeyOf(const Object& obj);
std::string KeyFor(const std::string& ns, const std::string& name);

}  // namespace orrery::kube
