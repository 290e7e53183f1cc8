// See interleaved.h.
#include "worker/parallel/interleaved.h"

#include <thread>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "worker/parallel/internal.h"
#include "worker/parallel/shard_group.h"

namespace orrery::parallel {

std::string InterleaveOrderName(InterleaveOrder order) {
  switch (order) {
    case InterleaveOrder::kAuto: return "auto";
    case InterleaveOrder::kRoundRobin: return "round_robin";
    case InterleaveOrder::kModelAfterModel: return "model_after_model";
  }
  return "auto";
}

double PredictRoundSeconds(const std::vector<std::vector<double>>& compute,
                           const std::vector<std::vector<double>>& copy, InterleaveOrder order) {
  struct Visit {
    double compute, copy;
  };
  std::vector<Visit> round;
  size_t longest = 0;
  for (const auto& c : compute) longest = std::max(longest, c.size());
  auto add = [&](size_t t, size_t v) {
    round.push_back({compute[t][v], v < copy[t].size() ? copy[t][v] : 0.0});
  };
  if (order == InterleaveOrder::kRoundRobin) {
    for (size_t v = 0; v < longest; ++v)
      for (size_t t = 0; t < compute.size(); ++t)
        if (v < compute[t].size()) add(t, v);
  } else {
    for (size_t t = 0; t < compute.size(); ++t)
      for (size_t v = 0; v < compute[t].size(); ++v) add(t, v);
  }
  if (round.empty()) return 0;
  // Two rounds, so the second starts with its first copy hidden behind the
  // first round's last compute, as in steady state.
  std::vector<Visit> slots = round;
  slots.insert(slots.end(), round.begin(), round.end());
  double prev_end = 0, copy_end = slots[0].copy, first_round_end = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const double start = std::max(prev_end, copy_end);
    // The next slot's copy starts as this one starts computing.
    if (i + 1 < slots.size()) copy_end = start + slots[i + 1].copy;
    prev_end = start + slots[i].compute;
    if (i + 1 == round.size()) first_round_end = prev_end;
  }
  return prev_end - first_round_end;
}

std::string InterleaveChoice::ToJson() const {
  nlohmann::json j;
  j["event"] = "interleave";
  j["order"] = InterleaveOrderName(order);
  j["forced"] = forced;
  j["tasks"] = tasks;
  j["compute_s"] = compute_s;
  j["copy_s"] = copy_s;
  j["predicted_round_s"] = {{"round_robin", round_robin_s},
                            {"model_after_model", model_after_model_s}};
  return j.dump();
}

InterleavedDevice::InterleavedDevice(std::shared_ptr<internal::ShardGroup> group)
    : group_(std::move(group)) {}

InterleavedDevice::~InterleavedDevice() = default;

StatusOr<std::shared_ptr<InterleavedDevice>> InterleavedDevice::Create(c10::Device device,
                                                                       int64_t budget_bytes,
                                                                       InterleaveOrder order,
                                                                       int64_t link_bytes_per_s) {
  if (link_bytes_per_s < 0) {
    return InvalidArgumentError("interleaved device link must be positive (or 0: none), got " +
                                std::to_string(link_bytes_per_s) + " bytes/s");
  }
  if (budget_bytes <= 0) {
    return InvalidArgumentError("interleaved device budget must be positive, got " +
                                std::to_string(budget_bytes) + " bytes");
  }
  ORRERY_ASSIGN_OR_RETURN(auto copier, internal::MakeShardCopier(device, link_bytes_per_s));
  auto group =
      std::make_shared<internal::ShardGroup>(device, budget_bytes, std::move(copier), order);
  return std::shared_ptr<InterleavedDevice>(new InterleavedDevice(std::move(group)));
}

StatusOr<std::unique_ptr<Strategy>> InterleavedDevice::Join(const std::string& task,
                                                            const model::ModelConfig& mc,
                                                            StrategyConfig config,
                                                            const OptimizerConfig& opt) {
  if (config.name != "spill") {
    return InvalidArgumentError("interleaved task " + task + " runs template " + config.name +
                                "; only spill tasks interleave (set its template to spill)");
  }
  if (config.layout.dp > 1) {
    return InvalidArgumentError("interleaved task " + task +
                                " has data parallelism; interleaved tasks run on one device each "
                                "(set its layout to dp=1)");
  }
  ORRERY_ASSIGN_OR_RETURN(config, internal::ResolveStrategyConfig(config, opt));
  config.device = group_->device();
  config.spill_budget_bytes = group_->shard_device().accountant().budget();
  config.spill_double_buffer = true;
  return internal::MakeInterleavedSpill(mc, config, opt, group_, task);
}

std::optional<InterleaveChoice> InterleavedDevice::choice() const { return group_->choice(); }

void InterleavedDevice::OnChoice(std::function<void(const InterleaveChoice&)> f) {
  group_->OnChoice(std::move(f));
}

InterleavedStats InterleavedDevice::stats() const { return group_->stats(); }

namespace {

// One task's steps on its own thread; `strategy` leaves the group when reset.
void RunTask(const InterleavedTask& task, std::unique_ptr<Strategy>& strategy,
             InterleavedResult& r) {
  r.step = task.start_step;
  r.outcome = "completed";
  for (int64_t step = task.start_step; step < task.steps; ++step) {
    StatusOr<double> loss = strategy->Step(task.batch(step));
    if (!loss.ok()) {
      r.status = loss.status().WithContext("task " + task.name + " step " + std::to_string(step));
      r.outcome = "failed";
      break;
    }
    r.losses.push_back(*loss);
    r.step = step + 1;
    if (task.stop && r.step < task.steps && task.stop(r.step)) {
      r.outcome = "stopped";
      break;
    }
  }
  if (r.status.ok()) {
    // The host masters and optimizer state: no device turn needed.
    StatusOr<model::NamedTensors> params = strategy->GatherFullParameters();
    StatusOr<model::NamedTensors> state = strategy->GatherFullOptimizerState();
    if (params.ok() && state.ok()) {
      r.params = std::move(*params);
      r.optimizer_state = std::move(*state);
    } else {
      r.status = params.ok() ? state.status() : params.status();
      r.outcome = "failed";
    }
  }
  strategy.reset();  // leaves the group: the others go on without this task
}

}  // namespace

std::vector<InterleavedResult> TrainInterleaved(InterleavedDevice& device,
                                                const std::vector<InterleavedTask>& tasks) {
  std::vector<InterleavedResult> results(tasks.size());
  std::vector<std::unique_ptr<Strategy>> strategies(tasks.size());
  // Every task joins before any steps, so the first round holds them all.
  for (size_t i = 0; i < tasks.size(); ++i) {
    StatusOr<std::unique_ptr<Strategy>> s =
        device.Join(tasks[i].name, tasks[i].model, tasks[i].strategy, tasks[i].optimizer);
    if (!s.ok()) {
      results[i].status = s.status();
      results[i].outcome = "failed";
      continue;
    }
    strategies[i] = std::move(*s);
    // Loaded before any task steps: a running group may be copying any
    // member's host masters.
    if (!tasks[i].params.empty()) {
      results[i].status =
          tasks[i].optimizer_state.empty()
              ? strategies[i]->LoadFullParameters(tasks[i].params)
              : strategies[i]->LoadFullState(tasks[i].params, tasks[i].optimizer_state);
      if (!results[i].status.ok()) {
        results[i].outcome = "failed";
        strategies[i].reset();
      }
    }
  }
  std::vector<std::thread> threads;
  // OpenMP's thread count is per thread: each task computes with the caller's.
  const int intra_op = at::get_num_threads();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!strategies[i]) continue;
    threads.emplace_back([&, i, intra_op]() {
      at::set_num_threads(intra_op);
      RunTask(tasks[i], strategies[i], results[i]);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace orrery::parallel
