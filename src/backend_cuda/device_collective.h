#pragma once
// What tensor-parallel GPU ranks exchange during a forward: the sum of a row-split projection's partial
// sums (Mamba out_proj, attention o_proj, the experts' and the shared MLP's down projections), on
// device memory in stream order. The rule is model::Collective's: every rank's partial [n] becomes
// ((p0 + p1) + p2) + … on every rank, an all-gather and a local add in rank order, never an
// all-reduce, so the bits depend only on the partials and exact mode holds (docs/tensor-parallel.md).
// Implementations: host_staged_collective.h (through pinned host memory; any placement, ranks sharing
// a GPU included) and nccl_collective.h (NCCL all-gather + the add on the device; one GPU per rank).
#include <cstddef>

#include <cuda_runtime_api.h>

namespace parity::backend_cuda {

class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "host-staged" or "nccl", for the device report
  // partial: n floats on the rank's GPU, written by work queued on s. The sum replaces it in s's
  // order. Every rank calls with the same n, in the same order, each from its own thread with its
  // device current.
  virtual void sum_partials(int rank, float* partial, std::size_t n, cudaStream_t s) = 0;
  // A rank failed mid-pass: release ranks that would wait for it (model::RankBackend::abort).
  virtual void abort() {}
};

// One GPU rank's place in its group, as its model's layers see it. size 1: the whole model on one
// GPU, and sum() does nothing.
struct DeviceRank {
  int rank = 0;
  int size = 1;
  int device = 0;  // the CUDA device the rank's weights, state and stream live on
  DeviceCollective* collective = nullptr;
  void sum(float* partial, std::size_t n, cudaStream_t s) const {
    if (size > 1) collective->sum_partials(rank, partial, n, s);
  }
};

}  // namespace parity::backend_cuda
