// A real Kubernetes control plane for tests: etcd on tmpfs and kube-apiserver
// (plus kube-controller-manager, kube-scheduler, kwok and Kueue when asked) on
// free loopback ports, with a generated kubeconfig. The processes are started and
// stopped by e2e/cluster, the same script developers use from a shell, so there is
// one implementation of how the plane runs. A watchdog tied to this process stops
// the plane even when a test crashes, so nothing is left running.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/status.h"

namespace orrery::testing {

struct ControlPlaneOptions {
  bool controller_manager = false;
  bool scheduler = false;
  bool kwok = false;
  bool kueue = false;  // Kueue's CRDs and manager (e2e/cluster --with kueue)
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr, interleaved
};

// Runs `bash -c command` with `input` on its stdin; never throws.
CommandResult RunCommand(const std::string& command, const std::string& input = "");

class ControlPlane {
 public:
  // Starts a new plane in its own state folder. Fails (without leaving processes)
  // when the tools are missing, with the hint to run scripts/setup.
  static StatusOr<std::unique_ptr<ControlPlane>> Start(const ControlPlaneOptions& options = {});
  ~ControlPlane();  // Stops the plane.
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  Status Stop();

  const std::string& dir() const { return dir_; }                // state folder
  const std::string& kubeconfig() const { return kubeconfig_; }  // path
  const std::string& server() const { return server_; }          // https://127.0.0.1:PORT
  const std::string& token() const { return token_; }            // cluster-admin bearer token
  const std::string& ca_file() const { return ca_file_; }        // the server's CA bundle
  const std::string& bin_dir() const { return bin_dir_; }        // kubectl, helm, kwok, ...
  const std::string& etcd_endpoint() const { return etcd_; }     // http://127.0.0.1:PORT

  // Runs kubectl with this plane's kubeconfig: Kubectl("get pods -A").
  CommandResult Kubectl(const std::string& args, const std::string& input = "") const;
  // Waits up to `timeout_s` until the server has established the CRD `name`
  // (e.g. "modelselectionjobs.orrery.dev"). `kubectl wait` fails at once,
  // rather than waiting, while a just-created CRD has no conditions yet, so it
  // is retried. The commands' output is in the result.
  CommandResult WaitEstablished(const std::string& name, int timeout_s = 60) const;
  // Stops and starts kube-apiserver on the same port and storage (watch tests).
  Status RestartApiServer();
  // Compacts etcd at its current revision, so older resourceVersions answer 410.
  Status CompactEtcd();

 private:
  ControlPlane() = default;
  Status ReadEnv();
  std::string dir_, kubeconfig_, server_, token_, ca_file_, bin_dir_, etcd_;
  bool stopped_ = false;
};

// A fixture sharing one plane across the tests of a suite:
//   class MyTest : public orrery::testing::ControlPlaneTest {};
//   TEST_F(MyTest, X) { plane()->Kubectl("get ns"); }
// gtest's suite hooks are static, so suites that need kwok, the scheduler or the
// controller-manager derive from ControlPlaneTestWith<...> below instead.
class ControlPlaneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartShared({}); }
  static void TearDownTestSuite() { StopShared(); }
  static ControlPlane* plane() { return shared_.get(); }
  static void StartShared(const ControlPlaneOptions& options);
  static void StopShared();
  void SetUp() override {
    if (!shared_) GTEST_FAIL() << "control plane did not start: " << start_error_;
  }

 private:
  static std::unique_ptr<ControlPlane> shared_;
  static std::string start_error_;
};

// ControlPlaneTestWith<true, true, true> adds controller-manager, scheduler, kwok.
template <bool kControllerManager, bool kScheduler, bool kKwok>
class ControlPlaneTestWith : public ControlPlaneTest {
 protected:
  static void SetUpTestSuite() { StartShared({kControllerManager, kScheduler, kKwok}); }
};

}  // namespace orrery::testing
