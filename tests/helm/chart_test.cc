// The chart as a platform team meets it: it lints, deploy/ is in sync with it, its
// rendered objects pass the real API server's validation, it installs into a
// namespace that enforces the restricted Pod Security profile and becomes
// available, and its service account holds exactly the permissions the operator
// uses: a sample of what it must not do is refused, and `kubectl auth can-i
// --list` in every namespace that matters equals an explicit allow-list, both
// when it manages every namespace and when it manages a few (watchNamespaces).
#include <regex>
#include <set>
#include <sstream>
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

// What `kubectl auth can-i --list` grants `user` in `ns`, one "resource verb"
// or "url verb" per entry, less what every authenticated user holds (discovery,
// self reviews), so the rest is what the chart granted.
std::set<std::string> Grants(const ControlPlane& plane, const std::string& user,
                             const std::string& ns) {
  auto list = [&](const std::string& as) {
    std::set<std::string> out;
    CommandResult r = plane.Kubectl("auth can-i --list -n " + ns + " --as " + as);
    std::istringstream lines(r.output);
    std::string line;
    const std::regex row(R"(^(\S*)\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$)");
    while (std::getline(lines, line)) {
      std::smatch m;
      if (!std::regex_match(line, m, row)) continue;
      std::string what = m[1].str();
      if (!m[3].str().empty()) what += "(" + m[3].str() + ")";  // resource names
      std::istringstream urls(m[2].str()), verbs_text(m[4].str());
      std::vector<std::string> subjects;
      for (std::string u; urls >> u;) subjects.push_back(u);
      if (subjects.empty()) subjects.push_back(what);
      for (std::string v; verbs_text >> v;) {
        for (std::string subject : subjects) out.insert(subject.append(" ").append(v));
      }
    }
    return out;
  };
  std::set<std::string> granted = list(user);
  for (const std::string& base : list("system:serviceaccount:default:nobody")) granted.erase(base);
  return granted;
}

std::set<std::string> Expand(const std::string& resource, const std::vector<std::string>& verbs) {
  std::set<std::string> out;
  for (const std::string& v : verbs) out.insert(std::string(resource).append(" ").append(v));
  return out;
}

std::set<std::string> Union(std::initializer_list<std::set<std::string>> sets) {
  std::set<std::string> out;
  for (const auto& s : sets) out.insert(s.begin(), s.end());
  return out;
}

TEST_F(ChartTest, ServiceAccountHoldsExactlyTheAllowListInBothModes) {
  // Cluster scope, read-only, in both modes: nodes, pods (other workloads'
  // GPUs), and the reviews that guard /metrics.
  const std::set<std::string> cluster_read =
      Union({Expand("nodes", {"get", "list", "watch"}), Expand("pods", {"get", "list", "watch"}),
             Expand("tokenreviews.authentication.k8s.io", {"create"}),
             Expand("subjectaccessreviews.authorization.k8s.io", {"create"}),
             // Kueue admission (kueue.enabled "auto"): what Kueue decided, and
             // the flavors and priority classes it names.
             Expand("workloads.kueue.x-k8s.io", {"get", "list", "watch"}),
             Expand("resourceflavors.kueue.x-k8s.io", {"get", "list", "watch"}),
             Expand("workloadpriorityclasses.kueue.x-k8s.io", {"get", "list", "watch"})});
  // Where it manages jobs.
  const std::set<std::string> job_rules =
      Union({Expand("modelselectionjobs.orrery.dev", {"get", "list", "watch", "update", "patch"}),
             Expand("modelselectionjobs.orrery.dev/status", {"get", "update", "patch"}),
             Expand("modelselectionjobs.orrery.dev/finalizers", {"update"}),
             Expand("pods", {"create", "delete"}),
             Expand("services", {"get", "list", "watch", "create", "delete"}),
             Expand("events.events.k8s.io", {"create", "patch"}),
             Expand("workloads.kueue.x-k8s.io", {"create", "update", "delete"}),
             Expand("workloads.kueue.x-k8s.io/status", {"get", "update", "patch"})});
  // Its own namespace: the profile cache and the leader Lease.
  const std::set<std::string> own =
      Union({Expand("configmaps", {"get", "list", "watch", "create", "update", "patch"}),
             Expand("leases.coordination.k8s.io", {"get", "create", "update"})});

  for (const char* ns :
       {"team-a", "team-b", "elsewhere", "orrery-all", "orrery-few", "orrery-plain"}) {
    CommandResult r = plane()->Kubectl("create namespace " + std::string(ns));
    ASSERT_TRUE(r.exit_code == 0 || r.output.find("AlreadyExists") != std::string::npos)
        << r.output;
  }
  auto install = [&](const std::string& release, const std::string& flags) {
    // Only the RBAC and the service account: what `helm install` would create.
    CommandResult r = RunCommand(Helm("template " + release + " " + kSource +
                                      "/helm/orrery --namespace " + release +
                                      " --show-only templates/rbac.yaml --show-only "
                                      "templates/serviceaccount.yaml " +
                                      flags) +
                                 " > " + plane()->dir() + "/" + release + ".yaml");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = plane()->Kubectl("apply -f " + plane()->dir() + "/" + release + ".yaml");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  };
  install("orrery-all", "");
  install("orrery-few", "--set 'watchNamespaces={team-a,team-b}'");
  const std::string all = "system:serviceaccount:orrery-all:orrery-all";
  const std::string few = "system:serviceaccount:orrery-few:orrery-few";

  // Every namespace: its jobs anywhere (but the operator itself skips kube-*).
  for (const char* ns : {"team-a", "elsewhere", "kube-system"}) {
    EXPECT_EQ(Grants(*plane(), all, ns), Union({cluster_read, job_rules})) << ns;
  }
  EXPECT_EQ(Grants(*plane(), all, "orrery-all"), Union({cluster_read, job_rules, own}));

  // A few namespaces: write access there and in its own namespace only; no
  // write access at all in kube-system or anywhere else.
  for (const char* ns : {"team-a", "team-b"}) {
    EXPECT_EQ(Grants(*plane(), few, ns), Union({cluster_read, job_rules})) << ns;
  }
  for (const char* ns : {"elsewhere", "kube-system", "default"}) {
    EXPECT_EQ(Grants(*plane(), few, ns), cluster_read) << ns;
  }
  EXPECT_EQ(Grants(*plane(), few, "orrery-few"), Union({cluster_read, own}));

  // Plain-HTTP metrics need no reviews; no leader election, no Lease; without
  // Kueue, nothing of Kueue's.
  install("orrery-plain",
          "--set metrics.secure=false --set leaderElection.enabled=false --set "
          "kueue.enabled=false --set 'watchNamespaces={team-a}'");
  EXPECT_EQ(
      Grants(*plane(), "system:serviceaccount:orrery-plain:orrery-plain", "kube-system"),
      Union({Expand("nodes", {"get", "list", "watch"}), Expand("pods", {"get", "list", "watch"})}));
}

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
  r = RunCommand(
      Helm("template x " + kSource + "/helm/orrery --set 'watchNamespaces={kube-system}'"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("watchNamespaces lists kube-system"), std::string::npos) << r.output;
  // extraArgs are flags: a bare word (say, a forgotten "--") is refused.
  r = RunCommand(Helm("template x " + kSource + "/helm/orrery --set 'extraArgs={device=cpu}'"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("extraArgs"), std::string::npos) << r.output;
  r = RunCommand(Helm("template x " + kSource +
                      "/helm/orrery --set 'extraArgs={--device=cpu}' --show-only "
                      "templates/deployment.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("- \"--device=cpu\""), std::string::npos) << r.output;
  r = RunCommand(Helm("template x " + kSource +
                      "/helm/orrery --set metrics.secure=false --set metrics.certSecret=tls"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("metrics.certSecret is set but metrics.secure is false"),
            std::string::npos)
      << r.output;
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
  for (const char* allowed :
       {"list modelselectionjobs.orrery.dev",
        "update modelselectionjobs.orrery.dev --subresource=status", "create pods", "delete pods",
        "watch pods", "create services", "list nodes", "create events.events.k8s.io"}) {
    EXPECT_EQ(CanI(std::string(allowed) + " -A"), "yes") << allowed;
  }
  EXPECT_EQ(CanI("update leases.coordination.k8s.io -n orrery-system"), "yes");
  EXPECT_EQ(CanI("update configmaps -n orrery-system"), "yes");  // the profile cache
  EXPECT_EQ(CanI("update configmaps -n default"), "no");
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
