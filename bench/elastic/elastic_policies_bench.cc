// Elastic scaling against its baselines on online arrivals (issue #10): for a
// sweep of Poisson arrival rates, jobs completed within the horizon and mean job
// completion time (JCT, every job run to completion) under `elastic` (GPUs and
// batch size chosen together by the allocator), `gpu-only` (GPUs scaled, batch
// fixed: the paper's baseline) and `static` (requested GPUs, FIFO), all from one
// run, with an SVG of both against load. Then the shipped trace shaped after the
// paper's evaluation, with the ratios elastic/gpu-only beside the paper's.
//
//   build/<dir>/bench/bench_elastic_policies [--trace FILE.yaml] [--csv JOBS.csv]
//       [--svg OUT.svg (default: next to the binary; "" for none)] [--rates r1,r2,...]
//       [--hysteresis H] [--horizon S] [--value remaining|total]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "operator/sim/elastic_sim.h"
#include "operator/sim/elastic_trace.h"

namespace {

using orrery::sim::ElasticPolicy;
using orrery::sim::ElasticResult;
using orrery::sim::ElasticTrace;

constexpr ElasticPolicy kPolicies[] = {ElasticPolicy::kElastic, ElasticPolicy::kGpuOnly,
                                       ElasticPolicy::kStatic};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

struct Point {
  double rate = 0;
  ElasticResult r[3];
};

// Two panels (jobs completed, mean JCT in hours) against arrival rate, one line
// per policy.
std::string Svg(const std::vector<Point>& points, const std::string& title) {
  const char* colours[] = {"#1b7837", "#2166ac", "#b2182b"};
  const int w = 920, h = 380, pw = 380, ph = 270, top = 60, left[2] = {70, 530};
  double max_rate = 0, max_done = 0, max_jct = 0;
  for (const Point& p : points) {
    max_rate = std::max(max_rate, p.rate);
    for (const ElasticResult& r : p.r) {
      max_done = std::max(max_done, static_cast<double>(r.completed_in_horizon));
      max_jct = std::max(max_jct, r.mean_jct / 3600);
    }
  }
  max_done = std::max(1.0, max_done * 1.1);
  max_jct = std::max(0.1, max_jct * 1.1);
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n<text x='"
    << w / 2 << "' y='22' text-anchor='middle' font-size='15'>" << title << "</text>\n";
  const char* ylabel[2] = {"jobs completed within horizon", "mean JCT (hours)"};
  for (int panel = 0; panel < 2; ++panel) {
    const int x0 = left[panel], y0 = top + ph;
    const double ymax = panel == 0 ? max_done : max_jct;
    s << "<rect x='" << x0 << "' y='" << top << "' width='" << pw << "' height='" << ph
      << "' fill='none' stroke='#444'/>\n";
    for (int t = 0; t <= 4; ++t) {
      const double v = ymax * t / 4;
      const int y = y0 - ph * t / 4;
      char label[32];
      std::snprintf(label, sizeof(label), panel == 0 ? "%.0f" : "%.1f", v);
      s << "<line x1='" << x0 << "' x2='" << x0 + pw << "' y1='" << y << "' y2='" << y
        << "' stroke='#ddd'/><text x='" << x0 - 6 << "' y='" << y + 4 << "' text-anchor='end'>"
        << label << "</text>\n";
    }
    for (const Point& p : points) {
      const double x = x0 + pw * p.rate / max_rate;
      s << "<text x='" << x << "' y='" << y0 + 16 << "' text-anchor='middle'>" << p.rate
        << "</text>\n";
    }
    s << "<text x='" << x0 + pw / 2 << "' y='" << y0 + 34
      << "' text-anchor='middle'>arrival rate (jobs/hour)</text>\n<text x='" << x0 - 48 << "' y='"
      << top + ph / 2 << "' text-anchor='middle' transform='rotate(-90 " << x0 - 48 << " "
      << top + ph / 2 << ")'>" << ylabel[panel] << "</text>\n";
    for (int k = 0; k < 3; ++k) {
      s << "<polyline fill='none' stroke-width='2' stroke='" << colours[k] << "' points='";
      for (const Point& p : points) {
        const double v = panel == 0 ? p.r[k].completed_in_horizon : p.r[k].mean_jct / 3600;
        s << x0 + pw * p.rate / max_rate << "," << y0 - ph * v / ymax << " ";
      }
      s << "'/>\n";
    }
  }
  for (int k = 0; k < 3; ++k)
    s << "<rect x='" << 80 + 130 * k << "' y='34' width='14' height='4' fill='" << colours[k]
      << "'/><text x='" << 98 + 130 * k << "' y='40'>"
      << orrery::sim::ElasticPolicyName(kPolicies[k]) << "</text>\n";
  s << "</svg>\n";
  return s.str();
}

bool TargetMet(const ElasticResult r[3]) {
  return r[0].completed_in_horizon >= r[1].completed_in_horizon &&
         r[0].completed_in_horizon >= r[2].completed_in_horizon && r[0].mean_jct < r[1].mean_jct &&
         r[0].mean_jct < r[2].mean_jct;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_path =
      std::string(ORRERY_SOURCE_DIR) + "/bench/workloads/elastic/saxena-mascots20.yaml";
  // The plot goes next to the binary unless told otherwise (not into the
  // source tree when run from the repository root).
  std::string csv_path, svg_path = std::string(argv[0]);
  svg_path = svg_path.substr(0, svg_path.find_last_of('/') + 1) + "elastic_vs_load.svg";
  std::vector<double> rates = {2, 4, 8, 12, 16, 24, 32};
  double hysteresis = -1, horizon = -1;
  std::string value;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (!std::strcmp(argv[i], "--trace") && (v = next())) {
      trace_path = v;
    } else if (!std::strcmp(argv[i], "--csv") && (v = next())) {
      csv_path = v;
    } else if (!std::strcmp(argv[i], "--svg") && (v = next())) {
      svg_path = v;
    } else if (!std::strcmp(argv[i], "--hysteresis") && (v = next())) {
      hysteresis = std::stod(v);
    } else if (!std::strcmp(argv[i], "--horizon") && (v = next())) {
      horizon = std::stod(v);
    } else if (!std::strcmp(argv[i], "--value") && (v = next())) {
      value = v;
    } else if (!std::strcmp(argv[i], "--rates") && (v = next())) {
      rates.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) rates.push_back(std::stod(item));
    } else {
      std::fprintf(stderr,
                   "usage: bench_elastic_policies [--trace FILE.yaml] [--csv JOBS.csv] "
                   "[--svg OUT.svg] [--rates r1,r2,...] [--hysteresis H] [--horizon S] [--value "
                   "remaining|total]\n");
      return 2;
    }
  }
  std::string text;
  if (!ReadFile(trace_path, &text)) {
    std::fprintf(stderr, "cannot read %s\n", trace_path.c_str());
    return 1;
  }
  auto parsed = orrery::sim::ParseElasticTrace(text);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n", trace_path.c_str(), parsed.status().message().c_str());
    return 1;
  }
  ElasticTrace trace = *parsed;
  if (!csv_path.empty()) {
    std::string csv;
    if (!ReadFile(csv_path, &csv)) {
      std::fprintf(stderr, "cannot read %s\n", csv_path.c_str());
      return 1;
    }
    if (auto s = orrery::sim::AppendJobsCsv(csv, &trace); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", csv_path.c_str(), s.message().c_str());
      return 1;
    }
  }
  orrery::sim::ElasticSimOptions options;
  if (hysteresis >= 0) options.autoscaler.hysteresis = hysteresis;
  if (horizon > 0) options.autoscaler.horizon_s = horizon;
  if (value == "remaining")
    options.autoscaler.value = orrery::planner::elastic::Value::kRemainingFraction;
  if (value == "total")
    options.autoscaler.value = orrery::planner::elastic::Value::kNormalizedThroughput;
  int met = 0, runs = 0;

  // 1. The load sweep: the trace's cluster, kinds and job mix, Poisson arrivals
  // at each rate (same seed), every policy on the same jobs.
  orrery::sim::PoissonArrivals arrivals;
  if (trace.arrivals) arrivals = *trace.arrivals;
  std::vector<Point> points;
  std::printf("Load sweep on %s: %d GPUs, %.1f h horizon, rescale cost %.0f s\n",
              trace.name.c_str(), trace.cluster.gpus(), trace.horizon_s / 3600,
              trace.rescale_cost_s);
  std::printf("%8s %6s | %-17s | %-17s | %-17s | %8s %8s %s\n", "jobs/h", "jobs",
              "elastic done/JCT", "gpu-only done/JCT", "static done/JCT", "done e/g", "JCT g/e",
              "target");
  for (double rate : rates) {
    ElasticTrace t = trace;
    arrivals.rate_per_hour = rate;
    auto jobs = orrery::sim::DrawPoisson(t.kinds, arrivals, t.horizon_s);
    if (!jobs.ok()) {
      std::fprintf(stderr, "arrivals: %s\n", jobs.status().message().c_str());
      return 1;
    }
    t.jobs = *jobs;
    Point p;
    p.rate = rate;
    for (int k = 0; k < 3; ++k) {
      auto r = orrery::sim::SimulateElastic(t, kPolicies[k], options);
      if (!r.ok()) {
        std::fprintf(stderr, "rate %.1f %s: %s\n", rate,
                     orrery::sim::ElasticPolicyName(kPolicies[k]), r.status().message().c_str());
        return 1;
      }
      p.r[k] = *r;
    }
    const bool ok = TargetMet(p.r);
    met += ok ? 1 : 0;
    ++runs;
    std::printf(
        "%8.1f %6d | %5d %9.2f h | %5d %9.2f h | %5d %9.2f h | %8.2f %8.2f %s\n", rate, p.r[0].jobs,
        p.r[0].completed_in_horizon, p.r[0].mean_jct / 3600, p.r[1].completed_in_horizon,
        p.r[1].mean_jct / 3600, p.r[2].completed_in_horizon, p.r[2].mean_jct / 3600,
        static_cast<double>(p.r[0].completed_in_horizon) / std::max(1, p.r[1].completed_in_horizon),
        p.r[1].mean_jct / p.r[0].mean_jct, ok ? "met" : "MISSED");
    points.push_back(p);
  }
  if (!svg_path.empty()) {
    std::ofstream(svg_path) << Svg(points, "Elastic vs gpu-only vs static on " + trace.name);
    std::printf("wrote %s\n", svg_path.c_str());
  }

  // 2. The shipped trace itself, as listed and drawn.
  std::vector<ElasticResult> results;
  for (ElasticPolicy policy : kPolicies) {
    auto r = orrery::sim::SimulateElastic(trace, policy, options);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", orrery::sim::ElasticPolicyName(policy),
                   r.status().message().c_str());
      return 1;
    }
    results.push_back(*r);
  }
  std::printf("\nTrace %s (%d jobs):\n%s", trace.name.c_str(), results[0].jobs,
              orrery::sim::ElasticTable(results).c_str());
  const double done_ratio = static_cast<double>(results[0].completed_in_horizon) /
                            std::max(1, results[1].completed_in_horizon);
  const double jct_ratio = results[1].mean_jct / results[0].mean_jct;
  const double jct_in_ratio = results[1].mean_jct_in_horizon / results[0].mean_jct_in_horizon;
  std::printf(
      "elastic / gpu-only: jobs completed %.2fx (paper: up to ~2x), mean JCT %.2fx "
      "faster (paper: up to ~10x; %.2fx over jobs done within the horizon)\n",
      done_ratio, jct_ratio, jct_in_ratio);
  double best_done = 0, best_jct = 0;
  for (const Point& p : points) {
    best_done = std::max(best_done, static_cast<double>(p.r[0].completed_in_horizon) /
                                        std::max(1, p.r[1].completed_in_horizon));
    best_jct = std::max(best_jct, p.r[1].mean_jct / p.r[0].mean_jct);
  }
  std::printf("best over the sweep: jobs completed %.2fx, mean JCT %.2fx\n", best_done, best_jct);
  std::printf(
      "Why smaller than the paper's: (1) our gpu-only baseline is the same autoscaler (same DP,\n"
      "  same objective, same rescale-cost test), only with the batch pinned, so it already\n"
      "  shrinks jobs to few GPUs under load and grows them when idle; the paper's baseline\n"
      "  is weaker as far as we can tell. (2) In this throughput model the largest batch beats\n"
      "  the base batch by 1.1-1.9x on 4 GPUs, 1.3-3x on 8 (one node) and 3-14x across nodes;\n"
      "  under load both policies give most jobs a few GPUs, where the two differ least.\n"
      "  (3) Mean JCT here is over every job run to completion; a ~10x ratio\n"
      "  needs a load where the baseline's queue grows without bound while elastic's does\n"
      "  not, and it shrinks again past that load, when both queues grow. (4) Our cluster,\n"
      "  models, batch ranges and rates are assumptions (see the trace's header).\n");
  const bool ok = TargetMet(results.data());
  met += ok ? 1 : 0;
  ++runs;
  std::printf(
      "target (elastic completes >= both baselines, lower mean JCT): %s; met on %d of "
      "%d runs\n",
      ok ? "met" : "MISSED", met, runs);
  return 0;
}
