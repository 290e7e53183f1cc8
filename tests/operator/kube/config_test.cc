// Tests of configuration loading: kubeconfig contexts, inline and file
// credentials, relative paths, in-cluster files and environment, and the token
// file being re-read when it rotates.
#include "operator/kube/config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <cpprest/asyncrt_utils.h>

namespace orrery::kube {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    dir_ = fs::path(tmp ? tmp : "/tmp") / ("orrery_kube_config_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

std::string B64(const std::string& s) {
  return utility::conversions::to_base64(std::vector<unsigned char>(s.begin(), s.end()));
}

TEST_F(ConfigTest, CurrentContextWithTokenAndCaData) {
  std::string kc = R"(apiVersion: v1
kind: Config
current-context: b
clusters:
- name: c1
  cluster: {server: "https://one:6443/", certificate-authority-data: )" +
                   B64("CA-PEM") + R"(}
- name: c2
  cluster: {server: "https://two:6443", certificate-authority: ca.crt}
contexts:
- name: a
  context: {cluster: c1, user: u1}
- name: b
  context: {cluster: c2, user: u2, namespace: team}
users:
- name: u1
  user: {token: tok1}
- name: u2
  user: {tokenFile: token}
)";
  auto cfg = ParseKubeconfig(kc, "", dir_.string());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->server, "https://two:6443");
  EXPECT_EQ(cfg->ca_file, (dir_ / "ca.crt").string());
  EXPECT_EQ(cfg->token_file, (dir_ / "token").string());
  EXPECT_EQ(cfg->namespace_name, "team");

  auto a = ParseKubeconfig(kc, "a", dir_.string());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->server, "https://one:6443");  // trailing slash dropped
  EXPECT_EQ(a->ca_data, "CA-PEM");
  EXPECT_EQ(a->token, "tok1");
  EXPECT_EQ(a->namespace_name, "default");

  EXPECT_EQ(ParseKubeconfig(kc, "nope", "").status().code(), StatusCode::kNotFound);
}

TEST_F(ConfigTest, ClientCertificateFromDataOrFiles) {
  Write("certs/client.crt", "CERT");
  Write("certs/client.key", "KEY");
  std::string kc = R"(current-context: x
clusters: [{name: c, cluster: {server: "https://h", insecure-skip-tls-verify: true}}]
contexts: [{name: x, context: {cluster: c, user: f}}, {name: y, context: {cluster: c, user: d}}]
users:
- {name: f, user: {client-certificate: certs/client.crt, client-key: certs/client.key}}
- {name: d, user: {client-certificate-data: )" +
                   B64("CERT2") + ", client-key-data: " + B64("KEY2") + R"(}}
)";
  std::string path = Write("kubeconfig", kc);
  auto f = LoadKubeconfig(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->insecure_skip_tls_verify);
  EXPECT_EQ(f->client_cert_data, "CERT");
  EXPECT_EQ(f->client_key_data, "KEY");
  auto d = LoadKubeconfig(path, "y");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->client_cert_data, "CERT2");
  EXPECT_EQ(d->client_key_data, "KEY2");
}

TEST_F(ConfigTest, BrokenKubeconfigsAreErrorsNotExceptions) {
  EXPECT_EQ(ParseKubeconfig("{{{", "", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseKubeconfig("clusters: []", "", "").ok());
  EXPECT_FALSE(LoadKubeconfig((dir_ / "missing").string()).ok());
  std::string no_key = R"(current-context: x
clusters: [{name: c, cluster: {server: "https://h"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
users: [{name: u, user: {client-certificate-data: )" +
                       B64("C") + "}}]\n";
  EXPECT_EQ(ParseKubeconfig(no_key, "", "").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ConfigTest, InClusterReadsMountAndEnvironment) {
  std::string sa = (dir_ / "sa").string();
  Write("sa/token", "sa-token\n");
  Write("sa/ca.crt", "CA");
  Write("sa/namespace", "orrery-system");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto cfg = InClusterConfig(sa);
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->server, "https://10.0.0.1:443");
  EXPECT_EQ(cfg->ca_file, sa + "/ca.crt");
  EXPECT_EQ(cfg->namespace_name, "orrery-system");
  TokenSource ts(*cfg);
  EXPECT_EQ(ts.Token().value_or("?"), "sa-token");
  EXPECT_FALSE(InClusterConfig(sa).ok());  // no service host: not in a cluster
}

TEST_F(ConfigTest, TokenFileIsReReadWhenItRotates) {
  ClientConfig cfg;
  cfg.token_file = Write("token", "first");
  TokenSource ts(cfg);
  EXPECT_EQ(ts.Token().value_or("?"), "first");
  // The kubelet swaps the file; a different size or mtime is a rotation.
  Write("token", "second-token\n");
  EXPECT_EQ(ts.Token().value_or("?"), "second-token");
  // A missing file after a good read keeps the last token.
  fs::remove(dir_ / "token");
  EXPECT_EQ(ts.Token().value_or("?"), "second-token");
  ClientConfig never;
  never.token_file = (dir_ / "never").string();
  EXPECT_FALSE(TokenSource(never).Token().ok());
}

}  // namespace
}  // namespace orrery::kube
