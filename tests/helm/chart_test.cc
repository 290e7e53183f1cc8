// The chart as a platform team meets it: it lints, deploy/ is in sync with it, its
// rendered objects pass the real API server's validation, it installs into a
// namespace that enforces the restricted Pod Security profile and becomes
// available, and its service account holds exactly the permissions the operator
// uses: a sample of what it must not do is refused.
#include <string>

#include <gtest/gtest.h>

#include "tests/testing/control_plane.h"

namespace orrery::testing {
namespace {

const std::string kSource = ORRERY_SOURCE_DIR;
constexpr char kNamespace[] = "orrery-system";
constexpr char kServiceAccount[] = "system:serviceaccount:orrery-system:orrery";

constexpr char kGpuNode[] = R"(apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-0}
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
)";

class ChartTest : public ControlPlaneTestWith<true, true, true> {
 protected:
  std::string Helm(const std::string& args) const {
    return plane()->bin_dir() + "/helm --kubeconfig " + plane()->kubeconfig() + " " + args;
  }
  // `kubectl auth can-i VERB RESOURCE --as SA` answers "yes" or "no".
  std::string CanI(const std::string& what) const {
    CommandResult r = plane()->Kubectl("auth can-i " + what + " --as " + kServiceAccount);
    return r.output.substr(0, r.output.find('\n'));
  }
};

TEST_F(ChartTest, LintsAndDeployIsInSync) {
  CommandResult lint = RunCommand(Helm("lint " + kSource + "/helm/orrery --strict"));
  EXPECT_EQ(lint.exit_code, 0) << lint.output;
  CommandResult sync = RunCommand(kSource + "/scripts/render-deploy --check");
  EXPECT_EQ(sync.exit_code, 0) << sync.output;
}

// `helm template` with no cluster at all (as a GitOps pipeline renders the
// chart): Helm's default Kubernetes version satisfies the chart's kubeVersion.
TEST_F(ChartTest, RendersOfflineWithoutACluster) {
  CommandResult r = RunCommand("KUBECONFIG=/nonexistent " + plane()->bin_dir() +
                               "/helm template x " + kSource + "/helm/orrery");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kind: Deployment"), std::string::npos);
}

TEST_F(ChartTest, SchemaRejectsBadValues) {
  CommandResult r = RunCommand(Helm("template x " + kSource + "/helm/orrery --set replicaCount=0"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("replicaCount"), std::string::npos) << r.output;
  r = RunCommand(Helm("template x " + kSource + "/helm/orrery --set logLevel=loud"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("logLevel"), std::string::npos) << r.output;
  // Values that are each valid but not together.
  r = RunCommand(Helm("template x " + kSource + "/helm/orrery --set metrics.port=8081"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("metrics.port and health.port"), std::string::npos) << r.output;
  r = RunCommand(Helm("template x " + kSource +
                      "/helm/orrery --set replicaCount=2 --set leaderElection.enabled=false"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("leaderElection.enabled"), std::string::npos) << r.output;
}

TEST_F(ChartTest, RenderedManifestsPassServerSideDryRun) {
  CommandResult r = plane()->Kubectl("create namespace " + std::string(kNamespace));
  ASSERT_TRUE(r.exit_code == 0 || r.output.find("AlreadyExists") != std::string::npos) << r.output;
  // CRDs first (objects of their kinds are not in the manifest), then everything.
  r = plane()->Kubectl("apply --server-side --dry-run=server -f " + kSource +
                       "/deploy/orrery.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("deployment.apps/orrery serverside-applied (server dry run)"),
            std::string::npos)
      << r.output;
}

TEST_F(ChartTest, InstallsUnderRestrictedPodSecurityWithLeastPrivilege) {
  CommandResult r = plane()->Kubectl("apply -f -", kGpuNode);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = plane()->Kubectl("create namespace " + std::string(kNamespace));
  ASSERT_TRUE(r.exit_code == 0 || r.output.find("AlreadyExists") != std::string::npos) << r.output;
  // The API server's PodSecurity admission refuses any pod that is not restricted.
  r = plane()->Kubectl("label --overwrite namespace " + std::string(kNamespace) +
                       " pod-security.kubernetes.io/enforce=restricted");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand(Helm("install orrery " + kSource + "/helm/orrery --namespace " + kNamespace +
                      " --wait --timeout 180s"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kubectl get msj"), std::string::npos) << "NOTES should say what next";
  r = plane()->Kubectl(
      "-n orrery-system get deployment orrery -o jsonpath={.status.availableReplicas}");
  EXPECT_EQ(r.output, "1");
  r = plane()->Kubectl("get crd modelselectionjobs.orrery.dev -o name");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = plane()->Kubectl(
      "-n orrery-system get configmap orrery-dashboard -o "
      "jsonpath={.metadata.labels.grafana_dashboard}");
  EXPECT_EQ(r.output, "1");

  // What the operator does.
  for (const char* allowed : {"list modelselectionjobs.orrery.dev",
                              "update modelselectionjobs.orrery.dev --subresource=status",
                              "create pods", "delete pods", "watch pods", "create services",
                              "list nodes", "update configmaps", "create events.events.k8s.io"}) {
    EXPECT_EQ(CanI(std::string(allowed) + " -A"), "yes") << allowed;
  }
  EXPECT_EQ(CanI("update leases.coordination.k8s.io -n orrery-system"), "yes");
  // A sample of what it must not do.
  for (const char* denied :
       {"get secrets", "delete nodes", "patch nodes", "create deployments.apps",
        "delete configmaps", "delete modelselectionjobs.orrery.dev",
        "create pods --subresource=exec", "update pods",
        "create clusterrolebindings.rbac.authorization.k8s.io"}) {
    EXPECT_EQ(CanI(std::string(denied) + " -A"), "no") << denied;
  }
  EXPECT_EQ(CanI("update leases.coordination.k8s.io -n default"), "no");

  // A token of the chart's own service account (TokenRequest), as the end-to-end
  // tests run the operator with.
  r = plane()->Kubectl("-n orrery-system create token orrery --duration 10m");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string token = r.output.substr(0, r.output.find('\n'));
  const std::string kubectl_as_sa = plane()->bin_dir() + "/kubectl --server " + plane()->server() +
                                    " --certificate-authority " + plane()->ca_file() + " --token " +
                                    token + " ";
  r = RunCommand(kubectl_as_sa + "get msj -A");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand(kubectl_as_sa + "get secrets -A");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("Forbidden"), std::string::npos) << r.output;

  r = RunCommand(Helm("uninstall orrery --namespace " + std::string(kNamespace) + " --wait"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace orrery::testing
