// The worker's flag table: one row per flag, read by the writer, the parser
// and the help text alike. See worker_args.h.
#include "worker/contract/worker_args.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <variant>

#include "worker/contract/templates.h"

namespace orrery::contract {
namespace {

using Text = std::optional<std::string> WorkerArgs::*;
using Int = std::optional<int64_t> WorkerArgs::*;
using Real = std::optional<double> WorkerArgs::*;
using Switch = bool WorkerArgs::*;
using Words = std::optional<std::vector<std::string>> WorkerArgs::*;
using Ints = std::optional<std::vector<int64_t>> WorkerArgs::*;

struct FlagRow {
  std::string_view name;
  std::variant<Text, Int, Real, Switch, Words, Ints> field;
  // The values a text flag takes, "a|b|c"; "" any.
  std::string_view choices = "";
};

// Grouped as worker/train/task.h documents them.
const std::vector<FlagRow>& Rows() {
  static const std::vector<FlagRow> rows = {
      // model
      {"model", &WorkerArgs::model, "gpt|mlp|torchscript"},
      {"pretrained", &WorkerArgs::pretrained},
      {"layers", &WorkerArgs::layers},
      {"hidden", &WorkerArgs::hidden},
      {"heads", &WorkerArgs::heads},
      {"seq", &WorkerArgs::seq},
      {"vocab", &WorkerArgs::vocab},
      {"family", &WorkerArgs::family},
      {"kv-heads", &WorkerArgs::kv_heads},
      {"head-dim", &WorkerArgs::head_dim},
      {"intermediate", &WorkerArgs::intermediate},
      {"tie-embeddings", &WorkerArgs::tie_embeddings},
      {"mlp-input", &WorkerArgs::mlp_input},
      {"mlp-hidden", &WorkerArgs::mlp_hidden},
      {"mlp-layers", &WorkerArgs::mlp_layers},
      {"classes", &WorkerArgs::classes},
      {"torchscript", &WorkerArgs::torchscript},
      {"torchscript-like", &WorkerArgs::torchscript_like, "gpt|mlp"},
      // fine-tuning
      {"freeze-embeddings", &WorkerArgs::freeze_embeddings},
      {"freeze-blocks", &WorkerArgs::freeze_blocks},
      {"lora-rank", &WorkerArgs::lora_rank},
      {"lora-alpha", &WorkerArgs::lora_alpha},
      {"lora-targets", &WorkerArgs::lora_targets},
      // data
      {"data", &WorkerArgs::data, "synthetic|tokens|text"},
      {"data-path", &WorkerArgs::data_path},
      {"token-bytes", &WorkerArgs::token_bytes, "2|4"},
      {"tokenizer", &WorkerArgs::tokenizer},
      {"data-samples", &WorkerArgs::data_samples},
      {"seed", &WorkerArgs::seed},
      // optimizer and schedule
      {"optimizer", &WorkerArgs::optimizer, "sgd|adamw"},
      {"lr", &WorkerArgs::lr},
      {"weight-decay", &WorkerArgs::weight_decay},
      {"momentum", &WorkerArgs::momentum},
      {"warmup-steps", &WorkerArgs::warmup_steps},
      {"decay", &WorkerArgs::decay, "constant|cosine|linear"},
      {"min-lr-ratio", &WorkerArgs::min_lr_ratio},
      {"lr-scaling", &WorkerArgs::lr_scaling, "none|linear|sqrt"},
      {"precision", &WorkerArgs::precision, "fp32|bf16"},
      {"batch", &WorkerArgs::batch},
      // template
      {"template", &WorkerArgs::template_name},
      {"layout", &WorkerArgs::layout},
      {"micro-batches", &WorkerArgs::micro_batches},
      {"stage-starts", &WorkerArgs::stage_starts},
      {"pipeline-schedule", &WorkerArgs::pipeline_schedule, "gpipe|1f1b"},
      {"bucket-bytes", &WorkerArgs::bucket_bytes},
      {"spill-budget-bytes", &WorkerArgs::spill_budget_bytes},
      {"no-double-buffer", &WorkerArgs::no_double_buffer},
      {"recompute", &WorkerArgs::recompute, "none|unit"},
      {"threads", &WorkerArgs::threads},
      {"device", &WorkerArgs::device, "cpu|cuda"},
      // budget
      {"steps", &WorkerArgs::steps},
      {"epochs", &WorkerArgs::epochs},
      {"samples", &WorkerArgs::samples},
      {"report-every", &WorkerArgs::report_every},
      // checkpoints
      {"checkpoint-dir", &WorkerArgs::checkpoint_dir},
      {"checkpoint-every", &WorkerArgs::checkpoint_every},
      {"keep", &WorkerArgs::keep},
      {"no-resume", &WorkerArgs::no_resume},
      // export
      {"export-dir", &WorkerArgs::export_dir},
      {"export-dtype", &WorkerArgs::export_dtype, "float32|bfloat16|float16"},
      {"export-merged", &WorkerArgs::export_merged},
      // profiling
      {"profile-warmup", &WorkerArgs::profile_warmup},
      {"profile-steps", &WorkerArgs::profile_steps},
      {"tune", &WorkerArgs::tune},
      {"termination-message-path", &WorkerArgs::termination_message_path},
      // metrics
      {"metrics-address", &WorkerArgs::metrics_address},
      {"msj", &WorkerArgs::msj},
      {"task", &WorkerArgs::task},
  };
  return rows;
}

// The shortest text that reads back as the same double ("0.8", "3e-04").
std::string Number(double value) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

template <typename T>
std::string Joined(const std::vector<T>& items) {
  std::string out;
  for (const T& i : items) {
    if (!out.empty()) out += ",";
    if constexpr (std::is_same_v<T, std::string>) {
      out += i;
    } else {
      out += std::to_string(i);
    }
  }
  return out;
}

StatusOr<int64_t> ToInt(std::string_view flag, const std::string& v) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0')
    return InvalidArgumentError("--" + std::string(flag) + ": '" + v + "' is not an integer");
  if (x < 0) return InvalidArgumentError("--" + std::string(flag) + " must not be negative");
  return static_cast<int64_t>(x);
}

StatusOr<double> ToDouble(std::string_view flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x))
    return InvalidArgumentError("--" + std::string(flag) + ": '" + v + "' is not a number");
  return x;
}

std::vector<std::string> Split(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Status CheckChoice(const FlagRow& row, const std::string& value) {
  if (row.choices.empty()) return OkStatus();
  std::string_view rest = row.choices;
  while (true) {
    size_t bar = rest.find('|');
    if (rest.substr(0, bar) == value) return OkStatus();
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  // "a, b or c"
  std::string choices(row.choices);
  const size_t last = choices.rfind('|');
  choices.replace(last, 1, " or ");
  for (size_t bar = choices.find('|'); bar != std::string::npos; bar = choices.find('|'))
    choices.replace(bar, 1, ", ");
  return InvalidArgumentError("--" + std::string(row.name) + " must be " + choices + ", not '" +
                              value + "'");
}

// Stores `value` into the row's field.
Status Set(const FlagRow& row, const std::string& value, WorkerArgs& out) {
  const std::string flag(row.name);
  if (const Text* text = std::get_if<Text>(&row.field)) {
    ORRERY_RETURN_IF_ERROR(CheckChoice(row, value));
    out.*(*text) = value;
  } else if (const Int* integer = std::get_if<Int>(&row.field)) {
    ORRERY_ASSIGN_OR_RETURN(int64_t x, ToInt(flag, value));
    ORRERY_RETURN_IF_ERROR(CheckChoice(row, value));
    out.*(*integer) = x;
  } else if (const Real* real = std::get_if<Real>(&row.field)) {
    ORRERY_ASSIGN_OR_RETURN(double x, ToDouble(flag, value));
    out.*(*real) = x;
  } else if (const Words* words = std::get_if<Words>(&row.field)) {
    out.*(*words) = Split(value);
  } else if (const Ints* ints = std::get_if<Ints>(&row.field)) {
    std::vector<int64_t> xs;
    for (const std::string& item : Split(value)) {
      ORRERY_ASSIGN_OR_RETURN(int64_t x, ToInt(flag, item));
      xs.push_back(x);
    }
    out.*(*ints) = xs;
  }
  return OkStatus();
}

}  // namespace

std::vector<std::string> ToArgs(const WorkerArgs& args) {
  std::vector<std::string> out;
  for (const FlagRow& row : Rows()) {
    const std::string flag = "--" + std::string(row.name);
    std::visit(
        [&](auto member) {
          const auto& value = args.*member;
          using V = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<V, bool>) {
            if (value) out.push_back(flag);
          } else if (value.has_value()) {
            using T = typename V::value_type;
            if constexpr (std::is_same_v<T, std::string>) {
              out.push_back(flag + "=" + *value);
            } else if constexpr (std::is_same_v<T, int64_t>) {
              out.push_back(flag + "=" + std::to_string(*value));
            } else if constexpr (std::is_same_v<T, double>) {
              out.push_back(flag + "=" + Number(*value));
            } else {
              out.push_back(flag + "=" + Joined(*value));
            }
          }
        },
        row.field);
  }
  return out;
}

StatusOr<WorkerArgs> ParseWorkerArgs(const std::vector<std::string>& argv) {
  WorkerArgs out;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) return InvalidArgumentError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagRow* row = nullptr;
    for (const FlagRow& r : Rows())
      if (r.name == name) row = &r;
    if (row == nullptr)
      return InvalidArgumentError("unknown flag --" + name + " (orrery-worker --help lists them)");
    if (const Switch* s = std::get_if<Switch>(&row->field)) {
      if (has_value) return InvalidArgumentError("--" + name + " takes no value");
      out.*(*s) = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argv.size()) return InvalidArgumentError("--" + name + " needs a value");
      value = argv[++i];
    }
    ORRERY_RETURN_IF_ERROR(Set(*row, value, out));
  }
  if (out.template_name && FindTemplate(*out.template_name) == nullptr) {
    return InvalidArgumentError("--template must be one of " +
                                TemplateNames(/*plannable_only=*/false) + ", not '" +
                                *out.template_name + "'");
  }
  return out;
}

std::string WorkerFlagsHelp() {
  std::ostringstream os;
  for (const FlagRow& row : Rows()) {
    os << "  --" << row.name;
    std::visit(
        [&](auto member) {
          using V = std::decay_t<decltype(WorkerArgs().*member)>;
          if constexpr (std::is_same_v<V, bool>) {
            // a switch: no value
          } else if (!row.choices.empty()) {
            os << " " << row.choices;
          } else if constexpr (std::is_same_v<typename V::value_type, int64_t>) {
            os << " N";
          } else if constexpr (std::is_same_v<typename V::value_type, double>) {
            os << " X";
          } else if constexpr (std::is_same_v<typename V::value_type, std::string>) {
            os << (row.name == "template" ? " " + TemplateNames(false) : std::string(" TEXT"));
          } else {
            os << " A,B,...";
          }
        },
        row.field);
    os << "\n";
  }
  return os.str();
}

}  // namespace orrery::contract
