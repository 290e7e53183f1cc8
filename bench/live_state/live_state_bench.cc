// Live sharded state benchmark (issue #18): a GPT trained one AdamW step under
// fsdp x4 is saved with the worker's live path (every rank writes the segments
// of parameters and optimizer moments it owns, rank 0 commits) and relaunched
// into hybrid tp2 x pp2, where every rank reads exactly its regions
// (LoadLocalState with LoadOptions::exact, checksums verified from pieces
// across ranks). In the same run, on the same state, it measures:
//   - a plain parallel read: 4 threads pread()ing the same byte counts from the
//     same shard files, no parsing (the re-shard's ceiling);
//   - the old path: every rank gathers the whole model and optimizer state,
//     rank 0 writes one 1x1x1 shard; on resume every rank reads the whole
//     checkpoint and slices it (Strategy::LoadFullState);
//   - with --dcp, torch.distributed.checkpoint saving the same shapes FSDP-style
//     (Shard(0) over 4 ranks) and loading them into tp2 x pp2 (dcp_live.py, in
//     the venv bench/checkpoint/setup_venv.sh makes).
// Ranks are threads of this process, each with its own gloo rendezvous (as
// tests/worker/dist/run_ranks.h), one intra-op thread each. Resident memory is
// therefore the process's: the table reports its peak and its growth during
// an operation (all 4 ranks together). Loads start from a cold page cache where
// posix_fadvise(DONTNEED) can evict the files (checked with mincore); the
// output says which. Exits non-zero if a load reads more than it needs or the
// live and old loads disagree on any byte of the restored state.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include "common/status.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/store.h"
#include "worker/checkpoint/torch_adapter.h"
#include "worker/checkpoint/writer.h"
#include "worker/dist/communicator.h"
#include "worker/model/model.h"
#include "worker/parallel/strategy.h"
#include "worker/train/live_state.h"
#include "worker/train/state_io.h"

namespace {

using namespace orrery;  // NOLINT(google-build-using-namespace): a benchmark's main file
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 4;
constexpr int64_t kGlobalBatch = 4;
const checkpoint::Layout kWholeLayout{1, 1, 1, 1};
const checkpoint::Layout kFsdpLayout{kWorld, 1, 1, kWorld};
const dist::Layout kTargetLayout{1, 2, 2};  // dp, tp, pp

struct Args {
  double params_millions = 100;
  bool smoke = false;
  bool dcp = false;
  bool keep = false;
  std::string dir;
  std::string python;  // empty: the venv's
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

// What every rank did in one collective operation, plus the process's memory
// around it (ranks are threads: resident memory is shared).
struct Op {
  std::vector<train::StateIoStats> ranks = std::vector<train::StateIoStats>(kWorld);
  // Live paths: each rank's seconds inside WriteLocalState / LoadLocalState
  // (the rest is fsync and commit, or opening, piece checks and agreement).
  std::vector<double> inner = std::vector<double>(kWorld);
  uint64_t rss_before = 0;
  uint64_t rss_peak = 0;
  std::string cache;  // loads: "cold" or "warm (...)"

  double Wall() const {
    double w = 0;
    for (const auto& r : ranks) w = std::max(w, r.seconds);
    return w;
  }
  double MaxInner() const { return *std::max_element(inner.begin(), inner.end()); }
  uint64_t Bytes() const {
    uint64_t b = 0;
    for (const auto& r : ranks) b += r.bytes;
    return b;
  }
  uint64_t Needed() const {
    uint64_t b = 0;
    for (const auto& r : ranks) b += r.bytes_needed;
    return b;
  }
};

// Asks the kernel to drop every file under `dir` from the page cache, then
// returns the fraction of their pages still resident (mincore), -1 if unknown.
double EvictFromPageCache(const std::string& dir) {
  ::sync();
  uint64_t pages = 0, resident = 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        const size_t n = (static_cast<size_t>(st.st_size) + page - 1) / static_cast<size_t>(page);
        std::vector<unsigned char> in_core(n);
        if (::mincore(map, static_cast<size_t>(st.st_size), in_core.data()) == 0) {
          pages += n;
          for (unsigned char c : in_core) resident += c & 1u;
        }
        ::munmap(map, static_cast<size_t>(st.st_size));
      }
    }
    ::close(fd);
  }
  return pages == 0 ? -1 : static_cast<double>(resident) / static_cast<double>(pages);
}

std::string CacheLabel(double resident) {
  if (resident < 0) return "warm? (residency unknown)";
  if (resident < 0.01) return "cold";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "warm (%.0f%% resident)", 100 * resident);
  return buf;
}

// Runs fn(rank, rendezvous) on kWorld threads, each rank with its own
// rendezvous over one file store (tests/worker/dist/run_ranks.h's RunRanks).
std::vector<Status> RunRanks(const std::string& store_dir,
                             const std::function<Status(int, dist::Rendezvous*)>& fn) {
  std::vector<Status> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      dist::RendezvousConfig c;
      c.rank = r;
      c.world_size = kWorld;
      c.store_path = store_dir + "/store";
      c.timeout = std::chrono::minutes(10);  // rank 0 writes GBs while others wait
      auto rdv = dist::Connect(c);
      results[static_cast<size_t>(r)] = rdv.ok() ? fn(r, rdv->get()) : rdv.status();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// One rank's view of a measured collective: barrier, reset the process's peak
// memory (rank 0), barrier, time `body`, agree that every rank succeeded.
class RankContext {
 public:
  RankContext(int rank, std::unique_ptr<dist::Communicator> world)
      : rank_(rank), world_(std::move(world)) {}
  int rank() const { return rank_; }
  dist::Communicator* world() { return world_.get(); }

  StatusOr<bool> AllOk(bool ok) {
    at::Tensor flag = at::full({1}, ok ? 1.0 : 0.0, at::kDouble);
    ORRERY_RETURN_IF_ERROR(world_->AllReduce(flag, dist::ReduceOp::kMin));
    return flag.item<double>() > 0;
  }

  // `before` runs on rank 0 between the barriers, untimed (cache eviction).
  Status Measure(Op& op, const std::function<Status(train::StateIoStats&)>& body,
                 const std::function<void()>& before = nullptr) {
    std::optional<train::PeakRssScope> rss;
    ORRERY_RETURN_IF_ERROR(world_->Barrier());
    if (rank_ == 0) {
      if (before) before();
      rss.emplace();
    }
    ORRERY_RETURN_IF_ERROR(world_->Barrier());
    train::StateIoStats& mine = op.ranks[static_cast<size_t>(rank_)];
    const auto t0 = Clock::now();
    Status s = body(mine);
    ORRERY_ASSIGN_OR_RETURN(bool all, AllOk(s.ok()));
    mine.seconds = Seconds(t0);
    ORRERY_RETURN_IF_ERROR(s);
    if (!all) return InternalError("another rank failed");
    ORRERY_RETURN_IF_ERROR(world_->Barrier());
    if (rank_ == 0) {
      op.rss_before = rss->before();
      op.rss_peak = rss->Peak();
    }
    return OkStatus();
  }

 private:
  int rank_;
  std::unique_ptr<dist::Communicator> world_;
};

StatusOr<RankContext> MakeContext(int rank, dist::Rendezvous* rdv) {
  std::vector<int> all;
  for (int r = 0; r < kWorld; ++r) all.push_back(r);
  ORRERY_ASSIGN_OR_RETURN(auto world, rdv->NewGroup("bench", all));
  return RankContext(rank, std::move(world));
}

// A GPT of about `millions` parameters, ~12 h^2 per block: the widest hidden
// size (up to 1024) that leaves at least 4 blocks, then enough blocks.
model::ModelConfig SizeModel(double millions) {
  model::ModelConfig mc;
  mc.kind = "gpt";
  const double target = millions * 1e6;
  int h = 64;
  for (int c : {128, 256, 512, 1024}) {
    if (12.0 * c * c * 4 <= target) h = c;
  }
  mc.gpt.hidden = h;
  mc.gpt.heads = std::max(2, h / 64);
  mc.gpt.layers = std::max(2, static_cast<int>(std::lround(target / (12.0 * h * h))));
  mc.gpt.seq = 32;
  mc.gpt.vocab = h >= 512 ? 1024 : 64;
  return mc;
}

parallel::OptimizerConfig AdamW() {
  parallel::OptimizerConfig o;
  o.kind = "adamw";
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  return o;
}

// Old path, save: every rank gathers the whole state; rank 0 writes it as one
// 1x1x1 shard with the trainer's former specs and commits.
Status OldGatherSave(RankContext& ctx, parallel::Strategy& strategy, const std::string& dir,
                     train::StateIoStats& io) {
  ORRERY_ASSIGN_OR_RETURN(model::NamedTensors params, strategy.GatherFullParameters());
  ORRERY_ASSIGN_OR_RETURN(model::NamedTensors optim, strategy.GatherFullOptimizerState());
  Status written;
  if (ctx.rank() == 0) {
    written = [&]() -> Status {
      ORRERY_ASSIGN_OR_RETURN(
          auto writer,
          checkpoint::ShardWriter::Create(dir, kWholeLayout, 0, checkpoint::BalancedStages(1)));
      auto spec = [](const std::string& qualified, const std::string& param, const at::Tensor& t) {
        checkpoint::TensorSpec s = train::CollectionSpec(qualified, param, t.sizes().vec(), "gpt");
        auto dtype = checkpoint::DTypeOf(t.scalar_type());
        s.dtype = dtype.ok() ? *dtype : checkpoint::DType::kFloat32;
        return s;
      };
      for (const auto& [name, t] : params)
        ORRERY_RETURN_IF_ERROR(checkpoint::AddTensor(*writer, spec("model/" + name, name, t), t));
      for (const auto& [name, t] : optim) {
        const size_t slash = name.find('/');
        const std::string param = slash == std::string::npos ? "" : name.substr(slash + 1);
        ORRERY_RETURN_IF_ERROR(checkpoint::AddTensor(*writer, spec("optim/" + name, param, t), t));
      }
      ORRERY_ASSIGN_OR_RETURN(std::string rng, checkpoint::CaptureCpuRngState());
      ORRERY_RETURN_IF_ERROR(writer->AddBlob("rng/cpu", rng));
      ORRERY_RETURN_IF_ERROR(writer->Finish());
      io.bytes = writer->bytes_written();
      checkpoint::CheckpointInfo info;
      info.step = 1;
      info.layout = kWholeLayout;
      return checkpoint::CommitCheckpoint(dir, info);
    }();
  }
  at::Tensor ok = at::full({1}, written.ok() ? 1.0 : 0.0, at::kDouble);
  ORRERY_RETURN_IF_ERROR(ctx.world()->Broadcast(ok, 0));
  ORRERY_RETURN_IF_ERROR(written);
  if (ok.item<double>() == 0) return InternalError("rank 0 failed to write the whole checkpoint");
  return OkStatus();
}

// Live path, save: the trainer's Save without its store (trainer.cc).
Status LiveSave(RankContext& ctx, parallel::Strategy& strategy, const std::string& dir,
                train::StateIoStats& io, double& inner) {
  Status written = [&]() -> Status {
    ORRERY_ASSIGN_OR_RETURN(auto writer,
                            checkpoint::ShardWriter::Create(dir, kFsdpLayout, ctx.rank(),
                                                            checkpoint::BalancedStages(1)));
    ORRERY_RETURN_IF_ERROR(train::WriteLocalState(*writer, strategy, "gpt", ctx.rank() == 0, &io));
    inner = io.seconds;
    ORRERY_ASSIGN_OR_RETURN(std::string rng, checkpoint::CaptureCpuRngState());
    ORRERY_RETURN_IF_ERROR(writer->AddBlob("rng/cpu", rng));
    return writer->Finish();
  }();
  ORRERY_ASSIGN_OR_RETURN(bool all, ctx.AllOk(written.ok()));
  ORRERY_RETURN_IF_ERROR(written);
  if (!all) return InternalError("another rank failed to write its shard");
  Status committed;
  if (ctx.rank() == 0) {
    checkpoint::CheckpointInfo info;
    info.step = 1;
    info.layout = kFsdpLayout;
    committed = checkpoint::CommitCheckpoint(dir, info);
  }
  at::Tensor ok = at::full({1}, committed.ok() ? 1.0 : 0.0, at::kDouble);
  ORRERY_RETURN_IF_ERROR(ctx.world()->Broadcast(ok, 0));
  ORRERY_RETURN_IF_ERROR(committed);
  if (ok.item<double>() == 0) return InternalError("rank 0 failed to commit");
  return OkStatus();
}

// Live path, load: the trainer's Resume for one checkpoint (trainer.cc).
Status LiveLoad(RankContext& ctx, parallel::Strategy& strategy, const std::string& dir,
                train::StateIoStats& io, double& inner) {
  ORRERY_ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::Open(dir));
  ORRERY_RETURN_IF_ERROR(checkpoint::VerifyCheckpoint(reader, checkpoint::VerifyLevel::kFiles));
  std::vector<checkpoint::BlockPiece> partial;
  checkpoint::LoadOptions options;
  options.exact = true;
  bool optimizer_restored = false;
  Status s = train::LoadLocalState(reader, strategy, options, &io, &partial, &optimizer_restored);
  inner = io.seconds;
  ORRERY_ASSIGN_OR_RETURN(bool all, ctx.AllOk(s.ok()));
  ORRERY_RETURN_IF_ERROR(s);
  if (!all) return InternalError("another rank failed to load");
  if (!optimizer_restored) return InternalError("the optimizer state was not restored");
  return train::VerifyPiecesTogether(reader, partial, ctx.world(), &io);
}

// Old path, load: every rank reads the whole 1x1x1 checkpoint and slices it.
Status OldLoad(parallel::Strategy& strategy, const std::string& dir, uint64_t own_bytes,
               train::StateIoStats& io) {
  ORRERY_ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::Open(dir));
  ORRERY_RETURN_IF_ERROR(checkpoint::VerifyCheckpoint(reader, checkpoint::VerifyLevel::kFiles));
  const auto& meta = reader.metadata();
  std::vector<at::Tensor> tensors;
  std::vector<checkpoint::TensorSlot> slots;
  std::vector<std::string> names;
  tensors.reserve(meta.tensors.size());
  for (const auto& [name, tm] : meta.tensors) {
    if (name.rfind("model/", 0) != 0 && name.rfind("optim/", 0) != 0) continue;
    tensors.emplace_back();
    names.push_back(name);
    slots.push_back({tm.spec, nullptr});
  }
  for (size_t i = 0; i < slots.size(); ++i) slots[i].tensor = &tensors[i];
  checkpoint::LoadStats stats;
  ORRERY_RETURN_IF_ERROR(checkpoint::LoadTensors(reader, slots, meta.info.layout, 0,
                                                 checkpoint::BalancedStages(meta.info.num_layers),
                                                 {}, &stats));
  model::NamedTensors full, optim;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].rfind("model/", 0) == 0) {
      full.emplace_back(names[i].substr(6), tensors[i]);
    } else {
      optim.emplace_back(names[i].substr(6), tensors[i]);
    }
  }
  ORRERY_RETURN_IF_ERROR(strategy.LoadFullState(full, optim));
  io.bytes = stats.bytes_read;
  io.bytes_needed = own_bytes;  // what the rank keeps: the live load's bytes_needed
  return OkStatus();
}

// A hash of every byte of the rank's parameters and optimizer slots.
StatusOr<uint64_t> HashState(parallel::Strategy& strategy) {
  ORRERY_ASSIGN_OR_RETURN(parallel::LocalState state, strategy.State());
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const at::Tensor& t) {
    at::Tensor c = t.detach().contiguous();
    std::string_view bytes(static_cast<const char*>(c.data_ptr()), c.nbytes());
    h = (h ^ std::hash<std::string_view>{}(bytes)) * 1099511628211ull;
  };
  for (const auto& p : state.params) mix(p);
  for (const auto& slot : state.slots)
    for (const auto& t : slot) mix(t);
  return h ^ static_cast<uint64_t>(state.optimizer_steps);
}

Status ZeroState(parallel::Strategy& strategy) {
  ORRERY_ASSIGN_OR_RETURN(parallel::LocalState state, strategy.State());
  torch::NoGradGuard no_grad;
  for (const auto& p : state.params) p.detach().zero_();
  for (const auto& slot : state.slots)
    for (const auto& t : slot) t.detach().zero_();
  return strategy.StateRestored(0);
}

// Baseline A: `counts[t]` bytes read by thread t with pread (16 MiB at a time,
// the loader's largest read) from the shard files taken as one concatenation,
// thread t starting where thread t-1's bytes end (wrapping), into a buffer
// touched before timing, as a load's destination tensors are.
struct PlainRead {
  double seconds = 0;
  uint64_t bytes = 0;
  bool ok = true;
};

PlainRead ParallelPread(const std::vector<std::string>& files,
                        const std::vector<uint64_t>& counts) {
  PlainRead out;
  std::vector<int> fds;
  std::vector<uint64_t> starts{0};
  for (const auto& f : files) {
    fds.push_back(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (fds.back() < 0 || ::fstat(fds.back(), &st) != 0) out.ok = false;
    starts.push_back(starts.back() + static_cast<uint64_t>(st.st_size));
  }
  const uint64_t total = starts.back();
  if (!out.ok || total == 0) {
    out.ok = false;
    return out;
  }
  std::vector<std::vector<char>> buffers;
  for (uint64_t n : counts) buffers.emplace_back(n, 1);
  std::latch go(1);
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  uint64_t begin = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    threads.emplace_back([&, t, begin] {
      go.wait();
      char* dst = buffers[t].data();
      uint64_t pos = begin % total, left = counts[t];
      while (left > 0) {
        const size_t f = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), pos) -
                                             starts.begin() - 1);
        const uint64_t n = std::min<uint64_t>({left, 16u << 20, starts[f + 1] - pos});
        const ssize_t got =
            ::pread(fds[f], dst, static_cast<size_t>(n), static_cast<off_t>(pos - starts[f]));
        if (got <= 0) {
          ok = false;
          return;
        }
        dst += got;
        left -= static_cast<uint64_t>(got);
        pos = (pos + static_cast<uint64_t>(got)) % total;
      }
    });
    begin += counts[t];
  }
  const auto t0 = Clock::now();
  go.count_down();
  for (auto& th : threads) th.join();
  out.seconds = Seconds(t0);
  for (uint64_t n : counts) out.bytes += n;
  out.ok = ok;
  for (int fd : fds) ::close(fd);
  return out;
}

std::vector<std::string> ShardFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("shard-", 0) == 0 && e.path().extension() == ".bin")
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// DCP's figures as dcp_live.py prints them ("dcp_save key=value ...").
struct DcpFigures {
  bool ok = false;
  double seconds = 0;
  uint64_t bytes = 0, needed = 0, rss_delta = 0, rss_peak_max = 0;
};

DcpFigures ParseDcpLine(const std::string& line, const std::string& tag) {
  DcpFigures f;
  if (line.rfind(tag + " ", 0) != 0) return f;
  unsigned long long b = 0, n = 0, d = 0, p = 0;
  if (std::sscanf(line.c_str() + tag.size(),
                  " seconds=%lf bytes=%llu needed=%llu rss_delta=%llu rss_peak_max=%llu",
                  &f.seconds, &b, &n, &d, &p) == 5) {
    f.ok = true;
    f.bytes = b;
    f.needed = n;
    f.rss_delta = d;
    f.rss_peak_max = p;
  }
  return f;
}

bool ParseArgs(int argc, char** argv, Args& a) {
  const char* tmp = std::getenv("TMPDIR");
  a.dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/orrery-live-state-bench-" +
          std::to_string(::getpid());
  bool size_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--params-millions") {
      a.params_millions = std::atof(next().c_str());
      size_given = true;
    } else if (k == "--smoke") {
      a.smoke = true;
    } else if (k == "--dcp") {
      a.dcp = true;
    } else if (k == "--dir") {
      a.dir = next();
    } else if (k == "--keep") {
      a.keep = true;
    } else if (k == "--python") {
      a.python = next();
    } else {
      std::fprintf(stderr,
                   "usage: live_state_bench [--params-millions N (default 100)] [--smoke] [--dcp] "
                   "[--python PY] [--dir D] [--keep]\n");
      return false;
    }
  }
  if (a.smoke && !size_given) a.params_millions = 0.3;
  return a.params_millions > 0;
}

std::string VenvPython(const Args& a) {
  if (!a.python.empty()) return a.python;
  if (const char* v = std::getenv("ORRERY_BENCH_VENV"); v != nullptr && *v != '\0')
    return std::string(v) + "/bin/python";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/orrery/bench-venv/bin/python";
}

void PrintHeader(const char* title) {
  std::printf("\n%-31s %8s %8s %9s %9s %7s %9s %9s\n", title, "seconds", "GB/s", "moved GB",
              "needed GB", "mv/need", "dRSS GB", "peak GB");
}

// Negative memory figures print as "-" (not measured).
void PrintRow(const std::string& name, double seconds, uint64_t moved, uint64_t needed,
              double rss_delta_gb, double peak_gb) {
  auto mem = [](double gb) {
    char buf[32];
    if (gb < 0) return std::string("-");
    std::snprintf(buf, sizeof(buf), "%.3f", gb);
    return std::string(buf);
  };
  std::printf("%-31s %8.3f %8.3f %9.3f %9.3f %7.3f %9s %9s\n", name.c_str(), seconds,
              Gb(needed) / seconds, Gb(moved), Gb(needed),
              static_cast<double>(moved) / static_cast<double>(needed), mem(rss_delta_gb).c_str(),
              mem(peak_gb).c_str());
}

double DeltaGb(const Op& op) {
  return Gb(op.rss_peak > op.rss_before ? op.rss_peak - op.rss_before : 0);
}

int Run(const Args& a) {
  const model::ModelConfig mc = SizeModel(a.params_millions);
  auto parameters = model::CountParameters(mc);
  if (!parameters.ok()) {
    std::fprintf(stderr, "%s\n", parameters.status().ToString().c_str());
    return 1;
  }
  const std::string live_dir = a.dir + "/live", old_dir = a.dir + "/old";
  std::error_code ec;
  fs::remove_all(a.dir, ec);
  fs::create_directories(a.dir + "/rdv-save");
  fs::create_directories(a.dir + "/rdv-load");
  const model::Batch batch = model::SyntheticBatch(mc, kGlobalBatch, 0);
  const int stage_start = 1 + mc.gpt.layers / 2;  // embedding + half the blocks on stage 0
  std::printf(
      "live_state_bench: GPT %.1fM parameters (%d blocks, hidden %d, heads %d, vocab %d), AdamW; "
      "%d ranks as threads, 1 intra-op thread each\n",
      static_cast<double>(*parameters) / 1e6, mc.gpt.layers, mc.gpt.hidden, mc.gpt.heads,
      mc.gpt.vocab, kWorld);
  std::fflush(stdout);

  // Phase 1: fsdp x4, one step, the live save, then the old gather save.
  Op live_save, old_save;
  double step_seconds = 0;
  auto saved = RunRanks(a.dir + "/rdv-save", [&](int rank, dist::Rendezvous* rdv) -> Status {
    parallel::StrategyConfig sc;
    sc.name = "fsdp";
    ORRERY_ASSIGN_OR_RETURN(auto strategy, parallel::MakeStrategy(mc, sc, AdamW(), rdv));
    ORRERY_ASSIGN_OR_RETURN(RankContext ctx, MakeContext(rank, rdv));
    const auto t0 = Clock::now();
    ORRERY_RETURN_IF_ERROR(strategy->Step(batch).status());
    if (rank == 0) step_seconds = Seconds(t0);
    ORRERY_RETURN_IF_ERROR(ctx.Measure(live_save, [&](train::StateIoStats& io) {
      return LiveSave(ctx, *strategy, live_dir, io, live_save.inner[static_cast<size_t>(rank)]);
    }));
    return ctx.Measure(old_save, [&](train::StateIoStats& io) {
      return OldGatherSave(ctx, *strategy, old_dir, io);
    });
  });
  for (const auto& s : saved) {
    if (!s.ok()) {
      std::fprintf(stderr, "save phase failed: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  auto live_reader = checkpoint::CheckpointReader::Open(live_dir);
  if (!live_reader.ok()) {
    std::fprintf(stderr, "%s\n", live_reader.status().ToString().c_str());
    return 1;
  }
  const uint64_t state_bytes = live_reader->metadata().TotalTensorBytes();
  for (auto& r : old_save.ranks) r.bytes_needed = 0;
  old_save.ranks[0].bytes_needed = state_bytes;

  // Phase 2: hybrid tp2 x pp2, the live exact load, then the old whole load
  // into the same template (zeroed between), each from a cold cache.
  Op live_load, old_load;
  std::vector<uint64_t> live_hash(kWorld), old_hash(kWorld);
  std::vector<std::map<std::string, std::vector<int64_t>>> held(kWorld);  // name -> global shape
  auto loaded = RunRanks(a.dir + "/rdv-load", [&](int rank, dist::Rendezvous* rdv) -> Status {
    parallel::StrategyConfig sc;
    sc.name = "hybrid";
    sc.layout = kTargetLayout;
    sc.stage_starts = {stage_start};
    ORRERY_ASSIGN_OR_RETURN(auto strategy, parallel::MakeStrategy(mc, sc, AdamW(), rdv));
    ORRERY_ASSIGN_OR_RETURN(RankContext ctx, MakeContext(rank, rdv));
    {
      ORRERY_ASSIGN_OR_RETURN(parallel::LocalState state, strategy->State());
      for (const auto& seg : state.segments)
        held[static_cast<size_t>(rank)][seg.name] = seg.global_shape;
    }
    ORRERY_RETURN_IF_ERROR(ctx.Measure(
        live_load,
        [&](train::StateIoStats& io) {
          return LiveLoad(ctx, *strategy, live_dir, io, live_load.inner[static_cast<size_t>(rank)]);
        },
        [&] { live_load.cache = CacheLabel(EvictFromPageCache(live_dir)); }));
    ORRERY_ASSIGN_OR_RETURN(live_hash[static_cast<size_t>(rank)], HashState(*strategy));
    ORRERY_RETURN_IF_ERROR(ZeroState(*strategy));
    const uint64_t own = live_load.ranks[static_cast<size_t>(rank)].bytes_needed;
    ORRERY_RETURN_IF_ERROR(ctx.Measure(
        old_load, [&](train::StateIoStats& io) { return OldLoad(*strategy, old_dir, own, io); },
        [&] { old_load.cache = CacheLabel(EvictFromPageCache(old_dir)); }));
    ORRERY_ASSIGN_OR_RETURN(old_hash[static_cast<size_t>(rank)], HashState(*strategy));
    return OkStatus();
  });
  for (const auto& s : loaded) {
    if (!s.ok()) {
      std::fprintf(stderr, "load phase failed: %s\n", s.ToString().c_str());
      return 1;
    }
  }

  // Baseline A: the same byte counts, plain preads from the live shard files.
  std::vector<uint64_t> counts;
  for (const auto& r : live_load.ranks) counts.push_back(r.bytes_needed);
  const std::string plain_cache = CacheLabel(EvictFromPageCache(live_dir));
  const PlainRead plain = ParallelPread(ShardFiles(live_dir), counts);
  if (!plain.ok) {
    std::fprintf(stderr, "plain read failed\n");
    return 1;
  }

  // Baseline C: DCP on the same shapes (the tensors each tp2 x pp2 rank holds).
  std::optional<DcpFigures> dcp_save, dcp_load;
  std::string dcp_note;
  if (a.dcp) {
    const std::string py = VenvPython(a);
    if (!fs::exists(py)) {
      dcp_note = "DCP: skipped, no " + py +
                 " (make it with bench/checkpoint/setup_venv.sh, then pass --dcp)";
    } else {
      nlohmann::json spec;
      spec["slots"] = {"exp_avg", "exp_avg_sq"};
      std::map<std::string, std::pair<std::vector<int64_t>, std::set<int>>> params;
      for (int r = 0; r < kWorld; ++r) {
        const int stage = r / (kTargetLayout.tp * kTargetLayout.dp);
        for (const auto& [name, shape] : held[static_cast<size_t>(r)]) {
          params[name].first = shape;
          params[name].second.insert(stage);
        }
      }
      for (const auto& [name, p] : params) {
        spec["params"].push_back({{"name", name},
                                  {"shape", p.first},
                                  {"tp_dim", model::GptTensorParallelDim(name)},
                                  {"stages", p.second}});
      }
      const std::string spec_path = a.dir + "/dcp_spec.json";
      std::ofstream(spec_path) << spec.dump();
      const std::string cmd = "OMP_NUM_THREADS=1 " + py + " " + ORRERY_SOURCE_DIR +
                              "/bench/live_state/dcp_live.py --spec " + spec_path + " --dir " +
                              a.dir + "/dcp 2>&1";
      std::printf("running: %s\n", cmd.c_str());
      std::fflush(stdout);
      FILE* p = ::popen(cmd.c_str(), "r");
      char line[1024];
      while (p != nullptr && std::fgets(line, sizeof(line), p) != nullptr) {
        std::printf("  dcp_live.py: %s", line);
        if (auto f = ParseDcpLine(line, "dcp_save"); f.ok) dcp_save = f;
        if (auto f = ParseDcpLine(line, "dcp_load"); f.ok) dcp_load = f;
      }
      const int rc = p != nullptr ? ::pclose(p) : -1;
      if (!dcp_save || !dcp_load) dcp_note = "DCP: no result (exit " + std::to_string(rc) + ")";
    }
  } else {
    dcp_note = "DCP: not run (pass --dcp; needs bench/checkpoint/setup_venv.sh's venv)";
  }

  // Report.
  std::printf(
      "state: %.3f GB (params + exp_avg + exp_avg_sq, fp32); one AdamW step under fsdp x4 took "
      "%.1f s\n",
      Gb(state_bytes), step_seconds);
  std::printf(
      "save: fsdp x4 (%s); re-shard into hybrid tp2 x pp2 (dp=1,tp=2,pp=2; stage 1 from layer "
      "%d)\n",
      kFsdpLayout.ToString().c_str(), stage_start);
  std::printf(
      "page cache before each load (posix_fadvise DONTNEED, checked with mincore): live %s, "
      "plain read %s, old %s\n",
      live_load.cache.c_str(), plain_cache.c_str(), old_load.cache.c_str());
  std::printf("\nper rank: live save (fsdp x4) | live re-shard (tp2 x pp2) | old whole load\n");
  std::printf("%-5s %8s %8s | %8s %9s %9s %8s | %8s %8s\n", "rank", "save GB", "save s", "read GB",
              "needed GB", "read/need", "load s", "read GB", "load s");
  bool exact = true, same = true;
  for (int r = 0; r < kWorld; ++r) {
    const auto& s = live_save.ranks[static_cast<size_t>(r)];
    const auto& l = live_load.ranks[static_cast<size_t>(r)];
    const auto& o = old_load.ranks[static_cast<size_t>(r)];
    const double ratio = static_cast<double>(l.bytes) / static_cast<double>(l.bytes_needed);
    exact = exact && l.bytes == l.bytes_needed;
    same = same && live_hash[static_cast<size_t>(r)] == old_hash[static_cast<size_t>(r)];
    std::printf("%-5d %8.3f %8.3f | %8.3f %9.3f %9.3f %8.3f | %8.3f %8.3f\n", r, Gb(s.bytes),
                s.seconds, Gb(l.bytes), Gb(l.bytes_needed), ratio, l.seconds, Gb(o.bytes),
                o.seconds);
  }
  std::printf(
      "live save: WriteLocalState (checksums + write) %.3f s of %.3f s, the rest fsync + commit; "
      "live load: LoadLocalState %.3f s of %.3f s, the rest open + piece checks across ranks\n",
      live_save.MaxInner(), live_save.Wall(), live_load.MaxInner(), live_load.Wall());

  PrintHeader("SAVE (fsdp x4)");
  PrintRow("orrery live (every rank)", live_save.Wall(), live_save.Bytes(), state_bytes,
           DeltaGb(live_save), Gb(live_save.rss_peak));
  PrintRow("old gather to rank 0", old_save.Wall(), old_save.Bytes(), state_bytes,
           DeltaGb(old_save), Gb(old_save.rss_peak));
  if (dcp_save) {
    PrintRow("torch DCP, Shard(0) x4", dcp_save->seconds, dcp_save->bytes, dcp_save->needed,
             Gb(dcp_save->rss_delta), Gb(dcp_save->rss_peak_max));
  }
  const uint64_t needed = live_load.Needed();
  PrintHeader("RE-SHARD -> tp2 x pp2");
  PrintRow("orrery live exact (" + live_load.cache.substr(0, 4) + ")", live_load.Wall(),
           live_load.Bytes(), needed, DeltaGb(live_load), Gb(live_load.rss_peak));
  PrintRow("plain parallel pread (" + plain_cache.substr(0, 4) + ")", plain.seconds, plain.bytes,
           needed, -1, -1);
  PrintRow("old whole read + slice (" + old_load.cache.substr(0, 4) + ")", old_load.Wall(),
           old_load.Bytes(), needed, DeltaGb(old_load), Gb(old_load.rss_peak));
  if (dcp_load) {
    PrintRow("torch DCP load (cold)", dcp_load->seconds, dcp_load->bytes, dcp_load->needed,
             Gb(dcp_load->rss_delta), Gb(dcp_load->rss_peak_max));
  }
  std::printf(
      "GB/s = needed bytes / seconds (1 GB = 1e9 B); DCP bytes from /proc/self/io.\n"
      "dRSS: growth of resident memory during the operation, all 4 ranks together.\n"
      "peak GB: Orrery, the process's (4 rank threads holding the model); DCP, its largest rank "
      "process.\n");
  std::printf("\nlive re-shard / plain read (throughput): %.2f\n",
              plain.seconds / live_load.Wall());
  std::printf("live / old gather, save: %.2fx faster, %.2f GB vs %.2f GB resident growth\n",
              old_save.Wall() / live_save.Wall(), DeltaGb(live_save), DeltaGb(old_save));
  std::printf("live / old gather, load: %.2fx faster, %.3f vs %.3f GB read\n",
              old_load.Wall() / live_load.Wall(), Gb(live_load.Bytes()), Gb(old_load.Bytes()));
  if (dcp_save && dcp_load) {
    std::printf("torch DCP time / orrery live time: save %.2fx, re-shard load %.2fx\n",
                dcp_save->seconds / live_save.Wall(), dcp_load->seconds / live_load.Wall());
  }
  if (!dcp_note.empty()) std::printf("%s\n", dcp_note.c_str());
  std::printf(
      "bytes read / bytes needed, every rank: %s; live and old loads restore the same "
      "bytes on every rank: %s\n",
      exact ? "1.000" : "NOT 1.000", same ? "yes" : "NO");
  if (!a.keep) fs::remove_all(a.dir, ec);
  return exact && same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, a)) return 2;
  ::setenv("OMP_NUM_THREADS", "1", 0);
  ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  at::set_num_threads(1);
  return Run(a);
}
