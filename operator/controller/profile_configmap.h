// The shared profile cache on Kubernetes: the ConfigMap orrery-profiles in the
// operator's namespace, one data key per profiled configuration. The key is
// ProfileKeyHash(ProfileEntry::Key()) (ConfigMap keys allow only [-._a-zA-Z0-9],
// and signatures hold '/' and '|'); the value is the entry as JSON, including its
// full key fields, so a decode checks every key against its entry.
//
// Failed trials are cached too, as infeasible entries with their reason (OOM,
// crash, timeout), so no job profiles a configuration that cannot run twice.
//
// Size: a ConfigMap holds at most 1 MiB (the API server's limit on the object).
// BoundProfiles evicts the oldest measurements first until the encoded data fits
// a budget below that (kProfileConfigMapBudget leaves room for metadata and
// managedFields). An evicted configuration is profiled again if a job needs it:
// losing a cache entry costs a trial run, never correctness.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "operator/api/field_error.h"
#include "operator/api/yaml.h"
#include "worker/contract/profile_record.h"

namespace orrery::controller {

using api::Json;

inline constexpr const char* kProfileConfigMapName = "orrery-profiles";
inline constexpr size_t kProfileConfigMapBudget = 900 * 1024;

struct CachedProfile {
  contract::ProfileEntry entry;
  bool infeasible = false;
  std::string reason;  // infeasible only
  bool operator==(const CachedProfile& o) const;
};

// Data key -> entry.
using ProfileTable = std::map<std::string, CachedProfile>;

std::string ProfileDataKey(const contract::ProfileEntry& entry);

Json EncodeCachedProfile(const CachedProfile& profile);
// Appends problems to `errors` with paths under `path`; returns false on any.
bool DecodeCachedProfile(const Json& json, const std::string& path, CachedProfile* out,
                         std::vector<api::FieldError>* errors);

// The ConfigMap object (apiVersion, kind, metadata name/namespace/labels, data).
Json EncodeProfileConfigMap(const ProfileTable& table, const std::string& ns);
// Decodes every entry it can; each bad entry (not JSON, missing or mistyped
// fields, a key that is not its entry's hash) is an error at data[<key>] and is
// left out, so one corrupt entry does not discard the cache.
ProfileTable DecodeProfileConfigMap(const Json& configmap, std::vector<api::FieldError>* errors);

// Puts `profile` unless the table holds a newer measurement of the same key
// (measuredAt, RFC 3339 UTC, compared as text; a tie keeps the stored one).
// Returns whether the table changed.
bool MergeProfile(ProfileTable* table, const CachedProfile& profile);
// Merges every entry of `from`; returns how many changed `into`.
int MergeProfiles(ProfileTable* into, const ProfileTable& from);

// Bytes the table's data takes in the ConfigMap (keys plus encoded values).
size_t ProfileDataBytes(const ProfileTable& table);
// Evicts oldest-measured entries (ties by key) until the data fits
// `budget_bytes`; returns the evicted keys.
std::vector<std::string> BoundProfiles(ProfileTable* table,
                                       size_t budget_bytes = kProfileConfigMapBudget);

}  // namespace orrery::controller
