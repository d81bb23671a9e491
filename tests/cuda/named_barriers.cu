// The persistent decode step's block-level barriers alone (named_barriers.h).
#include "tests/cuda/named_barriers.h"

#include "kernels_cuda/block_reduce.cuh"
#include "kernels_cuda/cuda_check.h"

namespace parity::test {
namespace {

__global__ void named_barrier_kernel(float* out, int rounds, int pattern) {
  __shared__ float scratch[8], handoff[128];
  const int t = static_cast<int>(threadIdx.x), warp = t / 32;
  const bool has_handoff = (pattern & (kHalfBlockHandoff | kWholeBlockHandoff)) != 0;
  for (int r = 0; r < rounds; ++r) {
    float v = static_cast<float>(t + r);
    if (has_handoff) {
      if (t < 128) handoff[t] = static_cast<float>(t + r);
      if (pattern & kWholeBlockHandoff) {
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
      } else if (t < 128) {
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
      }
      if (t < 128) v += handoff[127 - t];
      if (pattern & kWholeBlockHandoff) {
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
      } else if (t < 128) {
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
      }
    }
    if ((pattern & kSevenWarpBarrier) && warp < 7) asm volatile("bar.sync 2, 224;\n" ::: "memory");
    __syncthreads();
    const float s = cuda::block_sum<256>(v, scratch);
    if (t == 224) out[static_cast<std::size_t>(r) * gridDim.x + blockIdx.x] = s;
  }
}

}  // namespace

void named_barrier_sums(float* out, int rounds, int blocks, int pattern, cudaStream_t s) {
  named_barrier_kernel<<<blocks, 256, 0, s>>>(out, rounds, pattern);
  cuda::check_launch("named_barrier_sums");
}

}  // namespace parity::test
