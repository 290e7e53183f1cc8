// kubeconfig and in-cluster configuration (see config.h). yaml-cpp exceptions are
// caught here and become InvalidArgument statuses naming the file.
#include "operator/kube/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <cpprest/asyncrt_utils.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

namespace orrery::kube {
namespace {

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || base_dir.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base_dir) / path).string();
}

StatusOr<std::string> DecodeBase64(const std::string& text, const char* what) {
  try {
    std::vector<unsigned char> bytes = utility::conversions::from_base64(text);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("decoding ") + what + ": " + e.what());
  }
}

// Finds the entry named `name` in a kubeconfig list ("clusters", "users", ...).
YAML::Node FindNamed(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
  }
  return YAML::Node();
}

std::string Str(const YAML::Node& n, const char* key) {
  if (!n || !n[key]) return "";
  return n[key].as<std::string>();
}

}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return UnavailableError("cannot read " + path);
  return ss.str();
}

StatusOr<ClientConfig> ParseKubeconfig(const std::string& yaml_text, const std::string& context,
                                       const std::string& base_dir) {
  try {
    YAML::Node root = YAML::Load(yaml_text);
    std::string ctx_name = context.empty() ? Str(root, "current-context") : context;
    if (ctx_name.empty()) return InvalidArgumentError("kubeconfig has no current-context");
    YAML::Node ctx = FindNamed(root["contexts"], ctx_name);
    if (!ctx) return NotFoundError("kubeconfig has no context " + ctx_name);
    YAML::Node c = ctx["context"];
    std::string cluster_name = Str(c, "cluster");
    std::string user_name = Str(c, "user");
    YAML::Node cluster = FindNamed(root["clusters"], cluster_name)["cluster"];
    if (!cluster) return NotFoundError("kubeconfig has no cluster " + cluster_name);
    YAML::Node user =
        user_name.empty() ? YAML::Node() : FindNamed(root["users"], user_name)["user"];

    ClientConfig cfg;
    if (std::string ns = Str(c, "namespace"); !ns.empty()) cfg.namespace_name = ns;
    cfg.server = Str(cluster, "server");
    if (cfg.server.empty())
      return InvalidArgumentError("cluster " + cluster_name + " has no server");
    while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
    cfg.ca_file = Resolve(Str(cluster, "certificate-authority"), base_dir);
    if (std::string d = Str(cluster, "certificate-authority-data"); !d.empty()) {
      ORRERY_ASSIGN_OR_RETURN(cfg.ca_data, DecodeBase64(d, "certificate-authority-data"));
    }
    if (cluster["insecure-skip-tls-verify"])
      cfg.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].as<bool>();

    if (user) {
      cfg.token = Str(user, "token");
      cfg.token_file = Resolve(Str(user, "tokenFile"), base_dir);
      if (std::string d = Str(user, "client-certificate-data"); !d.empty()) {
        ORRERY_ASSIGN_OR_RETURN(cfg.client_cert_data, DecodeBase64(d, "client-certificate-data"));
      } else if (std::string f = Resolve(Str(user, "client-certificate"), base_dir); !f.empty()) {
        ORRERY_ASSIGN_OR_RETURN(cfg.client_cert_data, ReadFileToString(f));
      }
      if (std::string d = Str(user, "client-key-data"); !d.empty()) {
        ORRERY_ASSIGN_OR_RETURN(cfg.client_key_data, DecodeBase64(d, "client-key-data"));
      } else if (std::string f = Resolve(Str(user, "client-key"), base_dir); !f.empty()) {
        ORRERY_ASSIGN_OR_RETURN(cfg.client_key_data, ReadFileToString(f));
      }
      if (user["exec"] || user["auth-provider"]) {
        return UnimplementedError("kubeconfig user " + user_name +
                                  " uses an exec/auth-provider plugin");
      }
    }
    if (cfg.client_cert_data.empty() != cfg.client_key_data.empty()) {
      return InvalidArgumentError("user " + user_name +
                                  " has a client certificate without a key or the reverse");
    }
    return cfg;
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("parsing kubeconfig: ") + e.what());
  }
}

StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  ORRERY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto cfg = ParseKubeconfig(text, context, std::filesystem::path(path).parent_path().string());
  if (!cfg.ok()) return cfg.status().WithContext("kubeconfig " + path);
  return cfg;
}

StatusOr<ClientConfig> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0')
    return NotFoundError("not in a cluster: KUBERNETES_SERVICE_HOST is unset");
  ClientConfig cfg;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 literal
  cfg.server = "https://" + h + ":" + std::string(port && *port ? port : "443");
  cfg.token_file = sa_dir + "/token";
  cfg.ca_file = sa_dir + "/ca.crt";
  if (auto ns = ReadFileToString(sa_dir + "/namespace"); ns.ok()) {
    std::string n = *ns;
    while (!n.empty() && (n.back() == '\n' || n.back() == ' ')) n.pop_back();
    if (!n.empty()) cfg.namespace_name = n;
  }
  // Fail now rather than on the first request when the mount is missing.
  if (auto t = ReadFileToString(cfg.token_file); !t.ok())
    return t.status().WithContext("in-cluster token");
  return cfg;
}

StatusOr<ClientConfig> DefaultConfig() {
  if (const char* kc = std::getenv("KUBECONFIG"); kc && *kc) {
    std::string first = kc;
    first = first.substr(0, first.find(':'));
    return LoadKubeconfig(first);
  }
  if (auto in = InClusterConfig(); in.ok()) return in;
  const char* home = std::getenv("HOME");
  if (home == nullptr) return NotFoundError("no KUBECONFIG, not in a cluster, and no HOME");
  return LoadKubeconfig(std::string(home) + "/.kube/config");
}

StatusOr<std::string> TokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_.empty()) return token_;
  struct stat st {};
  if (::stat(file_.c_str(), &st) != 0) {
    if (mtime_ns_ >= 0) return token_;  // keep the last good token across a rotation's rename
    return NotFoundError("token file " + file_ + " is missing");
  }
  long long mtime = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  long long size = static_cast<long long>(st.st_size);
  if (mtime != mtime_ns_ || size != size_) {
    auto text = ReadFileToString(file_);
    if (!text.ok()) {
      if (mtime_ns_ >= 0) return token_;
      return text.status();
    }
    std::string t = *text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    token_ = t;
    mtime_ns_ = mtime;
    size_ = size;
  }
  return token_;
}

}  // namespace orrery::kube
