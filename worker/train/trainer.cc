// The training loop of `orrery-worker train`. See trainer.h for the progress
// format and the checkpoint contract.
#include "worker/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "operator/metrics/metrics.h"
#include "worker/checkpoint/store.h"
#include "worker/checkpoint/torch_adapter.h"
#include "worker/checkpoint/writer.h"
#include "worker/train/metrics_export.h"

namespace orrery::train {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const checkpoint::Layout kWholeLayout{1, 1, 1, 1};
constexpr const char* kModelPrefix = "model/";
constexpr const char* kOptimPrefix = "optim/";

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

Json NullOr(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

// Bytes of the files under a checkpoint directory (0 if it cannot be read: the
// figure is for metrics only).
uint64_t DirBytes(const std::string& dir) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const uintmax_t n = it->file_size(size_ec);
      if (!size_ec) total += n;
    }
  }
  return total;
}

class Run {
 public:
  Run(TaskConfig task, dist::Rendezvous* rdv, std::ostream& out, const std::atomic<bool>* stop,
      TrainRecorder* metrics)
      : task_(std::move(task)), rdv_(rdv), out_(out), stop_(stop), metrics_(metrics) {
    rank_ = rdv == nullptr ? 0 : rdv->config().rank;
    world_ = rdv == nullptr ? 1 : rdv->config().world_size;
  }

  StatusOr<TrainResult> Go() {
    at::set_num_threads(task_.threads);
    ORRERY_ASSIGN_OR_RETURN(batches_, MakeBatchSource(task_));
    ORRERY_ASSIGN_OR_RETURN(
        strategy_, parallel::MakeStrategy(task_.model, task_.strategy, task_.optimizer, rdv_));
    if (world_ > 1) {
      std::vector<int> all;
      for (int r = 0; r < world_; ++r) all.push_back(r);
      ORRERY_ASSIGN_OR_RETURN(world_comm_, rdv_->NewGroup("trainer", all));
    }
    base_lr_ = task_.optimizer.lr;
    if (!task_.checkpoint_dir.empty())
      store_ = std::make_unique<checkpoint::CheckpointStore>(task_.checkpoint_dir, task_.keep);
    ORRERY_ASSIGN_OR_RETURN(auto built, model::BuildModel(task_.model));
    // After every model build: a resume restores the RNG state last.
    if (store_ && task_.resume) ORRERY_RETURN_IF_ERROR(Resume());
    const int64_t total = TotalSteps();
    clock_ = resumed_ ? ScheduleClock::Resume(task_.schedule, task_.global_batch, total, step_,
                                              batches_->cursor().Position(), resumed_schedule_)
                      : ScheduleClock(task_.schedule, task_.global_batch, total);
    // What this rank trains on per step: its data-parallel share of the batch.
    const double rank_samples = static_cast<double>(task_.global_batch) /
                                static_cast<double>(std::max(1, strategy_->Info().layout.dp));
    if (metrics_ != nullptr) metrics_->RecordStart(step_);
    Emit({{"event", "start"},
          {"world_size", world_},
          {"template", task_.strategy.name},
          {"layout", dist::LayoutToString(strategy_->Info().layout)},
          {"model", task_.model.kind},
          {"parameters", built.NumParameters()},
          {"global_batch", task_.global_batch},
          {"steps", total},
          {"resumed_from_step",
           result_.resumed_from_step >= 0 ? Json(result_.resumed_from_step) : Json(nullptr)}});

    auto run_start = Clock::now();
    auto interval_start = Clock::now();
    int64_t interval_steps = 0, run_steps = 0;
    std::string status = "completed";
    while (step_ < total) {
      ORRERY_ASSIGN_OR_RETURN(bool stopping, AnyRankStopping());
      if (stopping) {
        status = "preempted";
        break;
      }
      double lr = clock_->Rate(base_lr_, task_.schedule, batches_->cursor().Position());
      result_.lrs.push_back(lr);
      result_.positions.push_back(batches_->cursor().Position());
      strategy_->SetLearningRate(lr);
      ORRERY_ASSIGN_OR_RETURN(model::Batch batch, batches_->Next());
      auto t0 = Clock::now();
      ORRERY_ASSIGN_OR_RETURN(double loss, strategy_->Step(batch));
      double step_time = Seconds(t0);
      ++step_;
      ++interval_steps;
      ++run_steps;
      result_.loss = loss;
      result_.losses.push_back(loss);
      if (metrics_ != nullptr) metrics_->RecordStep(step_, step_time, rank_samples, loss);
      std::string saved;
      if (store_ && task_.checkpoint_every > 0 && step_ % task_.checkpoint_every == 0 &&
          step_ < total) {
        ORRERY_ASSIGN_OR_RETURN(saved, Save("periodic"));
      }
      if (step_ % std::max<int64_t>(1, task_.report_every) == 0 || step_ == total) {
        double elapsed = Seconds(interval_start);
        if (metrics_ != nullptr && elapsed > 0)
          metrics_->RecordThroughput(static_cast<double>(interval_steps) * rank_samples / elapsed);
        Emit({{"event", "progress"},
              {"step", step_},
              {"steps", total},
              {"epoch", batches_->cursor().epoch},
              {"samples", batches_->cursor().Position()},
              {"loss", loss},
              {"lr", lr},
              {"step_time_s", step_time},
              {"samples_per_s",
               elapsed > 0 ? static_cast<double>(interval_steps * task_.global_batch) / elapsed
                           : 0.0},
              {"checkpoint", NullOr(saved)}});
        interval_start = Clock::now();
        interval_steps = 0;
      }
    }
    if (store_ && run_steps > 0) {
      ORRERY_ASSIGN_OR_RETURN(std::string saved, Save(status == "preempted" ? "signal" : "final"));
      (void)saved;
    }
    double wall = Seconds(run_start);
    result_.status = status;
    result_.step = step_;
    result_.base_lr = base_lr_;
    result_.steps = total;
    Emit({{"event", "done"},
          {"status", status},
          {"step", step_},
          {"loss", result_.loss},
          {"samples_per_s",
           wall > 0 ? static_cast<double>(run_steps * task_.global_batch) / wall : 0.0},
          {"wall_s", wall},
          {"checkpoint", NullOr(result_.checkpoint)},
          {"error", nullptr}});
    return result_;
  }

 private:
  void Emit(const Json& j) {
    if (rank_ != 0) return;
    out_ << j.dump() << std::endl;
  }

  // The run's budget in optimizer steps, counted from step 0 across resumes.
  // --epochs: the steps that finish the epochs' samples at this batch; after a
  // change of batch, from the samples consumed at the old one.
  // --samples: the steps that reach the budget from the samples consumed so far
  // (the resumed checkpoint's exact cursor, whatever batch it ran at).
  int64_t TotalSteps() const {
    if (task_.samples > 0) {
      const int64_t left = std::max<int64_t>(0, task_.samples - batches_->cursor().Position());
      return step_ + (left + task_.global_batch - 1) / task_.global_batch;
    }
    if (task_.epochs <= 0) return task_.steps;
    const int64_t budget = task_.epochs * batches_->NumSamples();
    auto saved = resumed_schedule_.find("global_batch");
    if (resumed_ && saved != resumed_schedule_.end() &&
        saved->second != static_cast<double>(task_.global_batch)) {
      const int64_t left = std::max<int64_t>(0, budget - batches_->cursor().Position());
      return step_ + left / task_.global_batch;
    }
    return std::max<int64_t>(1, budget / task_.global_batch);
  }

  StatusOr<bool> AnyRankStopping() {
    double mine = stop_ != nullptr && stop_->load() ? 1.0 : 0.0;
    if (world_comm_ == nullptr) return mine > 0;
    at::Tensor flag = at::full({1}, mine, at::kDouble);
    ORRERY_RETURN_IF_ERROR(world_comm_->AllReduce(flag, dist::ReduceOp::kMax));
    return flag.item<double>() > 0;
  }

  // Gathers the whole model on every rank; rank 0 writes it as one 1×1×1 shard
  // and commits; the others wait at a barrier so nobody runs ahead of a commit.
  StatusOr<std::string> Save(const std::string& reason) {
    auto t0 = Clock::now();
    ORRERY_ASSIGN_OR_RETURN(model::NamedTensors params, strategy_->GatherFullParameters());
    ORRERY_ASSIGN_OR_RETURN(model::NamedTensors optim, strategy_->GatherFullOptimizerState());
    std::string dir = store_->StepDir(step_);
    Status written;
    if (rank_ == 0) written = WriteWhole(dir, params, optim);
    if (world_comm_) {
      // Every rank learns whether rank 0 succeeded.
      at::Tensor ok = at::full({1}, written.ok() ? 1.0 : 0.0, at::kDouble);
      ORRERY_RETURN_IF_ERROR(world_comm_->Broadcast(ok, 0));
      if (ok.item<double>() == 0 && written.ok())
        written = InternalError("rank 0 failed to write the checkpoint");
    }
    ORRERY_RETURN_IF_ERROR(written.WithContext("checkpoint at step " + std::to_string(step_)));
    result_.checkpoint = dir;
    const double seconds = Seconds(t0);
    if (metrics_ != nullptr && metrics_->task_level()) {
      metrics_->RecordCheckpointSamples(batches_->cursor().Position());
      metrics_->RecordCheckpoint(metrics::WorkerRecorder::CheckpointOp::kSave, step_, seconds,
                                 DirBytes(dir));
    }
    Emit({{"event", "checkpoint"},
          {"step", step_},
          {"path", dir},
          {"reason", reason},
          {"seconds", seconds}});
    return dir;
  }

  // The partition spec a parameter-shaped tensor carries (its tp cut for GPT;
  // the 1×1×1 write ignores it, offline resharding uses it).
  checkpoint::TensorSpec SpecFor(const std::string& qualified, const std::string& param,
                                 const at::Tensor& t) const {
    checkpoint::TensorSpec spec;
    spec.name = qualified;
    spec.shape = t.sizes().vec();
    auto dtype = checkpoint::DTypeOf(t.scalar_type());
    spec.dtype = dtype.ok() ? *dtype : checkpoint::DType::kFloat32;
    spec.fsdp_sharded = false;
    spec.tp_dim =
        task_.model.kind == "gpt" && t.dim() > 0 ? model::GptTensorParallelDim(param) : -1;
    return spec;
  }

  Status WriteWhole(const std::string& dir, const model::NamedTensors& params,
                    const model::NamedTensors& optim) {
    ORRERY_ASSIGN_OR_RETURN(auto writer, checkpoint::ShardWriter::Create(
                                             dir, kWholeLayout, 0, checkpoint::BalancedStages(1)));
    for (const auto& [name, t] : params) {
      ORRERY_RETURN_IF_ERROR(
          checkpoint::AddTensor(*writer, SpecFor(kModelPrefix + name, name, t), t));
    }
    for (const auto& [name, t] : optim) {
      size_t slash = name.find('/');
      std::string param = slash == std::string::npos ? "" : name.substr(slash + 1);
      ORRERY_RETURN_IF_ERROR(
          checkpoint::AddTensor(*writer, SpecFor(kOptimPrefix + name, param, t), t));
    }
    ORRERY_ASSIGN_OR_RETURN(std::string rng, checkpoint::CaptureCpuRngState());
    ORRERY_RETURN_IF_ERROR(writer->AddBlob("rng/cpu", rng));
    ORRERY_RETURN_IF_ERROR(writer->Finish());
    checkpoint::CheckpointInfo info;
    info.step = step_;
    info.layout = kWholeLayout;
    info.num_layers = 1;
    info.lr_schedule = {{"base_lr", base_lr_},
                        {"global_batch", static_cast<double>(task_.global_batch)},
                        {"warmup_steps", static_cast<double>(task_.schedule.warmup_steps)}};
    clock_->Save(batches_->cursor().Position(), info.lr_schedule);
    info.dataset = batches_->cursor();
    info.extra = {{"template", task_.strategy.name},
                  {"model", task_.model.kind},
                  {"layout", dist::LayoutToString(strategy_->Info().layout)}};
    return store_->Commit(info);
  }

  Status Resume() {
    auto t0 = Clock::now();
    auto reader = store_->OpenLatest(checkpoint::VerifyLevel::kFiles, /*fallback=*/true);
    if (!reader.ok()) {
      if (reader.status().code() == StatusCode::kNotFound) return OkStatus();  // a fresh start
      return reader.status().WithContext("opening the newest checkpoint");
    }
    const auto& meta = reader->metadata();
    std::vector<at::Tensor> tensors;
    std::vector<checkpoint::TensorSlot> slots;
    std::vector<std::string> names;
    tensors.reserve(meta.tensors.size());
    for (const auto& [name, tm] : meta.tensors) {
      if (name.rfind(kModelPrefix, 0) != 0 && name.rfind(kOptimPrefix, 0) != 0) continue;
      tensors.emplace_back();
      names.push_back(name);
      slots.push_back({tm.spec, nullptr});
    }
    for (size_t i = 0; i < slots.size(); ++i) slots[i].tensor = &tensors[i];
    ORRERY_RETURN_IF_ERROR(checkpoint::LoadTensors(*reader, slots, meta.info.layout, 0,
                                                   checkpoint::BalancedStages(meta.info.num_layers),
                                                   {})
                               .WithContext("loading " + reader->dir()));
    model::NamedTensors full, optim;
    const std::string model_prefix = kModelPrefix, optim_prefix = kOptimPrefix;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].rfind(model_prefix, 0) == 0) {
        full.emplace_back(names[i].substr(model_prefix.size()), tensors[i]);
      } else {
        optim.emplace_back(names[i].substr(optim_prefix.size()), tensors[i]);
      }
    }
    if (optim.empty()) {
      // A parameters-only checkpoint (older trainer): the optimizer starts fresh.
      ORRERY_RETURN_IF_ERROR(
          strategy_->LoadFullParameters(full).WithContext("applying " + reader->dir()));
    } else {
      ORRERY_RETURN_IF_ERROR(
          strategy_->LoadFullState(full, optim).WithContext("applying " + reader->dir()));
    }
    auto rng = meta.blobs.find(checkpoint::BlobKey(0, "rng/cpu"));
    if (rng != meta.blobs.end())
      ORRERY_RETURN_IF_ERROR(checkpoint::RestoreCpuRngState(rng->second));
    ResumeLearningRate(meta.info.lr_schedule);
    ORRERY_RETURN_IF_ERROR(batches_->Seek(meta.info.dataset));
    step_ = meta.info.step;
    resumed_ = true;
    resumed_schedule_ = meta.info.lr_schedule;
    result_.resumed_from_step = step_;
    result_.checkpoint = reader->dir();
    if (metrics_ != nullptr && metrics_->task_level()) {
      metrics_->RecordCheckpointSamples(meta.info.dataset.Position());
      metrics_->RecordCheckpoint(metrics::WorkerRecorder::CheckpointOp::kLoad, step_, Seconds(t0),
                                 DirBytes(reader->dir()));
    }
    return OkStatus();
  }

  // The base rate after a resume: unchanged unless --lr-scaling is set and the
  // global batch differs from the checkpoint's, then the checkpoint's base rate
  // times the batch ratio (linear) or its square root (sqrt).
  void ResumeLearningRate(const std::map<std::string, double>& schedule) {
    auto lr = schedule.find("base_lr");
    auto batch = schedule.find("global_batch");
    if (task_.schedule.lr_scaling == "none" || lr == schedule.end()) return;
    double ratio = batch == schedule.end() || batch->second <= 0
                       ? 1.0
                       : static_cast<double>(task_.global_batch) / batch->second;
    base_lr_ = lr->second * (task_.schedule.lr_scaling == "sqrt" ? std::sqrt(ratio) : ratio);
  }

  TaskConfig task_;
  double base_lr_ = 0.0;
  dist::Rendezvous* rdv_;
  std::ostream& out_;
  const std::atomic<bool>* stop_;
  TrainRecorder* metrics_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<BatchSource> batches_;
  std::unique_ptr<parallel::Strategy> strategy_;
  std::unique_ptr<dist::Communicator> world_comm_;
  std::unique_ptr<checkpoint::CheckpointStore> store_;
  int64_t step_ = 0;
  bool resumed_ = false;
  std::map<std::string, double> resumed_schedule_;  // the checkpoint's lr_schedule
  std::optional<ScheduleClock> clock_;
  TrainResult result_;
};

}  // namespace

StatusOr<TrainResult> Train(TaskConfig task, dist::Rendezvous* rendezvous, std::ostream& out,
                            const std::atomic<bool>* stop, TrainRecorder* metrics) {
  Run run(std::move(task), rendezvous, out, stop, metrics);
  auto r = run.Go();
  if (!r.ok() && (rendezvous == nullptr || rendezvous->config().rank == 0)) {
    out << Json({{"event", "done"}, {"status", "failed"}, {"error", r.status().ToString()}}).dump()
        << std::endl;
  }
  return r;
}

}  // namespace orrery::train
