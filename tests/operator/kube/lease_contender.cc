// A test helper process for leader_election_test: it contends for a Lease with a
// LeaderElector and prints "LEADING <identity>" when it takes the lease and
// "STOPPED <identity>" when it stops leading, one line each, flushed at once.
//   lease_contender SERVER CA_FILE TOKEN NAMESPACE LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/rest_client.h"

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr,
                 "usage: %s SERVER CA TOKEN NAMESPACE LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS\n",
                 argv[0]);
    return 2;
  }
  orrery::kube::ClientConfig cfg;
  cfg.server = argv[1];
  cfg.ca_file = argv[2];
  cfg.token = argv[3];
  cfg.request_timeout = std::chrono::seconds(2);
  auto client = orrery::kube::RestClient::Create(cfg);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  orrery::kube::LeaderElectionConfig le;
  le.lease_namespace = argv[4];
  le.lease_name = argv[5];
  le.identity = argv[6];
  le.lease_duration = std::chrono::milliseconds(std::atoll(argv[7]));
  le.renew_deadline = std::chrono::milliseconds(std::atoll(argv[8]));
  le.retry_period = std::chrono::milliseconds(std::atoll(argv[9]));
  std::string id = le.identity;
  le.on_started_leading = [id](std::stop_token) {
    std::printf("LEADING %s\n", id.c_str());
    std::fflush(stdout);
  };
  le.on_stopped_leading = [id] {
    std::printf("STOPPED %s\n", id.c_str());
    std::fflush(stdout);
  };
  orrery::kube::LeaderElector elector(client->get(), le);
  orrery::Status s = elector.Run();
  std::fprintf(stderr, "elector ended: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}
