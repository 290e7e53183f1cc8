// A command line run in a shell for the `orrery run` end-to-end tests.
#pragma once

#include <cstdio>
#include <string>

#include <sys/wait.h>

namespace orrery::local::testing {

struct Result {
  int code = -1;    // the exit status, or 128 + the signal that ended it
  std::string out;  // stdout and stderr together
};

inline Result Shell(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace orrery::local::testing
