// Runs the real `orrery` binary for the CLI tests and captures what it prints.
#pragma once

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/wait.h>

namespace orrery::cli::testing {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline RunResult RunOrrery(const std::string& args) {
  std::string command = std::string(ORRERY_BINARY_DIR) + "/bin/orrery " + args + " 2>&1";
  RunResult run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// A temporary folder holding files the test writes; removed with the object.
class TempFiles {
 public:
  explicit TempFiles(const std::string& name)
      : dir_(std::filesystem::path(::testing::TempDir()) / ("orrery_cli_" + name)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempFiles() { std::filesystem::remove_all(dir_); }
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;

  std::string Write(const std::string& name, const std::string& text) {
    auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

 private:
  std::filesystem::path dir_;
};

inline std::string Example(const std::string& name) {
  return std::string(ORRERY_SOURCE_DIR) + "/examples/" + name;
}

}  // namespace orrery::cli::testing
