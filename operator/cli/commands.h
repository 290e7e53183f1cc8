// The `orrery` command's subcommand table. A subcommand lives in its own file,
// command_<name>.cc in this folder, and registers itself:
//
//   namespace { int RunPlan(orrery::cli::Invocation& in) { ... } }
//   ORRERY_CLI_COMMAND(plan, "plan FILE [--gpus 8x8]", "Plan a job without running it", RunPlan);
//
// CMakeLists.txt picks up every command_*.cc, so adding `plan`, `simulate` or
// `run` needs no edit elsewhere (link the library it needs there if it is new).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace orrery::cli {

struct Invocation {
  std::vector<std::string> args;  // after the subcommand name
  std::ostream& out;
  std::ostream& err;
};

struct Command {
  std::string name;
  std::string usage;                    // "validate FILE..."
  std::string summary;                  // one line for `orrery --help`
  std::function<int(Invocation&)> run;  // returns the exit code
};

// Registered commands, sorted by name.
std::vector<const Command*> Commands();
const Command* FindCommand(std::string_view name);
bool RegisterCommand(Command command);

// Exit codes shared by commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;  // the input is wrong (validation failed)
inline constexpr int kExitUsage = 2;    // the command line is wrong

// True when args holds -h or --help.
bool WantsHelp(const std::vector<std::string>& args);

}  // namespace orrery::cli

#define ORRERY_CLI_CONCAT_INNER_(a, b) a##b
#define ORRERY_CLI_CONCAT_(a, b) ORRERY_CLI_CONCAT_INNER_(a, b)
#define ORRERY_CLI_COMMAND(name, usage, summary, fn)                                    \
  [[maybe_unused]] static const bool ORRERY_CLI_CONCAT_(orrery_cli_registered_, name) = \
      ::orrery::cli::RegisterCommand({#name, usage, summary, fn})
