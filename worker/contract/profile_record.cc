// The profiler's record, in and out of JSON. See profile_record.h.
#include "worker/contract/profile_record.h"

#include <algorithm>

namespace orrery::contract {

using Json = nlohmann::json;

StatusOr<ProfileEntry> ProfileKeyFromJson(const Json& j, const std::string& where) {
  ProfileEntry e;
  try {
    e.signature = j.at("signature").get<std::string>();
    e.template_name = j.at("template").get<std::string>();
    e.gpus = j.at("gpus").get<int>();
    e.batch_size = j.at("batchSize").get<int64_t>();
    e.device = j.at("device").get<std::string>();
  } catch (const Json::exception& ex) {
    return InvalidArgumentError(where + ": " + ex.what());
  }
  return e;
}

StatusOr<ProfileEntry> ProfileEntryFromJson(const Json& j, const std::string& where) {
  ORRERY_ASSIGN_OR_RETURN(ProfileEntry e, ProfileKeyFromJson(j, where));
  try {
    e.samples_per_s = j.at("samplesPerSecond").get<double>();
    e.step_time_s = j.value("stepTimeSeconds", 0.0);
    e.step_time_p90_s = j.value("stepTimeP90Seconds", 0.0);
    e.peak_memory_bytes = j.value("peakMemoryBytes", 0.0);
    e.device_allocated_bytes = j.value("deviceAllocatedBytes", 0.0);
    e.recompute = j.value("recompute", std::string());
    e.measured_at = j.value("measuredAt", std::string());
  } catch (const Json::exception& ex) {
    return InvalidArgumentError(where + ": " + ex.what());
  }
  if (e.gpus < 1 || e.samples_per_s <= 0) {
    return InvalidArgumentError(where + ": gpus and samplesPerSecond must be positive");
  }
  if (e.device_allocated_bytes < 0) {
    return InvalidArgumentError(where +
                                ": deviceAllocatedBytes must not be negative (omit it when the "
                                "peak was not measured)");
  }
  return e;
}

Json ProfileEntryToJson(const ProfileEntry& e) {
  Json j{{"signature", e.signature},
         {"template", e.template_name},
         {"gpus", e.gpus},
         {"batchSize", e.batch_size},
         {"device", e.device},
         {"samplesPerSecond", e.samples_per_s},
         {"stepTimeSeconds", e.step_time_s},
         {"stepTimeP90Seconds", e.step_time_p90_s},
         {"peakMemoryBytes", e.peak_memory_bytes},
         {"measuredAt", e.measured_at}};
  if (e.device_allocated_bytes > 0) j["deviceAllocatedBytes"] = e.device_allocated_bytes;
  if (!e.recompute.empty()) j["recompute"] = e.recompute;
  return j;
}

std::string ProfileEntry::Key() const {
  return signature + "|" + template_name + "|" + std::to_string(gpus) + "|" +
         std::to_string(batch_size) + "|" + device;
}

StatusOr<ProfileEntry> ParseProfileDocument(const std::string& json) {
  Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("event", "") != "profile") {
    return InvalidArgumentError("not a profile document: " + json.substr(0, 200));
  }
  ProfileEntry e;
  try {
    e.gpus = j.value("world_size", 1);
    e.batch_size = j.value("global_batch", int64_t{0});
    e.samples_per_s = j.at("samples_per_s").get<double>();
    const Json& st = j.at("step_time_s");
    e.step_time_s = st.value("median", 0.0);
    e.step_time_p90_s = st.value("p90", 0.0);
    if (j.contains("peak_memory_bytes")) {
      const Json& m = j["peak_memory_bytes"];
      e.peak_memory_bytes = m.value("device_parameters", 0.0);
      e.device_allocated_bytes = std::max(0.0, m.value("device_allocated", 0.0));
    }
    if (j.contains("knobs") && j["knobs"].is_object())
      e.recompute = j["knobs"].value("recompute", std::string());
  } catch (const Json::exception& ex) {
    return InvalidArgumentError(std::string("profile document: ") + ex.what());
  }
  if (e.samples_per_s <= 0) return InvalidArgumentError("profile document: no throughput");
  return e;
}

}  // namespace orrery::contract
