#include "operator/controller/probe_server.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace orrery::controller {

StatusOr<std::pair<std::string, int>> ParseBindAddress(const std::string& address,
                                                       const std::string& flag) {
  std::string host;
  std::string port_text = address;
  size_t colon = address.rfind(':');
  if (colon != std::string::npos) {
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  if (host == "0.0.0.0" || host == "*") host.clear();
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(flag + "=" + address +
                                ": expected HOST:PORT or :PORT with a port in 0..65535 "
                                "(fix: e.g. " +
                                flag + "=:8081)");
  }
  return std::make_pair(host, port);
}

StatusOr<std::unique_ptr<ProbeServer>> ProbeServer::Start(const std::string& address,
                                                          std::function<std::string()> ready) {
  ORRERY_ASSIGN_OR_RETURN(auto bind_to, ParseBindAddress(address, "--health-probe-bind-address"));
  std::unique_ptr<ProbeServer> s(new ProbeServer());
  s->ready_ = std::move(ready);
  s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(bind_to.second));
  if (bind_to.first.empty()) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (bind_to.first == "localhost") {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (::inet_pton(AF_INET, bind_to.first.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("--health-probe-bind-address=" + address +
                                ": the host must be an IPv4 address (fix: e.g. 127.0.0.1:8081)");
  }
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(s->listen_fd_, 16) != 0) {
    return UnavailableError("cannot serve probes on " + address + ": " + std::strerror(errno) +
                            " (fix: pick a free port with --health-probe-bind-address)");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.sin_port);
  ProbeServer* raw = s.get();
  s->thread_ = std::thread([raw] { raw->Serve(); });
  return s;
}

ProbeServer::~ProbeServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void ProbeServer::Serve() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    ::close(fd);
  }
}

void ProbeServer::Answer(int fd) {
  // Read the request head (probes send a few hundred bytes), at most 1 s.
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) return;
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  std::string_view line(request);
  line = line.substr(0, line.find("\r\n"));
  int code = 404;
  std::string body = "not found\n";
  size_t sp1 = line.find(' ');
  size_t sp2 = line.find(' ', sp1 == std::string_view::npos ? 0 : sp1 + 1);
  std::string_view method = line.substr(0, sp1);
  std::string_view path =
      sp1 == std::string_view::npos
          ? std::string_view()
          : line.substr(sp1 + 1,
                        sp2 == std::string_view::npos ? std::string_view::npos : sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    code = 405;
    body = "method not allowed\n";
  } else if (path == "/healthz" || path == "/livez") {
    code = 200;
    body = "ok\n";
  } else if (path == "/readyz") {
    std::string why = ready_ ? ready_() : std::string();
    code = why.empty() ? 200 : 503;
    body = why.empty() ? "ok\n" : why + "\n";
  }
  std::string reason = code == 200   ? "OK"
                       : code == 503 ? "Service Unavailable"
                       : code == 405 ? "Method Not Allowed"
                                     : "Not Found";
  std::string response = "HTTP/1.1 " + std::to_string(code) + " " + reason +
                         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (method != "HEAD") response += body;
  size_t sent = 0;
  while (sent < response.size()) {
    ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace orrery::controller
