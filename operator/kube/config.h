// How to reach and authenticate to an API server: from a kubeconfig file (its
// current context or a named one) or from inside a pod (the service account's
// token and CA, KUBERNETES_SERVICE_HOST/PORT). A bearer token given as a file is
// re-read whenever the file changes, because the kubelet rotates projected
// service-account tokens in place.
#pragma once

#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace orrery::kube {

struct ClientConfig {
  std::string server;  // "https://127.0.0.1:6443"
  // Trust: a CA bundle as a file or as PEM text; or no verification (tests only).
  std::string ca_file;
  std::string ca_data;
  bool insecure_skip_tls_verify = false;
  // Client certificate authentication (PEM text; the *_file fields are read at load).
  std::string client_cert_data;
  std::string client_key_data;
  // Bearer token authentication: a literal token, or a file re-read on change.
  std::string token;
  std::string token_file;
  // The namespace of the context (or of the pod), "default" when none is named.
  std::string namespace_name = "default";
  // A request that gets no answer within this time fails with kDeadlineExceeded.
  Duration request_timeout = std::chrono::seconds(30);
  // 429 and 503 answers with Retry-After are retried this many times.
  int max_retries = 5;
  std::string user_agent = "orrery/0.1";
};

// Loads a kubeconfig file. `context` empty means the current-context. Relative file
// paths inside the kubeconfig are resolved against the kubeconfig's folder.
StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");
// Parses kubeconfig text; `base_dir` resolves relative paths.
StatusOr<ClientConfig> ParseKubeconfig(const std::string& yaml_text, const std::string& context,
                                       const std::string& base_dir);

// The in-cluster configuration: $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
// token and CA from `sa_dir` (the service-account mount).
StatusOr<ClientConfig> InClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// $KUBECONFIG (its first entry), else in-cluster, else ~/.kube/config.
StatusOr<ClientConfig> DefaultConfig();

// The bearer token of a config: the literal token, or the token file's content,
// re-read when the file's modification time or size changes. Thread-safe.
class TokenSource {
 public:
  explicit TokenSource(const ClientConfig& config)
      : token_(config.token), file_(config.token_file) {}
  // The current token ("" when the config has none). A token file that cannot be
  // read keeps the last good token and reports the error.
  StatusOr<std::string> Token();

 private:
  std::mutex mu_;
  std::string token_;
  std::string file_;
  long long mtime_ns_ = -1;
  long long size_ = -1;
};

// Reads a whole file.
StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace orrery::kube
