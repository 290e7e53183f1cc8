// Argument parsing for the checkpoint subcommands (see cli.h).
#include "worker/checkpoint/cli.h"

#include <chrono>
#include <iostream>

#include "worker/checkpoint/reshard.h"

namespace orrery::checkpoint {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  checkpoint inspect DIR [--no-verify] [--chunks] [--threads N]\n"
    "  checkpoint reshard DIR --to dp=D,tp=T,pp=P[,fsdp=F] OUT [--threads N] [--no-verify]\n";

int Usage(std::ostream& err, const std::string& why) {
  err << "error: " << why << "\n" << kUsage;
  return 2;
}

bool ParseThreads(const std::string& v, int& threads) {
  try {
    threads = std::stoi(v);
  } catch (const std::exception&) {
    return false;
  }
  return threads >= 1 && threads <= 256;
}

}  // namespace

int RunCheckpointCommand(const std::vector<std::string>& args, std::ostream& out,
                         std::ostream& err) {
  if (args.size() < 2) return Usage(err, "missing subcommand");
  const std::string& cmd = args[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    out << kUsage;
    return 0;
  }
  std::vector<std::string> positional;
  bool verify = true, chunks = false;
  int threads = 4;
  std::string to;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--no-verify") {
      verify = false;
    } else if (a == "--chunks") {
      chunks = true;
    } else if (a == "--threads" || a == "--to") {
      if (i + 1 >= args.size()) return Usage(err, a + " needs a value");
      const std::string& v = args[++i];
      if (a == "--to") {
        to = v;
      } else if (!ParseThreads(v, threads)) {
        return Usage(err, "--threads must be an integer in [1, 256]");
      }
    } else if (a.rfind("--to=", 0) == 0) {
      to = a.substr(5);
    } else if (a.rfind("--", 0) == 0) {
      return Usage(err, "unknown flag " + a);
    } else {
      positional.push_back(a);
    }
  }
  if (cmd == "inspect") {
    if (positional.size() != 1) return Usage(err, "inspect takes one checkpoint directory");
    InspectOptions opt;
    opt.verify = verify;
    opt.list_chunks = chunks;
    opt.threads = threads;
    Status s = Inspect(positional[0], opt, out);
    if (!s.ok()) {
      err << "error: " << s << "\n";
      return 1;
    }
    return 0;
  }
  if (cmd == "reshard") {
    if (positional.size() != 2)
      return Usage(err, "reshard takes a checkpoint directory and an output directory");
    if (to.empty()) return Usage(err, "reshard needs --to dp=D,tp=T,pp=P");
    auto layout = Layout::Parse(to);
    if (!layout.ok()) return Usage(err, layout.status().message());
    ReshardOptions opt;
    opt.threads = threads;
    opt.verify = verify;
    LoadStats stats;
    const auto start = std::chrono::steady_clock::now();
    Status s = Reshard(positional[0], *layout, positional[1], opt, &stats);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) {
      err << "error: " << s << "\n";
      return 1;
    }
    out << "resharded " << positional[0] << " -> " << positional[1] << " (" << layout->ToString()
        << "): read " << HumanBytes(stats.bytes_read) << " for " << HumanBytes(stats.bytes_needed)
        << " needed in " << stats.reads << " reads, " << secs << " s\n";
    return 0;
  }
  return Usage(err, "unknown subcommand " + cmd);
}

int RunCheckpointCommand(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return RunCheckpointCommand(args, std::cout, std::cerr);
}

}  // namespace orrery::checkpoint
