// `orrery run FILE [--devices cpu:2|cuda:0-7] [--workdir DIR] [--fail-device-at T:DEV]...`:
// the whole system on this machine (operator/local/runner.h).
#include <atomic>
#include <filesystem>

#include "operator/cli/commands.h"
#include "operator/cli/job_file.h"
#include "operator/cli/stop_signals.h"
#include "operator/local/pretrained_config.h"
#include "operator/local/profile_cache.h"
#include "operator/local/runner.h"

namespace orrery::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_stop{false};

constexpr const char* kUsage =
    "Usage: orrery run FILE [--devices cpu:N|cuda:0-7|cpu:2=big+cpu:2=small] [--workdir DIR]\n"
    "                       [--fail-device-at SECONDS:DEVICE]... [--profile-cache FILE]\n"
    "                       [--worker PATH] [--progress tty|plain] [--stop-at-step N]\n";

// The worker binary: --worker, $ORRERY_WORKER, or orrery-worker next to this
// program (both are built into build/bin and installed side by side).
std::string FindWorker(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* w = std::getenv("ORRERY_WORKER"); w != nullptr && *w != '\0') return w;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path sibling = self.parent_path() / "orrery-worker";
    if (fs::exists(sibling)) return sibling.string();
  }
  return "";
}

int RunRun(Invocation& in) {
  if (WantsHelp(in.args)) {
    in.out
        << kUsage
        << "\nRuns a ModelSelectionJob on this machine with the operator's engine and planner:\n"
           "profiles each model (reusing the profile cache), plans, starts one worker process\n"
           "per device, re-plans as tasks progress, and writes report.html and report.json\n"
           "to the work directory (default ./orrery-runs/JOB). Ctrl-C checkpoints every\n"
           "running task and exits; the same command resumes. Without a GPU each \"GPU\" is\n"
           "one CPU worker process (--devices cpu:N, default cpu:2).\n"
           "  --devices cuda:0-3=H100+cuda:4-7=L4\n"
           "                          GPU types: groups DEVICES=TYPE joined by '+', one node\n"
           "                          per type (a gang never spans types; spec.tasks[].gpuTypes\n"
           "                          restricts a task to some); cpu:2=big+cpu:2=small numbers\n"
           "                          the CPU devices on (0-1 big, 2-3 small), for tests\n"
           "  --fail-device-at 30:1   device 1 fails 30 s after the first task starts\n"
           "  WORKDIR/control         append 'fail 1' or 'restore 1' to act on a live run\n"
           "  --stop-at-step N        behave as on Ctrl-C once a task reaches step N\n";
    return kExitOk;
  }
  std::string file, devices = "cpu:2", workdir, worker_flag, cache, progress;
  std::vector<std::string> fails;
  int64_t stop_at_step = -1;
  for (size_t i = 0; i < in.args.size(); ++i) {
    const std::string& a = in.args[i];
    auto value = [&](const std::string& name) -> std::optional<std::string> {
      if (a == name) {
        if (i + 1 >= in.args.size()) return std::nullopt;
        return in.args[++i];
      }
      if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
      return std::nullopt;
    };
    auto takes = [&](const std::string& name) { return a == name || a.rfind(name + "=", 0) == 0; };
    std::optional<std::string> v;
    if (takes("--devices") && (v = value("--devices"))) {
      devices = *v;
    } else if (takes("--workdir") && (v = value("--workdir"))) {
      workdir = *v;
    } else if (takes("--worker") && (v = value("--worker"))) {
      worker_flag = *v;
    } else if (takes("--profile-cache") && (v = value("--profile-cache"))) {
      cache = *v;
    } else if (takes("--fail-device-at") && (v = value("--fail-device-at"))) {
      fails.push_back(*v);
    } else if (takes("--progress") && (v = value("--progress"))) {
      progress = *v;
    } else if (takes("--stop-at-step") && (v = value("--stop-at-step"))) {
      try {
        stop_at_step = std::stoll(*v);
      } catch (const std::exception&) {
        in.err << "orrery run: --stop-at-step wants a step number\n";
        return kExitUsage;
      }
    } else if (a.rfind("--", 0) == 0) {
      in.err << "orrery run: unknown or incomplete option " << a << "\n" << kUsage;
      return kExitUsage;
    } else if (file.empty()) {
      file = a;
    } else {
      in.err << "orrery run: one FILE at a time\n" << kUsage;
      return kExitUsage;
    }
  }
  if (file.empty()) {
    in.err << "orrery run: missing FILE\n" << kUsage;
    return kExitUsage;
  }
  local::RunOptions opt;
  auto parsed = local::ParseDevices(devices);
  if (!parsed.ok()) {
    in.err << "orrery run: " << parsed.status().message() << "\n";
    return kExitUsage;
  }
  opt.devices = *parsed;
  for (const auto& f : fails) {
    auto e = local::ParseFailDevice(f);
    if (!e.ok()) {
      in.err << "orrery run: " << e.status().message() << "\n";
      return kExitUsage;
    }
    opt.device_events.push_back(*e);
  }
  if (progress != "" && progress != "tty" && progress != "plain") {
    in.err << "orrery run: --progress must be tty or plain\n";
    return kExitUsage;
  }
  opt.tty = progress.empty() ? isatty(STDOUT_FILENO) == 1 : progress == "tty";

  auto docs = AnalyzeFile(file);
  if (!docs.ok()) {
    in.err << docs.status().message() << "\n";
    return kExitInvalid;
  }
  if (docs->size() != 1) {
    in.err << "orrery run: " << file << " holds " << docs->size()
           << " documents; run one ModelSelectionJob at a time\n";
    return kExitInvalid;
  }
  const JobDocument& doc = (*docs)[0];
  if (!doc.analysis.ok()) {
    PrintErrors(doc, in.err);
    return kExitInvalid;
  }
  api::LoadedJob job{doc.analysis.job, doc.analysis.tasks};
  opt.worker = FindWorker(worker_flag);
  if (opt.worker.empty() || access(opt.worker.c_str(), X_OK) != 0) {
    in.err << "orrery run: cannot find orrery-worker"
           << (opt.worker.empty() ? "" : " at " + opt.worker)
           << "; build it (it needs LibTorch) and pass --worker PATH or set ORRERY_WORKER\n";
    return kExitInvalid;
  }
  opt.workdir = workdir.empty() ? "orrery-runs/" + job.job.metadata.name : workdir;
  opt.workdir = fs::absolute(opt.workdir).lexically_normal().string();
  opt.profile_cache = cache.empty() ? local::ProfileCache::DefaultPath() : cache;
  opt.job_dir = JobBaseDir(file, job.tasks);
  // What a worker would stop at after profiling: a model directory that is not
  // there, or fine-tuning the model's config.json does not allow.
  if (auto errors = local::CheckPretrainedModels(job.tasks, opt.job_dir, true); !errors.empty()) {
    in.err << file << ": ModelSelectionJob \"" << job.job.metadata.name
           << "\" cannot run here: " << errors.size()
           << (errors.size() == 1 ? " error\n" : " errors\n");
    for (const api::FieldError& e : errors) in.err << api::FormatFieldError(e) << "\n";
    return kExitInvalid;
  }
  opt.stop_at_step = stop_at_step;
  opt.stop = &g_stop;
  StopSignals signals(&g_stop);
  return local::RunJob(job, opt, in.out, in.err);
}

}  // namespace
}  // namespace orrery::cli

ORRERY_CLI_COMMAND(run, "run FILE [--devices cpu:2] [--workdir DIR]",
                   "Run a job on this machine: profile, plan, train, report", orrery::cli::RunRun);
