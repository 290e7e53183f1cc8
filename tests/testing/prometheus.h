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

// A target scraped over HTTPS (certificate not verified: the operator's is
// self-signed) with a bearer token, as a ServiceMonitor with
// bearerTokenFile and insecureSkipVerify scrapes it.
struct SecureTarget {
  std::string address;  // "127.0.0.1:PORT"
  std::string token;
};

class PrometheusServer {
 public:
  // Starts Prometheus scraping `targets` ("127.0.0.1:PORT") at /metrics every
  // second over plain HTTP, and `secure` ones over HTTPS with their tokens.
  // Fails with a hint when the binary is missing.
  static StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const std::vector<std::string>& targets, const std::vector<SecureTarget>& secure = {});
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
