// A training rank's /metrics as a scraper sees it: a tiny model trains on one
// thread while this one scrapes over HTTP; after the last step every worker
// metric carries the run's exact figures and the task's labels; a resume sets
// the checkpoint step and samples and records the load; the checkpoint's samples
// stay exact across a change of global batch; with two data-parallel ranks each
// exports its own share and only rank 0 the task's series.
#include "worker/train/metrics_export.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/worker/dist/run_ranks.h"
#include "tests/worker/train/scrape.h"
#include "worker/train/trainer.h"

namespace orrery::train {
namespace {

using testing_worker::ParseExposition;
using testing_worker::Sample;
using testing_worker::ScrapeMetrics;
using testing_worker::Select;
using testing_worker::ValueOf;
using Labels = std::map<std::string, std::string>;

const Labels kTask = {{"msj", "ns/sweep"}, {"task", "lr-3e-4"}};

TaskConfig TinyGpt() {
  TaskConfig t;
  t.model.kind = "gpt";
  t.model.gpt = {2, 32, 4, 16, 64};
  t.optimizer.kind = "adamw";
  t.optimizer.lr = 3e-3;
  t.global_batch = 8;
  t.steps = 12;
  t.report_every = 4;
  t.metrics = {"127.0.0.1:0", "ns/sweep", "lr-3e-4"};
  return t;
}

Labels With(Labels labels, const std::string& key, const std::string& value) {
  labels[key] = value;
  return labels;
}

std::vector<Sample> Scrape(int port) {
  auto text = ScrapeMetrics(port);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return {};
  auto samples = ParseExposition(*text);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<Sample>{};
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

TEST(MetricsExportTest, ScrapedDuringAndAfterTrainingWithTheRunsFigures) {
  testing_worker::TempDir dir;
  TaskConfig t = TinyGpt();
  t.checkpoint_dir = dir.path();
  t.checkpoint_every = 5;
  std::ostringstream announce;
  auto exported = MetricsExport::Start(t.metrics, 0, announce);
  ASSERT_TRUE(exported.ok()) << exported.status();
  const int port = (*exported)->port();
  EXPECT_EQ(announce.str(),
            nlohmann::json({{"event", "metrics"}, {"address", "127.0.0.1:" + std::to_string(port)}})
                    .dump() +
                "\n");

  std::atomic<bool> done{false};
  StatusOr<TrainResult> result = InternalError("not run");
  std::ostringstream progress;
  std::thread trainer([&] {
    result = Train(t, nullptr, progress, nullptr, &(*exported)->recorder());
    done.store(true);
  });
  // Whatever moment a scrape lands on, what it shows is consistent.
  double last_step = 0;
  int scrapes = 0;
  while (!done.load() && scrapes < 10000) {
    ++scrapes;
    auto samples = Scrape(port);
    // Absent until the run knows its first step (0, or the step it resumed).
    if (auto step = ValueOf(samples, "orrery_worker_step", kTask)) {
      EXPECT_GE(*step, last_step);
      EXPECT_LE(*step, 12);
      last_step = *step;
    }
    if (auto ckpt = ValueOf(samples, "orrery_worker_checkpoint_step", kTask)) {
      EXPECT_TRUE(*ckpt == 5 || *ckpt == 10 || *ckpt == 12) << *ckpt;
    }
    if (auto ckpt = ValueOf(samples, "orrery_worker_checkpoint_samples", kTask)) {
      EXPECT_TRUE(*ckpt == 40 || *ckpt == 80 || *ckpt == 96) << *ckpt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // leave the core to training
  }
  trainer.join();
  ASSERT_TRUE(result.ok()) << result.status();

  auto samples = Scrape(port);
  const Labels rank0 = With(kTask, "rank", "0");
  EXPECT_EQ(ValueOf(samples, "orrery_worker_samples_total", rank0), 12 * 8);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_step", kTask), 12);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_step_duration_seconds_count", rank0), 12);
  EXPECT_GT(ValueOf(samples, "orrery_worker_step_duration_seconds_sum", rank0).value_or(0), 0);
  EXPECT_EQ(
      ValueOf(samples, "orrery_worker_step_duration_seconds_bucket", With(rank0, "le", "+Inf")),
      12);
  EXPECT_GT(ValueOf(samples, "orrery_worker_samples_per_second", rank0).value_or(0), 0);
  auto loss = ValueOf(samples, "orrery_worker_loss", kTask);
  ASSERT_TRUE(loss.has_value());
  EXPECT_TRUE(std::isfinite(*loss));
  EXPECT_NEAR(*loss, result->loss, 1e-6 * std::abs(result->loss));
  // Periodic at 5 and 10, final at 12.
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_step", kTask), 12);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_samples", kTask), 12 * 8);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_duration_seconds_count",
                    With(kTask, "op", "save")),
            3);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_duration_seconds_count",
                    With(kTask, "op", "load")),
            0);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_bytes", kTask),
            static_cast<double>(DirBytes(result->checkpoint)));
  EXPECT_GT(DirBytes(result->checkpoint), 0u);
  // Every worker series carries the task's labels; per-rank ones this rank.
  int worker_series = 0;
  for (const Sample& s : samples) {
    if (s.name.rfind("orrery_worker_", 0) != 0) continue;
    ++worker_series;
    EXPECT_EQ(s.labels.at("msj"), "ns/sweep") << s.name;
    EXPECT_EQ(s.labels.at("task"), "lr-3e-4") << s.name;
    if (s.labels.count("rank") != 0) {
      EXPECT_EQ(s.labels.at("rank"), "0") << s.name;
    }
  }
  EXPECT_GT(worker_series, 8);
}

TEST(MetricsExportTest, ResumeSetsTheCheckpointStepAndRecordsTheLoad) {
  testing_worker::TempDir dir;
  TaskConfig t = TinyGpt();
  t.steps = 4;
  t.checkpoint_dir = dir.path();
  std::ostringstream sink;
  auto first = Train(t, nullptr, sink, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();

  // The budget is already spent: the second run resumes and stops at once.
  auto exported = MetricsExport::Start(t.metrics, 0, sink);
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto second = Train(t, nullptr, sink, nullptr, &(*exported)->recorder());
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->resumed_from_step, 4);
  auto samples = Scrape((*exported)->port());
  EXPECT_EQ(ValueOf(samples, "orrery_worker_step", kTask), 4);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_step", kTask), 4);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_samples", kTask), 4 * 8);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_duration_seconds_count",
                    With(kTask, "op", "load")),
            1);
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_bytes", kTask),
            static_cast<double>(DirBytes(first->checkpoint)));
  // The gang's sums (one rank here: its own figures) next to the rank's.
  ASSERT_EQ(second->load.size(), 1u);
  const Labels load = With(kTask, "op", "load");
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_gang_bytes", With(load, "kind", "moved")),
            static_cast<double>(second->load[0].bytes));
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_gang_bytes", With(load, "kind", "needed")),
            static_cast<double>(second->load[0].bytes_needed));
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_rank_bytes",
                    With(With(load, "kind", "moved"), "rank", "0")),
            static_cast<double>(second->load[0].bytes));
  EXPECT_GT(second->load[0].bytes, 0u);
  // Resumed in the layout that saved: the same name on both sides.
  auto info = Select(samples, "orrery_worker_restore_info");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].value, 1);
  EXPECT_EQ(info[0].labels.at("from_layout"), t.strategy.name + " dp=1,tp=1,pp=1,fsdp=1");
  EXPECT_EQ(info[0].labels.at("layout"), info[0].labels.at("from_layout"));
  EXPECT_EQ(ValueOf(samples, "orrery_worker_samples_total", With(kTask, "rank", "0")), 0);
  EXPECT_TRUE(Select(samples, "orrery_worker_loss").empty());  // no step ran here
}

TEST(MetricsExportTest, CheckpointSamplesAreExactAcrossABatchChange) {
  testing_worker::TempDir dir;
  TaskConfig t = TinyGpt();
  t.steps = 4;
  t.checkpoint_dir = dir.path();
  std::ostringstream sink;
  ASSERT_TRUE(Train(t, nullptr, sink, nullptr).ok());  // 4 steps of 8

  TaskConfig wider = t;
  wider.global_batch = 16;
  wider.steps = 6;
  wider.schedule.lr_scaling = "linear";
  auto exported = MetricsExport::Start(t.metrics, 0, sink);
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto second = Train(wider, nullptr, sink, nullptr, &(*exported)->recorder());
  ASSERT_TRUE(second.ok()) << second.status();
  auto samples = Scrape((*exported)->port());
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_step", kTask), 6);
  // 4 steps of 8 and 2 of 16; the step times the last batch would say 96.
  EXPECT_EQ(ValueOf(samples, "orrery_worker_checkpoint_samples", kTask), 4 * 8 + 2 * 16);
  // A later process resuming that checkpoint exports its samples from the start.
  auto fresh = MetricsExport::Start(t.metrics, 0, sink);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto again = Train(wider, nullptr, sink, nullptr, &(*fresh)->recorder());
  ASSERT_TRUE(again.ok()) << again.status();  // resumes at 6 with nothing left to do
  EXPECT_EQ(ValueOf(Scrape((*fresh)->port()), "orrery_worker_checkpoint_samples", kTask), 64);
}

TEST(MetricsExportTest, EachDataParallelRankExportsItsShareAndOnlyRankZeroTheTask) {
  TaskConfig t = TinyGpt();
  t.steps = 3;
  t.strategy.name = "ddp";
  std::vector<std::unique_ptr<MetricsExport>> exports;
  std::ostringstream announce;
  for (int rank = 0; rank < 2; ++rank) {
    auto e = MetricsExport::Start(t.metrics, rank, announce);
    ASSERT_TRUE(e.ok()) << e.status();
    exports.push_back(std::move(*e));
  }
  auto statuses = testing_worker::RunRanks(2, [&](int rank, dist::Rendezvous* rdv) -> Status {
    std::ostringstream sink;
    return Train(t, rdv, sink, nullptr, &exports[static_cast<size_t>(rank)]->recorder()).status();
  });
  for (const auto& s : statuses) ASSERT_TRUE(s.ok()) << s;
  // Only rank 0 announced its address on the progress stream.
  EXPECT_EQ(announce.str().find(exports[1]->address()), std::string::npos);
  EXPECT_NE(announce.str().find(exports[0]->address()), std::string::npos);

  auto zero = Scrape(exports[0]->port());
  auto one = Scrape(exports[1]->port());
  // Each rank of dp=2 trains on half of every global batch of 8.
  EXPECT_EQ(ValueOf(zero, "orrery_worker_samples_total", With(kTask, "rank", "0")), 3 * 4);
  EXPECT_EQ(ValueOf(one, "orrery_worker_samples_total", With(kTask, "rank", "1")), 3 * 4);
  EXPECT_EQ(ValueOf(one, "orrery_worker_step_duration_seconds_count", With(kTask, "rank", "1")), 3);
  EXPECT_TRUE(Select(one, "orrery_worker_samples_total", {{"rank", "0"}}).empty());
  EXPECT_EQ(ValueOf(zero, "orrery_worker_step", kTask), 3);
  EXPECT_TRUE(ValueOf(zero, "orrery_worker_loss", kTask).has_value());
  for (const char* task_series : {"orrery_worker_step", "orrery_worker_loss",
                                  "orrery_worker_checkpoint_duration_seconds_count"}) {
    EXPECT_TRUE(Select(one, task_series).empty()) << task_series;
  }
}

TEST(MetricsExportTest, BusyAddressIsAnErrorNamingTheFlag) {
  std::ostringstream sink;
  auto first = MetricsExport::Start(TinyGpt().metrics, 0, sink);
  ASSERT_TRUE(first.ok()) << first.status();
  MetricsConfig busy = TinyGpt().metrics;
  busy.address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsExport::Start(busy, 0, sink);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics-address"), std::string::npos)
      << second.status();
}

}  // namespace
}  // namespace orrery::train
