#pragma once
// The norms' per-element operations and the held form of the gated RMSNorm of one row group, as
// device code both rows.cu's kernels and out_proj's fused kernel (gemm_swap_ab_mma.cuh's GNORM) run:
// one copy, one set of bits. A row's reduction is block_sum's fixed tree over kRowThreads threads,
// thread t owning elements t, t + 256, ... in the sum of squares and the scaling alike.
#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/math.h"
#include "kernels_cuda/block_reduce.cuh"

namespace parity::cuda::norm_row {

constexpr int kRowThreads = 256;
// The held form keeps a thread's elements in registers (their loads issue together): rows up to
// kHeld · kRowThreads wide.
constexpr int kHeld = 24;
constexpr int kHeldMaxWidth = kHeld * kRowThreads;

// The same scalar tail as the CPU (kernels/norm.cpp): mean, add eps, sqrt, reciprocal.
__device__ inline float inv_rms(float s, int n, float eps) { return 1.0f / sqrtf(s / static_cast<float>(n) + eps); }
// The GEMM pre-pass's rounding (gemm_mma.cu round_to_bf16_kernel: __floats2bfloat162_rn, which
// rounds each half as __float2bfloat16_rn does), as raw bits.
__device__ inline uint16_t bf16_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
__device__ inline float scaled_by(float v, float r, float w) { return (v * r) * w; }
// The gate's factor silu(z). A decode pass's conv launch may have evaluated it already (ops.h's
// GateJob: then `activated`, and z holds silu(z)): the same float either way, so the same bits.
__device__ inline float gate_factor(float z, bool activated) { return activated ? z : kernels::silu_f(z); }
__device__ inline float gate(float y, float s) { return y * s; }
__device__ inline float gated_scaled_by(float y, float r, float w, float s) { return scaled_by(y, r, w) * s; }

// The weights thread threadIdx.x scales by (0 past the group): loaded by the caller before its wait
// (no kernel writes them).
__device__ inline void load_held_weights(const float* w, int group, float (&wk)[kHeld]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int k = 0; k < kHeld; ++k) wk[k] = t + k * kRowThreads < group ? w[t + k * kRowThreads] : 0.0f;
}

// 1 / rms of a row (or group) of `dim` values held in registers, thread threadIdx.x's elements v[k]
// at t + k·kRowThreads: fmaf(v, v, a) over k ascending, then block_sum's tree, then inv_rms. Every
// thread of a kRowThreads-thread block calls it (block_sum's barriers).
__device__ inline float held_inv_rms(const float (&v)[kHeld], int dim, float eps) {
  const int t = threadIdx.x;
  float a = 0.0f;
#pragma unroll
  for (int k = 0; k < kHeld; ++k)
    if (t + k * kRowThreads < dim) a = fmaf(v[k], v[k], a);
  __shared__ float scratch[kRowThreads / 32];
  return inv_rms(block_sum<kRowThreads>(a, scratch), dim, eps);
}

// The RMSNorm of one row held in registers (dim <= kHeldMaxWidth; v: thread threadIdx.x's elements,
// the residual add done): rows.cu's rmsnorm_held_kernel and the persistent decode step
// (persistent_decode.cu). out(i, value) for each of the thread's elements.
template <class Out>
__device__ inline void rms_norm_held(float (&v)[kHeld], const float (&wk)[kHeld], int dim, float eps, Out out) {
  const int t = threadIdx.x;
  const float r = held_inv_rms(v, dim, eps);
#pragma unroll
  for (int k = 0; k < kHeld; ++k)
    if (t + k * kRowThreads < dim) v[k] = scaled_by(v[k], r, wk[k]);
#pragma unroll
  for (int k = 0; k < kHeld; ++k)
    if (t + k * kRowThreads < dim) out(t + k * kRowThreads, v[k]);
}

// The gated RMSNorm of one group (y, z: its first elements; group <= kHeldMaxWidth), held form:
// out(i, value) for each of thread threadIdx.x's elements i. Every thread of a kRowThreads-thread
// block calls it (block_sum's barriers). activated: z holds silu(z) (gate_factor).
template <class Out>
__device__ inline void gated_norm_held(const float* y, const float* z, int group, const float (&wk)[kHeld], float eps,
                                       bool norm_before_gate, Out out, bool activated = false) {
  const int t = threadIdx.x;
  float v[kHeld], zk[kHeld];
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    const int i = t + k * kRowThreads;
    v[k] = i < group ? y[i] : 0.0f;
    zk[k] = i < group ? z[i] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kHeld; ++k)
    if (t + k * kRowThreads < group) zk[k] = gate_factor(zk[k], activated);
  if (!norm_before_gate) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k)
      if (t + k * kRowThreads < group) v[k] = gate(v[k], zk[k]);
  }
  const float r = held_inv_rms(v, group, eps);
#pragma unroll
  for (int k = 0; k < kHeld; ++k)
    if (t + k * kRowThreads < group)
      v[k] = norm_before_gate ? gated_scaled_by(v[k], r, wk[k], zk[k]) : scaled_by(v[k], r, wk[k]);
#pragma unroll
  for (int k = 0; k < kHeld; ++k)
    if (t + k * kRowThreads < group) out(t + k * kRowThreads, v[k]);
}

}  // namespace parity::cuda::norm_row
