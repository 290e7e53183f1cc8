// The controller's objects on a real API server: the ModelSelectionJob CRD is
// installed and a job created; then a gang's Service and pods and a profile gang
// are created with server-side dry run (strict field validation) in a namespace
// that enforces the restricted Pod Security profile, so the server's schema and
// its Pod Security admission both check every object. A real create of a rebuilt
// pod then answers AlreadyExists: a restarted operator cannot duplicate it.
#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/controller/gang.h"
#include "operator/controller/profile_configmap.h"
#include "operator/controller/profile_pod.h"
#include "operator/controller/status.h"
#include "operator/kube/api_error.h"
#include "tests/operator/controller/plane_setup.h"
#include "tests/operator/controller/test_objects.h"
#include "tests/operator/kube/test_util.h"
#include "tests/testing/control_plane.h"

namespace orrery::controller {
namespace {

using orrery::testing::CommandResult;
const char* kNamespace = "ctl-objects";

kube::Resource Jobs() { return {"orrery.dev", "v1alpha1", "modelselectionjobs", true}; }
kube::Resource Services() { return {"", "v1", "services", true}; }

class ObjectsApiServerTest : public orrery::testing::ControlPlaneTest {
 protected:
  static void SetUpTestSuite() {
    ControlPlaneTest::SetUpTestSuite();
    if (!plane()) return;
    if (!testutil::InstallJobCrd(*plane(), &setup_output_)) return;
    CommandResult r = plane()->Kubectl(std::string("create namespace ") + kNamespace);
    setup_output_ += r.output;
    r = plane()->Kubectl(std::string("label namespace ") + kNamespace +
                         " pod-security.kubernetes.io/enforce=restricted"
                         " pod-security.kubernetes.io/enforce-version=latest --overwrite");
    setup_output_ += r.output;
    ready_ = r.exit_code == 0;
  }
  void SetUp() override {
    ControlPlaneTest::SetUp();
    ASSERT_TRUE(ready_) << setup_output_;
    client_ = kube::testutil::PlaneClient(*plane());
    ASSERT_NE(client_, nullptr);
    loaded_ = testing::LoadJob();
    loaded_.job.metadata.namespace_ = kNamespace;
    loaded_.job.metadata.uid.clear();
    loaded_.job.metadata.generation = 0;
    Json body = api::EncodeJob(loaded_.job);
    body.erase("status");
    auto created = client_->Create(Jobs(), kNamespace, kube::Object::parse(body.dump()));
    if (!created.ok() && kube::IsAlreadyExists(created.status())) {
      created = client_->Get(Jobs(), kNamespace, loaded_.job.metadata.name);
    }
    ASSERT_TRUE(created.ok()) << created.status();
    loaded_.job.metadata.uid = (*created)["metadata"]["uid"].get<std::string>();
    ASSERT_FALSE(loaded_.job.metadata.uid.empty());
  }

  // Creates `objects` as one List with server-side dry run and strict validation.
  static CommandResult DryRunCreate(const std::vector<Json>& objects) {
    Json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", objects}};
    return plane()->Kubectl("create --dry-run=server --validate=strict -o name -f -", list.dump());
  }

  static bool ready_;
  static std::string setup_output_;
  std::unique_ptr<kube::RestClient> client_;
  api::LoadedJob loaded_;
};
bool ObjectsApiServerTest::ready_ = false;
std::string ObjectsApiServerTest::setup_output_;

TEST_F(ObjectsApiServerTest, GangServiceAndPodsAreAccepted) {
  for (size_t task = 0; task < loaded_.tasks.size(); ++task) {
    GangRequest r;
    r.job = &loaded_.job;
    r.task = &loaded_.tasks[task];
    r.config.template_ = api::Template::kDdp;
    r.config.gpus = 3;
    r.config.nodes = 2;
    r.placement = {"gpu-node-a", "gpu-node-a", "gpu-node-b"};
    r.generation = static_cast<int>(task);
    auto gang = BuildGang(r);
    ASSERT_TRUE(gang.ok()) << gang.status();
    std::vector<Json> objects = {gang->service};
    for (const Json& p : gang->pods) objects.push_back(p);
    CommandResult out = DryRunCreate(objects);
    EXPECT_EQ(out.exit_code, 0) << out.output;
    EXPECT_NE(out.output.find("service/" + gang->service_name), std::string::npos) << out.output;
    for (const Json& p : gang->pods) {
      EXPECT_NE(out.output.find("pod/" + p["metadata"]["name"].get<std::string>()),
                std::string::npos)
          << out.output;
    }
    EXPECT_EQ(out.output.find("Warning"), std::string::npos) << out.output;
  }
}

TEST_F(ObjectsApiServerTest, PodWithoutAClaimIsAcceptedToo) {
  loaded_.job.spec.checkpoints.claim_name.clear();
  GangRequest r;
  r.job = &loaded_.job;
  r.task = &loaded_.tasks[0];
  r.placement = {"gpu-node-a"};
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok()) << gang.status();
  CommandResult out = DryRunCreate({gang->service, gang->pods[0]});
  EXPECT_EQ(out.exit_code, 0) << out.output;
}

TEST_F(ObjectsApiServerTest, ProfileGangIsAccepted) {
  ProfileRequest r;
  r.job = &loaded_.job;
  r.task = &loaded_.tasks[2];
  r.gpus = 2;
  r.template_ = api::Template::kPipeline;
  auto g = BuildProfileGang(r);
  ASSERT_TRUE(g.ok()) << g.status();
  CommandResult out = DryRunCreate({g->service, g->pods[0], g->pods[1]});
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("pod/" + g->pods[1]["metadata"]["name"].get<std::string>()),
            std::string::npos)
      << out.output;
}

// Issue 19: a fine-tuning job passes the CRD's schema and CEL rules, its pods
// with the model claim (read-only) and the output claim pass strict validation
// and the restricted profile, and the CRD refuses what validation.cc refuses.
TEST_F(ObjectsApiServerTest, FineTuneJobAndItsPodsAreAccepted) {
  api::LoadedJob tune = testing::LoadJob(testing::kFineTuneJobYaml);
  tune.job.metadata.namespace_ = kNamespace;
  tune.job.metadata.uid.clear();
  tune.job.metadata.generation = 0;
  Json body = api::EncodeJob(tune.job);
  body.erase("status");
  auto created = client_->Create(Jobs(), kNamespace, kube::Object::parse(body.dump()));
  if (!created.ok() && kube::IsAlreadyExists(created.status())) {
    created = client_->Get(Jobs(), kNamespace, tune.job.metadata.name);
  }
  ASSERT_TRUE(created.ok()) << created.status();
  tune.job.metadata.uid = (*created)["metadata"]["uid"].get<std::string>();
  GangRequest r;
  r.job = &tune.job;
  r.task = &tune.tasks[1];
  r.config.gpus = 2;
  r.config.nodes = 2;
  r.placement = {"gpu-node-a", "gpu-node-b"};
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok()) << gang.status();
  ProfileRequest pr;
  pr.job = &tune.job;
  pr.task = &tune.tasks[0];
  auto profile = BuildProfileGang(pr);
  ASSERT_TRUE(profile.ok()) << profile.status();
  CommandResult out = DryRunCreate(
      {gang->service, gang->pods[0], gang->pods[1], profile->service, profile->pods[0]});
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.output.find("Warning"), std::string::npos) << out.output;

  // The CEL rules: LoRA with frozen blocks, and fine-tuning an MLP.
  Json bad = body;
  bad["metadata"]["name"] = "tune-bad";
  bad["spec"]["tasks"][0]["fineTuning"]["freezeBlocks"] = 2;
  bad["spec"]["tasks"][1]["model"] = {
      {"mlp", {{"layers", 1}, {"hidden", 4}, {"inputs", 4}, {"outputs", 2}}}};
  auto refused = client_->Create(Jobs(), kNamespace, kube::Object::parse(bad.dump()));
  ASSERT_FALSE(refused.ok());
  const std::string why = refused.status().ToString();
  EXPECT_NE(why.find("has no effect with lora"), std::string::npos) << why;
  EXPECT_NE(why.find("applies only to transformer models"), std::string::npos) << why;
}

TEST_F(ObjectsApiServerTest, RestrictedAdmissionRefusesAWeakenedPod) {
  // The namespace really enforces the profile: the same pod with privilege
  // escalation allowed is refused, so the acceptances above mean something.
  GangRequest r;
  r.job = &loaded_.job;
  r.task = &loaded_.tasks[0];
  r.placement = {"gpu-node-a"};
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok());
  Json pod = gang->pods[0];
  pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = true;
  CommandResult out = DryRunCreate({pod});
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_NE(out.output.find("allowPrivilegeEscalation"), std::string::npos) << out.output;
}

TEST_F(ObjectsApiServerTest, ProfileConfigMapIsAccepted) {
  ProfileTable table;
  CachedProfile p;
  p.entry = {"gpt-l2/synthetic/b8", "ddp", 2, 8, "cuda", 100, 0.08, 0.09, 1e9,
             "2026-01-01T00:00:00Z"};
  MergeProfile(&table, p);
  Json cm = EncodeProfileConfigMap(table, kNamespace);
  auto created = client_->Create(kube::ConfigMaps(), kNamespace, kube::Object::parse(cm.dump()));
  if (!created.ok() && kube::IsAlreadyExists(created.status())) {
    created = client_->Get(kube::ConfigMaps(), kNamespace, kProfileConfigMapName);
  }
  ASSERT_TRUE(created.ok()) << created.status();
  std::vector<api::FieldError> errors;
  ProfileTable back = DecodeProfileConfigMap(Json::parse(created->dump()), &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back, table);
}

TEST_F(ObjectsApiServerTest, ARebuiltPodAlreadyExists) {
  GangRequest r;
  r.job = &loaded_.job;
  r.task = &loaded_.tasks[1];
  r.placement = {"gpu-node-a"};
  r.generation = 7;
  auto first = BuildGang(r);
  ASSERT_TRUE(first.ok());
  auto svc = client_->Create(Services(), kNamespace, kube::Object::parse(first->service.dump()));
  ASSERT_TRUE(svc.ok() || kube::IsAlreadyExists(svc.status())) << svc.status();
  auto pod = client_->Create(kube::Pods(), kNamespace, kube::Object::parse(first->pods[0].dump()));
  ASSERT_TRUE(pod.ok() || kube::IsAlreadyExists(pod.status())) << pod.status();
  // A restarted operator builds the same gang and its create is refused.
  auto again = BuildGang(r);
  ASSERT_TRUE(again.ok());
  auto dup = client_->Create(kube::Pods(), kNamespace, kube::Object::parse(again->pods[0].dump()));
  EXPECT_TRUE(kube::IsAlreadyExists(dup.status())) << dup.status();
  auto stored = client_->Get(kube::Pods(), kNamespace, again->pods[0]["metadata"]["name"]);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ((*stored)["metadata"]["ownerReferences"][0]["uid"], loaded_.job.metadata.uid);
}

TEST_F(ObjectsApiServerTest, DerivedStatusIsStoredThroughTheStatusSubresource) {
  GangRequest r;
  r.job = &loaded_.job;
  r.task = &loaded_.tasks[0];
  r.config.gpus = 2;
  r.config.nodes = 0;
  r.placement = {"gpu-node-a", "gpu-node-b"};
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok());
  std::vector<Json> pods = {testing::MakePod(gang->pods[0]).Phase("Running").Node("gpu-node-a"),
                            testing::MakePod(gang->pods[1]).Phase("Running").Node("gpu-node-b")};
  auto observed = ObserveTasks(pods, {"gpu-node-b"});
  auto current = client_->Get(Jobs(), kNamespace, loaded_.job.metadata.name);
  ASSERT_TRUE(current.ok()) << current.status();
  loaded_.job.metadata.resource_version = (*current)["metadata"]["resourceVersion"];
  loaded_.job.metadata.generation = (*current)["metadata"]["generation"];
  StatusInput in;
  in.job = &loaded_.job;
  in.tasks = &loaded_.tasks;
  in.observed = &observed;
  in.now = "2026-01-01T00:00:00Z";
  api::ModelSelectionJobStatus status = BuildJobStatus(in);
  auto stored = client_->UpdateStatus(
      Jobs(), kNamespace, kube::Object::parse(StatusUpdateObject(loaded_.job, status).dump()));
  ASSERT_TRUE(stored.ok()) << stored.status();
  std::vector<api::FieldError> errors;
  api::ModelSelectionJobStatus back;
  api::DecodeStatus(Json::parse((*stored)["status"].dump()), "status", &back, &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back, status);
  EXPECT_EQ(back.tasks[0].state, api::TaskState::kRescaling);
}

}  // namespace
}  // namespace orrery::controller
