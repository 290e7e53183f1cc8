#include "operator/controller/gang.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "operator/controller/names.h"
#include "operator/engine/profile_configs.h"
#include "tests/operator/controller/pod_security.h"
#include "tests/operator/controller/test_objects.h"

namespace orrery::controller {
namespace {

using testing::LoadJob;
using testing::RestrictedViolations;

class GangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = LoadJob();
    ASSERT_EQ(loaded_.tasks.size(), 3u);
  }
  GangRequest Request(int gpus, std::vector<std::string> placement, int generation = 0,
                      size_t task = 0) {
    GangRequest r;
    r.job = &loaded_.job;
    r.task = &loaded_.tasks[task];
    r.config.template_ = api::Template::kFsdp;
    r.config.gpus = gpus;
    r.config.nodes =
        static_cast<int>(std::set<std::string>(placement.begin(), placement.end()).size());
    r.config.batch_size = 32;
    r.placement = std::move(placement);
    r.generation = generation;
    return r;
  }
  static std::string EnvOf(const Json& pod, const std::string& name) {
    for (const Json& e : pod["spec"]["containers"][0]["env"]) {
      if (e["name"] == name) return e["value"];
    }
    return "<unset>";
  }
  api::LoadedJob loaded_;
};

TEST_F(GangTest, ServiceIsHeadlessAndSelectsTheGang) {
  auto gang = BuildGang(Request(2, {"n1", "n2"}));
  ASSERT_TRUE(gang.ok()) << gang.status();
  const Json& svc = gang->service;
  EXPECT_EQ(svc["kind"], "Service");
  EXPECT_EQ(svc["metadata"]["name"], gang->service_name);
  EXPECT_EQ(svc["metadata"]["namespace"], "team-a");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], kRendezvousPort);
  Json sel = svc["spec"]["selector"];
  EXPECT_EQ(sel[kGangLabel], "mlp-lr-1e-3-g0");
  EXPECT_EQ(sel[kJobLabel], "sweep");
  // Every pod carries every selector label with the same value.
  for (const Json& pod : gang->pods) {
    for (const auto& [k, val] : sel.items()) EXPECT_EQ(pod["metadata"]["labels"][k], val) << k;
  }
}

TEST_F(GangTest, OnePodPerRankWithRendezvousEnvironment) {
  auto gang = BuildGang(Request(3, {"n1", "n1", "n2"}));
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_EQ(gang->pods.size(), 3u);
  std::string rank0 = gang->pods[0]["metadata"]["name"];
  std::string master = rank0 + "." + gang->service_name + ".team-a.svc";
  for (int rank = 0; rank < 3; ++rank) {
    const Json& pod = gang->pods[static_cast<size_t>(rank)];
    EXPECT_EQ(pod["metadata"]["labels"][kRankLabel], std::to_string(rank));
    EXPECT_EQ(pod["metadata"]["labels"][kManagedByLabel], "orrery");
    EXPECT_EQ(pod["metadata"]["labels"][kTaskLabel], "mlp-lr-1e-3");
    EXPECT_EQ(EnvOf(pod, "RANK"), std::to_string(rank));
    EXPECT_EQ(EnvOf(pod, "WORLD_SIZE"), "3");
    EXPECT_EQ(EnvOf(pod, "MASTER_ADDR"), master);
    EXPECT_EQ(EnvOf(pod, "MASTER_PORT"), "29500");
    EXPECT_EQ(EnvOf(pod, "ORRERY_BACKEND"), "nccl");
    EXPECT_EQ(EnvOf(pod, "ORRERY_TERMINATION_MESSAGE_PATH"), kTerminationMessagePath);
    // The DNS name MASTER_ADDR uses exists because hostname/subdomain are set.
    EXPECT_EQ(pod["spec"]["hostname"], pod["metadata"]["name"]);
    EXPECT_EQ(pod["spec"]["subdomain"], gang->service_name);
    EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  }
}

TEST_F(GangTest, ArgsAreTheEngineTrainFlags) {
  GangRequest r = Request(2, {"n1", "n2"});
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok()) << gang.status();
  engine::LaunchConfig launch;
  launch.template_name = "fsdp";
  launch.gpus = 2;
  launch.batch_size = 32;
  launch.checkpoint_dir = "/ckpt/sweep-6f1d2c3a-0000-4000-8000-000000000001/mlp-lr-1e-3";
  launch.checkpoint_every = loaded_.job.spec.checkpoints.interval_steps;
  launch.keep = loaded_.job.spec.checkpoints.keep;
  launch.device = "cuda";  // the default backend is nccl: the ranks compute on their GPU
  std::vector<std::string> want = {"train"};
  for (const auto& f : engine::TrainFlags(loaded_.tasks[0], launch)) want.push_back(f);
  EXPECT_EQ(gang->pods[1]["spec"]["containers"][0]["args"].get<std::vector<std::string>>(), want);
}

TEST_F(GangTest, TheDeviceFollowsTheBackend) {
  auto device_args = [&](const std::string& backend) {
    GangRequest r = Request(2, {"n1", "n2"});
    r.options.backend = backend;
    auto gang = BuildGang(r);
    EXPECT_TRUE(gang.ok()) << gang.status();
    std::vector<std::string> found;
    if (!gang.ok()) return found;
    for (const auto& pod : gang->pods) {
      for (const auto& a : pod["spec"]["containers"][0]["args"]) {
        if (a.get<std::string>().rfind("--device", 0) == 0) found.push_back(a);
      }
      for (const auto& e : pod["spec"]["containers"][0]["env"]) {
        if (e["name"] == "ORRERY_BACKEND") {
          EXPECT_EQ(e["value"], backend);
        }
      }
    }
    return found;
  };
  EXPECT_EQ(device_args("nccl"), (std::vector<std::string>{"--device=cuda", "--device=cuda"}));
  EXPECT_EQ(device_args("gloo"), (std::vector<std::string>{"--device=cpu", "--device=cpu"}));
}

TEST_F(GangTest, OwnerReferenceIsTheControllingJob) {
  auto gang = BuildGang(Request(1, {"n1"}));
  ASSERT_TRUE(gang.ok()) << gang.status();
  for (const Json* obj : {&gang->service, &gang->pods[0]}) {
    const Json& refs = (*obj)["metadata"]["ownerReferences"];
    ASSERT_EQ(refs.size(), 1u);
    EXPECT_EQ(refs[0]["apiVersion"], "orrery.dev/v1alpha1");
    EXPECT_EQ(refs[0]["kind"], "ModelSelectionJob");
    EXPECT_EQ(refs[0]["name"], "sweep");
    EXPECT_EQ(refs[0]["uid"], loaded_.job.metadata.uid);
    EXPECT_EQ(refs[0]["controller"], true);
    EXPECT_EQ(refs[0]["blockOwnerDeletion"], true);
  }
}

TEST_F(GangTest, PlacementSchedulingAndGpus) {
  auto gang = BuildGang(Request(2, {"gpu-a", "gpu-b"}));
  ASSERT_TRUE(gang.ok()) << gang.status();
  const Json& spec = gang->pods[1]["spec"];
  const Json& term =
      spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
          ["nodeSelectorTerms"][0]["matchFields"][0];
  EXPECT_EQ(term["key"], "metadata.name");
  EXPECT_EQ(term["operator"], "In");
  EXPECT_EQ(term["values"], Json::array({"gpu-b"}));
  EXPECT_EQ(gang->pods[1]["metadata"]["annotations"][kNodeAnnotation], "gpu-b");
  EXPECT_EQ(spec["nodeSelector"]["orrery.dev/pool"], "gpu");
  EXPECT_EQ(spec["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(spec["tolerations"][0]["operator"], "Exists");
  EXPECT_EQ(spec["tolerations"][0]["effect"], "NoSchedule");
  EXPECT_FALSE(spec["tolerations"][0].contains("value"));
  const Json& res = spec["containers"][0]["resources"];
  EXPECT_EQ(res["limits"]["nvidia.com/gpu"], 1);
  EXPECT_EQ(res["requests"]["nvidia.com/gpu"], 1);
  EXPECT_EQ(spec["containers"][0]["image"], loaded_.job.spec.resources.image);
}

TEST_F(GangTest, CheckpointVolumeFromTheClaim) {
  auto gang = BuildGang(Request(1, {"n1"}));
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_TRUE(gang->warnings.empty());
  const Json& spec = gang->pods[0]["spec"];
  bool mounted = false, claimed = false;
  for (const Json& m : spec["containers"][0]["volumeMounts"]) {
    if (m["name"] == "checkpoints") mounted = m["mountPath"] == "/ckpt";
  }
  for (const Json& v : spec["volumes"]) {
    if (v["name"] == "checkpoints")
      claimed = v["persistentVolumeClaim"]["claimName"] == "sweep-ckpt";
  }
  EXPECT_TRUE(mounted);
  EXPECT_TRUE(claimed);
  EXPECT_EQ(CheckpointDir(loaded_.job, "mlp-lr-1e-3"),
            "/ckpt/sweep-6f1d2c3a-0000-4000-8000-000000000001/mlp-lr-1e-3");
}

// A job deleted and created again under the same name has a new uid: its tasks
// start fresh in a folder of their own instead of resuming the old job's state.
TEST_F(GangTest, CheckpointsAreKeyedByTheJobsUid) {
  EXPECT_EQ(JobCheckpointDir(loaded_.job), "/ckpt/sweep-6f1d2c3a-0000-4000-8000-000000000001");
  api::ModelSelectionJob recreated = loaded_.job;
  recreated.metadata.uid = "0b9e7d2c-1111-4000-8000-000000000002";
  EXPECT_NE(CheckpointDir(recreated, "mlp-lr-1e-3"), CheckpointDir(loaded_.job, "mlp-lr-1e-3"));
  EXPECT_EQ(CheckpointDir(recreated, "mlp-lr-1e-3"),
            "/ckpt/sweep-0b9e7d2c-1111-4000-8000-000000000002/mlp-lr-1e-3");
  // A trailing slash on the volume path makes no empty segment.
  recreated.spec.checkpoints.path = "/ckpt/";
  EXPECT_EQ(JobCheckpointDir(recreated), "/ckpt/sweep-0b9e7d2c-1111-4000-8000-000000000002");

  // Every rank of every generation is told the same folder.
  for (int generation : {0, 3}) {
    auto gang = BuildGang(Request(2, {"n1", "n2"}, generation));
    ASSERT_TRUE(gang.ok()) << gang.status();
    for (const Json& pod : gang->pods) {
      std::vector<std::string> args = pod["spec"]["containers"][0]["args"];
      EXPECT_NE(std::find(args.begin(), args.end(),
                          "--checkpoint-dir=" + CheckpointDir(loaded_.job, "mlp-lr-1e-3")),
                args.end())
          << pod["metadata"]["name"];
    }
  }
}

TEST_F(GangTest, NoClaimMeansEmptyDirAndAWarning) {
  loaded_.job.spec.checkpoints.claim_name.clear();
  auto gang = BuildGang(Request(1, {"n1"}));
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_EQ(gang->warnings.size(), 1u);
  const Json& pod = gang->pods[0];
  EXPECT_TRUE(pod["metadata"]["annotations"].contains(kCheckpointWarningAnnotation));
  bool empty_dir = false;
  for (const Json& v : pod["spec"]["volumes"]) {
    if (v["name"] == "checkpoints") empty_dir = v.contains("emptyDir");
  }
  EXPECT_TRUE(empty_dir);
}

TEST_F(GangTest, EveryPodPassesTheRestrictedProfile) {
  for (size_t task = 0; task < loaded_.tasks.size(); ++task) {
    auto gang = BuildGang(Request(2, {"n1", "n2"}, 1, task));
    ASSERT_TRUE(gang.ok()) << gang.status();
    for (const Json& pod : gang->pods) {
      EXPECT_EQ(RestrictedViolations(pod), std::vector<std::string>{}) << pod.dump(2);
      const Json& c = pod["spec"]["containers"][0];
      EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);
      bool tmp = false;
      for (const Json& m : c["volumeMounts"]) tmp |= m["mountPath"] == "/tmp";
      EXPECT_TRUE(tmp) << "a read-only root needs a writable /tmp";
      EXPECT_EQ(c["terminationMessagePolicy"], "FallbackToLogsOnError");
      EXPECT_GE(pod["spec"]["terminationGracePeriodSeconds"].get<int>(), 60);
    }
  }
}

// The volume and mount named `name` in a pod, or nulls.
std::pair<Json, Json> VolumeAndMount(const Json& pod, const std::string& name) {
  std::pair<Json, Json> out;
  for (const Json& v : pod["spec"]["volumes"])
    if (v["name"] == name) out.first = v;
  for (const Json& m : pod["spec"]["containers"][0]["volumeMounts"])
    if (m["name"] == name) out.second = m;
  return out;
}

TEST_F(GangTest, TheModelClaimIsMountedReadOnlyAndTheOutputClaimReadWrite) {
  api::LoadedJob tune = LoadJob(testing::kFineTuneJobYaml);
  ASSERT_EQ(tune.tasks.size(), 3u);
  GangRequest r = Request(2, {"n1", "n2"});
  r.job = &tune.job;
  r.task = &tune.tasks[1];  // llama-lora-8
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok()) << gang.status();
  for (const Json& pod : gang->pods) {
    auto [model, model_mount] = VolumeAndMount(pod, "model");
    ASSERT_FALSE(model.is_null()) << pod.dump(2);
    EXPECT_EQ(model["persistentVolumeClaim"]["claimName"], "models");
    EXPECT_EQ(model["persistentVolumeClaim"]["readOnly"], true);
    EXPECT_EQ(model_mount["mountPath"], "/models");
    EXPECT_EQ(model_mount["readOnly"], true);
    auto [output, output_mount] = VolumeAndMount(pod, "output");
    ASSERT_FALSE(output.is_null());
    EXPECT_EQ(output["persistentVolumeClaim"]["claimName"], "results");
    EXPECT_FALSE(output["persistentVolumeClaim"].contains("readOnly"));
    EXPECT_EQ(output_mount["mountPath"], "/outputs");
    EXPECT_FALSE(output_mount.value("readOnly", false));
    EXPECT_EQ(RestrictedViolations(pod), std::vector<std::string>{}) << pod.dump(2);
    const Json& args = pod["spec"]["containers"][0]["args"];
    auto has = [&](const std::string& flag) {
      return std::find(args.begin(), args.end(), flag) != args.end();
    };
    EXPECT_TRUE(has("--pretrained=/models/llama-3.2-1b"));
    EXPECT_TRUE(has("--lora-rank=8"));
    EXPECT_TRUE(has("--export-dir=/outputs/runs/llama-lora-8"));
    EXPECT_TRUE(has("--export-dtype=bfloat16"));
  }
  // A model in the image and an export under the checkpoint claim: no extra
  // volumes, only the checkpoint claim the export lands on.
  r.task = &tune.tasks[2];
  auto gpt2 = BuildGang(r);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_TRUE(VolumeAndMount(gpt2->pods[0], "model").first.is_null());
  EXPECT_TRUE(VolumeAndMount(gpt2->pods[0], "output").first.is_null());
  EXPECT_EQ(
      VolumeAndMount(gpt2->pods[0], "checkpoints").first["persistentVolumeClaim"]["claimName"],
      "tune-ckpt");
  // A job without models mounts nothing new.
  auto plain = BuildGang(Request(1, {"n1"}));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(VolumeAndMount(plain->pods[0], "model").first.is_null());
}

TEST_F(GangTest, ExportsMustLandOnAClaimInACluster) {
  api::LoadedJob tune = LoadJob(testing::kFineTuneJobYaml);
  EXPECT_TRUE(ClusterSpecErrors(tune.job, tune.tasks).empty());
  // Under the checkpoint path but with no claim behind it: an emptyDir.
  tune.job.spec.checkpoints.claim_name = "";
  auto errors = ClusterSpecErrors(tune.job, tune.tasks);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.tasks[1].output.path");
  EXPECT_NE(errors[0].message.find("\"/ckpt/models/gpt2\" is on no persistent volume"),
            std::string::npos)
      << errors[0].message;
  EXPECT_NE(errors[0].fix.find("set output.volume"), std::string::npos);
  // Without its volume the sweep's relative path is the worker's read-only
  // working directory: one error for the spec task, not one per variant.
  for (auto& e : tune.tasks) e.task.output->volume.reset();
  errors = ClusterSpecErrors(tune.job, tune.tasks);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].path, "spec.tasks[0].output.path");
}

TEST_F(GangTest, TheRestrictedCheckerCatchesViolations) {
  auto gang = BuildGang(Request(1, {"n1"}));
  ASSERT_TRUE(gang.ok());
  Json pod = gang->pods[0];
  pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = true;
  pod["spec"]["volumes"].push_back({{"name", "h"}, {"hostPath", {{"path", "/"}}}});
  pod["spec"]["hostNetwork"] = true;
  EXPECT_EQ(RestrictedViolations(pod).size(), 3u);
}

TEST_F(GangTest, NamesAreStableAndDistinctAcrossTasksRanksAndGenerations) {
  std::set<std::string> names;
  size_t objects = 0;
  for (size_t task = 0; task < loaded_.tasks.size(); ++task) {
    for (int gen = 0; gen < 2; ++gen) {
      auto a = BuildGang(Request(4, {"n1", "n1", "n2", "n2"}, gen, task));
      auto b = BuildGang(Request(4, {"n1", "n1", "n2", "n2"}, gen, task));
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->service, b->service);
      EXPECT_EQ(a->pods, b->pods);  // a restarted operator builds the same objects
      names.insert(a->service_name);
      ++objects;
      for (const Json& pod : a->pods) {
        std::string n = pod["metadata"]["name"];
        EXPECT_LE(n.size(), 63u);
        EXPECT_TRUE(IsDns1035Label(n)) << n;
        names.insert(n);
        ++objects;
      }
    }
  }
  EXPECT_EQ(names.size(), objects);
}

TEST_F(GangTest, RejectsInconsistentRequests) {
  EXPECT_FALSE(BuildGang(Request(2, {"n1"})).ok());      // placement size
  EXPECT_FALSE(BuildGang(Request(0, {})).ok());          // no ranks
  EXPECT_FALSE(BuildGang(Request(2, {"n1", ""})).ok());  // empty node
  GangRequest spans = Request(2, {"n1", "n2"});
  spans.config.nodes = 1;
  EXPECT_FALSE(BuildGang(spans).ok());
  GangRequest no_uid = Request(1, {"n1"});
  loaded_.job.metadata.uid.clear();
  EXPECT_FALSE(BuildGang(no_uid).ok());
}

TEST_F(GangTest, ConfigurationIsAnnotatedForARestartedOperator) {
  auto gang = BuildGang(Request(2, {"n1", "n2"}, 3));
  ASSERT_TRUE(gang.ok());
  const Json& ann = gang->pods[0]["metadata"]["annotations"];
  EXPECT_EQ(ann[kGenerationAnnotation], "3");
  EXPECT_EQ(ann[kWorldSizeAnnotation], "2");
  Json config = Json::parse(ann[kConfigAnnotation].get<std::string>());
  EXPECT_EQ(config["template"], "fsdp");
  EXPECT_EQ(config["gpus"], 2);
  EXPECT_EQ(config["nodes"], 2);
  EXPECT_EQ(config["batchSize"], 32);
  EXPECT_EQ(gang->pods[0]["metadata"]["labels"][kGangLabel], "mlp-lr-1e-3-g3");
}

TEST_F(GangTest, ElasticGangsTrainUntilTheirSampleBudgetAtAnyBatch) {
  const api::ExpandedTask& task = loaded_.tasks[0];
  const int64_t own = task.task.training.batch_size;
  const int64_t budget = engine::SampleBudget(task.task);
  auto budget_flags = [](const Gang& g) {
    std::vector<std::string> a;
    for (const Json& v : g.pods[0]["spec"]["containers"][0]["args"]) {
      const std::string arg = v;
      for (const char* f : {"--samples=", "--steps=", "--epochs="}) {
        if (arg.rfind(f, 0) == 0) a.push_back(arg);
      }
    }
    return a;
  };
  GangRequest r = Request(2, {"n1", "n2"});
  // Not elastic: the task's own step budget.
  r.config.batch_size = own;
  auto fixed = BuildGang(r);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(budget_flags(*fixed),
            std::vector<std::string>{"--steps=" + std::to_string(*task.task.training.steps)});
  // Elastic: the samples in all, at another batch and back at its own (where
  // its own step count would overrun the samples trained at the other one).
  loaded_.job.spec.elasticity.enabled = true;
  for (int64_t batch : {2 * own, own}) {
    r.config.batch_size = batch;
    auto gang = BuildGang(r);
    ASSERT_TRUE(gang.ok()) << gang.status();
    EXPECT_EQ(budget_flags(*gang), std::vector<std::string>{"--samples=" + std::to_string(budget)})
        << batch;
  }
}

}  // namespace
}  // namespace orrery::controller
