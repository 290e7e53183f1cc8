// Helpers shared by the operator/kube integration tests: a RestClient for the test
// control plane, namespaces, a small CRD of the tests' own (group test.orrery.dev),
// and concurrent bulk creation.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "operator/kube/api_error.h"
#include "operator/kube/rest_client.h"
#include "tests/testing/control_plane.h"

namespace orrery::kube::testutil {

inline ClientConfig PlaneConfig(const orrery::testing::ControlPlane& plane) {
  ClientConfig c;
  c.server = plane.server();
  c.ca_file = plane.ca_file();
  c.token = plane.token();
  return c;
}

inline std::unique_ptr<RestClient> PlaneClient(const orrery::testing::ControlPlane& plane) {
  auto c = RestClient::Create(PlaneConfig(plane));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

inline Status CreateNamespace(Client& client, const std::string& name) {
  auto r =
      client.Create(Namespaces(), "",
                    {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}});
  if (!r.ok() && !IsAlreadyExists(r.status())) return r.status();
  return OkStatus();
}

inline Object ConfigMap(const std::string& ns, const std::string& name,
                        Object data = Object::object(), Object labels = Object::object()) {
  Object o = {{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"data", std::move(data)}};
  if (!labels.empty()) o["metadata"]["labels"] = std::move(labels);
  return o;
}

// widgets.test.orrery.dev: namespaced, with a status subresource and a schema
// that makes spec.size an integer of at least 0.
inline Resource Widgets() { return {"test.orrery.dev", "v1", "widgets", true}; }

inline Status EnsureWidgetCrd(Client& client) {
  Object crd = Object::parse(R"({
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.orrery.dev"},
    "spec": {"group": "test.orrery.dev", "scope": "Namespaced",
      "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
      "versions": [{"name": "v1", "served": true, "storage": true,
        "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
          "spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 0},
                                                     "color": {"type": "string"}}},
          "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}})");
  auto r = client.Create(CustomResourceDefinitions(), "", crd);
  if (!r.ok() && !IsAlreadyExists(r.status())) return r.status();
  // Wait until the CRD is established and its endpoint serves.
  for (int i = 0; i < 300; ++i) {
    auto got = client.Get(CustomResourceDefinitions(), "", "widgets.test.orrery.dev");
    bool established = false;
    if (got.ok()) {
      for (const auto& c : (*got)["status"].value("conditions", Object::array())) {
        if (c.value("type", "") == "Established" && c.value("status", "") == "True")
          established = true;
      }
    }
    if (established && client.List(Widgets(), "default", {}).ok()) return OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceededError("CRD widgets.test.orrery.dev not established");
}

inline Object Widget(const std::string& ns, const std::string& name, int size) {
  return {{"apiVersion", "test.orrery.dev/v1"},
          {"kind", "Widget"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"size", size}}}};
}

// Waits (real time) until `pred` holds; returns whether it did.
inline bool Eventually(const std::function<bool()>& pred,
                       Duration timeout = std::chrono::seconds(30)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// Creates `objects` with `parallel` requests in flight; returns the first error.
inline Status CreateAll(Client& client, const Resource& r, const std::vector<Object>& objects,
                        int parallel = 8) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < objects.size(); i = next++) {
        const Object& o = objects[i];
        auto res = client.Create(r, o["metadata"].value("namespace", ""), o);
        if (!res.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok()) first = res.status();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace orrery::kube::testutil
