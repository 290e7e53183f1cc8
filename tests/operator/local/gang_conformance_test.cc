// One engine for `orrery run` and `orrery simulate` with interleaved gangs
// (issues 20 and 23): the same job of spilled tasks on the same device runs
// through the local runner (a fake orrery-worker speaking the line protocol,
// as runner_interleaved_test) and through the simulator (the runner's
// profiles, its engine options, the fake worker's gang speed as the
// simulator's gang speedup), and both journals hold the same launches and
// stops, gangs included, in the same order up to timing.
//
// Scenarios (four equal tasks, 100 samples/s alone, one device):
//   - the gang runs as planned (each member at 61 samples/s, 1.22x): two
//     gangs of two, one after the other, in both worlds;
//   - the gang runs at 0.8x (40 samples/s each): measured, fed back to the
//     engine, which runs the two tasks left alone.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "operator/api/load.h"
#include "operator/api/schema.h"
#include "operator/engine/profile_configs.h"
#include "operator/local/runner.h"
#include "operator/sim/simulator.h"
#include "tests/operator/local/fake_gang_worker.h"

namespace orrery::local {
namespace {

namespace fs = std::filesystem;

using testing::FakeGangWorker;
using testing::SpilledSweepJob;

struct Action {
  double at = 0;
  std::string line;  // "launch <detail>" | "stop <reason>"
};

// In order, the actions of one instant sorted (stops first): which of two
// equal tasks the world carried out first is timing.
std::vector<std::string> Canonical(std::vector<Action> actions) {
  std::vector<std::string> out;
  for (size_t i = 0; i < actions.size();) {
    size_t j = i;
    while (j < actions.size() && actions[j].at == actions[i].at) ++j;
    std::vector<std::string> same;
    for (size_t k = i; k < j; ++k)
      same.push_back((actions[k].line.rfind("stop", 0) == 0 ? "0" : "1") + actions[k].line);
    std::sort(same.begin(), same.end());
    for (const std::string& s : same) out.push_back(s.substr(1));
    i = j;
  }
  return out;
}

std::string Lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& l : v) s += "  " + l + "\n";
  return s;
}

class GangConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/orrery-gang-conformance-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    auto job = api::LoadJobText(SpilledSweepJob("gang-conformance"));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // `orrery run` on one CPU device with a worker whose gangs train each
  // member at `gang_speed` samples/s; its report.
  nlohmann::json Run(int gang_speed) {
    const std::string worker = dir_ + "/fake-worker";
    std::ofstream(worker) << FakeGangWorker(gang_speed);
    EXPECT_EQ(chmod(worker.c_str(), 0755), 0);
    options_.devices = *ParseDevices("cpu:1");
    options_.workdir = dir_ + "/work";
    options_.worker = worker;
    options_.profile_cache = dir_ + "/profiles.json";
    options_.job_dir = dir_;
    options_.tick_s = 0.02;
    std::ostringstream out, err;
    EXPECT_EQ(RunJob(job_, options_, out, err), 0) << out.str() << err.str();
    std::stringstream text;
    text << std::ifstream(options_.workdir + "/report.json").rdbuf();
    nlohmann::json report = nlohmann::json::parse(text.str(), nullptr, false);
    EXPECT_FALSE(report.is_discarded());
    EXPECT_EQ(report.value("outcome", ""), "completed");
    EXPECT_TRUE(report["violations"].empty()) << report["violations"].dump();
    return report;
  }

  // The same job in the simulator: one node of one device as the runner's
  // world has it, the configurations from the runner's profiles, the runner's
  // engine options, gangs truly at `gang_speedup`.
  sim::SimResult Simulate(const nlohmann::json& report, double gang_speedup) {
    planner::Workload w;
    w.name = "gang-conformance";
    w.gpus_per_node = 1;
    w.gpu_memory_gib = 1e6;  // as the local world: memory is not modelled
    w.problem.nodes.push_back({"local", 1, 1e6});
    w.problem.gpu_cap = job_.job.spec.resources.gpu_quota;
    for (const api::ExpandedTask& t : job_.tasks) {
      // Every task is the same model: one signature, one profile per key.
      auto lookup = [&](api::Template tmpl, int gpus, int64_t batch) {
        for (const nlohmann::json& p : report["profiles"]) {
          if (p["template"] == std::string(api::EnumName(tmpl)) && p["gpus"] == gpus &&
              p["batch_size"] == batch) {
            return engine::ProfilePoint{engine::ProfilePoint::State::kMeasured,
                                        p["samples_per_s"].get<double>(),
                                        p["peak_memory_mib"].get<double>() / 1024.0};
          }
        }
        return engine::ProfilePoint{};
      };
      planner::Task task;
      task.name = t.name;
      task.work = static_cast<double>(engine::SampleBudget(t.task));
      task.configs = engine::BuildTaskConfigs(job_.job.spec, t.task, lookup, 1, true).configs;
      EXPECT_FALSE(task.configs.empty()) << t.name;
      w.problem.tasks.push_back(task);
      w.true_speed.push_back(1.0);
    }
    sim::SimOptions o;
    o.engine = RunEngineOptions(job_, options_);
    o.gang_speedup = gang_speedup;
    // The runner measures a gang from its members' reports, which the fake
    // worker writes as they complete: the simulator measures it then too.
    o.measure_after_s = 1e7;
    auto r = sim::Simulate(w, o, nullptr);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_TRUE(r->violations.empty()) << r->violations.front();
    return *r;
  }

  void ExpectSameActions(const nlohmann::json& report, const sim::SimResult& sim) {
    std::vector<Action> local, simulated;
    for (const nlohmann::json& a : report["actions"]) {
      local.push_back({a.value("time_s", 0.0), a.value("kind", "") + " " + a.value("detail", "")});
    }
    for (const engine::JournalEntry& e : sim.actions)
      simulated.push_back({e.at, e.kind + " " + e.detail});
    EXPECT_EQ(Canonical(local), Canonical(simulated)) << "orrery run:\n"
                                                      << Lines(Canonical(local)) << "simulator:\n"
                                                      << Lines(Canonical(simulated));
  }

  std::string dir_;
  api::LoadedJob job_;
  RunOptions options_;
};

int CountWith(const std::vector<engine::JournalEntry>& actions, const std::string& text) {
  return static_cast<int>(std::count_if(actions.begin(), actions.end(), [&](const auto& e) {
    return e.kind == "launch" && e.detail.find(text) != std::string::npos;
  }));
}

TEST_F(GangConformanceTest, GangsAsPlannedRunAlikeInRunAndSimulator) {
  const nlohmann::json report = Run(61);  // 2 x 61 / 100: 1.22x, as the engine plans
  const sim::SimResult sim = Simulate(report, 1.22);
  EXPECT_EQ(sim.gangs, 2);
  EXPECT_EQ(CountWith(sim.actions, " interleaved "), 4);
  ExpectSameActions(report, sim);
  // Both worlds' bars name the same gangs.
  std::vector<std::string> run_gangs, sim_gangs;
  for (const nlohmann::json& b : report["actual"]) run_gangs.push_back(b.value("gang", ""));
  for (const sim::RunInterval& iv : sim.intervals) sim_gangs.push_back(iv.gang);
  std::sort(run_gangs.begin(), run_gangs.end());
  std::sort(sim_gangs.begin(), sim_gangs.end());
  EXPECT_EQ(run_gangs, sim_gangs);
}

TEST_F(GangConformanceTest, AGangSlowerThanPlannedEndsAlikeInRunAndSimulator) {
  const nlohmann::json report = Run(40);  // 2 x 40 / 100: 0.8x
  const sim::SimResult sim = Simulate(report, 0.8);
  EXPECT_EQ(sim.gangs, 1);
  ASSERT_EQ(sim.gang_speedups.size(), 1u);
  EXPECT_NEAR(sim.gang_speedups[0], 0.8, 1e-9);
  EXPECT_EQ(CountWith(sim.actions, " interleaved "), 2);
  ExpectSameActions(report, sim);
}

}  // namespace
}  // namespace orrery::local
