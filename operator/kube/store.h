// The informer's cache: objects by key ("ns/name") with secondary indexes, safe to
// read from any thread while the informer writes. Objects are shared immutable
// snapshots (ObjectPtr): readers keep what they got even after the cache moves on,
// and nobody can change the cache by accident (copy, change, write to the API).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "operator/kube/client.h"

namespace orrery::kube {

using ObjectPtr = std::shared_ptr<const Object>;

// Maps an object to the index values it is filed under (none, one or several).
using IndexFunc = std::function<std::vector<std::string>(const Object&)>;

// Built-in indexes.
inline constexpr const char* kByNamespace = "namespace";  // metadata.namespace
inline constexpr const char* kByOwner = "owner";          // each ownerReferences[].uid
inline constexpr const char* kByNode = "node";            // spec.nodeName
std::vector<std::string> NamespaceIndex(const Object& obj);
std::vector<std::string> OwnerIndex(const Object& obj);
std::vector<std::string> NodeIndex(const Object& obj);

// The resourceVersion of an object ("" when absent).
std::string ResourceVersionOf(const Object& obj);

// What Replace changed, so the informer can tell its handlers.
struct StoreDelta {
  enum class Type { kAdded, kUpdated, kDeleted };
  Type type;
  ObjectPtr old_object;  // kUpdated, kDeleted
  ObjectPtr object;      // kAdded, kUpdated
};

class Store {
 public:
  // Indexes are fixed at construction; kByNamespace is always present.
  explicit Store(std::map<std::string, IndexFunc> indexers = {});

  // Inserts or replaces; returns the previous object (nullptr when new).
  ObjectPtr Upsert(ObjectPtr obj);
  // Removes by key; returns the removed object (nullptr when absent).
  ObjectPtr Remove(const std::string& key);
  // Replaces the whole content with `objects` (a relist) and returns the changes:
  // new keys added, missing keys deleted, keys whose resourceVersion differs updated.
  std::vector<StoreDelta> Replace(std::vector<ObjectPtr> objects);

  ObjectPtr Get(const std::string& key) const;
  std::vector<ObjectPtr> List() const;
  std::vector<std::string> Keys() const;
  size_t Size() const;
  // Objects filed under `value` in index `index` (empty when the index is unknown).
  std::vector<ObjectPtr> ByIndex(const std::string& index, const std::string& value) const;
  // The keys of the same.
  std::vector<std::string> IndexKeys(const std::string& index, const std::string& value) const;

 private:
  void IndexLocked(const std::string& key, const Object& obj);
  void UnindexLocked(const std::string& key, const Object& obj);

  std::map<std::string, IndexFunc> indexers_;
  mutable std::shared_mutex mu_;
  std::map<std::string, ObjectPtr> items_;
  // index name -> value -> keys
  std::map<std::string, std::map<std::string, std::set<std::string>>> indexes_;
};

}  // namespace orrery::kube
