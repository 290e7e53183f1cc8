// Unit tests of the reconciler's pure pieces: node capacities with foreign pods,
// lost nodes, planner configurations from the profile cache, the engine's world
// view from observed gangs, and which planned gangs start now.
#include "operator/controller/reconciler.h"

#include <set>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "operator/api/codec.h"
#include "operator/controller/kueue.h"
#include "operator/controller/names.h"
#include "operator/controller/profile_pod.h"
#include "operator/kube/api_error.h"
#include "operator/kube/event_recorder.h"
#include "tests/operator/controller/test_objects.h"

namespace orrery::controller {
namespace {

// A GPU node of the pool the test job's nodeSelector asks for.
Json Node(const std::string& name, int gpus, bool ready = true) {
  return Json{
      {"metadata", {{"name", name}, {"labels", {{"orrery.dev/pool", "gpu"}}}}},
      {"status",
       {{"allocatable", {{"nvidia.com/gpu", std::to_string(gpus)}, {"cpu", "64"}}},
        {"conditions", Json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

// A GPU node of the pool whose GPUs are of `type`, with `memory_mib` per GPU,
// labelled as NVIDIA's GPU feature discovery labels them.
Json TypedNode(const std::string& name, int gpus, const std::string& type,
               const std::string& memory_mib = "81920") {
  Json n = Node(name, gpus);
  n["metadata"]["labels"][kDefaultGpuTypeLabel] = type;
  n["metadata"]["labels"][kGpuMemoryLabel] = memory_mib;
  return n;
}

Json ForeignPod(const std::string& node, int gpus, const std::string& phase = "Running") {
  return Json{
      {"metadata", {{"name", "other"}, {"namespace", "default"}}},
      {"spec",
       {{"nodeName", node},
        {"containers",
         Json::array({{{"name", "c"}, {"resources", {{"limits", {{"nvidia.com/gpu", gpus}}}}}}})}}},
      {"status", {{"phase", phase}}}};
}

class ReconcilerPureTest : public ::testing::Test {
 protected:
  void SetUp() override { loaded_ = testing::LoadJob(); }

  // A gang pod of `task` (index) on `nodes`, as the informer would hold it.
  std::vector<Json> GangPods(size_t task, const std::vector<std::string>& nodes,
                             const std::string& phase, int generation = 0) {
    GangRequest r;
    r.job = &loaded_.job;
    r.task = &loaded_.tasks[task];
    r.config.gpus = static_cast<int>(nodes.size());
    r.config.nodes = 0;
    r.placement = nodes;
    r.generation = generation;
    auto gang = BuildGang(r);
    EXPECT_TRUE(gang.ok()) << gang.status();
    std::vector<Json> pods;
    for (size_t k = 0; gang.ok() && k < gang->pods.size(); ++k) {
      testing::MakePod p(gang->pods[k]);
      p.Phase(phase);
      if (phase != "Pending") p.Node(nodes[k]);
      pods.push_back(p.json());
    }
    return pods;
  }

  CachedProfile Measured(size_t task, api::Template tmpl, int gpus, double samples_per_s) {
    ProfileRequest r;
    r.task = &loaded_.tasks[task];
    r.template_ = tmpl;
    r.gpus = gpus;
    CachedProfile p;
    p.entry = ProfileKey(r);
    p.entry.samples_per_s = samples_per_s;
    p.entry.step_time_s = 0.1;
    p.entry.measured_at = "2026-01-01T00:00:00Z";
    return p;
  }

  api::LoadedJob loaded_;
};

TEST_F(ReconcilerPureTest, ForeignPodsTakeGpusAndOwnGangsDoNot) {
  std::vector<Json> nodes = {Node("a", 8), Node("b", 4), Node("down", 8, false), Node("cpu", 0)};
  std::vector<Json> pods = {ForeignPod("a", 3), ForeignPod("a", 2, "Succeeded"),
                            ForeignPod("down", 8)};
  for (const Json& p : GangPods(0, {"b", "b"}, "Running")) pods.push_back(p);
  // Another job's gang, created but not yet bound: its planned node counts.
  api::LoadedJob other = testing::LoadJob();
  other.job.metadata.name = "other";
  GangRequest r;
  r.job = &other.job;
  r.task = &other.tasks[1];
  r.config.gpus = 1;
  r.placement = {"b"};
  auto gang = BuildGang(r);
  ASSERT_TRUE(gang.ok());
  pods.push_back(testing::MakePod(gang->pods[0]).Phase("Pending").json());

  auto caps = NodeCapacities(nodes, pods, "nvidia.com/gpu", LabelValue("sweep"));
  ASSERT_EQ(caps.size(), 2u);  // NotReady and GPU-less nodes are not offered
  EXPECT_EQ(caps[0].name, "a");
  EXPECT_EQ(caps[0].allocatable, 8);
  EXPECT_EQ(caps[0].foreign, 3);  // the finished pod holds nothing
  EXPECT_EQ(caps[0].Free(), 5);
  EXPECT_EQ(caps[1].name, "b");
  EXPECT_EQ(caps[1].foreign, 1);  // the other job's pod; our own gang is not foreign
  EXPECT_EQ(caps[1].Free(), 3);

  // Seen from nobody in particular, every pod counts.
  auto all = NodeCapacities(nodes, pods, "nvidia.com/gpu", "");
  EXPECT_EQ(all[1].foreign, 3);
  // Over-requested nodes offer zero, never a negative count.
  pods.push_back(ForeignPod("a", 9));
  EXPECT_EQ(NodeCapacities(nodes, pods, "nvidia.com/gpu", "")[0].Free(), 0);
}

TEST_F(ReconcilerPureTest, PinnedProfilePodsCountOnTheirNode) {
  ProfileRequest r;
  r.job = &loaded_.job;
  r.task = &loaded_.tasks[0];
  r.gpus = 2;
  r.placement = {"b", "b"};
  auto gang = BuildProfileGang(r);
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_EQ(PodNode(gang->pods[0]), "b");
  std::vector<Json> pods = gang->pods;
  // Profile pods are the job's, yet hold GPUs its gangs cannot have.
  auto caps =
      NodeCapacities({Node("a", 2), Node("b", 2)}, pods, "nvidia.com/gpu", LabelValue("sweep"));
  EXPECT_EQ(caps[0].Free(), 2);
  EXPECT_EQ(caps[1].Free(), 0);
  EXPECT_EQ(PodNode(ForeignPod("", 1)), "");
}

TEST_F(ReconcilerPureTest, LostNodesAreNotReadyOrGone) {
  std::vector<Json> nodes = {Node("a", 8), Node("b", 8, false)};
  std::vector<Json> pods = GangPods(0, {"a", "gone"}, "Running");
  EXPECT_EQ(LostNodes(nodes, pods), (std::set<std::string>{"b", "gone"}));
}

TEST_F(ReconcilerPureTest, ConfigsComeFromProfilesWithInterpolation) {
  api::ModelSelectionJobSpec& spec = loaded_.job.spec;
  spec.resources.templates = {api::Template::kDdp, api::Template::kFsdp};
  spec.profiling.gpu_counts = {1, 4};
  ProfileTable table;
  // One rank of ddp or fsdp is the same single-process run: one profile
  // serves both (ProfileKey keys by the worker's template).
  EXPECT_EQ(ProfileDataKey(Measured(0, api::Template::kDdp, 1, 100).entry),
            ProfileDataKey(Measured(0, api::Template::kFsdp, 1, 100).entry));
  for (const CachedProfile& p :
       {Measured(0, api::Template::kDdp, 1, 100), Measured(0, api::Template::kDdp, 4, 340)}) {
    table[ProfileDataKey(p.entry)] = p;
  }
  CachedProfile oom = Measured(0, api::Template::kFsdp, 4, 0);
  oom.infeasible = true;
  oom.reason = "OOMKilled";
  table[ProfileDataKey(oom.entry)] = oom;

  TaskConfigs tc = ConfigsFromProfiles(spec, loaded_.tasks[0], table, "cuda", 8);
  EXPECT_TRUE(tc.missing.empty());   // the infeasible one is known, not missing
  ASSERT_EQ(tc.configs.size(), 5u);  // ddp 1,2,3,4 and fsdp 1
  EXPECT_EQ(tc.configs[1].gpus, 2);
  EXPECT_DOUBLE_EQ(tc.configs[1].throughput, 180);
  EXPECT_EQ(tc.configs[3].gpus, 4);
  EXPECT_EQ(tc.templates[4], api::Template::kFsdp);
  EXPECT_EQ(tc.configs[4].template_name, "fsdp");

  // Fewer GPUs in the cluster: larger counts are neither planned nor profiled.
  TaskConfigs small = ConfigsFromProfiles(spec, loaded_.tasks[0], table, "cuda", 2);
  EXPECT_EQ(small.configs.size(), 2u);
  // Another task (another signature) has nothing cached: all is missing.
  TaskConfigs gpt = ConfigsFromProfiles(spec, loaded_.tasks[2], table, "cuda", 8);
  EXPECT_TRUE(gpt.configs.empty());
  EXPECT_EQ(gpt.missing.size(), 4u);
  // Another device is another cache key.
  EXPECT_EQ(ConfigsFromProfiles(spec, loaded_.tasks[0], table, "cpu", 8).missing.size(), 4u);
}

// A ConfigMap entry's measured peak is the configuration's memory (the other
// recomputation mode derived from it); an entry from before peaks plans from
// its parameter memory and the modelled activations, as it always did.
TEST_F(ReconcilerPureTest, ConfigsTakeAProfilesMeasuredPeak) {
  api::ModelSelectionJobSpec& spec = loaded_.job.spec;
  spec.resources.templates = {api::Template::kDdp};
  spec.profiling.gpu_counts = {1};
  constexpr double kGib = 1024.0 * 1024.0 * 1024.0;
  CachedProfile p = Measured(2, api::Template::kDdp, 1, 100);  // the GPT task
  p.entry.peak_memory_bytes = 0.5 * kGib;
  ProfileTable table;
  table[ProfileDataKey(p.entry)] = p;
  TaskConfigs old = ConfigsFromProfiles(spec, loaded_.tasks[2], table, "cuda", 1);
  ASSERT_EQ(old.configs.size(), 2u);  // without and with recomputation
  EXPECT_EQ(old.memory_basis[0], "modelled");
  EXPECT_GT(old.configs[0].memory_gib, 0.5);
  EXPECT_LT(old.configs[0].memory_gib, 0.6);  // a tiny GPT's activations
  p.entry.device_allocated_bytes = 3 * kGib;
  p.entry.recompute = "none";
  table[ProfileDataKey(p.entry)] = p;
  TaskConfigs tc = ConfigsFromProfiles(spec, loaded_.tasks[2], table, "cuda", 1);
  ASSERT_EQ(tc.configs.size(), 2u);
  EXPECT_DOUBLE_EQ(tc.configs[0].memory_gib, 3);
  EXPECT_EQ(tc.memory_basis[0], "measured");
  EXPECT_EQ(tc.configs[1].recompute, "unit");
  EXPECT_LT(tc.configs[1].memory_gib, 3);
  EXPECT_NEAR(tc.configs[1].memory_gib, 3 - (old.configs[0].memory_gib - old.configs[1].memory_gib),
              1e-9);
  EXPECT_EQ(tc.memory_basis[1], "from the measured none peak");
}

// Each of `tasks` tasks may run as ddp on `gpus` GPUs at 10 samples/s.
std::vector<TaskConfigs> OneDdpConfigEach(size_t tasks, int gpus) {
  std::vector<TaskConfigs> configs(tasks);
  for (TaskConfigs& tc : configs) {
    planner::Config c;
    c.template_name = "ddp";
    c.gpus = gpus;
    c.throughput = 10;
    tc.configs = {c};
    tc.templates = {api::Template::kDdp};
  }
  return configs;
}

TEST_F(ReconcilerPureTest, WorldViewMarksLiveGangsRunningAndProfilingTasksNotArrived) {
  std::vector<NodeCapacity> nodes = {{"a", 8, 2}, {"b", 4, 0}};
  std::vector<TaskConfigs> configs = OneDdpConfigEach(loaded_.tasks.size(), 2);
  WorldInput in;
  in.now = 1000;
  in.tasks = &loaded_.tasks;
  in.configs = &configs;
  in.nodes = &nodes;
  in.steps_done[loaded_.tasks[0].name] = 40;
  in.done.insert(loaded_.tasks[1].name);
  in.profiling.insert(loaded_.tasks[2].name);
  api::TaskConfig running;
  running.template_ = api::Template::kDdp;
  running.gpus = 2;
  running.nodes = {"b", "a"};
  in.live[loaded_.tasks[0].name] = LiveGang{0, running, ""};

  engine::WorldView w = BuildWorldView(in);
  ASSERT_EQ(w.nodes.size(), 2u);
  EXPECT_EQ(w.nodes[0].gpus, 6);  // allocatable minus foreign
  EXPECT_EQ(w.nodes[1].gpus, 4);
  ASSERT_EQ(w.tasks.size(), 3u);
  EXPECT_DOUBLE_EQ(w.tasks[0].remaining_work, 60.0 * 16);  // 100 steps, 40 done, batch 16
  ASSERT_TRUE(w.tasks[0].running.has_value());
  EXPECT_EQ(w.tasks[0].running->config, 0);
  EXPECT_EQ(w.tasks[0].running->gpus,
            (std::vector<planner::GpuSlot>{{0, 0}, {1, 0}}));  // sorted slots
  EXPECT_TRUE(w.tasks[1].done);
  EXPECT_TRUE(w.tasks[1].arrived);
  EXPECT_FALSE(w.tasks[2].arrived);
  // Made under other pod settings than the job's now: outdated; under the
  // same, or before pods carried them (""), not.
  EXPECT_FALSE(w.tasks[0].outdated);
  in.pod_settings = "0123456789abcdef";
  in.live[loaded_.tasks[0].name].pod_settings = "fedcba9876543210";
  EXPECT_TRUE(BuildWorldView(in).tasks[0].outdated);
  in.live[loaded_.tasks[0].name].pod_settings = in.pod_settings;
  EXPECT_FALSE(BuildWorldView(in).tasks[0].outdated);

  // A live gang in a configuration the cache no longer offers, or on a node that
  // is gone, is not reported as running (its GPUs are not offered either way).
  running.gpus = 1;
  running.nodes = {"a"};
  in.live[loaded_.tasks[0].name] = LiveGang{0, running, ""};
  EXPECT_FALSE(BuildWorldView(in).tasks[0].running.has_value());
  running.gpus = 2;
  running.nodes = {"a", "gone"};
  in.live[loaded_.tasks[0].name] = LiveGang{0, running, ""};
  EXPECT_FALSE(BuildWorldView(in).tasks[0].running.has_value());
}

// The plan may run a point keeping its activations or recomputing them: a
// live gang is the configuration of its own mode (its config annotation's), and
// a gang made before the mode was recorded ("") the template's default one.
TEST_F(ReconcilerPureTest, WorldViewMatchesALiveGangsRecomputationMode) {
  std::vector<NodeCapacity> nodes = {{"a", 8, 0}};
  std::vector<TaskConfigs> configs = OneDdpConfigEach(loaded_.tasks.size(), 2);
  for (TaskConfigs& tc : configs) {
    planner::Config unit = tc.configs[0];
    unit.recompute = "unit";
    unit.throughput = 7.5;
    tc.configs.insert(tc.configs.begin(), unit);  // first, so a match cannot be by order
    tc.templates.push_back(api::Template::kDdp);
  }
  WorldInput in;
  in.now = 10;
  in.tasks = &loaded_.tasks;
  in.configs = &configs;
  in.nodes = &nodes;
  api::TaskConfig running;
  running.template_ = api::Template::kDdp;
  running.gpus = 2;
  running.nodes = {"a", "a"};
  for (const auto& [mode, want] :
       std::vector<std::pair<std::string, int>>{{"unit", 0}, {"none", 1}, {"", 1}}) {
    running.recompute = mode;
    in.live[loaded_.tasks[0].name] = LiveGang{0, running, ""};
    engine::WorldView w = BuildWorldView(in);
    ASSERT_TRUE(w.tasks[0].running.has_value()) << "mode '" << mode << "'";
    EXPECT_EQ(w.tasks[0].running->config, want) << "mode '" << mode << "'";
  }
}

TEST_F(ReconcilerPureTest, NodesCarryTheirGpuTypeAndMemoryFromLabels) {
  Json custom = Node("c", 4);
  custom["metadata"]["labels"]["example.com/gpu"] = "L4";
  Json bad_memory = TypedNode("d", 2, "A100", "80GB");  // not MiB: left unmodelled
  std::vector<Json> nodes = {TypedNode("a", 8, "NVIDIA-H100-80GB-HBM3", "81559"), Node("b", 2),
                             custom, bad_memory};
  auto caps = NodeCapacities(nodes, {}, "nvidia.com/gpu", "");
  ASSERT_EQ(caps.size(), 4u);
  EXPECT_EQ(caps[0].gpu_type, "NVIDIA-H100-80GB-HBM3");
  // The label's 79.6 GiB less the default reserve (1.5 GiB, then 5%): what a
  // configuration's peak may fill.
  EXPECT_NEAR(caps[0].gpu_device_gib, 81559.0 / 1024, 1e-9);
  EXPECT_NEAR(caps[0].gpu_memory_gib, (81559.0 / 1024 - 1.5) * 0.95, 1e-9);
  auto unreserved = NodeCapacities(nodes, {}, "nvidia.com/gpu", "", nullptr, nullptr,
                                   kDefaultGpuTypeLabel, engine::GpuMemoryReserve{0, 0});
  EXPECT_NEAR(unreserved[0].gpu_memory_gib, 81559.0 / 1024, 1e-9);
  EXPECT_EQ(caps[1].gpu_type, "");
  EXPECT_EQ(caps[1].gpu_memory_gib, 0);
  EXPECT_EQ(caps[2].gpu_type, "") << "the default label is not example.com/gpu";
  EXPECT_EQ(caps[3].gpu_type, "A100");
  EXPECT_EQ(caps[3].gpu_memory_gib, 0);
  auto relabelled =
      NodeCapacities(nodes, {}, "nvidia.com/gpu", "", nullptr, nullptr, "example.com/gpu");
  EXPECT_EQ(relabelled[2].gpu_type, "L4");
  EXPECT_EQ(relabelled[0].gpu_type, "");
}

TEST_F(ReconcilerPureTest, WorldViewCarriesGpuTypesAndHoldsBackATaskNoTypeServes) {
  loaded_.tasks[0].task.gpu_types = {"small"};
  loaded_.tasks[1].task.gpu_types = {"tiny", "medium"};  // no node has either
  std::vector<NodeCapacity> nodes = {{"a", 2, 0, "big", 80}, {"b", 2, 0, "small", 0}};
  std::vector<TaskConfigs> configs(loaded_.tasks.size());
  for (TaskConfigs& c : configs) {
    c.configs = {planner::Config{"ddp", 1, 1, 0, 100, 1}};
    c.templates = {api::Template::kDdp};
  }
  WorldInput in;
  in.tasks = &loaded_.tasks;
  in.configs = &configs;
  in.nodes = &nodes;
  engine::WorldView w = BuildWorldView(in);
  ASSERT_EQ(w.nodes.size(), 2u);
  EXPECT_EQ(w.nodes[0].gpu_type, "big");
  EXPECT_EQ(w.nodes[0].gpu_memory_gib, 80);
  EXPECT_EQ(w.nodes[1].gpu_type, "small");
  EXPECT_GT(w.nodes[1].gpu_memory_gib, 1000) << "unlabelled memory is not modelled";
  EXPECT_EQ(w.tasks[0].gpu_types, std::vector<std::string>{"small"});
  EXPECT_TRUE(w.tasks[0].arrived);
  EXPECT_FALSE(w.tasks[1].arrived);
  EXPECT_TRUE(w.tasks[2].arrived);
  std::string why = GpuTypesMissing(loaded_.tasks[1].task.gpu_types, nodes);
  EXPECT_NE(why.find("spec.tasks[].gpuTypes: tiny, medium"), std::string::npos) << why;
  EXPECT_NE(why.find("the nodes have: big, small"), std::string::npos) << why;
  EXPECT_EQ(GpuTypesMissing({"big"}, nodes), "");
  EXPECT_EQ(GpuTypesMissing({}, nodes), "");
}

// Profiles keyed by GPU type: a task is profiled on the first type it allows
// (by name); with speeds the other types get estimates scaled by speed, without
// them the profile stands for every type; a profile from before types (keyed by
// the device alone) stands in for a typed one.
TEST_F(ReconcilerPureTest, ProfilesAreKeyedByGpuTypeAndOtherTypesEstimatedBySpeed) {
  api::ModelSelectionJobSpec& spec = loaded_.job.spec;
  spec.resources.templates = {api::Template::kDdp};
  spec.profiling.gpu_counts = {1, 2};
  std::vector<NodeCapacity> nodes = {{"big-0", 2, 0, "big", 80}, {"small-0", 2, 0, "small", 80}};
  EXPECT_EQ(ProfiledGpuType(loaded_.tasks[0].task, nodes), "big");
  EXPECT_EQ(TypedProfileDevice("cuda", "big"), "cuda/big");
  EXPECT_EQ(TypedProfileDevice("cuda", ""), "cuda");
  ProfileTable typed;
  for (auto [g, sps] : {std::pair{1, 100.0}, std::pair{2, 180.0}}) {
    CachedProfile p = Measured(0, api::Template::kDdp, g, sps);
    p.entry.device = "cuda/big";
    typed[ProfileDataKey(p.entry)] = p;
  }
  TaskConfigs any = ConfigsFromProfiles(spec, loaded_.tasks[0], typed, "cuda", 4, nodes);
  EXPECT_TRUE(any.missing.empty());
  ASSERT_EQ(any.configs.size(), 2u);
  for (const planner::Config& c : any.configs)
    EXPECT_EQ(c.gpu_type, "") << "no speeds, none measured yet: any type";
  // Without speeds they are measured: the first key (ddp on 1 GPU) is wanted
  // on small too.
  ASSERT_EQ(any.type_probes.size(), 1u);
  EXPECT_EQ(any.type_probes[0].first, "small");
  EXPECT_EQ(any.type_probes[0].second.template_, api::Template::kDdp);
  EXPECT_EQ(any.type_probes[0].second.gpus, 1);

  // Measured there at 40 samples/s, 0.4 of big's: small's configurations
  // are big's scaled by it.
  ProfileTable probed = typed;
  CachedProfile on_small_1 = Measured(0, api::Template::kDdp, 1, 40);
  on_small_1.entry.device = "cuda/small";
  probed[ProfileDataKey(on_small_1.entry)] = on_small_1;
  TaskConfigs measured = ConfigsFromProfiles(spec, loaded_.tasks[0], probed, "cuda", 4, nodes);
  EXPECT_TRUE(measured.type_probes.empty());
  std::map<std::pair<std::string, int>, double> by_type;
  for (const planner::Config& c : measured.configs) by_type[{c.gpu_type, c.gpus}] = c.throughput;
  ASSERT_EQ(by_type.size(), 4u);
  EXPECT_DOUBLE_EQ((by_type[{"big", 2}]), 180);
  EXPECT_DOUBLE_EQ((by_type[{"small", 1}]), 40);
  EXPECT_DOUBLE_EQ((by_type[{"small", 2}]), 72);
  // Infeasible there (out of memory): small gets no configuration.
  probed[ProfileDataKey(on_small_1.entry)].infeasible = true;
  TaskConfigs refused = ConfigsFromProfiles(spec, loaded_.tasks[0], probed, "cuda", 4, nodes);
  EXPECT_TRUE(refused.type_probes.empty());
  ASSERT_EQ(refused.configs.size(), 2u);
  for (const planner::Config& c : refused.configs) EXPECT_EQ(c.gpu_type, "big");

  TaskConfigs est = ConfigsFromProfiles(spec, loaded_.tasks[0], typed, "cuda", 4, nodes,
                                        {{"big", 4}, {"small", 1}});
  ASSERT_EQ(est.configs.size(), 4u);
  ASSERT_EQ(est.templates.size(), 4u);
  std::map<std::pair<std::string, int>, double> sps;
  for (const planner::Config& c : est.configs) sps[{c.gpu_type, c.gpus}] = c.throughput;
  EXPECT_DOUBLE_EQ((sps[{"big", 1}]), 100);
  EXPECT_DOUBLE_EQ((sps[{"big", 2}]), 180);
  EXPECT_DOUBLE_EQ((sps[{"small", 1}]), 25);
  EXPECT_DOUBLE_EQ((sps[{"small", 2}]), 45);
  for (api::Template t : est.templates) EXPECT_EQ(t, api::Template::kDdp);

  // Restricted to small: profiled there, and the big profiles do not count.
  loaded_.tasks[0].task.gpu_types = {"small"};
  EXPECT_EQ(ProfiledGpuType(loaded_.tasks[0].task, nodes), "small");
  TaskConfigs on_small = ConfigsFromProfiles(spec, loaded_.tasks[0], typed, "cuda", 4, nodes);
  EXPECT_TRUE(on_small.configs.empty());
  EXPECT_EQ(on_small.missing.size(), 2u);

  // A cache from before types: its entries stand for the profiled type.
  ProfileTable untyped;
  CachedProfile old = Measured(0, api::Template::kDdp, 1, 90);
  untyped[ProfileDataKey(old.entry)] = old;
  TaskConfigs compat = ConfigsFromProfiles(spec, loaded_.tasks[0], untyped, "cuda", 4, nodes);
  ASSERT_EQ(compat.configs.size(), 1u);
  EXPECT_DOUBLE_EQ(compat.configs[0].throughput, 90);
  EXPECT_EQ(compat.missing.size(), 1u);  // 2 GPUs, on small
}

TEST(HumanDuration, AsKubectlShowsAges) {
  EXPECT_EQ(HumanDuration(0), "0s");
  EXPECT_EQ(HumanDuration(44.6), "45s");
  EXPECT_EQ(HumanDuration(754), "12m");
  EXPECT_EQ(HumanDuration(3600), "1h");
  EXPECT_EQ(HumanDuration(4800), "1h20m");
  EXPECT_EQ(HumanDuration(183600), "2d3h");
  EXPECT_EQ(HumanDuration(-5), "0s");
}

// An elastic job's work is samples: a task that ran part of its budget at a
// larger batch has what is left of the samples to do, not of its own steps.
TEST_F(ReconcilerPureTest, ElasticWorkIsTheSampleBudgetLessSamplesDone) {
  const int64_t batch = loaded_.tasks[0].task.training.batch_size;  // 16
  api::TaskStatus st;
  st.steps_done = 40;
  EXPECT_EQ(SamplesDone(st, batch), 40 * batch);  // its own batch throughout
  api::TaskConfig at64;
  at64.batch_size = 64;
  st.config = at64;
  EXPECT_EQ(SamplesDone(st, batch), 40 * 64);  // no checkpoint: all at the batch it runs at
  api::CheckpointRef cp;
  cp.step = 30;
  cp.samples = 30 * batch;  // 30 steps at 16, then 10 at 64
  st.last_checkpoint = cp;
  EXPECT_EQ(SamplesDone(st, batch), 30 * batch + 10 * 64);
  cp.samples = 0;  // a worker that did not report samples: steps at the batch now
  st.last_checkpoint = cp;
  EXPECT_EQ(SamplesDone(st, batch), 40 * 64);

  std::vector<NodeCapacity> nodes = {{"a", 8, 0}};
  std::vector<TaskConfigs> configs = OneDdpConfigEach(loaded_.tasks.size(), 1);
  WorldInput in;
  in.tasks = &loaded_.tasks;
  in.configs = &configs;
  in.nodes = &nodes;
  in.steps_done[loaded_.tasks[0].name] = 40;
  in.elastic = true;
  in.samples_done[loaded_.tasks[0].name] = 30 * batch + 10 * 64;
  const double budget = static_cast<double>(engine::SampleBudget(loaded_.tasks[0].task));
  engine::WorldView w = BuildWorldView(in);
  EXPECT_DOUBLE_EQ(w.tasks[0].remaining_work, budget - (30 * batch + 10 * 64));
  // Not elastic: steps left at the task's own batch, as before.
  in.elastic = false;
  EXPECT_DOUBLE_EQ(BuildWorldView(in).tasks[0].remaining_work, 60.0 * 16);
}

// An in-memory API server for the reconciler's writes: objects by resource and
// key, every create and delete recorded. Reads go to the caches the test fills,
// never here, except the profile ConfigMap the reconciler re-reads to merge.
class FakeClient : public kube::Client {
 public:
  StatusOr<kube::Object> Get(const kube::Resource& r, const std::string& ns,
                             const std::string& name) override {
    auto it = objects_.find(r.Name() + "/" + kube::KeyFor(ns, name));
    if (it == objects_.end()) return NotFoundError(r.Name() + " " + name + " NotFound");
    return it->second;
  }
  StatusOr<kube::Object> List(const kube::Resource&, const std::string&,
                              const kube::ListOptions&) override {
    return UnimplementedError("list");
  }
  StatusOr<kube::Object> Create(const kube::Resource& r, const std::string& ns,
                                const kube::Object& obj) override {
    std::string key = r.Name() + "/" + kube::KeyFor(ns, obj["metadata"]["name"]);
    if (objects_.count(key) > 0) {
      return AlreadyExistsError("AlreadyExists: " + key);
    }
    created.push_back(key);
    objects_[key] = obj;
    return obj;
  }
  StatusOr<kube::Object> Update(const kube::Resource& r, const std::string& ns,
                                const kube::Object& obj) override {
    objects_[r.Name() + "/" + kube::KeyFor(ns, obj["metadata"]["name"])] = obj;
    return obj;
  }
  StatusOr<kube::Object> UpdateStatus(const kube::Resource&, const std::string&,
                                      const kube::Object& obj) override {
    statuses.push_back(obj["status"]);
    return obj;
  }
  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                const kube::DeleteOptions&) override {
    std::string key = r.Name() + "/" + kube::KeyFor(ns, name);
    if (objects_.erase(key) == 0) return NotFoundError("NotFound: " + key);
    deleted.push_back(key);
    return OkStatus();
  }
  StatusOr<kube::Object> Patch(const kube::Resource&, const std::string&, const std::string&,
                               kube::PatchType, const kube::Object&,
                               const kube::PatchOptions&) override {
    return UnimplementedError("patch");
  }
  StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource&, const std::string&,
                                                     const kube::ListOptions&) override {
    return UnimplementedError("watch");
  }

  // The pods created so far, as an informer would list them once bound.
  std::vector<kube::Object> Pods(const std::string& phase) const {
    std::vector<kube::Object> out;
    for (const auto& [key, obj] : objects_) {
      if (key.rfind("pods/", 0) != 0) continue;
      kube::Object p = obj;
      p["status"]["phase"] = phase;
      p["spec"]["nodeName"] = p["metadata"]["annotations"][kNodeAnnotation];
      out.push_back(p);
    }
    return out;
  }

  // The Events recorded with `reason`, in the order of their names.
  std::vector<kube::Object> Events(const std::string& reason) const {
    std::vector<kube::Object> out;
    for (const auto& [key, obj] : objects_) {
      if (key.rfind(kube::Events().Name() + "/", 0) == 0 && obj.value("reason", "") == reason) {
        out.push_back(obj);
      }
    }
    return out;
  }

  std::vector<std::string> created, deleted;
  std::vector<kube::Object> statuses;

 private:
  std::map<std::string, kube::Object> objects_;
};

// The pod cache catches up with the gangs created since it last did, leaving
// the pods it holds (and the phases a test gave them) as they are.
void SyncNewPods(const FakeClient& client, kube::Store* pods) {
  for (const kube::Object& p : client.Pods("Running")) {
    if (!pods->Get(kube::KeyOf(p))) pods->Upsert(std::make_shared<const kube::Object>(p));
  }
}

kube::ObjectPtr Ptr(const Json& j) {
  return std::make_shared<const kube::Object>(kube::Object::parse(j.dump()));
}

class ReconcileTest : public ReconcilerPureTest {
 protected:
  void SetUp() override {
    ReconcilerPureTest::SetUp();
    loaded_.job.spec.resources.templates = {api::Template::kDdp};
    loaded_.job.spec.profiling.gpu_counts = {1, 2};
    loaded_.job.spec.resources.gpus_per_task.max = 2;
    PutJob();
    nodes_.Upsert(Ptr(Node("a", 2)));
    nodes_.Upsert(Ptr(Node("b", 2)));
    ProfileTable table;
    for (size_t t = 0; t < loaded_.tasks.size(); ++t) {
      for (int g : {1, 2}) {
        CachedProfile p = Measured(t, api::Template::kDdp, g, 100.0 * g);
        table[ProfileDataKey(p.entry)] = p;
      }
    }
    configmaps_.Upsert(Ptr(EncodeProfileConfigMap(table, "orrery-system")));
    options_.engine.solver_time_limit_s = 2;
    options_.now_rfc3339 = [] { return std::string("2026-01-01T00:00:00Z"); };
    reconciler_ = std::make_unique<Reconciler>(
        &client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  }
  void PutJob() { jobs_.Upsert(Ptr(api::EncodeJob(loaded_.job))); }
  // The profile cache (ConfigMap and its cache) holds ddp at 1 and 2 GPUs of
  // the two mlp tasks and nothing of the gpt task (task 2, its own signature).
  void CacheProfilesButGpt() {
    ProfileTable table;
    for (size_t t = 0; t < 2; ++t) {
      for (int g : {1, 2}) {
        CachedProfile p = Measured(t, api::Template::kDdp, g, 100.0 * g);
        table[ProfileDataKey(p.entry)] = p;
      }
    }
    Json cm = EncodeProfileConfigMap(table, "orrery-system");
    configmaps_.Upsert(Ptr(cm));
    ASSERT_TRUE(
        client_.Update(kube::ConfigMaps(), "orrery-system", kube::Object::parse(cm.dump())).ok());
  }
  // The first pass plans and launches, the gangs run, the next pass sees them:
  // one solve so far.
  void LaunchAndRun(Reconciler& reconciler) {
    ASSERT_TRUE(reconciler.Reconcile(key_).ok());
    SyncPods("Running");
    clock_.Advance(std::chrono::seconds(30));
    ASSERT_TRUE(reconciler.Reconcile(key_).ok());
    ASSERT_EQ(reconciler.Solves(key_), 1);
  }
  // The pod cache catches up with the fake server.
  void SyncPods(const std::string& phase) {
    for (const kube::Object& p : client_.Pods(phase)) {
      pods_.Upsert(std::make_shared<const kube::Object>(p));
    }
  }
  // Nodes of two GPU types instead of SetUp's unlabelled ones: big-0 and big-1
  // ("big", 80 GiB) and small-0 ("small", 24 GiB), two GPUs each.
  void UseTypedNodes() {
    nodes_.Remove("a");
    nodes_.Remove("b");
    for (const auto& [name, type] : type_of_) {
      nodes_.Upsert(Ptr(TypedNode(name, 2, type, type == "big" ? "81920" : "24576")));
    }
  }
  size_t PodsCreated() const {
    size_t n = 0;
    for (const std::string& k : client_.created) n += k.rfind("pods/", 0) == 0 ? 1 : 0;
    return n;
  }
  const std::string key_ = "team-a/sweep";
  std::map<std::string, std::string> type_of_ = {
      {"big-0", "big"}, {"big-1", "big"}, {"small-0", "small"}};
  // Events go to the fake server (client_.Events) through a recorder, and
  // reconciler_ is made again to use it.
  void RecordEvents() {
    kube::EventRecorderOptions event_options;
    event_options.reporting_instance = "reconciler-test";
    recorder_ = std::make_unique<kube::EventRecorder>(&client_, event_options, &clock_);
    options_.events = recorder_.get();
    reconciler_ = std::make_unique<Reconciler>(
        &client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  }
  // The reason of the status's Degraded condition while True, else "".
  static std::string DegradedReason(const kube::Object& status) {
    for (const kube::Object& c : status["conditions"]) {
      if (c.value("type", "") == "Degraded" && c.value("status", "") == "True") return c["reason"];
    }
    return "";
  }
  FakeClient client_;
  kube::Store jobs_, pods_, nodes_, configmaps_;
  FakeClock clock_;
  ReconcilerOptions options_;
  std::unique_ptr<kube::EventRecorder> recorder_;  // RecordEvents; outlives reconciler_
  std::unique_ptr<Reconciler> reconciler_;
};

TEST_F(ReconcileTest, ASecondPassBeforeTheCacheSeesTheGangsCreatesNothing) {
  auto first = reconciler_->Reconcile(key_);
  ASSERT_TRUE(first.ok()) << first.status();
  size_t pods = PodsCreated();
  EXPECT_GT(pods, 0u);
  EXPECT_LE(pods, 4u);  // two nodes of two GPUs
  EXPECT_GT(first->requeue_after.count(), 0);
  // The pod cache is still empty: expectations stand in for the created gangs.
  auto second = reconciler_->Reconcile(key_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(PodsCreated(), pods);
  EXPECT_TRUE(client_.deleted.empty());
  EXPECT_EQ(reconciler_->Solves(key_), 1);
}

TEST_F(ReconcileTest, AFailedGangIsTornDownAndRelaunchedAtTheNextGeneration) {
  // gpt finished earlier (its status says so), so freed GPUs can only go back to
  // the failed task.
  api::ModelSelectionJobStatus status;
  api::TaskStatus gpt;
  gpt.name = loaded_.tasks[2].name;
  gpt.state = api::TaskState::kSucceeded;
  status.tasks.push_back(gpt);
  loaded_.job.status = status;
  PutJob();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  SyncPods("Running");
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  size_t before = PodsCreated();
  // One rank of the first gang fails: the gang is partial.
  kube::ObjectPtr victim = pods_.List().front();
  kube::Object failed = *victim;
  failed["status"]["phase"] = "Failed";
  pods_.Upsert(std::make_shared<const kube::Object>(failed));
  std::string task = failed["metadata"]["labels"][kTaskLabel];
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  std::string service = "services/team-a/" + GangServiceName("sweep", task, 0);
  EXPECT_NE(std::find(client_.deleted.begin(), client_.deleted.end(), service),
            client_.deleted.end());
  EXPECT_NE(
      std::find(client_.deleted.begin(), client_.deleted.end(), "pods/" + kube::KeyOf(failed)),
      client_.deleted.end());
  // Its surviving rank still holds a GPU until it is gone: no relaunch yet.
  std::string gen1 = "pods/team-a/" + GangPodName("sweep", task, 1, 0);
  EXPECT_EQ(std::count(client_.created.begin(), client_.created.end(), gen1), 0);
  // The deletes reach the cache; the task starts again, one generation later.
  for (const std::string& k : client_.deleted) {
    if (k.rfind("pods/", 0) == 0) pods_.Remove(k.substr(5));
  }
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  ASSERT_GT(PodsCreated(), before);
  bool generation_one = false;
  for (const std::string& k : client_.created) {
    generation_one = generation_one || k == "pods/team-a/" + GangPodName("sweep", task, 1, 0);
  }
  EXPECT_TRUE(generation_one);
}

TEST_F(ReconcileTest, SuspendDeletesLiveGangsAndReportsSuspended) {
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  SyncPods("Running");
  size_t live = client_.Pods("Running").size();
  ASSERT_GT(live, 0u);
  loaded_.job.spec.suspend = true;
  PutJob();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_TRUE(client_.Pods("Running").empty());
  size_t pod_deletes = 0;
  for (const std::string& k : client_.deleted) pod_deletes += k.rfind("pods/", 0) == 0 ? 1 : 0;
  EXPECT_EQ(pod_deletes, live);
  ASSERT_FALSE(client_.statuses.empty());
  EXPECT_EQ(client_.statuses.back()["phase"], "Suspended");
}

TEST_F(ReconcileTest, ARestartedOperatorKeepsRunningGangsAndCreatesNothing) {
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  SyncPods("Running");
  size_t created = client_.created.size();
  // A new operator: no engine, no plan, no expectations; only the cluster.
  Reconciler restarted(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  auto r = restarted.Reconcile(key_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(restarted.Solves(key_), 1);
  EXPECT_EQ(client_.created.size(), created);  // the nodes are full with the running gangs
  EXPECT_TRUE(client_.deleted.empty());
  ASSERT_FALSE(client_.statuses.empty());
  EXPECT_EQ(client_.statuses.back()["phase"], "Running");
}

TEST_F(ReconcileTest, AGangPendingPastTheTimeoutIsTornDownAndPlannedAgain) {
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  SyncPods("Pending");
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());  // first seen Pending now
  clock_.Advance(std::chrono::seconds(300));
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_TRUE(client_.deleted.empty());  // within the timeout
  // (The job's re-plan interval may have passed too: count solves from here.)
  const int solves = reconciler_->Solves(key_);
  clock_.Advance(std::chrono::seconds(301));
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  size_t pods = client_.Pods("Pending").size();
  EXPECT_EQ(pods, 0u);                                        // every gang was stuck: all torn down
  for (const std::string& k : pods_.Keys()) pods_.Remove(k);  // the deletes reach the cache
  auto again = reconciler_->Reconcile(key_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(reconciler_->Solves(key_), solves + 1);  // the plan was made again
  bool relaunched = false;
  for (const kube::Object& p : client_.Pods("Pending")) {
    relaunched = relaunched || p["metadata"]["annotations"][kGenerationAnnotation] == "1";
  }
  EXPECT_TRUE(relaunched);
}

// The job's first launch says where its checkpoints live and that the folder is
// keyed by its uid; later passes, relaunches and a restarted operator do not
// repeat it, and a job re-created under the same name says its own folder.
TEST_F(ReconcileTest, TheFirstLaunchSaysWhereTheJobsCheckpointsLive) {
  RecordEvents();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  ASSERT_GT(PodsCreated(), 0u);
  std::vector<kube::Object> said = client_.Events("CheckpointLocation");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0].value("type", ""), "Normal");
  EXPECT_EQ(said[0]["regarding"].value("uid", ""), loaded_.job.metadata.uid);
  const std::string note = said[0].value("note", "");
  EXPECT_EQ(note, CheckpointLocationNote(loaded_.job));
  EXPECT_NE(note.find("/ckpt/sweep-" + loaded_.job.metadata.uid + "/<task>"), std::string::npos)
      << note;
  EXPECT_NE(note.find("starts fresh"), std::string::npos) << note;
  EXPECT_NE(note.find("claim sweep-ckpt"), std::string::npos) << note;

  SyncPods("Running");
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  Reconciler restarted(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  ASSERT_TRUE(restarted.Reconcile(key_).ok());
  EXPECT_EQ(client_.Events("CheckpointLocation").size(), 1u);

  // Deleted (its pods go with it) and created again under the same name.
  for (const std::string& k : pods_.Keys()) pods_.Remove(k);
  loaded_.job.metadata.uid = "0b9e7d2c-1111-4000-8000-000000000002";
  PutJob();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  said = client_.Events("CheckpointLocation");
  ASSERT_EQ(said.size(), 2u);
  bool new_folder = false;
  for (const kube::Object& e : said) {
    new_folder = new_folder || e.value("note", "")
                                       .find(
                                           "/ckpt/sweep-0b9e7d2c-1111-4000-8000-"
                                           "000000000002/") != std::string::npos;
  }
  EXPECT_TRUE(new_folder);
}

TEST_F(ReconcileTest, MissingProfilesAreMeasuredByProfileGangsAndCached) {
  // The cache lacks the gpt task's profiles (task 2, its own signature).
  ASSERT_NO_FATAL_FAILURE(CacheProfilesButGpt());
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  std::vector<kube::Object> profile_pods;
  for (const kube::Object& p : client_.Pods("Succeeded")) {
    if (p["metadata"]["labels"].contains(kProfileLabel)) profile_pods.push_back(p);
  }
  ASSERT_EQ(profile_pods.size(), 3u);  // ddp on 1 rank and on 2 ranks
  EXPECT_EQ(client_.statuses.back()["tasks"][2]["state"], "Profiling");

  // The trials end; rank 0 of each writes its document as termination message.
  for (const kube::Object& p : profile_pods) {
    int world = std::stoi(p["metadata"]["annotations"][kWorldSizeAnnotation].get<std::string>());
    std::string doc = R"({"event":"profile","world_size":)" + std::to_string(world) +
                      R"(,"global_batch":8,"samples_per_s":)" + std::to_string(50 * world) +
                      R"(,"step_time_s":{"median":0.1,"p90":0.12},)"
                      R"("peak_memory_bytes":{"device_parameters":4096}})";
    Json done = testing::MakePod(Json::parse(p.dump())).Terminated("Completed", 0, doc);
    pods_.Upsert(Ptr(done));
  }
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  auto stored = client_.Get(kube::ConfigMaps(), "orrery-system", kProfileConfigMapName);
  ASSERT_TRUE(stored.ok());
  std::vector<api::FieldError> errors;
  ProfileTable merged = DecodeProfileConfigMap(Json::parse(stored->dump()), &errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(merged.size(), 4u);  // the two mlp variants share one signature: 2 + 2
  size_t profile_deletes = 0;
  for (const kube::Object& p : profile_pods) {
    profile_deletes +=
        std::count(client_.deleted.begin(), client_.deleted.end(), "pods/" + kube::KeyOf(p));
  }
  EXPECT_EQ(profile_deletes, profile_pods.size());

  // The pod cache sees the deletes before the ConfigMap cache sees the merge: the
  // trials are not started again, and the gpt task is planned like the others.
  for (const kube::Object& p : profile_pods) pods_.Remove(kube::KeyOf(p));
  size_t creates = client_.created.size();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  for (size_t k = creates; k < client_.created.size(); ++k) {
    EXPECT_EQ(client_.created[k].find("-prof-"), std::string::npos) << client_.created[k];
  }
  EXPECT_NE(client_.statuses.back()["tasks"][2]["state"], "Profiling");
}

// A profile trial no node takes waits no longer than a gang would: torn down
// past the gang timeout, and pinned again by a later pass.
TEST_F(ReconcileTest, AProfileTrialPendingPastTheTimeoutIsTornDown) {
  ASSERT_NO_FATAL_FAILURE(CacheProfilesButGpt());  // the gpt task's trials start
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  SyncPods("Pending");
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());  // first seen Pending
  auto profile_deletes = [&] {
    return std::count_if(client_.deleted.begin(), client_.deleted.end(), [](const std::string& k) {
      return k.find("-prof-") != std::string::npos;
    });
  };
  clock_.Advance(std::chrono::seconds(300));
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_EQ(profile_deletes(), 0) << "within the timeout";
  clock_.Advance(std::chrono::seconds(301));
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_GT(profile_deletes(), 0) << "past the timeout the trial is torn down";
}

// A task whose narrowest choice is wider than every node its pods may use
// says so in its status and in the Degraded condition, instead of waiting.
TEST_F(ReconcileTest, ATaskWiderThanEveryNodeSaysSo) {
  loaded_.job.spec.resources.gpus_per_task.min = 4;  // the nodes have 2 GPUs each
  loaded_.job.spec.resources.gpus_per_task.max = 4;
  loaded_.job.spec.profiling.gpu_counts = {4};
  PutJob();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  ASSERT_FALSE(client_.statuses.empty());
  const kube::Object& st = client_.statuses.back();
  EXPECT_NE(st["tasks"][0].value("message", "").find("needs at least 4 GPUs on one node"),
            std::string::npos)
      << st.dump();
  EXPECT_EQ(DegradedReason(st), "TaskNeverFits") << st.dump();
}

// Nodes of two GPU types (as in SetUp: every profile cached): the tasks
// restricted to one land only on its nodes, no gang spans the types, and the
// status names each task's type.
TEST_F(ReconcileTest, ATaskRestrictedToAGpuTypeRunsOnlyOnIt) {
  UseTypedNodes();
  // mlp (expanded tasks 0 and 1) on small only: the two share small-0's two
  // GPUs although the big nodes stand idle; gpt runs anywhere.
  loaded_.job.spec.tasks[0].gpu_types = {"small"};
  PutJob();
  for (int pass = 0; pass < 4; ++pass) {
    ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
    SyncPods("Running");
    clock_.Advance(std::chrono::seconds(30));
  }
  std::map<std::string, std::set<std::string>> types_by_gang;
  size_t mlp_pods = 0;
  for (const kube::Object& p : client_.Pods("Running")) {
    const Json& labels = p["metadata"]["labels"];
    if (!labels.contains(kGangLabel)) continue;
    const std::string node = p["spec"]["nodeName"];
    types_by_gang[labels[kGangLabel]].insert(type_of_[node]);
    if (labels[kGangLabel].get<std::string>().rfind("mlp", 0) == 0) {
      ++mlp_pods;
      EXPECT_EQ(node, "small-0") << "the mlp tasks may run on small GPUs only";
    }
  }
  EXPECT_GT(mlp_pods, 0u);
  EXPECT_GE(types_by_gang.size(), 2u);
  for (const auto& [gang, types] : types_by_gang) EXPECT_EQ(types.size(), 1u) << gang;
  ASSERT_FALSE(client_.statuses.empty());
  size_t typed = 0;
  for (const kube::Object& t : client_.statuses.back()["tasks"]) {
    if (!t.contains("config")) continue;
    const std::string node = t["config"]["nodes"][0];
    EXPECT_EQ(t["config"].value("gpuType", ""), type_of_[node]) << t.dump();
    ++typed;
  }
  EXPECT_GT(typed, 0u);
}

// With GPU type speeds the planner sees each type's estimated throughput: big
// is 8x faster, so gpt (a quarter of an mlp's samples) waits for a big node,
// done at 1.25x the mlps' time, rather than run on small, 2x (with speeds 4
// and 1 it does run on small, at 1x); without speeds small counts as fast as
// big and it starts there at once. Later passes keep the gangs (each matches
// its typed configuration).
TEST_F(ReconcileTest, GpuTypeSpeedsSendTasksToTheFasterType) {
  options_.gpu_type_speeds = {{"big", 8}, {"small", 1}};
  reconciler_ = std::make_unique<Reconciler>(
      &client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  UseTypedNodes();
  for (int pass = 0; pass < 4; ++pass) {
    ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
    SyncPods("Running");
    clock_.Advance(std::chrono::seconds(30));
  }
  size_t gang_pods = 0;
  for (const kube::Object& p : client_.Pods("Running")) {
    const Json& labels = p["metadata"]["labels"];
    if (!labels.contains(kGangLabel)) continue;
    ++gang_pods;
    EXPECT_EQ(type_of_[p["spec"]["nodeName"]], "big") << labels[kGangLabel];
  }
  EXPECT_GT(gang_pods, 0u);
  for (const std::string& k : client_.deleted) {
    EXPECT_EQ(k.rfind("pods/", 0), std::string::npos) << "a running gang was stopped: " << k;
  }
  ASSERT_FALSE(client_.statuses.empty());
}

// Without --gpu-type-speeds the operator measures them: a task profiled on
// big (every key cached there) gets one trial of its first key on small, on
// small-0, and plans meanwhile on big's figures (its gangs launch at once).
TEST_F(ReconcileTest, AnotherGpuTypesSpeedIsMeasuredByOneTrialThere) {
  UseTypedNodes();
  ProfileTable table;
  for (size_t t = 0; t < loaded_.tasks.size(); ++t) {
    for (int g : {1, 2}) {
      CachedProfile p = Measured(t, api::Template::kDdp, g, 100.0 * g);
      p.entry.device = "cuda/big";
      table[ProfileDataKey(p.entry)] = p;
    }
  }
  configmaps_.Upsert(Ptr(EncodeProfileConfigMap(table, "orrery-system")));
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  std::set<std::string> trial_nodes;
  for (const kube::Object& p : client_.Pods("Pending")) {
    if (!p["metadata"]["labels"].contains(kProfileLabel)) continue;
    trial_nodes.insert(PodNode(Json::parse(p.dump())));
  }
  EXPECT_EQ(trial_nodes, std::set<std::string>{"small-0"});
  size_t gang_pods = 0;
  for (const kube::Object& p : client_.Pods("Pending"))
    gang_pods += p["metadata"]["labels"].contains(kGangLabel) ? 1 : 0;
  EXPECT_GT(gang_pods, 0u) << "the tasks do not wait for the measurement";
}

// The plan's status: under makespan its lower bound in seconds from the
// plan's start; under weightedCompletionTime none (its bound is on the sum of
// weight x completion time, not a time), and the gap on that objective.
TEST_F(ReconcileTest, ThePlansLowerBoundIsAMakespanBoundOrNone) {
  for (api::Objective objective :
       {api::Objective::kMakespan, api::Objective::kWeightedCompletionTime}) {
    SetUp();
    loaded_.job.spec.scheduling.objective = objective;
    PutJob();
    ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
    ASSERT_FALSE(client_.statuses.empty());
    const kube::Object& plan = client_.statuses.back()["plan"];
    EXPECT_GT(plan.value("makespanSeconds", 0.0), 0);
    EXPECT_GE(plan.value("gap", -1.0), 0);
    if (objective == api::Objective::kMakespan) {
      EXPECT_GT(plan.value("lowerBoundSeconds", 0.0), 0) << plan.dump();
      EXPECT_LE(plan.value("lowerBoundSeconds", 0.0), plan.value("makespanSeconds", 0.0));
    } else {
      EXPECT_EQ(plan.value("lowerBoundSeconds", -1.0), 0) << plan.dump();
    }
  }
}

// The profile trials of a task restricted to a type run on nodes of that type.
TEST_F(ReconcileTest, ARestrictedTasksTrialsRunOnItsType) {
  UseTypedNodes();
  loaded_.job.spec.tasks[1].gpu_types = {"small"};
  PutJob();
  ASSERT_NO_FATAL_FAILURE(CacheProfilesButGpt());
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  size_t trials = 0;
  for (const kube::Object& p : client_.Pods("Pending")) {
    if (!p["metadata"]["labels"].contains(kProfileLabel)) continue;
    EXPECT_EQ(PodNode(Json::parse(p.dump())), "small-0") << p.dump();
    ++trials;
  }
  EXPECT_GT(trials, 0u);
}

// A type no node carries is allowed, and said: the task waits with a message
// and the Degraded condition TaskNeverFits, the others run.
TEST_F(ReconcileTest, AGpuTypeNoNodeHasIsSaidAndTheOtherTasksRun) {
  nodes_.Upsert(Ptr(TypedNode("a", 2, "big")));
  nodes_.Upsert(Ptr(TypedNode("b", 2, "big")));
  loaded_.job.spec.tasks[1].gpu_types = {"NVIDIA-L4"};
  PutJob();
  RecordEvents();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  ASSERT_FALSE(client_.statuses.empty());
  const kube::Object& st = client_.statuses.back();
  EXPECT_NE(st["tasks"][2].value("message", "").find("spec.tasks[].gpuTypes: NVIDIA-L4"),
            std::string::npos)
      << st.dump();
  EXPECT_EQ(DegradedReason(st), "TaskNeverFits") << st.dump();
  EXPECT_FALSE(client_.Events("TaskNeverFits").empty());
  size_t gang_pods = 0;
  for (const kube::Object& p : client_.Pods("Running")) {
    EXPECT_EQ(p["metadata"]["name"].get<std::string>().find("gpt"), std::string::npos);
    gang_pods += p["metadata"]["labels"].contains(kGangLabel) ? 1 : 0;
  }
  EXPECT_GT(gang_pods, 0u);
}

// A task whose every profiled configuration needs more memory per GPU than
// the nodes' GPUs give a configuration (their memory labels less the reserve
// for CUDA's context, NCCL and the allocator) is said, with the least it
// needs, and stays out of the plan: the job's other tasks run (the planner
// would refuse the whole problem for it). Its 23 GiB would fit the label's
// 24: planned so, it would run out of memory on the device.
TEST_F(ReconcileTest, ATaskOverEveryNodesMemorySaysSoAndTheOtherTasksRun) {
  nodes_.Upsert(Ptr(TypedNode("a", 2, "small", "24576")));
  nodes_.Upsert(Ptr(TypedNode("b", 2, "small", "24576")));
  constexpr double kGib = 1024.0 * 1024.0 * 1024.0;
  ProfileTable table;
  for (size_t t = 0; t < loaded_.tasks.size(); ++t) {
    for (int g : {1, 2}) {
      CachedProfile p = Measured(t, api::Template::kDdp, g, 100.0 * g);
      p.entry.peak_memory_bytes = (t == 2 ? 23 : 2) * kGib;  // the GPT task: 23 GiB
      table[ProfileDataKey(p.entry)] = p;
    }
  }
  Json cm = EncodeProfileConfigMap(table, "orrery-system");
  configmaps_.Upsert(Ptr(cm));
  RecordEvents();
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
    SyncPods("Running");
    clock_.Advance(std::chrono::seconds(30));
  }
  ASSERT_FALSE(client_.statuses.empty());
  const kube::Object& st = client_.statuses.back();
  const std::string message = st["tasks"][2].value("message", "");
  EXPECT_NE(message.find("needs more GPU memory than a node its pods may use has"),
            std::string::npos)
      << st.dump();
  EXPECT_NE(message.find("the nodes' GPUs give a configuration at most 21.4 GiB (24.0 GiB by "
                         "label nvidia.com/gpu.memory, less the reserve"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("spec.resources.templates"), std::string::npos) << message;
  EXPECT_EQ(DegradedReason(st), "TaskNeverFits") << st.dump();
  EXPECT_FALSE(client_.Events("TaskNeverFits").empty());
  size_t gang_pods = 0;
  for (const kube::Object& p : client_.Pods("Running")) {
    if (!p["metadata"]["labels"].contains(kGangLabel)) continue;
    EXPECT_EQ(p["metadata"]["name"].get<std::string>().find("gpt"), std::string::npos);
    ++gang_pods;
  }
  EXPECT_GT(gang_pods, 0u) << "the tasks that fit run";
}

// The message names the least memory any configuration needs; one
// configuration that fits a node, an unlabelled node, or configurations not
// yet profiled say nothing.
TEST_F(ReconcilerPureTest, ConfigsNeverFitNamesTheLeastMemoryNeeded) {
  TaskConfigs tc = OneDdpConfigEach(1, 1)[0];
  tc.configs[0].memory_gib = 40;
  tc.configs.push_back(tc.configs[0]);
  tc.configs[1].gpus = 2;
  tc.configs[1].memory_gib = 30;
  tc.configs[1].recompute = "full";
  std::vector<NodeCapacity> nodes = {{"a", 8, 0, "l4", 24}, {"b", 8, 0, "l4", 24}};
  api::TaskSpec task;
  const std::string why = ConfigsNeverFit(tc, task, nodes);
  EXPECT_NE(why.find("the least is ddp on 2 GPUs (recompute full) at 30.0 GiB per GPU"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("at most 24.0 GiB"), std::string::npos) << why;
  nodes.push_back({"c", 2, 0, "a100", 40});
  EXPECT_EQ(ConfigsNeverFit(tc, task, nodes), "");
  task.gpu_types = {"l4"};  // the a100 node is not the task's
  EXPECT_NE(ConfigsNeverFit(tc, task, nodes), "");
  nodes.push_back({"d", 2, 0, "l4", 0});  // unlabelled: memory unknown
  EXPECT_EQ(ConfigsNeverFit(tc, task, nodes), "");
  EXPECT_EQ(ConfigsNeverFit(TaskConfigs{}, task, nodes), "");
}

TEST_F(ReconcileTest, AnInvalidSpecIsRecordedOnceAndNotRetried) {
  loaded_.job.spec.resources.gpu_quota = 0;  // required
  PutJob();
  auto r = reconciler_->Reconcile(key_);
  ASSERT_TRUE(r.ok()) << r.status();  // an error would be retried
  EXPECT_EQ(r->requeue_after.count(), 0);
  EXPECT_TRUE(client_.created.empty());
  ASSERT_EQ(client_.statuses.size(), 1u);
  const kube::Object& status = client_.statuses.back();
  EXPECT_EQ(status["phase"], "Failed");
  bool invalid = false;
  for (const kube::Object& c : status["conditions"]) {
    invalid = invalid || (c["type"] == "Degraded" && c["reason"] == "InvalidSpec" &&
                          c["message"].get<std::string>().find("gpuQuota") != std::string::npos);
  }
  EXPECT_TRUE(invalid) << status.dump();
  // The cache catches up with the write: the next pass writes nothing.
  std::vector<api::FieldError> errors;
  api::ModelSelectionJobStatus stored;
  api::DecodeStatus(Json::parse(status.dump()), "status", &stored, &errors);
  ASSERT_TRUE(errors.empty());
  loaded_.job.status = stored;
  PutJob();
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_EQ(client_.statuses.size(), 1u);
}

// Valid anywhere but not in a cluster: an export that no claim of the pods
// would keep is refused like an invalid spec, before anything runs.
TEST_F(ReconcileTest, AnExportOnNoClaimIsAnInvalidSpecInACluster) {
  api::TaskSpec& gpt = loaded_.job.spec.tasks[1];
  gpt.output = api::OutputSpec{"/models/out"};
  PutJob();
  auto r = reconciler_->Reconcile(key_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->requeue_after.count(), 0);
  EXPECT_TRUE(client_.created.empty());
  ASSERT_EQ(client_.statuses.size(), 1u);
  const kube::Object& status = client_.statuses.back();
  EXPECT_EQ(status["phase"], "Failed");
  bool invalid = false;
  for (const kube::Object& c : status["conditions"]) {
    invalid =
        invalid || (c["reason"] == "InvalidSpec" &&
                    c["message"].get<std::string>().find(
                        "spec.tasks[1].output.path: \"/models/out\" is on no persistent volume") !=
                        std::string::npos);
  }
  EXPECT_TRUE(invalid) << status.dump();
}

TEST_F(ReconcileTest, ADeletedJobEndsTheWorkAndForgetsItsEngine) {
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_EQ(reconciler_->Solves(key_), 1);
  jobs_.Remove(key_);
  auto r = reconciler_->Reconcile(key_);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->requeue);
  EXPECT_EQ(r->requeue_after.count(), 0);
  EXPECT_EQ(reconciler_->Solves(key_), 0);
}

// The job's gpuQuota caps the GPUs all its gangs hold at once (2 here, on a
// cluster of 4), through the plan and through every launch.
TEST_F(ReconcileTest, TheQuotaCapsGpusHeldAcrossTheJobsTasks) {
  loaded_.job.spec.resources.gpu_quota = 2;
  PutJob();
  auto held = [&] {
    int gpus = 0;
    for (const kube::ObjectPtr& p : pods_.List()) {
      std::string phase = (*p)["status"]["phase"];
      if (phase != "Succeeded" && phase != "Failed") ++gpus;  // one GPU per rank
    }
    return gpus;
  };
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_EQ(PodsCreated(), 2u);
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());  // the cache has not caught up
  EXPECT_EQ(PodsCreated(), 2u);
  SyncPods("Running");
  ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
  EXPECT_EQ(PodsCreated(), 2u);
  EXPECT_EQ(held(), 2);
  // Gangs finish one pass at a time; the next start only within the quota.
  for (int round = 0; round < 4 && PodsCreated() < 6; ++round) {
    for (const kube::ObjectPtr& p : pods_.List()) {
      kube::Object done = *p;
      done["status"]["phase"] = "Succeeded";
      pods_.Upsert(std::make_shared<const kube::Object>(done));
    }
    ASSERT_TRUE(reconciler_->Reconcile(key_).ok());
    SyncNewPods(client_, &pods_);
    EXPECT_LE(held(), 2) << "round " << round;
  }
  EXPECT_GT(PodsCreated(), 2u);  // the rest of the work did start as GPUs came back
}

// A running gang that an adopted plan moves is stopped gracefully (its ranks
// checkpoint on SIGTERM and exit 0) and relaunched in its new configuration; its
// preempted ranks are not mistaken for a finished task. The operator that finds
// the gang keeps it at its start (a restart churns nothing); the periodic
// re-plan moves it.
TEST_F(ReconcileTest, APlanThatMovesARunningGangStopsItAndRelaunchesItThere) {
  api::ModelSelectionJobStatus status;
  for (size_t t : {1u, 2u}) {
    api::TaskStatus done;
    done.name = loaded_.tasks[t].name;
    done.state = api::TaskState::kSucceeded;
    status.tasks.push_back(done);
  }
  loaded_.job.status = status;
  PutJob();
  const std::string task = loaded_.tasks[0].name;
  // Left running on one GPU by an earlier operator; two would halve its time.
  std::vector<Json> gang = GangPods(0, {"a"}, "Running");
  for (const Json& p : gang) {
    pods_.Upsert(Ptr(p));
    ASSERT_TRUE(client_.Create(kube::Pods(), "team-a", *Ptr(p)).ok());
  }
  const size_t existing = PodsCreated();
  options_.engine.switch_cost_s = 0.5;
  Reconciler reconciler(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  std::string rank0 = "pods/team-a/" + GangPodName("sweep", task, 0, 0);
  EXPECT_EQ(std::find(client_.deleted.begin(), client_.deleted.end(), rank0), client_.deleted.end())
      << "the start keeps the gang it finds";
  clock_.Advance(std::chrono::seconds(static_cast<int64_t>(options_.engine.replan_interval_s) + 1));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_NE(std::find(client_.deleted.begin(), client_.deleted.end(), rank0), client_.deleted.end())
      << "the interval's re-plan moves it";
  EXPECT_EQ(PodsCreated(), existing) << "its rank still holds the GPU until it is gone";
  ASSERT_FALSE(client_.statuses.empty());
  // The rank checkpointed and exited 0 while being deleted: a preemption.
  pods_.Upsert(Ptr(testing::MakePod(gang[0]).Phase("Succeeded").Deleting().json()));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  ASSERT_FALSE(client_.statuses.empty());
  for (const auto& t : client_.statuses.back()["tasks"]) {
    if (t["name"] == task) {
      EXPECT_EQ(t["state"], "Rescaling") << t.dump();
    }
  }
  std::vector<std::string> relaunched;
  for (const kube::Object& p : client_.Pods("Pending")) {
    if (p["metadata"]["annotations"][kGenerationAnnotation] == "1")
      relaunched.push_back(p["metadata"]["name"]);
  }
  EXPECT_EQ(relaunched.size(), 2u) << "relaunched as ddp x 2, one generation later";
}

// Two jobs share the cluster through the cluster-wide allocation
// (engine/cluster_share.h). The first job, alone, fills the cluster; the second
// arrives and waits. When the first wave finishes, the first job reconciles
// first: without shares it takes every freed GPU for its own queued tasks and
// the second job keeps waiting; with them, the allocation splits the GPUs over
// both jobs' tasks, the first launches within its share and the second then
// launches within its own.
TEST_F(ReconcileTest, TwoJobsShareTheClusterByTheAllocation) {
  std::string yaml = testing::kJobYaml;
  const std::string grid = "learningRate: [1e-3, 3e-4]";
  yaml.replace(yaml.find(grid), grid.size(), "learningRate: [1e-3, 3e-4, 1e-4, 3e-5]");
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "with cluster shares" : "first come, first served");
    FakeClient client;
    kube::Store jobs, pods;
    std::vector<std::string> woken;
    ReconcilerOptions options = options_;
    options.cluster_shares = shared;
    options.enqueue = [&](const std::string& k) { woken.push_back(k); };
    Reconciler reconciler(&client, Caches{&jobs, &pods, &nodes_, &configmaps_}, options, &clock_);
    api::LoadedJob first = testing::LoadJob(yaml);               // 5 tasks: 4 mlp, gpt
    first.job.spec.resources.templates = {api::Template::kDdp};  // as profiled in SetUp
    first.job.spec.profiling.gpu_counts = {1, 2};
    first.job.spec.resources.gpus_per_task.max = 2;
    api::ModelSelectionJob second = first.job;
    second.metadata.name = "other";
    second.metadata.namespace_ = "team-b";
    second.metadata.uid = "6f1d2c3a-0000-4000-8000-000000000002";
    const std::string second_key = "team-b/other";
    // GPUs held by a job's gangs that have not finished (one per rank).
    auto held = [&](const std::string& job_label) {
      int gpus = 0;
      for (const kube::Object& p : client.Pods("Running")) {
        if (p["metadata"]["labels"][kJobLabel] != job_label) continue;
        kube::ObjectPtr seen = pods.Get(kube::KeyOf(p));
        if (!seen || (*seen)["status"]["phase"] != "Succeeded") ++gpus;
      }
      return gpus;
    };
    auto sync_new = [&] { SyncNewPods(client, &pods); };

    jobs.Upsert(Ptr(api::EncodeJob(first.job)));
    ASSERT_TRUE(reconciler.Reconcile(key_).ok());
    EXPECT_EQ(held("sweep"), 4) << "alone, the first job may use the whole cluster";
    sync_new();
    jobs.Upsert(Ptr(api::EncodeJob(second)));
    ASSERT_TRUE(reconciler.Reconcile(second_key).ok());
    EXPECT_EQ(held("other"), 0) << "nothing is free";

    clock_.Advance(std::chrono::seconds(60));
    for (const kube::ObjectPtr& p : pods.List()) {  // the first wave finishes
      kube::Object done = *p;
      done["status"]["phase"] = "Succeeded";
      pods.Upsert(std::make_shared<const kube::Object>(done));
    }
    woken.clear();
    ASSERT_TRUE(reconciler.Reconcile(key_).ok());
    sync_new();
    ASSERT_TRUE(reconciler.Reconcile(second_key).ok());
    const int mine = held("sweep"), theirs = held("other");
    EXPECT_LE(mine + theirs, 4);
    if (!shared) {
      EXPECT_EQ(mine, 4) << "first come, first served: the first job takes every freed GPU";
      EXPECT_EQ(theirs, 0);
      continue;
    }
    EXPECT_GT(mine, 0);
    EXPECT_LT(mine, 4) << "the freed GPUs are shared out, not all the first job's";
    EXPECT_GT(theirs, 0) << "the second job launched within its share";
    EXPECT_NE(std::find(woken.begin(), woken.end(), second_key), woken.end())
        << "a new allocation wakes the other jobs";
  }
}

// The cluster share stops a running gang when its decision shrinks it: a long
// job holds the whole cluster, a short one arrives, and with cheap rescales the
// allocation gives the short one GPUs now. The long job's next pass stops the
// gang gracefully (a Rescale, not a failure), and the short job launches on the
// GPUs once its ranks are gone.
TEST_F(ReconcileTest, TheClusterShareStopsARunningGangItShrinks) {
  std::string yaml = testing::kJobYaml;
  const std::string steps = "steps: 100\n";
  yaml.replace(yaml.find(steps), steps.size(), "steps: 100000\n");  // the mlp tasks: hours
  api::LoadedJob first = testing::LoadJob(yaml);
  first.job.spec.resources.templates = {api::Template::kDdp};  // as profiled in SetUp
  first.job.spec.profiling.gpu_counts = {1, 2};
  first.job.spec.resources.gpus_per_task.max = 2;
  api::ModelSelectionJob second = loaded_.job;  // short tasks
  second.metadata.name = "other";
  second.metadata.namespace_ = "team-b";
  second.metadata.uid = "6f1d2c3a-0000-4000-8000-000000000002";
  const std::string second_key = "team-b/other";
  options_.engine.switch_cost_s = 0.5;  // a restart costs half a second
  Reconciler reconciler(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  auto held = [&](const std::string& job_label) {
    int gpus = 0;
    for (const kube::ObjectPtr& p : pods_.List()) {
      if ((*p)["metadata"]["labels"][kJobLabel] != job_label) continue;
      std::string phase = (*p)["status"]["phase"];
      if (phase != "Succeeded" && phase != "Failed") ++gpus;  // one GPU per rank
    }
    return gpus;
  };
  auto sync_new = [&] { SyncNewPods(client_, &pods_); };

  jobs_.Upsert(Ptr(api::EncodeJob(first.job)));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  sync_new();
  ASSERT_EQ(held("sweep"), 4);
  clock_.Advance(std::chrono::seconds(600));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());  // the gangs run
  clock_.Advance(std::chrono::seconds(10));      // past the allocation's dwell time
  jobs_.Upsert(Ptr(api::EncodeJob(second)));
  ASSERT_TRUE(reconciler.Reconcile(second_key).ok());
  EXPECT_EQ(held("other"), 0) << "nothing is free yet";

  const size_t deleted_before = client_.deleted.size();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  std::vector<std::string> stopped;
  for (size_t i = deleted_before; i < client_.deleted.size(); ++i) {
    if (client_.deleted[i].rfind("pods/team-a/", 0) == 0) stopped.push_back(client_.deleted[i]);
  }
  ASSERT_FALSE(stopped.empty()) << "the long job stops the gang the share shrinks";
  // Its ranks checkpoint and exit 0 while being deleted: a rescale, not a failure.
  for (const std::string& k : stopped) {
    kube::ObjectPtr p = pods_.Get(k.substr(std::string("pods/").size()));
    ASSERT_TRUE(p) << k;
    pods_.Upsert(
        Ptr(testing::MakePod(Json::parse(p->dump())).Phase("Succeeded").Deleting().json()));
  }
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  ASSERT_FALSE(client_.statuses.empty());
  bool rescaling = false;
  for (const auto& t : client_.statuses.back()["tasks"]) rescaling |= t["state"] == "Rescaling";
  EXPECT_TRUE(rescaling) << client_.statuses.back().dump();
  for (const std::string& k : stopped) pods_.Remove(k.substr(std::string("pods/").size()));
  ASSERT_TRUE(reconciler.Reconcile(second_key).ok());
  sync_new();
  EXPECT_GT(held("other"), 0) << "the short job runs on the GPUs the share gave it";
  EXPECT_LE(held("sweep") + held("other"), 4);
}

// Issue 20's held-out case through the controller: a gpuQuota edited down
// under what the job's gangs hold stops (gracefully: deleted, their ranks
// checkpoint) the gangs over it in the pass that sees the edit, with a Rescale
// event that names the quota; edited back up, the job re-plans and launches.
TEST_F(ReconcileTest, AQuotaEditedDownStopsWhatExceedsItInOnePassAndUpLaunchesAgain) {
  std::string yaml = testing::kJobYaml;
  const std::string steps = "steps: 100\n";
  yaml.replace(yaml.find(steps), steps.size(), "steps: 100000\n");  // the mlp tasks: hours
  api::LoadedJob job = testing::LoadJob(yaml);
  job.job.spec.resources.templates = {api::Template::kDdp};  // as profiled in SetUp
  job.job.spec.profiling.gpu_counts = {1, 2};
  job.job.spec.resources.gpus_per_task.max = 2;
  job.job.spec.resources.gpu_quota = 4;
  options_.engine.switch_cost_s = 0.5;
  RecordEvents();
  Reconciler reconciler(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  auto held = [&] {
    int gpus = 0;
    for (const kube::ObjectPtr& p : pods_.List()) {
      std::string phase = (*p)["status"]["phase"];
      if (phase != "Succeeded" && phase != "Failed") ++gpus;  // one GPU per rank
    }
    return gpus;
  };
  jobs_.Upsert(Ptr(api::EncodeJob(job.job)));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  SyncNewPods(client_, &pods_);
  ASSERT_EQ(held(), 4);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());  // the gangs run

  // 4 -> 2: one pass stops what exceeds the quota.
  job.job.spec.resources.gpu_quota = 2;
  job.job.metadata.generation += 1;
  jobs_.Upsert(Ptr(api::EncodeJob(job.job)));
  const size_t deleted_before = client_.deleted.size();
  const size_t rescale_events = client_.Events("Rescale").size();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  std::set<std::string> stopped;
  for (size_t i = deleted_before; i < client_.deleted.size(); ++i) {
    if (client_.deleted[i].rfind("pods/team-a/", 0) == 0) stopped.insert(client_.deleted[i]);
  }
  EXPECT_EQ(held() - static_cast<int>(stopped.size()), 2)
      << "the gangs left running hold exactly the new quota";
  std::vector<kube::Object> events = client_.Events("Rescale");
  ASSERT_GT(events.size(), rescale_events);
  EXPECT_NE(events.back().value("note", "").find("quota of 2"), std::string::npos)
      << events.back().dump();
  // The stopped ranks checkpoint, exit 0 and go; nothing new starts over the quota.
  for (const std::string& k : stopped) pods_.Remove(k.substr(std::string("pods/").size()));
  const size_t created = PodsCreated();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  SyncNewPods(client_, &pods_);
  EXPECT_LE(held(), 2);

  // 2 -> 4: the next pass re-plans and launches onto the freed GPUs.
  job.job.spec.resources.gpu_quota = 4;
  job.job.metadata.generation += 1;
  jobs_.Upsert(Ptr(api::EncodeJob(job.job)));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  SyncNewPods(client_, &pods_);
  EXPECT_GT(PodsCreated(), created);
  EXPECT_EQ(held(), 4);
}

// spec.resources edited on a running job (a new image, a node selector): each
// running gang made under the old settings is stopped gracefully in the pass
// that sees the edit (a SpecChanged event, engine stop "spec"), once, and runs
// again as planned under the new settings when its ranks are gone.
TEST_F(ReconcileTest, EditedPodSettingsRestartRunningGangsUnderThemOnce) {
  std::string yaml = testing::kJobYaml;
  const std::string steps = "steps: 100\n";
  yaml.replace(yaml.find(steps), steps.size(), "steps: 100000\n");  // the mlp tasks: hours
  api::LoadedJob job = testing::LoadJob(yaml);
  job.job.spec.resources.templates = {api::Template::kDdp};  // as profiled in SetUp
  job.job.spec.profiling.gpu_counts = {1, 2};
  job.job.spec.resources.gpus_per_task.max = 2;
  job.job.spec.resources.gpu_quota = 4;
  RecordEvents();
  Reconciler reconciler(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  jobs_.Upsert(Ptr(api::EncodeJob(job.job)));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  SyncNewPods(client_, &pods_);
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());  // the gangs run
  std::set<std::string> before;
  for (const kube::ObjectPtr& p : pods_.List()) before.insert((*p)["metadata"]["name"]);
  ASSERT_FALSE(before.empty());
  const std::string old_settings = PodSettingsDigest(job.job.spec.resources);
  for (const kube::ObjectPtr& p : pods_.List()) {
    EXPECT_EQ((*p)["metadata"]["annotations"].value(kPodSettingsAnnotation, ""), old_settings);
  }

  // A scheduling edit is not a pod edit: nothing restarts.
  job.job.spec.scheduling.replan_interval_seconds = 900;
  job.job.metadata.generation += 1;
  jobs_.Upsert(Ptr(api::EncodeJob(job.job)));
  size_t deleted_before = client_.deleted.size();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(client_.deleted.size(), deleted_before);

  job.job.spec.resources.image = "registry.example.com/team/worker:2";
  job.job.spec.resources.node_selector["pool"] = "a100";
  job.job.metadata.generation += 1;
  jobs_.Upsert(Ptr(api::EncodeJob(job.job)));
  for (const char* n : {"a", "b"}) {  // the nodes carry the label
    kube::ObjectPtr node = nodes_.Get(n);
    ASSERT_TRUE(node) << n;
    kube::Object labelled = *node;
    labelled["metadata"]["labels"]["pool"] = "a100";
    nodes_.Upsert(Ptr(labelled));
  }
  deleted_before = client_.deleted.size();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  std::set<std::string> stopped;
  for (size_t i = deleted_before; i < client_.deleted.size(); ++i) {
    if (client_.deleted[i].rfind("pods/team-a/", 0) == 0) {
      stopped.insert(client_.deleted[i].substr(std::string("pods/team-a/").size()));
    }
  }
  EXPECT_EQ(stopped, before) << "every gang made under the old settings stops";
  std::vector<kube::Object> events = client_.Events("SpecChanged");
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().value("note", "").find("checkpoints first"), std::string::npos)
      << events.back().dump();
  const engine::ActionJournal journal = reconciler.Journal(key_);
  int spec_stops = 0;
  for (const engine::JournalEntry& e : journal.entries()) {
    spec_stops += e.kind == "stop" && e.detail == "spec" ? 1 : 0;
  }
  EXPECT_GT(spec_stops, 0);
  EXPECT_TRUE(journal.violations().empty()) << journal.violations().front();

  // The cache has not seen the ranks go yet: no second stop.
  deleted_before = client_.deleted.size();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(client_.deleted.size(), deleted_before);
  EXPECT_EQ(reconciler.Journal(key_).entries().size(), journal.entries().size());

  // The operator restarts while the stopped ranks checkpoint (the server marks
  // them deleted): the new one reads the stop from the status it was told, so
  // their going is no failure and no restart of the task.
  ASSERT_FALSE(client_.statuses.empty());
  api::ModelSelectionJob with_status = job.job;
  with_status.status.emplace();
  std::vector<api::FieldError> status_errors;
  api::DecodeStatus(client_.statuses.back(), "status", &*with_status.status, &status_errors);
  ASSERT_TRUE(status_errors.empty()) << status_errors.front().message;
  int stopping = 0;
  for (const api::TaskStatus& t : with_status.status->tasks) {
    stopping += StoppingForPlanGeneration(t.message) == 0 ? 1 : 0;
  }
  EXPECT_GT(stopping, 0) << client_.statuses.back().dump();
  jobs_.Upsert(Ptr(api::EncodeJob(with_status)));
  for (const std::string& name : stopped) {
    kube::ObjectPtr p = pods_.Get("team-a/" + name);
    ASSERT_TRUE(p) << name;
    kube::Object going = *p;
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    pods_.Upsert(Ptr(going));
  }
  Reconciler restarted(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  const size_t failed_events = client_.Events("GangFailed").size();
  ASSERT_TRUE(restarted.Reconcile(key_).ok());
  EXPECT_EQ(client_.Events("GangFailed").size(), failed_events) << "a stop, not a failure";
  int rescaling = 0;
  for (const kube::Object& t : client_.statuses.back()["tasks"]) {
    EXPECT_EQ(t.value("restarts", 0), 0) << t.dump();
    rescaling += t.value("state", "") == "Rescaling" ? 1 : 0;
  }
  EXPECT_EQ(rescaling, stopping) << client_.statuses.back().dump();

  // The ranks checkpoint and go; the tasks run again under the new settings.
  for (const std::string& name : stopped) pods_.Remove("team-a/" + name);
  ASSERT_TRUE(restarted.Reconcile(key_).ok());
  SyncNewPods(client_, &pods_);
  const std::string new_settings = PodSettingsDigest(job.job.spec.resources);
  EXPECT_NE(new_settings, old_settings);
  int relaunched = 0;
  for (const kube::ObjectPtr& p : pods_.List()) {
    if (before.count((*p)["metadata"]["name"]) > 0) continue;
    ++relaunched;
    EXPECT_EQ((*p)["metadata"]["annotations"].value(kPodSettingsAnnotation, ""), new_settings);
    EXPECT_EQ((*p)["spec"]["containers"][0].value("image", ""), job.job.spec.resources.image);
    EXPECT_EQ((*p)["spec"]["nodeSelector"].value("pool", ""), "a100");
  }
  EXPECT_EQ(relaunched, static_cast<int>(before.size()));
  EXPECT_TRUE(restarted.Journal(key_).violations().empty());
}

// Measured speed reaches the engine: a gang that trains at half its profiled
// speed makes the next pass plan again with what was measured, once.
TEST_F(ReconcileTest, AGangSlowerThanItsProfilePlansAgainOnce) {
  ProgressBoard board;
  options_.progress = &board;
  Reconciler reconciler(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  ASSERT_NO_FATAL_FAILURE(LaunchAndRun(reconciler));
  // Every running gang reports: ddp ranks each train their share of the batch,
  // the profile says 100 samples/s per GPU, the gangs make half of that.
  std::map<std::string, int> ranks;
  for (const kube::ObjectPtr& p : pods_.List()) ++ranks[(*p)["metadata"]["labels"][kTaskLabel]];
  ASSERT_FALSE(ranks.empty());
  for (const auto& [task, n] : ranks) {
    TaskProgress p;
    p.generation = 0;
    p.step = 10;
    p.samples_per_second = 50;  // per rank: 50 × n of the 100 × n profiled
    ASSERT_TRUE(board.Set(key_, task, p));
  }
  clock_.Advance(std::chrono::seconds(30));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(reconciler.Solves(key_), 2) << "the drift is a trigger";
  clock_.Advance(std::chrono::seconds(30));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(reconciler.Solves(key_), 2) << "the plan already knows the measured speed";
}

// spec.scheduling edited on a running job takes effect without a restart: the
// next pass solves again under it (trigger spec-changed), then not again.
TEST_F(ReconcileTest, EditedSchedulingSettingsArePlannedWithAtTheNextPass) {
  Reconciler reconciler(&client_, Caches{&jobs_, &pods_, &nodes_, &configmaps_}, options_, &clock_);
  ASSERT_NO_FATAL_FAILURE(LaunchAndRun(reconciler));
  api::ModelSelectionJob edited = loaded_.job;
  edited.spec.scheduling.replan_interval_seconds = 120;
  edited.spec.scheduling.min_switch_gain = 0.2;
  edited.metadata.generation += 1;
  jobs_.Upsert(Ptr(api::EncodeJob(edited)));
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(reconciler.Solves(key_), 2) << "the edit is a trigger";
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(reconciler.Solves(key_), 2) << "once";
  // The new interval is what counts: 120 s later the job plans again.
  clock_.Advance(std::chrono::seconds(121));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(reconciler.Solves(key_), 3);
}

TEST(MeasuredSpeedFactor, ScalesRankZerosShareByTheReplicas) {
  planner::Config ddp;
  ddp.template_name = "ddp";
  ddp.gpus = 4;
  ddp.throughput = 400;
  TaskProgress p;
  p.generation = 3;
  p.step = 5;
  p.samples_per_second = 50;  // a quarter of the batch each
  EXPECT_DOUBLE_EQ(*MeasuredSpeedFactor(p, 3, ddp), 0.5);
  planner::Config tensor = ddp;
  tensor.template_name = "tensor";  // every rank sees the whole batch
  EXPECT_DOUBLE_EQ(*MeasuredSpeedFactor(p, 3, tensor), 0.125);
  EXPECT_FALSE(MeasuredSpeedFactor(p, 2, ddp).has_value()) << "another gang's reading";
  p.step = 1;
  EXPECT_FALSE(MeasuredSpeedFactor(p, 3, ddp).has_value()) << "still warming up";
}

TEST_F(ReconcilerPureTest, ElasticConfigsCarryTheirBatchAndSoDoMissingKeys) {
  api::ModelSelectionJobSpec& spec = loaded_.job.spec;
  spec.resources.templates = {api::Template::kDdp};
  spec.profiling.gpu_counts = {1, 4};
  spec.elasticity.enabled = true;
  spec.elasticity.min_batch_size = 1;
  spec.elasticity.max_batch_size = 1 << 20;
  const int64_t own = loaded_.tasks[0].task.training.batch_size;
  ProfileTable table;
  CachedProfile p = Measured(0, api::Template::kDdp, 1, 120);
  p.entry.batch_size = 2 * own;  // measured at twice the task's batch
  table[ProfileDataKey(p.entry)] = p;
  TaskConfigs tc = ConfigsFromProfiles(spec, loaded_.tasks[0], table, "cuda", 8);
  ASSERT_EQ(tc.configs.size(), 1u);
  EXPECT_EQ(tc.configs[0].batch_size, 2 * own);
  EXPECT_DOUBLE_EQ(tc.configs[0].throughput, 120);
  bool own_missing = false;
  for (const engine::ProfileKeyRef& m : tc.missing) {
    own_missing = own_missing || (m.gpus == 1 && m.batch_size == own);
  }
  EXPECT_TRUE(own_missing);
}

// Kueue (kueue.h): a job labelled for a queue creates its Workload and no pod
// until Kueue admits it, then launches within the admitted GPUs.
TEST_F(ReconcileTest, AJobLabelledForKueueRunsNoPodUntilAdmittedThenKeepsWithinIt) {
  kube::Store workloads, flavors;
  Caches caches{&jobs_, &pods_, &nodes_, &configmaps_};
  caches.kueue = {&workloads, &flavors};
  Reconciler reconciler(&client_, caches, options_, &clock_);
  loaded_.job.metadata.labels[kKueueQueueLabel] = "lq";
  PutJob();
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(PodsCreated(), 0u);
  auto wl = client_.Get(Workloads(), "team-a", WorkloadName(loaded_.job));
  ASSERT_TRUE(wl.ok()) << wl.status();
  EXPECT_EQ((*wl)["spec"]["queueName"], "lq");
  ASSERT_FALSE(client_.statuses.empty());
  const kube::Object& held = client_.statuses.back();
  EXPECT_EQ(held["phase"], "Suspended");
  bool pending = false;
  for (const kube::Object& c : held["conditions"]) {
    pending |= c["type"] == kKueueCondition && c["reason"] == "Pending";
  }
  EXPECT_TRUE(pending) << held.dump();

  // Admitted with one GPU of the four free: one gang of one rank.
  kube::Object admitted = *wl;
  admitted["status"]["conditions"] =
      kube::Object::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "R"}},
                           {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}});
  admitted["status"]["admission"] = {
      {"clusterQueue", "cq"},
      {"podSetAssignments", kube::Object::array({{{"name", kKueuePodSet},
                                                  {"count", 1},
                                                  {"resourceUsage", {{"nvidia.com/gpu", "1"}}}}})}};
  workloads.Upsert(std::make_shared<const kube::Object>(admitted));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  EXPECT_EQ(PodsCreated(), 1u);
}

// Profiling trials count against a Kueue admission as gangs do.
TEST_F(ReconcileTest, TrialsOfAKueueAdmittedJobStayWithinItsAdmission) {
  CacheProfilesButGpt();
  kube::Store workloads, flavors;
  Caches caches{&jobs_, &pods_, &nodes_, &configmaps_};
  caches.kueue = {&workloads, &flavors};
  Reconciler reconciler(&client_, caches, options_, &clock_);
  loaded_.job.metadata.labels[kKueueQueueLabel] = "lq";
  PutJob();
  kube::Object wl = BuildWorkload(loaded_.job, "lq", std::nullopt);
  wl["status"]["conditions"] =
      kube::Object::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "R"}},
                           {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}});
  wl["status"]["admission"] = {
      {"clusterQueue", "cq"},
      {"podSetAssignments", kube::Object::array({{{"name", kKueuePodSet},
                                                  {"count", 1},
                                                  {"resourceUsage", {{"nvidia.com/gpu", "1"}}}}})}};
  workloads.Upsert(std::make_shared<const kube::Object>(wl));
  ASSERT_TRUE(reconciler.Reconcile(key_).ok());
  // gpt's one-GPU trial takes the admitted GPU: no two-GPU trial, no gang.
  size_t trials = 0;
  for (const std::string& k : client_.created) {
    if (k.rfind("pods/", 0) == 0) trials += k.find("-prof-r") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(trials, 1u);
  EXPECT_EQ(PodsCreated(), 1u);
}

}  // namespace
}  // namespace orrery::controller
