// The communicator: the collective and point-to-point operations every parallel
// template is written against (all-reduce, all-gather, reduce-scatter, broadcast,
// send/recv, barrier), each with a timeout. One interface, two implementations:
// gloo (c10d's ProcessGroupGloo, CPU tensors) here, NCCL (CUDA tensors) compiled
// only with the GPU path. A communicator spans one group of ranks (the whole
// world, or one data/tensor/pipeline group of a layout, see topology.h).
// Tensors of the kind the backend does not move (CUDA under gloo, host under
// NCCL) are accepted and staged through a copy, synchronously: correct, not fast.
//
// Failure contract: every operation returns a Status instead of throwing. A peer
// that dies closes its sockets, and the surviving ranks' pending operations fail
// with UNAVAILABLE "peer ... closed" promptly; a peer that hangs makes them fail
// with DEADLINE_EXCEEDED after the timeout. Callers never block forever.
//
// Threading: one thread drives a communicator at a time (the c10d rule); the
// asynchronous forms return a PendingOp that any thread may Wait() on.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace at {
class Tensor;
}

namespace orrery::dist {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// An operation in flight. Wait() returns its outcome; it is idempotent.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  [[nodiscard]] virtual Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo" or "nccl".
  virtual std::string backend() const = 0;

  // In place; kAvg divides the sum by size().
  [[nodiscard]] virtual Status AllReduce(at::Tensor& tensor, ReduceOp op) = 0;
  // Starts an in-place all-reduce and returns at once (DDP overlaps these with
  // backward). The tensor must stay alive until Wait() returns.
  virtual std::unique_ptr<PendingOp> AllReduceAsync(at::Tensor& tensor, ReduceOp op) = 0;
  // output (numel = size() * input.numel(), contiguous) receives every rank's
  // input in rank order.
  [[nodiscard]] virtual Status AllGather(const at::Tensor& input, at::Tensor& output) = 0;
  // input (numel = size() * output.numel()) is reduced across ranks; this rank
  // receives chunk rank() of the result.
  [[nodiscard]] virtual Status ReduceScatter(const at::Tensor& input, at::Tensor& output,
                                             ReduceOp op) = 0;
  // The same two, started and returned at once (fsdp prefetches the next unit's
  // gather and reduce-scatters a unit's gradients while the next one computes).
  // Input and output must stay alive and untouched until Wait() returns; the
  // output holds the result only then. The default runs the operation before
  // returning (a backend without asynchronous forms is correct, not overlapped).
  virtual std::unique_ptr<PendingOp> AllGatherAsync(const at::Tensor& input, at::Tensor& output);
  virtual std::unique_ptr<PendingOp> ReduceScatterAsync(const at::Tensor& input, at::Tensor& output,
                                                        ReduceOp op);
  [[nodiscard]] virtual Status Broadcast(at::Tensor& tensor, int root) = 0;
  // Point to point within the group; tag separates concurrent messages between
  // the same pair (the pipeline uses the micro-batch index).
  [[nodiscard]] virtual Status Send(const at::Tensor& tensor, int dst, int tag) = 0;
  virtual std::unique_ptr<PendingOp> SendAsync(const at::Tensor& tensor, int dst, int tag) = 0;
  [[nodiscard]] virtual Status Recv(at::Tensor& tensor, int src, int tag) = 0;
  [[nodiscard]] virtual Status Barrier() = 0;
};

// Where the ranks of a job meet. With store_path set, a file store (one machine,
// local runs and tests); otherwise a TCP store served by rank 0 at
// master_addr:master_port (Kubernetes: a headless service names rank 0's pod).
struct RendezvousConfig {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_path;
  // Address this rank's gloo transport binds to; empty: resolve this host's name.
  std::string bind_host;
  std::chrono::milliseconds timeout{60000};
};

// Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the torchrun / Kubernetes
// convention) and ORRERY_STORE_PATH, ORRERY_BIND_HOST, ORRERY_COMM_TIMEOUT_MS.
// Missing variables leave a single-rank default; malformed ones are an error.
StatusOr<RendezvousConfig> RendezvousFromEnv();

// The store all groups of one job are created from. Opaque: holds c10d::Store.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual const RendezvousConfig& config() const = 0;
  // A communicator over `ranks` (global ranks, ascending, containing this rank).
  // `name` must be the same on every member; a name used again makes a fresh
  // group, as long as every member creates its groups in the same order.
  // Every member must call it; it blocks until all have joined or the timeout.
  // Not thread-safe.
  virtual StatusOr<std::unique_ptr<Communicator>> NewGroup(const std::string& name,
                                                           const std::vector<int>& ranks) = 0;
};

// Connects to the store (rank 0 serves it for TCP). Backend "gloo" or "nccl".
StatusOr<std::unique_ptr<Rendezvous>> Connect(const RendezvousConfig& config,
                                              const std::string& backend = "gloo");

}  // namespace orrery::dist
