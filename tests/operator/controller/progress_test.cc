// Progress read from workers: the Prometheus text a worker serves becomes a
// TaskProgress; the scraper finds rank 0 of Running gangs in a pod store and
// reads a real metrics endpoint (prometheus-cpp's server, as the worker uses);
// the probe server answers the kubelet's probes.
#include "operator/controller/progress.h"

#include <atomic>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/metrics/metrics.h"
#include "operator/controller/names.h"
#include "operator/controller/probe_server.h"
#include "operator/kube/store.h"

namespace orrery::controller {
namespace {

const char* kWorkerText = R"(# HELP orrery_worker_step Last completed optimizer step.
# TYPE orrery_worker_step gauge
orrery_worker_step{msj="ns/sweep",task="mlp-0"} 42
# TYPE orrery_worker_step_duration_seconds histogram
orrery_worker_step_duration_seconds_count{msj="ns/sweep",rank="0",task="mlp-0"} 42
# TYPE orrery_worker_checkpoint_step gauge
orrery_worker_checkpoint_step{msj="ns/sweep",task="mlp-0"} 40
# TYPE orrery_worker_checkpoint_samples gauge
orrery_worker_checkpoint_samples{msj="ns/sweep",task="mlp-0"} 480
# TYPE orrery_worker_samples_per_second gauge
orrery_worker_samples_per_second{msj="ns/sweep",rank="0",task="mlp-0"} 512.5
# TYPE orrery_worker_loss gauge
orrery_worker_loss{msj="ns/sweep",task="mlp-0"} 2.25
)";

TEST(ParseWorkerMetricsTest, ReadsStepCheckpointThroughputAndLoss) {
  auto p = ParseWorkerMetrics(kWorkerText);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 42);  // not the histogram's _count, which shares the prefix
  EXPECT_EQ(p->checkpoint_step, 40);
  EXPECT_EQ(p->checkpoint_samples, 480);  // not 40 × any one batch: it changed on the way
  EXPECT_DOUBLE_EQ(p->samples_per_second, 512.5);
  EXPECT_TRUE(p->has_loss);
  EXPECT_DOUBLE_EQ(p->loss, 2.25);
}

TEST(ParseWorkerMetricsTest, NoStepIsNoProgressAndNoCheckpointIsMinusOne) {
  EXPECT_FALSE(ParseWorkerMetrics("").has_value());
  EXPECT_FALSE(ParseWorkerMetrics("orrery_worker_step_duration_seconds_count 3\n").has_value());
  auto p = ParseWorkerMetrics("orrery_worker_step 7\n");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 7);
  EXPECT_EQ(p->checkpoint_step, -1);
  EXPECT_EQ(p->checkpoint_samples, 0);
  EXPECT_FALSE(p->has_loss);
  // A worker that exports the step but not the samples (an older image): 0.
  p = ParseWorkerMetrics("orrery_worker_step 7\norrery_worker_checkpoint_step 5\n");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->checkpoint_step, 5);
  EXPECT_EQ(p->checkpoint_samples, 0);
}

// What a gang of two ranks that resumed and then saved twice serves on rank 0:
// the task's histograms and rank 0's own bytes and memory (its process serves
// no other rank's series).
const char* kStateIoText = R"(# TYPE orrery_worker_step gauge
orrery_worker_step{msj="ns/sweep",task="mlp-0"} 60
orrery_worker_checkpoint_step{msj="ns/sweep",task="mlp-0"} 60
# TYPE orrery_worker_checkpoint_duration_seconds histogram
orrery_worker_checkpoint_duration_seconds_bucket{msj="ns/sweep",op="load",task="mlp-0",le="+Inf"} 1
orrery_worker_checkpoint_duration_seconds_sum{msj="ns/sweep",op="load",task="mlp-0"} 0.08
orrery_worker_checkpoint_duration_seconds_count{msj="ns/sweep",op="load",task="mlp-0"} 1
orrery_worker_checkpoint_duration_seconds_sum{msj="ns/sweep",op="save",task="mlp-0"} 0.5
orrery_worker_checkpoint_duration_seconds_count{msj="ns/sweep",op="save",task="mlp-0"} 2
# TYPE orrery_worker_checkpoint_rank_bytes gauge
orrery_worker_checkpoint_rank_bytes{kind="moved",msj="ns/sweep",op="load",rank="0",task="mlp-0"} 6150000
orrery_worker_checkpoint_rank_bytes{kind="needed",msj="ns/sweep",op="load",rank="0",task="mlp-0"} 6150000
orrery_worker_checkpoint_rank_bytes{kind="moved",msj="ns/sweep",op="save",rank="0",task="mlp-0"} 6100000
orrery_worker_checkpoint_rank_bytes{kind="needed",msj="ns/sweep",op="save",rank="0",task="mlp-0"} 6100000
# TYPE orrery_worker_checkpoint_peak_rss_bytes gauge
orrery_worker_checkpoint_peak_rss_bytes{msj="ns/sweep",op="load",rank="0",task="mlp-0"} 210000000
orrery_worker_checkpoint_peak_rss_bytes{msj="ns/sweep",op="save",rank="0",task="mlp-0"} 230000000
)";

TEST(ParseWorkerMetricsTest, ReadsRankZerosSavesAndRestoreByOperation) {
  auto p = ParseWorkerMetrics(kStateIoText);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->load.count, 1);
  EXPECT_DOUBLE_EQ(p->load.seconds_total, 0.08);
  EXPECT_DOUBLE_EQ(p->load.last_seconds, 0.08);  // one load: its sum is its time
  EXPECT_EQ(p->load.bytes_moved, 6150000);
  EXPECT_EQ(p->load.bytes_needed, 6150000);
  EXPECT_EQ(p->load.peak_rss_bytes, 210000000);
  EXPECT_EQ(p->save.count, 2);
  EXPECT_DOUBLE_EQ(p->save.seconds_total, 0.5);
  EXPECT_LT(p->save.last_seconds, 0);  // two saves in one sum: which took what is unknown
  EXPECT_EQ(p->save.bytes_moved, 6100000);
  EXPECT_EQ(p->save.bytes_needed, 6100000);
  EXPECT_EQ(p->save.peak_rss_bytes, 230000000);
  // The checkpoint gauge moved on with the saves: the resume point is not in it.
  EXPECT_EQ(p->checkpoint_step, 60);
  EXPECT_EQ(p->restore_step, -1);

  // Before its first save the gauge is the checkpoint it loaded.
  p = ParseWorkerMetrics(
      "orrery_worker_step{task=\"t\"} 40\n"
      "orrery_worker_checkpoint_step{task=\"t\"} 40\n"
      "orrery_worker_checkpoint_duration_seconds_count{op=\"load\",task=\"t\"} 1\n"
      "orrery_worker_checkpoint_duration_seconds_count{op=\"save\",task=\"t\"} 0\n");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->restore_step, 40);
  EXPECT_EQ(p->save.count, 0);
  EXPECT_EQ(p->save.bytes_moved, -1);  // not exported: no save yet

  // A fresh start: no load, no resume point, nothing of either operation.
  p = ParseWorkerMetrics(kWorkerText);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->restore_step, -1);
  EXPECT_EQ(p->load, StateIoProgress{});
  EXPECT_EQ(p->save, StateIoProgress{});
}

// A worker that exports the gang's sums (rank 0 for its four ranks): those are
// what the status reports, not rank 0's own share.
TEST(ParseWorkerMetricsTest, PrefersTheGangsSumsOverRankZerosOwn) {
  std::string text = std::string(kStateIoText) +
                     "orrery_worker_checkpoint_gang_bytes{kind=\"moved\",msj=\"ns/sweep\","
                     "op=\"load\",task=\"mlp-0\"} 24600000\n"
                     "orrery_worker_checkpoint_gang_bytes{kind=\"needed\",msj=\"ns/sweep\","
                     "op=\"load\",task=\"mlp-0\"} 24600000\n"
                     "orrery_worker_checkpoint_gang_peak_rss_bytes{msj=\"ns/sweep\",op=\"load\","
                     "task=\"mlp-0\"} 250000000\n";
  auto p = ParseWorkerMetrics(text);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->load.whole_gang);
  EXPECT_EQ(p->load.bytes_moved, 24600000);
  EXPECT_EQ(p->load.bytes_needed, 24600000);
  EXPECT_EQ(p->load.peak_rss_bytes, 250000000);
  // No gang sums for the saves: rank 0's own, and said so.
  EXPECT_FALSE(p->save.whole_gang);
  EXPECT_EQ(p->save.bytes_moved, 6100000);
  EXPECT_EQ(p->save.peak_rss_bytes, 230000000);
}

TEST(ParseWorkerMetricsTest, LabelValuesAreMatchedWholeAndUnescaped) {
  auto p = ParseWorkerMetrics(
      "orrery_worker_step{msj=\"a\\\"b\",task=\"t\"} 1\n"
      // A label value holding the text of another label does not match it.
      "orrery_worker_checkpoint_rank_bytes{note=\"op=\\\"save\\\"\",op=\"loads\",kind=\"moved\"} "
      "5\n"
      "orrery_worker_checkpoint_rank_bytes{op=\"save\",kind=\"moved\"} 7\n"
      "orrery_worker_checkpoint_peak_rss_bytes{op=\"save\" 9\n");  // malformed: skipped
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->save.bytes_moved, 7);
  EXPECT_EQ(p->load.bytes_moved, -1);
  EXPECT_EQ(p->save.peak_rss_bytes, -1);
}

TEST(CarryOverTest, TheLatestSavesTimeIsTheSumsGrowthAcrossOneSave) {
  TaskProgress before;
  before.generation = 3;
  before.save.count = 2;
  before.save.seconds_total = 0.5;
  before.restore_step = 40;
  TaskProgress next = before;
  next.save.count = 3;
  next.save.seconds_total = 0.75;
  next.save.last_seconds = -1;
  next.restore_step = -1;  // a save moved the checkpoint gauge on
  CarryOver(before, &next);
  EXPECT_DOUBLE_EQ(next.save.last_seconds, 0.25);
  EXPECT_EQ(next.restore_step, 40);
  // Nothing new: the time is kept.
  TaskProgress again = next;
  again.save.last_seconds = -1;
  CarryOver(next, &again);
  EXPECT_DOUBLE_EQ(again.save.last_seconds, 0.25);
  // Two saves between readings: unknown.
  TaskProgress jump = again;
  jump.save.count = 5;
  jump.save.seconds_total = 1.5;
  jump.save.last_seconds = -1;
  CarryOver(again, &jump);
  EXPECT_LT(jump.save.last_seconds, 0);
  // Another gang's reading says nothing about this one.
  TaskProgress other = next;
  other.generation = 4;
  other.save.last_seconds = -1;
  other.restore_step = -1;
  CarryOver(before, &other);
  EXPECT_LT(other.save.last_seconds, 0);
  EXPECT_EQ(other.restore_step, -1);
}

TEST(LastCheckpointTest, NewStepIsANewReferenceWithItsSamples) {
  TaskProgress p;
  p.checkpoint_step = 40;
  p.checkpoint_samples = 480;
  auto ref = LastCheckpoint(std::nullopt, p, "/ck/t", "2026-01-01T00:00:05Z");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(*ref, (api::CheckpointRef{40, "/ck/t", "2026-01-01T00:00:05Z", 480}));
  // The same checkpoint read again keeps its time.
  EXPECT_EQ(LastCheckpoint(ref, p, "/ck/t", "2026-01-01T00:00:10Z"), ref);
  // A newer one replaces it.
  p.checkpoint_step = 50;
  p.checkpoint_samples = 640;
  auto next = LastCheckpoint(ref, p, "/ck/t", "2026-01-01T00:00:10Z");
  EXPECT_EQ(*next, (api::CheckpointRef{50, "/ck/t", "2026-01-01T00:00:10Z", 640}));
  // No checkpoint reported: whatever the status held.
  EXPECT_EQ(LastCheckpoint(next, TaskProgress{}, "/ck/t", "later"), next);
  EXPECT_FALSE(LastCheckpoint(std::nullopt, TaskProgress{}, "/ck/t", "later").has_value());
}

TEST(LastCheckpointTest, SamplesArrivingAfterTheStepFillTheSameReference) {
  // A scrape between the worker's two gauge updates saw the step only.
  api::CheckpointRef held{40, "/ck/t", "2026-01-01T00:00:05Z", 0};
  TaskProgress p;
  p.checkpoint_step = 40;
  p.checkpoint_samples = 480;
  auto ref = LastCheckpoint(held, p, "/ck/t", "2026-01-01T00:00:10Z");
  EXPECT_EQ(*ref, (api::CheckpointRef{40, "/ck/t", "2026-01-01T00:00:05Z", 480}));
  // A worker that does not report samples leaves what is known alone.
  p.checkpoint_samples = 0;
  EXPECT_EQ(LastCheckpoint(ref, p, "/ck/t", "2026-01-01T00:00:10Z"), ref);
}

TEST(LastCheckpointTest, ASaveOfTheGangCarriesItsSecondsAndRankZerosFigures) {
  TaskProgress p;
  p.checkpoint_step = 50;
  p.save.count = 1;
  p.save.last_seconds = 0.5;
  p.save.bytes_moved = 6100000;
  p.save.bytes_needed = 6100000;
  p.save.peak_rss_bytes = 230000000;
  auto ref = LastCheckpoint(std::nullopt, p, "/ck/t", "t1");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->step, 50);
  EXPECT_DOUBLE_EQ(ref->seconds, 0.5);
  EXPECT_EQ(ref->bytes_written, 6100000);
  EXPECT_EQ(ref->bytes_needed, 6100000);
  EXPECT_EQ(ref->peak_rss_bytes, 230000000);
  // The next save's time unknown (two between scrapes): its bytes, not the old time.
  p.checkpoint_step = 70;
  p.save.count = 3;
  p.save.last_seconds = -1;
  p.save.peak_rss_bytes = 240000000;
  auto next = LastCheckpoint(ref, p, "/ck/t", "t2");
  EXPECT_EQ(next->step, 70);
  EXPECT_EQ(next->time, "t2");
  EXPECT_EQ(next->seconds, 0);
  EXPECT_EQ(next->peak_rss_bytes, 240000000);
  // A gang that resumed and has not saved yet: the checkpoint it loaded keeps
  // what its own save reported.
  TaskProgress resumed;
  resumed.generation = 1;
  resumed.checkpoint_step = 70;
  resumed.load.count = 1;
  resumed.load.bytes_moved = 1;
  EXPECT_EQ(LastCheckpoint(next, resumed, "/ck/t", "t3"), next);
}

TEST(LastRestoreTest, TheGangsLoadIsKeptPerGenerationAndFilledAsItIsSeen) {
  TaskProgress fresh;
  fresh.generation = 0;
  EXPECT_FALSE(LastRestore(std::nullopt, fresh, "t0").has_value());  // no load: no restore

  TaskProgress p;
  p.generation = 2;
  p.restore_step = 40;
  p.load.count = 1;
  p.load.last_seconds = 0.125;
  p.load.bytes_moved = 6150000;
  p.load.bytes_needed = 6150000;
  p.load.peak_rss_bytes = 210000000;
  auto ref = LastRestore(std::nullopt, p, "t1");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(*ref, (api::RestoreRef{2, 40, "t1", 0.125, 6150000, 6150000, 210000000, "", ""}));
  // Read again after saves moved the checkpoint gauge on: the same restore.
  p.restore_step = -1;
  EXPECT_EQ(LastRestore(ref, p, "t2"), ref);
  // A gang of another generation that did not load (no checkpoint left):
  // the last restore stays what it was.
  EXPECT_EQ(LastRestore(ref, fresh, "t3"), ref);
  // The next gang's restore, first seen after its first save: no step.
  TaskProgress later = p;
  later.generation = 3;
  later.load.peak_rss_bytes = 190000000;
  auto next = LastRestore(ref, later, "t4");
  EXPECT_EQ(*next, (api::RestoreRef{3, -1, "t4", 0.125, 6150000, 6150000, 190000000, "", ""}));
}

TEST(ProgressBoardTest, SetReportsChangesOnly) {
  ProgressBoard board;
  TaskProgress p;
  p.step = 3;
  EXPECT_TRUE(board.Set("ns/a", "t", p));
  EXPECT_FALSE(board.Set("ns/a", "t", p));
  p.step = 4;
  EXPECT_TRUE(board.Set("ns/a", "t", p));
  EXPECT_EQ(board.ForJob("ns/a").at("t").step, 4);
  p.checkpoint_samples = 32;  // the samples alone moving is a change
  EXPECT_TRUE(board.Set("ns/a", "t", p));
  EXPECT_EQ(board.ForJob("ns/a").at("t").checkpoint_samples, 32);
  EXPECT_TRUE(board.ForJob("ns/b").empty());
  board.ForgetJob("ns/a");
  EXPECT_TRUE(board.ForJob("ns/a").empty());
}

kube::Object GangPod(const std::string& name, int rank, const std::string& phase, int port) {
  return kube::Object{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "ns"},
        {"resourceVersion", "1"},
        {"labels",
         {{kManagedByLabel, kManagedByValue},
          {kTaskLabel, "mlp-0"},
          {kGangLabel, "mlp-0-g2"},
          {kRankLabel, std::to_string(rank)}}},
        {"annotations", {{kGenerationAnnotation, "2"}}},
        {"ownerReferences", kube::Object::array({{{"apiVersion", "orrery.dev/v1alpha1"},
                                                  {"kind", "ModelSelectionJob"},
                                                  {"name", "sweep"},
                                                  {"uid", "u1"},
                                                  {"controller", true}}})}}},
      {"spec",
       {{"containers",
         kube::Object::array({{{"name", "worker"},
                               {"ports", kube::Object::array({{{"name", "metrics"},
                                                               {"containerPort", port}}})}}})}}},
      {"status", {{"phase", phase}, {"podIP", "127.0.0.1"}}}};
}

TEST(ProgressScraperTest, ReadsRankZeroOfRunningGangsFromTheirMetricsEndpoint) {
  auto registry = std::make_shared<prometheus::Registry>();
  metrics::WorkerMetrics worker(*registry);
  auto exposer = metrics::Exposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  prometheus::Labels labels = {{"msj", "ns/sweep"}, {"task", "mlp-0"}};
  worker.step.Add(labels).Set(17);
  worker.checkpoint_step.Add(labels).Set(10);
  // Registered by the worker's exporter (worker/train/metrics_export.h).
  prometheus::BuildGauge()
      .Name("orrery_worker_checkpoint_samples")
      .Help("Samples consumed at the last checkpoint.")
      .Register(*registry)
      .Add(labels)
      .Set(160);

  kube::Store store;
  store.Replace(
      {std::make_shared<const kube::Object>(GangPod("rank0", 0, "Running", (*exposer)->port())),
       std::make_shared<const kube::Object>(GangPod("rank1", 1, "Running", 1)),
       std::make_shared<const kube::Object>(GangPod("other", 0, "Pending", 1))});
  ProgressBoard board;
  std::set<std::string> woken;
  ProgressScraper scraper(&store, &board, [&](const std::string& job) { woken.insert(job); });
  scraper.ScrapeOnce();
  auto progress = board.ForJob("ns/sweep");
  ASSERT_EQ(progress.count("mlp-0"), 1u);
  EXPECT_EQ(progress["mlp-0"].step, 17);
  EXPECT_EQ(progress["mlp-0"].checkpoint_step, 10);
  EXPECT_EQ(progress["mlp-0"].checkpoint_samples, 160);
  EXPECT_EQ(progress["mlp-0"].generation, 2);
  EXPECT_EQ(woken, std::set<std::string>({"ns/sweep"}));

  // Nothing moved: nobody is woken.
  woken.clear();
  scraper.ScrapeOnce();
  EXPECT_TRUE(woken.empty());
  worker.step.Add(labels).Set(18);
  scraper.ScrapeOnce();
  EXPECT_EQ(woken.size(), 1u);
  EXPECT_EQ(board.ForJob("ns/sweep")["mlp-0"].step, 18);
}

// Rank 0's recorder, as the worker drives it: a resume, then saves one at a
// time between scrapes. The board keeps the resume point and each save's time.
TEST(ProgressScraperTest, KeepsTheRestoreAndEachSavesTimeAcrossScrapes) {
  auto registry = std::make_shared<prometheus::Registry>();
  metrics::WorkerMetrics worker(*registry);
  metrics::WorkerRecorder rank0(worker, "ns/sweep", "mlp-0", 0, /*task_level=*/true);
  auto exposer = metrics::Exposer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  using Op = metrics::WorkerRecorder::CheckpointOp;
  rank0.RecordStateIo(Op::kLoad, 6150000, 6150000, 210000000);
  rank0.RecordRestoreLayouts("fsdp dp=4,tp=1,pp=1,fsdp=4", "hybrid dp=1,tp=2,pp=2,fsdp=1");
  rank0.RecordCheckpoint(Op::kLoad, 40, 0.125, 12300000);
  rank0.RecordStart(40);

  kube::Store store;
  store.Replace(
      {std::make_shared<const kube::Object>(GangPod("rank0", 0, "Running", (*exposer)->port()))});
  ProgressBoard board;
  ProgressScraper scraper(&store, &board, nullptr);
  scraper.ScrapeOnce();
  TaskProgress p = board.ForJob("ns/sweep")["mlp-0"];
  EXPECT_EQ(p.restore_step, 40);
  EXPECT_DOUBLE_EQ(p.load.last_seconds, 0.125);
  EXPECT_EQ(p.load.bytes_moved, 6150000);
  EXPECT_EQ(p.load.peak_rss_bytes, 210000000);
  EXPECT_EQ(p.save.count, 0);
  EXPECT_EQ(p.restore_from_layout, "fsdp dp=4,tp=1,pp=1,fsdp=4");
  EXPECT_EQ(p.restore_layout, "hybrid dp=1,tp=2,pp=2,fsdp=1");
  auto restore = LastRestore(std::nullopt, p, "2026-01-01T00:00:00Z");
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ(restore->from_layout, "fsdp dp=4,tp=1,pp=1,fsdp=4");
  EXPECT_EQ(restore->layout, "hybrid dp=1,tp=2,pp=2,fsdp=1");
  // A later resume in the same process replaces the series: one restore_info.
  rank0.RecordRestoreLayouts("hybrid dp=1,tp=2,pp=2,fsdp=1", "ddp dp=2,tp=1,pp=1,fsdp=1");
  auto text = HttpGet("127.0.0.1", (*exposer)->port(), "/metrics", 2000);
  ASSERT_TRUE(text.ok()) << text.status();
  size_t series = 0;
  for (size_t at = text->find("\norrery_worker_restore_info{"); at != std::string::npos;
       at = text->find("\norrery_worker_restore_info{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 1u) << *text;
  EXPECT_EQ(ParseWorkerMetrics(*text)->restore_layout, "ddp dp=2,tp=1,pp=1,fsdp=1");

  rank0.RecordStateIo(Op::kSave, 6100000, 6100000, 230000000);
  rank0.RecordCheckpoint(Op::kSave, 50, 0.5, 12200000);
  scraper.ScrapeOnce();
  rank0.RecordStateIo(Op::kSave, 6100000, 6100000, 240000000);
  rank0.RecordGangStateIo(Op::kSave, 12200000, 12200000, 260000000);  // two ranks
  rank0.RecordCheckpoint(Op::kSave, 60, 0.25, 12200000);
  scraper.ScrapeOnce();
  p = board.ForJob("ns/sweep")["mlp-0"];
  EXPECT_EQ(p.checkpoint_step, 60);
  EXPECT_EQ(p.restore_step, 40);  // kept from the first reading
  EXPECT_EQ(p.save.count, 2);
  EXPECT_DOUBLE_EQ(p.save.last_seconds, 0.25);
  EXPECT_TRUE(p.save.whole_gang);
  EXPECT_EQ(p.save.bytes_moved, 12200000);
  EXPECT_EQ(p.save.peak_rss_bytes, 260000000);
  EXPECT_DOUBLE_EQ(p.load.last_seconds, 0.125);
  EXPECT_FALSE(p.load.whole_gang);  // that load recorded rank 0's figures only
}

TEST(ProbeServerTest, HealthzAlwaysReadyzWhenReady) {
  std::atomic<bool> ready{false};
  auto server = ProbeServer::Start("127.0.0.1:0", [&]() -> std::string {
    return ready.load() ? "" : "waiting for the pods cache to sync";
  });
  ASSERT_TRUE(server.ok()) << server.status();
  int port = (*server)->port();
  auto healthz = HttpGet("127.0.0.1", port, "/healthz", 2000);
  ASSERT_TRUE(healthz.ok()) << healthz.status();
  EXPECT_EQ(*healthz, "ok\n");
  auto readyz = HttpGet("127.0.0.1", port, "/readyz", 2000);
  ASSERT_FALSE(readyz.ok());
  EXPECT_NE(readyz.status().ToString().find("HTTP 503"), std::string::npos) << readyz.status();
  ready.store(true);
  readyz = HttpGet("127.0.0.1", port, "/readyz", 2000);
  ASSERT_TRUE(readyz.ok()) << readyz.status();
  EXPECT_FALSE(HttpGet("127.0.0.1", port, "/nothing", 2000).ok());
}

TEST(ProbeServerTest, BindAddressesAreParsedOrRefusedWithTheFix) {
  auto any = ParseBindAddress(":8081", "--health-probe-bind-address");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->first, "");
  EXPECT_EQ(any->second, 8081);
  auto local = ParseBindAddress("127.0.0.1:0", "--health-probe-bind-address");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->first, "127.0.0.1");
  auto bad = ParseBindAddress("localhost:http", "--health-probe-bind-address");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("--health-probe-bind-address=:8081"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(ParseBindAddress(":70000", "--x").ok());
}

TEST(HttpGetTest, ConnectionRefusedIsAnErrorNotAHang) {
  auto server = ProbeServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  server->reset();  // closed: nothing listens on the port now
  auto r = HttpGet("127.0.0.1", port, "/metrics", 1000);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace orrery::controller
