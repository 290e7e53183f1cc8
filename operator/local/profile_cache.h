// The local profile cache: one JSON file (by default ~/.cache/orrery/profiles.json,
// or $ORRERY_PROFILE_CACHE) mapping what changes a step's time (model signature,
// template, ranks, global batch, device type) to what the profiler measured, so a
// second job with the same models profiles nothing. The Kubernetes world keeps the
// same entries in a ConfigMap. Writes are atomic (temporary file, rename).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace orrery::local {

struct ProfileEntry {
  std::string signature;  // engine::ModelSignature
  std::string template_name;
  int gpus = 0;
  int64_t batch_size = 0;
  std::string device;  // cpu | cuda
  double samples_per_s = 0;
  double step_time_s = 0;      // median
  double step_time_p90_s = 0;  // 90th percentile
  double peak_memory_bytes = 0;
  std::string measured_at;  // RFC 3339
  std::string Key() const;
};

class ProfileCache {
 public:
  // The default location: $ORRERY_PROFILE_CACHE, else $XDG_CACHE_HOME/orrery, else
  // ~/.cache/orrery, with profiles.json.
  static std::string DefaultPath();
  // A missing file is an empty cache; a corrupt one is an error naming the file.
  static StatusOr<ProfileCache> Load(const std::string& path);

  const ProfileEntry* Find(const ProfileEntry& key) const;
  void Put(const ProfileEntry& entry);
  Status Save() const;
  size_t size() const { return entries_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, ProfileEntry> entries_;
};

// An entry as JSON, the form both the cache file and the Kubernetes world's
// ConfigMap (operator/controller/profile_configmap.h) store:
// {"signature", "template", "gpus", "batchSize", "device", "samplesPerSecond",
//  "stepTimeSeconds", "stepTimeP90Seconds", "peakMemoryBytes", "measuredAt"}.
nlohmann::json ProfileEntryToJson(const ProfileEntry& entry);

// Parses the profiler's JSON document (worker/profile/profiler.h) into an entry
// (signature, template and device are the caller's to fill).
StatusOr<ProfileEntry> ParseProfileDocument(const std::string& json);

}  // namespace orrery::local
