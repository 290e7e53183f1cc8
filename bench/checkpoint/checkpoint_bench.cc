// Re-shard benchmark (issue #7): a multi-GB synthetic training state (weights and
// two Adam moments per weight of a GPT-like stack) is checkpointed under one layout
// (default dp=1,tp=4,pp=2) and loaded by every rank of another (default
// dp=2,tp=2,pp=1). Prints, from one run:
//   - bytes read / bytes the new layout needs (target 1.00),
//   - re-shard throughput / a plain sequential read of the same bytes (target >= 0.8),
//   - time against a naive load-everything-then-slice per rank,
//   - time against torch.distributed.checkpoint loading the same state into the
//     same new layout (with --dcp; see dcp_compare.py and setup_venv.sh).
// Cold-cache figures drop the page cache before each measurement (needs root);
// when that is not possible, all figures are warm and the output says so.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include "worker/checkpoint/io.h"
#include "worker/checkpoint/overlap.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/reshard.h"
#include "worker/checkpoint/writer.h"

namespace ck = orrery::checkpoint;

namespace {

struct Args {
  std::string dir;
  double gib = 2.4;
  std::string from = "dp=1,tp=4,pp=2";
  std::string to = "dp=2,tp=2,pp=1";
  int threads = 4;
  bool smoke = false;
  bool reuse = false;
  bool dcp = false;
  bool warm_only = false;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

// The value of element `g` (global flat index) of tensor `id`: cheap to generate
// and to check, different across tensors.
inline float Value(int id, int64_t g) {
  return static_cast<float>(g % 65521) + 0.25f * static_cast<float>(id % 8);
}

struct Model {
  int num_layers = 0;
  std::vector<ck::TensorSpec> specs;
};

Model MakeModel(double gib, bool smoke) {
  Model m;
  m.num_layers = smoke ? 4 : 16;
  // 12 h^2 weights per layer, 3 copies (param + exp_avg + exp_avg_sq), fp32.
  int64_t h =
      smoke ? 64 : static_cast<int64_t>(std::sqrt(gib * (1ull << 30) / (m.num_layers * 144.0)));
  h = std::max<int64_t>(64, h / 64 * 64);
  struct W {
    const char* name;
    int64_t rows, cols;
    int tp_dim;
  };
  const W weights[] = {{"attn.qkv.weight", 3 * h, h, 0},
                       {"attn.proj.weight", h, h, 1},
                       {"mlp.fc1.weight", 4 * h, h, 0},
                       {"mlp.fc2.weight", h, 4 * h, 1}};
  for (int l = 0; l < m.num_layers; ++l) {
    for (const W& w : weights) {
      for (const char* kind : {"model/", "optim/exp_avg/", "optim/exp_avg_sq/"}) {
        ck::TensorSpec s;
        s.name = std::string(kind) + "layers." + std::to_string(l) + "." + w.name;
        s.shape = {w.rows, w.cols};
        s.dtype = ck::DType::kFloat32;
        s.layer = l;
        s.tp_dim = w.tp_dim;
        s.fsdp_sharded = true;
        m.specs.push_back(s);
      }
    }
    ck::TensorSpec ln;
    ln.name = "model/layers." + std::to_string(l) + ".ln.weight";
    ln.shape = {h};
    ln.layer = l;
    m.specs.push_back(ln);
  }
  return m;
}

// Fills a local piece (region) of tensor `id` with its values.
void Fill(int id, const ck::TensorSpec& spec, const ck::Region& r, float* out) {
  const ck::Region full = ck::FullRegion(spec.shape);
  for (const ck::CopyRun& run : ck::Overlap(r, full)) {
    for (int64_t k = 0; k < run.count; ++k) out[run.dst + k] = Value(id, run.src + k);
  }
}

// Spot-checks a loaded piece against the generator.
bool Check(int id, const ck::TensorSpec& spec, const ck::Region& r, const float* got) {
  const ck::Region full = ck::FullRegion(spec.shape);
  int64_t seen = 0;
  for (const ck::CopyRun& run : ck::Overlap(r, full)) {
    for (int64_t k = 0; k < run.count; k += 997) {
      if (got[run.dst + k] != Value(id, run.src + k)) return false;
    }
    if (got[run.dst + run.count - 1] != Value(id, run.src + run.count - 1)) return false;
    seen += run.count;
  }
  return seen == r.Numel();
}

bool WriteSource(const std::string& dir, const Model& m, const ck::Layout& from) {
  const ck::StageFn stages = ck::BalancedStages(m.num_layers);
  std::vector<float> buf;
  for (int r = 0; r < from.World(); ++r) {
    auto w = ck::ShardWriter::Create(dir, from, r, stages);
    if (!w.ok()) {
      std::cerr << w.status() << "\n";
      return false;
    }
    for (size_t i = 0; i < m.specs.size(); ++i) {
      auto piece = ck::LocalPieceOf(m.specs[i], from, r, stages);
      if (!piece->present) continue;
      buf.assign(static_cast<size_t>(piece->buffer_elements), 0.f);
      Fill(static_cast<int>(i), m.specs[i], piece->region, buf.data());
      orrery::Status s = (*w)->Add(m.specs[i], buf.data(), buf.size() * 4);
      if (!s.ok()) {
        std::cerr << s << "\n";
        return false;
      }
    }
    if (!(*w)->Finish().ok()) return false;
  }
  ck::CheckpointInfo info;
  info.step = 1000;
  info.layout = from;
  info.num_layers = m.num_layers;
  orrery::Status s = ck::CommitCheckpoint(dir, info);
  if (!s.ok()) std::cerr << s << "\n";
  return s.ok();
}

struct RankPlan {
  std::vector<ck::RankBuffer> buffers;
  std::vector<ck::LocalPiece> pieces;
  std::vector<int> ids;
  uint64_t bytes = 0;
};

RankPlan PlanRank(const Model& m, const ck::Layout& to, int rank) {
  RankPlan p;
  const ck::StageFn stages = ck::BalancedStages(m.num_layers);
  for (size_t i = 0; i < m.specs.size(); ++i) {
    auto piece = ck::LocalPieceOf(m.specs[i], to, rank, stages);
    if (!piece->present) continue;
    p.pieces.push_back(*piece);
    p.ids.push_back(static_cast<int>(i));
    p.buffers.push_back({m.specs[i], nullptr, static_cast<uint64_t>(piece->buffer_elements) * 4});
    p.bytes += static_cast<uint64_t>(piece->region.Numel()) * 4;
  }
  return p;
}

struct Measure {
  double seconds = 0;
  ck::LoadStats stats;
  bool ok = true;
};

// Every rank of `to` loads its pieces with the overlap reader.
Measure ReshardLoad(const ck::CheckpointReader& reader, const Model& m, const ck::Layout& to,
                    int threads, bool verify, bool check) {
  Measure out;
  const ck::StageFn stages = ck::BalancedStages(m.num_layers);
  ck::LoadOptions opt;
  opt.threads = threads;
  opt.verify = verify;
  for (int r = 0; r < to.World(); ++r) {
    RankPlan p = PlanRank(m, to, r);
    std::vector<std::vector<float>> mem(p.buffers.size());
    for (size_t i = 0; i < p.buffers.size(); ++i) {
      mem[i].resize(p.buffers[i].bytes / 4);
      p.buffers[i].data = mem[i].data();
    }
    const double t0 = Now();
    orrery::Status s = ck::LoadRank(reader, p.buffers, to, r, stages, opt, &out.stats);
    out.seconds += Now() - t0;
    if (!s.ok()) {
      std::cerr << "load failed: " << s << "\n";
      out.ok = false;
      return out;
    }
    if (check) {
      for (size_t i = 0; i < p.buffers.size(); ++i) {
        if (!Check(p.ids[i], m.specs[static_cast<size_t>(p.ids[i])], p.pieces[i].region,
                   mem[i].data())) {
          std::cerr << "wrong data in " << m.specs[static_cast<size_t>(p.ids[i])].name << " rank "
                    << r << "\n";
          out.ok = false;
        }
      }
    }
  }
  return out;
}

// The file byte ranges each rank of `to` needs (what an ideal reader reads), per
// rank, sorted by file and offset.
using Ranges = std::vector<std::pair<int, std::pair<uint64_t, uint64_t>>>;
std::vector<Ranges> NeededRanges(const ck::CheckpointReader& reader, const Model& m,
                                 const ck::Layout& to) {
  std::vector<Ranges> out(static_cast<size_t>(to.World()));
  for (int r = 0; r < to.World(); ++r) {
    RankPlan p = PlanRank(m, to, r);
    for (size_t i = 0; i < p.pieces.size(); ++i) {
      const ck::TensorMeta* t = reader.metadata().Find(m.specs[static_cast<size_t>(p.ids[i])].name);
      for (const ck::ChunkMeta& c : t->chunks) {
        for (const ck::CopyRun& run : ck::Overlap(p.pieces[i].region, c.region)) {
          out[static_cast<size_t>(r)].push_back({c.file,
                                                 {c.offset + static_cast<uint64_t>(run.src) * 4,
                                                  static_cast<uint64_t>(run.count) * 4}});
        }
      }
    }
    std::sort(out[static_cast<size_t>(r)].begin(), out[static_cast<size_t>(r)].end());
  }
  return out;
}

// A plain read of the same byte ranges, rank by rank, into one pre-touched buffer
// of the rank's size (the bytes land in memory as a load's do, but contiguously,
// with no planning, scatter or checks), 8 MiB per pread, by `threads` threads.
Measure PlainRead(const ck::CheckpointReader& reader, const std::vector<Ranges>& ranks,
                  int threads) {
  Measure out;
  for (const Ranges& ranges : ranks) {
    uint64_t total = 0;
    std::vector<std::pair<int, std::pair<uint64_t, uint64_t>>>
        work;  // file, (offset, len); dst = running sum
    std::vector<uint64_t> dst;
    for (const auto& [f, r] : ranges) {
      for (uint64_t done = 0; done < r.second; done += 8u << 20) {
        const uint64_t n = std::min<uint64_t>(8u << 20, r.second - done);
        work.push_back({f, {r.first + done, n}});
        dst.push_back(total);
        total += n;
      }
    }
    std::vector<char> mem(total, 1);  // touched before timing, like the loader's buffers
    std::atomic<size_t> next{0};
    std::atomic<bool> ok{true};
    const double t0 = Now();
    auto body = [&] {
      std::map<int, ck::File> files;
      for (size_t i; (i = next.fetch_add(1)) < work.size();) {
        const int f = work[i].first;
        if (files.count(f) == 0)
          files.emplace(f, std::move(ck::File::OpenRead(reader.FilePath(f))).value());
        if (!files.at(f)
                 .ReadAt(work[i].second.first, mem.data() + dst[i], work[i].second.second)
                 .ok())
          ok = false;
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body);
    body();
    for (auto& th : pool) th.join();
    out.seconds += Now() - t0;
    out.stats.bytes_read += total;
    out.ok = out.ok && ok;
  }
  return out;
}

// Naive: every new rank reads the whole checkpoint into memory, then slices.
Measure NaiveLoad(const ck::CheckpointReader& reader, const Model& m, const ck::Layout& to) {
  Measure out;
  const ck::Metadata& md = reader.metadata();
  for (int r = 0; r < to.World(); ++r) {
    const double t0 = Now();
    std::vector<std::vector<char>> files(md.files.size());
    for (size_t f = 0; f < md.files.size(); ++f) {
      files[f].resize(md.files[f].size);
      auto file = ck::File::OpenRead(reader.FilePath(static_cast<int>(f)));
      if (!file.ok() || !file->ReadAt(0, files[f].data(), files[f].size()).ok()) out.ok = false;
      out.stats.bytes_read += files[f].size();
    }
    RankPlan p = PlanRank(m, to, r);
    std::vector<std::vector<float>> mem(p.buffers.size());
    for (size_t i = 0; i < p.pieces.size(); ++i) {
      mem[i].assign(p.buffers[i].bytes / 4, 0.f);
      const ck::TensorMeta* t = md.Find(m.specs[static_cast<size_t>(p.ids[i])].name);
      for (const ck::ChunkMeta& c : t->chunks) {
        for (const ck::CopyRun& run : ck::Overlap(p.pieces[i].region, c.region)) {
          std::memcpy(mem[i].data() + run.dst,
                      files[static_cast<size_t>(c.file)].data() + c.offset + run.src * 4,
                      static_cast<size_t>(run.count) * 4);
        }
      }
    }
    out.seconds += Now() - t0;
  }
  return out;
}

double Gib(uint64_t b) { return static_cast<double>(b) / (1ull << 30); }

bool ParseArgs(int argc, char** argv, Args& a) {
  const char* tmp = std::getenv("TMPDIR");
  a.dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/orrery-ckpt-bench";
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--dir")
      a.dir = next();
    else if (k == "--gib")
      a.gib = std::atof(next().c_str());
    else if (k == "--from")
      a.from = next();
    else if (k == "--to")
      a.to = next();
    else if (k == "--threads")
      a.threads = std::atoi(next().c_str());
    else if (k == "--smoke")
      a.smoke = true;
    else if (k == "--reuse")
      a.reuse = true;
    else if (k == "--dcp")
      a.dcp = true;
    else if (k == "--warm")
      a.warm_only = true;
    else {
      std::cerr << "usage: checkpoint_bench [--dir D] [--gib G] [--from L] [--to L] [--threads N] "
                   "[--smoke] "
                   "[--reuse] [--warm] [--dcp]\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, a)) return 2;
  if (a.smoke) a.dir += "-smoke-" + std::to_string(::getpid());
  auto from = ck::Layout::Parse(a.from);
  auto to = ck::Layout::Parse(a.to);
  if (!from.ok() || !to.ok()) {
    std::cerr << "bad layout\n";
    return 2;
  }
  const Model m = MakeModel(a.gib, a.smoke);
  const std::string src = a.dir + "/source";
  if (!(a.reuse && ck::PathExists(src + "/metadata.json"))) {
    if (!ck::RemoveTree(a.dir).ok()) return 1;
    const double t0 = Now();
    if (!WriteSource(src, m, *from)) return 1;
    std::printf("wrote source checkpoint %s under %s in %.1f s\n", src.c_str(),
                from->ToString().c_str(), Now() - t0);
  }
  auto reader = ck::CheckpointReader::Open(src);
  if (!reader.ok()) {
    std::cerr << reader.status() << "\n";
    return 1;
  }
  const uint64_t state = reader->metadata().TotalTensorBytes();
  uint64_t needed = 0;
  for (int r = 0; r < to->World(); ++r) needed += PlanRank(m, *to, r).bytes;
  const bool cold = !a.warm_only && DropCaches();
  const char* cache = cold ? "cold" : "warm";
  std::printf(
      "state %.2f GiB in %zu tensors, %zu shard files; re-shard %s -> %s (%d ranks need %.2f GiB), "
      "%d read threads\n",
      Gib(state), m.specs.size(), reader->metadata().files.size(), from->ToString().c_str(),
      to->ToString().c_str(), to->World(), Gib(needed), a.threads);
  std::printf("page cache: %s\n", cold ? "dropped before each measurement (cold)"
                                       : "could not be dropped (or --warm): every figure is warm");
  auto prepare = [&] {
    if (cold) DropCaches();
  };

  // Warm figures are the best of two runs (the first may still be filling the
  // cache); cold ones are single runs after a drop.
  const int runs = cold ? 1 : 2;
  auto best = [&](auto fn) {
    Measure first = fn();
    for (int i = 1; i < runs; ++i) {
      Measure again = fn();
      if (again.seconds < first.seconds) first = again;
    }
    return first;
  };
  const auto ranges = NeededRanges(*reader, m, *to);
  const Measure verified = best([&] {
    prepare();
    return ReshardLoad(*reader, m, *to, a.threads, /*verify=*/true, /*check=*/true);
  });
  const Measure exact = best([&] {
    prepare();
    return ReshardLoad(*reader, m, *to, a.threads, /*verify=*/false, /*check=*/true);
  });
  const Measure seq = best([&] {
    prepare();
    return PlainRead(*reader, ranges, 1);
  });
  const Measure par = best([&] {
    prepare();
    return PlainRead(*reader, ranges, a.threads);
  });
  prepare();
  const Measure naive = NaiveLoad(*reader, m, *to);
  if (!exact.ok || !verified.ok || !seq.ok || !par.ok || !naive.ok) {
    std::fprintf(stderr, "a measurement failed\n");
    return 1;
  }
  auto rate = [](uint64_t b, double s) { return Gib(b) / s; };
  std::printf("\n%-44s %10s %10s %9s %9s\n", ("method (" + std::string(cache) + ")").c_str(),
              "read GiB", "seconds", "GiB/s", "read/need");
  auto row = [&](const char* name, const Measure& x, uint64_t read) {
    std::printf("%-44s %10.2f %10.2f %9.2f %9.3f\n", name, Gib(read), x.seconds,
                rate(needed, x.seconds), static_cast<double>(read) / static_cast<double>(needed));
  };
  row("orrery overlap reader, checksums verified", verified, verified.stats.bytes_read);
  row("orrery overlap reader, no verification", exact, exact.stats.bytes_read);
  row("plain sequential read, same bytes", seq, seq.stats.bytes_read);
  row(("plain read, same bytes, " + std::to_string(a.threads) + " threads").c_str(), par,
      par.stats.bytes_read);
  row("naive: each rank loads all, then slices", naive, naive.stats.bytes_read);

  std::printf("\nbytes read / bytes needed: %.4f (verified), %.4f (unverified)   [target 1.00]\n",
              static_cast<double>(verified.stats.bytes_read) / static_cast<double>(needed),
              static_cast<double>(exact.stats.bytes_read) / static_cast<double>(needed));
  std::printf(
      "re-shard throughput / sequential read: %.2f (verified), %.2f (unverified)   [target >= "
      "0.8]\n",
      seq.seconds / verified.seconds, seq.seconds / exact.seconds);
  std::printf(
      "re-shard throughput / parallel read (%d threads) of the same bytes: %.2f (verified)\n",
      a.threads, par.seconds / verified.seconds);
  std::printf("naive load-all-then-slice time / re-shard time: %.2fx\n",
              naive.seconds / verified.seconds);

  if (a.dcp) {
    const char* home = std::getenv("HOME");
    const char* venv_env = std::getenv("ORRERY_BENCH_VENV");
    const std::string venv = venv_env != nullptr
                                 ? venv_env
                                 : std::string(home ? home : "") + "/.cache/orrery/bench-venv";
    const std::string py = venv + "/bin/python";
    if (!ck::PathExists(py)) {
      std::printf(
          "torch.distributed.checkpoint: skipped (no %s; run bench/checkpoint/setup_venv.sh)\n",
          py.c_str());
      return 0;
    }
    // The script prints "dcp_load_seconds <s>"; it builds the same state, saves it
    // with DCP under the old layout and loads it into the new one.
    std::string cmd = py + " " + std::string(ORRERY_SOURCE_DIR) +
                      "/bench/checkpoint/dcp_compare.py --dir " + a.dir + "/dcp --layers " +
                      std::to_string(m.num_layers) + " --hidden " +
                      std::to_string(m.specs[1].shape[1]) + " --from " + a.from + " --to " + a.to +
                      (cold ? " --drop-caches" : "");
    std::printf("\nrunning: %s\n", cmd.c_str());
    std::fflush(stdout);
    FILE* p = ::popen(cmd.c_str(), "r");
    double dcp = -1;
    char line[512];
    while (p != nullptr && std::fgets(line, sizeof(line), p) != nullptr) {
      std::fputs(line, stdout);
      std::sscanf(line, "dcp_load_seconds %lf", &dcp);
    }
    if (p != nullptr) ::pclose(p);
    if (dcp > 0) {
      std::printf(
          "torch.distributed.checkpoint load time / orrery re-shard time: %.2fx (%.2f s vs %.2f s, "
          "%s)\n",
          dcp / verified.seconds, dcp, verified.seconds, cache);
    } else {
      std::printf("torch.distributed.checkpoint: no result (see output above)\n");
    }
  }
  if (a.smoke) (void)ck::RemoveTree(a.dir);
  return 0;
}
