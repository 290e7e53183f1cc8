// The training loop of `orrery-worker train`. See trainer.h for the progress
// format and the checkpoint contract.
#include "worker/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/metrics/metrics.h"
#include "worker/checkpoint/store.h"
#include "worker/checkpoint/torch_adapter.h"
#include "worker/checkpoint/writer.h"
#include "worker/contract/templates.h"
#include "worker/model/pretrained.h"
#include "worker/train/live_state.h"
#include "worker/train/metrics_export.h"

namespace orrery::train {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

Json NullOr(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

// A save's or load's figures for the whole gang: bytes moved and needed summed
// over the ranks, and the largest rank's peak memory.
struct GangTotals {
  uint64_t bytes = 0;
  uint64_t bytes_needed = 0;
  uint64_t max_peak_rss_bytes = 0;
};

GangTotals Totals(const std::vector<StateIoStats>& all) {
  GangTotals t;
  for (const auto& s : all) {
    t.bytes += s.bytes;
    t.bytes_needed += s.bytes_needed;
    t.max_peak_rss_bytes = std::max(t.max_peak_rss_bytes, s.peak_rss_bytes);
  }
  return t;
}

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
      TrainRecorder* metrics, const TrainHooks* hooks)
      : task_(std::move(task)),
        rdv_(rdv),
        out_(out),
        stop_(stop),
        metrics_(metrics),
        hooks_(hooks) {
    rank_ = rdv == nullptr ? 0 : rdv->config().rank;
    world_ = rdv == nullptr ? 1 : rdv->config().world_size;
  }

  StatusOr<TrainResult> Go() {
    rss_at_start_ = CurrentRss();
    at::set_num_threads(task_.threads);
    ORRERY_ASSIGN_OR_RETURN(batches_, MakeBatchSource(task_));
    ORRERY_ASSIGN_OR_RETURN(strategy_, hooks_ != nullptr && hooks_->make_strategy
                                           ? hooks_->make_strategy(task_)
                                           : parallel::MakeStrategy(task_.model, task_.strategy,
                                                                    task_.optimizer, rdv_));
    if (world_ > 1) {
      std::vector<int> all;
      for (int r = 0; r < world_; ++r) all.push_back(r);
      ORRERY_ASSIGN_OR_RETURN(world_comm_, rdv_->NewGroup("trainer", all));
    }
    base_lr_ = task_.optimizer.lr;
    if (!task_.checkpoint_dir.empty())
      store_ = std::make_unique<checkpoint::CheckpointStore>(task_.checkpoint_dir, task_.keep);
    // Counted a layer at a time: no rank builds the whole model.
    ORRERY_ASSIGN_OR_RETURN(const int64_t parameters, model::CountParameters(task_.model));
    // After every model build: a resume restores the RNG state last.
    if (store_ && task_.resume) ORRERY_RETURN_IF_ERROR(Resume());
    if (task_.export_only) return ExportCheckpoint();
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
          {"parameters", parameters},
          {"global_batch", task_.global_batch},
          {"steps", total},
          {"resumed_from_step",
           result_.resumed_from_step >= 0 ? Json(result_.resumed_from_step) : Json(nullptr)}});
    if (!restore_event_.is_null()) Emit(restore_event_);
    if (hooks_ != nullptr && hooks_->ready) hooks_->ready();

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
    if (status == "completed" && !task_.export_dir.empty()) ORRERY_RETURN_IF_ERROR(Export());
    double wall = Seconds(run_start);
    result_.status = status;
    result_.step = step_;
    result_.base_lr = base_lr_;
    result_.steps = total;
    // Every rank's memory over the whole run: its peak against what it held
    // before building anything (the runtime itself).
    StateIoStats memory;
    memory.peak_rss_bytes = LifetimePeakRss();
    memory.rss_before_bytes = rss_at_start_;
    ORRERY_ASSIGN_OR_RETURN(result_.memory, GatherStats(memory));
    Json memory_ranks = Json::array();
    for (const auto& m : result_.memory) {
      memory_ranks.push_back(
          {{"peak_rss_bytes", m.peak_rss_bytes}, {"rss_start_bytes", m.rss_before_bytes}});
    }
    Emit({{"event", "done"},
          {"status", status},
          {"memory", memory_ranks},
          {"step", step_},
          {"loss", result_.loss},
          {"samples_per_s",
           wall > 0 ? static_cast<double>(run_steps * task_.global_batch) / wall : 0.0},
          {"wall_s", wall},
          {"checkpoint", NullOr(result_.checkpoint)},
          {"export", NullOr(result_.exported)},
          {"error", nullptr}});
    return result_;
  }

  // `orrery-worker export`: the checkpoint Resume loaded, as a Hugging Face
  // directory, without training.
  StatusOr<TrainResult> ExportCheckpoint() {
    if (!resumed_) {
      return NotFoundError("no usable checkpoint in " + task_.checkpoint_dir +
                           " to export; check --checkpoint-dir");
    }
    if (!restore_event_.is_null()) Emit(restore_event_);
    ORRERY_RETURN_IF_ERROR(Export());
    result_.status = "completed";
    result_.step = step_;
    Emit({{"event", "done"},
          {"status", "completed"},
          {"step", step_},
          {"checkpoint", NullOr(result_.checkpoint)},
          {"export", NullOr(result_.exported)},
          {"error", nullptr}});
    return result_;
  }

  // The trained model as a Hugging Face directory: gathered (collective), then
  // written by rank 0; every rank learns whether it worked.
  Status Export() {
    if (!model::IsTransformer(task_.model)) {
      return FailedPreconditionError(
          "--export-dir: only transformer (gpt) models export to the "
          "Hugging Face layout, not " +
          task_.model.kind);
    }
    auto t0 = Clock::now();
    ORRERY_ASSIGN_OR_RETURN(model::NamedTensors params, strategy_->GatherFullParameters());
    Status written;
    if (rank_ == 0) {
      model::ExportOptions options;
      options.dtype = task_.export_dtype;
      options.source_dir = task_.model.pretrained;
      if (task_.model.finetune.Lora()) {
        written = model::ExportLoraAdapter(task_.model, params, task_.export_dir, options);
        if (written.ok() && task_.export_merged) {
          auto merged = model::MergeLora(task_.model, params);
          written = merged.ok() ? model::ExportPretrained(task_.model.gpt, *merged,
                                                          task_.export_dir + "/merged", options)
                                : merged.status();
        }
      } else {
        written = model::ExportPretrained(task_.model.gpt, params, task_.export_dir, options);
      }
    }
    params.clear();
    if (world_comm_ != nullptr) {
      at::Tensor ok = at::full({1}, written.ok() ? 1.0 : 0.0, at::kDouble);
      ORRERY_RETURN_IF_ERROR(world_comm_->Broadcast(ok, 0));
      if (rank_ != 0 && ok.item<double>() < 0.5)
        return InternalError("rank 0 could not export the model to " + task_.export_dir);
    }
    ORRERY_RETURN_IF_ERROR(written.WithContext("exporting to " + task_.export_dir));
    result_.exported = task_.export_dir;
    Emit({{"event", "export"},
          {"path", task_.export_dir},
          {"dtype", task_.export_dtype},
          {"seconds", Seconds(t0)}});
    return OkStatus();
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

  // The layout a checkpoint records: the running template's, in the
  // checkpoint library's terms (informational: a load reads by region).
  checkpoint::Layout CheckpointLayout() const {
    const dist::Layout l = strategy_->Info().layout;
    checkpoint::Layout out{l.dp, l.tp, l.pp, 1};
    const contract::TemplateTraits* traits = contract::FindTemplate(task_.strategy.name);
    if (traits != nullptr && traits->memory == contract::MemoryModel::kShardedFlat) out.fsdp = l.dp;
    if (out.World() != world_) out = checkpoint::Layout{world_, 1, 1, 1};
    return out;
  }

  // A layout as the restore line and the status name it: the template and its
  // degrees, e.g. "fsdp dp=4,tp=1,pp=1,fsdp=4".
  static std::string LayoutName(const std::string& strategy, const checkpoint::Layout& layout) {
    return strategy.empty() ? layout.ToString() : strategy + " " + layout.ToString();
  }

  // Every rank: true where every rank's `ok` is true.
  StatusOr<bool> AllRanksOk(bool ok) {
    if (world_comm_ == nullptr) return ok;
    at::Tensor flag = at::full({1}, ok ? 1.0 : 0.0, at::kDouble);
    ORRERY_RETURN_IF_ERROR(world_comm_->AllReduce(flag, dist::ReduceOp::kMin));
    return flag.item<double>() > 0;
  }

  // Every rank's stats, on every rank (rank order).
  StatusOr<std::vector<StateIoStats>> GatherStats(const StateIoStats& mine) {
    constexpr int kFields = 6;
    auto pack = [](const StateIoStats& s) {
      return std::vector<double>{
          static_cast<double>(s.bytes),          static_cast<double>(s.bytes_needed),
          static_cast<double>(s.reads),          s.seconds,
          static_cast<double>(s.peak_rss_bytes), static_cast<double>(s.rss_before_bytes)};
    };
    if (world_comm_ == nullptr) return std::vector<StateIoStats>{mine};
    at::Tensor local = at::tensor(pack(mine), at::kDouble);
    at::Tensor all = at::empty({kFields * world_}, at::kDouble);
    ORRERY_RETURN_IF_ERROR(world_comm_->AllGather(local, all));
    std::vector<StateIoStats> out;
    auto a = all.accessor<double, 1>();
    for (int r = 0; r < world_; ++r) {
      StateIoStats s;
      s.bytes = static_cast<uint64_t>(a[r * kFields]);
      s.bytes_needed = static_cast<uint64_t>(a[r * kFields + 1]);
      s.reads = static_cast<uint64_t>(a[r * kFields + 2]);
      s.seconds = a[r * kFields + 3];
      s.peak_rss_bytes = static_cast<uint64_t>(a[r * kFields + 4]);
      s.rss_before_bytes = static_cast<uint64_t>(a[r * kFields + 5]);
      out.push_back(s);
    }
    return out;
  }

  // The per-rank figures of a save or load, as the progress line carries them.
  static Json RankStats(const std::vector<StateIoStats>& all) {
    Json ranks = Json::array();
    for (const auto& s : all) {
      ranks.push_back({{"bytes", s.bytes},
                       {"bytes_needed", s.bytes_needed},
                       {"reads", s.reads},
                       {"seconds", s.seconds},
                       {"peak_rss_bytes", s.peak_rss_bytes},
                       {"rss_before_bytes", s.rss_before_bytes}});
    }
    return ranks;
  }

  // Every rank writes its own state into its shard and fsyncs it; once every
  // rank has, rank 0 commits the metadata (temp name, fsync, rename), and every
  // rank learns the outcome. A rank that dies before the commit leaves the
  // previous checkpoint the newest.
  StatusOr<std::string> Save(const std::string& reason) {
    auto t0 = Clock::now();
    std::string dir = store_->StepDir(step_);
    const checkpoint::Layout layout = CheckpointLayout();
    StateIoStats mine;
    Status written = [&]() -> Status {
      ORRERY_ASSIGN_OR_RETURN(auto writer, checkpoint::ShardWriter::Create(
                                               dir, layout, rank_, checkpoint::BalancedStages(1),
                                               checkpoint::kDefaultBlockSize, store_->storage()));
      ORRERY_RETURN_IF_ERROR(
          WriteLocalState(*writer, *strategy_, task_.model.kind, rank_ == 0, &mine));
      ORRERY_ASSIGN_OR_RETURN(std::string rng, checkpoint::CaptureCpuRngState());
      ORRERY_RETURN_IF_ERROR(writer->AddBlob("rng/cpu", rng));
      return writer->Finish();
    }();
    ORRERY_ASSIGN_OR_RETURN(bool all_written, AllRanksOk(written.ok()));
    if (!written.ok())
      return written.WithContext("writing rank " + std::to_string(rank_) + "'s shard of " + dir);
    if (!all_written) return InternalError("another rank failed to write its shard of " + dir);
    Status committed;
    if (rank_ == 0) committed = store_->Commit(Info(layout));
    if (world_comm_) {
      at::Tensor ok = at::full({1}, committed.ok() ? 1.0 : 0.0, at::kDouble);
      ORRERY_RETURN_IF_ERROR(world_comm_->Broadcast(ok, 0));
      if (ok.item<double>() == 0 && committed.ok())
        committed = InternalError("rank 0 failed to commit the checkpoint");
    }
    ORRERY_RETURN_IF_ERROR(committed.WithContext("checkpoint at step " + std::to_string(step_)));
    mine.seconds = Seconds(t0);
    ORRERY_ASSIGN_OR_RETURN(std::vector<StateIoStats> all, GatherStats(mine));
    const GangTotals gang = Totals(all);
    result_.checkpoint = dir;
    result_.saves.push_back(all);
    const double seconds = Seconds(t0);
    if (metrics_ != nullptr) {
      metrics_->RecordStateIo(metrics::WorkerRecorder::CheckpointOp::kSave, mine.bytes,
                              mine.bytes_needed, mine.peak_rss_bytes);
      metrics_->RecordGangStateIo(metrics::WorkerRecorder::CheckpointOp::kSave, gang.bytes,
                                  gang.bytes_needed, gang.max_peak_rss_bytes);
      if (metrics_->task_level()) {
        metrics_->RecordCheckpointSamples(batches_->cursor().Position());
        metrics_->RecordCheckpoint(metrics::WorkerRecorder::CheckpointOp::kSave, step_, seconds,
                                   DirBytes(dir));
      }
    }
    Emit({{"event", "checkpoint"},
          {"step", step_},
          {"path", dir},
          {"reason", reason},
          {"seconds", seconds},
          {"bytes", gang.bytes},
          {"ranks", RankStats(all)}});
    return dir;
  }

  checkpoint::CheckpointInfo Info(const checkpoint::Layout& layout) const {
    checkpoint::CheckpointInfo info;
    info.step = step_;
    info.layout = layout;
    info.num_layers = 1;
    info.lr_schedule = {{"base_lr", base_lr_},
                        {"global_batch", static_cast<double>(task_.global_batch)},
                        {"warmup_steps", static_cast<double>(task_.schedule.warmup_steps)}};
    clock_->Save(batches_->cursor().Position(), info.lr_schedule);
    info.dataset = batches_->cursor();
    info.extra = {{"template", task_.strategy.name},
                  {"model", task_.model.kind},
                  {"layout", dist::LayoutToString(strategy_->Info().layout)}};
    return info;
  }

  // Each rank reads exactly the regions of the newest usable checkpoint its own
  // state covers, whatever layout wrote it. A damaged checkpoint (a checksum
  // that fails during the load) falls back to the next older one on every rank
  // together.
  Status Resume() {
    auto t0 = Clock::now();
    ORRERY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, store_->CommittedSteps());
    Status last = OkStatus();
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      auto reader = checkpoint::CheckpointReader::Open(store_->StepDir(*it), store_->storage());
      Status s = reader.status();
      StateIoStats mine;
      if (s.ok()) s = checkpoint::VerifyCheckpoint(*reader, checkpoint::VerifyLevel::kFiles);
      std::vector<checkpoint::BlockPiece> partial;
      checkpoint::LoadOptions options;
      options.exact = true;  // each rank reads exactly its bytes; checksums by pieces
      if (s.ok()) s = LoadLocalState(*reader, *strategy_, options, &mine, &partial);
      ORRERY_ASSIGN_OR_RETURN(bool loaded, AllRanksOk(s.ok()));
      // Blocks read in part by several ranks are checked together.
      if (loaded) s = VerifyPiecesTogether(*reader, partial, world_comm_.get(), &mine);
      ORRERY_ASSIGN_OR_RETURN(bool all_ok, AllRanksOk(s.ok()));
      if (!all_ok) {
        last = s.ok() ? InternalError("another rank could not load " + store_->StepDir(*it)) : s;
        std::cerr << "Skipped checkpoint " << store_->StepDir(*it) << ": " << last.ToString()
                  << "\n";
        continue;
      }
      return Restored(*reader, mine, t0);
    }
    if (!last.ok()) return last.WithContext("no usable checkpoint in " + task_.checkpoint_dir);
    return OkStatus();  // a fresh start
  }

  Status Restored(const checkpoint::CheckpointReader& reader, StateIoStats mine,
                  Clock::time_point t0) {
    const auto& meta = reader.metadata();
    auto rng = meta.blobs.find(checkpoint::BlobKey(0, "rng/cpu"));
    if (rng != meta.blobs.end())
      ORRERY_RETURN_IF_ERROR(checkpoint::RestoreCpuRngState(rng->second));
    ResumeLearningRate(meta.info.lr_schedule);
    // An export reads no data: whatever --data says need not be the run's.
    if (!task_.export_only) ORRERY_RETURN_IF_ERROR(batches_->Seek(meta.info.dataset));
    step_ = meta.info.step;
    resumed_ = true;
    resumed_schedule_ = meta.info.lr_schedule;
    result_.resumed_from_step = step_;
    result_.checkpoint = reader.dir();
    ORRERY_ASSIGN_OR_RETURN(std::vector<StateIoStats> all, GatherStats(mine));
    const GangTotals gang = Totals(all);
    result_.load = all;
    if (metrics_ != nullptr) {
      metrics_->RecordStateIo(metrics::WorkerRecorder::CheckpointOp::kLoad, mine.bytes,
                              mine.bytes_needed, mine.peak_rss_bytes);
      metrics_->RecordGangStateIo(metrics::WorkerRecorder::CheckpointOp::kLoad, gang.bytes,
                                  gang.bytes_needed, gang.max_peak_rss_bytes);
      if (metrics_->task_level()) {
        metrics_->RecordCheckpointSamples(meta.info.dataset.Position());
        metrics_->RecordCheckpoint(metrics::WorkerRecorder::CheckpointOp::kLoad, step_, Seconds(t0),
                                   DirBytes(reader.dir()));
      }
    }
    // Both sides named alike ("<template> dp=..,tp=..,pp=..,fsdp=.."), so equal
    // names mean a plain resume and different ones a re-shard.
    auto written_by = meta.info.extra.find("template");
    const std::string from_layout =
        LayoutName(written_by == meta.info.extra.end() ? "" : written_by->second, meta.info.layout);
    const std::string to_layout = LayoutName(task_.strategy.name, CheckpointLayout());
    if (metrics_ != nullptr) metrics_->RecordRestoreLayouts(from_layout, to_layout);
    // Announced after "start" (the first line says what the run is).
    restore_event_ = Json{{"event", "restore"},       {"step", step_},
                          {"path", reader.dir()},     {"from_layout", from_layout},
                          {"layout", to_layout},      {"seconds", Seconds(t0)},
                          {"bytes_read", gang.bytes}, {"bytes_needed", gang.bytes_needed},
                          {"ranks", RankStats(all)}};
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
  const TrainHooks* hooks_;
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
  Json restore_event_;
  uint64_t rss_at_start_ = 0;  // the resume's "restore" line, printed after "start"
};

}  // namespace

StatusOr<TrainResult> Train(TaskConfig task, dist::Rendezvous* rendezvous, std::ostream& out,
                            const std::atomic<bool>* stop, TrainRecorder* metrics,
                            const TrainHooks* hooks) {
  Run run(std::move(task), rendezvous, out, stop, metrics, hooks);
  auto r = run.Go();
  if (!r.ok() && (rendezvous == nullptr || rendezvous->config().rank == 0)) {
    out << Json({{"event", "done"}, {"status", "failed"}, {"error", r.status().ToString()}}).dump()
        << std::endl;
  }
  return r;
}

}  // namespace orrery::train
