// RestClient: the Client (client.h) over HTTPS with cpprestsdk. It authenticates
// with a bearer token (re-read from its file on rotation) or a client certificate,
// trusts the configured CA, retries 429/503 answers after the server's Retry-After,
// and streams watches line by line from the response body as they arrive.
// No cpprestsdk, Boost or OpenSSL exception leaves this file's implementation.
#pragma once

#include <memory>

#include "common/clock.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"

namespace orrery::kube {

class RestClient final : public Client {
 public:
  // Validates the configuration (server URL, CA and key material) and builds the
  // connection pool. `clock` times retries; nullptr is the system clock.
  static StatusOr<std::unique_ptr<RestClient>> Create(const ClientConfig& config,
                                                      Clock* clock = nullptr);
  ~RestClient() override;
  RestClient(const RestClient&) = delete;
  RestClient& operator=(const RestClient&) = delete;

  StatusOr<Object> Get(const Resource& r, const std::string& ns, const std::string& name) override;
  StatusOr<Object> List(const Resource& r, const std::string& ns,
                        const ListOptions& options) override;
  StatusOr<Object> Create(const Resource& r, const std::string& ns, const Object& obj) override;
  StatusOr<Object> Update(const Resource& r, const std::string& ns, const Object& obj) override;
  StatusOr<Object> UpdateStatus(const Resource& r, const std::string& ns,
                                const Object& obj) override;
  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& options = {}) override;
  StatusOr<Object> Patch(const Resource& r, const std::string& ns, const std::string& name,
                         PatchType type, const Object& patch,
                         const PatchOptions& options = {}) override;
  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                               const ListOptions& options) override;

  // GET of any path ("/version", "/readyz"), for probes and discovery.
  StatusOr<Object> GetPath(const std::string& path);

  const ClientConfig& config() const;

  struct Impl;

 private:
  explicit RestClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace orrery::kube
