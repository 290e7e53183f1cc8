#include "common/metrics/tls.h"

#include <fstream>
#include <sstream>

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace orrery::metrics {
namespace {

// The newest OpenSSL error as text, and the queue cleared.
std::string OpenSslError() {
  unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  std::string text = code == 0 ? "unknown error" : ERR_error_string(code, nullptr);
  ERR_clear_error();
  return text;
}

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);  // NOLINT(google-runtime-int): OpenSSL's type
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

StatusOr<std::string> ReadWhole(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read the " + what + " " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

StatusOr<TlsMaterial> SelfSignedCertificate(const std::vector<std::string>& hosts, int days) {
  KeyPtr key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  if (!key || !cert) return InternalError("cannot make a key: " + OpenSslError());
  X509_set_version(cert.get(), 2);  // v3, for the extensions
  BnPtr serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return InternalError("cannot draw a serial number: " + OpenSslError());
  }
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400);  // NOLINT
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  const std::string common = hosts.empty() ? std::string("orrery") : hosts.front();
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  std::string alt_names;
  for (const std::string& host : hosts) {
    if (!alt_names.empty()) alt_names += ",";
    alt_names += (IsIpAddress(host) ? "IP:" : "DNS:") + host;
  }
  X509V3_CTX ext_ctx;
  X509V3_set_ctx_nodb(&ext_ctx);
  X509V3_set_ctx(&ext_ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, "serverAuth"}};
  if (!alt_names.empty()) extensions.emplace_back(NID_subject_alt_name, alt_names);
  for (const auto& [nid, value] : extensions) {
    ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ext_ctx, nid, value.c_str()));
    if (!ext || X509_add_ext(cert.get(), ext.get(), -1) != 1) {
      return InvalidArgumentError("cannot add the certificate extension '" + value +
                                  "': " + OpenSslError());
    }
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return InternalError("cannot sign the certificate: " + OpenSslError());
  }
  BioPtr cert_bio(BIO_new(BIO_s_mem()));
  BioPtr key_bio(BIO_new(BIO_s_mem()));
  if (!cert_bio || !key_bio || PEM_write_bio_X509(cert_bio.get(), cert.get()) != 1 ||
      PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1) {
    return InternalError("cannot write the certificate: " + OpenSslError());
  }
  return TlsMaterial{BioText(cert_bio.get()), BioText(key_bio.get())};
}

StatusOr<TlsMaterial> ReadTlsFiles(const std::string& cert_file, const std::string& key_file) {
  TlsMaterial m;
  ORRERY_ASSIGN_OR_RETURN(m.cert_pem, ReadWhole(cert_file, "certificate"));
  ORRERY_ASSIGN_OR_RETURN(m.key_pem, ReadWhole(key_file, "private key"));
  return m;
}

StatusOr<std::unique_ptr<TlsServerContext>> TlsServerContext::FromPem(const TlsMaterial& material,
                                                                      const std::string& source) {
  SSL_CTX* raw = SSL_CTX_new(TLS_server_method());
  if (raw == nullptr) return InternalError("cannot make a TLS context: " + OpenSslError());
  std::unique_ptr<TlsServerContext> ctx(new TlsServerContext(raw));
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  BioPtr cert_bio(
      BIO_new_mem_buf(material.cert_pem.data(), static_cast<int>(material.cert_pem.size())));
  X509Ptr leaf(PEM_read_bio_X509_AUX(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!leaf || SSL_CTX_use_certificate(raw, leaf.get()) != 1) {
    return InvalidArgumentError(source + ": no PEM certificate (" + OpenSslError() + ")");
  }
  // Intermediates follow the leaf; the context owns each one it is handed.
  while (X509* extra = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add_extra_chain_cert(raw, extra) != 1) {
      X509_free(extra);
      return InvalidArgumentError(source + ": bad intermediate certificate (" + OpenSslError() +
                                  ")");
    }
  }
  ERR_clear_error();  // the loop above ends on "no start line"
  BioPtr key_bio(
      BIO_new_mem_buf(material.key_pem.data(), static_cast<int>(material.key_pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) return InvalidArgumentError(source + ": no PEM private key (" + OpenSslError() + ")");
  if (SSL_CTX_use_PrivateKey(raw, key.get()) != 1 || SSL_CTX_check_private_key(raw) != 1) {
    ERR_clear_error();
    return InvalidArgumentError(source + ": the private key does not match the certificate");
  }
  return ctx;
}

TlsServerContext::~TlsServerContext() { SSL_CTX_free(static_cast<SSL_CTX*>(ctx_)); }

std::unique_ptr<TlsServerContext::Connection> TlsServerContext::Accept(int fd) const {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ctx_));
  if (ssl == nullptr) return nullptr;
  SSL_set_fd(ssl, fd);
  return std::unique_ptr<Connection>(new Connection(ssl));
}

TlsServerContext::Connection::~Connection() {
  SSL* ssl = static_cast<SSL*>(ssl_);
  SSL_shutdown(ssl);
  SSL_free(ssl);
}

Status TlsServerContext::Connection::Handshake() {
  if (SSL_accept(static_cast<SSL*>(ssl_)) != 1) {
    return UnavailableError("TLS handshake failed: " + OpenSslError());
  }
  return OkStatus();
}

long TlsServerContext::Connection::Read(char* buffer, int size) {  // NOLINT(google-runtime-int)
  int n = SSL_read(static_cast<SSL*>(ssl_), buffer, size);
  if (n <= 0) {
    int error = SSL_get_error(static_cast<SSL*>(ssl_), n);
    ERR_clear_error();
    return error == SSL_ERROR_ZERO_RETURN ? 0 : -1;
  }
  return n;
}

bool TlsServerContext::Connection::WriteAll(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    int n = SSL_write(static_cast<SSL*>(ssl_), bytes.data() + sent,
                      static_cast<int>(bytes.size() - sent));
    if (n <= 0) {
      ERR_clear_error();
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace orrery::metrics
