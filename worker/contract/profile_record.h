// What the profiler measures for one (model, template, ranks, batch, device),
// as the worker prints it and as both profile caches keep it: the local file
// (operator/local/profile_cache.h) and the Kubernetes world's ConfigMap
// (operator/controller/profile_configmap.h). Torch-free: the worker writes the
// document (worker/profile/profiler.h), the operator reads it.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace orrery::contract {

struct ProfileEntry {
  std::string signature;  // engine::ModelSignature
  std::string template_name;
  int gpus = 0;
  int64_t batch_size = 0;
  std::string device;  // cpu | cuda
  double samples_per_s = 0;
  double step_time_s = 0;      // median
  double step_time_p90_s = 0;  // 90th percentile
  // The parameter (and gradient) bytes the template held on a device: the
  // profile document's peak_memory_bytes.device_parameters.
  double peak_memory_bytes = 0;
  std::string measured_at;  // RFC 3339
  // The peak of all bytes a device had allocated over the measured steps, the
  // largest over ranks (peak_memory_bytes.device_allocated: what the planner
  // must fit), and the activation-recomputation mode it was measured in
  // (knobs.recompute). 0 and "" in a profile from before they were recorded:
  // the planner models activations over peak_memory_bytes then.
  double device_allocated_bytes = 0;
  std::string recompute = {};
  // What a cache is keyed by: what changes a step's time.
  std::string Key() const;
};

// An entry as JSON, the form both caches store:
// {"signature", "template", "gpus", "batchSize", "device", "samplesPerSecond",
//  "stepTimeSeconds", "stepTimeP90Seconds", "peakMemoryBytes",
//  "deviceAllocatedBytes", "recompute", "measuredAt"}; the two measured-peak
//  fields only when the profile has them, and an entry without them reads.
nlohmann::json ProfileEntryToJson(const ProfileEntry& entry);
// The inverse; `where` names the entry in errors (a file and index).
StatusOr<ProfileEntry> ProfileEntryFromJson(const nlohmann::json& j, const std::string& where);
// The key fields alone (signature, template, gpus, batchSize, device), as a
// profile pod's annotation carries them; no measurement is read or required.
StatusOr<ProfileEntry> ProfileKeyFromJson(const nlohmann::json& j, const std::string& where);

// Parses the profiler's JSON document (worker/profile/profiler.h) into an entry
// (signature, template and device are the caller's to fill).
StatusOr<ProfileEntry> ParseProfileDocument(const std::string& json);

}  // namespace orrery::contract
