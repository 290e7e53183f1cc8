// What choosing the global batch buys the planner on a small elastic job: the
// job (examples/elastic.yaml unless --file) is planned by the orrery planner
// twice from the same throughput table, once with every task at its own batch
// (elasticity off) and once with the batch a choice
// (engine::BuildTaskConfigs with elasticity on), and both makespans are printed.
//
// Throughput is a step-time model, not a measurement (a torch-free build has no
// worker to profile with):
//   compute  b x 6·P·tokens FLOPs over g devices at estimate.h's sustained rate
//            (Kaplan et al. 2020, §2.1; A100 at 40% MFU);
//   sync     a ring all-reduce of fp32 gradients, 2(g-1)/g x 4P bytes at
//            --link-gbs GB/s per device (fsdp: 1.5x, reduce-scatter plus
//            all-gather, Zhao et al. 2023, "PyTorch FSDP", §3.2);
//   overhead --overhead-ms per step (kernel launches, optimizer, data).
// The fixed costs per step are what a larger batch amortises; the last row of
// the sweep has none (throughput independent of the batch), where the choice
// can buy nothing and both makespans must agree. Between the rows the gain also
// moves with how the chosen GPU counts pack, not only with the fixed costs.
//
//   build/elastic/bench/bench_elastic_batch_choice [--file F] [--gpus NODESxGPUS]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "operator/api/load.h"
#include "operator/engine/estimate.h"
#include "operator/engine/profile_configs.h"
#include "operator/engine/worker_command.h"
#include "operator/planner/planner.h"
#include "worker/contract/templates.h"

namespace {

using namespace orrery;

struct Model {
  double link_bytes_per_s = 50e9;
  double overhead_s = 2e-3;
};

engine::ProfileLookup StepTimeModel(const api::TaskSpec& task, const Model& m) {
  const double params = engine::ModelParameters(task);
  const double tokens = task.model.gpt ? task.model.gpt->seq_len : 1;
  const double flops = engine::DefaultDevice("cuda").flops;
  return [=](api::Template tmpl, int g, int64_t b) {
    double compute = static_cast<double>(b) * 6 * params * tokens / (g * flops);
    double sync = g > 1 ? 2.0 * (g - 1) / g * 4 * params / m.link_bytes_per_s : 0;
    if (tmpl == api::Template::kFsdp) sync *= 1.5;
    double step = compute + sync + m.overhead_s;
    return engine::ProfilePoint{engine::ProfilePoint::State::kMeasured,
                                static_cast<double>(b) / step, 1};
  };
}

struct Outcome {
  double makespan = 0;
  std::vector<std::string> choices;  // by task
};

Outcome Plan(const api::LoadedJob& job, bool elastic, int nodes, int gpus_per_node,
             const Model& m) {
  api::ModelSelectionJobSpec spec = job.job.spec;
  spec.elasticity.enabled = elastic;
  planner::Problem problem;
  for (int n = 0; n < nodes; ++n)
    problem.nodes.push_back({"n" + std::to_string(n), gpus_per_node, 80});
  for (const api::ExpandedTask& e : job.tasks) {
    planner::Task t;
    t.name = e.name;
    t.work = static_cast<double>(engine::SampleBudget(e.task));
    t.configs =
        engine::BuildTaskConfigs(spec, e.task, StepTimeModel(e.task, m), gpus_per_node).configs;
    // A job that is not elastic is offered every GPU count, also those its batch
    // does not split over, which the worker refuses at launch; the baseline
    // keeps only what could run, as the elastic configurations do.
    std::erase_if(t.configs, [](const planner::Config& c) {
      return !contract::BatchSplits(contract::WorkerTemplate(c.template_name, c.gpus), c.gpus,
                                    c.batch_size);
    });
    problem.tasks.push_back(t);
  }
  planner::PlanOptions options;
  options.time_limit_s = 20;
  options.max_nodes = 20000;  // deterministic
  auto plan = planner::MakeOrreryPlanner()->Solve(problem, options);
  if (!plan.ok()) {
    std::fprintf(stderr, "plan failed: %s\n", plan.status().ToString().c_str());
    std::exit(1);
  }
  Outcome out;
  out.makespan = plan->makespan;
  for (size_t t = 0; t < problem.tasks.size(); ++t) {
    const planner::Config& c =
        problem.tasks[t].configs[static_cast<size_t>(plan->assignments[t].config)];
    int64_t budget = engine::SampleBudget(job.tasks[t].task);
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s x%d batch %d (%lld steps)", c.template_name.c_str(), c.gpus,
                  c.batch_size,
                  static_cast<long long>(engine::StepsForBudget(budget, 0, 0, c.batch_size)));
    out.choices.push_back(buf);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file = std::string(ORRERY_SOURCE_DIR) + "/examples/elastic.yaml";
  int nodes = 1, gpus = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--file") == 0 && i + 1 < argc) {
      file = argv[++i];
    } else if (std::strcmp(argv[i], "--gpus") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%dx%d", &nodes, &gpus) != 2 || nodes < 1 || gpus < 1) {
        std::fprintf(stderr, "--gpus wants NODESxGPUS, e.g. 1x8\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--file JOB.yaml] [--gpus NODESxGPUS]\n", argv[0]);
      return 2;
    }
  }
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  auto job = api::LoadJobText(text.str());
  if (!job.ok()) {
    std::fprintf(stderr, "%s: %s\n", file.c_str(), job.status().ToString().c_str());
    return 1;
  }
  std::printf("job %s on %dx%d GPUs; throughput from a step-time model (see the source)\n",
              file.c_str(), nodes, gpus);
  std::printf("%-10s %-8s %-14s %-14s %-9s\n", "link GB/s", "ovh ms", "fixed batch s",
              "batch choice s", "speed-up");
  std::vector<Model> sweep;
  for (double gbs : {50.0, 300.0}) {
    for (double ms : {0.5, 2.0}) sweep.push_back({gbs * 1e9, ms * 1e-3});
  }
  sweep.push_back({1e30, 0});  // no fixed cost per step
  for (size_t k = 0; k < sweep.size(); ++k) {
    const Model& m = sweep[k];
    Outcome fixed = Plan(*job, false, nodes, gpus, m);
    Outcome chosen = Plan(*job, true, nodes, gpus, m);
    std::printf("%-10.3g %-8.1f %-14.2f %-14.2f %.2fx\n", m.link_bytes_per_s / 1e9,
                m.overhead_s * 1e3, fixed.makespan, chosen.makespan,
                fixed.makespan / chosen.makespan);
    for (size_t t = 0; t < job->tasks.size(); ++t) {
      std::printf("    %-10s fixed: %-32s choice: %s\n", job->tasks[t].name.c_str(),
                  fixed.choices[t].c_str(), chosen.choices[t].c_str());
    }
  }
  return 0;
}
