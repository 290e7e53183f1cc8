// See shard_device.h.
#include "worker/parallel/shard_device.h"

#include <chrono>

namespace orrery::parallel::internal {
namespace {

int64_t HostBytes(const at::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StatusOr<at::Tensor> ShardDevice::Take(const void* owner, size_t unit, const at::Tensor& host,
                                       const std::string& what, double& wait_s, bool timed) {
  if (copier_->pending() && owner_ == owner && unit_ == unit) {
    const auto start = std::chrono::steady_clock::now();
    StatusOr<at::Tensor> device = copier_->Finish();
    if (timed && device.ok()) copier_->Synchronize();
    wait_s += Since(start);
    host_ = at::Tensor();
    if (!device.ok()) accountant_.Release(HostBytes(host));
    return device;
  }
  Drop();
  ORRERY_RETURN_IF_ERROR(accountant_.Reserve(HostBytes(host), what));
  const auto start = std::chrono::steady_clock::now();
  at::Tensor device = copier_->CopyNow(host);
  if (timed) copier_->Synchronize();
  wait_s += Since(start);
  return device;
}

Status ShardDevice::Prefetch(const void* owner, size_t unit, const at::Tensor& host,
                             const std::string& what) {
  if (copier_->pending()) return InternalError("a shard prefetch is already in flight");
  ORRERY_RETURN_IF_ERROR(accountant_.Reserve(HostBytes(host), what));
  owner_ = owner;
  unit_ = unit;
  host_ = host;
  copier_->Start(host);
  return OkStatus();
}

void ShardDevice::Drop() {
  if (!copier_->pending()) return;
  (void)copier_->Finish();
  accountant_.Release(HostBytes(host_));
  host_ = at::Tensor();
}

}  // namespace orrery::parallel::internal
