#include "operator/controller/profile_configmap.h"

#include <algorithm>
#include <utility>

#include "operator/controller/names.h"

namespace orrery::controller {
namespace {

template <typename T>
bool Field(const Json& j, const char* name, const std::string& path, bool required, T* out,
           std::vector<api::FieldError>* errors) {
  std::string p = api::ChildPath(path, name);
  if (!j.contains(name)) {
    if (required) errors->push_back({p, "required field is missing", ""});
    return !required;
  }
  const Json& v = j[name];
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>) {
    ok = v.is_string();
  } else if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    ok = v.is_number_integer();
  } else {
    ok = v.is_number();
  }
  if (!ok) {
    errors->push_back({p, std::string("wrong type: got ") + v.type_name(), ""});
    return false;
  }
  *out = v.get<T>();
  return true;
}

}  // namespace

bool CachedProfile::operator==(const CachedProfile& o) const {
  return EncodeCachedProfile(*this) == EncodeCachedProfile(o);
}

std::string ProfileDataKey(const contract::ProfileEntry& entry) {
  return ProfileKeyHash(entry.Key());
}

Json EncodeCachedProfile(const CachedProfile& p) {
  Json j = contract::ProfileEntryToJson(p.entry);
  if (p.infeasible) {
    j["infeasible"] = true;
    j["reason"] = p.reason;
  }
  return j;
}

bool DecodeCachedProfile(const Json& j, const std::string& path, CachedProfile* out,
                         std::vector<api::FieldError>* errors) {
  if (!j.is_object()) {
    errors->push_back({path, "must be a JSON object", ""});
    return false;
  }
  static const char* kKnown[] = {"signature",
                                 "template",
                                 "gpus",
                                 "batchSize",
                                 "device",
                                 "samplesPerSecond",
                                 "stepTimeSeconds",
                                 "stepTimeP90Seconds",
                                 "peakMemoryBytes",
                                 "deviceAllocatedBytes",
                                 "recompute",
                                 "measuredAt",
                                 "infeasible",
                                 "reason"};
  size_t before = errors->size();
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&k](const char* n) { return k == n; }) == std::end(kKnown)) {
      errors->push_back({api::ChildPath(path, k), "unknown field", ""});
    }
  }
  CachedProfile p;
  contract::ProfileEntry& e = p.entry;
  Field(j, "signature", path, true, &e.signature, errors);
  Field(j, "template", path, true, &e.template_name, errors);
  Field(j, "gpus", path, true, &e.gpus, errors);
  Field(j, "batchSize", path, true, &e.batch_size, errors);
  Field(j, "device", path, true, &e.device, errors);
  Field(j, "samplesPerSecond", path, true, &e.samples_per_s, errors);
  Field(j, "stepTimeSeconds", path, false, &e.step_time_s, errors);
  Field(j, "stepTimeP90Seconds", path, false, &e.step_time_p90_s, errors);
  Field(j, "peakMemoryBytes", path, false, &e.peak_memory_bytes, errors);
  // The measured peak and its recomputation mode: absent from entries written
  // before they were recorded (the planner models activations then).
  Field(j, "deviceAllocatedBytes", path, false, &e.device_allocated_bytes, errors);
  Field(j, "recompute", path, false, &e.recompute, errors);
  Field(j, "measuredAt", path, false, &e.measured_at, errors);
  Field(j, "infeasible", path, false, &p.infeasible, errors);
  Field(j, "reason", path, false, &p.reason, errors);
  if (errors->size() == before) {
    if (e.gpus < 1) errors->push_back({api::ChildPath(path, "gpus"), "must be at least 1", ""});
    if (e.device_allocated_bytes < 0) {
      errors->push_back({api::ChildPath(path, "deviceAllocatedBytes"),
                         "must not be negative (omit it when the peak was not measured)", ""});
    }
    if (!e.recompute.empty() && e.recompute != "none" && e.recompute != "unit") {
      errors->push_back({api::ChildPath(path, "recompute"), "must be none or unit", ""});
    }
    if (!p.infeasible && e.samples_per_s <= 0) {
      errors->push_back(
          {api::ChildPath(path, "samplesPerSecond"), "must be positive for a feasible entry", ""});
    }
  }
  if (errors->size() != before) return false;
  *out = std::move(p);
  return true;
}

Json EncodeProfileConfigMap(const ProfileTable& table, const std::string& ns) {
  Json data = Json::object();
  for (const auto& [k, p] : table) data[k] = EncodeCachedProfile(p).dump();
  return Json{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata",
               {{"name", kProfileConfigMapName},
                {"namespace", ns},
                {"labels", {{kManagedByLabel, kManagedByValue}}}}},
              {"data", data}};
}

ProfileTable DecodeProfileConfigMap(const Json& cm, std::vector<api::FieldError>* errors) {
  ProfileTable table;
  if (!cm.is_object()) {
    errors->push_back({"", "a ConfigMap must be a JSON object", ""});
    return table;
  }
  if (!cm.contains("data") || cm["data"].is_null()) return table;  // empty ConfigMap
  if (!cm["data"].is_object()) {
    errors->push_back({"data", "must be an object", ""});
    return table;
  }
  for (const auto& [key, value] : cm["data"].items()) {
    std::string path = api::KeyPath("data", key);
    if (!value.is_string()) {
      errors->push_back({path, "must be a string", ""});
      continue;
    }
    Json j = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      errors->push_back({path, "is not JSON", "delete the key; it is profiled again when needed"});
      continue;
    }
    CachedProfile p;
    if (!DecodeCachedProfile(j, path, &p, errors)) continue;
    std::string want = ProfileDataKey(p.entry);
    if (want != key) {
      errors->push_back({path, "key does not match its entry (expected " + want + ")",
                         "delete the key; it is profiled again when needed"});
      continue;
    }
    table.emplace(key, std::move(p));
  }
  return table;
}

bool MergeProfile(ProfileTable* table, const CachedProfile& profile) {
  std::string key = ProfileDataKey(profile.entry);
  auto it = table->find(key);
  if (it == table->end()) {
    table->emplace(key, profile);
    return true;
  }
  if (profile.entry.measured_at <= it->second.entry.measured_at) return false;
  it->second = profile;
  return true;
}

int MergeProfiles(ProfileTable* into, const ProfileTable& from) {
  int changed = 0;
  for (const auto& [k, p] : from) changed += MergeProfile(into, p) ? 1 : 0;
  return changed;
}

size_t ProfileDataBytes(const ProfileTable& table) {
  size_t bytes = 0;
  for (const auto& [k, p] : table) bytes += k.size() + EncodeCachedProfile(p).dump().size();
  return bytes;
}

std::vector<std::string> BoundProfiles(ProfileTable* table, size_t budget_bytes) {
  std::vector<std::pair<std::string, std::string>> order;  // (measuredAt, key)
  size_t bytes = 0;
  for (const auto& [k, p] : *table) {
    order.emplace_back(p.entry.measured_at, k);
    bytes += k.size() + EncodeCachedProfile(p).dump().size();
  }
  std::sort(order.begin(), order.end());
  std::vector<std::string> evicted;
  for (const auto& [when, key] : order) {
    if (bytes <= budget_bytes) break;
    auto it = table->find(key);
    bytes -= key.size() + EncodeCachedProfile(it->second).dump().size();
    table->erase(it);
    evicted.push_back(key);
  }
  return evicted;
}

}  // namespace orrery::controller
