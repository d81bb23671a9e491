// The persistent decode step's block-level barriers alone (named_barriers.h).
#include "tests/cuda/named_barriers.h"

#include "kernels_cuda/block_reduce.cuh"
#include "kernels_cuda/cuda_check.h"

namespace parity::test {
namespace {

__global__ void skipped_named_barrier_kernel(float* out, int rounds) {
  __shared__ float scratch[8], handoff[128];
  const int t = static_cast<int>(threadIdx.x), warp = t / 32;
  for (int r = 0; r < rounds; ++r) {
    float v = static_cast<float>(t + r);
    if (t < 128) {
      handoff[t] = static_cast<float>(t + r);
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
      v += handoff[127 - t];
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
    }
    if (warp < 7) asm volatile("bar.sync 2, 224;\n" ::: "memory");
    __syncthreads();
    const float s = cuda::block_sum<256>(v, scratch);
    if (t == 224) out[static_cast<std::size_t>(r) * gridDim.x + blockIdx.x] = s;
  }
}

}  // namespace

void skipped_named_barrier_sums(float* out, int rounds, int blocks, cudaStream_t s) {
  skipped_named_barrier_kernel<<<blocks, 256, 0, s>>>(out, rounds);
  cuda::check_launch("skipped_named_barrier_sums");
}

}  // namespace parity::test
