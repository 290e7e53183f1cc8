// YAML <-> JSON, so one JSON decoder (codec.h) serves both forms. Scalars are
// resolved the way kubectl resolves them (sigs.k8s.io/yaml, YAML 1.1 flavour):
// `1e-4` and `3.0` are numbers, `true`/`yes`/`on` booleans, `~`/`null` null, and
// any quoted scalar a string. yaml-cpp exceptions stop here and become a Status
// with the line and column of the problem.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace orrery::api {

// Ordered so documents keep the user's field order (errors then come in reading order).
using Json = nlohmann::ordered_json;

struct YamlLimits {
  int max_depth = 64;            // nesting of mappings and sequences
  size_t max_nodes = 1'000'000;  // guards against alias expansion ("billion laughs")
  size_t max_documents = 1000;   // documents in one stream
};

// Every non-empty document of a (possibly multi-document) YAML stream.
StatusOr<std::vector<Json>> YamlToJsonDocuments(std::string_view text,
                                                const YamlLimits& limits = {});
// Exactly one document.
StatusOr<Json> YamlToJson(std::string_view text, const YamlLimits& limits = {});
// JSON text -> Json, with the byte offset of a syntax error.
StatusOr<Json> ParseJson(std::string_view text);
// JSON or YAML: JSON when the first non-space character is '{'.
StatusOr<Json> ParseJsonOrYaml(std::string_view text);

// True when every character may appear in a YAML stream (YAML 1.2 section 5.1).
// JsonToYaml escapes strings that fail this (or hold a carriage return).
bool IsYamlPrintable(std::string_view s);

// False for the strings JsonToYaml cannot write exactly: yaml-cpp's emitter,
// when it escapes a string, replaces each Unicode noncharacter (U+FDD0..U+FDEF
// and U+xFFFE, U+xFFFF in every plane) with U+FFFD. Such strings come only
// from hand-made input (escaped control characters next to noncharacters);
// they are still written, changed in those characters only.
bool YamlEmitterPreserves(std::string_view s);

// Block-style YAML; strings that would read back as another type are quoted.
std::string JsonToYaml(const Json& json);

}  // namespace orrery::api
