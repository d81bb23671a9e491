// Row-wise kernels: embedding, RMSNorm, gated RMSNorm, residual add. One block per row (or per
// row and group); the reduction is block_sum's fixed tree over a fixed 256 threads.
//
// The norms can also do the work of the launches around them (issue 11: a decode step is dozens of
// launches of a few µs): rmsnorm_kernel adds the residual branch first (add_inplace's or
// add_scaled_inplace's operation, element for element) and both norms can write the bf16 copy of
// their output that the next GEMM would otherwise make in a pre-pass. Every element still gets the
// unfused sequence of fp32 operations: thread i owns elements i, i + 256, ... in the add, the sum of
// squares and the scaling alike, so the fused add is the value the sum reads, and the bf16 copy is
// __float2bfloat16_rn of the stored fp32 value, the pre-pass's round to nearest even.
#include <atomic>
#include <cmath>

#include <cuda_bf16.h>

#include "kernels/math.h"
#include "kernels_cuda/block_reduce.cuh"
#include "kernels_cuda/norm_row.cuh"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/programmatic_launch.cuh"

namespace parity::cuda {
namespace {

using norm_row::bf16_bits;
using norm_row::gate;
using norm_row::gate_factor;
using norm_row::gated_scaled_by;
using norm_row::inv_rms;
using norm_row::kHeld;
using norm_row::kHeldMaxWidth;
using norm_row::kRowThreads;
using norm_row::scaled_by;

__device__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__global__ void embed_kernel(const uint16_t* table, const int32_t* tokens, int D, float* out) {
  const int t = blockIdx.x;
  const uint16_t* src = table + static_cast<std::size_t>(tokens[t]) * D;
  float* dst = out + static_cast<std::size_t>(t) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) dst[i] = bf16_bits_to_float(src[i]);
}

// Σ v(i)² over i < n: each thread its elements ascending with fmaf, then block_sum's tree.
template <class Value>
__device__ float sumsq_of(int n, Value v) {
  float a = 0.0f;
  for (int i = threadIdx.x; i < n; i += kRowThreads) {
    const float x = v(i);
    a = fmaf(x, x, a);
  }
  __shared__ float scratch[kRowThreads / 32];
  return block_sum<kRowThreads>(a, scratch);
}
__device__ float sumsq(const float* x, int n) { return sumsq_of(n, [&](int i) { return x[i]; }); }


// The residual branch's add: add_kernel's x + y, or add_scaled_kernel's x + y·m (product rounded).
__device__ float residual_add(float x, float y, float m, bool scaled) { return scaled ? x + y * m : x + y; }

// Two forms of each norm, the same operations in the same order (the per-element helpers below;
// each thread's sum of squares over its elements in ascending order, then block_sum): the held form
// keeps a thread's elements in registers, so its loads issue together and the row is read once; the
// loop form walks rows too wide for that (more than kHeld elements a thread).
std::atomic<bool> force_loop{false};
bool held(int width) { return width <= kHeldMaxWidth && !force_loop.load(); }


__device__ void store(float* out, uint16_t* out16, int i, float v) {
  if (out) out[i] = v;
  if (out16) out16[i] = bf16_bits(v);
}

// The branch a residual add adds: y, or y + y2 (add_inplace(y, y2)'s value) when there is a second.
__device__ float branch(const float* y, const float* y2, std::size_t i) { return y2 ? y[i] + y2[i] : y[i]; }

// x = residual_add(x, branch(add, add2)) first when add is not null (written back); out16: the bf16
// copy, or null.
__global__ void rmsnorm_kernel(float* x, const float* add, const float* add2, float mult, bool scaled, int dim,
                               const float* w, float eps, float* out, uint16_t* out16, bool release_first) {
  wait_and_release(release_first);  // launched programmatically (launch_after_prior)
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * dim;
  float* xr = x + off;
  if (add) {  // each thread adds the elements sumsq then reads, its own
    for (int i = threadIdx.x; i < dim; i += kRowThreads)
      xr[i] = residual_add(xr[i], branch(add, add2, off + i), mult, scaled);
  }
  const float r = inv_rms(sumsq(xr, dim), dim, eps);
  for (int i = threadIdx.x; i < dim; i += kRowThreads)
    store(out ? out + off : nullptr, out16 ? out16 + off : nullptr, i, scaled_by(xr[i], r, w[i]));
}

// The held form of rmsnorm_kernel (dim <= kHeldMaxWidth).
__global__ void rmsnorm_held_kernel(float* x, const float* add, const float* add2, float mult, bool scaled, int dim,
                                    const float* w, float eps, float* out, uint16_t* out16, bool release_first) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * dim;
  const int t = threadIdx.x;
  float v[kHeld], wk[kHeld];
  // The norm's weights before the wait: no kernel writes them.
#pragma unroll
  for (int k = 0; k < kHeld; ++k) wk[k] = t + k * kRowThreads < dim ? w[t + k * kRowThreads] : 0.0f;
  wait_and_release(release_first);  // launched programmatically (launch_after_prior)
#pragma unroll
  for (int k = 0; k < kHeld; ++k) v[k] = t + k * kRowThreads < dim ? x[off + t + k * kRowThreads] : 0.0f;
  if (add) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k)
      if (t + k * kRowThreads < dim)
        v[k] = residual_add(v[k], branch(add, add2, off + t + k * kRowThreads), mult, scaled);
#pragma unroll
    for (int k = 0; k < kHeld; ++k)
      if (t + k * kRowThreads < dim) x[off + t + k * kRowThreads] = v[k];
  }
  norm_row::rms_norm_held(v, wk, dim, eps,
                          [&](int i, float o) { store(out ? out + off : nullptr, out16 ? out16 + off : nullptr, i, o); });
}

struct GatedRow {
  const float *y, *z, *w;
  float* o;
  uint16_t* o16;
};
__device__ GatedRow gated_row(const float* y, const float* z, int ldz, int dim, int group, const float* w, float* out,
                              uint16_t* out16) {
  const int row = blockIdx.x, g = blockIdx.y;
  const std::size_t off = static_cast<std::size_t>(row) * dim + static_cast<std::size_t>(g) * group;
  return {y + off, z + static_cast<std::size_t>(row) * ldz + static_cast<std::size_t>(g) * group,
          w + static_cast<std::size_t>(g) * group, out ? out + off : nullptr, out16 ? out16 + off : nullptr};
}

__global__ void gated_rmsnorm_kernel(const float* y, const float* z, int ldz, int dim, int group, const float* w,
                                     float eps, bool norm_before_gate, float* out, uint16_t* out16, bool release_first,
                                     bool activated) {
  wait_and_release(release_first);  // launched programmatically (launch_after_prior)
  const GatedRow g = gated_row(y, z, ldz, dim, group, w, out, out16);
  if (norm_before_gate) {
    const float r = inv_rms(sumsq(g.y, group), group, eps);
    for (int i = threadIdx.x; i < group; i += kRowThreads)
      store(g.o, g.o16, i, gated_scaled_by(g.y[i], r, g.w[i], gate_factor(g.z[i], activated)));
  } else if (g.o) {
    for (int i = threadIdx.x; i < group; i += kRowThreads) g.o[i] = gate(g.y[i], gate_factor(g.z[i], activated));
    __syncthreads();
    const float r = inv_rms(sumsq(g.o, group), group, eps);
    for (int i = threadIdx.x; i < group; i += kRowThreads) store(g.o, g.o16, i, scaled_by(g.o[i], r, g.w[i]));
  } else {  // the copy alone: the gated values again where out would have held them (the same floats)
    auto gated = [&](int i) { return gate(g.y[i], gate_factor(g.z[i], activated)); };
    const float r = inv_rms(sumsq_of(group, gated), group, eps);
    for (int i = threadIdx.x; i < group; i += kRowThreads) store(nullptr, g.o16, i, scaled_by(gated(i), r, g.w[i]));
  }
}

// The held form of gated_rmsnorm_kernel (group <= kHeldMaxWidth).
__global__ void gated_rmsnorm_held_kernel(const float* y, const float* z, int ldz, int dim, int group, const float* w,
                                          float eps, bool norm_before_gate, float* out, uint16_t* out16,
                                          bool release_first, bool activated) {
  const GatedRow g = gated_row(y, z, ldz, dim, group, w, out, out16);
  float wk[kHeld];
  norm_row::load_held_weights(g.w, group, wk);  // before the wait: no kernel writes them
  wait_and_release(release_first);              // launched programmatically (launch_after_prior)
  norm_row::gated_norm_held(
      g.y, g.z, group, wk, eps, norm_before_gate, [&](int i, float v) { store(g.o, g.o16, i, v); }, activated);
}

__global__ void add_kernel(float* x, const float* y, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = residual_add(x[i], y[i], 1.0f, false);
}

__global__ void add_scaled_kernel(float* x, const float* y, float m, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = residual_add(x[i], y[i], m, true);
}

__global__ void scale_kernel(float* x, float m, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * m;
}

__global__ void divide_kernel(float* x, float d, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] / d;
}

__global__ void silu_kernel(float* x, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = kernels::silu_f(x[i]);
}

__global__ void gather_kernel(const float* x, int ld, const int32_t* rows, int cols, float* out) {
  const float* src = x + static_cast<std::size_t>(rows[blockIdx.x]) * ld;
  float* dst = out + static_cast<std::size_t>(blockIdx.x) * cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = src[i];
}

__global__ void zero_slices_kernel(unsigned char* base, std::size_t slice, std::size_t layer_bytes,
                                   const int32_t* slots) {
  unsigned char* p = base + blockIdx.x * layer_bytes + static_cast<std::size_t>(slots[blockIdx.y]) * slice;
  for (std::size_t i = threadIdx.x; i < slice; i += blockDim.x) p[i] = 0;
}

// Whether the norms let the next kernel be scheduled before their own wait (ops.h's kGemmEarlyNorms: the
// GEMM after a norm then requests its weights while the kernel before the norm runs). Only above 16 rows:
// at one row (session 11, mamba2-2.7b) the step was 3-4 % slower with it (in_proj's blocks, waiting
// beside out_proj's mma.sync chains, took their SMs' issue slots), at 64 rows 2-3 % faster.
// With kGemmEarlyPark (the GEMM's waiting warps sleep) at every row count.
bool release_first(int rows) {
  const unsigned f = gemm_early_flags();
  return (f & kGemmEarlyNorms) != 0 && (rows > 16 || (f & kGemmEarlyPark) != 0);
}

unsigned blocks_for(std::size_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

void embed_bf16(const uint16_t* table, const int32_t* tokens, int T, int D, float* out, cudaStream_t s) {
  if (T <= 0) return;
  embed_kernel<<<T, kRowThreads, 0, s>>>(table, tokens, D, out);
  check_launch("embed");
}

void norms_force_loop_form(bool loop) { force_loop.store(loop); }

void rmsnorm(const float* x, int rows, int dim, const float* w, float eps, float* out, cudaStream_t s) {
  if (rows <= 0) return;
  // Without an add the kernel only reads x (out may alias it).
  launch_after_prior(held(dim) ? rmsnorm_held_kernel : rmsnorm_kernel, dim3(rows), dim3(kRowThreads), 0, s, "rmsnorm",
                     const_cast<float*>(x), nullptr, nullptr, 1.0f, false, dim, w, eps, out, nullptr, release_first(rows));
}

void add_rmsnorm(float* x, const ResidualAdd& add, int rows, int dim, const float* w, float eps, float* out,
                 uint16_t* out16, cudaStream_t s) {
  if (rows <= 0) return;
  if (out == nullptr && out16 == nullptr) throw Error("add_rmsnorm: neither an output nor its bf16 copy");
  launch_after_prior(held(dim) ? rmsnorm_held_kernel : rmsnorm_kernel, dim3(rows), dim3(kRowThreads), 0, s,
                     "add_rmsnorm", x, add.y, add.y2, add.mult, add.scaled, dim, w, eps, out, out16, release_first(rows));
}

void gated_rmsnorm(const float* y, const float* z, int ldz, int rows, int dim, int group, const float* w, float eps,
                   bool norm_before_gate, float* out, cudaStream_t s, uint16_t* out16, bool z_activated) {
  if (rows <= 0) return;
  if (group <= 0 || dim % group != 0) throw Error("gated_rmsnorm: group does not divide the width");
  if (out == nullptr && out16 == nullptr) throw Error("gated_rmsnorm: neither an output nor its bf16 copy");
  launch_after_prior(held(group) ? gated_rmsnorm_held_kernel : gated_rmsnorm_kernel, dim3(rows, dim / group),
                     dim3(kRowThreads), 0, s, "gated_rmsnorm", y, z, ldz, dim, group, w, eps, norm_before_gate, out,
                     out16, release_first(rows) || (gemm_early_flags() & kGemmEarlyGatedNormFirst) != 0, z_activated);
}

void add_inplace(float* x, const float* y, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, y, n);
  check_launch("add");
}

void add_scaled_inplace(float* x, const float* y, float m, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_scaled_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, y, m, n);
  check_launch("add_scaled");
}

void scale_inplace(float* x, float m, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, m, n);
  check_launch("scale");
}

void divide_inplace(float* x, float d, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  divide_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, d, n);
  check_launch("divide");
}

void silu_inplace(float* x, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  silu_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x, n);
  check_launch("silu");
}

void gather_rows(const float* x, int ld, const int32_t* rows, int R, int cols, float* out, cudaStream_t s) {
  if (R <= 0) return;
  gather_kernel<<<R, kRowThreads, 0, s>>>(x, ld, rows, cols, out);
  check_launch("gather_rows");
}

void zero_slot_slices(void* base, std::size_t slice_bytes, std::size_t layer_bytes, int layers, const int32_t* slots,
                      int n, cudaStream_t s) {
  if (n <= 0 || layers <= 0 || slice_bytes == 0) return;
  zero_slices_kernel<<<dim3(layers, n), 256, 0, s>>>(static_cast<unsigned char*>(base), slice_bytes, layer_bytes,
                                                     slots);
  check_launch("zero_slot_slices");
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace parity::cuda
