// Test helper: runs one function per rank on its own thread, each rank with its
// own rendezvous over one file store in a fresh temporary directory, as separate
// processes would (gloo works across threads of one process). Returns every
// rank's Status.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "worker/dist/communicator.h"

namespace orrery::testing_worker {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/orrery-worker-XXXXXX";
    char* made = mkdtemp(tmpl.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<Status> RunRanks(
    int world, const std::function<Status(int, dist::Rendezvous*)>& fn,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
  TempDir dir;
  std::vector<Status> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r]() {
      dist::RendezvousConfig c;
      c.rank = r;
      c.world_size = world;
      c.store_path = dir.path() + "/store";
      c.timeout = timeout;
      auto rdv = dist::Connect(c);
      if (!rdv.ok()) {
        results[static_cast<size_t>(r)] = rdv.status();
        return;
      }
      results[static_cast<size_t>(r)] = fn(r, rdv->get());
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace orrery::testing_worker
