// The pipeline schedules: the order each stage runs its micro-batches in
// (complete, deadlock-free, bounded in-flight activations), and 1F1B trained
// end to end at pp = 2 and 4, dp x pp and tp x pp, equal to one process and
// bit-identical to GPipe, holding at most pp - stage micro-batches' activations.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tests/worker/parallel/equivalence.h"
#include "worker/dist/topology.h"

namespace orrery::parallel {
namespace {

using testing_worker::ExpectEquivalent;
using testing_worker::Reference;
using testing_worker::RunResult;
using testing_worker::RunTemplate;
using testing_worker::TinyGpt;
using testing_worker::TinyMlp;

std::vector<PipelineOp> Schedule(const std::string& kind, int stages, int stage, int m) {
  auto ops = PipelineSchedule(kind, stages, stage, m);
  EXPECT_TRUE(ops.ok()) << ops.status();
  return ops.ok() ? *ops : std::vector<PipelineOp>{};
}

// The most micro-batches between their forward and the end of their backward.
int PeakInFlight(const std::vector<PipelineOp>& ops) {
  int live = 0, peak = 0;
  for (const auto& op : ops) {
    live += op.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

// Runs every stage's schedule against the others the way the template does
// (sends never block, a receive blocks until its message was sent) and returns
// false if every unfinished stage is waiting: a deadlock.
bool RunsToCompletion(const std::vector<std::vector<PipelineOp>>& stages, int m) {
  size_t pp = stages.size();
  // activation[s][k]: stage s may run forward k; gradient[s][k]: backward k.
  std::vector<std::vector<bool>> activation(pp, std::vector<bool>(static_cast<size_t>(m))),
      gradient = activation;
  std::vector<size_t> next(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < pp; ++s) {
      while (next[s] < stages[s].size()) {
        PipelineOp op = stages[s][next[s]];
        auto k = static_cast<size_t>(op.micro_batch);
        bool ready = op.forward ? (s == 0 || activation[s][k]) : (s + 1 == pp || gradient[s][k]);
        if (!ready) break;
        if (op.forward && s + 1 < pp) activation[s + 1][k] = true;
        if (!op.forward && s > 0) gradient[s - 1][k] = true;
        ++next[s];
        progress = true;
      }
    }
  }
  for (size_t s = 0; s < pp; ++s) {
    if (next[s] != stages[s].size()) return false;
  }
  return true;
}

TEST(PipelineScheduleTest, OneForwardOneBackwardAfterTheWarmUp) {
  // pp = 4, M = 6, stage 1: two warm-up forwards, alternation, drain.
  std::vector<PipelineOp> expected = {{true, 0}, {true, 1},  {true, 2},  {false, 0},
                                      {true, 3}, {false, 1}, {true, 4},  {false, 2},
                                      {true, 5}, {false, 3}, {false, 4}, {false, 5}};
  EXPECT_EQ(Schedule("1f1b", 4, 1, 6), expected);
  // The last stage alternates from the start.
  expected = {{true, 0}, {false, 0}, {true, 1}, {false, 1}};
  EXPECT_EQ(Schedule("1f1b", 4, 3, 2), expected);
  // GPipe: every forward, then every backward.
  expected = {{true, 0}, {true, 1}, {false, 0}, {false, 1}};
  EXPECT_EQ(Schedule("gpipe", 4, 3, 2), expected);
}

TEST(PipelineScheduleTest, EveryScheduleIsCompleteBoundedAndDeadlockFree) {
  for (const std::string kind : {"gpipe", "1f1b"}) {
    for (int pp = 1; pp <= 6; ++pp) {
      for (int m = 1; m <= 12; ++m) {
        std::vector<std::vector<PipelineOp>> stages;
        for (int s = 0; s < pp; ++s) {
          SCOPED_TRACE(kind + " pp=" + std::to_string(pp) + " stage=" + std::to_string(s) +
                       " M=" + std::to_string(m));
          std::vector<PipelineOp> ops = Schedule(kind, pp, s, m);
          ASSERT_EQ(ops.size(), 2u * static_cast<size_t>(m));
          // Forwards and backwards each in micro-batch order (so gradients
          // accumulate in the same order under both schedules), each
          // micro-batch's forward before its backward.
          int forwards = 0, backwards = 0;
          for (const auto& op : ops) {
            if (op.forward) {
              EXPECT_EQ(op.micro_batch, forwards++);
            } else {
              EXPECT_EQ(op.micro_batch, backwards++);
              EXPECT_LT(op.micro_batch, forwards);
            }
          }
          EXPECT_EQ(PeakInFlight(ops), kind == "gpipe" ? m : std::min(pp - s, m));
          stages.push_back(std::move(ops));
        }
        EXPECT_TRUE(RunsToCompletion(stages, m)) << kind << " pp=" << pp << " M=" << m;
      }
    }
  }
}

TEST(PipelineScheduleTest, RejectsUnknownSchedulesAndCounts) {
  EXPECT_EQ(PipelineSchedule("interleaved", 2, 0, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(PipelineSchedule("1f1b", 2, 2, 4).ok());
  EXPECT_FALSE(PipelineSchedule("1f1b", 2, 0, 0).ok());
  StrategyConfig c;
  c.name = "pipeline";
  c.pipeline_schedule = "zero-bubble";
  EXPECT_EQ(MakeStrategy(TinyGpt(), c, {}, nullptr).status().code(), StatusCode::kInvalidArgument);
}

StrategyConfig Pipeline(const std::string& schedule, dist::Layout layout, int micro_batches) {
  StrategyConfig c;
  c.name = "hybrid";
  c.layout = layout;
  c.micro_batches = micro_batches;
  c.pipeline_schedule = schedule;
  return c;
}

// Equal to one process, and every rank held as many micro-batches' activations
// as its schedule allows: M under GPipe, pp - stage (or M if fewer) under 1F1B.
void ExpectEquivalentWithPeaks(const model::ModelConfig& mc, const StrategyConfig& c) {
  SCOPED_TRACE(c.pipeline_schedule + " " + dist::LayoutToString(c.layout) +
               " M=" + std::to_string(c.micro_batches) + " " + mc.kind);
  std::vector<RunResult> ranks = RunTemplate(c.layout.world_size(), mc, c);
  ExpectEquivalent(Reference(mc), ranks);
  for (int r = 0; r < c.layout.world_size(); ++r) {
    const auto& info = ranks[static_cast<size_t>(r)].info;
    int stage = dist::CoordinatesOf(c.layout, r).pp;
    int bound = c.pipeline_schedule == "gpipe" ? c.micro_batches
                                               : std::min(c.layout.pp - stage, c.micro_batches);
    EXPECT_EQ(info.pipeline_schedule, c.pipeline_schedule);
    EXPECT_EQ(info.peak_live_micro_batches, bound) << "rank " << r << " stage " << stage;
  }
}

TEST(OneFOneBTest, TwoStagesEqualOneProcess) {
  for (int m : {1, 4, 8}) {  // fewer micro-batches than stages, and more
    ExpectEquivalentWithPeaks(TinyGpt(), Pipeline("1f1b", {1, 1, 2}, m));
    ExpectEquivalentWithPeaks(TinyMlp(), Pipeline("1f1b", {1, 1, 2}, m));
  }
}

TEST(OneFOneBTest, FourStagesEqualOneProcess) {
  for (int m : {2, 8}) {
    ExpectEquivalentWithPeaks(TinyGpt(), Pipeline("1f1b", {1, 1, 4}, m));
    ExpectEquivalentWithPeaks(TinyGpt(), Pipeline("gpipe", {1, 1, 4}, m));
  }
  // The MLP has three layers: three stages.
  ExpectEquivalentWithPeaks(TinyMlp(), Pipeline("1f1b", {1, 1, 3}, 8));
}

TEST(OneFOneBTest, DataTimesPipelineEqualsOneProcess) {
  for (int m : {1, 4}) {  // of a local batch of 4
    ExpectEquivalentWithPeaks(TinyGpt(), Pipeline("1f1b", {2, 1, 2}, m));
    ExpectEquivalentWithPeaks(TinyMlp(), Pipeline("1f1b", {2, 1, 2}, m));
  }
}

TEST(OneFOneBTest, TensorTimesPipelineEqualsOneProcess) {
  for (int m : {1, 4}) ExpectEquivalentWithPeaks(TinyGpt(), Pipeline("1f1b", {1, 2, 2}, m));
}

TEST(OneFOneBTest, PipelineTemplateTakesTheSchedule) {
  StrategyConfig c;
  c.name = "pipeline";
  c.pipeline_schedule = "1f1b";
  c.micro_batches = 4;
  auto ranks = RunTemplate(2, TinyMlp(), c);
  ExpectEquivalent(Reference(TinyMlp()), ranks);
  EXPECT_EQ(ranks[0].info.pipeline_schedule, "1f1b");
  EXPECT_EQ(ranks[0].info.peak_live_micro_batches, 2);
  EXPECT_EQ(ranks[1].info.peak_live_micro_batches, 1);
}

// Both schedules run every micro-batch's forward and backward on the same
// inputs and accumulate gradients in the same order, so they agree exactly,
// including through the data-parallel all-reduce armed on the last backward.
TEST(OneFOneBTest, BitIdenticalToGpipe) {
  for (dist::Layout layout : {dist::Layout{1, 1, 2}, dist::Layout{2, 1, 2}}) {
    StrategyConfig gpipe = Pipeline("gpipe", layout, 4);
    gpipe.stage_starts = {2};
    StrategyConfig one_f_one_b = gpipe;
    one_f_one_b.pipeline_schedule = "1f1b";
    for (const auto& mc : {TinyGpt(), TinyMlp()}) {
      std::vector<RunResult> a = RunTemplate(layout.world_size(), mc, gpipe);
      std::vector<RunResult> b = RunTemplate(layout.world_size(), mc, one_f_one_b);
      ASSERT_EQ(a.size(), b.size());
      for (size_t r = 0; r < a.size(); ++r) {
        EXPECT_EQ(a[r].losses, b[r].losses) << mc.kind << " rank " << r;
        ASSERT_EQ(a[r].params.size(), b[r].params.size());
        for (size_t i = 0; i < a[r].params.size(); ++i) {
          EXPECT_TRUE(at::equal(a[r].params[i].second, b[r].params[i].second))
              << mc.kind << " rank " << r << " " << a[r].params[i].first;
        }
      }
    }
  }
}

}  // namespace
}  // namespace orrery::parallel
