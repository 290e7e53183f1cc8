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

}  // namespace

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
    ORRERY_ASSIGN_OR_RETURN(contract::ProfileEntry e,
                            contract::ProfileEntryFromJson(
                                j["entries"][i], path + ": entries[" + std::to_string(i) + "]"));
    cache.entries_[e.Key()] = e;
  }
  if (j.contains("gang_speedups")) {
    const Json& g = j["gang_speedups"];
    if (!g.is_object()) {
      return InvalidArgumentError("profile cache " + path +
                                  ": gang_speedups must be an object of device kind to speedup; "
                                  "remove the field to measure again");
    }
    for (const auto& [device, v] : g.items()) {
      if (!v.is_number() || v.get<double>() <= 0) {
        std::string what = "profile cache " + path;
        what += ": gang_speedups." + device;
        what += " must be a positive number; remove it to measure again";
        return InvalidArgumentError(what);
      }
      cache.gang_speedups_[device] = v.get<double>();
    }
  }
  return cache;
}

std::optional<double> ProfileCache::GangSpeedup(const std::string& device) const {
  auto it = gang_speedups_.find(device);
  if (it == gang_speedups_.end()) return std::nullopt;
  return it->second;
}

void ProfileCache::PutGangSpeedup(const std::string& device, double speedup) {
  if (speedup > 0) gang_speedups_[device] = speedup;
}

const contract::ProfileEntry* ProfileCache::Find(const contract::ProfileEntry& key) const {
  auto it = entries_.find(key.Key());
  return it == entries_.end() ? nullptr : &it->second;
}

void ProfileCache::Put(const contract::ProfileEntry& entry) { entries_[entry.Key()] = entry; }

Status ProfileCache::Save() const {
  Json j{{"version", 1}, {"entries", Json::array()}};
  for (const auto& [k, e] : entries_) j["entries"].push_back(contract::ProfileEntryToJson(e));
  if (!gang_speedups_.empty()) j["gang_speedups"] = gang_speedups_;
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

}  // namespace orrery::local
