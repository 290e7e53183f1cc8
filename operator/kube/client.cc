// Transport-independent parts of the client: resource paths, watch event parsing,
// paging and conflict retries.
#include "operator/kube/client.h"

#include "operator/kube/api_error.h"

namespace orrery::kube {

std::string Resource::CollectionPath(const std::string& ns) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  return p + "/" + resource;
}

Resource ConfigMaps() { return {"", "v1", "configmaps", true}; }
Resource Pods() { return {"", "v1", "pods", true}; }
Resource Nodes() { return {"", "v1", "nodes", false}; }
Resource Namespaces() { return {"", "v1", "namespaces", false}; }
Resource Leases() { return {"coordination.k8s.io", "v1", "leases", true}; }
Resource Events() { return {"events.k8s.io", "v1", "events", true}; }
Resource CustomResourceDefinitions() {
  return {"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
}

const char* WatchEventTypeName(WatchEvent::Type t) {
  switch (t) {
    case WatchEvent::Type::kAdded: return "ADDED";
    case WatchEvent::Type::kModified: return "MODIFIED";
    case WatchEvent::Type::kDeleted: return "DELETED";
    case WatchEvent::Type::kBookmark: return "BOOKMARK";
    case WatchEvent::Type::kError: return "ERROR";
  }
  return "UNKNOWN";
}

Status WatchEvent::ErrorStatus(const std::string& context) const {
  return ApiError::FromStatusObject(object).ToStatus(context);
}

StatusOr<WatchEvent> ParseWatchEvent(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLossError("watch event is not JSON: " + line.substr(0, 120));
  }
  auto type = j.find("type");
  auto object = j.find("object");
  if (type == j.end() || !type->is_string() || object == j.end() || !object->is_object()) {
    return DataLossError("watch event lacks type or object: " + line.substr(0, 120));
  }
  WatchEvent e;
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "ADDED")
    e.type = WatchEvent::Type::kAdded;
  else if (t == "MODIFIED")
    e.type = WatchEvent::Type::kModified;
  else if (t == "DELETED")
    e.type = WatchEvent::Type::kDeleted;
  else if (t == "BOOKMARK")
    e.type = WatchEvent::Type::kBookmark;
  else if (t == "ERROR")
    e.type = WatchEvent::Type::kError;
  else
    return DataLossError("unknown watch event type " + t);
  e.object = std::move(*object);
  return e;
}

StatusOr<Object> ListAll(Client& client, const Resource& r, const std::string& ns,
                         ListOptions options) {
  Object all = {{"kind", "List"},
                {"apiVersion", "v1"},
                {"metadata", Object::object()},
                {"items", Object::array()}};
  bool first = true;
  while (true) {
    ORRERY_ASSIGN_OR_RETURN(Object page, client.List(r, ns, options));
    if (first) {
      all["metadata"]["resourceVersion"] = page["metadata"].value("resourceVersion", "");
      first = false;
    }
    if (auto it = page.find("items"); it != page.end() && it->is_array()) {
      for (auto& item : *it) all["items"].push_back(std::move(item));
    }
    std::string next = page["metadata"].value("continue", "");
    if (next.empty()) break;
    options.continue_token = next;
    // A continued list is served from the snapshot named in the token.
    options.resource_version.clear();
    options.resource_version_match.clear();
  }
  return all;
}

Status RetryOnConflict(const std::function<Status()>& fn, int attempts) {
  Status s;
  for (int i = 0; i < attempts; ++i) {
    s = fn();
    if (!IsConflict(s)) return s;
  }
  return s;
}

std::string KeyFor(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

std::string KeyOf(const Object& obj) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  return KeyFor(m->value("namespace", ""), m->value("name", ""));
}

}  // namespace orrery::kube
