// Decode rows over long contexts. Only the value accumulation of the contract (kernels/attention.h)
// is a chain over key blocks; a key's score, a block's max, the running max (a prefix max: max is
// exact, so any association gives the same bits), the weights e and each block's 16-lane sum are
// each a fixed computation of their own. So for a few long decode rows, where one block per
// (row, head) would leave the GPU idle, four kernels share the work out:
//   scores   one block per 128 keys of a (row, head): the fmaf chain over d from +0, times scale;
//            each half-warp's block max (+ 0.0f)                      → scratch e, m
//   prefix   one block per (row, head): m' = running max over the blocks, α = exp_f(m'_{b-1} − m'_b)
//   weights  one block per 128 keys: e = exp_f(s − m') (+0 past the row), shfl_down 8, 4, 2, 1
//            block sums: the contract's tree                          → scratch e, bs
//   values   one block per (row, head, 32 dimensions): warp 0 walks the blocks in order,
//            l = l·α then + bs, acc = acc·α then the fmaf chain, while the other warps' async
//            copies stage the next 128 keys' values and weights in shared memory.
// Every value is the operation the row kernel performs for that row, in the same order: the
// output has the same bits as the row kernel, the tiled kernel and the CPU.
#include <cuda_pipeline.h>

#include "kernels_cuda/attention_device.cuh"
#include "kernels_cuda/cuda_check.h"

namespace parity::cuda::attn {
namespace {

using kernels::exp_f;

constexpr int kThreads = 128;  // keys per block in the scores and weights kernels
constexpr int kPrefixThreads = 256;
constexpr int kDims = 32;        // dimensions per values block (one warp's chains)
constexpr int kStageKeys = 128;  // keys staged per step of the values kernel
constexpr int kStageBlocks = kStageKeys / kKb;

// A long row's place in the pass and in the scratch: per head h, key block b,
//   e[(h·nb + b)·16 + k]  the score, then the weight, of key 16b + k
//   st[(h·nb + b)·3 + i]  i = 0: the block max, then the running max m'; 1: α; 2: the block sum
struct LongRow {
  int r;
  int seq;
  int64_t pos, nb;
  float* e;
  float* st;
};

__device__ LongRow long_row(const PassSeqs& p, const AttnWork& w, int i, int num_heads) {
  LongRow L;
  L.r = w.long_rows[2 * i];
  L.pos = row_position(p, L.r, &L.seq);
  L.nb = L.pos / kKb + 1;
  L.e = w.scratch + w.long_rows[2 * i + 1];
  L.st = L.e + static_cast<int64_t>(num_heads) * L.nb * kKb;
  return L;
}

__global__ void __launch_bounds__(kThreads) scores_kernel(Geometry G, int num_heads, float scale, const float* q,
                                                          int ldq, PassSeqs p, AttnWork w, KvTables t,
                                                          const float* kc) {
  const LongRow L = long_row(p, w, blockIdx.z, num_heads);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kThreads;
  if (c0 > L.pos) return;  // the whole block: past this row's keys
  __shared__ float qs[kMaxHd];
  const int h = blockIdx.y, tid = threadIdx.x, hd = G.head_dim, bs = G.block_size;
  const int g = h / (num_heads / G.kv_heads);
  const float* qr = q + static_cast<std::size_t>(L.r) * ldq + static_cast<std::size_t>(h) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = qr[d];
  __syncthreads();
  const int64_t j = c0 + tid, kb = j / kKb;
  const bool valid = j <= L.pos;
  float sc = -INFINITY;
  if (valid) {
    const int32_t* table = t.tables + static_cast<std::size_t>(L.seq) * t.stride;
    const float* kp = kc + table[j / bs] * G.block_floats + static_cast<int64_t>(g) * hd * bs + j % bs;
    float a = 0.0f;
    for (int d = 0; d < hd; ++d) a = fmaf(qs[d], kp[static_cast<int64_t>(d) * bs], a);
    sc = a * scale;
  }
  float mx = sc;
  for (int o = kKb / 2; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (kb < L.nb) {
    const int64_t hb = static_cast<int64_t>(h) * L.nb + kb;
    if (valid) L.e[hb * kKb + j % kKb] = sc;
    if (tid % kKb == 0) L.st[hb * 3] = mx + 0.0f;
  }
}

// The running max in three steps: each thread's segment of blocks, an exclusive scan of the
// segments (thread 0), the segment again from its carried-in max.
__global__ void __launch_bounds__(kPrefixThreads) prefix_kernel(PassSeqs p, AttnWork w, int num_heads) {
  const LongRow L = long_row(p, w, blockIdx.y, num_heads);
  float* st = L.st + static_cast<int64_t>(blockIdx.x) * L.nb * 3;
  __shared__ float seg[kPrefixThreads];
  const int tid = threadIdx.x;
  const int64_t per = (L.nb + kPrefixThreads - 1) / kPrefixThreads;
  const int64_t b0 = tid * per, b1 = b0 + per < L.nb ? b0 + per : L.nb;
  float run = -INFINITY;
  for (int64_t b = b0; b < b1; ++b) run = st[b * 3] > run ? st[b * 3] : run;
  seg[tid] = run;
  __syncthreads();
  if (tid == 0) {
    float carry = -INFINITY;
    for (int i = 0; i < kPrefixThreads; ++i) {
      const float v = seg[i];
      seg[i] = carry;
      carry = v > carry ? v : carry;
    }
  }
  __syncthreads();
  float m = seg[tid];
  for (int64_t b = b0; b < b1; ++b) {
    const float mn = next_max(b, m, st[b * 3]);
    st[b * 3 + 1] = rescale(b, m, mn);
    st[b * 3] = mn;
    m = mn;
  }
}

__global__ void __launch_bounds__(kThreads) weights_kernel(PassSeqs p, AttnWork w, int num_heads) {
  const LongRow L = long_row(p, w, blockIdx.z, num_heads);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kThreads;
  if (c0 > L.pos) return;
  const int64_t j = c0 + threadIdx.x, kb = j / kKb, hb = static_cast<int64_t>(blockIdx.y) * L.nb + kb;
  float e = 0.0f;
  if (j <= L.pos) e = exp_f(L.e[hb * kKb + j % kKb] - L.st[hb * 3]);
  float sum = e;
  for (int o = kKb / 2; o >= 1; o /= 2) sum = sum + __shfl_down_sync(0xffffffffu, sum, o);
  if (kb < L.nb) {
    L.e[hb * kKb + j % kKb] = e;
    if (threadIdx.x % kKb == 0) L.st[hb * 3 + 2] = sum;
  }
}

__global__ void __launch_bounds__(kThreads) values_kernel(Geometry G, int num_heads, PassSeqs p, AttnWork w,
                                                          KvTables t, const float* vc, float* out, int ldo) {
  const LongRow L = long_row(p, w, blockIdx.z, num_heads);
  const int h = blockIdx.y, tid = threadIdx.x, hd = G.head_dim, bs = G.block_size;
  const int d0 = blockIdx.x * kDims;
  const int g = h / (num_heads / G.kv_heads);
  const int32_t* table = t.tables + static_cast<std::size_t>(L.seq) * t.stride;
  const float* vg = vc + static_cast<int64_t>(g) * bs * hd;
  const float* eh = L.e + static_cast<int64_t>(h) * L.nb * kKb;
  const float* sh = L.st + static_cast<int64_t>(h) * L.nb * 3;
  __shared__ float vs[2][kStageKeys][kDims];
  __shared__ float es[2][kStageKeys];
  __shared__ float sts[2][kStageBlocks][3];
  const int64_t nkeys = L.pos + 1;
  const int64_t steps = (nkeys + kStageKeys - 1) / kStageKeys;
  const int dims = hd - d0 < kDims ? hd - d0 : kDims;
  // Stage step i into buffer i % 2: the values of its keys (this block's dimensions), their
  // weights and their blocks' stats, as 4-byte async copies spread over every thread.
  auto stage = [&](int64_t i) {
    const int buf = static_cast<int>(i % 2);
    const int64_t k0 = i * kStageKeys;
    for (int x = tid; x < kStageKeys * kDims; x += kThreads) {
      const int k = x / kDims, d = x % kDims;
      const int64_t j = k0 + k;
      if (j < nkeys && d < dims)
        __pipeline_memcpy_async(&vs[buf][k][d], vg + table[j / bs] * G.block_floats + (j % bs) * hd + d0 + d, 4);
    }
    if (tid < kStageKeys && k0 + tid < L.nb * kKb) __pipeline_memcpy_async(&es[buf][tid], eh + k0 + tid, 4);
    if (tid < kStageBlocks * 3) {
      const int64_t b = k0 / kKb + tid / 3;
      if (b < L.nb) __pipeline_memcpy_async(&sts[buf][tid / 3][tid % 3], sh + b * 3 + tid % 3, 4);
    }
    __pipeline_commit();
  };
  stage(0);
  float acc = 0.0f, l = 0.0f;
  for (int64_t i = 0; i < steps; ++i) {
    if (i + 1 < steps) stage(i + 1);
    __pipeline_wait_prior(i + 1 < steps ? 1 : 0);
    __syncthreads();  // every thread's copies of step i have landed
    if (tid < kDims) {
      const int buf = static_cast<int>(i % 2);
      const int64_t kb0 = i * kStageBlocks;
      for (int b = 0; b < kStageBlocks && kb0 + b < L.nb; ++b) {
        const int64_t kb = kb0 + b;
        const int c = keys_in_block(kb, L.pos);
        float a;
        if (kb == 0) {
          l = sts[buf][b][2];
          a = 0.0f;
        } else {
          const float al = sts[buf][b][1];
          l = l * al;
          l = l + sts[buf][b][2];
          a = acc * al;
        }
        for (int k = 0; k < c; ++k) a = fmaf(es[buf][b * kKb + k], vs[buf][b * kKb + k][tid], a);
        acc = a;
      }
    }
    __syncthreads();  // buffer i % 2 is free for step i + 2
  }
  if (tid < dims) out[static_cast<std::size_t>(L.r) * ldo + static_cast<std::size_t>(h) * hd + d0 + tid] = acc / l;
}

unsigned chunks(int64_t keys, int per) { return static_cast<unsigned>((keys + per - 1) / per); }

}  // namespace

void launch_split(const Geometry& G, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
                  const AttnWork& work, const KvTables& t, const float* kc, const float* vc, float* out, int ldo,
                  cudaStream_t s) {
  const unsigned nl = static_cast<unsigned>(work.num_long), nh = static_cast<unsigned>(num_heads);
  const dim3 per_key(chunks(work.long_max_keys, kThreads), nh, nl);
  scores_kernel<<<per_key, kThreads, 0, s>>>(G, num_heads, scale, q, ldq, p, work, t, kc);
  check_launch("attention split scores");
  prefix_kernel<<<dim3(nh, nl), kPrefixThreads, 0, s>>>(p, work, num_heads);
  check_launch("attention split prefix");
  weights_kernel<<<per_key, kThreads, 0, s>>>(p, work, num_heads);
  check_launch("attention split weights");
  values_kernel<<<dim3(chunks(G.head_dim, kDims), nh, nl), kThreads, 0, s>>>(G, num_heads, p, work, t, vc, out, ldo);
  check_launch("attention split values");
}

}  // namespace parity::cuda::attn
