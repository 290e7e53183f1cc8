// See profiler.h.
#include "worker/profile/profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <torch/torch.h>

#include "worker/contract/templates.h"
#include "worker/dist/device.h"

namespace orrery::profile {
namespace {

using Json = nlohmann::json;

struct Measurement {
  std::vector<double> step_times;
  double loss_first = 0, loss_last = 0;
  parallel::StrategyInfo info;
};

int64_t HostPeakRss() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

class Profiler {
 public:
  Profiler(train::TaskConfig task, dist::Rendezvous* rdv) : task_(std::move(task)), rdv_(rdv) {
    rank_ = rdv == nullptr ? 0 : rdv->config().rank;
    world_ = rdv == nullptr ? 1 : rdv->config().world_size;
  }

  StatusOr<ProfileSummary> Go(std::ostream& out) {
    at::set_num_threads(task_.threads);
    // The CPU's device_allocated (orrery-worker installed it already).
    dist::InstallCpuMemoryCounter();
    ORRERY_ASSIGN_OR_RETURN(batches_, train::MakeBatchSource(task_));
    if (world_ > 1) {
      std::vector<int> all;
      for (int r = 0; r < world_; ++r) all.push_back(r);
      ORRERY_ASSIGN_OR_RETURN(world_comm_, rdv_->NewGroup("profiler", all));
    }
    Json tuning = Json::array();
    parallel::StrategyConfig best = task_.strategy;
    if (task_.tune) {
      double best_time = std::numeric_limits<double>::infinity();
      for (const auto& [knobs, candidate] : Candidates()) {
        int steps = std::max(2, task_.profile_steps / 2);
        auto m = Measure(candidate, 1, steps);
        if (!m.ok()) {
          tuning.push_back({{"knobs", knobs}, {"error", m.status().ToString()}});
          continue;
        }
        double t = Percentile(m->step_times, 0.5);
        tuning.push_back({{"knobs", knobs}, {"step_time_s", t}});
        if (t < best_time) {
          best_time = t;
          best = candidate;
        }
      }
    }
    // Both activation-recomputation modes with the chosen knobs, so a reader
    // sees what recomputing costs this model here (the measurement below
    // stays in the configured mode: the one the profile cache is keyed by).
    Json recompute_modes = Json::array();
    if (task_.tune) {
      for (std::string_view mode : contract::kRecomputeModes) {
        parallel::StrategyConfig c = best;
        c.recompute = std::string(mode);
        dist::SynchronizeDevice(c.device);
        dist::ResetPeakDeviceMemory(c.device);
        auto m = Measure(c, 1, std::max(2, task_.profile_steps / 2));
        if (!m.ok()) {
          recompute_modes.push_back(
              {{"recompute", std::string(mode)}, {"error", m.status().ToString()}});
          continue;
        }
        const double t = Percentile(m->step_times, 0.5);
        Json row = {{"recompute", std::string(mode)},
                    {"step_time_s", t},
                    {"samples_per_s", t > 0 ? static_cast<double>(task_.global_batch) / t : 0.0},
                    {"wait_fraction", m->info.wait_fraction}};
        if (const int64_t peak = dist::PeakDeviceMemory(c.device); peak >= 0)
          row["device_allocated"] = peak;
        recompute_modes.push_back(row);
      }
    }
    const c10::Device device = task_.strategy.device;
    // The measured configuration's own peak, not the tuning runs'.
    dist::SynchronizeDevice(device);
    dist::ResetPeakDeviceMemory(device);
    ORRERY_ASSIGN_OR_RETURN(Measurement m,
                            Measure(best, task_.profile_warmup, task_.profile_steps));
    dist::SynchronizeDevice(device);
    ProfileSummary summary;
    summary.median_s = Percentile(m.step_times, 0.5);
    summary.p90_s = Percentile(m.step_times, 0.9);
    double mean = 0;
    for (double t : m.step_times) mean += t;
    mean /= static_cast<double>(std::max<size_t>(1, m.step_times.size()));
    summary.samples_per_s =
        summary.median_s > 0 ? static_cast<double>(task_.global_batch) / summary.median_s : 0.0;
    // Counted from the architecture: nothing is built (or read) again for it.
    ORRERY_ASSIGN_OR_RETURN(const int64_t parameters, model::CountParameters(task_.model));
    // Peak memory: the largest over ranks (the planner sizes GPUs by the worst).
    at::Tensor peaks = at::tensor(
        {static_cast<double>(m.info.peak_device_parameter_bytes),
         static_cast<double>(HostPeakRss()), static_cast<double>(dist::PeakDeviceMemory(device)),
         static_cast<double>(dist::PeakReservedDeviceMemory(device)),
         static_cast<double>(dist::DeviceMemoryInUse(device))},
        at::kDouble);
    if (world_comm_) ORRERY_RETURN_IF_ERROR(world_comm_->AllReduce(peaks, dist::ReduceOp::kMax));
    Json doc = {
        {"event", "profile"},
        {"template", task_.strategy.name},
        {"layout", dist::LayoutToString(m.info.layout)},
        {"world_size", world_},
        {"model", task_.model.kind},
        {"parameters", parameters},
        {"global_batch", task_.global_batch},
        {"device", device.is_cuda() ? "cuda" : "cpu"},
        {"device_name", device.str()},
        {"threads", task_.threads},
        {"warmup_steps", task_.profile_warmup},
        {"timed_steps", task_.profile_steps},
        {"step_time_s",
         {{"median", summary.median_s},
          {"p90", summary.p90_s},
          {"mean", mean},
          {"min", m.step_times.empty()
                      ? 0.0
                      : *std::min_element(m.step_times.begin(), m.step_times.end())}}},
        {"samples_per_s", summary.samples_per_s},
        {"peak_memory_bytes", PeakMemory(peaks)},
        {"knobs", KnobsOf(m.info)},
        {"tuning", tuning},
        {"recompute_modes", recompute_modes},
        {"loss_first", m.loss_first},
        {"loss_last", m.loss_last},
    };
    summary.json = doc.dump();
    if (rank_ == 0) {
      out << summary.json << std::endl;
      WriteTerminationMessage(doc);
    }
    return summary;
  }

 private:
  // The largest over ranks of: parameter (and gradient) bytes the template held
  // on the device, the process's peak resident set, and the peak of tensor
  // bytes allocated during the measured steps: on CUDA the caching allocator's
  // (torch.cuda.max_memory_allocated), on the CPU the counting allocator's
  // (dist::InstallCpuMemoryCounter), the figure the planner's memory model
  // predicts (bench/worker/memory_model_bench.cc).
  static Json PeakMemory(const at::Tensor& peaks) {
    Json j = {{"device_parameters", static_cast<int64_t>(peaks[0].item<double>())},
              {"host_rss", static_cast<int64_t>(peaks[1].item<double>())}};
    if (peaks[2].item<double>() >= 0)
      j["device_allocated"] = static_cast<int64_t>(peaks[2].item<double>());
    // On CUDA, what the device holds beyond those tensors (dist/device.h):
    // the measure of the planner's reserve (engine::GpuMemoryReserve).
    if (peaks[3].item<double>() >= 0)
      j["device_reserved"] = static_cast<int64_t>(peaks[3].item<double>());
    if (peaks[4].item<double>() >= 0)
      j["device_in_use"] = static_cast<int64_t>(peaks[4].item<double>());
    return j;
  }

  static Json KnobsOf(const parallel::StrategyInfo& info) {
    return {{"micro_batches", info.micro_batches},
            {"stage_starts", info.stage_starts},
            {"bucket_bytes", info.bucket_bytes},
            {"buckets", info.buckets},
            {"spill_shards", info.spill_shards},
            {"spill_budget_bytes", info.spill_budget_bytes},
            {"spill_double_buffer", info.spill_double_buffer},
            {"recompute", info.recompute},
            {"wait_fraction", info.wait_fraction}};
  }

  // The knobs worth trying for this template.
  std::vector<std::pair<Json, parallel::StrategyConfig>> Candidates() const {
    std::vector<std::pair<Json, parallel::StrategyConfig>> out;
    const parallel::StrategyConfig& base = task_.strategy;
    const contract::TemplateTraits* traits = contract::FindTemplate(base.name);
    const contract::WorldAxis axis = traits ? traits->axis : contract::WorldAxis::kNone;
    const std::string_view knob = traits ? traits->tuned_knob : std::string_view();
    int pp = axis == contract::WorldAxis::kPipeline ? world_
             : axis == contract::WorldAxis::kLayout ? base.layout.pp
                                                    : 1;
    int dp = axis == contract::WorldAxis::kLayout ? base.layout.dp
             : axis == contract::WorldAxis::kData ? world_
                                                  : 1;
    if (pp > 1) {
      int64_t local = task_.global_batch / std::max(1, dp);
      for (int m : {pp, 2 * pp, 4 * pp}) {
        if (m > local || local % m != 0) continue;
        parallel::StrategyConfig c = base;
        c.micro_batches = m;
        out.push_back({{{"micro_batches", m}}, c});
      }
    } else if (knob == "bucket_bytes" || (axis == contract::WorldAxis::kLayout && dp > 1)) {
      for (int64_t b : {int64_t{256} << 10, int64_t{1} << 20, int64_t{25} << 20}) {
        parallel::StrategyConfig c = base;
        c.bucket_bytes = b;
        out.push_back({{{"bucket_bytes", b}}, c});
      }
    } else if (knob == "spill_double_buffer") {
      for (bool db : {true, false}) {
        parallel::StrategyConfig c = base;
        c.spill_double_buffer = db;
        out.push_back({{{"spill_double_buffer", db}}, c});
      }
    }
    if (out.empty()) out.push_back({Json::object(), base});
    return out;
  }

  StatusOr<Measurement> Measure(const parallel::StrategyConfig& config, int warmup, int steps) {
    ORRERY_ASSIGN_OR_RETURN(auto strategy,
                            parallel::MakeStrategy(task_.model, config, task_.optimizer, rdv_));
    strategy->SetLearningRate(task_.optimizer.lr);
    Measurement m;
    for (int i = 0; i < warmup + steps; ++i) {
      ORRERY_ASSIGN_OR_RETURN(model::Batch batch, batches_->Next());
      if (world_comm_) ORRERY_RETURN_IF_ERROR(world_comm_->Barrier());
      dist::SynchronizeDevice(config.device);
      auto t0 = std::chrono::steady_clock::now();
      ORRERY_ASSIGN_OR_RETURN(double loss, strategy->Step(batch));
      // Step() read its loss back, but work queued after that (the optimizer)
      // belongs to this step too.
      dist::SynchronizeDevice(config.device);
      at::Tensor t = at::full(
          {1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          at::kDouble);
      if (world_comm_) ORRERY_RETURN_IF_ERROR(world_comm_->AllReduce(t, dist::ReduceOp::kMax));
      if (i == 0) m.loss_first = loss;
      m.loss_last = loss;
      if (i >= warmup) m.step_times.push_back(t.item<double>());
    }
    m.info = strategy->Info();
    return m;
  }

  void WriteTerminationMessage(Json doc) const {
    std::string path = task_.termination_message_path;
    if (path.empty()) {
      if (const char* v = std::getenv("ORRERY_TERMINATION_MESSAGE_PATH")) path = v;
    }
    if (path.empty() && std::getenv("KUBERNETES_SERVICE_HOST") != nullptr)
      path = "/dev/termination-log";
    if (path.empty()) return;
    std::string text = doc.dump();
    if (text.size() > 4096) {
      doc.erase("tuning");
      doc.erase("recompute_modes");
      text = doc.dump();
    }
    std::ofstream f(path, std::ios::trunc);
    f << text;
  }

  train::TaskConfig task_;
  dist::Rendezvous* rdv_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<train::BatchSource> batches_;
  std::unique_ptr<dist::Communicator> world_comm_;
};

}  // namespace

double Percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(samples.size())));
  rank = std::clamp<size_t>(rank, 1, samples.size());
  return samples[rank - 1];
}

StatusOr<ProfileSummary> Profile(train::TaskConfig task, dist::Rendezvous* rendezvous,
                                 std::ostream& out) {
  Profiler p(std::move(task), rendezvous);
  return p.Go(out);
}

}  // namespace orrery::profile
