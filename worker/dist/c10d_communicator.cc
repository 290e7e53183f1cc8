// The communicator over c10d process groups (gloo on CPU here; NCCL through
// nccl_group.cc on the GPU path) and the rendezvous that creates them from a file
// store or a TCP store. c10d and gloo report failures by throwing; every throw is
// caught here and becomes a Status, so none crosses into the templates.
//
// Each backend moves tensors of one kind: gloo host tensors, NCCL CUDA tensors.
// A tensor of the other kind (a CUDA gradient bucket under gloo; a host scalar
// the trainer or profiler agrees on under NCCL) is staged: copied to a buffer
// the backend moves, the operation run to completion, the result copied back.
// Correct everywhere, but synchronous and one copy each way, so the templates
// keep their bulk traffic native (NCCL for --device cuda).
#include <algorithm>
#include <cstdlib>
#include <map>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "worker/dist/c10d_internal.h"

namespace orrery::dist {
namespace internal {

Status StatusFromException(const std::exception& e, const std::string& what) {
  std::string msg = e.what();
  // c10 errors carry a long backtrace after the first line; keep the message.
  auto nl = msg.find('\n');
  std::string head = nl == std::string::npos ? msg : msg.substr(0, nl);
  std::string lower = msg;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos) {
    return DeadlineExceededError(what + ": timed out waiting for peers: " + head);
  }
  if (lower.find("closed") != std::string::npos ||
      lower.find("reset by peer") != std::string::npos ||
      lower.find("broken pipe") != std::string::npos ||
      lower.find("connection refused") != std::string::npos) {
    return UnavailableError(what + ": a peer rank closed its connection (did it die?): " + head);
  }
  if (lower.find("nccl") != std::string::npos && lower.find("invalid usage") != std::string::npos) {
    // What NCCL says when two ranks of a group share one GPU (seen on an H100
    // with NCCL 2.28: two ranks, one device, "invalid usage" at the first
    // collective).
    return FailedPreconditionError(
        what + ": " + head +
        " (NCCL needs a GPU of its own for every rank of a group: two ranks on one GPU are "
        "refused; give each rank its own device with LOCAL_RANK or CUDA_VISIBLE_DEVICES, or "
        "run the ranks over ORRERY_BACKEND=gloo)");
  }
  return InternalError(what + ": " + head);
}

namespace {

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // gloo has no AVG: sum, then divide
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

class C10dPendingOp final : public PendingOp {
 public:
  C10dPendingOp(c10::intrusive_ptr<c10d::Work> work, std::string what, at::Tensor tensor,
                double divide_by)
      : work_(std::move(work)),
        what_(std::move(what)),
        tensor_(std::move(tensor)),
        divide_by_(divide_by) {}
  C10dPendingOp(Status failed) : done_(true), result_(std::move(failed)) {}  // NOLINT

  Status Wait() override {
    if (done_) return result_;
    done_ = true;
    try {
      work_->wait();
      if (divide_by_ != 1.0) tensor_.div_(divide_by_);
    } catch (const std::exception& e) {
      result_ = StatusFromException(e, what_);
    }
    work_.reset();
    return result_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  at::Tensor tensor_;
  double divide_by_ = 1.0;
  bool done_ = false;
  Status result_;
};

// An operation on a staged copy (a CUDA tensor under gloo: its host copy): the
// collective runs asynchronously on the copy, and Wait() copies the result back
// into the caller's tensor. Nothing blocks at launch, so a gradient hook that
// launches it does not stall autograd's device thread (which, with ranks as
// threads sharing one GPU, would deadlock: every rank's backward runs on that
// one thread) and the copy-back overlaps nothing it must not.
class StagedPendingOp final : public PendingOp {
 public:
  StagedPendingOp(std::unique_ptr<PendingOp> inner, at::Tensor staged, at::Tensor target,
                  std::string what)
      : inner_(std::move(inner)),
        staged_(std::move(staged)),
        target_(std::move(target)),
        what_(std::move(what)) {}

  Status Wait() override {
    if (done_) return result_;
    done_ = true;
    result_ = inner_->Wait();
    if (result_.ok()) {
      try {
        target_.copy_(staged_);
      } catch (const std::exception& e) {
        result_ = StatusFromException(e, what_);
      }
    }
    staged_ = at::Tensor();
    target_ = at::Tensor();
    return result_;
  }

 private:
  std::unique_ptr<PendingOp> inner_;
  at::Tensor staged_, target_;
  std::string what_;
  bool done_ = false;
  Status result_;
};

class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<Group> group, std::string backend)
      : group_(std::move(group)), backend_(std::move(backend)) {}

  int rank() const override { return group_->getRank(); }

  // True when the backend moves `t` where it is.
  bool Native(const at::Tensor& t) const { return backend_ == "nccl" ? t.is_cuda() : t.is_cpu(); }
  // A contiguous copy of `t` where the backend moves tensors (NCCL: the current
  // CUDA device, which UseDevice set for this rank).
  at::Tensor Staged(const at::Tensor& t) const {
    return (backend_ == "nccl" ? t.to(at::Device(at::kCUDA)) : t.to(at::kCPU)).contiguous();
  }
  int size() const override { return group_->getSize(); }
  std::string backend() const override { return backend_; }

  Status AllReduce(at::Tensor& tensor, ReduceOp op) override {
    return AllReduceAsync(tensor, op)->Wait();
  }

  std::unique_ptr<PendingOp> AllReduceAsync(at::Tensor& tensor, ReduceOp op) override {
    if (!tensor.is_contiguous())
      return std::make_unique<C10dPendingOp>(
          InvalidArgumentError("all_reduce: tensor not contiguous"));
    if (!Native(tensor)) {
      try {
        at::Tensor staged = Staged(tensor);
        auto inner = AllReduceAsync(staged, op);
        return std::make_unique<StagedPendingOp>(std::move(inner), staged, tensor, "all_reduce");
      } catch (const std::exception& e) {
        return std::make_unique<C10dPendingOp>(StatusFromException(e, "all_reduce"));
      }
    }
    try {
      std::vector<at::Tensor> tensors{tensor};
      c10d::AllreduceOptions opts;
      opts.reduceOp = ToC10d(op);
      auto work = group_->allreduce(tensors, opts);
      return std::make_unique<C10dPendingOp>(
          std::move(work), "all_reduce", tensor,
          op == ReduceOp::kAvg ? static_cast<double>(size()) : 1.0);
    } catch (const std::exception& e) {
      return std::make_unique<C10dPendingOp>(StatusFromException(e, "all_reduce"));
    }
  }

  Status AllGather(const at::Tensor& input, at::Tensor& output) override {
    int64_t n = input.numel();
    if (output.numel() != n * size() || !output.is_contiguous()) {
      return InvalidArgumentError(
          "all_gather: output must be contiguous with size()*input.numel() elements");
    }
    if (!Native(input) || !Native(output)) {
      try {
        at::Tensor out = Staged(output);
        ORRERY_RETURN_IF_ERROR(AllGather(Staged(input), out));
        output.copy_(out);
        return OkStatus();
      } catch (const std::exception& e) {
        return StatusFromException(e, "all_gather");
      }
    }
    try {
      at::Tensor in = input.contiguous();
      std::vector<at::Tensor> inputs{in};
      std::vector<std::vector<at::Tensor>> outputs(1);
      at::Tensor flat = output.view({-1});
      for (int i = 0; i < size(); ++i)
        outputs[0].push_back(flat.narrow(0, i * n, n).view(in.sizes()));
      group_->allgather(outputs, inputs)->wait();
      return OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e, "all_gather");
    }
  }

  std::unique_ptr<PendingOp> AllGatherAsync(const at::Tensor& input, at::Tensor& output) override {
    const int64_t n = input.numel();
    if (!Native(input) || !Native(output) || !input.is_contiguous() ||
        output.numel() != n * size() || !output.is_contiguous()) {
      return Communicator::AllGatherAsync(input, output);
    }
    try {
      std::vector<at::Tensor> inputs{input};
      std::vector<std::vector<at::Tensor>> outputs(1);
      at::Tensor flat = output.view({-1});
      for (int i = 0; i < size(); ++i)
        outputs[0].push_back(flat.narrow(0, i * n, n).view(input.sizes()));
      auto work = group_->allgather(outputs, inputs);
      return std::make_unique<C10dPendingOp>(std::move(work), "all_gather", output, 1.0);
    } catch (const std::exception& e) {
      return std::make_unique<C10dPendingOp>(StatusFromException(e, "all_gather"));
    }
  }

  std::unique_ptr<PendingOp> ReduceScatterAsync(const at::Tensor& input, at::Tensor& output,
                                                ReduceOp op) override {
    const int64_t n = output.numel();
    if (backend_ != "gloo" || !Native(input) || !Native(output) || input.numel() != n * size()) {
      return Communicator::ReduceScatterAsync(input, output, op);
    }
    try {
      // As ReduceScatter: gloo all-reduces a copy; Wait() keeps this rank's chunk.
      at::Tensor tmp = input.contiguous().clone();
      auto inner = AllReduceAsync(tmp, op);
      at::Tensor chunk = tmp.view({-1}).narrow(0, rank() * n, n).view(output.sizes());
      return std::make_unique<StagedPendingOp>(std::move(inner), chunk, output, "reduce_scatter");
    } catch (const std::exception& e) {
      return std::make_unique<C10dPendingOp>(StatusFromException(e, "reduce_scatter"));
    }
  }

  Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    int64_t n = output.numel();
    if (input.numel() != n * size()) {
      return InvalidArgumentError("reduce_scatter: input must have size()*output.numel() elements");
    }
    if (backend_ == "gloo") {
      // ProcessGroupGloo in LibTorch 1.13 has no reduce_scatter: all-reduce a copy
      // and keep this rank's chunk. Twice the traffic of a ring reduce-scatter,
      // same result.
      at::Tensor tmp = input.contiguous().clone();
      ORRERY_RETURN_IF_ERROR(AllReduce(tmp, op));
      output.copy_(tmp.view({-1}).narrow(0, rank() * n, n).view(output.sizes()));
      return OkStatus();
    }
    if (!Native(input) || !Native(output)) {
      try {
        at::Tensor out = Staged(output);
        ORRERY_RETURN_IF_ERROR(ReduceScatter(Staged(input), out, op));
        output.copy_(out);
        return OkStatus();
      } catch (const std::exception& e) {
        return StatusFromException(e, "reduce_scatter");
      }
    }
    try {
      at::Tensor in = input.contiguous();
      std::vector<at::Tensor> outputs{output};
      std::vector<std::vector<at::Tensor>> inputs(1);
      at::Tensor flat = in.view({-1});
      for (int i = 0; i < size(); ++i)
        inputs[0].push_back(flat.narrow(0, i * n, n).view(output.sizes()));
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = ToC10d(op);
      group_->reduce_scatter(outputs, inputs, opts)->wait();
      if (op == ReduceOp::kAvg) output.div_(size());
      return OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e, "reduce_scatter");
    }
  }

  Status Broadcast(at::Tensor& tensor, int root) override {
    if (!Native(tensor)) {
      try {
        at::Tensor staged = Staged(tensor);
        ORRERY_RETURN_IF_ERROR(Broadcast(staged, root));
        tensor.copy_(staged);
        return OkStatus();
      } catch (const std::exception& e) {
        return StatusFromException(e, "broadcast");
      }
    }
    try {
      std::vector<at::Tensor> tensors{tensor};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      group_->broadcast(tensors, opts)->wait();
      return OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e, "broadcast");
    }
  }

  Status Send(const at::Tensor& tensor, int dst, int tag) override {
    return SendAsync(tensor, dst, tag)->Wait();
  }

  std::unique_ptr<PendingOp> SendAsync(const at::Tensor& tensor, int dst, int tag) override {
    try {
      // The pending op keeps the (possibly staged) copy alive until Wait().
      at::Tensor t = Native(tensor) ? tensor.contiguous() : Staged(tensor);
      std::vector<at::Tensor> tensors{t};
      auto work = group_->send(tensors, dst, tag);
      return std::make_unique<C10dPendingOp>(std::move(work), "send", t, 1.0);
    } catch (const std::exception& e) {
      return std::make_unique<C10dPendingOp>(StatusFromException(e, "send"));
    }
  }

  Status Recv(at::Tensor& tensor, int src, int tag) override {
    if (!tensor.is_contiguous()) return InvalidArgumentError("recv: tensor not contiguous");
    if (!Native(tensor)) {
      try {
        at::Tensor staged = Staged(tensor);
        ORRERY_RETURN_IF_ERROR(Recv(staged, src, tag));
        tensor.copy_(staged);
        return OkStatus();
      } catch (const std::exception& e) {
        return StatusFromException(e, "recv");
      }
    }
    try {
      std::vector<at::Tensor> tensors{tensor};
      group_->recv(tensors, src, tag)->wait();
      return OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e, "recv");
    }
  }

  Status Barrier() override {
    try {
      group_->barrier()->wait();
      return OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e, "barrier");
    }
  }

 private:
  c10::intrusive_ptr<Group> group_;
  std::string backend_;
};

}  // namespace

std::unique_ptr<Communicator> WrapProcessGroup(c10::intrusive_ptr<Group> group,
                                               std::string backend) {
  return std::make_unique<C10dCommunicator>(std::move(group), std::move(backend));
}

}  // namespace internal

namespace {

class C10dRendezvous final : public Rendezvous {
 public:
  C10dRendezvous(RendezvousConfig config, c10::intrusive_ptr<c10d::Store> store,
                 std::string backend)
      : config_(std::move(config)), store_(std::move(store)), backend_(std::move(backend)) {}

  const RendezvousConfig& config() const override { return config_; }

  StatusOr<std::unique_ptr<Communicator>> NewGroup(const std::string& name,
                                                   const std::vector<int>& ranks) override {
    auto it = std::find(ranks.begin(), ranks.end(), config_.rank);
    if (it == ranks.end())
      return InvalidArgumentError("group " + name + " does not contain rank " +
                                  std::to_string(config_.rank));
    int group_rank = static_cast<int>(it - ranks.begin());
    int group_size = static_cast<int>(ranks.size());
    try {
      // A name may be reused (the profiler builds one strategy after another);
      // each use gets its own keys. Every rank creates groups in the same order,
      // so the counters agree.
      int generation = generations_[name]++;
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
          "orrery/" + name + "/" + std::to_string(generation), store_);
      c10::intrusive_ptr<internal::Group> group;
      if (backend_ == "gloo") {
        auto options = c10d::ProcessGroupGloo::Options::create(config_.timeout);
        if (!config_.bind_host.empty()) {
          options->devices.push_back(
              c10d::ProcessGroupGloo::createDeviceForHostname(config_.bind_host));
        } else {
          options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
        }
        options->threads = 2;
        group =
            c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group_rank, group_size, options);
#ifdef ORRERY_HAVE_CUDA
      } else if (backend_ == "nccl") {
        group = internal::NewNcclGroup(prefixed, group_rank, group_size, config_.timeout);
#endif
      } else {
        return UnimplementedError("communicator backend '" + backend_ + "' is not built in (gloo" +
#ifdef ORRERY_HAVE_CUDA
                                  std::string(", nccl") +
#else
                                  std::string("; nccl needs the CUDA build") +
#endif
                                  ")");
      }
      return internal::WrapProcessGroup(std::move(group), backend_);
    } catch (const std::exception& e) {
      return internal::StatusFromException(e, "joining group " + name);
    }
  }

 private:
  RendezvousConfig config_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string backend_;
  std::map<std::string, int> generations_;
};

StatusOr<int> EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0')
    return InvalidArgumentError(std::string("environment variable ") + name + "='" + v +
                                "' is not an integer");
  return static_cast<int>(x);
}

}  // namespace

namespace {

// An operation that already ran: Wait() returns its outcome.
class RanPendingOp final : public PendingOp {
 public:
  explicit RanPendingOp(Status result) : result_(std::move(result)) {}
  Status Wait() override { return result_; }

 private:
  Status result_;
};

}  // namespace

std::unique_ptr<PendingOp> Communicator::AllGatherAsync(const at::Tensor& input,
                                                        at::Tensor& output) {
  return std::make_unique<RanPendingOp>(AllGather(input, output));
}

std::unique_ptr<PendingOp> Communicator::ReduceScatterAsync(const at::Tensor& input,
                                                            at::Tensor& output, ReduceOp op) {
  return std::make_unique<RanPendingOp>(ReduceScatter(input, output, op));
}

StatusOr<RendezvousConfig> RendezvousFromEnv() {
  RendezvousConfig c;
  ORRERY_ASSIGN_OR_RETURN(c.rank, EnvInt("RANK", 0));
  ORRERY_ASSIGN_OR_RETURN(c.world_size, EnvInt("WORLD_SIZE", 1));
  ORRERY_ASSIGN_OR_RETURN(c.master_port, EnvInt("MASTER_PORT", 29500));
  ORRERY_ASSIGN_OR_RETURN(int timeout_ms, EnvInt("ORRERY_COMM_TIMEOUT_MS", 60000));
  c.timeout = std::chrono::milliseconds(timeout_ms);
  if (const char* v = std::getenv("MASTER_ADDR")) c.master_addr = v;
  if (const char* v = std::getenv("ORRERY_STORE_PATH")) c.store_path = v;
  if (const char* v = std::getenv("ORRERY_BIND_HOST")) c.bind_host = v;
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size) {
    return InvalidArgumentError("RANK=" + std::to_string(c.rank) +
                                " is not in [0, WORLD_SIZE=" + std::to_string(c.world_size) + ")");
  }
  if (c.master_port < 1 || c.master_port > 65535)
    return InvalidArgumentError("MASTER_PORT out of range");
  return c;
}

// LibTorch 2.x records every collective in a process-wide "flight recorder"
// (2000 entries by default, each with a captured traceback), and its record()
// inserts a process group's first entry into a std::map before taking its own
// mutex (torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, 2.11). Two process
// groups whose first collectives start together on two threads (fsdp's gather
// thread beside the main one; ranks as threads in the tests) corrupt that map:
// CI's GPU-path build crashed there, in the hybrid template's first all-reduce.
// Off unless the user asks for it (TORCH_FR_BUFFER_SIZE or
// TORCH_NCCL_TRACE_BUFFER_SIZE set: then theirs, race included); it also spares
// a traceback per collective. LibTorch 1.13 has no flight recorder.
namespace {
void FlightRecorderOffUnlessAsked() {
  static const bool once = [] {
    if (std::getenv("TORCH_FR_BUFFER_SIZE") == nullptr &&
        std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == nullptr) {
      ::setenv("TORCH_FR_BUFFER_SIZE", "0", 0);
    }
    return true;
  }();
  (void)once;
}
}  // namespace

StatusOr<std::unique_ptr<Rendezvous>> Connect(const RendezvousConfig& config,
                                              const std::string& backend) {
  FlightRecorderOffUnlessAsked();
  if (config.world_size < 1 || config.rank < 0 || config.rank >= config.world_size) {
    return InvalidArgumentError("rank " + std::to_string(config.rank) + " not in world of " +
                                std::to_string(config.world_size));
  }
  RendezvousConfig c = config;
  try {
    c10::intrusive_ptr<c10d::Store> store;
    if (!c.store_path.empty()) {
      if (c.bind_host.empty()) c.bind_host = "127.0.0.1";  // a file store means one machine
      store = c10::make_intrusive<c10d::FileStore>(c.store_path, c.world_size);
    } else {
      c10d::TCPStoreOptions opts;
      opts.port = static_cast<std::uint16_t>(c.master_port);
      opts.isServer = c.rank == 0;
      opts.numWorkers = static_cast<std::size_t>(c.world_size);
      opts.waitWorkers = true;
      opts.timeout = c.timeout;
      store = c10::make_intrusive<c10d::TCPStore>(c.master_addr, opts);
    }
    store->setTimeout(c.timeout);
    return std::unique_ptr<Rendezvous>(
        std::make_unique<C10dRendezvous>(c, std::move(store), backend));
  } catch (const std::exception& e) {
    return internal::StatusFromException(
        e, "rendezvous at " + (c.store_path.empty()
                                   ? c.master_addr + ":" + std::to_string(c.master_port)
                                   : c.store_path));
  }
}

}  // namespace orrery::dist
