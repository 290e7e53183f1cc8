#include "operator/local/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <sys/file.h>

#include "common/time_text.h"
#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/engine/engine.h"
#include "operator/engine/gang_command.h"
#include "operator/engine/job_options.h"
#include "operator/engine/profile_configs.h"
#include "operator/engine/profile_step.h"
#include "operator/engine/worker_command.h"
#include "operator/local/process.h"
#include "operator/local/profile_cache.h"
#include "operator/local/progress.h"
#include "operator/local/report.h"
#include "operator/local/state_io.h"

namespace orrery::local {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kMaxFailures = 3;        // unexpected exits before a task is failed
constexpr double kStopGraceS = 120;    // a gang asked to stop must checkpoint by then
constexpr double kGpuMemoryGib = 1e6;  // local devices: memory is not modelled
// The device memory an interleaved gang's members share: the worker's own
// spill budget for one task (worker/parallel/strategy.h), memory not being
// modelled locally.
constexpr int64_t kGangSpillBudgetBytes = int64_t{64} << 20;

std::string Rfc3339Now() { return Rfc3339Utc(std::time(nullptr)); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    out.flush();
    if (!out) return UnavailableError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return UnavailableError("cannot rename " + tmp + ": " + ec.message());
  return OkStatus();
}

// The last non-empty line of a log file, for error messages.
std::string LastLine(const std::string& path) {
  std::string text = ReadFile(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  auto nl = text.rfind('\n');
  std::string line = nl == std::string::npos ? text : text.substr(nl + 1);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

// How a worker ended, for people: "exited with 1" or, for a process a signal
// ended (Process's 128 + signal), "was killed by signal 9 (Killed)"; then the
// worker's own reason when there is one. A clean exit ends a task only with
// its "done" line saying completed or preempted.
std::string EndedText(int code, const std::string& why) {
  std::string text = "exited with " + std::to_string(code);
  if (code > 128 && code < 128 + NSIG) {
    const int sig = code - 128;
    const char* name = strsignal(sig);
    text = "was killed by signal " + std::to_string(sig) +
           (name != nullptr ? " (" + std::string(name) + ")" : "");
  }
  if (code == 0 && why.empty()) text += " without finishing its steps";
  return why.empty() ? text : text + ": " + why;
}

std::string ConfigText(const std::string& template_name, int gpus) {
  return template_name + "×" + std::to_string(gpus);
}
// With the global batch when it is not the task's own (an elastic choice).
std::string ConfigText(const std::string& template_name, int gpus, int64_t batch,
                       int64_t own_batch) {
  std::string text = ConfigText(template_name, gpus);
  if (batch > 0 && batch != own_batch) text += " batch " + std::to_string(batch);
  return text;
}

struct Gang {
  std::vector<Process> ranks;
  std::vector<int> devices;  // indices into the device set
  int config = -1;           // index into the task's configs
  double started = 0;        // run time
  int64_t batch = 0;         // global batch it runs at
  int64_t start_step = 0;    // where it began (its resume point)
  int64_t start_samples = 0;
  bool steps_from_budget = false;  // --steps computed from the resume point
  int launch = 0;
  std::string stop_reason;  // "" while it may run; rescaled | interrupted | device-lost
  double stop_requested = 0;
  int progress_lines = 0;
  std::string layout;  // from its "start" line: what its saves are written in
  bool drift_reported = false;
  std::string log_prefix;
  // The interleaved gang (Runner::igangs_) whose one process runs it; -1: its
  // own ranks.
  int interleaved = -1;
  bool stop_written = false;  // named in its interleaved gang's stop file
};

// One `orrery-worker gang` process running several tasks interleaved on one
// device: its progress lines name their task; each member's Gang (ranks
// empty) keeps its own steps, checkpoints and stop.
struct InterleavedGang {
  Process process;
  std::vector<size_t> members;  // still in it (a finished member leaves)
  std::string name;             // "a+b", every member's
  std::string log_prefix;
  std::string stop_reason;
  double stop_requested = 0;
  double started = 0;
  bool speedup_reported = false;
  size_t size = 0;  // members at launch
  // Each member's measured speed over its alone speed, once past its first
  // report (warm-up): kept when the member leaves, since members finish at
  // different times and their lines arrive in different reads.
  std::map<size_t, double> ratio;
  // The gang's --stop-file: a member stopped alone is a line in it.
  std::string StopFile() const { return StopFileOf(log_prefix); }
  static std::string StopFileOf(const std::string& prefix) { return prefix + ".stop"; }
};

struct TaskRun {
  api::ExpandedTask spec;
  std::string signature;
  int64_t steps_total = 0;
  int64_t batch = 0;  // the task's own
  // Elastic jobs: the work in samples (engine::SampleBudget; an epoch budget on
  // data of unknown size is known once a fresh run reports its steps), the
  // samples consumed (the worker's cursor) and at each checkpoint still on disk
  // (the worker's step count mixes batch sizes once the batch changed).
  int64_t sample_budget = 0;
  bool budget_known = false;
  int64_t samples = 0;
  std::map<int64_t, int64_t> checkpoint_samples;  // step -> samples
  int64_t prior_batch = 0;  // the batch of steps before this invocation (0: own)
  std::vector<planner::Config> configs;
  std::optional<Gang> gang;
  int64_t step = 0;
  int64_t checkpoint_step = 0;
  double loss = 0;
  double samples_per_s = 0;
  double speed_factor = 1;
  bool done = false;
  bool failed = false;
  int failures = 0;
  int launches = 0;
  std::string done_status;  // the worker's "done" status of the current gang
  std::string done_error;   // and its "error", when it gave one
};

class Runner {
 public:
  Runner(const api::LoadedJob& job, const RunOptions& options, std::ostream& out, std::ostream& err)
      : job_(job),
        opt_(options),
        out_(out),
        err_(err),
        display_(out, options.tty),
        start_(std::chrono::steady_clock::now()) {}

  int Run();
  // Profiles, configurations and the first plan: an exit code when the run
  // cannot go on (or has nothing to do), nullopt when the loop runs.
  std::optional<int> Begin();
  bool Loop();                // until every task is done or the run stops; true: interrupted
  int End(bool interrupted);  // the outcome, the report and the exit code

 private:
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double Now() const { return offset_ + Elapsed(); }
  void Event(const std::string& text) {
    display_.Event(Now(), text);
    report_.events.push_back({Now(), text});
  }
  bool StopRequested() const {
    if (opt_.stop != nullptr && opt_.stop->load()) return true;
    if (opt_.stop_at_step < 0) return false;
    for (const TaskRun& t : tasks_) {
      if (t.gang && t.step >= opt_.stop_at_step) return true;
    }
    return false;
  }

  Status Prepare();
  Status RestoreFrom(const RunReport& previous);
  Status ProfileAll();
  // One trial on `devices` (its ranks, in order); nullopt when it gave no
  // usable profile (said in an event).
  StatusOr<std::optional<contract::ProfileEntry>> ProfileOne(const TaskRun& task,
                                                             const std::string& template_name,
                                                             const std::vector<int>& devices,
                                                             int64_t batch);
  // The engine's profile room over the alive devices: one node per GPU type.
  engine::ProfileRoom TrialRoom() const;
  // "profiled <config>: <speed>..." for a trial `e` of template `name`.
  void ProfiledEvent(const TaskRun& task, const std::string& name, const contract::ProfileEntry& e);
  // Measures `trials` (keys the cache lacks; `of` names each key's task and
  // its template, GPUs and batch) as the engine's profile steps start them,
  // one after another, and saves each profile to `cache` as it is measured (an
  // interrupted run keeps what it measured); by key, what each gave.
  StatusOr<std::map<std::string, std::optional<contract::ProfileEntry>>> MeasureTrials(
      const std::vector<engine::ProfileWant>& trials,
      const std::map<std::string, std::pair<size_t, engine::ProfileKeyRef>>& of,
      ProfileCache& cache);
  int64_t SamplesAtStep(const TaskRun& task, int64_t step) const;
  bool Elastic() const { return job_.job.spec.elasticity.enabled; }
  void BuildConfigs();
  engine::WorldView World() const;
  // Observe, engine::Engine::Step, apply: the engine's plan, stops and
  // launches. The runner launches and stops nothing on its own judgement.
  void Step();
  // The adopted plan `d` as the step's UpdateStatus `u` describes it: the
  // report's plan row and Gantt bars, and the plan event.
  void ApplyPlan(const engine::Decision& d, const engine::PlanStatusUpdate& u);
  // The devices for a launch: the planned ones where they are free, else any
  // free device (the local node's devices are alike).
  std::vector<int> DevicesFor(const engine::LaunchAction& launch, std::set<int>& busy) const;
  Status Launch(size_t t, int config, const std::vector<int>& devices);
  // The worker settings of task t's launch in `config`.
  engine::LaunchConfig LaunchConfigFor(const TaskRun& task, int config) const;
  // Task t's Gang for a launch in `config` on `devices` (no processes yet).
  Gang NewGang(TaskRun& task, int config, const std::vector<int>& devices,
               const engine::LaunchConfig& lc);
  void Started(size_t t, const planner::Config& c);
  // An interleaved gang of the plan (LaunchAction::interleaved): one
  // `orrery-worker gang` process for its members on `devices`.
  Status LaunchInterleaved(const engine::LaunchAction& l, const std::vector<int>& devices);
  void ReadInterleaved(int id);
  void ReapInterleaved(int id);
  // The gang's measured speed over its members one after the other (their
  // speeds in it over their profiled alone speeds, summed): the engine plans
  // the next gangs with it.
  void MeasureInterleaved(int id);
  void ReadProgress(size_t t);
  void OnLine(size_t t, const Json& j);
  // Task t's gang ended with exit `code`: its bar, and completed, stopped or failed.
  void Ended(size_t t, int code);
  // ReadProgress's handling of one progress line of each kind.
  void OnStart(size_t t, const Json& j);
  void OnProgress(size_t t, const Json& j);
  void OnExport(size_t t, const Json& j);
  void Reap(size_t t);
  void ApplyDeviceEvents();
  void ReadControlFile();
  void LoseDevice(int device, const std::string& why);
  void RestoreDevice(int device);
  // Stops task t's gang; a member of an interleaved gang alone (the others
  // run on) unless a kill or every member is asked.
  void StopGang(size_t t, const std::string& reason, int signal);
  void StopInterleaved(InterleavedGang& ig, const std::string& reason, int signal);
  std::vector<TaskProgress> ProgressView() const;
  void SyncReport();
  void WriteReport();
  std::vector<int> AliveDevices() const;
  // The alive devices of each GPU type, in DeviceSet::Pools() order: the
  // world's nodes.
  std::vector<std::vector<int>> AliveByPool() const;
  // With typed devices, every task that lists gpuTypes must find one of them.
  Status CheckGpuTypes() const;
  std::string TaskConfigText(const TaskRun& t) const;

  const api::LoadedJob& job_;
  // The job's gpuQuota now: the spec's, until the control file edits it.
  int quota_ = job_.job.spec.resources.gpu_quota;
  RunOptions opt_;
  std::ostream& out_;
  std::ostream& err_;
  ProgressDisplay display_;
  std::chrono::steady_clock::time_point start_;
  double offset_ = 0;  // run time already spent by earlier invocations
  std::vector<TaskRun> tasks_;
  std::vector<bool> alive_;
  RunReport report_;
  std::unique_ptr<engine::Engine> engine_;
  // The profile steps' journal (before the engine exists: its options wait
  // for what the cache knows of gangs); its violations join the engine's.
  engine::ActionJournal profile_journal_;
  std::optional<planner::Plan> plan_;  // absolute run times, world indices
  // Slot k of node n in plan_ is device plan_devices_[n][k].
  std::vector<std::vector<int>> plan_devices_;
  bool launched_any_ = false;
  double launch_time_ = 0;
  size_t next_device_event_ = 0;
  std::streamoff control_offset_ = 0;
  int launch_counter_ = 0;
  double last_report_write_ = -1e9;
  int profile_max_gpus_ = 0;  // the GPUs profiles were taken for
  // A gang speedup an earlier run measured on these devices, as the profile
  // cache held it when profiling began.
  std::optional<double> cached_gang_speedup_;
  std::map<int, InterleavedGang> igangs_;
  int next_igang_ = 0;
};

Status Runner::Prepare() {
  std::error_code ec;
  for (const char* sub : {"", "/checkpoints", "/logs", "/rdv"}) {
    fs::create_directories(opt_.workdir + sub, ec);
    if (ec) return UnavailableError("cannot create " + opt_.workdir + sub + ": " + ec.message());
  }
  alive_.assign(opt_.devices.ids.size(), true);
  report_.job = job_.job.metadata.name;
  report_.devices = opt_.devices.text;
  report_.device_count = static_cast<int>(opt_.devices.ids.size());
  report_.device_types = opt_.devices.types;
  ORRERY_RETURN_IF_ERROR(CheckGpuTypes());
  report_.started_at = Rfc3339Now();
  report_.outcome = "running";
  for (const api::ExpandedTask& e : job_.tasks) {
    TaskRun t;
    t.spec = e;
    t.signature = engine::ModelSignature(e.task);
    t.steps_total = engine::TotalSteps(e.task);
    t.batch = e.task.training.batch_size;
    t.sample_budget = engine::SampleBudget(e.task);
    // Steps are known; epochs are when the dataset size is (synthetic data).
    t.budget_known = !e.task.training.epochs || e.task.data.synthetic.has_value();
    tasks_.push_back(std::move(t));
    ReportTask rt;
    rt.name = e.name;
    rt.source = e.source;
    rt.hyper = e.assignments;
    rt.state = "pending";
    rt.steps_total = tasks_.back().steps_total;
    rt.batch_size = static_cast<int>(tasks_.back().batch);
    report_.tasks.push_back(rt);
  }
  // The job as run: a resume must run the same job.
  std::string job_json = api::JobToJson(job_.job);
  std::string job_path = opt_.workdir + "/job.json";
  std::string report_path = opt_.workdir + "/report.json";
  if (fs::exists(job_path) && fs::exists(report_path)) {
    std::string previous_job = ReadFile(job_path);
    if (previous_job != job_json) {
      return FailedPreconditionError(
          "the work directory " + opt_.workdir +
          " holds a run of a different job (its job.json differs from this file); pass another "
          "--workdir, or remove the directory to start over");
    }
    auto previous = ReportFromJson(ReadFile(report_path));
    if (!previous.ok()) {
      return previous.status().WithContext("the work directory's report.json (remove " +
                                           opt_.workdir + " to start over)");
    }
    ORRERY_RETURN_IF_ERROR(RestoreFrom(*previous));
  } else {
    ORRERY_RETURN_IF_ERROR(WriteFileAtomically(job_path, job_json));
  }
  return OkStatus();
}

Status Runner::RestoreFrom(const RunReport& previous) {
  offset_ = previous.wall_s;
  start_ = std::chrono::steady_clock::now();
  report_.started_at = previous.started_at;
  report_.actual = previous.actual;
  for (ReportBar& bar : report_.actual) {
    if (bar.ended_by == "running") bar.ended_by = "interrupted";
  }
  report_.plans = previous.plans;
  report_.events = previous.events;
  report_.profiles = previous.profiles;
  int done = 0;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    for (const ReportTask& p : previous.tasks) {
      if (p.name != tasks_[i].spec.name) continue;
      ReportTask& rt = report_.tasks[i];
      rt.losses = p.losses;
      rt.state_io = p.state_io;
      rt.restarts = p.restarts;
      rt.final_loss = p.final_loss;
      rt.steps_done = p.steps_done;
      rt.template_name = p.template_name;
      rt.gpus = p.gpus;
      rt.export_path = p.export_path;
      tasks_[i].step = p.steps_done;
      tasks_[i].loss = p.final_loss;
      // The samples behind those steps at the batch last run (exact unless the
      // batch changed during the earlier invocation).
      tasks_[i].prior_batch = p.batch_size;
      tasks_[i].samples = SamplesAtStep(tasks_[i], p.steps_done);
      if (p.steps_total > 0) tasks_[i].steps_total = p.steps_total;
      rt.steps_total = tasks_[i].steps_total;
      if (p.state == "completed") {
        tasks_[i].done = true;
        rt.state = "completed";
        ++done;
      }
    }
  }
  Event("resuming " + opt_.workdir + ": " + std::to_string(done) + " of " +
        std::to_string(tasks_.size()) + " tasks already done");
  return OkStatus();
}

Status Runner::CheckGpuTypes() const {
  if (opt_.devices.types.empty()) return OkStatus();
  const std::vector<std::string> pools = opt_.devices.Pools();
  for (size_t i = 0; i < job_.job.spec.tasks.size(); ++i) {
    const std::vector<std::string>& want = job_.job.spec.tasks[i].gpu_types;
    if (want.empty()) continue;
    bool any = std::any_of(want.begin(), want.end(), [&](const std::string& t) {
      return std::find(pools.begin(), pools.end(), t) != pools.end();
    });
    if (any) continue;
    std::string listed, have;
    for (const std::string& t : want) listed += (listed.empty() ? "" : ", ") + t;
    for (const std::string& t : pools) have += (have.empty() ? "" : ", ") + t;
    std::string message = "spec.tasks[" + std::to_string(i) + "].gpuTypes: none of ";
    message += listed;
    message += " is among the --devices types (";
    message += have;
    message += "): give a device group one of them, e.g. --devices cpu:2=";
    message += want.front();
    message += ", or list one of ";
    message += have;
    return InvalidArgumentError(message);
  }
  return OkStatus();
}

std::vector<std::vector<int>> Runner::AliveByPool() const {
  const std::vector<std::string> pools = opt_.devices.Pools();
  std::vector<std::vector<int>> by_pool(pools.size());
  for (int d : AliveDevices()) {
    const auto it =
        std::find(pools.begin(), pools.end(), opt_.devices.TypeOf(static_cast<size_t>(d)));
    by_pool[static_cast<size_t>(it - pools.begin())].push_back(d);
  }
  return by_pool;
}

std::vector<int> Runner::AliveDevices() const {
  std::vector<int> a;
  for (size_t d = 0; d < alive_.size(); ++d) {
    if (alive_[d]) a.push_back(static_cast<int>(d));
  }
  return a;
}

std::map<std::string, std::string> RankEnv(const DeviceSet& devices, int device, int rank,
                                           int world, const std::string& store) {
  std::map<std::string, std::string> env = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"ORRERY_STORE_PATH", store},
      // One intra-op thread per rank: a rank stands for one device.
      {"OMP_NUM_THREADS", "1"},
      {"OPENBLAS_NUM_THREADS", "1"},
  };
  if (devices.kind == "cuda") {
    env["CUDA_VISIBLE_DEVICES"] = std::to_string(devices.ids[static_cast<size_t>(device)]);
    env["ORRERY_BACKEND"] = "nccl";
  }
  return env;
}

StatusOr<std::optional<contract::ProfileEntry>> Runner::ProfileOne(const TaskRun& task,
                                                                   const std::string& template_name,
                                                                   const std::vector<int>& devices,
                                                                   int64_t batch) {
  const int gpus = static_cast<int>(devices.size());
  engine::LaunchConfig lc;
  lc.template_name = template_name;
  lc.gpus = gpus;
  lc.batch_size = batch;
  lc.base_dir = opt_.job_dir;
  lc.device = opt_.devices.kind;
  std::vector<std::string> argv = {opt_.worker, "profile"};
  for (auto& f : engine::ProfileFlags(task.spec, lc, job_.job.spec.profiling.trial_steps)) {
    argv.push_back(f);
  }
  int n = ++launch_counter_;
  std::string store = opt_.workdir + "/rdv/profile-" + std::to_string(n);
  std::error_code ec;
  fs::remove_all(store, ec);
  std::string log = opt_.workdir + "/logs/profile-" + std::to_string(n) + "." +
                    contract::WorkerTemplate(template_name, gpus) + "x" + std::to_string(gpus);
  std::vector<Process> ranks;
  for (int r = 0; r < gpus; ++r) {
    ORRERY_ASSIGN_OR_RETURN(
        Process p,
        Process::Spawn(argv, RankEnv(opt_.devices, devices[static_cast<size_t>(r)], r, gpus, store),
                       log + ".r" + std::to_string(r) + ".log", r == 0));
    ranks.push_back(std::move(p));
  }
  std::string doc;
  double begin = Elapsed();
  while (ranks[0].Running()) {
    for (auto& line : ranks[0].ReadLines()) {
      if (line.find("\"profile\"") != std::string::npos) doc = line;
    }
    if (StopRequested()) {
      for (auto& p : ranks) p.Signal(SIGKILL);
      return CancelledError("interrupted while profiling");
    }
    if (Elapsed() - begin > static_cast<double>(engine::kProfileDeadlineS)) {
      for (auto& p : ranks) p.Signal(SIGKILL);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& line : ranks[0].ReadLines()) {
    if (line.find("\"profile\"") != std::string::npos) doc = line;
  }
  int code = 0;
  for (auto& p : ranks) code = std::max(code, p.WaitOrKill(30));
  fs::remove_all(store, ec);
  if (code != 0 || doc.empty()) {
    Event("profile " + task.signature + " " + ConfigText(template_name, gpus, batch, task.batch) +
          ": not usable (exit " + std::to_string(code) + "): " + LastLine(log + ".r0.log"));
    return std::optional<contract::ProfileEntry>();
  }
  ORRERY_ASSIGN_OR_RETURN(contract::ProfileEntry e, contract::ParseProfileDocument(doc));
  return std::optional<contract::ProfileEntry>(e);
}

engine::ProfileRoom Runner::TrialRoom() const {
  engine::ProfileRoom room;
  const std::vector<std::string> pools = opt_.devices.Pools();
  const std::vector<std::vector<int>> alive = AliveByPool();
  for (size_t p = 0; p < pools.size(); ++p) {
    room.nodes.push_back({std::to_string(p), pools[p], static_cast<int>(alive[p].size())});
  }
  return room;
}

StatusOr<std::map<std::string, std::optional<contract::ProfileEntry>>> Runner::MeasureTrials(
    const std::vector<engine::ProfileWant>& trials,
    const std::map<std::string, std::pair<size_t, engine::ProfileKeyRef>>& of,
    ProfileCache& cache) {
  std::map<std::string, std::optional<contract::ProfileEntry>> measured;
  std::vector<engine::ProfileWant> left = trials;
  while (!left.empty()) {
    // The engine's Profile action over the devices alive now, one trial at a
    // time: trials beside each other would share the host's cores and memory
    // bandwidth and time each other.
    engine::ProfileRoom room = TrialRoom();
    room.max_start = 1;
    const engine::ProfileStep step = engine::StepProfiles(left, room);
    profile_journal_.IssuedProfiles(step, Now());
    if (step.start.empty()) break;  // none fits what is alive: they give no configuration
    for (const engine::ProfileAction& a : step.start) {
      const auto& [t, want] = of.at(a.key);
      const TaskRun& task = tasks_[t];
      const std::string name(api::EnumName(want.template_));
      const std::vector<int> pool = AliveByPool()[std::stoul(a.placement.front())];
      const std::vector<int> devices(pool.begin(), pool.begin() + a.gpus);
      profile_journal_.Profiling(a.key);
      report_.tasks[t].state = "profiling";
      std::string on;
      for (int d : devices) on += (on.empty() ? "" : ",") + std::to_string(d);
      Event("profiling " + task.signature + " as " +
            ConfigText(name, a.gpus, want.batch_size, task.batch) + " on " + opt_.devices.kind +
            ":" + on + " (" + std::to_string(job_.job.spec.profiling.trial_steps) +
            " trial steps)");
      ORRERY_ASSIGN_OR_RETURN(std::optional<contract::ProfileEntry> e,
                              ProfileOne(task, name, devices, want.batch_size));
      if (e) {
        e->signature = task.signature;
        e->template_name = contract::WorkerTemplate(name, a.gpus);
        e->gpus = a.gpus;
        e->batch_size = want.batch_size;
        e->device = opt_.devices.kind;
        e->measured_at = Rfc3339Now();
        cache.Put(*e);
        ORRERY_RETURN_IF_ERROR(cache.Save());
        ProfiledEvent(task, name, *e);
      }
      measured[a.key] = std::move(e);
    }
    std::erase_if(left, [&](const engine::ProfileWant& w) { return measured.count(w.key) > 0; });
  }
  return measured;
}

Status Runner::ProfileAll() {
  ORRERY_ASSIGN_OR_RETURN(ProfileCache cache, ProfileCache::Load(opt_.profile_cache));
  cached_gang_speedup_ = cache.GangSpeedup(opt_.devices.kind);
  const api::ModelSelectionJobSpec& spec = job_.job.spec;
  // A gang never spans GPU types: no configuration is wider than one type's devices.
  profile_max_gpus_ = 0;
  for (const std::vector<int>& pool : AliveByPool())
    profile_max_gpus_ = std::max(profile_max_gpus_, static_cast<int>(pool.size()));
  // Every (template, GPUs, batch) each signature's configurations are built
  // from, in build order: the cache's, and the trials the rest need.
  struct Wanted {
    size_t task;
    std::string members;
    engine::ProfileKeyRef want;
    contract::ProfileEntry key;
    std::optional<contract::ProfileEntry> hit;  // the cache's, when reused
  };
  std::vector<Wanted> wanted;
  std::vector<engine::ProfileWant> trials;
  std::map<std::string, std::pair<size_t, engine::ProfileKeyRef>> trial_of;
  std::set<std::string> seen;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const TaskRun& task = tasks_[i];
    if (task.done || !seen.insert(task.signature).second) continue;
    std::string members;
    for (const TaskRun& o : tasks_) {
      if (o.signature == task.signature) members += (members.empty() ? "" : ",") + o.spec.name;
    }
    // With a store that holds nothing, every key comes back missing, in build order.
    const engine::TaskConfigs all = engine::BuildTaskConfigs(
        spec, task.spec.task, [](api::Template, int, int64_t) { return engine::ProfilePoint{}; },
        profile_max_gpus_);
    for (const engine::ProfileKeyRef& want : all.missing) {
      const std::string name(api::EnumName(want.template_));
      contract::ProfileEntry key;
      key.signature = task.signature;
      key.template_name = contract::WorkerTemplate(name, want.gpus);
      key.gpus = want.gpus;
      key.batch_size = want.batch_size;
      key.device = opt_.devices.kind;
      const contract::ProfileEntry* hit = spec.profiling.reuse_cache ? cache.Find(key) : nullptr;
      wanted.push_back(
          {i, members, want, key, hit != nullptr ? std::optional(*hit) : std::nullopt});
      if (hit != nullptr) continue;
      engine::ProfileWant w;
      w.task = task.spec.name;
      w.key = task.signature + " " + key.Key();
      w.what = engine::TrialText(want);
      w.gpus = want.gpus;
      if (!opt_.devices.types.empty()) w.gpu_types = task.spec.task.gpu_types;
      trial_of[w.key] = {i, want};
      trials.push_back(std::move(w));
    }
  }
  ORRERY_ASSIGN_OR_RETURN(auto measured, MeasureTrials(trials, trial_of, cache));
  report_.profiles.clear();
  for (const Wanted& w : wanted) {
    contract::ProfileEntry e;
    if (w.hit) {
      e = *w.hit;
    } else {
      auto it = measured.find(tasks_[w.task].signature + " " + w.key.Key());
      if (it == measured.end() || !it->second) continue;  // not run, or no usable profile
      e = *it->second;
    }
    ReportProfile rp;
    rp.signature = w.key.signature;
    rp.tasks = w.members;
    rp.template_name = std::string(api::EnumName(w.want.template_));
    rp.gpus = w.want.gpus;
    rp.batch_size = static_cast<int>(e.batch_size);
    rp.samples_per_s = e.samples_per_s;
    rp.step_time_s = e.step_time_s;
    rp.peak_memory_mib = e.peak_memory_bytes / (1024.0 * 1024.0);
    rp.device_allocated_mib = e.device_allocated_bytes / (1024.0 * 1024.0);
    rp.recompute = e.recompute;
    rp.from_cache = w.hit.has_value();
    report_.profiles.push_back(rp);
  }
  int reused = 0;
  for (const ReportProfile& p : report_.profiles) reused += p.from_cache ? 1 : 0;
  if (reused > 0) {
    Event("reused " + std::to_string(reused) + " cached profiles from " + cache.path());
  }
  return OkStatus();
}

void Runner::ProfiledEvent(const TaskRun& task, const std::string& name,
                           const contract::ProfileEntry& e) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "  %.1f samples/s, step %.3f s (p90 %.3f s)", e.samples_per_s,
                e.step_time_s, e.step_time_p90_s);
  std::string line = "profiled " + ConfigText(name, e.gpus, e.batch_size, task.batch) + ":" + buf;
  if (e.device_allocated_bytes > 0) {  // what the planner fits to a device
    std::snprintf(buf, sizeof(buf), ", peak %.0f MiB", e.device_allocated_bytes / 1048576.0);
    line += buf + (e.recompute.empty() ? "" : " (recompute " + e.recompute + ")");
  }
  Event(line);
}

void Runner::BuildConfigs() {
  const api::ModelSelectionJobSpec& spec = job_.job.spec;
  for (TaskRun& task : tasks_) {
    // The profiles this run holds for the task's signature; a key whose trial
    // failed is absent and gives no configuration.
    auto lookup = [&](api::Template tmpl, int gpus, int64_t batch) {
      const std::string name(api::EnumName(tmpl));
      for (const ReportProfile& p : report_.profiles) {
        if (p.signature == task.signature && p.template_name == name && p.gpus == gpus &&
            p.batch_size == batch) {
          return engine::ProfilePoint{engine::ProfilePoint::State::kMeasured, p.samples_per_s,
                                      p.peak_memory_mib / 1024.0, p.device_allocated_mib / 1024.0,
                                      p.recompute};
        }
      }
      return engine::ProfilePoint{};
    };
    task.configs = engine::BuildTaskConfigs(spec, task.spec.task, lookup, profile_max_gpus_,
                                            /*recompute_modes=*/true)
                       .configs;
  }
}

int64_t Runner::SamplesAtStep(const TaskRun& task, int64_t step) const {
  auto it = task.checkpoint_samples.find(step);
  if (it != task.checkpoint_samples.end()) return it->second;
  // A checkpoint of an earlier invocation: exact unless it changed batch.
  return step * (task.prior_batch > 0 ? task.prior_batch : task.batch);
}

engine::WorldView Runner::World() const {
  engine::WorldView w;
  w.now = Now();
  // One node per GPU type (one "local" node when the devices carry none): a
  // gang never spans types.
  const std::vector<std::string> pools = opt_.devices.Pools();
  const std::vector<std::vector<int>> alive = AliveByPool();
  std::map<int, planner::GpuSlot> slot_of;  // device -> (node, slot among its alive)
  for (size_t n = 0; n < alive.size(); ++n) {
    for (size_t k = 0; k < alive[n].size(); ++k)
      slot_of[alive[n][k]] = {static_cast<int>(n), static_cast<int>(k)};
    w.nodes.push_back({pools[n].empty() ? std::string("local") : "local-" + pools[n],
                       static_cast<int>(alive[n].size()), kGpuMemoryGib, true, pools[n]});
  }
  w.gpu_cap = quota_;
  for (const TaskRun& t : tasks_) {
    engine::TaskView v;
    v.name = t.spec.name;
    v.weight = t.spec.task.weight;
    v.remaining_work =
        Elastic() ? static_cast<double>(std::max<int64_t>(0, t.sample_budget - t.samples))
                  : static_cast<double>(std::max<int64_t>(0, t.steps_total - t.step)) * t.batch;
    v.profile = t.configs;
    // Untyped devices ignore a restriction to types (a cluster's job file runs
    // here as it is); typed ones keep to it (Prepare checks one is given).
    if (!opt_.devices.types.empty()) v.gpu_types = t.spec.task.gpu_types;
    v.done = t.done || t.failed;
    v.speed_factor = t.speed_factor;
    if (t.gang && t.gang->stop_reason.empty()) {
      engine::RunningView r;
      r.config = t.gang->config;
      bool all_alive = true;
      for (int d : t.gang->devices) {
        auto it = slot_of.find(d);
        if (it == slot_of.end()) {
          all_alive = false;
          break;
        }
        r.gpus.push_back(it->second);
      }
      std::sort(r.gpus.begin(), r.gpus.end());
      if (all_alive) v.running = r;
    }
    w.tasks.push_back(std::move(v));
  }
  return w;
}

void Runner::Step() {
  engine::StepInput in;
  in.world = World();
  std::set<int> busy;  // devices a gang holds, stopping ones included
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const TaskRun& task = tasks_[t];
    if (!task.gang) continue;
    busy.insert(task.gang->devices.begin(), task.gang->devices.end());
    // A gang on its way out (rescaled, lost a device) holds its task back
    // until its processes are gone.
    if (!in.world.tasks[t].running) in.blocked.insert(t);
  }
  for (const std::vector<int>& pool : AliveByPool()) {
    int free = 0;
    for (int d : pool) free += busy.count(d) == 0 ? 1 : 0;
    in.free_gpus.push_back(free);
  }
  // The job's gpuQuota caps the devices its gangs hold at once.
  const int quota = quota_;
  if (quota > 0) in.launch_budget = std::max(0, quota - static_cast<int>(busy.size()));
  engine::StepResult r = engine_->Step(in);
  const char* trigger = r.trigger ? engine::TriggerName(*r.trigger) : "";
  if (!r.error.ok()) Event(std::string("plan (") + trigger + ") failed: " + r.error.ToString());
  if (r.decision && r.decision->adopted && r.status) {
    ApplyPlan(*r.decision, *r.status);
  } else if (r.decision && r.trigger != engine::Trigger::kInterval) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "re-plan (%s): %s", trigger, r.decision->reason.c_str());
    Event(buf);
  }
  // The running tasks the engine stops are rescaled: each checkpoints, stops,
  // and starts again as planned (or waits, when the cap left it no room now).
  for (const engine::StopAction& stop : r.stops) {
    if (stop.task >= tasks_.size()) continue;
    TaskRun& task = tasks_[stop.task];
    if (!task.gang || !task.gang->stop_reason.empty()) continue;
    const planner::Assignment& a = plan_->assignments[stop.task];
    std::string to = "the queue";
    if (a.config >= 0) {
      const planner::Config& c = task.configs[static_cast<size_t>(a.config)];
      to = ConfigText(c.template_name, c.gpus, c.batch_size, task.batch);
      if (a.start > Now()) to += " later";
    }
    Event("rescale " + task.spec.name + " (" + engine::StopReasonName(stop.reason) +
          "): " + TaskConfigText(task) + " -> " + to);
    engine_->journal().Stopped(task.spec.name);
    StopGang(stop.task, "rescaled", SIGTERM);
  }
  for (const engine::LaunchAction& l : r.launches) {
    std::vector<int> devices = DevicesFor(l, busy);
    if (devices.size() != l.gpus.size()) continue;  // the engine counted the same devices
    if (!l.interleaved.empty()) {
      Status s = LaunchInterleaved(l, devices);
      std::vector<const engine::LaunchAction*> all = {&l};
      for (const engine::LaunchAction& m : l.interleaved) all.push_back(&m);
      for (const engine::LaunchAction* a : all) {
        if (s.ok()) {
          engine_->journal().Launched(tasks_[a->task].spec.name, a->config);
          continue;
        }
        Event("launch " + tasks_[a->task].spec.name + " failed: " + s.ToString());
        tasks_[a->task].failed = true;
        report_.tasks[a->task].state = "failed";
      }
      continue;
    }
    Status s = Launch(l.task, l.config, devices);
    if (!s.ok()) {
      Event("launch " + tasks_[l.task].spec.name + " failed: " + s.ToString());
      tasks_[l.task].failed = true;
      report_.tasks[l.task].state = "failed";
      continue;
    }
    // Journaled once its processes run, as the controller journals a gang once
    // the API server took its pods.
    engine_->journal().Launched(tasks_[l.task].spec.name, l.config);
  }
  if (r.decision && r.decision->adopted) WriteReport();
}

std::vector<int> Runner::DevicesFor(const engine::LaunchAction& l, std::set<int>& busy) const {
  std::vector<int> devices;
  auto usable = [&](int d) {
    return d >= 0 && static_cast<size_t>(d) < alive_.size() && alive_[static_cast<size_t>(d)] &&
           busy.count(d) == 0;
  };
  int node = -1;  // the planned node: the fallback stays within its GPU type
  for (const planner::GpuSlot& s : l.gpus) {
    if (s.node < 0 || static_cast<size_t>(s.node) >= plan_devices_.size()) continue;
    node = s.node;
    const std::vector<int>& slots = plan_devices_[static_cast<size_t>(s.node)];
    if (s.gpu < 0 || static_cast<size_t>(s.gpu) >= slots.size()) continue;
    int d = slots[static_cast<size_t>(s.gpu)];
    if (usable(d)) {
      devices.push_back(d);
      busy.insert(d);
    }
  }
  const std::vector<std::vector<int>> pools = AliveByPool();
  if (node < 0 || static_cast<size_t>(node) >= pools.size()) return devices;
  for (int d : pools[static_cast<size_t>(node)]) {
    if (devices.size() >= l.gpus.size()) break;
    if (usable(d)) {
      devices.push_back(d);
      busy.insert(d);
    }
  }
  return devices;
}

void Runner::ApplyPlan(const engine::Decision& d, const engine::PlanStatusUpdate& u) {
  plan_ = d.plan;
  plan_devices_ = AliveByPool();  // the plan's (node, slot) index into these
  ReportPlan rp;
  rp.at_s = u.at;
  rp.trigger = u.trigger;
  rp.planner = u.planner;
  rp.makespan_s = u.ends_at;
  // Under weightedCompletionTime the bound and gap are on the sum of weight x
  // completion, not a time beside the makespan.
  rp.makespan_bound = u.ends_at_bound.has_value();
  rp.lower_bound_s = u.ends_at_bound ? *u.ends_at_bound : d.plan.lower_bound;
  rp.gap = u.plan_gap;
  rp.solve_s = u.solver_seconds;
  report_.plans.push_back(rp);
  report_.planned.clear();
  char buf[240];
  const std::string bound = rp.makespan_bound
                                ? "lower bound " + FormatDuration(rp.lower_bound_s) + ", gap"
                                : std::string("gap over its weighted completion bound");
  std::snprintf(buf, sizeof(buf), "plan %zu (%s, %s): finishes at %s, %s %.1f%%, solved in %.2f s",
                report_.plans.size(), u.trigger.c_str(), u.planner.c_str(),
                FormatDuration(u.ends_at).c_str(), bound.c_str(), 100 * u.plan_gap,
                u.solver_seconds);
  Event(buf);
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const planner::Assignment& a = plan_->assignments[t];
    if (a.config < 0) continue;
    const planner::Config& c = tasks_[t].configs[static_cast<size_t>(a.config)];
    ReportBar bar;
    bar.task = tasks_[t].spec.name;
    for (const planner::GpuSlot& s : a.gpus)
      bar.devices.push_back(plan_devices_[static_cast<size_t>(s.node)][static_cast<size_t>(s.gpu)]);
    if (!bar.devices.empty())
      bar.gpu_type = opt_.devices.TypeOf(static_cast<size_t>(bar.devices.front()));
    bar.start_s = a.start;
    bar.end_s = a.end;
    bar.template_name = c.template_name;
    bar.gpus = c.gpus;
    bar.batch_size = c.batch_size;
    for (const std::vector<size_t>& gang : d.gangs) {
      if (std::find(gang.begin(), gang.end(), t) == gang.end()) continue;
      std::vector<std::string> names;
      names.reserve(gang.size());
      for (size_t m : gang) names.push_back(tasks_[m].spec.name);
      bar.gang = planner::GangName(names);
    }
    report_.planned.push_back(bar);
    report_.tasks[t].template_name = c.template_name;
    report_.tasks[t].gpus = c.gpus;
    report_.tasks[t].batch_size = c.batch_size;
    report_.tasks[t].gpu_type = bar.gpu_type;
  }
}

std::string Runner::TaskConfigText(const TaskRun& t) const {
  if (!t.gang || t.gang->config < 0) return "";
  const planner::Config& c = t.configs[static_cast<size_t>(t.gang->config)];
  return ConfigText(c.template_name, c.gpus, c.batch_size, t.batch) +
         (c.recompute == "unit" ? " recomputing" : "") +
         (t.gang->interleaved >= 0 ? " in gang " + igangs_.at(t.gang->interleaved).name : "");
}

engine::LaunchConfig Runner::LaunchConfigFor(const TaskRun& task, int config) const {
  const planner::Config& c = task.configs[static_cast<size_t>(config)];
  const api::ModelSelectionJobSpec& spec = job_.job.spec;
  engine::LaunchConfig lc;
  lc.template_name = c.template_name;
  lc.recompute = c.recompute;
  lc.gpus = c.gpus;
  lc.batch_size = c.batch_size;
  lc.checkpoint_dir = opt_.workdir + "/checkpoints/" + task.spec.name;
  lc.checkpoint_every = spec.checkpoints.interval_steps;
  lc.keep = spec.checkpoints.keep;
  lc.report_every = opt_.report_every;
  lc.base_dir = opt_.job_dir;
  lc.device = opt_.devices.kind;
  lc.lr_scaling =
      spec.elasticity.enabled ? spec.elasticity.learning_rate_scaling : api::LrScaling::kNone;
  // The worker resumes from the newest checkpoint and counts steps on from it,
  // whatever batch it ran at; the steps left are the samples left over this
  // batch. An epoch budget on data of unknown size stays --epochs until a fresh
  // run has reported its steps (a fresh run at any batch keeps the samples).
  const int64_t batch = c.batch_size > 0 ? c.batch_size : task.batch;
  if (Elastic() && task.budget_known) {
    lc.steps = engine::StepsForBudget(task.sample_budget, task.checkpoint_step,
                                      SamplesAtStep(task, task.checkpoint_step), batch);
  }
  return lc;
}

Gang Runner::NewGang(TaskRun& task, int config, const std::vector<int>& devices,
                     const engine::LaunchConfig& lc) {
  const planner::Config& c = task.configs[static_cast<size_t>(config)];
  Gang g;
  g.devices = devices;
  g.config = config;
  g.started = Now();
  g.batch = c.batch_size > 0 ? c.batch_size : task.batch;
  g.start_step = task.checkpoint_step;
  g.start_samples = SamplesAtStep(task, task.checkpoint_step);
  g.steps_from_budget = lc.steps > 0;
  g.launch = ++task.launches;
  g.log_prefix = opt_.workdir + "/logs/" + task.spec.name + "." + std::to_string(g.launch);
  return g;
}

void Runner::Started(size_t t, const planner::Config& c) {
  tasks_[t].done_status.clear();
  tasks_[t].done_error.clear();
  report_.tasks[t].state = "running";
  report_.tasks[t].template_name = c.template_name;
  report_.tasks[t].gpus = c.gpus;
  report_.tasks[t].batch_size = c.batch_size;
  if (!launched_any_) {
    launched_any_ = true;
    launch_time_ = Elapsed();
  }
}

Status Runner::Launch(size_t t, int config, const std::vector<int>& devices) {
  TaskRun& task = tasks_[t];
  const planner::Config& c = task.configs[static_cast<size_t>(config)];
  const engine::LaunchConfig lc = LaunchConfigFor(task, config);
  std::vector<std::string> argv = {opt_.worker, "train"};
  for (auto& f : engine::TrainFlags(task.spec, lc)) argv.push_back(f);
  Gang g = NewGang(task, config, devices, lc);
  std::string store = opt_.workdir + "/rdv/" + task.spec.name + "-" + std::to_string(g.launch);
  std::error_code ec;
  fs::remove_all(store, ec);
  for (int r = 0; r < c.gpus; ++r) {
    ORRERY_ASSIGN_OR_RETURN(
        Process p,
        Process::Spawn(argv,
                       RankEnv(opt_.devices, devices[static_cast<size_t>(r)], r, c.gpus, store),
                       g.log_prefix + ".r" + std::to_string(r) + ".log", r == 0));
    g.ranks.push_back(std::move(p));
  }
  std::string where;
  for (int d : devices) where += (where.empty() ? "" : ",") + std::to_string(d);
  Event("start " + task.spec.name + " as " +
        ConfigText(c.template_name, c.gpus, c.batch_size, task.batch) + " on " + opt_.devices.kind +
        ":" + where + (task.step > 0 ? " from step " + std::to_string(task.step) : ""));
  task.gang = std::move(g);
  Started(t, c);
  return OkStatus();
}

Status Runner::LaunchInterleaved(const engine::LaunchAction& l, const std::vector<int>& devices) {
  std::vector<const engine::LaunchAction*> actions = {&l};
  for (const engine::LaunchAction& m : l.interleaved) actions.push_back(&m);
  std::vector<engine::GangMember> members;
  std::vector<engine::LaunchConfig> configs;
  std::vector<std::string> names;
  for (const engine::LaunchAction* a : actions) {
    configs.push_back(LaunchConfigFor(tasks_[a->task], a->config));
    names.push_back(tasks_[a->task].spec.name);
  }
  for (size_t i = 0; i < actions.size(); ++i)
    members.push_back({&tasks_[actions[i]->task].spec, configs[i]});
  const int id = next_igang_++;
  const std::string name = planner::GangName(names);
  const std::string log_prefix = opt_.workdir + "/logs/" + name + "." + std::to_string(id) + "-" +
                                 std::to_string(launch_counter_++);
  ORRERY_ASSIGN_OR_RETURN(
      std::vector<std::string> flags,
      engine::GangFlags(members, kGangSpillBudgetBytes, InterleavedGang::StopFileOf(log_prefix)));
  std::vector<std::string> argv = {opt_.worker, "gang"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  ORRERY_ASSIGN_OR_RETURN(Process p,
                          Process::Spawn(argv, RankEnv(opt_.devices, devices[0], 0, 1, ""),
                                         log_prefix + ".r0.log", true));
  InterleavedGang ig{std::move(p), {}, name, log_prefix, "", 0, Now(), false, actions.size(), {}};
  std::string from;
  for (size_t i = 0; i < actions.size(); ++i) {
    const size_t t = actions[i]->task;
    TaskRun& task = tasks_[t];
    Gang g = NewGang(task, actions[i]->config, devices, configs[i]);
    g.log_prefix = log_prefix;
    g.interleaved = id;
    if (task.step > 0) from += " " + task.spec.name + " from step " + std::to_string(task.step);
    task.gang = std::move(g);
    ig.members.push_back(t);
    Started(t, task.configs[static_cast<size_t>(actions[i]->config)]);
  }
  Event("start " + name + " as an interleaved gang (spill, one process) on " + opt_.devices.kind +
        ":" + std::to_string(devices[0]) + from);
  igangs_.emplace(id, std::move(ig));
  return OkStatus();
}

void Runner::ReadProgress(size_t t) {
  TaskRun& task = tasks_[t];
  if (!task.gang || task.gang->interleaved >= 0) return;  // its gang's process: ReadInterleaved
  for (const std::string& line : task.gang->ranks[0].ReadLines()) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) continue;
    OnLine(t, j);
  }
}

void Runner::OnLine(size_t t, const Json& j) {
  TaskRun& task = tasks_[t];
  ReportTask& rt = report_.tasks[t];
  const std::string ev = j.value("event", "");
  if (ev == "start") {
    OnStart(t, j);
  } else if (ev == "progress") {
    OnProgress(t, j);
  } else if (ev == "restore") {
    // Right after "start" on a resume: what the new layout read to get here.
    if (std::optional<ReportStateIo> io = ParseStateIo(j, Now())) {
      Event(RestoreEventText(task.spec.name, *io));
      AppendStateIo(&rt.state_io, std::move(*io));
    }
  } else if (ev == "checkpoint") {
    if (std::optional<ReportStateIo> io = ParseStateIo(j, Now())) {
      if (io->layout.empty()) io->layout = task.gang->layout;
      AppendStateIo(&rt.state_io, std::move(*io));
    }
    task.checkpoint_step = j.value("step", task.checkpoint_step);
    // Each step of this run consumed its global batch (the worker's cursor).
    task.checkpoint_samples[task.checkpoint_step] =
        task.gang->start_samples +
        (task.checkpoint_step - task.gang->start_step) * task.gang->batch;
  } else if (ev == "export") {
    OnExport(t, j);
  } else if (ev == "done") {
    task.done_status = j.value("status", "");
    if (j.contains("error") && j["error"].is_string()) task.done_error = j["error"];
    task.step = j.value("step", task.step);
    if (j.contains("loss") && j["loss"].is_number()) task.loss = j["loss"].get<double>();
    if (j.contains("export") && j["export"].is_string()) rt.export_path = j["export"];
  }
  rt.steps_done = task.step;
  rt.final_loss = task.loss;
  rt.samples_per_s = task.samples_per_s;
}

// The worker started: its layout, its steps, and where it resumed from (or that
// it starts over).
void Runner::OnStart(size_t t, const Json& j) {
  TaskRun& task = tasks_[t];
  ReportTask& rt = report_.tasks[t];
  if (j.contains("layout") && j["layout"].is_string()) task.gang->layout = j["layout"];
  if (j.contains("steps") && j["steps"].is_number_integer()) {
    task.steps_total = j["steps"].get<int64_t>();
    rt.steps_total = task.steps_total;
  }
  if (j.contains("resumed_from_step") && j["resumed_from_step"].is_number_integer()) {
    int64_t from = j["resumed_from_step"].get<int64_t>();
    bool wrong_point = task.gang->steps_from_budget && from != task.gang->start_step;
    task.step = from;
    task.checkpoint_step = from;
    task.gang->start_step = from;
    task.gang->start_samples = SamplesAtStep(task, from);
    task.samples = task.gang->start_samples;
    // Progress after that checkpoint was lost; its loss points go too.
    auto& l = rt.losses;
    l.erase(
        std::remove_if(l.begin(), l.end(), [&](const ReportLossPoint& p) { return p.step > from; }),
        l.end());
    if (wrong_point) {
      // Its --steps assumed another resume point (a checkpoint this
      // invocation had not seen): stopped at once, it starts again with
      // the steps that finish the budget from here.
      Event(task.spec.name + ": resumed from step " + std::to_string(from) +
            ", not the step its launch assumed; restarting with the steps left");
      StopGang(t, "rescaled", SIGTERM);
    }
  } else {
    if (task.step > 0) {
      task.step = 0;  // no checkpoint survived: starting over
      rt.losses.clear();
    }
    bool short_run = task.gang->steps_from_budget && task.gang->start_step > 0;
    task.checkpoint_step = 0;
    task.gang->start_step = 0;
    task.gang->start_samples = 0;
    task.samples = 0;
    task.checkpoint_samples.clear();
    // A fresh run's steps at its batch are the budget (epochs of data whose
    // size only the worker knows).
    if (!task.budget_known && task.steps_total > 0) {
      task.sample_budget = task.steps_total * task.gang->batch;
      task.budget_known = true;
    }
    if (short_run) {
      // Launched with the steps left after a checkpoint that is gone: it
      // would stop short of the sample budget. Stopped at once (nothing to
      // checkpoint yet), it starts again with the whole budget.
      Event(task.spec.name + ": no checkpoint to resume from; restarting with its whole budget");
      StopGang(t, "rescaled", SIGTERM);
    }
  }
}

// A progress report: steps, samples, loss, and the measured speed against the
// profile (a drift the next step re-plans on).
void Runner::OnProgress(size_t t, const Json& j) {
  TaskRun& task = tasks_[t];
  ReportTask& rt = report_.tasks[t];
  task.step = j.value("step", task.step);
  task.samples = j.value(
      "samples", task.gang->start_samples + (task.step - task.gang->start_step) * task.gang->batch);
  task.loss = j.value("loss", task.loss);
  task.samples_per_s = j.value("samples_per_s", task.samples_per_s);
  rt.losses.push_back({task.step, task.loss, Now()});
  ++task.gang->progress_lines;
  // Measured over profiled throughput, once past the first report (warm-up).
  const planner::Config& c = task.configs[static_cast<size_t>(task.gang->config)];
  // A member of an interleaved gang shares its device by design: its gang's
  // speed is measured as a whole (MeasureInterleaved).
  if (task.gang->interleaved < 0 && task.gang->progress_lines >= 2 && c.throughput > 0 &&
      task.samples_per_s > 0) {
    task.speed_factor = task.samples_per_s / c.throughput;
    if (!task.gang->drift_reported &&
        std::abs(task.speed_factor - 1) > engine_->options().drift_tolerance) {
      task.gang->drift_reported = true;
      char buf[200];
      std::snprintf(buf, sizeof(buf), "%s runs at %.0f%% of its profiled speed",
                    task.spec.name.c_str(), 100 * task.speed_factor);
      Event(buf);  // the next step re-plans with the measured speed
    }
  }
}

// The trained model written as a Hugging Face directory (before "done").
void Runner::OnExport(size_t t, const Json& j) {
  TaskRun& task = tasks_[t];
  ReportTask& rt = report_.tasks[t];
  // Before "done": the trained model, as a Hugging Face directory.
  if (j.contains("path") && j["path"].is_string()) {
    rt.export_path = j["path"].get<std::string>();
    std::string seconds;
    if (j.contains("seconds") && j["seconds"].is_number()) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), " in %.1f s", j["seconds"].get<double>());
      seconds = buf;
    }
    Event(task.spec.name + ": exported the model to " + rt.export_path +
          (j.contains("dtype") && j["dtype"].is_string()
               ? " (" + j["dtype"].get<std::string>() + ")"
               : "") +
          seconds);
  }
}

void Runner::StopGang(size_t t, const std::string& reason, int signal) {
  TaskRun& task = tasks_[t];
  if (!task.gang) return;
  if (task.gang->stop_reason.empty()) {
    task.gang->stop_reason = reason;
    task.gang->stop_requested = Elapsed();
  }
  for (Process& p : task.gang->ranks) p.Signal(signal);
  if (task.gang->interleaved < 0) return;
  InterleavedGang& ig = igangs_.at(task.gang->interleaved);
  if (signal != SIGKILL && ig.stop_reason.empty()) {
    // One member alone: a line in the gang's stop file; it checkpoints at its
    // next step and leaves, the others run on (ReadInterleaved). The process
    // is signalled once every member still in it has been asked.
    if (!task.gang->stop_written) {
      std::ofstream(ig.StopFile(), std::ios::app) << task.spec.name << "\n";
      task.gang->stop_written = true;
    }
    for (size_t m : ig.members) {
      if (tasks_[m].gang && tasks_[m].gang->stop_reason.empty()) return;
    }
  }
  // The whole gang (every member asked, or a kill): its one process stops,
  // each member checkpointing in its own directory on SIGTERM.
  StopInterleaved(ig, reason, signal);
}

void Runner::StopInterleaved(InterleavedGang& ig, const std::string& reason, int signal) {
  if (!ig.stop_reason.empty() && signal != SIGKILL) return;  // asked already, once
  if (ig.stop_reason.empty()) {
    ig.stop_reason = reason;
    ig.stop_requested = Elapsed();
  }
  for (size_t m : ig.members) {
    Gang& mg = *tasks_[m].gang;
    if (mg.stop_reason.empty() || signal == SIGKILL) {
      mg.stop_reason = reason;
      mg.stop_requested = Elapsed();
    }
  }
  ig.process.Signal(signal);
}

void Runner::ReadInterleaved(int id) {
  InterleavedGang& ig = igangs_.at(id);
  for (const std::string& line : ig.process.ReadLines()) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.contains("task") && j["task"].is_string()) {
      for (size_t m : ig.members) {
        if (tasks_[m].spec.name == j["task"].get<std::string>()) OnLine(m, j);
      }
    } else if (j.value("event", "") == "gang_done" && j.contains("busy_fraction") &&
               j["busy_fraction"].is_number()) {
      char buf[200];
      std::snprintf(buf, sizeof(buf), "interleaved gang %s: device busy %.0f%% of its run",
                    ig.name.c_str(), 100 * j["busy_fraction"].get<double>());
      Event(buf);
    }
  }
  MeasureInterleaved(id);
  // A member that completed, or checkpointed when stopped alone, leaves the
  // gang; the others keep running in it.
  std::vector<size_t> left;
  for (size_t m : ig.members) {
    const std::string& status = tasks_[m].done_status;
    if (status == "completed" || (status == "preempted" && !tasks_[m].gang->stop_reason.empty())) {
      Ended(m, 0);
    } else {
      left.push_back(m);
    }
  }
  ig.members = left;
}

void Runner::ReapInterleaved(int id) {
  InterleavedGang& ig = igangs_.at(id);
  if (ig.process.Running()) {
    if (!ig.stop_reason.empty() && Elapsed() - ig.stop_requested > kStopGraceS) {
      ig.process.Signal(SIGKILL);
    }
    for (size_t m : ig.members) {
      const Gang& g = *tasks_[m].gang;
      if (!ig.stop_reason.empty() || g.stop_reason.empty() ||
          Elapsed() - g.stop_requested <= kStopGraceS) {
        continue;
      }
      // Asked alone and not gone within the grace: the whole gang stops.
      Event(tasks_[m].spec.name + " did not stop alone within " +
            std::to_string(static_cast<int>(kStopGraceS)) + " s; stopping its gang " + ig.name);
      StopInterleaved(ig, g.stop_reason, SIGTERM);
      break;
    }
    return;
  }
  ReadInterleaved(id);
  const int code = ig.process.WaitOrKill(30);
  // The process's exit status is the gang's; each member's own is its "done"
  // line's: preempted (stopped with a checkpoint) is clean, anything else
  // (failed, or no "done" at all) is a failure of that member.
  for (size_t m : ig.members) {
    const std::string& status = tasks_[m].done_status;
    Ended(m, status == "completed" || status == "preempted" ? 0 : std::max(code, 1));
  }
  igangs_.erase(id);
}

void Runner::MeasureInterleaved(int id) {
  InterleavedGang& ig = igangs_.at(id);
  if (ig.speedup_reported || ig.size < 2) return;
  for (size_t m : ig.members) {
    const TaskRun& task = tasks_[m];
    const planner::Config& c = task.configs[static_cast<size_t>(task.gang->config)];
    // Past the first report (warm-up), as OnProgress's drift.
    if (task.gang->progress_lines >= 2 && c.throughput > 0) {
      ig.ratio[m] = task.samples_per_s / c.throughput;
    }
  }
  if (ig.ratio.size() < ig.size) return;  // a member not measured yet
  double speedup = 0;
  for (const auto& [m, r] : ig.ratio) speedup += r;
  ig.speedup_reported = true;
  engine::EngineOptions o = engine_->options();
  char buf[240];
  std::snprintf(buf, sizeof(buf),
                "interleaved gang %s runs at %.2fx its members one after the other (planned "
                "with %.2fx)",
                ig.name.c_str(), speedup, o.interleave_speedup);
  Event(buf);
  if (std::abs(speedup / o.interleave_speedup - 1) > o.drift_tolerance) {
    o.interleave_speedup = speedup;  // the next plan's gangs are timed with it
    engine_->UpdateOptions(o, engine::Trigger::kGangSpeedMeasured);
  }
  // Kept beside the profiles for the next run on these devices.
  auto cache = ProfileCache::Load(opt_.profile_cache);
  Status kept = cache.status();
  if (cache.ok()) {
    cache->PutGangSpeedup(opt_.devices.kind, speedup);
    kept = cache->Save();
  }
  if (!kept.ok()) Event("could not keep the gang's speedup: " + kept.ToString());
}

void Runner::Reap(size_t t) {
  TaskRun& task = tasks_[t];
  if (!task.gang || task.gang->interleaved >= 0) return;  // ReapInterleaved
  Gang& g = *task.gang;
  // A gang ends when its rank 0 ends; a rank that dies alone makes the others
  // fail fast (worker/dist), so waiting for rank 0 is enough.
  if (g.ranks[0].Running()) {
    if (!g.stop_reason.empty() && Elapsed() - g.stop_requested > kStopGraceS) {
      for (Process& p : g.ranks) p.Signal(SIGKILL);
    }
    return;
  }
  ReadProgress(t);
  int code = 0;
  for (Process& p : g.ranks) code = std::max(code, p.WaitOrKill(30));
  Ended(t, code);
}

void Runner::Ended(size_t t, int code) {
  TaskRun& task = tasks_[t];
  Gang& g = *task.gang;
  const planner::Config& c = task.configs[static_cast<size_t>(g.config)];
  ReportBar bar;
  bar.task = task.spec.name;
  bar.devices = g.devices;
  if (!g.devices.empty())
    bar.gpu_type = opt_.devices.TypeOf(static_cast<size_t>(g.devices.front()));
  bar.start_s = g.started;
  bar.end_s = Now();
  bar.template_name = c.template_name;
  bar.gpus = c.gpus;
  bar.batch_size = c.batch_size;
  if (g.interleaved >= 0) bar.gang = igangs_.at(g.interleaved).name;
  ReportTask& rt = report_.tasks[t];
  std::string reason = g.stop_reason;
  std::string log0 = g.log_prefix + ".r0.log";
  task.gang.reset();
  if (code == 0 && task.done_status == "completed") {
    bar.ended_by = "completed";
    task.done = true;
    rt.state = "completed";
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s completed: loss %.4f after %lld steps",
                  task.spec.name.c_str(), task.loss, static_cast<long long>(task.step));
    Event(buf);
    report_.actual.push_back(bar);
    return;
  }
  if (reason == "rescaled" || reason == "interrupted") {
    bar.ended_by = reason;
    if (reason == "rescaled") ++rt.restarts;
    rt.state = reason == "interrupted" ? "interrupted" : "pending";
    if (code != 0) {
      Event(task.spec.name + ": stopped without a clean checkpoint (exit " + std::to_string(code) +
            "); it resumes from step " + std::to_string(task.checkpoint_step));
    }
    if (code != 0) {
      task.step = task.checkpoint_step;
      task.samples = SamplesAtStep(task, task.checkpoint_step);
    }
    report_.actual.push_back(bar);
    return;
  }
  if (reason == "device-lost") {
    bar.ended_by = "device-lost";
    ++rt.restarts;
    rt.state = "pending";
    task.step = task.checkpoint_step;
    task.samples = SamplesAtStep(task, task.checkpoint_step);
    Event(task.spec.name + " lost a device; it restarts from step " +
          std::to_string(task.checkpoint_step) + " on what remains");
    report_.actual.push_back(bar);
    return;
  }
  bar.ended_by = "failed";
  report_.actual.push_back(bar);
  ++task.failures;
  task.step = task.checkpoint_step;
  task.samples = SamplesAtStep(task, task.checkpoint_step);
  // The worker's own error for this task when its "done" line gave one (in
  // a gang the log's last line may be another member's), else the log's.
  std::string why = task.done_error.empty() ? LastLine(log0) : task.done_error;
  if (task.failures >= kMaxFailures) {
    task.failed = true;
    rt.state = "failed";
    Event(task.spec.name + " failed " + std::to_string(task.failures) + " times, giving up: it " +
          EndedText(code, why) + " (logs: " + log0 + ")");
  } else {
    ++rt.restarts;
    rt.state = "pending";
    Event(task.spec.name + " " + EndedText(code, why) + "; restarting from step " +
          std::to_string(task.checkpoint_step));
  }
}

void Runner::LoseDevice(int device, const std::string& why) {
  if (device < 0 || static_cast<size_t>(device) >= alive_.size() ||
      !alive_[static_cast<size_t>(device)])
    return;
  alive_[static_cast<size_t>(device)] = false;
  Event("device " + opt_.devices.kind + ":" + std::to_string(device) + " lost (" + why + ")");
  for (size_t t = 0; t < tasks_.size(); ++t) {
    if (!tasks_[t].gang) continue;
    const auto& d = tasks_[t].gang->devices;
    if (std::find(d.begin(), d.end(), device) == d.end()) continue;
    // A dead device takes its process with it: no checkpoint on the way out.
    tasks_[t].gang->stop_reason.clear();
    StopGang(t, "device-lost", SIGKILL);
  }
}

void Runner::RestoreDevice(int device) {
  if (device < 0 || static_cast<size_t>(device) >= alive_.size() ||
      alive_[static_cast<size_t>(device)])
    return;
  alive_[static_cast<size_t>(device)] = true;
  Event("device " + opt_.devices.kind + ":" + std::to_string(device) + " is back");
}

void Runner::ApplyDeviceEvents() {
  while (next_device_event_ < opt_.device_events.size() && launched_any_ &&
         opt_.device_events[next_device_event_].at_s <= Elapsed() - launch_time_) {
    const DeviceEvent& e = opt_.device_events[next_device_event_++];
    if (e.fail) {
      LoseDevice(e.device, "--fail-device-at");
    } else {
      RestoreDevice(e.device);
    }
  }
}

void Runner::ReadControlFile() {
  std::ifstream in(opt_.workdir + "/control");
  if (!in) return;
  in.seekg(control_offset_);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line still being written
    control_offset_ = in.tellg();
    std::istringstream ls(line);
    std::string verb;
    int device = -1;
    ls >> verb >> device;
    if (verb == "fail") {
      LoseDevice(device, "control file");
    } else if (verb == "restore") {
      RestoreDevice(device);
    } else if (verb == "quota" && device >= 0) {
      // The job's gpuQuota edited while it runs (0: none), as `kubectl edit`
      // does on a cluster: the engine stops what exceeds it, or plans wider.
      quota_ = device;
      Event("control file: gpuQuota " + std::to_string(quota_));
    } else if (!verb.empty()) {
      Event("control file: ignored '" + line + "' (use 'fail DEV', 'restore DEV' or 'quota GPUS')");
    }
  }
}

std::vector<TaskProgress> Runner::ProgressView() const {
  std::vector<TaskProgress> v;
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const TaskRun& task = tasks_[t];
    TaskProgress p;
    p.name = task.spec.name;
    p.state = report_.tasks[t].state;
    p.config = task.gang ? TaskConfigText(task) : "";
    p.step = task.step;
    p.steps = task.steps_total;
    p.loss = task.loss;
    p.samples_per_s = task.samples_per_s;
    if (task.gang && task.samples_per_s > 0) {
      p.eta_s = static_cast<double>(task.steps_total - task.step) *
                static_cast<double>(task.gang->batch) / task.samples_per_s;
    }
    v.push_back(p);
  }
  return v;
}

void Runner::WriteReport() {
  report_.wall_s = Now();
  report_.actions.clear();
  report_.violations = profile_journal_.violations();
  if (engine_) {  // none before the job is planned
    for (const engine::JournalEntry& e : engine_->journal().entries()) {
      report_.actions.push_back({e.at, e.kind, e.task, e.detail, e.trigger});
    }
    report_.violations.insert(report_.violations.end(), engine_->journal().violations().begin(),
                              engine_->journal().violations().end());
  }
  std::vector<ReportBar> all = report_.actual;
  RunReport snapshot = report_;
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const TaskRun& task = tasks_[t];
    if (!task.gang) continue;
    const planner::Config& c = task.configs[static_cast<size_t>(task.gang->config)];
    ReportBar bar;
    bar.task = task.spec.name;
    bar.devices = task.gang->devices;
    if (!bar.devices.empty())
      bar.gpu_type = opt_.devices.TypeOf(static_cast<size_t>(bar.devices.front()));
    bar.start_s = task.gang->started;
    bar.end_s = Now();
    bar.template_name = c.template_name;
    bar.gpus = c.gpus;
    bar.batch_size = c.batch_size;
    bar.ended_by = "running";
    if (task.gang->interleaved >= 0) bar.gang = igangs_.at(task.gang->interleaved).name;
    snapshot.actual.push_back(bar);
  }
  Status s = WriteFileAtomically(opt_.workdir + "/report.json", ReportJson(snapshot));
  if (s.ok()) s = WriteFileAtomically(opt_.workdir + "/report.html", ReportHtml(snapshot));
  if (!s.ok()) err_ << "orrery run: cannot write the report: " << s << "\n";
  last_report_write_ = Elapsed();
}

int Runner::Run() {
  Status s = Prepare();
  if (!s.ok()) {
    err_ << "orrery run: " << s << "\n";
    return 1;
  }
  // One run per work directory at a time.
  int lock_fd = open((opt_.workdir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    err_ << "orrery run: another `orrery run` is using " << opt_.workdir << "\n";
    if (lock_fd >= 0) close(lock_fd);
    return 1;
  }
  std::optional<int> early = Begin();
  const int code = early ? *early : End(Loop());
  close(lock_fd);
  return code;
}

std::optional<int> Runner::Begin() {
  Event("job " + job_.job.metadata.name + ": " + std::to_string(tasks_.size()) + " tasks on " +
        opt_.devices.text + ", work directory " + opt_.workdir);
  if (std::all_of(tasks_.begin(), tasks_.end(), [](const TaskRun& t) { return t.done; })) {
    report_.outcome = "completed";
    display_.Finish(ProgressView());
    WriteReport();
    out_ << "report: " << opt_.workdir << "/report.html\n"
         << "every task had already completed; remove " << opt_.workdir << " to run again\n";
    return 0;
  }
  Status s = ProfileAll();
  if (!s.ok()) {
    err_ << "orrery run: " << s << "\n";
    report_.outcome = s.code() == StatusCode::kCancelled ? "interrupted" : "failed";
    WriteReport();
    return s.code() == StatusCode::kCancelled ? 130 : 1;
  }
  BuildConfigs();
  for (size_t t = 0; t < tasks_.size(); ++t) {
    if (!tasks_[t].done && tasks_[t].configs.empty()) {
      err_ << "orrery run: task " << tasks_[t].spec.name
           << " has no configuration that ran in profiling (see the events above and "
           << opt_.workdir << "/logs); allow more templates in spec.resources.templates or "
           << "fix the model\n";
      report_.outcome = "failed";
      WriteReport();
      return 1;
    }
  }
  engine::EngineOptions options = RunEngineOptions(job_, opt_);
  // A gang speedup an earlier run measured on these devices times this run's
  // first gangs (else the default, which on a CPU is optimistic).
  if (options.interleave && job_.job.spec.profiling.reuse_cache) {
    if (const std::optional<double> measured = cached_gang_speedup_) {
      options.interleave_speedup = *measured;
      char buf[200];
      std::snprintf(buf, sizeof(buf), "gangs timed at %.2fx, as measured on %s before (%s)",
                    *measured, opt_.devices.kind.c_str(), opt_.profile_cache.c_str());
      Event(buf);
    }
  }
  engine_ = std::make_unique<engine::Engine>(std::move(options), nullptr);
  for (auto& rt : report_.tasks) {
    if (rt.state == "profiling") rt.state = "pending";
  }
  Step();
  if (!plan_) {
    err_ << "orrery run: no plan could be made (see the events above)\n";
    report_.outcome = "failed";
    WriteReport();
    return 1;
  }
  return std::nullopt;
}

bool Runner::Loop() {
  bool interrupted = false;
  double last_display = -1e9;
  while (true) {
    if (!interrupted && StopRequested()) {
      interrupted = true;
      Event("stopping: every running task checkpoints, then exits");
      for (size_t t = 0; t < tasks_.size(); ++t) StopGang(t, "interrupted", SIGTERM);
    }
    if (!interrupted) {
      ApplyDeviceEvents();
      ReadControlFile();
    }
    for (size_t t = 0; t < tasks_.size(); ++t) {
      ReadProgress(t);
      Reap(t);
    }
    std::vector<int> ids;
    for (const auto& [id, ig] : igangs_) ids.push_back(id);
    for (int id : ids) {
      ReadInterleaved(id);
      ReapInterleaved(id);
    }
    bool running = false, left = false;
    running = !igangs_.empty();
    for (const TaskRun& t : tasks_) {
      running = running || t.gang.has_value();
      left = left || !(t.done || t.failed);
    }
    if ((interrupted && !running) || !left) break;
    if (!interrupted) {
      Step();
      bool any_running = false;
      for (const TaskRun& t : tasks_) any_running = any_running || t.gang.has_value();
      if (!any_running && AliveDevices().empty()) {
        Event("no device left: stopping; restore a device ('restore DEV' in " + opt_.workdir +
              "/control) or run again to resume");
        return true;
      }
    }
    if (Elapsed() - last_display >= (opt_.tty ? 0.5 : 1.0)) {
      display_.Update(Now(), ProgressView(), plan_ ? plan_->makespan : -1);
      last_display = Elapsed();
    }
    if (Elapsed() - last_report_write_ >= 5) WriteReport();
    std::this_thread::sleep_for(std::chrono::duration<double>(opt_.tick_s));
  }
  return interrupted;
}

int Runner::End(bool interrupted) {
  bool failed = false;
  for (const TaskRun& t : tasks_) failed = failed || t.failed;
  report_.outcome = interrupted ? "interrupted" : failed ? "failed" : "completed";
  display_.Finish(ProgressView());
  WriteReport();
  out_ << "report: " << opt_.workdir << "/report.html\n";
  if (interrupted) {
    out_ << "interrupted: run the same command again to resume from the checkpoints\n";
  } else {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s in %s",
                  failed ? "finished with failures" : "all tasks completed",
                  FormatDuration(Now()).c_str());
    out_ << buf << "\n";
  }
  return interrupted ? 130 : failed ? 1 : 0;
}

}  // namespace

namespace {
// One group of --devices without a type: "cpu:2", "cuda:0-3", "cuda:0,2".
// `whole` is the flag's full text, for errors.
StatusOr<DeviceSet> ParseDeviceGroup(const std::string& text, const std::string& whole) {
  DeviceSet d;
  d.text = text;
  auto colon = text.find(':');
  d.kind = text.substr(0, colon);
  std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("--devices " + whole + ": " + why +
                                " (use cpu:N, or cuda:0-7, or cuda:0,2,3; with GPU types "
                                "cpu:2=big+cpu:2=small)");
  };
  if (d.kind != "cpu" && d.kind != "cuda") return bad("unknown device kind '" + d.kind + "'");
  auto to_int = [&](const std::string& s) -> std::optional<int> {
    if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoi(s);
  };
  if (d.kind == "cpu") {
    int n = 1;
    if (!rest.empty()) {
      auto v = to_int(rest);
      if (!v || *v < 1 || *v > 256) return bad("the count must be a number from 1 to 256");
      n = *v;
    }
    for (int i = 0; i < n; ++i) d.ids.push_back(i);
    return d;
  }
  if (rest.empty()) return bad("name the CUDA devices");
  std::stringstream ss(rest);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto dash = item.find('-');
    if (dash == std::string::npos) {
      auto v = to_int(item);
      if (!v) return bad("'" + item + "' is not a device number");
      d.ids.push_back(*v);
    } else {
      auto a = to_int(item.substr(0, dash)), b = to_int(item.substr(dash + 1));
      if (!a || !b || *a > *b) return bad("'" + item + "' is not a range like 0-7");
      for (int i = *a; i <= *b; ++i) d.ids.push_back(i);
    }
  }
  std::set<int> unique(d.ids.begin(), d.ids.end());
  if (unique.size() != d.ids.size()) return bad("a device is named twice");
  return d;
}

bool IsGpuTypeName(const std::string& s) {
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  return !s.empty() && s.size() <= 63 && alnum(s.front()) && alnum(s.back()) &&
         std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}
}  // namespace

std::vector<std::string> DeviceSet::Pools() const {
  std::vector<std::string> pools;
  for (const std::string& t : types) {
    if (std::find(pools.begin(), pools.end(), t) == pools.end()) pools.push_back(t);
  }
  if (pools.empty()) pools.push_back("");
  return pools;
}

const std::string& DeviceSet::TypeOf(size_t device) const {
  static const std::string kNone;
  return device < types.size() ? types[device] : kNone;
}

StatusOr<DeviceSet> ParseDevices(const std::string& text) {
  if (text.find('+') == std::string::npos && text.find('=') == std::string::npos)
    return ParseDeviceGroup(text, text);
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("--devices " + text + ": " + why +
                                " (use groups like cpu:2=big+cpu:2=small or "
                                "cuda:0-3=H100+cuda:4-7=L4)");
  };
  DeviceSet d;
  d.text = text;
  std::stringstream ss(text);
  std::string group;
  bool first = true;
  while (std::getline(ss, group, '+')) {
    const auto eq = group.rfind('=');
    if (eq == std::string::npos) return bad("'" + group + "' names no GPU type: add =TYPE");
    const std::string type = group.substr(eq + 1);
    if (!IsGpuTypeName(type)) {
      return bad("'" + type +
                 "' is not a GPU type: letters, digits, '-', '_' and '.', starting and ending "
                 "with a letter or digit");
    }
    ORRERY_ASSIGN_OR_RETURN(DeviceSet g, ParseDeviceGroup(group.substr(0, eq), text));
    if (!first && g.kind != d.kind) return bad("every group must be of one kind (cpu or cuda)");
    d.kind = g.kind;
    first = false;
    const int base = static_cast<int>(d.ids.size());  // cpu devices number on
    for (int id : g.ids) {
      const int dev = g.kind == "cpu" ? base + id : id;
      if (std::find(d.ids.begin(), d.ids.end(), dev) != d.ids.end())
        return bad("device " + std::to_string(dev) + " is named twice");
      d.ids.push_back(dev);
      d.types.push_back(type);
    }
  }
  if (first) return bad("no device group");
  return d;
}

StatusOr<DeviceEvent> ParseFailDevice(const std::string& text) {
  auto colon = text.find(':');
  DeviceEvent e;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t used = 0;
    e.at_s = std::stod(text.substr(0, colon), &used);
    if (used != colon || e.at_s < 0) throw std::invalid_argument("time");
    std::string dev = text.substr(colon + 1);
    e.device = std::stoi(dev, &used);
    if (used != dev.size() || e.device < 0) throw std::invalid_argument("device");
  } catch (const std::exception&) {
    return InvalidArgumentError("--fail-device-at " + text +
                                ": expected SECONDS:DEVICE, e.g. 30:1 (device 1 fails 30 s after "
                                "the first task starts)");
  }
  return e;
}

engine::EngineOptions RunEngineOptions(const api::LoadedJob& job, const RunOptions& options) {
  engine::EngineOptions world;
  world.switch_cost_s = options.switch_cost_s;
  world.solver_time_limit_s = 0;  // the spec's
  // Spilled tasks may share a device as an interleaved gang (one
  // `orrery-worker gang` process) where the plan finds that sooner.
  engine::EngineOptions out = engine::JobEngineOptions(job.job.spec.scheduling, world);
  out.interleave = true;
  return out;
}

int RunJob(const api::LoadedJob& job, const RunOptions& options, std::ostream& out,
           std::ostream& err) {
  RunOptions opt = options;
  for (const DeviceEvent& e : opt.device_events) {
    if (static_cast<size_t>(e.device) >= opt.devices.ids.size()) {
      err << "orrery run: --fail-device-at names device " << e.device << " but --devices "
          << opt.devices.text << " has " << opt.devices.ids.size() << "\n";
      return 1;
    }
  }
  std::stable_sort(opt.device_events.begin(), opt.device_events.end(),
                   [](const DeviceEvent& a, const DeviceEvent& b) { return a.at_s < b.at_s; });
  Runner runner(job, opt, out, err);
  return runner.Run();
}

}  // namespace orrery::local
