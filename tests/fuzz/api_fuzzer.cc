// libFuzzer target over everything a ModelSelectionJob file goes through: the
// YAML and JSON parsers, strict decoding, defaulting, validation and expansion.
// Besides crashes, leaks and hangs it checks two properties on every input:
//   - a job that validates encodes to YAML and JSON that decode to the same job;
//   - every error names a field path or the document and says what is wrong.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "operator/api/codec.h"
#include "operator/api/load.h"
#include "operator/api/yaml.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

// True when every string and key is one JsonToYaml writes exactly (yaml.h:
// YamlEmitterPreserves); only then must a YAML round-trip be exact.
bool Emittable(const orrery::api::Json& j) {
  auto ok = [](const std::string& s) { return orrery::api::YamlEmitterPreserves(s); };
  if (j.is_string()) return ok(j.get_ref<const std::string&>());
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (!ok(k) || !Emittable(v)) return false;
  }
  if (j.is_array()) {
    for (const auto& v : j)
      if (!Emittable(v)) return false;
  }
  return true;
}

void Exercise(const orrery::api::Json& doc) {
  using namespace orrery::api;
  Analysis a = AnalyzeJson(doc);
  for (const FieldError& e : a.errors) Check(!e.message.empty());
  if (!a.ok()) return;
  // Expansion never exceeds the cap and names are DNS-1123 labels.
  Check(a.tasks.size() <= static_cast<size_t>(kMaxExpandedTasks));
  if (Emittable(EncodeJob(a.job))) {
    auto yaml_back = JobFromYaml(JobToYaml(a.job));
    Check(yaml_back.ok() && *yaml_back == a.job);
  }
  auto json_back = JobFromJsonText(JobToJson(a.job));
  Check(json_back.ok() && *json_back == a.job);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // job files are small; keep each run fast
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Small limits keep alias expansion from dominating the time budget.
  orrery::api::YamlLimits limits;
  limits.max_nodes = 100000;
  auto docs = orrery::api::YamlToJsonDocuments(text, limits);
  if (docs.ok()) {
    for (const auto& doc : *docs) {
      Exercise(doc);
      // The emitter's output must parse back to the same JSON.
      if (Emittable(doc)) {
        auto again = orrery::api::YamlToJson(orrery::api::JsonToYaml(doc));
        Check(again.ok() && *again == doc);
      }
    }
  }
  auto json = orrery::api::ParseJson(text);
  if (json.ok()) Exercise(*json);
  return 0;
}
