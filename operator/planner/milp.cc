// CBC adapter: loads the model into Clp, hands CBC's standalone driver (its
// default cuts, preprocessing and heuristics) the time and node limits, one
// thread and fixed seeds, and passes a warm start as a named MIP start.
#include "operator/planner/milp.h"

#include <cmath>
#include <exception>
#include <string>
#include <utility>

#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/ClpSolve.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

namespace orrery::planner {

int MilpModel::AddColumn(double objective, double lower, double upper, bool integer) {
  objective_.push_back(objective);
  col_lower_.push_back(lower);
  col_upper_.push_back(upper);
  integer_.push_back(integer ? 1 : 0);
  return static_cast<int>(objective_.size()) - 1;
}

void MilpModel::AddRow(const std::vector<int>& columns, const std::vector<double>& values,
                       double lower, double upper) {
  int row = rows();
  for (size_t i = 0; i < columns.size(); ++i) {
    row_index_.push_back(row);
    col_index_.push_back(columns[i]);
    elements_.push_back(values[i]);
  }
  row_lower_.push_back(lower);
  row_upper_.push_back(upper);
}

StatusOr<MilpResult> MilpSolver::Solve(const MilpModel& model, const MilpOptions& options) {
  try {
    OsiClpSolverInterface solver;
    CoinPackedMatrix matrix(false, model.row_index_.data(), model.col_index_.data(),
                            model.elements_.data(),
                            static_cast<CoinBigIndex>(model.elements_.size()));
    matrix.setDimensions(model.rows(), model.columns());
    solver.loadProblem(matrix, model.col_lower_.data(), model.col_upper_.data(),
                       model.objective_.data(), model.row_lower_.data(), model.row_upper_.data());
    for (int c = 0; c < model.columns(); ++c) {
      if (model.integer_[static_cast<size_t>(c)]) solver.setInteger(c);
    }
    solver.messageHandler()->setLogLevel(0);
    solver.setHintParam(OsiDoReducePrint, true, OsiHintTry);
    // The root LP by dual simplex: Clp's automatic choice takes its Idiot
    // crash on large models, whose crossover presolve segfaults on some
    // packing models (2000 columns, a few dense rows: Clp 1.17).
    ClpSolve root;
    root.setSolveType(ClpSolve::useDual);
    solver.setSolveOptions(root);

    bool warm = options.warm_start.size() == static_cast<size_t>(model.columns());
    // Column names built by append, not "x" + std::to_string(c): GCC 12 at -O3
    // reports a false -Wrestrict on the latter (GCC bug 105329).
    auto column_name = [](size_t c) {
      std::string name = "x";
      name.append(std::to_string(c));
      return name;
    };
    if (warm) {
      for (int c = 0; c < model.columns(); ++c)
        solver.setColName(c, column_name(static_cast<size_t>(c)));
    }
    CbcModel cbc(solver);
    cbc.setLogLevel(0);
    cbc.messageHandler()->setLogLevel(0);
    if (warm) {
      std::vector<std::pair<std::string, double>> start;
      start.reserve(options.warm_start.size());
      for (size_t c = 0; c < options.warm_start.size(); ++c)
        start.emplace_back(column_name(c), options.warm_start[c]);
      cbc.setMIPStart(start);
    }
    CbcMain0(cbc);
    cbc.setLogLevel(0);
    std::string seconds = std::to_string(std::max(0.05, options.time_limit_s));
    std::string seed = std::to_string(options.seed);
    std::vector<std::string> args = {
        "orrery", "-log",           "0",       "-slog",       "0",    "-threads",
        "0",      "-timeMode",      "elapsed", "-preprocess", "off",  "-randomSeed",
        seed,     "-randomCbcSeed", seed,      "-sec",        seconds};
    if (options.max_nodes >= 0) {
      args.push_back("-maxNodes");
      args.push_back(std::to_string(options.max_nodes));
    }
    args.push_back("-solve");
    args.push_back("-quit");
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    CbcMain1(static_cast<int>(argv.size()), argv.data(), cbc);

    MilpResult result;
    result.infeasible = cbc.isProvenInfeasible();
    result.optimal = cbc.isProvenOptimal();
    result.stopped_on_limit = cbc.isSecondsLimitReached() || cbc.isNodeLimitReached();
    const double* best = cbc.bestSolution();
    if (best != nullptr && cbc.getSolutionCount() > 0) {
      result.has_solution = true;
      result.x.assign(best, best + model.columns());
      result.objective = cbc.getObjValue();
    }
    result.bound = cbc.getBestPossibleObjValue();
    if (result.optimal && result.has_solution)
      result.bound = std::max(result.bound, result.objective);
    if (!std::isfinite(result.bound)) result.bound = -1e300;
    return result;
  } catch (const CoinError& e) {
    return InternalError("cbc: " + e.message());
  } catch (const std::exception& e) {
    return InternalError(std::string("cbc: ") + e.what());
  }
}

}  // namespace orrery::planner
