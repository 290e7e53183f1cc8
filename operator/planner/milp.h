// A small MILP builder and its CBC adapter. Planners describe columns and rows
// here; only milp.cc sees CBC's headers. Solves are single-threaded with fixed
// seeds and CBC's logging off, so a solve that finishes is reproducible.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace orrery::planner {

class MilpModel {
 public:
  int AddColumn(double objective, double lower, double upper, bool integer);
  // lower <= sum(values[i] * x[columns[i]]) <= upper
  void AddRow(const std::vector<int>& columns, const std::vector<double>& values, double lower,
              double upper);

  int columns() const { return static_cast<int>(objective_.size()); }
  int rows() const { return static_cast<int>(row_lower_.size()); }
  int64_t nonzeros() const { return static_cast<int64_t>(elements_.size()); }

 private:
  friend class MilpSolver;
  std::vector<double> objective_, col_lower_, col_upper_;
  std::vector<char> integer_;
  std::vector<double> row_lower_, row_upper_;
  std::vector<int> row_index_, col_index_;
  std::vector<double> elements_;
};

struct MilpOptions {
  double time_limit_s = 10;
  int seed = 1;
  int64_t max_nodes = -1;          // branch-and-bound node limit; -1: none
  std::vector<double> warm_start;  // a full column vector, or empty
};

struct MilpResult {
  bool has_solution = false;
  std::vector<double> x;
  double objective = 0;
  double bound = 0;  // best proven bound (minimisation)
  bool optimal = false;
  bool infeasible = false;
  bool stopped_on_limit = false;
};

class MilpSolver {
 public:
  // Minimises the model's objective with CBC. Internal on a CBC failure.
  static StatusOr<MilpResult> Solve(const MilpModel& model, const MilpOptions& options);
};

}  // namespace orrery::planner
