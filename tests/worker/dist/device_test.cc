// --device and the GPU path: the flag is taken out of the task flags, and every
// device or backend this binary on this machine cannot use is one clear error
// naming it. Runs in both builds: the CPU build (Debian LibTorch) and the GPU-path
// build (CUDA LibTorch, scripts/cuda-toolkit), with or without a GPU.
#include "worker/dist/device.h"

#include <fstream>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <torch/cuda.h>

#include "tests/worker/dist/run_ranks.h"
#include "worker/checkpoint/io.h"
#include "worker/dist/communicator.h"

namespace orrery::dist {
namespace {

TEST(DeviceFlagTest, IsTakenOutOfTheTaskFlags) {
  std::vector<std::string> args = {"--model", "mlp", "--device", "cuda", "--steps=2"};
  auto d = TakeDeviceFlag(args);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "cuda");
  EXPECT_EQ(args, (std::vector<std::string>{"--model", "mlp", "--steps=2"}));

  args = {"--device=cpu", "--steps", "3"};
  d = TakeDeviceFlag(args);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "cpu");
  EXPECT_EQ(args, (std::vector<std::string>{"--steps", "3"}));
}

TEST(DeviceFlagTest, AbsentIsEmptyAndAMissingValueIsAnError) {
  std::vector<std::string> args = {"--steps", "3"};
  auto d = TakeDeviceFlag(args);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, "");
  EXPECT_EQ(args.size(), 2u);

  args = {"--steps", "3", "--device"};
  EXPECT_EQ(TakeDeviceFlag(args).status().code(), StatusCode::kInvalidArgument);
  args = {"--device="};
  EXPECT_EQ(TakeDeviceFlag(args).status().code(), StatusCode::kInvalidArgument);
}

// The CUDA LibTorch wheels are built with a newer GCC than Debian's and carry
// (and export) their own copy of parts of std::filesystem; its remove_all calls
// recursive_directory_iterator::__erase through a weak reference that Debian's
// libstdc++ does not define, so a binary that binds remove_all to LibTorch's
// copy jumps to address 0 on the first nested directory (CI saw it: the
// templates' device test crashed in a temporary folder's destructor, and the
// worker prunes checkpoint folders with it). cmake/OrreryDependencies.cmake puts
// libstdc++ ahead of LibTorch in every torch binary's search order; this
// removes a nested tree the way the checkpoint store does.
TEST(StandardLibraryTest, RemovesNestedTreesWithTheLinkedLibTorch) {
  testing_worker::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string root = dir.path() + "/checkpoints";
  std::string at = dir.path();
  for (const char* part : {"checkpoints", "step-10", "rank-0", "shards"}) {
    at += std::string("/") + part;
    ASSERT_EQ(::mkdir(at.c_str(), 0700), 0) << at;
    std::ofstream(at + "/file") << "x";
  }
  Status removed = checkpoint::RemoveTree(root);
  ASSERT_TRUE(removed.ok()) << removed;
  struct stat st {};
  EXPECT_NE(::stat(root.c_str(), &st), 0) << root << " is still there";
}

TEST(CheckDeviceTest, CpuWithGlooRunsEverywhere) { EXPECT_TRUE(CheckDevice("cpu", "gloo").ok()); }

TEST(CheckDeviceTest, UnknownDevicesAndBackendsAndNcclOnCpuAreRejected) {
  Status s = CheckDevice("tpu", "gloo");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'tpu'"), std::string::npos) << s;
  s = CheckDevice("cpu", "mpi");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mpi"), std::string::npos) << s;
  s = CheckDevice("cpu", "nccl");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("gloo"), std::string::npos) << s;
}

TEST(CheckDeviceTest, CudaIsUsableWithTheGpuPathAndAVisibleGpuElseSaysWhatIsMissing) {
  Status s = CheckDevice("cuda", "nccl");
  if (BuiltWithCuda() && torch::cuda::device_count() > 0) {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(CheckDevice("cuda", "gloo").ok());  // staged through host memory
    return;
  }
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--device cuda"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--device cpu"), std::string::npos) << s;  // the fix
  if (!BuiltWithCuda()) {
    EXPECT_NE(s.message().find("ORRERY_WITH_CUDA=ON"), std::string::npos) << s;
    EXPECT_EQ(GpuPathSummary(), "CPU only (built without the GPU path)");
  } else {
    EXPECT_NE(s.message().find("no CUDA device is visible"), std::string::npos) << s;
    EXPECT_NE(GpuPathSummary().find("NCCL "), std::string::npos) << GpuPathSummary();
  }
}

TEST(RankDeviceTest, CpuIsTheHostAndCudaFollowsLocalRankElseTheRank) {
  auto d = RankDevice("cpu", 3, "1");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->is_cpu());
  EXPECT_TRUE(UseDevice(*d).ok());
  EXPECT_EQ(PeakDeviceMemory(*d), -1);  // no allocator pool to ask
  EXPECT_EQ(RankDevice("tpu", 0, nullptr).status().code(), StatusCode::kInvalidArgument);

  const int64_t gpus = BuiltWithCuda() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  if (!BuiltWithCuda()) {
    EXPECT_EQ(RankDevice("cuda", 0, nullptr).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(UseDevice(c10::Device(c10::kCUDA, 0)).code(), StatusCode::kFailedPrecondition);
    return;
  }
  EXPECT_EQ(RankDevice("cuda", 0, "-1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RankDevice("cuda", 0, "one").status().code(), StatusCode::kInvalidArgument);
  // LOCAL_RANK naming a GPU that is not there.
  auto past = RankDevice("cuda", 0, std::to_string(gpus).c_str());
  EXPECT_EQ(past.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(past.status().message().find("cuda:" + std::to_string(gpus)), std::string::npos)
      << past.status();
  if (gpus == 0) {
    auto none = RankDevice("cuda", 0, nullptr);
    EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(none.status().message().find("--device cpu"), std::string::npos) << none.status();
    return;
  }
  d = RankDevice("cuda", 5, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(5 % gpus)));
  d = RankDevice("cuda", 5, "0");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(UseDevice(*d).ok());
}

// The NCCL communicator: not built in the CPU build; in the GPU-path build it is
// created (one rank, a file store), which needs a GPU, and without one fails as
// a Status naming the missing GPU, not as a crash.
TEST(NcclGroupTest, IsCreatedOnlyWhereItCanRun) {
  testing_worker::TempDir dir;
  RendezvousConfig c;
  c.store_path = dir.path() + "/store";
  c.timeout = std::chrono::milliseconds(20000);
  auto rdv = Connect(c, "nccl");
  ASSERT_TRUE(rdv.ok()) << rdv.status();
  auto group = (*rdv)->NewGroup("all", {0});
  if (!BuiltWithCuda()) {
    EXPECT_EQ(group.status().code(), StatusCode::kUnimplemented) << group.status();
    EXPECT_NE(group.status().message().find("nccl needs the CUDA build"), std::string::npos);
  } else if (torch::cuda::device_count() == 0) {
    ASSERT_FALSE(group.ok());
    EXPECT_NE(group.status().message().find("GPU"), std::string::npos) << group.status();
  } else {
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ((*group)->backend(), "nccl");
  }
}

}  // namespace
}  // namespace orrery::dist
