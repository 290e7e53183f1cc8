// Test helper: GETs http://127.0.0.1:PORT/metrics over a plain socket and parses
// the Prometheus text exposition into samples, so worker tests can check what a
// scraper really sees without an HTTP client library or a Prometheus server.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/status.h"

namespace orrery::testing_worker {

// The body of GET /metrics on 127.0.0.1:port (HTTP/1.0: the server closes).
inline StatusOr<std::string> ScrapeMetrics(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return UnavailableError("socket failed");
  timeval timeout{30, 0};  // a hung server fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return UnavailableError("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return UnavailableError("send failed");
  }
  std::string response;
  char chunk[4096];
  for (ssize_t n; (n = recv(fd, chunk, sizeof(chunk), 0)) > 0;)
    response.append(chunk, static_cast<size_t>(n));
  close(fd);
  if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") == std::string::npos)
    return UnavailableError("not a 200 answer: " + response.substr(0, 80));
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return UnavailableError("no end of headers");
  return response.substr(body + 4);
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Sample lines of the text format (comments skipped). A line that does not parse
// is an error naming it.
inline StatusOr<std::vector<Sample>> ParseExposition(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) return InvalidArgumentError("bad sample line: " + line);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        if (eq == std::string::npos) return InvalidArgumentError("bad labels: " + line);
        std::string key = line.substr(i, eq - i), value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        if (j >= line.size()) return InvalidArgumentError("unterminated label: " + line);
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return InvalidArgumentError("unterminated labels: " + line);
      ++i;
    }
    const std::string value = line.substr(i);
    char* end = nullptr;
    s.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) return InvalidArgumentError("bad value: " + line);
    samples.push_back(std::move(s));
  }
  return samples;
}

// Every sample of `name` whose labels include `labels`.
inline std::vector<Sample> Select(const std::vector<Sample>& samples, const std::string& name,
                                  const std::map<std::string, std::string>& labels = {}) {
  std::vector<Sample> out;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (match) out.push_back(s);
  }
  return out;
}

// The value of the one sample of `name` matching `labels`; nullopt if there is
// none or more than one.
inline std::optional<double> ValueOf(const std::vector<Sample>& samples, const std::string& name,
                                     const std::map<std::string, std::string>& labels = {}) {
  auto found = Select(samples, name, labels);
  if (found.size() != 1) return std::nullopt;
  return found.front().value;
}

}  // namespace orrery::testing_worker
