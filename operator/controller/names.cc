#include "operator/controller/names.h"

#include <string>

namespace orrery::controller {
namespace {

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsLower(c) || IsDigit(c) || (c >= 'A' && c <= 'Z'); }

std::string Sanitize(std::string_view in) {
  std::string out;
  for (char c : in) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (!IsLower(c) && !IsDigit(c)) c = '-';
    if (c == '-' && (out.empty() || out.back() == '-')) continue;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty() || !IsLower(out.front())) out.insert(0, out.empty() ? "o" : "o-");
  return out;
}

std::string Identity(std::initializer_list<std::string_view> parts) {
  std::string id;
  for (std::string_view p : parts) {
    id.append(p);
    id.push_back('\0');  // cannot occur in a Kubernetes name: parts stay apart
  }
  return id;
}

}  // namespace

uint64_t Fnv1a64(std::string_view data) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string HashHex(std::string_view data, size_t digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t h = Fnv1a64(data);
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kHex[h & 0xf];
    h >>= 4;
  }
  return out.substr(0, digits < 16 ? digits : 16);
}

std::string BoundedName(std::string_view readable, std::string_view identity, size_t max_length) {
  std::string suffix = "-" + HashHex(identity);
  std::string prefix = Sanitize(readable);
  size_t room = max_length > suffix.size() + 1 ? max_length - suffix.size() : 1;
  if (prefix.size() > room) prefix.resize(room);
  while (prefix.size() > 1 && prefix.back() == '-') prefix.pop_back();
  return prefix + suffix;
}

bool IsLabelValue(std::string_view v) {
  if (v.empty()) return true;
  if (v.size() > kMaxNameLength || !IsAlnum(v.front()) || !IsAlnum(v.back())) return false;
  for (char c : v) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool IsDns1035Label(std::string_view n) {
  if (n.empty() || n.size() > kMaxNameLength || !IsLower(n.front())) return false;
  if (!IsLower(n.back()) && !IsDigit(n.back())) return false;
  for (char c : n) {
    if (!IsLower(c) && !IsDigit(c) && c != '-') return false;
  }
  return true;
}

std::string LabelValue(std::string_view value) {
  if (IsLabelValue(value)) return std::string(value);
  return BoundedName(value, value);
}

std::string GangLabelValue(std::string_view task, int generation) {
  return LabelValue(std::string(task) + "-g" + std::to_string(generation));
}

std::string GangServiceName(std::string_view job, std::string_view task, int generation) {
  std::string gen = std::to_string(generation);
  return BoundedName(std::string(job) + "-" + std::string(task) + "-g" + gen,
                     Identity({"gang", job, task, gen}));
}

std::string GangPodName(std::string_view job, std::string_view task, int generation, int rank) {
  std::string gen = std::to_string(generation);
  std::string r = std::to_string(rank);
  return BoundedName(std::string(job) + "-" + std::string(task) + "-g" + gen + "-r" + r,
                     Identity({"pod", job, task, gen, r}));
}

std::string ProfileKeyHash(std::string_view key) { return "p" + HashHex(key, 16); }

std::string ProfileServiceName(std::string_view job, std::string_view key) {
  return BoundedName(std::string(job) + "-prof", Identity({"profile", job, key}));
}

std::string ProfilePodName(std::string_view job, std::string_view key, int rank) {
  std::string r = std::to_string(rank);
  return BoundedName(std::string(job) + "-prof-r" + r, Identity({"profile-pod", job, key, r}));
}

}  // namespace orrery::controller
