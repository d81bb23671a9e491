// The replay ring's writer after the walk: one block a (sequence, head) (ssd_ring.cuh says what it writes).
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_ring.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kRingThreads = 256;

__global__ void __launch_bounds__(kRingThreads)
    ring_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, SsdState st) {
  write_ring<kRingThreads>(sh, g, p, xbc, ld, dt, st, blockIdx.x, blockIdx.y, 0, sh.P, true, threadIdx.x);
}

}  // namespace

void launch_ring(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                 const SsdState& st, cudaStream_t s) {
  if (!g.exact || p.num_seqs <= 0) return;
  ring_kernel<<<dim3(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H)), kRingThreads, 0, s>>>(
      sh, g, p, xbc, ld, dt, st);
  check_launch("ssd ring");
}

}  // namespace parity::cuda::ssd
