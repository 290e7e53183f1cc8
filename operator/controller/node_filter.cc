#include "operator/controller/node_filter.h"

#include <algorithm>
#include <cstdio>

namespace orrery::controller {

namespace {

std::string Field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string TaintText(const Json& taint) {
  std::string text = Field(taint, "key");
  const std::string value = Field(taint, "value");
  if (!value.empty()) text += "=" + value;
  return text + ":" + Field(taint, "effect");
}

// Days from 1970-01-01 to y-m-d (proleptic Gregorian), without the C library's
// time zone.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

}  // namespace

bool Tolerates(const api::Toleration& t, const Json& taint) {
  const std::string effect = Field(taint, "effect");
  if (!t.effect.empty() && t.effect != effect) return false;
  if (t.operator_ == "Exists") return t.key.empty() || t.key == Field(taint, "key");
  return t.key == Field(taint, "key") && t.value == Field(taint, "value");
}

std::string NodeRefusal(const Json& node, const api::ResourcesSpec& resources) {
  const std::string name = node.contains("metadata") ? Field(node["metadata"], "name") : "";
  const Json empty = Json::object();
  const Json& spec = node.contains("spec") ? node["spec"] : empty;
  if (spec.value("unschedulable", false)) return "node " + name + " is cordoned";
  const Json& labels = node.contains("metadata") && node["metadata"].contains("labels")
                           ? node["metadata"]["labels"]
                           : empty;
  for (const auto& [key, value] : resources.node_selector) {
    if (Field(labels, key.c_str()) != value || !labels.contains(key)) {
      std::string why = "node " + name;
      why += " does not match spec.resources.nodeSelector ";
      why += key;
      why += "=";
      why += value;
      return why;
    }
  }
  if (spec.contains("taints") && spec["taints"].is_array()) {
    for (const Json& taint : spec["taints"]) {
      const std::string effect = Field(taint, "effect");
      if (effect != "NoSchedule" && effect != "NoExecute") continue;
      // The node lifecycle controller's condition taints mirror the Ready
      // condition, which is judged on its own (NodeReady, and the grace
      // before a NotReady node's gangs are lost).
      const std::string key = Field(taint, "key");
      if (key == "node.kubernetes.io/not-ready" || key == "node.kubernetes.io/unreachable")
        continue;
      bool tolerated = false;
      for (const api::Toleration& t : resources.tolerations)
        tolerated = tolerated || Tolerates(t, taint);
      if (!tolerated) {
        return "node " + name + " has taint " + TaintText(taint) +
               " that spec.resources.tolerations do not tolerate";
      }
    }
  }
  return "";
}

std::optional<std::time_t> ParseRfc3339(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &used) !=
      6) {
    return std::nullopt;
  }
  size_t i = static_cast<size_t>(used);
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    }
  }
  int offset = 0;  // seconds east of UTC
  if (i < text.size() && (text[i] == 'Z' || text[i] == 'z')) {
    ++i;
  } else if (i + 6 == text.size() && (text[i] == '+' || text[i] == '-')) {
    int oh = 0, om = 0;
    if (std::sscanf(text.c_str() + i + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
    offset = (text[i] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != text.size() || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
    return std::nullopt;
  }
  const int64_t days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return static_cast<std::time_t>(days * 86400 + h * 3600 + mi * 60 + s - offset);
}

std::optional<double> UnreadySeconds(const Json& node, std::time_t now) {
  const Json* ready = nullptr;
  if (node.contains("status") && node["status"].contains("conditions")) {
    for (const Json& c : node["status"]["conditions"]) {
      if (Field(c, "type") == "Ready") ready = &c;
    }
  }
  if (ready != nullptr && Field(*ready, "status") == "True") return std::nullopt;
  if (ready == nullptr) return 1e18;
  auto since = ParseRfc3339(Field(*ready, "lastTransitionTime"));
  if (!since) return 1e18;
  return std::max(0.0, static_cast<double>(now - *since));
}

}  // namespace orrery::controller
