#include "backend_cuda/nccl_collective.h"

#include "backend_cuda/device_guard.h"
#include "common/error.h"
#include "kernels_cuda/ops.h"

namespace parity::backend_cuda {

NcclCollective::NcclCollective(std::shared_ptr<const nccl::Library> lib, const std::vector<int>& devices)
    : lib_(std::move(lib)), ranks_(devices.size()) {
  for (std::size_t r = 0; r < devices.size(); ++r) ranks_[r].device = devices[r];
  nccl::UniqueId id{};
  lib_->check(lib_->get_unique_id(&id), "ncclGetUniqueId");
  // One process initialises every rank: the calls must be grouped, or the first would wait for the
  // others forever.
  DeviceGuard keep(devices.empty() ? 0 : devices[0]);
  lib_->check(lib_->group_start(), "ncclGroupStart");
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    cuda::cuda_check(cudaSetDevice(ranks_[r].device), "cudaSetDevice");
    lib_->check(lib_->comm_init_rank(&ranks_[r].comm, size(), id, static_cast<int>(r)), "ncclCommInitRank");
  }
  lib_->check(lib_->group_end(), "ncclGroupEnd (communicator initialisation)");
}

NcclCollective::~NcclCollective() {
  for (Rank& r : ranks_) {
    if (cudaSetDevice(r.device) != cudaSuccess) continue;
    r.gathered.reset();
    if (r.comm && !aborted_) lib_->comm_destroy(r.comm);  // an aborted communicator is already freed
  }
}

void NcclCollective::sum_partials(int rank, float* partial, std::size_t n, cudaStream_t s) {
  if (aborted_)
    throw Error("tensor parallelism: the NCCL communicators were aborted after a rank failed; load the model again");
  if (n == 0) return;
  Rank& r = ranks_[static_cast<std::size_t>(rank)];
  // Grows only (cudaFree waits for the device, so the old buffer is no longer read).
  r.gathered.resize(n * ranks_.size());
  lib_->check(lib_->all_gather(partial, r.gathered.data(), n, nccl::kFloat32, r.comm, s), "ncclAllGather");
  cuda::sum_rank_partials(r.gathered.data(), size(), n, partial, s);
}

void NcclCollective::abort() {
  if (aborted_.exchange(true)) return;
  for (Rank& r : ranks_)
    if (r.comm) lib_->comm_abort(r.comm);
}

}  // namespace parity::backend_cuda
