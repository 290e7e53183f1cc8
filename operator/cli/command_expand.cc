// `orrery expand FILE [-o table|json|yaml]`: the concrete tasks a job's search
// spaces expand to, with the names the operator will use for them.
#include <iomanip>
#include <ostream>
#include <sstream>

#include "operator/api/codec.h"
#include "operator/api/paths.h"
#include "operator/cli/commands.h"
#include "operator/cli/job_file.h"

namespace orrery::cli {
namespace {

std::string ModelText(const api::ModelSpec& m) {
  std::ostringstream s;
  if (m.gpt) s << "gpt " << m.gpt->layers << "x" << m.gpt->hidden;
  if (m.mlp) s << "mlp " << m.mlp->layers << "x" << m.mlp->hidden;
  if (m.torchscript) s << "torchscript";
  if (m.pretrained) s << "pretrained " << api::ModelDirectory(*m.pretrained);
  return s.str();
}

std::string FineTuningText(const api::TaskSpec& t) {
  if (!t.fine_tuning) return "-";
  const api::FineTuningSpec& f = *t.fine_tuning;
  if (f.lora && f.lora->rank) return "lora r=" + std::to_string(*f.lora->rank);
  std::string s;
  if (f.freeze_embeddings) s = "frozen embeddings";
  if (f.freeze_blocks > 0)
    s += (s.empty() ? "" : ", ") + std::string("frozen ") + std::to_string(f.freeze_blocks) +
         " blocks";
  return s.empty() ? "full" : s;
}

std::string WorkText(const api::TrainingSpec& t) {
  if (t.steps) return std::to_string(*t.steps) + " steps";
  if (t.epochs) return std::to_string(*t.epochs) + " epochs";
  return "-";
}

void PrintTable(const std::vector<api::ExpandedTask>& tasks, std::ostream& out) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "FROM", "MODEL", "WORK", "BATCH", "LR", "OPTIMIZER", "FINE-TUNING"}};
  for (const auto& e : tasks) {
    std::ostringstream lr;
    lr << e.task.training.learning_rate;
    rows.push_back({e.name, e.source, ModelText(e.task.model), WorkText(e.task.training),
                    std::to_string(e.task.training.batch_size), lr.str(),
                    std::string(api::EnumName(e.task.training.optimizer)), FineTuningText(e.task)});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      out << row[c];
      if (c + 1 < row.size()) out << std::string(width[c] - row[c].size() + 3, ' ');
    }
    out << "\n";
  }
}

api::Json TasksJson(const std::vector<api::ExpandedTask>& tasks) {
  api::Json list = api::Json::array();
  for (const auto& e : tasks) {
    api::Json j = api::EncodeTask(e.task);
    api::Json chosen = api::Json::object();
    for (const auto& [k, v] : e.assignments) chosen[k] = v;
    j["from"] = e.source;
    if (!chosen.empty()) j["searchSpace"] = chosen;
    list.push_back(j);
  }
  return list;
}

int RunExpand(Invocation& in) {
  if (WantsHelp(in.args)) {
    in.out << "Usage: orrery expand FILE [-o table|json|yaml]\n\n"
              "Prints the concrete tasks the job's search spaces expand to.\n";
    return kExitOk;
  }
  std::string file, format = "table";
  for (size_t i = 0; i < in.args.size(); ++i) {
    const std::string& a = in.args[i];
    if ((a == "-o" || a == "--output") && i + 1 < in.args.size()) {
      format = in.args[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      format = a.substr(9);
    } else if (file.empty() && !a.empty() && a[0] != '-') {
      file = a;
    } else {
      in.err << "orrery expand: unexpected argument \"" << a << "\"\n";
      return kExitUsage;
    }
  }
  if (file.empty() || (format != "table" && format != "json" && format != "yaml")) {
    in.err << "Usage: orrery expand FILE [-o table|json|yaml]\n";
    return kExitUsage;
  }
  auto docs = AnalyzeFile(file);
  if (!docs.ok()) {
    in.out << docs.status().message() << "\n";
    return kExitInvalid;
  }
  int exit_code = kExitOk;
  for (const JobDocument& doc : *docs) {
    if (!doc.analysis.ok()) {
      PrintErrors(doc, in.out);
      exit_code = kExitInvalid;
      continue;
    }
    if (format == "table") {
      PrintTable(doc.analysis.tasks, in.out);
    } else if (format == "json") {
      in.out << TasksJson(doc.analysis.tasks).dump(2) << "\n";
    } else {
      in.out << api::JsonToYaml(TasksJson(doc.analysis.tasks));
    }
  }
  return exit_code;
}

}  // namespace
}  // namespace orrery::cli

ORRERY_CLI_COMMAND(expand, "expand FILE [-o table|json|yaml]",
                   "Print the tasks a job's search spaces expand to", orrery::cli::RunExpand);
