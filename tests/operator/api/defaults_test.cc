// Computed defaults: profiled GPU counts and elastic batch bounds.
#include "operator/api/defaults.h"

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "tests/operator/api/test_jobs.h"

namespace orrery::api {
namespace {

TEST(DefaultsTest, ProfileGpuCountsArePowersOfTwoWithinBounds) {
  EXPECT_EQ(DefaultProfileGpuCounts(1, 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(DefaultProfileGpuCounts(3, 12), (std::vector<int>{3, 4, 8, 12}));
  EXPECT_EQ(DefaultProfileGpuCounts(2, 2), (std::vector<int>{2}));
  EXPECT_EQ(DefaultProfileGpuCounts(1, 1), (std::vector<int>{1}));
  EXPECT_TRUE(DefaultProfileGpuCounts(4, 2).empty());
}

TEST(DefaultsTest, FillsGpuCountsOnlyWhenEmpty) {
  ModelSelectionJobSpec spec = JobFromYaml(testing::kMinimalYaml)->spec;
  spec.resources.gpus_per_task = {1, 4};
  ApplyDefaults(&spec);
  EXPECT_EQ(spec.profiling.gpu_counts, (std::vector<int>{1, 2, 4}));
  spec.profiling.gpu_counts = {2};
  ApplyDefaults(&spec);
  EXPECT_EQ(spec.profiling.gpu_counts, (std::vector<int>{2}));
}

TEST(DefaultsTest, ElasticBoundsFollowTheTasksBatchSizes) {
  ModelSelectionJobSpec spec = JobFromYaml(testing::kMinimalYaml)->spec;  // batchSize 16
  ApplyDefaults(&spec);
  EXPECT_FALSE(spec.elasticity.min_batch_size.has_value()) << "only when elasticity is on";
  spec.elasticity.enabled = true;
  spec.tasks[0].search_space = SearchSpace{GridSpace{{}, {8, 128}, {}, {}, {}}, std::nullopt};
  ApplyDefaults(&spec);
  EXPECT_EQ(*spec.elasticity.min_batch_size, 8 / kElasticBatchShrink);
  EXPECT_EQ(*spec.elasticity.max_batch_size, 128 * kElasticBatchGrow);
}

TEST(DefaultsTest, NeverOverwritesAndIsIdempotent) {
  ModelSelectionJobSpec spec = JobFromYaml(testing::kMinimalYaml)->spec;
  spec.elasticity.enabled = true;
  spec.elasticity.max_batch_size = 20;
  ApplyDefaults(&spec);
  EXPECT_EQ(*spec.elasticity.max_batch_size, 20);
  EXPECT_EQ(*spec.elasticity.min_batch_size, 4);
  ModelSelectionJobSpec again = spec;
  ApplyDefaults(&again);
  EXPECT_EQ(again, spec);
}

TEST(DefaultsTest, ElasticMaxIsCappedAtTheSchemaLimit) {
  ModelSelectionJobSpec spec = JobFromYaml(testing::kMinimalYaml)->spec;
  spec.elasticity.enabled = true;
  spec.tasks[0].training.batch_size = 1000000;
  ApplyDefaults(&spec);
  EXPECT_EQ(static_cast<double>(*spec.elasticity.max_batch_size),
            *LimitFor("spec.elasticity.maxBatchSize").max);
}

}  // namespace
}  // namespace orrery::api
