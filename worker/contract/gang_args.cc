// See gang_args.h.
#include "worker/contract/gang_args.h"

#include <charconv>
#include <set>
#include <string_view>

namespace orrery::contract {
namespace {

constexpr std::string_view kSeparator = "--";

StatusOr<int64_t> PositiveInt(const std::string& flag, const std::string& value) {
  int64_t x = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
  if (ec != std::errc() || end != value.data() + value.size() || x < 0) {
    return InvalidArgumentError("--" + flag + " takes a non-negative integer, not '" + value + "'");
  }
  return x;
}

Status SetGangFlag(const std::string& name, const std::string& value, GangArgs& out) {
  if (name == "spill-budget-bytes") {
    ORRERY_ASSIGN_OR_RETURN(out.spill_budget_bytes, PositiveInt(name, value));
  } else if (name == "spill-link-bytes-per-s") {
    ORRERY_ASSIGN_OR_RETURN(out.spill_link_bytes_per_s, PositiveInt(name, value));
  } else if (name == "interleave-order") {
    if (value != "auto" && value != "round_robin" && value != "model_after_model") {
      return InvalidArgumentError("--interleave-order takes " + std::string(kInterleaveOrders) +
                                  ", not '" + value + "'");
    }
    out.interleave_order = value;
  } else if (name == "stop-file") {
    if (value.empty()) return InvalidArgumentError("--stop-file takes a path, not ''");
    out.stop_file = value;
  } else if (name == "device") {
    if (value != "cpu" && value != "cuda")
      return InvalidArgumentError("--device takes cpu|cuda, not '" + value + "'");
    out.device = value;
  } else {
    return InvalidArgumentError("unknown gang flag --" + name +
                                " (gang flags: --spill-budget-bytes, --interleave-order, "
                                "--device, --spill-link-bytes-per-s, --stop-file; a task's flags "
                                "follow '--')");
  }
  return OkStatus();
}

// The dp=N of a layout "dp=2,tp=1,pp=1" (1 where absent or unreadable: the
// task's own parse names a bad layout).
int64_t DataParallel(const std::string& layout) {
  size_t start = 0;
  while (start <= layout.size()) {
    size_t comma = layout.find(',', start);
    if (comma == std::string::npos) comma = layout.size();
    const std::string_view part(layout.data() + start, comma - start);
    if (part.rfind("dp=", 0) == 0) {
      int64_t dp = 1;
      std::from_chars(part.data() + 3, part.data() + part.size(), dp);
      return dp;
    }
    start = comma + 1;
  }
  return 1;
}

// What a task of a gang may not set itself, named for the error.
Status CheckTask(const WorkerArgs& t, const std::string& where) {
  if (!t.task || t.task->empty())
    return InvalidArgumentError(where + " has no --task NAME; each task of a gang names itself");
  if (t.template_name && *t.template_name != "spill") {
    return InvalidArgumentError(where + " runs --template " + *t.template_name +
                                "; only spill tasks interleave (set --template spill)");
  }
  if (t.device)
    return InvalidArgumentError(where + " sets --device; set the gang's --device instead");
  if (t.spill_budget_bytes) {
    return InvalidArgumentError(where +
                                " sets --spill-budget-bytes; the tasks share the gang's "
                                "--spill-budget-bytes (set it before the first '--')");
  }
  if (t.metrics_address) {
    return InvalidArgumentError(where +
                                " sets --metrics-address; a gang serves no /metrics (drop it)");
  }
  if (t.no_double_buffer)
    return InvalidArgumentError(where + " sets --no-double-buffer; a gang always prefetches");
  if (t.layout && DataParallel(*t.layout) != 1) {
    return InvalidArgumentError(where + " has --layout " + *t.layout +
                                "; interleaved tasks run on one device (set dp=1)");
  }
  return OkStatus();
}

}  // namespace

std::vector<std::string> ToGangArgs(const GangArgs& gang) {
  std::vector<std::string> out;
  if (gang.spill_budget_bytes)
    out.push_back("--spill-budget-bytes=" + std::to_string(*gang.spill_budget_bytes));
  if (gang.interleave_order) out.push_back("--interleave-order=" + *gang.interleave_order);
  if (gang.device) out.push_back("--device=" + *gang.device);
  if (gang.spill_link_bytes_per_s)
    out.push_back("--spill-link-bytes-per-s=" + std::to_string(*gang.spill_link_bytes_per_s));
  if (gang.stop_file) out.push_back("--stop-file=" + *gang.stop_file);
  for (const WorkerArgs& t : gang.tasks) {
    out.emplace_back(kSeparator);
    for (std::string& a : ToArgs(t)) out.push_back(std::move(a));
  }
  return out;
}

StatusOr<GangArgs> ParseGangArgs(const std::vector<std::string>& argv) {
  GangArgs out;
  size_t i = 0;
  for (; i < argv.size() && argv[i] != kSeparator; ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) return InvalidArgumentError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argv.size() && argv[i + 1] != kSeparator) {
      value = argv[++i];
    } else {
      return InvalidArgumentError("--" + name + " needs a value");
    }
    ORRERY_RETURN_IF_ERROR(SetGangFlag(name, value, out));
  }
  if (!out.spill_budget_bytes || *out.spill_budget_bytes <= 0) {
    return InvalidArgumentError(
        "a gang needs --spill-budget-bytes N > 0 (the device memory its tasks share)");
  }
  std::set<std::string> names, dirs;
  while (i < argv.size()) {
    size_t end = i + 1;
    while (end < argv.size() && argv[end] != kSeparator) ++end;
    const std::string where = "gang task " + std::to_string(out.tasks.size() + 1);
    auto task = ParseWorkerArgs(std::vector<std::string>(argv.begin() + i + 1, argv.begin() + end));
    if (!task.ok()) return task.status().WithContext(where);
    ORRERY_RETURN_IF_ERROR(CheckTask(*task, where));
    if (!names.insert(*task->task).second)
      return InvalidArgumentError(where + ": two tasks are named --task " + *task->task);
    if (task->checkpoint_dir && !dirs.insert(*task->checkpoint_dir).second) {
      return InvalidArgumentError(where + " (" + *task->task + ") shares --checkpoint-dir " +
                                  *task->checkpoint_dir + " with another task; give each its own");
    }
    out.tasks.push_back(std::move(*task));
    i = end;
  }
  if (out.tasks.size() < 2) {
    return InvalidArgumentError("a gang needs at least two tasks, each after a '--', got " +
                                std::to_string(out.tasks.size()));
  }
  return out;
}

std::string GangFlagsHelp() {
  return std::string("  --spill-budget-bytes N\n  --interleave-order ") + kInterleaveOrders +
         "\n  --device cpu|cuda\n  --spill-link-bytes-per-s N\n"
         "  --stop-file PATH   a line naming a task stops it alone (it checkpoints)\n";
}

}  // namespace orrery::contract
