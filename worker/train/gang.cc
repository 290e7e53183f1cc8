// See gang.h.
#include "worker/train/gang.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <fstream>
#include <mutex>
#include <streambuf>
#include <thread>

#include <nlohmann/json.hpp>

#include "worker/contract/gang_args.h"

namespace orrery::train {
namespace {

using Json = nlohmann::json;

// Each task's lines onto the gang's stream, whole and tagged: a JSON object
// line gets "task":"NAME" as its first key, any other line "[NAME] " before it.
class TaskLines : public std::streambuf {
 public:
  TaskLines(std::string task, std::ostream& out, std::mutex& mu)
      : task_(std::move(task)), out_(out), mu_(mu) {}

 protected:
  int_type overflow(int_type c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    line_.push_back(static_cast<char>(c));
    if (c == '\n') Put();
    return c;
  }
  int sync() override {
    if (!line_.empty()) Put();
    return 0;
  }

 private:
  void Put() {
    std::string tagged;
    if (line_.size() > 2 && line_[0] == '{' && line_[1] != '}') {
      tagged = "{\"task\":" + Json(task_).dump() + "," + line_.substr(1);
    } else {
      tagged = "[" + task_ + "] " + line_;
    }
    if (tagged.back() != '\n') tagged.push_back('\n');
    line_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    out_ << tagged << std::flush;
  }

  const std::string task_;
  std::ostream& out_;
  std::mutex& mu_;
  std::string line_;
};

// No task steps until every task has been built and resumed, or has failed
// trying: a resume writes host masters the group's copier may be reading
// once any member steps.
class StartLine {
 public:
  explicit StartLine(size_t n) : waiting_(n) {}
  void Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--waiting_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [this] { return waiting_ == 0; });
  }
  void Leave() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--waiting_ == 0) cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t waiting_;
};

StatusOr<parallel::InterleaveOrder> Order(const std::string& name) {
  if (name == "auto") return parallel::InterleaveOrder::kAuto;
  if (name == "round_robin") return parallel::InterleaveOrder::kRoundRobin;
  if (name == "model_after_model") return parallel::InterleaveOrder::kModelAfterModel;
  return InvalidArgumentError("--interleave-order takes " +
                              std::string(contract::kInterleaveOrders) + ", not '" + name + "'");
}

// One task's Train on its own thread, its strategy joined to `device`.
StatusOr<TrainResult> RunTask(const TaskConfig& task, parallel::InterleavedDevice& device,
                              StartLine& start, std::ostream& out, const std::atomic<bool>* stop) {
  bool arrived = false;
  TrainHooks hooks;
  hooks.make_strategy = [&device](const TaskConfig& t) {
    return device.Join(t.metrics.task, t.model, t.strategy, t.optimizer);
  };
  hooks.ready = [&] {
    arrived = true;
    start.Arrive();
  };
  StatusOr<TrainResult> r = InternalError("task " + task.metrics.task + " did not run");
  try {
    r = Train(task, nullptr, out, stop, nullptr, &hooks);
  } catch (const std::exception& e) {
    // A LibTorch error no Status caught ends this task, not the process.
    std::string what = e.what();
    r = InternalError(what.substr(0, what.find('\n')));
    out << Json({{"event", "done"}, {"status", "failed"}, {"error", r.status().ToString()}}).dump()
        << std::endl;
  }
  if (!arrived) start.Leave();
  return r;
}

// While the gang's tasks run: passes the gang-wide stop to every task and
// each line of the stop file to the task it names, every kStopFilePollMs.
class StopWatcher {
 public:
  StopWatcher(const std::atomic<bool>* stop, std::string stop_file, GangStops& stops,
              std::ostream& out, std::mutex& out_mu)
      : stop_(stop), stop_file_(std::move(stop_file)), stops_(stops), out_(out), out_mu_(out_mu) {
    if (stop_ == nullptr && stop_file_.empty()) return;
    ReadStopFile();  // what was asked before the start holds from the first step
    thread_ = std::thread([this] { Loop(); });
  }
  ~StopWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  StopWatcher(const StopWatcher&) = delete;
  StopWatcher& operator=(const StopWatcher&) = delete;

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      if (stop_ != nullptr && stop_->load()) stops_.RequestAll();
      ReadStopFile();
      cv_.wait_for(lock, std::chrono::milliseconds(kStopFilePollMs));
    }
  }
  // Lines past those already read; a name the gang lacks is said once.
  void ReadStopFile() {
    if (stop_file_.empty()) return;
    std::ifstream in(stop_file_);
    std::string line;
    for (size_t n = 0; std::getline(in, line); ++n) {
      if (n < lines_read_) continue;
      lines_read_ = n + 1;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty() || stops_.Request(line)) continue;
      std::lock_guard<std::mutex> out_lock(out_mu_);
      out_ << Json({{"event", "stop_ignored"},
                    {"name", line},
                    {"reason", "the gang has no task of that name"}})
                  .dump()
           << std::endl;
    }
  }

  const std::atomic<bool>* stop_;
  const std::string stop_file_;
  GangStops& stops_;
  std::ostream& out_;
  std::mutex& out_mu_;
  size_t lines_read_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

GangStops::GangStops(std::vector<std::string> tasks)
    : names_(std::move(tasks)), flags_(new std::atomic<bool>[names_.size()]) {
  for (size_t i = 0; i < names_.size(); ++i) flags_[i].store(false);
}

bool GangStops::Request(const std::string& task) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] != task) continue;
    flags_[i].store(true);
    return true;
  }
  return false;
}

void GangStops::RequestAll() {
  for (size_t i = 0; i < names_.size(); ++i) flags_[i].store(true);
}

bool GangResult::ok() const {
  for (const auto& t : tasks)
    if (!t.ok()) return false;
  return true;
}

StatusOr<GangConfig> ParseGangFlags(const std::vector<std::string>& args) {
  ORRERY_ASSIGN_OR_RETURN(contract::GangArgs gang, contract::ParseGangArgs(args));
  GangConfig out;
  out.budget_bytes = *gang.spill_budget_bytes;
  ORRERY_ASSIGN_OR_RETURN(out.order, Order(gang.interleave_order.value_or("auto")));
  out.link_bytes_per_s = gang.spill_link_bytes_per_s.value_or(0);
  out.device = gang.device.value_or("cpu");
  out.stop_file = gang.stop_file.value_or("");
  for (size_t i = 0; i < gang.tasks.size(); ++i) {
    contract::WorkerArgs t = gang.tasks[i];
    t.template_name = "spill";
    t.spill_budget_bytes = out.budget_bytes;
    auto task = ParseTaskFlags(contract::ToArgs(t));
    if (!task.ok()) return task.status().WithContext("gang task " + *t.task);
    out.tasks.push_back(std::move(*task));
  }
  return out;
}

StatusOr<GangResult> TrainGang(const GangConfig& gang, std::ostream& out,
                               const std::atomic<bool>* stop, GangStops* stops) {
  if (gang.tasks.empty()) return InvalidArgumentError("a gang needs tasks");
  std::vector<std::string> task_names;
  for (const auto& t : gang.tasks) task_names.push_back(t.metrics.task);
  std::optional<GangStops> own_stops;
  if (stops == nullptr) stops = &own_stops.emplace(task_names);
  if (stops->size() != gang.tasks.size())
    return InvalidArgumentError("the gang's stops are for another set of tasks");
  const c10::Device device = gang.tasks.front().strategy.device;
  ORRERY_ASSIGN_OR_RETURN(auto shared,
                          parallel::InterleavedDevice::Create(device, gang.budget_bytes, gang.order,
                                                              gang.link_bytes_per_s));
  std::mutex out_mu;
  Json names = Json::array();
  for (const auto& t : gang.tasks) names.push_back(t.metrics.task);
  {
    std::lock_guard<std::mutex> lock(out_mu);
    out << Json({{"event", "gang"},
                 {"tasks", names},
                 {"budget_bytes", gang.budget_bytes},
                 {"order", parallel::InterleaveOrderName(gang.order)},
                 {"device", device.str()}})
               .dump()
        << std::endl;
  }
  shared->OnChoice([&](const parallel::InterleaveChoice& c) {
    std::lock_guard<std::mutex> lock(out_mu);
    out << c.ToJson() << std::endl;
  });
  GangResult result;
  result.tasks.assign(gang.tasks.size(), InternalError("not run"));
  StartLine start(gang.tasks.size());
  {
    StopWatcher watcher(stop, gang.stop_file, *stops, out, out_mu);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < gang.tasks.size(); ++i) {
      threads.emplace_back([&, i] {
        TaskLines lines(gang.tasks[i].metrics.task, out, out_mu);
        std::ostream task_out(&lines);
        result.tasks[i] = RunTask(gang.tasks[i], *shared, start, task_out, stops->Flag(i));
        task_out.flush();
      });
    }
    for (auto& t : threads) t.join();
  }
  result.stats = shared->stats();
  result.choice = shared->choice();
  Json tasks = Json::array();
  for (size_t i = 0; i < gang.tasks.size(); ++i) {
    const auto& r = result.tasks[i];
    tasks.push_back({{"task", gang.tasks[i].metrics.task},
                     {"status", r.ok() ? r->status : "failed"},
                     {"error", r.ok() ? Json(nullptr) : Json(r.status().ToString())}});
  }
  out << Json({{"event", "gang_done"},
               {"tasks", tasks},
               {"busy_fraction", result.stats.busy_fraction()},
               {"turns", result.stats.turns},
               {"peak_device_bytes", result.stats.peak_device_bytes}})
             .dump()
      << std::endl;
  return result;
}

}  // namespace orrery::train
