#include "operator/local/profile_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace orrery::local {
namespace {

using Json = nlohmann::json;

StatusOr<ProfileEntry> FromJson(const Json& j, const std::string& where) {
  ProfileEntry e;
  try {
    e.signature = j.at("signature").get<std::string>();
    e.template_name = j.at("template").get<std::string>();
    e.gpus = j.at("gpus").get<int>();
    e.batch_size = j.at("batchSize").get<int64_t>();
    e.device = j.at("device").get<std::string>();
    e.samples_per_s = j.at("samplesPerSecond").get<double>();
    e.step_time_s = j.value("stepTimeSeconds", 0.0);
    e.step_time_p90_s = j.value("stepTimeP90Seconds", 0.0);
    e.peak_memory_bytes = j.value("peakMemoryBytes", 0.0);
    e.measured_at = j.value("measuredAt", std::string());
  } catch (const Json::exception& ex) {
    return InvalidArgumentError(where + ": " + ex.what());
  }
  if (e.gpus < 1 || e.samples_per_s <= 0) {
    return InvalidArgumentError(where + ": gpus and samplesPerSecond must be positive");
  }
  return e;
}

}  // namespace

Json ProfileEntryToJson(const ProfileEntry& e) {
  return Json{{"signature", e.signature},
              {"template", e.template_name},
              {"gpus", e.gpus},
              {"batchSize", e.batch_size},
              {"device", e.device},
              {"samplesPerSecond", e.samples_per_s},
              {"stepTimeSeconds", e.step_time_s},
              {"stepTimeP90Seconds", e.step_time_p90_s},
              {"peakMemoryBytes", e.peak_memory_bytes},
              {"measuredAt", e.measured_at}};
}

std::string ProfileEntry::Key() const {
  return signature + "|" + template_name + "|" + std::to_string(gpus) + "|" +
         std::to_string(batch_size) + "|" + device;
}

std::string ProfileCache::DefaultPath() {
  if (const char* p = std::getenv("ORRERY_PROFILE_CACHE"); p != nullptr && *p != '\0') return p;
  std::string base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    base = std::string(h) + "/.cache";
  } else {
    base = "/tmp";
  }
  return base + "/orrery/profiles.json";
}

StatusOr<ProfileCache> ProfileCache::Load(const std::string& path) {
  ProfileCache cache;
  cache.path_ = path;
  std::ifstream in(path);
  if (!in) return cache;
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("entries") || !j["entries"].is_array()) {
    return InvalidArgumentError("profile cache " + path +
                                ": not a profile cache (expected {\"entries\": [...]}); remove "
                                "the file to start a new cache");
  }
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    ORRERY_ASSIGN_OR_RETURN(
        ProfileEntry e, FromJson(j["entries"][i], path + ": entries[" + std::to_string(i) + "]"));
    cache.entries_[e.Key()] = e;
  }
  return cache;
}

const ProfileEntry* ProfileCache::Find(const ProfileEntry& key) const {
  auto it = entries_.find(key.Key());
  return it == entries_.end() ? nullptr : &it->second;
}

void ProfileCache::Put(const ProfileEntry& entry) { entries_[entry.Key()] = entry; }

Status ProfileCache::Save() const {
  Json j{{"version", 1}, {"entries", Json::array()}};
  for (const auto& [k, e] : entries_) j["entries"].push_back(ProfileEntryToJson(e));
  std::error_code ec;
  std::filesystem::path p(path_);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec)
    return UnavailableError("cannot create " + p.parent_path().string() + ": " + ec.message());
  std::string tmp = path_ + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    out.flush();
    if (!out) return UnavailableError("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path_, ec);
  if (ec) return UnavailableError("cannot rename " + tmp + " to " + path_ + ": " + ec.message());
  return OkStatus();
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
    }
  } catch (const Json::exception& ex) {
    return InvalidArgumentError(std::string("profile document: ") + ex.what());
  }
  if (e.samples_per_s <= 0) return InvalidArgumentError("profile document: no throughput");
  return e;
}

}  // namespace orrery::local
