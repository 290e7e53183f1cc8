// TLS for the /metrics server (metrics.h): a server certificate and key as PEM,
// read from files (a kubernetes.io/tls Secret mounted as tls.crt and tls.key) or
// made here, self-signed, when none is given, as controller-runtime's secure
// metrics server does. The OpenSSL types stay in tls.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace orrery::metrics {

struct TlsMaterial {
  std::string cert_pem;  // the certificate, then any intermediates
  std::string key_pem;
};

// A fresh P-256 key and a certificate for it, signed by itself, valid from an
// hour ago for `days`, naming `hosts` (DNS names or IP addresses) as subject
// alternative names.
StatusOr<TlsMaterial> SelfSignedCertificate(const std::vector<std::string>& hosts, int days = 365);

// A TLS server context: the certificate and key, TLS 1.2 or newer.
class TlsServerContext {
 public:
  // Fails when the PEM does not parse or the key does not match the certificate;
  // `source` names where it came from, for the message.
  static StatusOr<std::unique_ptr<TlsServerContext>> FromPem(const TlsMaterial& material,
                                                             const std::string& source);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // One TLS connection over an accepted socket (blocking, with the socket's own
  // timeouts). Handshake() first; Read and Write then move bytes like recv/send.
  class Connection {
   public:
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    Status Handshake();
    long Read(char* buffer, int size);  // > 0 bytes, 0 closed, < 0 error
    bool WriteAll(const std::string& bytes);

   private:
    friend class TlsServerContext;
    explicit Connection(void* ssl) : ssl_(ssl) {}
    void* ssl_;
  };
  std::unique_ptr<Connection> Accept(int fd) const;

 private:
  explicit TlsServerContext(void* ctx) : ctx_(ctx) {}
  void* ctx_;  // SSL_CTX
};

// The PEM files of a certificate (with any intermediates) and its key; the error
// names the missing or unreadable file.
StatusOr<TlsMaterial> ReadTlsFiles(const std::string& cert_file, const std::string& key_file);

}  // namespace orrery::metrics
