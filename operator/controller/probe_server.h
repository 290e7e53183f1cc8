// The operator's health endpoints for the kubelet's probes: GET /healthz answers
// 200 while the process serves requests, GET /readyz answers 200 once `ready()`
// says so (informer caches synced) and 503 with the reason before. A minimal
// HTTP/1.1 responder on one thread: probes are a few requests a minute, so it
// needs no framework (the metrics endpoint is prometheus-cpp's own server).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace orrery::controller {

// "host:port", ":port" (every interface) or "port"; port 0 picks a free one.
// Returns the host ("" = every interface) and port, or an error naming the fix.
StatusOr<std::pair<std::string, int>> ParseBindAddress(const std::string& address,
                                                       const std::string& flag);

class ProbeServer {
 public:
  // `ready` returns "" when ready, else why not; it is called per /readyz request.
  static StatusOr<std::unique_ptr<ProbeServer>> Start(const std::string& address,
                                                      std::function<std::string()> ready);
  ~ProbeServer();  // stops serving
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  int port() const { return port_; }

 private:
  ProbeServer() = default;
  void Serve();
  void Answer(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::function<std::string()> ready_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace orrery::controller
