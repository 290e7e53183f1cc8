// See pretrained_config.h.
#include "operator/local/pretrained_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "operator/api/paths.h"

namespace orrery::local {

PretrainedConfig ReadPretrainedConfig(const api::PretrainedModel& model,
                                      const std::string& base_dir, const ClaimFolders& claims) {
  PretrainedConfig c;
  std::string dir = api::ModelDirectory(model);
  auto local = model.volume ? claims.find(model.volume->claim_name) : claims.end();
  if (local != claims.end()) {
    // The path inside the volume, under the claim's local folder (validation
    // has made sure it lies under the mount path).
    std::string inside = dir.substr(std::min(dir.size(), model.volume->mount_path.size()));
    dir = local->second + inside;
  } else if (!base_dir.empty() && !dir.empty() && dir.front() != '/') {
    dir = base_dir + "/" + dir;
  }
  c.path = dir + "/config.json";
  std::ifstream in(c.path, std::ios::binary);
  if (!in) {
    c.unreadable = model.volume && local == claims.end()
                       ? "is not readable here (it is on claim " + model.volume->claim_name +
                             ", which only the worker pods mount)"
                       : "is not readable here (no such file)";
    return c;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto shape = engine::ParsePretrainedConfig(text.str(), c.path);
  if (!shape.ok()) {
    c.error = shape.status();
    c.unreadable = "could not be used: " + shape.status().message();
    return c;
  }
  c.shape = *shape;
  return c;
}

std::vector<api::FieldError> CheckPretrainedModels(const std::vector<api::ExpandedTask>& tasks,
                                                   const std::string& base_dir,
                                                   bool require_readable,
                                                   const ClaimFolders& claims) {
  std::vector<api::FieldError> errors;
  auto add = [&](api::FieldError e) {
    if (std::find(errors.begin(), errors.end(), e) == errors.end()) errors.push_back(std::move(e));
  };
  for (const api::ExpandedTask& e : tasks) {
    if (!e.task.model.pretrained) continue;
    const std::string path = api::IndexPath("spec.tasks", e.source_index);
    PretrainedConfig c = ReadPretrainedConfig(*e.task.model.pretrained, base_dir, claims);
    if (!c.error.ok()) {
      add({path + ".model.pretrained.path", c.error.message(),
           "point path at a GPT-2, Llama, Qwen2 or Mistral directory as save_pretrained "
           "writes it"});
      continue;
    }
    if (!c.shape) {
      if (require_readable) {
        add({path + ".model.pretrained.path", c.path + " " + c.unreadable,
             "put the Hugging Face model directory there, or correct path"});
      }
      continue;
    }
    for (api::FieldError& f : engine::CheckAgainstPretrained(e.task, *c.shape, path))
      add(std::move(f));
  }
  return errors;
}

}  // namespace orrery::local
