// The subcommand registry; see commands.h.
#include "operator/cli/commands.h"

#include <algorithm>
#include <map>
#include <memory>

namespace orrery::cli {
namespace {

// A function-local static, so registration from other files' static
// initialisers works whatever the initialisation order.
std::map<std::string, std::unique_ptr<Command>, std::less<>>& Registry() {
  static auto* registry = new std::map<std::string, std::unique_ptr<Command>, std::less<>>();
  return *registry;
}

}  // namespace

bool RegisterCommand(Command command) {
  std::string name = command.name;
  Registry()[name] = std::make_unique<Command>(std::move(command));
  return true;
}

std::vector<const Command*> Commands() {
  std::vector<const Command*> out;
  for (const auto& [name, command] : Registry()) out.push_back(command.get());
  return out;
}

const Command* FindCommand(std::string_view name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : it->second.get();
}

bool WantsHelp(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "-h" || a == "--help"; });
}

}  // namespace orrery::cli
