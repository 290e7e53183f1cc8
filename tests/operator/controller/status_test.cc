#include "operator/controller/status.h"

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/controller/gang.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_pod.h"
#include "tests/operator/controller/test_objects.h"

namespace orrery::controller {
namespace {

using testing::LoadJob;
using testing::MakePod;

class StatusTest : public ::testing::Test {
 protected:
  void SetUp() override { loaded_ = LoadJob(); }
  std::vector<Json> Gang(size_t task, int generation, std::vector<std::string> nodes,
                         const std::string& recompute = "") {
    GangRequest r;
    r.job = &loaded_.job;
    r.task = &loaded_.tasks[task];
    r.config.gpus = static_cast<int>(nodes.size());
    r.config.nodes = 0;
    r.config.batch_size = 16;
    r.config.recompute = recompute;
    r.placement = std::move(nodes);
    r.generation = generation;
    auto g = BuildGang(r);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? g->pods : std::vector<Json>{};
  }
  static Json Bound(const Json& pod, const std::string& phase) {
    return MakePod(pod).Phase(phase).Node(
        pod["metadata"]["annotations"]["orrery.dev/planned-node"]);
  }
  api::ModelSelectionJobStatus JobStatus(const std::map<std::string, TaskObservation>& observed,
                                         const std::string& now = "2026-01-01T00:00:00Z") {
    StatusInput in;
    in.job = &loaded_.job;
    in.tasks = &loaded_.tasks;
    in.observed = &observed;
    in.now = now;
    return BuildJobStatus(in);
  }
  api::LoadedJob loaded_;
};

TEST_F(StatusTest, GangPhases) {
  auto pods = Gang(0, 0, {"n1", "n2"});
  auto phase = [](const std::vector<Json>& p, const std::set<std::string>& lost = {}) {
    auto obs = ObserveTasks(p, lost);
    EXPECT_EQ(obs.size(), 1u);
    return obs.begin()->second.gang->phase;
  };
  EXPECT_EQ(phase({Bound(pods[0], "Pending"), Bound(pods[1], "Running")}), GangPhase::kPending);
  EXPECT_EQ(phase({Bound(pods[0], "Running"), Bound(pods[1], "Running")}), GangPhase::kRunning);
  EXPECT_EQ(phase({Bound(pods[0], "Succeeded"), Bound(pods[1], "Running")}), GangPhase::kRunning);
  EXPECT_EQ(phase({Bound(pods[0], "Succeeded"), Bound(pods[1], "Succeeded")}),
            GangPhase::kSucceeded);
  EXPECT_EQ(phase({Bound(pods[0], "Failed"), Bound(pods[1], "Failed")}), GangPhase::kFailed);
  EXPECT_EQ(phase({Bound(pods[0], "Running"), Bound(pods[1], "Failed")}), GangPhase::kPartial);
  EXPECT_EQ(phase({Bound(pods[0], "Running")}), GangPhase::kPartial);  // rank 1 missing
  EXPECT_EQ(phase({Bound(pods[0], "Running"), Bound(pods[1], "Running")}, {"n2"}),
            GangPhase::kPartial);
  EXPECT_EQ(phase({Bound(pods[0], "Running"), MakePod(Bound(pods[1], "Running")).Deleting()}),
            GangPhase::kPartial);
  // Ranks stopped by a delete checkpoint and exit 0: a preemption, never a success.
  EXPECT_EQ(phase({MakePod(Bound(pods[0], "Succeeded")).Deleting(),
                   MakePod(Bound(pods[1], "Succeeded")).Deleting()}),
            GangPhase::kFailed);
}

TEST_F(StatusTest, LostNodeAndFailureReasons) {
  auto pods = Gang(0, 0, {"n1", "n2", "n3"});
  auto obs = ObserveTasks({Bound(pods[0], "Running"), Bound(pods[1], "Running"),
                           MakePod(Bound(pods[2], "Failed")).Reason("NodeLost")});
  const GangObservation& g = *obs.at("mlp-lr-1e-3").gang;
  EXPECT_EQ(g.lost, 1);
  EXPECT_EQ(g.lost_nodes, std::vector<std::string>{"n3"});
  EXPECT_NE(g.reason.find("node n3 lost"), std::string::npos) << g.reason;

  auto by_set = ObserveTasks(
      {Bound(pods[0], "Running"), Bound(pods[1], "Running"), Bound(pods[2], "Running")}, {"n2"});
  EXPECT_EQ(by_set.at("mlp-lr-1e-3").gang->lost_nodes, std::vector<std::string>{"n2"});

  auto oom = ObserveTasks({Bound(pods[0], "Running"),
                           MakePod(Bound(pods[1], "Failed")).Terminated("OOMKilled", 137),
                           Bound(pods[2], "Running")});
  EXPECT_EQ(oom.at("mlp-lr-1e-3").gang->reason, "rank 1: OOMKilled (exit code 137)");
  EXPECT_TRUE(oom.at("mlp-lr-1e-3").gang->lost_nodes.empty());
}

TEST_F(StatusTest, NewestGenerationWinsAndOlderPodsAreStale) {
  auto old_gang = Gang(0, 0, {"n1", "n2"});
  auto new_gang = Gang(0, 2, {"n1"});
  auto obs = ObserveTasks(
      {Bound(old_gang[0], "Failed"), Bound(old_gang[1], "Running"), Bound(new_gang[0], "Running")});
  const TaskObservation& t = obs.at("mlp-lr-1e-3");
  EXPECT_EQ(t.restarts, 2);
  EXPECT_EQ(t.gang->generation, 2);
  EXPECT_EQ(t.gang->phase, GangPhase::kRunning);
  EXPECT_EQ(t.stale_pods.size(), 2u);
  ASSERT_TRUE(t.gang->config.has_value());
  EXPECT_EQ(t.gang->config->gpus, 1);
  EXPECT_EQ(t.gang->config->nodes, std::vector<std::string>{"n1"});
}

TEST_F(StatusTest, ProfileAndForeignPodsAreIgnored) {
  ProfileRequest pr;
  pr.job = &loaded_.job;
  pr.task = &loaded_.tasks[0];
  auto prof = BuildProfileGang(pr);
  ASSERT_TRUE(prof.ok());
  Json foreign = {{"metadata", {{"name", "x"}, {"labels", {{"app", "web"}}}}}};
  EXPECT_TRUE(ObserveTasks({prof->pods[0], foreign, Json::array()}).empty());
}

TEST_F(StatusTest, JobStatusFromObservations) {
  auto a = Gang(0, 0, {"n1", "n2"}, "unit");
  // The plan's recomputation mode reaches the worker's command line.
  std::string args = a[0]["spec"]["containers"][0]["args"].dump();
  EXPECT_NE(args.find(R"("--recompute=unit")"), std::string::npos) << args;
  auto b = Gang(1, 1, {"n1"});
  auto c = Gang(2, 0, {"n2"});
  auto obs = ObserveTasks({Bound(a[0], "Running"), Bound(a[1], "Running"), Bound(b[0], "Succeeded"),
                           Bound(c[0], "Pending")});
  api::ModelSelectionJobStatus s = JobStatus(obs);
  EXPECT_EQ(s.phase, api::Phase::kRunning);
  EXPECT_EQ(s.observed_generation, 2);
  EXPECT_EQ(s.task_summary, "1/3");
  EXPECT_EQ(s.gpus_held, 3);  // two running ranks and a pending one already bound to n2
  auto unbound = ObserveTasks({MakePod(c[0]).Phase("Pending")});
  EXPECT_EQ(unbound.at("gpt").gang->gpus_held, 0);
  ASSERT_EQ(s.tasks.size(), 3u);
  EXPECT_EQ(s.tasks[0].state, api::TaskState::kRunning);
  ASSERT_TRUE(s.tasks[0].config.has_value());
  EXPECT_EQ(s.tasks[0].config->gpus, 2);
  EXPECT_EQ(s.tasks[0].config->nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(s.tasks[0].config->recompute, "unit");
  EXPECT_EQ(s.tasks[1].config->recompute, "") << "not chosen: the template's default";
  EXPECT_EQ(s.tasks[0].steps_total, 100);
  EXPECT_EQ(s.tasks[1].state, api::TaskState::kSucceeded);
  EXPECT_EQ(s.tasks[1].restarts, 1);
  EXPECT_DOUBLE_EQ(s.tasks[1].progress, 1);
  EXPECT_EQ(s.tasks[2].state, api::TaskState::kQueued);
  ASSERT_EQ(s.conditions.size(), 3u);
  EXPECT_EQ(s.conditions[0].type, "Progressing");
  EXPECT_EQ(s.conditions[0].status, "True");
  EXPECT_EQ(s.conditions[0].reason, "TasksRunning");
  EXPECT_EQ(s.conditions[1].type, "Degraded");
  EXPECT_EQ(s.conditions[1].status, "False");
  EXPECT_EQ(s.conditions[2].type, "Complete");
  EXPECT_EQ(s.conditions[2].status, "False");
  for (const auto& cond : s.conditions) EXPECT_EQ(cond.observed_generation, 2);
  // The status encodes and decodes with the API's codec.
  std::vector<api::FieldError> errors;
  api::ModelSelectionJobStatus back;
  api::DecodeStatus(api::EncodeStatus(s), "status", &back, &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back, s);
}

// Each task's status names its gang's GPU type (its nodes' label), which
// encodes and decodes; a gang on unlabelled nodes names none.
TEST_F(StatusTest, ATasksConfigNamesItsGangsGpuType) {
  auto a = Gang(0, 0, {"h1", "h2"});
  auto b = Gang(1, 0, {"l1"});
  auto c = Gang(2, 0, {"plain"});
  auto obs = ObserveTasks({Bound(a[0], "Running"), Bound(a[1], "Running"), Bound(b[0], "Running"),
                           Bound(c[0], "Running")});
  StatusInput in;
  in.job = &loaded_.job;
  in.tasks = &loaded_.tasks;
  in.observed = &obs;
  in.now = "2026-01-01T00:00:00Z";
  in.node_gpu_types = {
      {"h1", "NVIDIA-H100-80GB-HBM3"}, {"h2", "NVIDIA-H100-80GB-HBM3"}, {"l1", "NVIDIA-L4"}};
  api::ModelSelectionJobStatus s = BuildJobStatus(in);
  ASSERT_EQ(s.tasks.size(), 3u);
  ASSERT_TRUE(s.tasks[0].config && s.tasks[1].config && s.tasks[2].config);
  EXPECT_EQ(s.tasks[0].config->gpu_type, "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(s.tasks[1].config->gpu_type, "NVIDIA-L4");
  EXPECT_EQ(s.tasks[2].config->gpu_type, "");
  Json encoded = api::EncodeStatus(s);
  EXPECT_EQ(encoded["tasks"][1]["config"]["gpuType"], "NVIDIA-L4");
  EXPECT_FALSE(encoded["tasks"][2]["config"].contains("gpuType"));
  std::vector<api::FieldError> errors;
  api::ModelSelectionJobStatus back;
  api::DecodeStatus(encoded, "status", &back, &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back, s);
}

TEST_F(StatusTest, NodeLossDegradesAndRescales) {
  auto a = Gang(0, 0, {"n1", "n2"});
  auto obs = ObserveTasks({Bound(a[0], "Running"), Bound(a[1], "Running")}, {"n2"});
  api::ModelSelectionJobStatus s = JobStatus(obs);
  EXPECT_EQ(s.tasks[0].state, api::TaskState::kRescaling);
  EXPECT_NE(s.tasks[0].message.find("node n2 lost"), std::string::npos) << s.tasks[0].message;
  EXPECT_EQ(s.conditions[1].type, "Degraded");
  EXPECT_EQ(s.conditions[1].status, "True");
  EXPECT_EQ(s.conditions[1].reason, "NodeLost");
  EXPECT_EQ(s.phase, api::Phase::kRunning);
}

TEST_F(StatusTest, TooManyRestartsFailTheTask) {
  auto a = Gang(0, 5, {"n1"});
  auto obs = ObserveTasks({MakePod(Bound(a[0], "Failed")).Terminated("Error", 1)});
  api::ModelSelectionJobStatus s = JobStatus(obs);
  EXPECT_EQ(s.tasks[0].state, api::TaskState::kFailed);
  EXPECT_EQ(s.conditions[1].reason, "GangFailed");
}

TEST_F(StatusTest, SucceededFailedSuspendedAndProfiling) {
  std::vector<Json> all;
  for (size_t t = 0; t < 3; ++t) {
    for (const Json& p : Gang(t, 0, {"n1"})) all.push_back(Bound(p, "Succeeded"));
  }
  api::ModelSelectionJobStatus done = JobStatus(ObserveTasks(all));
  EXPECT_EQ(done.phase, api::Phase::kSucceeded);
  EXPECT_EQ(done.conditions[2].status, "True");
  EXPECT_EQ(done.conditions[2].reason, "AllTasksSucceeded");
  EXPECT_EQ(done.conditions[0].status, "False");

  loaded_.job.spec.suspend = true;
  EXPECT_EQ(JobStatus({}).phase, api::Phase::kSuspended);
  loaded_.job.spec.suspend = false;

  std::map<std::string, TaskObservation> none;
  StatusInput in;
  in.job = &loaded_.job;
  in.tasks = &loaded_.tasks;
  in.observed = &none;
  in.now = "2026-01-01T00:00:00Z";
  in.profiling = {"gpt"};
  api::ModelSelectionJobStatus p = BuildJobStatus(in);
  EXPECT_EQ(p.phase, api::Phase::kProfiling);
  EXPECT_EQ(p.tasks[2].state, api::TaskState::kProfiling);
  EXPECT_EQ(p.tasks[0].state, api::TaskState::kPending);
}

TEST_F(StatusTest, ASucceededTaskNamesItsExportedModel) {
  loaded_ = LoadJob(testing::kFineTuneJobYaml);
  std::vector<Json> pods;
  for (const Json& p : Gang(1, 0, {"n1"})) pods.push_back(Bound(p, "Succeeded"));
  for (const Json& p : Gang(2, 0, {"n1"})) pods.push_back(Bound(p, "Running"));
  api::ModelSelectionJobStatus s = JobStatus(ObserveTasks(pods));
  ASSERT_EQ(s.tasks.size(), 3u);
  EXPECT_EQ(s.tasks[1].state, api::TaskState::kSucceeded);
  EXPECT_EQ(s.tasks[1].export_path, "/outputs/runs/llama-lora-8");
  EXPECT_EQ(s.tasks[2].state, api::TaskState::kRunning);
  EXPECT_EQ(s.tasks[2].export_path, "");  // not until it has succeeded
  // Kept once the pods are gone.
  loaded_.job.status = s;
  api::ModelSelectionJobStatus later = JobStatus({});
  EXPECT_EQ(later.tasks[1].export_path, "/outputs/runs/llama-lora-8");
}

TEST_F(StatusTest, AGangStoppedForANewPlanIsRescalingAndNotDegraded) {
  auto pods = Gang(0, 3, {"n1", "n2"});
  auto obs = ObserveTasks({MakePod(Bound(pods[0], "Succeeded")).Deleting(),
                           MakePod(Bound(pods[1], "Running")).Deleting()});
  StatusInput in;
  in.job = &loaded_.job;
  in.tasks = &loaded_.tasks;
  in.observed = &obs;
  in.now = "2026-01-01T00:00:00Z";
  in.max_restarts = 3;  // generation 3 would be the last for a failing gang
  in.replanned = {GangLabelValue("mlp-lr-1e-3", 3)};
  api::ModelSelectionJobStatus s = BuildJobStatus(in);
  EXPECT_EQ(s.tasks[0].state, api::TaskState::kRescaling);
  EXPECT_NE(s.tasks[0].message.find("new plan"), std::string::npos) << s.tasks[0].message;
  for (const api::Condition& c : s.conditions) {
    if (c.type == "Degraded") {
      EXPECT_EQ(c.status, "False") << c.message;
    }
  }
  in.replanned.clear();  // the same pods, not stopped by a plan: a failure
  s = BuildJobStatus(in);
  EXPECT_EQ(s.tasks[0].state, api::TaskState::kFailed);
}

TEST_F(StatusTest, ConditionsKeepTheirTransitionTimeAndProgressIsCarried) {
  auto a = Gang(0, 0, {"n1"});
  auto obs = ObserveTasks({Bound(a[0], "Running")});
  api::ModelSelectionJobStatus first = JobStatus(obs, "2026-01-01T00:00:00Z");
  first.tasks[0].steps_done = 40;
  first.tasks[0].progress = 0.4;
  first.tasks[0].samples_per_second = 123;
  loaded_.job.status = first;
  api::ModelSelectionJobStatus second = JobStatus(obs, "2026-01-01T01:00:00Z");
  EXPECT_EQ(second.conditions[0].last_transition_time, "2026-01-01T00:00:00Z");
  EXPECT_EQ(second.tasks[0].steps_done, 40);
  EXPECT_DOUBLE_EQ(second.tasks[0].samples_per_second, 123);
  EXPECT_EQ(second, first);  // nothing changed: the reconciler writes nothing
  loaded_.job.status = second;
  auto lost = ObserveTasks({Bound(a[0], "Running")}, {"n1"});
  api::ModelSelectionJobStatus third = JobStatus(lost, "2026-01-01T02:00:00Z");
  EXPECT_EQ(third.conditions[1].last_transition_time, "2026-01-01T02:00:00Z");  // Degraded flipped
  EXPECT_EQ(third.conditions[0].last_transition_time, "2026-01-01T00:00:00Z");
}

TEST_F(StatusTest, WorkerReportsOfTheCurrentGangBecomeProgress) {
  auto g1 = Gang(0, 1, {"n1"});
  auto obs = ObserveTasks({Bound(g1[0], "Running")});
  const api::ExpandedTask& task = loaded_.tasks[0];
  std::map<std::string, TaskProgress> reports;
  TaskProgress p;
  p.generation = 1;
  p.step = 30;
  p.checkpoint_step = 20;
  p.samples_per_second = 64;
  reports[LabelValue(task.name)] = p;
  StatusInput in;
  in.job = &loaded_.job;
  in.tasks = &loaded_.tasks;
  in.observed = &obs;
  in.now = "2026-01-01T00:00:05Z";
  in.progress = &reports;
  api::ModelSelectionJobStatus s = BuildJobStatus(in);
  const api::TaskStatus& t = s.tasks[0];
  EXPECT_EQ(t.steps_done, 30);
  EXPECT_DOUBLE_EQ(t.samples_per_second, 64);
  EXPECT_NEAR(t.progress, 30.0 / static_cast<double>(t.steps_total), 1e-12);
  // Remaining samples at the gang's batch (16) over the measured throughput.
  EXPECT_NEAR(t.eta_seconds, static_cast<double>(t.steps_total - 30) * 16 / 64, 1e-9);
  ASSERT_TRUE(t.last_checkpoint.has_value());
  EXPECT_EQ(t.last_checkpoint->step, 20);
  EXPECT_EQ(t.last_checkpoint->time, "2026-01-01T00:00:05Z");
  EXPECT_EQ(t.last_checkpoint->path, CheckpointDir(loaded_.job, task.name));

  // The same checkpoint seen later keeps the time it was first seen.
  loaded_.job.status = s;
  in.now = "2026-01-01T00:01:00Z";
  EXPECT_EQ(BuildJobStatus(in).tasks[0].last_checkpoint->time, "2026-01-01T00:00:05Z");

  // A report from an older generation (the gang before a rescale) is ignored:
  // what the status holds stays until the new gang reports.
  reports[LabelValue(task.name)].generation = 0;
  reports[LabelValue(task.name)].step = 99;
  EXPECT_EQ(BuildJobStatus(in).tasks[0].steps_done, 30);
}

// A relaunched gang's rank 0 reports its restore and then its saves: the status
// keeps the restore of that generation and the latest save's figures.
TEST_F(StatusTest, TheGangsRestoreAndSavesReachTheStatus) {
  auto g2 = Gang(0, 2, {"n1"});
  auto obs = ObserveTasks({Bound(g2[0], "Running")});
  const api::ExpandedTask& task = loaded_.tasks[0];
  std::map<std::string, TaskProgress> reports;
  TaskProgress p = *ParseWorkerMetrics(
      "orrery_worker_step 40\n"
      "orrery_worker_checkpoint_step 40\n"
      "orrery_worker_checkpoint_duration_seconds_sum{op=\"load\"} 0.125\n"
      "orrery_worker_checkpoint_duration_seconds_count{op=\"load\"} 1\n"
      "orrery_worker_checkpoint_duration_seconds_count{op=\"save\"} 0\n"
      "orrery_worker_checkpoint_rank_bytes{op=\"load\",kind=\"moved\",rank=\"0\"} 6150000\n"
      "orrery_worker_checkpoint_rank_bytes{op=\"load\",kind=\"needed\",rank=\"0\"} 6150000\n"
      "orrery_worker_checkpoint_peak_rss_bytes{op=\"load\",rank=\"0\"} 210000000\n");
  p.generation = 2;
  reports[LabelValue(task.name)] = p;
  StatusInput in;
  in.job = &loaded_.job;
  in.tasks = &loaded_.tasks;
  in.observed = &obs;
  in.now = "2026-01-01T00:00:05Z";
  in.progress = &reports;
  api::ModelSelectionJobStatus s = BuildJobStatus(in);
  ASSERT_TRUE(s.tasks[0].last_restore.has_value());
  EXPECT_EQ(*s.tasks[0].last_restore, (api::RestoreRef{2, 40, "2026-01-01T00:00:05Z", 0.125,
                                                       6150000, 6150000, 210000000, "", ""}));
  ASSERT_TRUE(s.tasks[0].last_checkpoint.has_value());
  EXPECT_EQ(s.tasks[0].last_checkpoint->step, 40);          // the one it resumed from
  EXPECT_EQ(s.tasks[0].last_checkpoint->bytes_written, 0);  // not this gang's save

  // It saves at step 50: a new checkpoint with the save's figures; the restore stays.
  loaded_.job.status = s;
  in.now = "2026-01-01T00:00:10Z";
  TaskProgress q = p;
  q.checkpoint_step = 50;
  q.restore_step = -1;
  q.save.count = 1;
  q.save.seconds_total = 0.5;
  q.save.last_seconds = 0.5;
  q.save.bytes_moved = 6100000;
  q.save.bytes_needed = 6100000;
  q.save.peak_rss_bytes = 230000000;
  reports[LabelValue(task.name)] = q;
  api::ModelSelectionJobStatus s2 = BuildJobStatus(in);
  EXPECT_EQ(s2.tasks[0].last_restore, s.tasks[0].last_restore);
  const api::CheckpointRef& saved = *s2.tasks[0].last_checkpoint;
  EXPECT_EQ(saved.step, 50);
  EXPECT_EQ(saved.time, "2026-01-01T00:00:10Z");
  EXPECT_DOUBLE_EQ(saved.seconds, 0.5);
  EXPECT_EQ(saved.bytes_written, 6100000);
  EXPECT_EQ(saved.peak_rss_bytes, 230000000);

  // Encoded for the API server: both objects, in the CRD's names.
  Json o = StatusUpdateObject(loaded_.job, s2);
  EXPECT_EQ(o["status"]["tasks"][0]["lastRestore"]["bytesRead"], 6150000);
  EXPECT_EQ(o["status"]["tasks"][0]["lastRestore"]["step"], 40);
  EXPECT_EQ(o["status"]["tasks"][0]["lastCheckpoint"]["bytesWritten"], 6100000);
}

TEST_F(StatusTest, StatusUpdateObjectCarriesTheResourceVersion) {
  loaded_.job.metadata.resource_version = "77";
  Json o = StatusUpdateObject(loaded_.job, JobStatus({}));
  EXPECT_EQ(o["metadata"]["resourceVersion"], "77");
  EXPECT_EQ(o["metadata"]["name"], "sweep");
  EXPECT_EQ(o["status"]["phase"], "Pending");
  EXPECT_EQ(o["kind"], "ModelSelectionJob");
}

}  // namespace
}  // namespace orrery::controller

namespace orrery::controller {
namespace {

TEST(StoppingForPlan, TheMessageGivesItsGenerationBackAndNothingElseDoes) {
  EXPECT_EQ(StoppingForPlanGeneration(StoppingForPlanMessage(0)), 0);
  EXPECT_EQ(StoppingForPlanGeneration(StoppingForPlanMessage(12)), 12);
  EXPECT_FALSE(StoppingForPlanGeneration("").has_value());
  EXPECT_FALSE(StoppingForPlanGeneration("stopping gang g for a new plan (it checkpoints first)"));
  EXPECT_FALSE(
      StoppingForPlanGeneration("stopping gang g07 for a new plan (it checkpoints first)"));
  EXPECT_FALSE(
      StoppingForPlanGeneration("stopping gang g-1 for a new plan (it checkpoints first)"));
  EXPECT_FALSE(StoppingForPlanGeneration("Failed gang g3: rank 0: OOMKilled (exit code 137)"));
  EXPECT_FALSE(StoppingForPlanGeneration(
      "stopping gang g99999999999 for a new plan (it checkpoints first)"));
}

}  // namespace
}  // namespace orrery::controller
