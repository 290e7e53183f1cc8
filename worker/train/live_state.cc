// Rank-local save and exact-region restore of a template's state (see
// live_state.h).
#include "worker/train/live_state.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include <torch/torch.h>

#include "worker/checkpoint/torch_adapter.h"
#include "worker/model/model.h"

namespace orrery::train {
namespace {

constexpr const char* kModelPrefix = "model/";
constexpr const char* kOptimPrefix = "optim/";
constexpr const char* kStepTensor = "optim/step";

using Clock = std::chrono::steady_clock;

// VmHWM or VmRSS from /proc/self/status, in bytes (0 if unreadable).
uint64_t ProcStatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      unsigned long long kib = 0;
      if (std::sscanf(line.c_str() + key.size() + 1, "%llu", &kib) == 1) return kib * 1024ull;
    }
  }
  return 0;
}

std::string Shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// The flat stretch of `t` a segment covers, as a host tensor: a view when `t`
// is a contiguous host tensor, else a copy.
at::Tensor HostStretch(const at::Tensor& t, int64_t offset, int64_t n) {
  at::Tensor flat = t.detach().reshape({-1}).narrow(0, offset, n);
  return flat.device().is_cpu() ? flat.contiguous() : flat.to(at::kCPU).contiguous();
}

// A host buffer to read tensor `t`'s state into: `t` itself when it is a
// contiguous host tensor, else a host copy that Finish() writes back.
struct Landing {
  at::Tensor target;
  at::Tensor host;
  bool staged = false;
};

Landing LandingFor(const at::Tensor& t) {
  Landing l;
  l.target = t;
  if (t.device().is_cpu() && t.is_contiguous()) {
    l.host = t.detach();
  } else {
    l.host = at::empty(t.sizes(), t.options().device(at::kCPU)).contiguous();
    l.staged = true;
  }
  return l;
}

}  // namespace

checkpoint::TensorSpec CollectionSpec(const std::string& qualified, const std::string& parameter,
                                      const std::vector<int64_t>& shape,
                                      const std::string& model_kind) {
  checkpoint::TensorSpec spec;
  spec.name = qualified;
  spec.shape = shape;
  spec.dtype = checkpoint::DType::kFloat32;
  spec.fsdp_sharded = false;
  spec.tp_dim = model_kind == "gpt" && !shape.empty() ? model::GptTensorParallelDim(parameter) : -1;
  return spec;
}

namespace {
std::atomic<uint64_t> lifetime_peak{0};
void FoldPeak(uint64_t v) {
  uint64_t seen = lifetime_peak.load();
  while (v > seen && !lifetime_peak.compare_exchange_weak(seen, v)) {
  }
}
}  // namespace

uint64_t LifetimePeakRss() {
  FoldPeak(ProcStatusBytes("VmHWM"));
  return lifetime_peak.load();
}

uint64_t CurrentRss() { return ProcStatusBytes("VmRSS"); }

PeakRssScope::PeakRssScope() {
  FoldPeak(ProcStatusBytes("VmHWM"));
  // "5" resets the peak resident set size (Linux >= 4.0, proc(5)).
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  before_ = ProcStatusBytes("VmRSS");
}

uint64_t PeakRssScope::Peak() const {
  const uint64_t peak = ProcStatusBytes("VmHWM");
  FoldPeak(peak);
  return peak;
}

Status WriteLocalState(checkpoint::ShardWriter& writer, parallel::Strategy& strategy,
                       const std::string& model_kind, bool write_scalars, StateIoStats* stats) {
  PeakRssScope rss;
  const auto t0 = Clock::now();
  try {
    ORRERY_ASSIGN_OR_RETURN(parallel::LocalState state, strategy.State());
    torch::NoGradGuard no_grad;
    for (const parallel::StateSegment& seg : state.segments) {
      if (!seg.writer) continue;
      const int64_t n = seg.region.Numel();
      auto add = [&](const std::string& qualified, const at::Tensor& t, int64_t offset) -> Status {
        if (t.scalar_type() != at::kFloat)
          return InvalidArgumentError("tensor " + qualified + " is not float32");
        at::Tensor host = HostStretch(t, offset, n);
        return writer.AddRegion(CollectionSpec(qualified, seg.name, seg.global_shape, model_kind),
                                seg.region, host.data_ptr(), static_cast<uint64_t>(host.nbytes()));
      };
      ORRERY_RETURN_IF_ERROR(add(kModelPrefix + seg.name, state.params[seg.param], seg.offset));
      if (seg.slot_offset < 0) continue;  // frozen: no optimizer state
      for (size_t k = 0; k < state.slot_names.size(); ++k) {
        ORRERY_RETURN_IF_ERROR(add(std::string(kOptimPrefix) + state.slot_names[k] + "/" + seg.name,
                                   state.slots[k][seg.param], seg.slot_offset));
      }
    }
    if (write_scalars) {
      checkpoint::TensorSpec spec;
      spec.name = kStepTensor;
      spec.dtype = checkpoint::DType::kInt64;
      spec.fsdp_sharded = false;
      const int64_t steps = state.optimizer_steps;
      ORRERY_RETURN_IF_ERROR(
          writer.AddRegion(spec, checkpoint::FullRegion({}), &steps, sizeof(steps)));
    }
  } catch (const c10::Error& e) {
    return InternalError(std::string("saving the template's state: ") + e.what_without_backtrace());
  }
  if (stats != nullptr) {
    stats->bytes = writer.bytes_written();
    stats->bytes_needed = writer.bytes_written();
    stats->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    stats->peak_rss_bytes = rss.Peak();
    stats->rss_before_bytes = rss.before();
  }
  return OkStatus();
}

Status LoadLocalState(const checkpoint::CheckpointReader& reader, parallel::Strategy& strategy,
                      const checkpoint::LoadOptions& options, StateIoStats* stats,
                      std::vector<checkpoint::BlockPiece>* partial, bool* optimizer_restored) {
  PeakRssScope rss;
  const auto t0 = Clock::now();
  const checkpoint::Metadata& meta = reader.metadata();
  checkpoint::LoadStats load_stats;
  bool with_optimizer = false;
  try {
    ORRERY_ASSIGN_OR_RETURN(parallel::LocalState state, strategy.State());
    // The optimizer's state comes back only whole: every slot of every
    // parameter and the step count.
    with_optimizer = meta.Find(kStepTensor) != nullptr;
    for (const auto& slot : state.slot_names) {
      for (const auto& seg : state.segments) {
        if (seg.slot_offset < 0) continue;  // frozen: no optimizer state
        if (meta.Find(std::string(kOptimPrefix) + slot + "/" + seg.name) == nullptr)
          with_optimizer = false;
      }
    }
    std::map<const at::TensorImpl*, Landing> landings;
    auto landing_of = [&](const at::Tensor& t) -> Landing& {
      auto it = landings.find(t.unsafeGetTensorImpl());
      if (it == landings.end()) it = landings.emplace(t.unsafeGetTensorImpl(), LandingFor(t)).first;
      return it->second;
    };
    std::vector<checkpoint::LoadRequest> requests;
    auto request = [&](const std::string& qualified, const parallel::StateSegment& seg,
                       const at::Tensor& t, int64_t offset) -> Status {
      const checkpoint::TensorMeta* tm = meta.Find(qualified);
      if (tm == nullptr) {
        return NotFoundError("tensor " + qualified + " is not in checkpoint " + reader.dir() +
                             "; it was written for another model. Start the task afresh (a new "
                             "checkpoint directory) or resume with the model that wrote it");
      }
      if (tm->spec.shape != seg.global_shape) {
        return FailedPreconditionError(
            "tensor " + qualified + " is " + Shape(tm->spec.shape) + " in checkpoint " +
            reader.dir() + " but " + Shape(seg.global_shape) +
            " in this model; resume with the model configuration that wrote it");
      }
      if (tm->spec.dtype != checkpoint::DType::kFloat32) {
        return FailedPreconditionError("tensor " + qualified + " is " +
                                       checkpoint::DTypeName(tm->spec.dtype) + " in checkpoint " +
                                       reader.dir() + ", the model trains in float32");
      }
      Landing& l = landing_of(t);
      const int64_t n = seg.region.Numel();
      if (offset + n > l.host.numel())
        return InternalError("segment of " + qualified + " outside its tensor");
      char* dst = static_cast<char*>(l.host.data_ptr()) + offset * 4;
      requests.push_back({qualified, seg.region, dst, static_cast<uint64_t>(n) * 4});
      return OkStatus();
    };
    for (const parallel::StateSegment& seg : state.segments) {
      ORRERY_RETURN_IF_ERROR(
          request(kModelPrefix + seg.name, seg, state.params[seg.param], seg.offset));
      if (!with_optimizer || seg.slot_offset < 0) continue;
      for (size_t k = 0; k < state.slot_names.size(); ++k) {
        ORRERY_RETURN_IF_ERROR(
            request(std::string(kOptimPrefix) + state.slot_names[k] + "/" + seg.name, seg,
                    state.slots[k][seg.param], seg.slot_offset));
      }
    }
    int64_t steps = 0;
    if (with_optimizer) {
      requests.push_back({kStepTensor, checkpoint::FullRegion({}), &steps, sizeof(steps)});
    }
    ORRERY_RETURN_IF_ERROR(reader.Load(requests, options, &load_stats, partial));
    torch::NoGradGuard no_grad;
    for (auto& [impl, l] : landings) {
      if (l.staged) l.target.detach().copy_(l.host.view(l.target.sizes()));
    }
    if (!with_optimizer) {
      for (const auto& slot : state.slots)
        for (const auto& t : slot) t.detach().zero_();
    }
    ORRERY_RETURN_IF_ERROR(strategy.StateRestored(steps));
  } catch (const c10::Error& e) {
    return InternalError("restoring the template's state from " + reader.dir() + ": " +
                         e.what_without_backtrace());
  }
  if (optimizer_restored != nullptr) *optimizer_restored = with_optimizer;
  if (stats != nullptr) {
    stats->bytes = load_stats.bytes_read;
    stats->bytes_needed = load_stats.bytes_needed;
    stats->reads = load_stats.reads;
    stats->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    stats->peak_rss_bytes = rss.Peak();
    stats->rss_before_bytes = rss.before();
  }
  return OkStatus();
}

Status VerifyPiecesTogether(const checkpoint::CheckpointReader& reader,
                            const std::vector<checkpoint::BlockPiece>& mine,
                            dist::Communicator* world, StateIoStats* stats) {
  std::vector<checkpoint::BlockPiece> all = mine;
  if (world != nullptr) {
    // Fixed-width records: file, block offset, block length, begin, end, term,
    // block checksum; padded to the longest rank's count with file = -1.
    constexpr int64_t kFields = 7;
    at::Tensor count = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
    ORRERY_RETURN_IF_ERROR(world->AllReduce(count, dist::ReduceOp::kMax));
    const int64_t most = count.item<int64_t>();
    if (most == 0) return OkStatus();
    at::Tensor local = at::full({most * kFields}, -1, at::kLong);
    auto l = local.accessor<int64_t, 1>();
    for (size_t i = 0; i < mine.size(); ++i) {
      const auto& p = mine[i];
      const int64_t row = static_cast<int64_t>(i) * kFields;
      l[row] = p.file;
      l[row + 1] = static_cast<int64_t>(p.block_offset);
      l[row + 2] = static_cast<int64_t>(p.block_length);
      l[row + 3] = static_cast<int64_t>(p.begin);
      l[row + 4] = static_cast<int64_t>(p.end);
      l[row + 5] = p.term;
      l[row + 6] = p.block_crc;
    }
    const int ranks = world->size();
    at::Tensor gathered = at::empty({ranks * most * kFields}, at::kLong);
    ORRERY_RETURN_IF_ERROR(world->AllGather(local, gathered));
    auto g = gathered.accessor<int64_t, 1>();
    all.clear();
    for (int64_t row = 0; row < ranks * most * kFields; row += kFields) {
      if (g[row] < 0) continue;
      checkpoint::BlockPiece p;
      p.file = static_cast<int>(g[row]);
      p.block_offset = static_cast<uint64_t>(g[row + 1]);
      p.block_length = static_cast<uint64_t>(g[row + 2]);
      p.begin = static_cast<uint64_t>(g[row + 3]);
      p.end = static_cast<uint64_t>(g[row + 4]);
      p.term = static_cast<uint32_t>(g[row + 5]);
      p.block_crc = static_cast<uint32_t>(g[row + 6]);
      all.push_back(p);
    }
  }
  if (all.empty()) return OkStatus();
  ORRERY_ASSIGN_OR_RETURN(std::vector<checkpoint::BlockPiece> untiled,
                          checkpoint::CheckBlockPieces(std::move(all), reader));
  // Blocks nobody's pieces tile: read whole by the ranks that touched them.
  std::vector<checkpoint::BlockPiece> mine_untiled;
  for (const auto& p : mine) {
    for (const auto& u : untiled) {
      if (u.file == p.file && u.block_offset == p.block_offset) {
        mine_untiled.push_back(p);
        break;
      }
    }
  }
  checkpoint::LoadStats extra;
  ORRERY_RETURN_IF_ERROR(reader.CheckWholeBlocks(mine_untiled, &extra));
  if (stats != nullptr) {
    stats->bytes += extra.bytes_read;
    stats->reads += extra.reads;
  }
  return OkStatus();
}

}  // namespace orrery::train
