// A standalone entry for the simulate command until the orrery CLI wires it in.
#include <iostream>

#include "operator/sim/simulate_command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return orrery::sim::SimulateCommand(args, std::cout, std::cerr);
}
