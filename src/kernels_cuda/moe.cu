// Granite MoE on the GPU; the orders are kernels/moe.h's (see kernels_cuda/moe.h).
//
// Grouping tokens by expert without atomics: block e counts the (token, choice) entries routed
// to experts below e (its first grouped row) and then walks the entries in ascending order,
// placing its own with a ballot prefix count. Experts end up in id order and tokens ascending
// inside an expert, as the CPU's counting sort; nothing depends on thread timing. The grouped
// order does not reach any value anyway: the gemm's row bits do not depend on the row's place.
#include "kernels_cuda/moe.h"

#include <cuda_bf16.h>

#include "kernels/math.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/moe_device.cuh"

namespace parity::cuda {
namespace {

constexpr int kGroupThreads = 256;

// One thread per token: the CPU's top-k (moe_device.cuh), then softmax over the k values.
__global__ void topk_kernel(const float* logits, int T, int E, int k, int32_t* idx, float* gates) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* lg = logits + static_cast<std::size_t>(t) * E;
  int32_t* id = idx + static_cast<std::size_t>(t) * k;
  float* w = gates + static_cast<std::size_t>(t) * k;
  topk_insert(lg, E, k, id);
  const float m = lg[id[0]];
  float s = 0.0f;
  for (int j = 0; j < k; ++j) {
    w[j] = kernels::exp_f(lg[id[j]] - m);
    s = s + w[j];
  }
  for (int j = 0; j < k; ++j) w[j] = w[j] / s;
}

__global__ void swiglu_kernel(const float* gate_up, std::size_t n, int F, float* out, uint16_t* out16) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * F) return;
  const std::size_t r = i / F, c = i % F;
  const float* g = gate_up + r * 2 * F;
  const float v = kernels::silu_f(g[c]) * g[F + c];
  out[i] = v;
  if (out16) out16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Integer sum over the block (exact, so any tree is the same number).
__device__ int block_count(int v, int* scratch) {
  for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  int s = 0;
  for (int w = 0; w < kGroupThreads / 32; ++w) s += scratch[w];
  __syncthreads();
  return s;
}

__global__ void __launch_bounds__(kGroupThreads) group_kernel(const int32_t* idx, int n, int k, int E,
                                                              int32_t* offsets, int32_t* token, int32_t* row) {
  __shared__ int scratch[kGroupThreads / 32];
  const int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  int below = 0;
  for (int i = threadIdx.x; i < n; i += kGroupThreads) below += idx[i] < e;
  int base = block_count(below, scratch);
  if (threadIdx.x == 0) {
    offsets[e] = base;
    if (e == E - 1) offsets[E] = n;
  }
  for (int i0 = 0; i0 < n; i0 += kGroupThreads) {
    const int i = i0 + static_cast<int>(threadIdx.x);
    const bool mine = i < n && idx[i] == e;
    const unsigned ball = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) scratch[warp] = __popc(ball);
    __syncthreads();
    int before = base, total = 0;
    for (int w = 0; w < kGroupThreads / 32; ++w) {
      if (w < warp) before += scratch[w];
      total += scratch[w];
    }
    before += __popc(ball & ((1u << lane) - 1u));
    if (mine) {
      token[before] = i / k;
      row[i] = before;
    }
    base += total;
    __syncthreads();
  }
}

// out[t][d] = +0, then + gate_j · y_j[d] for j in the token's top-k order (products rounded).
__global__ void combine_kernel(const float* yg, int D, const int32_t* row, const float* gates, int k, float* out) {
  const std::size_t t = blockIdx.x;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int j = 0; j < k; ++j) o = o + gates[t * k + j] * yg[static_cast<std::size_t>(row[t * k + j]) * D + d];
    out[t * D + d] = o;
  }
}

}  // namespace

void router_topk_softmax(const float* logits, int T, int E, int k, int32_t* idx, float* gates, cudaStream_t s) {
  check_moe_routing(T, E, k, "cuda router_topk_softmax");
  if (T == 0) return;
  topk_kernel<<<moe_blocks(T, 128), 128, 0, s>>>(logits, T, E, k, idx, gates);
  check_launch("router_topk_softmax");
}

void swiglu(const float* gate_up, int n, int F, float* out, cudaStream_t s, uint16_t* out16) {
  if (n <= 0 || F <= 0) return;
  swiglu_kernel<<<moe_blocks(std::size_t(n) * F, 256), 256, 0, s>>>(gate_up, static_cast<std::size_t>(n), F, out,
                                                                    out16);
  check_launch("swiglu");
}

void MoeWorkspace::reserve(int T, int k, int E, int D, int F) {
  const std::size_t n = static_cast<std::size_t>(T) * k;
  offsets.resize(std::size_t(E) + 1);
  token.resize(n);
  row.resize(n);
  gates.resize(n);
  xg.resize(n * D);
  h.resize(n * 2 * F);
  a.resize(n * F);
  yg.resize(n * D);
}

void moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* idx, const float* gates,
                 MoeWorkspace& ws, float* out, cudaStream_t s) {
  const int E = w.experts, D = w.hidden, F = w.width;
  check_moe_routing(T, E, k, "cuda moe_experts");
  if (T == 0) return;
  const std::size_t n = static_cast<std::size_t>(T) * k;
  ws.reserve(T, k, E, D, F);
  group_kernel<<<E, kGroupThreads, 0, s>>>(idx, static_cast<int>(n), k, E, ws.offsets.data(), ws.token.data(),
                                           ws.row.data());
  check_launch("moe group");
  gather_rows(x, D, ws.token.data(), static_cast<int>(n), D, ws.xg.data(), s);
  // One launch per projection for every expert: the group sizes stay on the device (no host
  // round trip); a token names an expert at most once, so no group exceeds T rows.
  const int64_t in_stride = int64_t(2) * F * D, out_stride = int64_t(D) * F;
  const int rows = static_cast<int>(n);
  gemm_grouped(ws.xg.data(), D, ws.offsets.data(), E, T, D, w.w_in, w.wt, in_stride, 2 * F, ws.h.data(), 2 * F, s,
               rows);
  swiglu(ws.h.data(), rows, F, ws.a.data(), s);
  gemm_grouped(ws.a.data(), F, ws.offsets.data(), E, T, F, w.w_out, w.wt, out_stride, D, ws.yg.data(), D, s, rows);
  combine_kernel<<<T, 256, 0, s>>>(ws.yg.data(), D, ws.row.data(), gates, k, out);
  check_launch("moe combine");
}

}  // namespace parity::cuda
