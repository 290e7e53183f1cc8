// `orrery`: the command-line face of Orrery. Dispatches to the subcommands
// registered in command_*.cc (see commands.h).
#include <iostream>
#include <string>
#include <vector>

#include "operator/cli/commands.h"

namespace {

void PrintHelp(std::ostream& out) {
  out << "orrery: train many models at once and let Orrery choose parallelism, GPUs and "
         "schedule.\n\n"
         "Usage: orrery COMMAND [ARGS]\n\nCommands:\n";
  size_t width = 0;
  for (const auto* c : orrery::cli::Commands()) width = std::max(width, c->usage.size());
  for (const auto* c : orrery::cli::Commands()) {
    out << "  " << c->usage << std::string(width - c->usage.size() + 2, ' ') << c->summary << "\n";
  }
  out << "\nRun `orrery COMMAND --help` for a command's options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    PrintHelp(std::cout);
    return args.empty() ? orrery::cli::kExitUsage : orrery::cli::kExitOk;
  }
  if (args[0] == "--version") args[0] = "version";
  const orrery::cli::Command* command = orrery::cli::FindCommand(args[0]);
  if (!command) {
    std::cerr << "orrery: unknown command \"" << args[0] << "\"\n\n";
    PrintHelp(std::cerr);
    return orrery::cli::kExitUsage;
  }
  orrery::cli::Invocation invocation{std::vector<std::string>(args.begin() + 1, args.end()),
                                     std::cout, std::cerr};
  return command->run(invocation);
}
