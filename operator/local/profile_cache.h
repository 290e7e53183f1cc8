// The local profile cache: one JSON file (by default ~/.cache/orrery/profiles.json,
// or $ORRERY_PROFILE_CACHE) mapping what changes a step's time (model signature,
// template, ranks, global batch, device type) to what the profiler measured, so a
// second job with the same models profiles nothing. The Kubernetes world keeps the
// same entries in a ConfigMap. Writes are atomic (temporary file, rename).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/contract/profile_record.h"

namespace orrery::local {

class ProfileCache {
 public:
  // The default location: $ORRERY_PROFILE_CACHE, else $XDG_CACHE_HOME/orrery, else
  // ~/.cache/orrery, with profiles.json.
  static std::string DefaultPath();
  // A missing file is an empty cache; a corrupt one is an error naming the file.
  static StatusOr<ProfileCache> Load(const std::string& path);

  const contract::ProfileEntry* Find(const contract::ProfileEntry& key) const;
  void Put(const contract::ProfileEntry& entry);
  Status Save() const;
  // The speedup an interleaved gang (Hydra) measured on `device` (a device
  // kind: "cpu", "cuda"), its members' speeds in the gang over theirs alone;
  // the next run's first plan times gangs with it instead of the default.
  // Kept as {"gang_speedups": {"cpu": 0.8}}; a cache without it has none.
  std::optional<double> GangSpeedup(const std::string& device) const;
  void PutGangSpeedup(const std::string& device, double speedup);
  size_t size() const { return entries_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, contract::ProfileEntry> entries_;
  std::map<std::string, double> gang_speedups_;
};

}  // namespace orrery::local
