// The checks of the Kubernetes "restricted" Pod Security Standard (v1.30 level)
// that a pod's JSON shows, as a test helper: an empty list means the pod passes.
// The integration test also creates pods in a namespace that enforces the
// profile, so the API server's own admission checks them too.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "operator/api/yaml.h"

namespace orrery::controller::testing {

inline std::vector<std::string> RestrictedViolations(const api::Json& pod) {
  using api::Json;
  std::vector<std::string> v;
  const Json spec = pod.value("spec", Json::object());
  for (const char* host : {"hostNetwork", "hostPID", "hostIPC"}) {
    if (spec.value(host, false)) v.push_back(std::string("spec.") + host);
  }
  static const std::set<std::string> kAllowedVolumes = {
      "configMap", "csi",   "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
      "projected", "secret"};
  for (const Json& vol : spec.value("volumes", Json::array())) {
    for (const auto& [k, val] : vol.items()) {
      if (k != "name" && kAllowedVolumes.count(k) == 0) v.push_back("volume type " + k);
    }
  }
  const Json psc = spec.value("securityContext", Json::object());
  if (psc.contains("sysctls") && !psc["sysctls"].empty()) v.push_back("sysctls");
  bool pod_non_root = psc.value("runAsNonRoot", false);
  if (psc.value("runAsUser", int64_t{1}) == 0) v.push_back("pod runAsUser 0");
  std::string pod_seccomp = psc.value("seccompProfile", Json::object()).value("type", "");
  std::vector<Json> containers;
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    for (const Json& c : spec.value(list, Json::array())) containers.push_back(c);
  }
  if (containers.empty()) v.push_back("no containers");
  for (const Json& c : containers) {
    std::string n = c.value("name", "?");
    const Json sc = c.value("securityContext", Json::object());
    if (sc.value("privileged", false)) v.push_back(n + ": privileged");
    if (!sc.contains("allowPrivilegeEscalation") || sc["allowPrivilegeEscalation"] != false) {
      v.push_back(n + ": allowPrivilegeEscalation must be false");
    }
    bool non_root = sc.value("runAsNonRoot", pod_non_root);
    if (!non_root) v.push_back(n + ": runAsNonRoot must be true");
    if (sc.value("runAsUser", int64_t{1}) == 0) v.push_back(n + ": runAsUser 0");
    std::string seccomp = sc.value("seccompProfile", Json::object()).value("type", pod_seccomp);
    if (seccomp != "RuntimeDefault" && seccomp != "Localhost") {
      v.push_back(n + ": seccompProfile must be RuntimeDefault or Localhost");
    }
    const Json caps = sc.value("capabilities", Json::object());
    bool drops_all = false;
    for (const Json& d : caps.value("drop", Json::array())) drops_all |= d == "ALL";
    if (!drops_all) v.push_back(n + ": capabilities must drop ALL");
    for (const Json& a : caps.value("add", Json::array())) {
      if (a != "NET_BIND_SERVICE") v.push_back(n + ": adds capability " + a.dump());
    }
    if (sc.contains("procMount") && sc["procMount"] != "Default") v.push_back(n + ": procMount");
    for (const Json& p : c.value("ports", Json::array())) {
      if (p.value("hostPort", 0) != 0) v.push_back(n + ": hostPort");
    }
  }
  return v;
}

}  // namespace orrery::controller::testing
