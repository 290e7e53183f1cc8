// orrery-worker: the process in every worker pod and every local rank.
//
//   orrery-worker train   [task flags]   train, checkpoint, resume (worker/train/trainer.h)
//   orrery-worker profile [task flags]   time one configuration (worker/profile/profiler.h)
//   orrery-worker export  [task flags] --checkpoint-dir DIR --export-dir OUT
//                         the newest checkpoint in DIR (saved in any layout) as a
//                         Hugging Face model directory (a LoRA run: its PEFT adapter),
//                         in one process; the task flags describe the model as in training
//   orrery-worker gang [gang flags] -- [task flags] -- [task flags] ...
//                         several spill tasks trained interleaved on one device, each
//                         with its own checkpoints and progress (worker/train/gang.h,
//                         worker/contract/gang_args.h)
//   orrery-worker checkpoint inspect|reshard ...   (worker/checkpoint/cli.h)
//
// Task flags are listed in worker/train/task.h; --device cpu|cuda, when given,
// is checked here first (worker/dist/device.h); with cuda each rank computes on
// cuda:LOCAL_RANK (else cuda:RANK % visible GPUs), made current before any NCCL
// group exists. Rendezvous comes from RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or ORRERY_STORE_PATH for a file store on
// one machine); ORRERY_BACKEND=nccl selects NCCL on GPU builds.
// ORRERY_METRICS_ADDRESS (or --metrics-address), with ORRERY_MSJ and ORRERY_TASK
// for labels, makes `train` serve Prometheus metrics on /metrics (README, Metrics);
// `profile` exports none.
// On a CPU OpenBLAS does not recognise, the worker first runs itself again with
// the OpenBLAS kernels the CPU's instructions allow (worker/main/blas_core.h).
// Exit codes: 0 done (completed, or preempted after its checkpoint), 1 failed,
// 2 usage error. SIGTERM and SIGINT ask for a checkpoint and a clean exit.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "worker/checkpoint/cli.h"
#include "worker/contract/gang_args.h"
#include "worker/contract/worker_args.h"
#include "worker/dist/communicator.h"
#include "worker/dist/device.h"
#include "worker/main/blas_core.h"
#include "worker/profile/profiler.h"
#include "worker/train/gang.h"
#include "worker/train/metrics_export.h"
#include "worker/train/trainer.h"

namespace {

std::atomic<bool> g_stop{false};

extern "C" void OnTerminate(int) { g_stop.store(true); }

void Usage(std::ostream& os) {
  os << "usage: orrery-worker train|profile|export [--flag=value ...]\n"
        "       orrery-worker gang [gang flags] -- [task flags] -- [task flags] ...\n"
        "       orrery-worker checkpoint inspect|reshard ...\n"
        "flags (worker/train/task.h says what each does):\n"
     << orrery::contract::WorkerFlagsHelp() << "gang flags (worker/contract/gang_args.h):\n"
     << orrery::contract::GangFlagsHelp();
}

int RunTask(const std::string& mode, std::vector<std::string> args) {
  // Before any tensor, so the profiler's CPU peak counts them all.
  orrery::dist::InstallCpuMemoryCounter();
  auto device = orrery::dist::TakeDeviceFlag(args);
  if (!device.ok()) {
    std::cerr << "orrery-worker " << mode << ": " << device.status() << "\n";
    Usage(std::cerr);
    return 2;
  }
  const char* backend_env = std::getenv("ORRERY_BACKEND");
  std::string backend = backend_env != nullptr && *backend_env != '\0' ? backend_env : "gloo";
  if (!device->empty()) {
    if (auto usable = orrery::dist::CheckDevice(*device, backend); !usable.ok()) {
      std::cerr << "orrery-worker " << mode << ": " << usable << "\n";
      return 1;
    }
  }
  auto task = orrery::train::ParseTaskFlags(args);
  if (task.ok() && mode == "export") {
    if (task->checkpoint_dir.empty() || task->export_dir.empty()) {
      task = orrery::InvalidArgumentError("export needs --checkpoint-dir and --export-dir");
    } else {
      // One process loads the checkpoint whatever layout saved it (live re-sharding).
      task->export_only = true;
      task->resume = true;
      task->strategy.name = "single";
    }
  }
  if (!task.ok()) {
    std::cerr << "orrery-worker " << mode << ": " << task.status() << "\n";
    Usage(std::cerr);
    return 2;
  }
  auto env = orrery::dist::RendezvousFromEnv();
  if (!env.ok()) {
    std::cerr << "orrery-worker: " << env.status() << "\n";
    return 2;
  }
  auto rank_device = orrery::dist::RankDevice(*device, env->rank, std::getenv("LOCAL_RANK"));
  if (rank_device.ok()) {
    if (auto used = orrery::dist::UseDevice(*rank_device); !used.ok()) rank_device = used;
  }
  if (!rank_device.ok()) {
    std::cerr << "orrery-worker " << mode << ": " << rank_device.status() << "\n";
    return 1;
  }
  task->strategy.device = *rank_device;
  std::unique_ptr<orrery::dist::Rendezvous> rdv;
  if (env->world_size > 1) {
    auto connected = orrery::dist::Connect(*env, backend);
    if (!connected.ok()) {
      std::cerr << "orrery-worker: " << connected.status() << "\n";
      return 1;
    }
    rdv = std::move(*connected);
  }
  if (mode == "profile") {
    auto p = orrery::profile::Profile(*task, rdv.get(), std::cout);
    if (!p.ok()) {
      std::cerr << "orrery-worker profile: " << p.status() << "\n";
      return 1;
    }
    return 0;
  }
  orrery::train::MetricsDefaultsFromEnvironment(task->metrics,
                                                [](const char* n) { return std::getenv(n); });
  std::unique_ptr<orrery::train::MetricsExport> exporter;
  if (!task->metrics.address.empty()) {
    auto started = orrery::train::MetricsExport::Start(task->metrics, env->rank, std::cout);
    if (!started.ok()) {
      std::cerr << "orrery-worker train: " << started.status() << "\n";
      return 1;
    }
    exporter = std::move(*started);
  }
  std::signal(SIGTERM, OnTerminate);
  std::signal(SIGINT, OnTerminate);
  auto r = orrery::train::Train(*task, rdv.get(), std::cout, &g_stop,
                                exporter ? &exporter->recorder() : nullptr);
  if (!r.ok()) {
    std::cerr << "orrery-worker train: " << r.status() << "\n";
    return 1;
  }
  return 0;
}

// One process, several tasks interleaved on one device (worker/train/gang.h).
int RunGang(const std::vector<std::string>& args) {
  auto gang = orrery::train::ParseGangFlags(args);
  if (!gang.ok()) {
    std::cerr << "orrery-worker gang: " << gang.status() << "\n";
    Usage(std::cerr);
    return 2;
  }
  const char* backend_env = std::getenv("ORRERY_BACKEND");
  const std::string backend = backend_env != nullptr && *backend_env != '\0' ? backend_env : "gloo";
  if (auto usable = orrery::dist::CheckDevice(gang->device, backend); !usable.ok()) {
    std::cerr << "orrery-worker gang: " << usable << "\n";
    return 1;
  }
  auto device = orrery::dist::RankDevice(gang->device, 0, std::getenv("LOCAL_RANK"));
  if (device.ok()) {
    if (auto used = orrery::dist::UseDevice(*device); !used.ok()) device = used;
  }
  if (!device.ok()) {
    std::cerr << "orrery-worker gang: " << device.status() << "\n";
    return 1;
  }
  for (auto& task : gang->tasks) task.strategy.device = *device;
  std::signal(SIGTERM, OnTerminate);
  std::signal(SIGINT, OnTerminate);
  auto r = orrery::train::TrainGang(*gang, std::cout, &g_stop);
  if (!r.ok()) {
    std::cerr << "orrery-worker gang: " << r.status() << "\n";
    return 1;
  }
  return r->ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  orrery::worker::RetuneOpenBlasOrReturn(argv);
  if (argc < 2) {
    Usage(std::cerr);
    return 2;
  }
  std::string mode = argv[1];
  if (mode == "checkpoint") return orrery::checkpoint::RunCheckpointCommand(argc - 1, argv + 1);
  if (mode == "--help" || mode == "help") {
    Usage(std::cout);
    return 0;
  }
  if (mode != "train" && mode != "profile" && mode != "export" && mode != "gang") {
    std::cerr << "orrery-worker: unknown command '" << mode << "'\n";
    Usage(std::cerr);
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (mode == "gang") return RunGang(args);
    return RunTask(mode, args);
  } catch (const std::exception& e) {
    // A LibTorch or CUDA error no Status caught: one clear line and exit 1 (the
    // operator reads the termination message), never std::terminate's abort.
    std::string what = e.what();
    std::cerr << "orrery-worker " << mode << ": INTERNAL: " << what.substr(0, what.find('\n'))
              << "\n";
    return 1;
  }
}
