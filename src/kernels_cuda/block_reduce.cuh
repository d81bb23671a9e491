#pragma once
// One fixed summation tree for a block of kThreads threads: a butterfly within each warp (lane a
// and lane a^m add the same two values, so every lane ends with the same bits), then the warp sums
// in ascending warp order. The tree depends only on kThreads, which every caller fixes.
namespace parity::cuda {

template <int kThreads>
__device__ float block_sum(float v, float* scratch /* kThreads/32 floats */) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  for (int m = 16; m >= 1; m /= 2) v = v + __shfl_xor_sync(0xffffffffu, v, m);
  constexpr int kWarps = kThreads / 32;
  if constexpr (kWarps == 1) {
    return v;
  } else {
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float s = scratch[0];
    for (int w = 1; w < kWarps; ++w) s = s + scratch[w];
    __syncthreads();  // scratch may be reused by the caller's next reduction
    return s;
  }
}

}  // namespace parity::cuda
