// A real Prometheus server for tests: Debian's `prometheus` binary on a free
// loopback port, scraping the targets it is given every second, with a query
// helper. Used to check that the Grafana dashboard's queries return data from the
// metrics Orrery really exports.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace orrery::testing {

class PrometheusServer {
 public:
  // Starts Prometheus scraping `targets` ("127.0.0.1:PORT") at /metrics every
  // second. Fails with a hint when the binary is missing.
  static StatusOr<std::unique_ptr<PrometheusServer>> Start(const std::vector<std::string>& targets);
  ~PrometheusServer();  // Stops the server and removes its folder.
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  // An instant query; the `data` object of the answer, or the server's error.
  StatusOr<nlohmann::json> Query(const std::string& promql) const;
  // Waits until every target has been scraped successfully at least `scrapes` times.
  Status WaitForScrapes(int scrapes, int timeout_seconds) const;
  int port() const { return port_; }

 private:
  PrometheusServer() = default;
  std::string dir_;
  int pid_ = -1;
  int port_ = 0;
};

// Every PromQL expression in a Grafana dashboard JSON (panel targets), with
// template variables replaced by match-all values.
std::vector<std::string> DashboardQueries(const nlohmann::json& dashboard);

}  // namespace orrery::testing
