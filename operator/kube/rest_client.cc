// cpprestsdk implementation of the Kubernetes client (see rest_client.h). All
// cpprestsdk/Boost/OpenSSL exceptions are caught here and become statuses naming the
// verb, the resource and the object.
#include "operator/kube/rest_client.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <system_error>

#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>

#include "operator/kube/api_error.h"

namespace orrery::kube {
namespace {

namespace http = web::http;
using web::http::client::http_client;
using web::http::client::http_client_config;

// The watch's client-side inactivity timeout exceeds the server's timeoutSeconds by
// this margin, so a healthy watch always ends on the server's side first.
constexpr Duration kWatchTimeoutMargin = std::chrono::seconds(30);
constexpr int kDefaultWatchTimeoutSeconds = 300;
// How long a 429/503 without Retry-After waits before the next try, and the longest
// wait honoured (a server asking for more is answered with the error instead).
constexpr Duration kDefaultRetryAfter = std::chrono::seconds(1);
constexpr Duration kMaxRetryAfter = std::chrono::seconds(30);

std::string Encode(const std::string& s) { return web::uri::encode_data_string(s); }

class Query {
 public:
  void Add(const std::string& key, const std::string& value) {
    if (value.empty()) return;
    text_ += (text_.empty() ? "?" : "&") + Encode(key) + "=" + Encode(value);
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

Query ListQuery(const ListOptions& o, bool watch) {
  Query q;
  q.Add("labelSelector", o.label_selector);
  q.Add("fieldSelector", o.field_selector);
  q.Add("resourceVersion", o.resource_version);
  if (watch) {
    q.Add("watch", "true");
    if (o.allow_watch_bookmarks) q.Add("allowWatchBookmarks", "true");
    q.Add("timeoutSeconds",
          std::to_string(o.timeout_seconds > 0 ? o.timeout_seconds : kDefaultWatchTimeoutSeconds));
  } else {
    q.Add("resourceVersionMatch", o.resource_version_match);
    if (o.limit > 0) q.Add("limit", std::to_string(o.limit));
    q.Add("continue", o.continue_token);
  }
  return q;
}

std::string Describe(const char* verb, const Resource& r, const std::string& ns,
                     const std::string& name) {
  std::string s = std::string(verb) + " " + r.Name();
  if (r.namespaced && !ns.empty())
    s += " " + ns + (name.empty() ? "" : "/" + name);
  else if (!name.empty())
    s += " " + name;
  return s;
}

std::string ObjectPath(const Resource& r, const std::string& ns, const std::string& name) {
  return r.CollectionPath(ns) + "/" + Encode(name);
}

// Configures TLS trust and client certificates on an asio SSL context. Throws
// Boost's exceptions on bad material; callers catch them.
void ConfigureSsl(const ClientConfig& c, boost::asio::ssl::context& ctx) {
  if (!c.ca_file.empty()) ctx.load_verify_file(c.ca_file);
  if (!c.ca_data.empty()) ctx.add_certificate_authority(boost::asio::buffer(c.ca_data));
  if (!c.client_cert_data.empty()) {
    ctx.use_certificate_chain(boost::asio::buffer(c.client_cert_data));
    ctx.use_private_key(boost::asio::buffer(c.client_key_data), boost::asio::ssl::context::pem);
  }
}

http_client_config MakeHttpConfig(const ClientConfig& c, Duration timeout) {
  http_client_config hc;
  hc.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  hc.set_validate_certificates(!c.insecure_skip_tls_verify);
  hc.set_proxy(web::web_proxy(web::web_proxy::disabled));
  ClientConfig copy = c;
  hc.set_ssl_context_callback([copy](boost::asio::ssl::context& ctx) { ConfigureSsl(copy, ctx); });
  return hc;
}

Status TransportError(const std::string& context, const std::exception& e) {
  if (const auto* he = dynamic_cast<const http::http_exception*>(&e)) {
    if (he->error_code() == std::make_error_code(std::errc::timed_out)) {
      return DeadlineExceededError(context + ": " + he->what());
    }
  }
  return UnavailableError(context + ": " + e.what());
}

// A watch response body read incrementally: bytes are taken as the server sends
// them and cut at newlines, one JSON event per line.
class RestWatchStream final : public WatchStream {
 public:
  RestWatchStream(std::unique_ptr<http_client> client,
                  std::unique_ptr<pplx::cancellation_token_source> cts,
                  http::http_response response, std::string context)
      : client_(std::move(client)),
        cts_(std::move(cts)),
        response_(std::move(response)),
        body_(response_.body().streambuf()),
        context_(std::move(context)) {}

  ~RestWatchStream() override {
    Cancel();
    try {
      body_.close().wait();
    } catch (...) {  // closing a dead connection's buffer may throw; nothing to report
    }
  }

  StatusOr<std::optional<WatchEvent>> Next() override {
    while (true) {
      size_t nl = pending_.find('\n', scanned_);
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        scanned_ = 0;
        if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
        auto e = ParseWatchEvent(line);
        if (!e.ok()) return e.status().WithContext(context_);
        return std::optional<WatchEvent>(std::move(*e));
      }
      scanned_ = pending_.size();
      if (cancelled_) return CancelledError(context_ + ": watch cancelled");
      size_t n = 0;
      try {
        size_t want = std::clamp<size_t>(body_.in_avail(), 1, sizeof(chunk_));
        n = body_.getn(chunk_, want).get();
      } catch (const std::exception& e) {
        if (cancelled_) return CancelledError(context_ + ": watch cancelled");
        return TransportError(context_ + ": watch stream", e);
      }
      if (n == 0) {
        if (cancelled_) return CancelledError(context_ + ": watch cancelled");
        if (pending_.find_first_not_of(" \r\t\n") != std::string::npos) {
          // A last event without its newline: still an event.
          std::string line;
          line.swap(pending_);
          scanned_ = 0;
          auto e = ParseWatchEvent(line);
          if (!e.ok()) return e.status().WithContext(context_);
          return std::optional<WatchEvent>(std::move(*e));
        }
        return std::optional<WatchEvent>();
      }
      pending_.append(reinterpret_cast<const char*>(chunk_), n);
    }
  }

  void Cancel() override {
    if (cancelled_.exchange(true)) return;
    try {
      cts_->cancel();
      // Closing the read side wakes a reader blocked on a silent connection.
      body_.close(std::ios_base::in).wait();
    } catch (...) {  // already closed or failed: the reader sees the end either way
    }
  }

 private:
  std::unique_ptr<http_client> client_;
  std::unique_ptr<pplx::cancellation_token_source> cts_;
  http::http_response response_;
  concurrency::streams::streambuf<uint8_t> body_;
  std::string context_;
  std::string pending_;
  size_t scanned_ = 0;
  uint8_t chunk_[64 * 1024];
  std::atomic<bool> cancelled_{false};
};

const char* PropagationName(PropagationPolicy p) {
  switch (p) {
    case PropagationPolicy::kOrphan: return "Orphan";
    case PropagationPolicy::kBackground: return "Background";
    case PropagationPolicy::kForeground: return "Foreground";
    case PropagationPolicy::kDefault: break;
  }
  return "";
}

const char* PatchContentType(PatchType t) {
  switch (t) {
    case PatchType::kMerge: return "application/merge-patch+json";
    case PatchType::kJson: return "application/json-patch+json";
    case PatchType::kStrategicMerge: return "application/strategic-merge-patch+json";
    case PatchType::kApply: return "application/apply-patch+yaml";
  }
  return "application/merge-patch+json";
}

}  // namespace

struct RestClient::Impl {
  ClientConfig config;
  Clock* clock = nullptr;
  TokenSource tokens;
  std::unique_ptr<http_client> http;

  explicit Impl(const ClientConfig& c) : config(c), tokens(c) {}

  StatusOr<http::http_request> NewRequest(const http::method& method,
                                          const std::string& path_and_query) {
    http::http_request req(method);
    req.set_request_uri(path_and_query);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", config.user_agent);
    ORRERY_ASSIGN_OR_RETURN(std::string token, tokens.Token());
    if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
    return req;
  }

  StatusOr<Object> Do(const http::method& method, const std::string& path_and_query,
                      const Object* body, const std::string& content_type,
                      const std::string& context) {
    for (int attempt = 0;; ++attempt) {
      auto req = NewRequest(method, path_and_query);
      if (!req.ok()) return req.status().WithContext(context);
      if (body != nullptr) req->set_body(body->dump(), content_type);
      int code = 0;
      std::string text, retry_after;
      try {
        http::http_response resp = http->request(*req).get();
        code = resp.status_code();
        if (resp.headers().has("Retry-After"))
          retry_after = resp.headers().find("Retry-After")->second;
        text = resp.extract_utf8string(/*ignore_content_type=*/true).get();
      } catch (const std::exception& e) {
        return TransportError(context, e);
      }
      if (code >= 200 && code < 300) {
        if (text.empty()) return Object::object();
        Object j = Object::parse(text, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) return DataLossError(context + ": response is not JSON");
        return j;
      }
      ApiError err = ApiError::FromResponse(code, text, retry_after);
      bool retryable = code == 429 || (code == 503 && err.retry_after.has_value());
      Duration wait = err.retry_after.value_or(kDefaultRetryAfter);
      if (retryable && attempt < config.max_retries && wait <= kMaxRetryAfter) {
        clock->SleepFor(wait);
        continue;
      }
      return err.ToStatus(context);
    }
  }
};

RestClient::RestClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestClient::~RestClient() = default;

StatusOr<std::unique_ptr<RestClient>> RestClient::Create(const ClientConfig& config, Clock* clock) {
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return InvalidArgumentError("server must be an http(s) URL: " + config.server);
  }
  // Apply the TLS material once now so that a bad CA or key fails here, not on
  // the first request.
  try {
    boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
    ConfigureSsl(config, ctx);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("TLS configuration: ") + e.what());
  }
  auto impl = std::make_unique<Impl>(config);
  impl->clock = clock != nullptr ? clock : SystemClock::Get();
  try {
    impl->http = std::make_unique<http_client>(web::uri(config.server),
                                               MakeHttpConfig(config, config.request_timeout));
  } catch (const std::exception& e) {
    return InvalidArgumentError("server " + config.server + ": " + e.what());
  }
  return std::unique_ptr<RestClient>(new RestClient(std::move(impl)));
}

const ClientConfig& RestClient::config() const { return impl_->config; }

StatusOr<Object> RestClient::GetPath(const std::string& path) {
  return impl_->Do(http::methods::GET, path, nullptr, "", "get " + path);
}

StatusOr<Object> RestClient::Get(const Resource& r, const std::string& ns,
                                 const std::string& name) {
  return impl_->Do(http::methods::GET, ObjectPath(r, ns, name), nullptr, "",
                   Describe("get", r, ns, name));
}

StatusOr<Object> RestClient::List(const Resource& r, const std::string& ns,
                                  const ListOptions& options) {
  return impl_->Do(http::methods::GET, r.CollectionPath(ns) + ListQuery(options, false).str(),
                   nullptr, "", Describe("list", r, ns, ""));
}

StatusOr<Object> RestClient::Create(const Resource& r, const std::string& ns, const Object& obj) {
  std::string name = obj.contains("metadata") ? obj["metadata"].value("name", "") : "";
  return impl_->Do(http::methods::POST, r.CollectionPath(ns), &obj, "application/json",
                   Describe("create", r, ns, name));
}

StatusOr<Object> RestClient::Update(const Resource& r, const std::string& ns, const Object& obj) {
  std::string name = obj.contains("metadata") ? obj["metadata"].value("name", "") : "";
  if (name.empty())
    return InvalidArgumentError(Describe("update", r, ns, "") + ": object has no name");
  return impl_->Do(http::methods::PUT, ObjectPath(r, ns, name), &obj, "application/json",
                   Describe("update", r, ns, name));
}

StatusOr<Object> RestClient::UpdateStatus(const Resource& r, const std::string& ns,
                                          const Object& obj) {
  std::string name = obj.contains("metadata") ? obj["metadata"].value("name", "") : "";
  if (name.empty())
    return InvalidArgumentError(Describe("update status of", r, ns, "") + ": object has no name");
  return impl_->Do(http::methods::PUT, ObjectPath(r, ns, name) + "/status", &obj,
                   "application/json", Describe("update status of", r, ns, name));
}

Status RestClient::Delete(const Resource& r, const std::string& ns, const std::string& name,
                          const DeleteOptions& options) {
  Object body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (options.propagation != PropagationPolicy::kDefault)
    body["propagationPolicy"] = PropagationName(options.propagation);
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  if (!options.precondition_uid.empty()) body["preconditions"]["uid"] = options.precondition_uid;
  if (!options.precondition_resource_version.empty())
    body["preconditions"]["resourceVersion"] = options.precondition_resource_version;
  auto result = impl_->Do(http::methods::DEL, ObjectPath(r, ns, name), &body, "application/json",
                          Describe("delete", r, ns, name));
  return result.ok() ? OkStatus() : result.status();
}

StatusOr<Object> RestClient::Patch(const Resource& r, const std::string& ns,
                                   const std::string& name, PatchType type, const Object& patch,
                                   const PatchOptions& options) {
  std::string path = ObjectPath(r, ns, name);
  if (!options.subresource.empty()) path += "/" + options.subresource;
  Query q;
  q.Add("fieldManager", options.field_manager);
  if (type == PatchType::kApply) {
    if (options.field_manager.empty()) {
      return InvalidArgumentError(Describe("apply", r, ns, name) +
                                  ": server-side apply needs a field manager");
    }
    if (options.force) q.Add("force", "true");
  }
  return impl_->Do(http::methods::PATCH, path + q.str(), &patch, PatchContentType(type),
                   Describe(type == PatchType::kApply ? "apply" : "patch", r, ns, name));
}

StatusOr<std::unique_ptr<WatchStream>> RestClient::Watch(const Resource& r, const std::string& ns,
                                                         const ListOptions& options) {
  std::string context = Describe("watch", r, ns, "") + " from resourceVersion " +
                        (options.resource_version.empty() ? "\"\"" : options.resource_version);
  int server_timeout =
      options.timeout_seconds > 0 ? options.timeout_seconds : kDefaultWatchTimeoutSeconds;
  auto req =
      impl_->NewRequest(http::methods::GET, r.CollectionPath(ns) + ListQuery(options, true).str());
  if (!req.ok()) return req.status().WithContext(context);
  try {
    // A client per watch: its own connection and a timeout longer than the watch.
    auto client = std::make_unique<http_client>(
        web::uri(impl_->config.server),
        MakeHttpConfig(impl_->config, std::chrono::seconds(server_timeout) + kWatchTimeoutMargin));
    auto cts = std::make_unique<pplx::cancellation_token_source>();
    http::http_response resp = client->request(*req, cts->get_token()).get();
    if (resp.status_code() != http::status_codes::OK) {
      std::string retry_after;
      if (resp.headers().has("Retry-After"))
        retry_after = resp.headers().find("Retry-After")->second;
      std::string text = resp.extract_utf8string(true).get();
      return ApiError::FromResponse(resp.status_code(), text, retry_after).ToStatus(context);
    }
    return std::unique_ptr<WatchStream>(std::make_unique<RestWatchStream>(
        std::move(client), std::move(cts), std::move(resp), context));
  } catch (const std::exception& e) {
    return TransportError(context, e);
  }
}

}  // namespace orrery::kube
