// The prefill attention kernel: one block of 128 threads per (tile of up to 16 consecutive rows of
// one sequence, query head). The tile's rows share every key they see, so K and V are staged in
// shared memory once per 32-key chunk (two of the contract's 16-key blocks) for all 16 rows,
// instead of once per row: a long prefill reads its cache ~16× less than with the row kernel.
//
// Each row still performs exactly the contract's operations (kernels/attention.h), the ones the
// row kernel in attention.cu performs: the score's fmaf chain over d from +0 times scale, the
// block max + 0.0f, the running max and α = exp_f(m − m'), e = exp_f(s − m') (+0 past the row),
// the 16-lane tree t[i] += t[i+8], += t[i+4], += t[i+2], t[0] + t[1], l = l·α then + bs, and the
// value chain acc·α then fmaf over the block's keys in order. Only who computes what differs:
//   scores  thread (key t = tid % 32, rows tid / 32 + 4i): 4 independent chains per thread;
//   maxes   thread per (row, key block); running max and α: thread per row, blocks in order;
//   e       elementwise; block sums: thread per (row, key block), the tree written out;
//   values  thread d keeps the 16 rows' accumulators (16 independent chains).
#include "kernels_cuda/attention_device.cuh"
#include "kernels_cuda/cuda_check.h"

namespace parity::cuda::attn {
namespace {

using kernels::exp_f;

constexpr int kRows = kAttnTileRows;        // 16
constexpr int kKeys = 32;                   // keys staged per chunk
constexpr int kCb = kKeys / kKb;            // key blocks per chunk
constexpr int kThreads = 128;
constexpr int kRowsPerPass = kThreads / kKeys;  // rows scored side by side
constexpr int kHd = kTiledMaxHd;
static_assert(kRows % kRowsPerPass == 0 && kRows * kCb <= kThreads, "thread shares below");

__global__ void __launch_bounds__(kThreads) tiled_kernel(Geometry G, int num_heads, float scale, const float* q,
                                                         int ldq, PassSeqs p, const int32_t* tiles, KvTables t,
                                                         const float* kc, const float* vc, float* out, int ldo) {
  __shared__ float qs[kRows][kHd];
  __shared__ float ks[kHd][kKeys];
  __shared__ float vs[kKeys][kHd];
  __shared__ float ss[kRows][kKeys];  // scores, then e
  __shared__ float mb_s[kRows][kCb], m_s[kRows][kCb], al_s[kRows][kCb], bs_s[kRows][kCb], mrun[kRows];
  // Heads fastest in the 1-D grid: a kv head's readers run side by side (attention.cu).
  const int tid = threadIdx.x, tile = static_cast<int>(blockIdx.x / num_heads), h = static_cast<int>(blockIdx.x % num_heads);
  const int seq = tiles[2 * tile], i0 = tiles[2 * tile + 1];
  const int nrows = min(kRows, p.n[seq] - i0);
  const int rbase = p.row0[seq] + i0;
  const int64_t pos0 = p.start[seq] + i0;  // row rr of the tile sits at pos0 + rr
  const int64_t pos_last = pos0 + nrows - 1;
  const int hd = G.head_dim, bs = G.block_size, g = h / (num_heads / G.kv_heads);
  const int32_t* table = t.tables + static_cast<std::size_t>(seq) * t.stride;
  const float* kg = kc + static_cast<int64_t>(g) * hd * bs;
  const float* vg = vc + static_cast<int64_t>(g) * bs * hd;

  for (int i = tid; i < kRows * hd; i += kThreads) {
    const int rr = i / hd, d = i % hd;
    qs[rr][d] = rr < nrows ? q[static_cast<std::size_t>(rbase + rr) * ldq + static_cast<std::size_t>(h) * hd + d] : 0.0f;
  }
  if (tid < kRows) mrun[tid] = 0.0f;
  float acc[kRows], l[kRows];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) acc[rr] = l[rr] = 0.0f;

  for (int64_t c0 = 0; c0 <= pos_last; c0 += kKeys) {
    __syncthreads();  // the previous chunk's readers are done (and qs, mrun are written)
    for (int i = tid; i < kKeys * hd; i += kThreads) {
      const int d = i / kKeys, tk = i % kKeys;  // K: consecutive threads, consecutive slots
      const int64_t j = c0 + tk;
      if (j <= pos_last) ks[d][tk] = kg[table[j / bs] * G.block_floats + static_cast<int64_t>(d) * bs + j % bs];
      const int tv = i / hd, dv = i % hd;  // V: consecutive threads, consecutive dims
      const int64_t jv = c0 + tv;
      if (jv <= pos_last) vs[tv][dv] = vg[table[jv / bs] * G.block_floats + (jv % bs) * hd + dv];
    }
    __syncthreads();
    const int tk = tid % kKeys;
    for (int i = 0; i < kRows / kRowsPerPass; ++i) {
      const int rr = tid / kKeys + i * kRowsPerPass;
      float sc = -INFINITY;
      if (rr < nrows && c0 + tk <= pos0 + rr) {
        float a = 0.0f;
        for (int d = 0; d < hd; ++d) a = fmaf(qs[rr][d], ks[d][tk], a);
        sc = a * scale;
      }
      ss[rr][tk] = sc;
    }
    __syncthreads();
    const int64_t kb0 = c0 / kKb;
    // Block maxes, one thread per (row, key block) that the row sees.
    if (tid < kRows * kCb) {
      const int rr = tid / kCb, b = tid % kCb;
      const int64_t pos = pos0 + rr;
      if (rr < nrows && (kb0 + b) * kKb <= pos) {
        const int c = keys_in_block(kb0 + b, pos);
        float mb = ss[rr][b * kKb];
        for (int k = 1; k < c; ++k) mb = ss[rr][b * kKb + k] > mb ? ss[rr][b * kKb + k] : mb;
        mb_s[rr][b] = mb + 0.0f;
      }
    }
    __syncthreads();
    if (tid < kRows) {
      const int rr = tid;
      float mm = mrun[rr];
      for (int b = 0; b < kCb; ++b) {
        if (rr >= nrows || (kb0 + b) * kKb > pos0 + rr) break;
        const float mn = next_max(kb0 + b, mm, mb_s[rr][b]);
        al_s[rr][b] = rescale(kb0 + b, mm, mn);
        m_s[rr][b] = mn;
        mm = mn;
      }
      mrun[rr] = mm;
    }
    __syncthreads();
    for (int i = tid; i < kRows * kKeys; i += kThreads) {
      const int rr = i / kKeys, k = i % kKeys;
      ss[rr][k] = rr < nrows && c0 + k <= pos0 + rr ? exp_f(ss[rr][k] - m_s[rr][k / kKb]) : 0.0f;
    }
    __syncthreads();
    if (tid < kRows * kCb) {
      const int rr = tid / kCb, b = tid % kCb;
      if (rr < nrows && (kb0 + b) * kKb <= pos0 + rr) {
        float v[kKb];
        for (int k = 0; k < kKb; ++k) v[k] = ss[rr][b * kKb + k];
        for (int w = kKb / 2; w >= 1; w /= 2)
          for (int k = 0; k < w; ++k) v[k] = v[k] + v[k + w];
        bs_s[rr][b] = v[0];
      }
    }
    __syncthreads();
    const int d = tid;
    if (d < hd) {
      for (int b = 0; b < kCb; ++b) {
        const int64_t kb = kb0 + b;
#pragma unroll
        for (int rr = 0; rr < kRows; ++rr) {
          if (rr >= nrows || kb * kKb > pos0 + rr) continue;
          const int c = keys_in_block(kb, pos0 + rr);
          float a;
          if (kb == 0) {
            l[rr] = bs_s[rr][b];
            a = 0.0f;
          } else {
            const float al = al_s[rr][b];
            l[rr] = l[rr] * al;
            l[rr] = l[rr] + bs_s[rr][b];
            a = acc[rr] * al;
          }
          for (int k = 0; k < c; ++k) a = fmaf(ss[rr][b * kKb + k], vs[b * kKb + k][d], a);
          acc[rr] = a;
        }
      }
    }
  }
  if (tid < hd) {
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr)
      if (rr < nrows)
        out[static_cast<std::size_t>(rbase + rr) * ldo + static_cast<std::size_t>(h) * hd + tid] = acc[rr] / l[rr];
  }
}

}  // namespace

void launch_tiled(const Geometry& G, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
                  const int32_t* tiles, int num_tiles, const KvTables& t, const float* kc, const float* vc, float* out,
                  int ldo, cudaStream_t s) {
  tiled_kernel<<<static_cast<unsigned>(num_tiles) * num_heads, kThreads, 0, s>>>(G, num_heads, scale, q, ldq, p, tiles, t, kc, vc, out,
                                                               ldo);
  check_launch("attention tiles");
}

}  // namespace parity::cuda::attn
