#pragma once
// The device collective that goes through the host: each rank copies its partial sum to pinned host
// memory, the ranks meet in the host collective (model::InProcessCollective, the CPU ranks' own),
// which sums in rank order exactly as on the CPU, and each rank copies the sum back. Works for any
// placement, ranks sharing one GPU included (NCCL refuses that), and gives the CPU rule's bits by
// construction; it costs two copies and a stream sync per sum, so a pass cannot be a CUDA graph.
#include <vector>

#include "backend_cuda/device_collective.h"
#include "kernels_cuda/pinned_buffer.h"
#include "model/collective.h"

namespace parity::backend_cuda {

class HostStagedCollective : public DeviceCollective {
 public:
  // host: the ranks' host collective; it must outlive this one.
  explicit HostStagedCollective(model::Collective* host);
  int size() const override { return host_->size(); }
  const char* name() const override { return "host-staged"; }
  void sum_partials(int rank, float* partial, std::size_t n, cudaStream_t s) override;

 private:
  model::Collective* host_;
  std::vector<cuda::PinnedBuffer<float>> staging_;  // one per rank, touched only by its rank's thread
};

}  // namespace parity::backend_cuda
