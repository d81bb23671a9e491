#pragma once
// Device pieces of the exact one-row decode (ssd_decode.cu): L2 requests, and the fold's delta over a
// stage of source rows in two thread layouts (the element walk, kFoldQuad). Each element's chain is ssd_deltas.cu's (xw = w_i · x_i[p], then
// fmaf(xw, B_i[n], acc), i ascending) in every layout, so the layout changes no bit.
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {

// Asks L2 for a head's x ring rows (cell rows of P floats, contiguous; a hint: skipped unless
// 16-byte aligned and sized).
__device__ inline void prefetch_ring_l2(const float* rows, int floats) {
  const unsigned bytes = static_cast<unsigned>(floats) * 4u;
  if (bytes == 0 || bytes % 16 != 0 || !aligned16(rows)) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(rows), "r"(bytes) : "memory");
}

// The fold's delta over one stage's rows for the four elements (r, n..n+3) of the tile: each
// element's chain Σ_i (w_i · x_i[p]) · B_i[n] continued over the stage's rows in ascending order
// (ssd_deltas.cu's operations: xw = w_i · x_i[p], then fmaf(xw, B_i[n], acc)), B from the stage (rows
// of Np floats).
__device__ inline void delta4(float a[4], const float* Bs, int Np, const float* xs, int XP, const float* wf, int rc,
                              int r, int n) {
  for (int ii = 0; ii < rc; ++ii) {
    const float xw = wf[ii] * xs[ii * XP + r];
    const float4 b = *reinterpret_cast<const float4*>(Bs + ii * Np + n);
    a[0] = fmaf(xw, b.x, a[0]);
    a[1] = fmaf(xw, b.y, a[1]);
    a[2] = fmaf(xw, b.z, a[2]);
    a[3] = fmaf(xw, b.w, a[3]);
  }
}

// The fold's delta and the fold of the tile's elements after the last stage (kFoldQuad): thread tid
// owns rows 4·(G·k + g) .. +3 (g = tid / q, G = 128 / q groups, batch k) of column n = 4·(tid mod q),
// q = N/4 dividing the block, so a source row's B values are loaded once for its four rows of p and
// their x values are one 16-byte load (x rows are padded to a multiple of 4); the sixteen chains then
// run side by side. Each element's chain is delta4's (xw = w_i · x_i[p], fmaf(xw, B_i[n], acc), i
// ascending, from dacc or 0), then fold_element: the element walk's bits.
__device__ inline void fold_quad(const SsdState& st, const Tile& t, const float* S, const uint16_t* raw, bool bf16,
                                 const float* Bs, int Np, const float* xs, int XP, const float* wf, int rc,
                                 const float* dacc, bool from_dacc, float decay) {
  const int N = t.N, tp = t.tp, q = N / 4, tid = threadIdx.x;
  const int groups = kStepThreads / q, g = tid / q, n = 4 * (tid - g * q);
  for (int r0 = 4 * g; r0 < tp; r0 += 4 * groups) {
    float a[4][4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
#pragma unroll
      for (int k = 0; k < 4; ++k) a[m][k] = from_dacc && r0 + m < tp ? dacc[(r0 + m) * N + n + k] : 0.0f;
    }
    for (int ii = 0; ii < rc; ++ii) {
      const float4 b = *reinterpret_cast<const float4*>(Bs + ii * Np + n);
      const float4 x = *reinterpret_cast<const float4*>(xs + ii * XP + r0);
      const float w = wf[ii];
      const float xw[4] = {w * x.x, w * x.y, w * x.z, w * x.w};
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        a[m][0] = fmaf(xw[m], b.x, a[m][0]);
        a[m][1] = fmaf(xw[m], b.y, a[m][1]);
        a[m][2] = fmaf(xw[m], b.z, a[m][2]);
        a[m][3] = fmaf(xw[m], b.w, a[m][3]);
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int r = r0 + m;
      if (r < tp) {
        const float4 s = tile_load4(t, S, raw, bf16, r, n);
        const float v[4] = {fold_element(decay, s.x, a[m][0], bf16), fold_element(decay, s.y, a[m][1], bf16),
                            fold_element(decay, s.z, a[m][2], bf16), fold_element(decay, s.w, a[m][3], bf16)};
        store4(st, t, r * N + n, v);
      }
    }
  }
}

}  // namespace parity::cuda::ssd
