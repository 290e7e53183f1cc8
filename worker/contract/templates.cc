// The template table's helpers. See templates.h.
#include "worker/contract/templates.h"

namespace orrery::contract {

std::string TemplateNames(bool plannable_only) {
  std::string out;
  for (const TemplateTraits& t : kTemplates) {
    if (plannable_only && !t.plannable) continue;
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

std::string WorkerTemplate(std::string_view name, int ranks) {
  const TemplateTraits* t = FindTemplate(name);
  // Spill keeps its state in host memory on one rank too; every other
  // template on one rank is the plain loop.
  if (ranks <= 1 && (t == nullptr || t->memory != MemoryModel::kSpilled)) return "single";
  return std::string(name);
}

bool BatchSplits(std::string_view name, int ranks, int64_t batch) {
  if (batch < 1 || ranks < 1) return false;
  const TemplateTraits* t = FindTemplate(name);
  if (t == nullptr) return false;
  if (ranks == 1 || t->batch_multiple_per_rank == 0) return true;
  return batch % (int64_t{ranks} * t->batch_multiple_per_rank) == 0;
}

}  // namespace orrery::contract
