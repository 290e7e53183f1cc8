// The indexed object cache (see store.h).
#include "operator/kube/store.h"

namespace orrery::kube {

std::string ResourceVersionOf(const Object& obj) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  return m->value("resourceVersion", "");
}

std::vector<std::string> NamespaceIndex(const Object& obj) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return {};
  std::string ns = m->value("namespace", "");
  if (ns.empty()) return {};
  return {ns};
}

std::vector<std::string> OwnerIndex(const Object& obj) {
  std::vector<std::string> out;
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return out;
  auto refs = m->find("ownerReferences");
  if (refs == m->end() || !refs->is_array()) return out;
  for (const auto& r : *refs) {
    if (r.is_object() && r.contains("uid") && r["uid"].is_string())
      out.push_back(r["uid"].get<std::string>());
  }
  return out;
}

std::vector<std::string> NodeIndex(const Object& obj) {
  auto s = obj.find("spec");
  if (s == obj.end() || !s->is_object()) return {};
  std::string node = s->value("nodeName", "");
  if (node.empty()) return {};
  return {node};
}

Store::Store(std::map<std::string, IndexFunc> indexers) : indexers_(std::move(indexers)) {
  if (!indexers_.count(kByNamespace)) indexers_[kByNamespace] = NamespaceIndex;
}

void Store::IndexLocked(const std::string& key, const Object& obj) {
  for (const auto& [name, fn] : indexers_) {
    for (const auto& v : fn(obj)) indexes_[name][v].insert(key);
  }
}

void Store::UnindexLocked(const std::string& key, const Object& obj) {
  for (const auto& [name, fn] : indexers_) {
    auto& idx = indexes_[name];
    for (const auto& v : fn(obj)) {
      auto it = idx.find(v);
      if (it == idx.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) idx.erase(it);
    }
  }
}

ObjectPtr Store::Upsert(ObjectPtr obj) {
  std::string key = KeyOf(*obj);
  std::unique_lock lock(mu_);
  ObjectPtr old;
  auto it = items_.find(key);
  if (it != items_.end()) {
    old = it->second;
    UnindexLocked(key, *old);
    it->second = obj;
  } else {
    items_.emplace(key, obj);
  }
  IndexLocked(key, *obj);
  return old;
}

ObjectPtr Store::Remove(const std::string& key) {
  std::unique_lock lock(mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return nullptr;
  ObjectPtr old = it->second;
  UnindexLocked(key, *old);
  items_.erase(it);
  return old;
}

std::vector<StoreDelta> Store::Replace(std::vector<ObjectPtr> objects) {
  std::vector<StoreDelta> deltas;
  std::map<std::string, ObjectPtr> fresh;
  for (auto& o : objects) fresh[KeyOf(*o)] = std::move(o);
  std::unique_lock lock(mu_);
  for (const auto& [key, old] : items_) {
    if (!fresh.count(key)) deltas.push_back({StoreDelta::Type::kDeleted, old, nullptr});
  }
  for (const auto& [key, obj] : fresh) {
    auto it = items_.find(key);
    if (it == items_.end()) {
      deltas.push_back({StoreDelta::Type::kAdded, nullptr, obj});
    } else if (ResourceVersionOf(*it->second) != ResourceVersionOf(*obj)) {
      deltas.push_back({StoreDelta::Type::kUpdated, it->second, obj});
    }
  }
  items_ = std::move(fresh);
  indexes_.clear();
  for (const auto& [key, obj] : items_) IndexLocked(key, *obj);
  return deltas;
}

ObjectPtr Store::Get(const std::string& key) const {
  std::shared_lock lock(mu_);
  auto it = items_.find(key);
  return it == items_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Store::List() const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(items_.size());
  for (const auto& [key, obj] : items_) out.push_back(obj);
  return out;
}

std::vector<std::string> Store::Keys() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [key, obj] : items_) out.push_back(key);
  return out;
}

size_t Store::Size() const {
  std::shared_lock lock(mu_);
  return items_.size();
}

std::vector<std::string> Store::IndexKeys(const std::string& index,
                                          const std::string& value) const {
  std::shared_lock lock(mu_);
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return {};
  auto it = idx->second.find(value);
  if (it == idx->second.end()) return {};
  return {it->second.begin(), it->second.end()};
}

std::vector<ObjectPtr> Store::ByIndex(const std::string& index, const std::string& value) const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return out;
  auto it = idx->second.find(value);
  if (it == idx->second.end()) return out;
  for (const auto& key : it->second) out.push_back(items_.at(key));
  return out;
}

}  // namespace orrery::kube
