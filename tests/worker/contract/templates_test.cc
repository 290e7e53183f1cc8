// The template table: its rows are consistent, and the rules it answers for
// the planner, the launchers and the worker.
#include "worker/contract/templates.h"

#include <set>

#include <gtest/gtest.h>

namespace orrery::contract {
namespace {

TEST(Templates, NamesAreUniqueAndFound) {
  std::set<std::string_view> names;
  for (const TemplateTraits& t : kTemplates) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_EQ(FindTemplate(t.name), &t);
  }
  EXPECT_EQ(FindTemplate("zero3"), nullptr);
  EXPECT_EQ(FindTemplate(""), nullptr);
}

TEST(Templates, PlannableOnesAreTheApisInTableOrder) {
  std::vector<std::string_view> plannable;
  for (const TemplateTraits& t : kTemplates)
    if (t.plannable) plannable.push_back(t.name);
  EXPECT_EQ(std::vector<std::string_view>(kPlannableTemplates.begin(), kPlannableTemplates.end()),
            plannable);
  EXPECT_EQ(TemplateNames(true), "ddp, fsdp, pipeline, tensor, spill");
  EXPECT_EQ(TemplateNames(false), "single, ddp, fsdp, pipeline, tensor, hybrid, spill");
}

TEST(Templates, RowsAreConsistent) {
  for (const TemplateTraits& t : kTemplates) {
    SCOPED_TRACE(std::string(t.name));
    EXPECT_GT(t.efficiency_per_doubling, 0);
    EXPECT_LE(t.efficiency_per_doubling, 1);
    EXPECT_GE(t.frozen_bytes_per_parameter, 4);  // the weight itself, in fp32
    // Every template runs in either recomputation mode; only spill, whose
    // point is a small device, recomputes unless told otherwise.
    EXPECT_TRUE(IsRecomputeMode(t.recompute));
    EXPECT_EQ(t.recompute == "unit", t.memory == MemoryModel::kSpilled);
    // Ranks that hold disjoint parts of the state divide its memory; replicas
    // do not. Spill's working set is bounded by the device, not by ranks.
    if (t.memory == MemoryModel::kWhole) {
      EXPECT_FALSE(t.shards_state);
    }
    if (t.memory != MemoryModel::kSpilled) {
      EXPECT_EQ(MemoryDivisor(t, 4) == 4, t.shards_state);
    }
    // Cutting layers is what needs a chain of blocks.
    if (t.memory == MemoryModel::kSliced || t.memory == MemoryModel::kLayerRange) {
      EXPECT_TRUE(t.splits_layers);
    }
  }
}

TEST(WorkerTemplate, OneRankIsThePlainLoopExceptSpill) {
  EXPECT_EQ(WorkerTemplate("ddp", 1), "single");
  EXPECT_EQ(WorkerTemplate("fsdp", 1), "single");
  EXPECT_EQ(WorkerTemplate("pipeline", 1), "single");
  EXPECT_EQ(WorkerTemplate("spill", 1), "spill");
  EXPECT_EQ(WorkerTemplate("fsdp", 4), "fsdp");
  EXPECT_EQ(WorkerTemplate("tensor", 2), "tensor");
}

TEST(BatchSplits, EachTemplatesRule) {
  EXPECT_TRUE(BatchSplits("ddp", 4, 8));
  EXPECT_FALSE(BatchSplits("ddp", 3, 8));
  EXPECT_FALSE(BatchSplits("fsdp", 3, 8));
  EXPECT_TRUE(BatchSplits("spill", 2, 8));
  // A pipeline needs two micro-batches per stage.
  EXPECT_TRUE(BatchSplits("pipeline", 4, 8));
  EXPECT_FALSE(BatchSplits("pipeline", 4, 4));
  // Tensor ranks all see the whole batch.
  EXPECT_TRUE(BatchSplits("tensor", 3, 5));
  // One rank takes any batch; no batch, no ranks or no template take none.
  EXPECT_TRUE(BatchSplits("pipeline", 1, 3));
  EXPECT_TRUE(BatchSplits("single", 1, 7));
  EXPECT_FALSE(BatchSplits("pipeline", 2, 6));  // 2 ranks, 4 micro-batches
  EXPECT_FALSE(BatchSplits("ddp", 2, 0));
  EXPECT_FALSE(BatchSplits("ddp", 0, 8));
  EXPECT_FALSE(BatchSplits("zero3", 2, 8));
}

}  // namespace
}  // namespace orrery::contract
