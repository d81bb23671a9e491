#pragma once
// The device collective over NCCL, for ranks with a GPU each: ncclAllGather of the partial sums into a
// per-rank buffer [tp][n], then cuda::sum_rank_partials adds them in rank order on the device — the
// CPU rule, never ncclAllReduce, whose order is the library's (it may change with the algorithm,
// channel count or version). One communicator per rank, all made by this process (one thread per rank
// calls into its own). NCCL refuses two ranks on one GPU: with fewer GPUs than ranks the backend uses
// host_staged_collective.h instead (cuda_tensor_parallel.cpp).
#include <atomic>
#include <memory>
#include <vector>

#include "backend_cuda/device_collective.h"
#include "backend_cuda/nccl_library.h"
#include "kernels_cuda/device_buffer.h"

namespace parity::backend_cuda {

class NcclCollective : public DeviceCollective {
 public:
  // Rank r's communicator on devices[r] (distinct devices). parity::Error from NCCL's initialisation.
  NcclCollective(std::shared_ptr<const nccl::Library> lib, const std::vector<int>& devices);
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int size() const override { return static_cast<int>(ranks_.size()); }
  const char* name() const override { return "nccl"; }
  void sum_partials(int rank, float* partial, std::size_t n, cudaStream_t s) override;
  // Aborts every communicator (a rank failed mid-pass; its peers may wait inside NCCL for it). The
  // collective is then unusable: later sums throw, and the model must be loaded again.
  void abort() override;

  const std::string& library_path() const { return lib_->path; }

 private:
  struct Rank {
    int device = 0;
    nccl::Comm comm = nullptr;
    cuda::DeviceBuffer<float> gathered;  // [tp][n] on the rank's device
  };
  std::shared_ptr<const nccl::Library> lib_;
  std::vector<Rank> ranks_;
  std::atomic<bool> aborted_{false};
};

}  // namespace parity::backend_cuda
