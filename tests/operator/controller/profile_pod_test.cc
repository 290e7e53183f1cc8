#include "operator/controller/profile_pod.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "operator/controller/names.h"
#include "tests/operator/controller/pod_security.h"
#include "tests/operator/controller/test_objects.h"

namespace orrery::controller {
namespace {

using testing::LoadJob;
using testing::MakePod;

// What worker/profile writes to the termination message path.
const char* kDocument =
    R"({"event":"profile","world_size":2,"global_batch":16,"samples_per_s":1250.5,)"
    R"("step_time_s":{"median":0.0128,"p90":0.0141},)"
    R"("peak_memory_bytes":{"device_parameters":4096}})";

class ProfilePodTest : public ::testing::Test {
 protected:
  void SetUp() override { loaded_ = LoadJob(); }
  ProfileRequest Request(int gpus = 2) {
    ProfileRequest r;
    r.job = &loaded_.job;
    r.task = &loaded_.tasks[0];
    r.template_ = api::Template::kDdp;
    r.gpus = gpus;
    return r;
  }
  api::LoadedJob loaded_;
};

TEST_F(ProfilePodTest, KeyIsTheCacheKey) {
  contract::ProfileEntry k = ProfileKey(Request());
  EXPECT_EQ(k.signature, engine::ModelSignature(loaded_.tasks[0].task));
  EXPECT_EQ(k.template_name, "ddp");
  EXPECT_EQ(k.gpus, 2);
  EXPECT_EQ(k.batch_size, 16);  // the task's own batch
  EXPECT_EQ(k.device, "cuda");
}

TEST_F(ProfilePodTest, GangRunsTheProfilerWithLabelsAndADeadline) {
  auto g = BuildProfileGang(Request());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->key_hash, ProfileKeyHash(g->key.Key()));
  ASSERT_EQ(g->pods.size(), 2u);
  engine::LaunchConfig launch;
  launch.template_name = "ddp";
  launch.gpus = 2;
  launch.batch_size = 16;
  launch.device = "cuda";  // the request's backend is nccl: the trial runs on the GPUs
  std::vector<std::string> want = {"profile"};
  for (const auto& f :
       engine::ProfileFlags(loaded_.tasks[0], launch, loaded_.job.spec.profiling.trial_steps)) {
    want.push_back(f);
  }
  for (const Json& pod : g->pods) {
    EXPECT_EQ(pod["metadata"]["labels"][kProfileLabel], g->key_hash);
    EXPECT_FALSE(pod["metadata"]["labels"].contains(kGangLabel));  // not a training gang
    EXPECT_EQ(pod["spec"]["containers"][0]["args"].get<std::vector<std::string>>(), want);
    EXPECT_EQ(pod["spec"]["activeDeadlineSeconds"], 900);
    EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
    EXPECT_FALSE(pod["spec"].contains("affinity"));  // no placement: the scheduler's choice
    EXPECT_EQ(testing::RestrictedViolations(pod), std::vector<std::string>{});
    EXPECT_TRUE(IsDns1035Label(pod["metadata"]["name"].get<std::string>()));
  }
  EXPECT_EQ(g->service["spec"]["selector"][kProfileLabel], g->key_hash);
  auto again = BuildProfileGang(Request());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pods, g->pods);
  auto other = BuildProfileGang(Request(4));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->pods[0]["metadata"]["name"], g->pods[0]["metadata"]["name"]);
  EXPECT_NE(other->service_name, g->service_name);
}

TEST_F(ProfilePodTest, ProfilesMountTheModelButNotTheOutput) {
  api::LoadedJob tune = LoadJob(testing::kFineTuneJobYaml);
  ProfileRequest r = Request(1);
  r.job = &tune.job;
  r.task = &tune.tasks[0];
  auto g = BuildProfileGang(r);
  ASSERT_TRUE(g.ok()) << g.status();
  const Json& pod = g->pods[0];
  bool model = false, output = false;
  for (const Json& v : pod["spec"]["volumes"]) {
    model |= v["name"] == "model" && v["persistentVolumeClaim"]["readOnly"] == true;
    output |= v["name"] == "output";
  }
  EXPECT_TRUE(model) << pod.dump(2);
  EXPECT_FALSE(output);
  EXPECT_EQ(testing::RestrictedViolations(pod), std::vector<std::string>{});
  const Json& args = pod["spec"]["containers"][0]["args"];
  EXPECT_NE(std::find(args.begin(), args.end(), "--lora-rank=4"), args.end());
  for (const Json& a : args)
    EXPECT_EQ(a.get<std::string>().rfind("--export", 0), std::string::npos);
  // The cache key holds the model and what fine-tuning trains.
  EXPECT_EQ(g->key.signature, "hf-/models/llama-3.2-1b@models-s512-lora4-q_proj,v_proj/tokens/b8");
}

TEST_F(ProfilePodTest, SucceededPodIsAMeasurement) {
  auto g = BuildProfileGang(Request());
  ASSERT_TRUE(g.ok());
  Json pod = MakePod(g->pods[0]).Phase("Succeeded").Terminated("Completed", 0, kDocument);
  auto o = ParseProfilePod(pod);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->state, ProfileOutcome::State::kMeasured);
  EXPECT_EQ(o->entry.Key(), g->key.Key());
  EXPECT_DOUBLE_EQ(o->entry.samples_per_s, 1250.5);
  EXPECT_DOUBLE_EQ(o->entry.step_time_s, 0.0128);
  EXPECT_DOUBLE_EQ(o->entry.step_time_p90_s, 0.0141);
  EXPECT_DOUBLE_EQ(o->entry.peak_memory_bytes, 4096);
  EXPECT_EQ(o->entry.measured_at, "2026-01-02T03:04:05Z");
}

TEST_F(ProfilePodTest, FailuresAreInfeasibleWithTheirReason) {
  auto g = BuildProfileGang(Request());
  ASSERT_TRUE(g.ok());
  auto oom = ParseProfilePod(MakePod(g->pods[0]).Phase("Failed").Terminated("OOMKilled", 137));
  ASSERT_TRUE(oom.ok()) << oom.status();
  EXPECT_EQ(oom->state, ProfileOutcome::State::kInfeasible);
  EXPECT_EQ(oom->reason, "OOMKilled");
  EXPECT_EQ(oom->entry.Key(), g->key.Key());

  auto crash = ParseProfilePod(
      MakePod(g->pods[0]).Phase("Failed").Terminated("Error", 1, "orrery-worker: bad shape"));
  ASSERT_TRUE(crash.ok());
  EXPECT_EQ(crash->reason, "Error");
  EXPECT_NE(crash->message.find("exit code 1"), std::string::npos) << crash->message;
  EXPECT_NE(crash->message.find("bad shape"), std::string::npos) << crash->message;

  auto late = ParseProfilePod(MakePod(g->pods[0]).Phase("Failed").Reason("DeadlineExceeded"));
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->reason, "DeadlineExceeded");
}

TEST_F(ProfilePodTest, RunningAndBrokenPods) {
  auto g = BuildProfileGang(Request());
  ASSERT_TRUE(g.ok());
  auto running = ParseProfilePod(MakePod(g->pods[0]).Phase("Running"));
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->state, ProfileOutcome::State::kRunning);
  // Succeeded without a document: a bug to surface, not an infeasible config.
  EXPECT_FALSE(
      ParseProfilePod(MakePod(g->pods[0]).Phase("Succeeded").Terminated("Completed", 0, "hi"))
          .ok());
  // A document for other ranks than asked.
  std::string wrong = kDocument;
  wrong.replace(wrong.find("\"world_size\":2"), 14, "\"world_size\":8");
  EXPECT_FALSE(
      ParseProfilePod(MakePod(g->pods[0]).Phase("Succeeded").Terminated("Completed", 0, wrong))
          .ok());
  Json foreign = g->pods[0];
  foreign["metadata"]["annotations"].erase(kProfileEntryAnnotation);
  EXPECT_FALSE(ParseProfilePod(foreign).ok());
}

TEST_F(ProfilePodTest, GangOutcome) {
  auto g = BuildProfileGang(Request());
  ASSERT_TRUE(g.ok());
  Json done0 = MakePod(g->pods[0]).Phase("Succeeded").Terminated("Completed", 0, kDocument);
  Json done1 = MakePod(g->pods[1]).Phase("Succeeded").Terminated("Completed", 0, kDocument);
  Json run1 = MakePod(g->pods[1]).Phase("Running");
  Json oom1 = MakePod(g->pods[1]).Phase("Failed").Terminated("OOMKilled", 137);
  auto both = ParseProfileGang({done1, done0});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->state, ProfileOutcome::State::kMeasured);
  auto waiting = ParseProfileGang({MakePod(g->pods[0]).Phase("Running"), run1});
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->state, ProfileOutcome::State::kRunning);
  auto failed = ParseProfileGang({done0, oom1});
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state, ProfileOutcome::State::kInfeasible);
  EXPECT_EQ(failed->reason, "OOMKilled");
  EXPECT_EQ(failed->message.rfind("rank 1:", 0), 0u) << failed->message;
  // Only rank 0 writes the document (the worker's other ranks print nothing):
  // a gang whose other ranks succeeded with empty messages is measured.
  Json quiet1 = MakePod(g->pods[1]).Phase("Succeeded").Terminated("Completed", 0, "");
  auto measured = ParseProfileGang({quiet1, done0});
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_EQ(measured->state, ProfileOutcome::State::kMeasured);
  auto rank0_running = ParseProfileGang({quiet1, MakePod(g->pods[0]).Phase("Running")});
  ASSERT_TRUE(rank0_running.ok()) << rank0_running.status();
  EXPECT_EQ(rank0_running->state, ProfileOutcome::State::kRunning);
  EXPECT_FALSE(ParseProfileGang({}).ok());
}

TEST_F(ProfilePodTest, RejectsBadRequests) {
  EXPECT_FALSE(BuildProfileGang(Request(0)).ok());
  ProfileRequest r = Request(2);
  r.placement = {"n1"};
  EXPECT_FALSE(BuildProfileGang(r).ok());
  r.placement = {"n1", "n2"};
  auto placed = BuildProfileGang(r);
  ASSERT_TRUE(placed.ok());
  EXPECT_TRUE(placed->pods[1]["spec"].contains("affinity"));
}

}  // namespace
}  // namespace orrery::controller
