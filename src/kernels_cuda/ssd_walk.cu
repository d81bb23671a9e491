// The fused scan's walk: one block per (sequence, head, tile of PT columns of p) walks the call's
// cells in order with the tile's state S[PT][N] in shared memory, so no cell's start state is ever
// written out. Per cell, in chunks of 16 rows:
//   outputs  y_t[p] = (exp(cum_t) · dot(C_t, S[p]) + Σ_{i≤t} coef_{t,i} · x_i[p]) + D · x_t[p]
//            coef_{t,i} = (exp(cum_t − cum_i) · dt_i) · band[t][t−i]          (ssd_band.cu)
//            dot(C, S[p]) = (a_0 + a_1) + (a_2 + a_3), a_q = Σ_{n ≡ q mod 4, ascending} C[n]·S[p][n]
//   delta    delta[p][n] = Σ_i (w_i · x_i[p]) · B_i[n],  w_i = exp(cum_{L−1} − cum_i) · dt_i,  i ascending
//   fold     S ← fmaf(exp(cum_{L−1}), S, delta), rounded to bf16 after every fold for a bf16 state
// with cum from cum_scan (the same left-to-right sum as everywhere). Every value is the fp32 sequence
// of the three-phase kernels (ssd_deltas.cu, ssd_chain.cu, ssd_outputs.cu) and the one-row decode,
// through ssd_device.cuh's helpers where a value is formed (cum_term, cum_scan, row_weight,
// combine_quarters, row_output, fold_element) and the same fmaf chains where it is summed (the
// quarter sums of C·S, the delta's sum over rows, the intra-cell sum): only the tiling changed, so a
// row has the same bits whichever call, pass or tile size computed it.
//
// A block has 4·PT threads in two roles of 2·PT (whole warps): the first computes the outputs, the
// second the delta and the fold, side by side on the same staged rows. All threads stage. A cell's
// inputs (dt, x, the first chunk's C and B and band values) are loaded in one round trip; the
// coefficients and w·x follow cum; a cell of one chunk costs four barriers.
// Tiling (the per-thread work is the same for every PT; PT sets how many warps share one staging):
//   outputs: a thread owns 4 rows (r = rg + 4a) × 2 columns (pg, pg + PT/2) × the 4 quarter sums:
//            per 4 values of n, 4 + 2 float4 loads feed 32 fmaf. A warp covers 4 consecutive rows and
//            8 consecutive columns, and rows are padded to Np ≡ 4 (mod 32) floats: conflict-free.
//   delta:   a thread owns 8 columns × 8 n (n = 4j..4j+3 and 4·Nq + 4j..+3): per row, 4 float4 loads
//            feed 64 fmaf. States wider than 128 take more passes over the cell (Nq > 16).
//   x and w·x are stored with columns permuted (column c ↔ p = c/2 + (c%2)·PT/2) so that a thread's
//   two output columns are adjacent.
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kR = 16;  // rows per chunk

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

struct WalkLayout {
  int Np, Nq, passes;
  std::size_t S, C, B, xw, xc, coef, dts, cum, total;  // offsets in floats
};
__host__ __device__ inline WalkLayout walk_layout(int PT, int N, int cell) {
  WalkLayout l{};
  l.Np = round_up(N, 32) + 4;  // ≥ 8·Nq, and ≡ 4 (mod 32): consecutive rows start in different banks
  l.Nq = (N + 7) / 8;
  l.passes = (l.Nq + 15) / 16;
  const std::size_t Gr = static_cast<std::size_t>(round_up(cell, kR));
  l.S = 0;                                          // [PT][Np] the state (rows p0 + pl)
  l.C = l.S + static_cast<std::size_t>(PT) * l.Np;  // [kR][Np] C of the chunk's rows
  l.B = l.C + static_cast<std::size_t>(kR) * l.Np;  // [kR][Np] B of the chunk's rows (zero beyond N)
  l.xw = l.B + static_cast<std::size_t>(kR) * l.Np; // [kR][PT] w_i · x_i, permuted columns
  l.xc = l.xw + static_cast<std::size_t>(kR) * PT;  // [cell][PT] x of the whole cell, permuted columns
  l.coef = l.xc + Gr * PT;                          // [cell][kR] coef_{t,i} at [i][rg·4 + a], t = cb + rg + 4a
  l.dts = l.coef + Gr * kR;                         // [cell]
  l.cum = l.dts + Gr;                               // [cell]
  l.total = l.cum + Gr;
  return l;
}

// 4 values of a row from column c (zeros past `end` or for no row), 16-byte loads where aligned.
__device__ __forceinline__ float4 load4(const float* row, int c, int end) {
  if (row == nullptr) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (c + 4 <= end && (reinterpret_cast<std::uintptr_t>(row + c) & 15) == 0) return *reinterpret_cast<const float4*>(row + c);
  return make_float4(c < end ? row[c] : 0.0f, c + 1 < end ? row[c + 1] : 0.0f, c + 2 < end ? row[c + 2] : 0.0f,
                     c + 3 < end ? row[c + 3] : 0.0f);
}

// What one block knows about its (sequence, head, tile) and the cell it is in.
struct CellWalk {
  SsdShape sh;
  ScanGrid g;
  RowSource src;
  int grp, p0, Np, Nq;
  const float* band;
  float* y;
  float Dh;
  Lanes lc, lb, lx;  // the copies of C (ceil(N/4) units), B (2·Nq units) and x (PT/8 units of 8 columns)
  // the current cell
  int64_t cs;
  int L, j0;
  float total;  // cum_{L−1}
};

// Stage the cell's x rows with columns permuted: column 8u + 2j + s ↔ p = p0 + 4u + j + s·PT/2.
template <int PT>
__device__ __forceinline__ void stage_x(const CellWalk& w, float* xc) {
  constexpr int HALF = PT / 2;
  if (!w.lx.on) return;
  const int P = w.sh.P, h = blockIdx.y;
  for (int i = w.lx.r0; i < w.L; i += w.lx.rstep) {
    const float* row = w.src.x(h, w.cs + i);
    for (int u = w.lx.u0; u < PT / 8; u += w.lx.ustep) {
      const float4 a = load4(row, w.p0 + 4 * u, P), b = load4(row, w.p0 + HALF + 4 * u, P);
      float4* d = reinterpret_cast<float4*>(xc + i * PT + 8 * u);
      d[0] = make_float4(a.x, b.x, a.y, b.y);
      d[1] = make_float4(a.z, b.z, a.w, b.w);
    }
  }
}

// C of chunk cb's output rows (rows cb .. cb+15 at or after j0; zeros elsewhere).
__device__ __forceinline__ void stage_C(const CellWalk& w, int cb, float* Cs) {
  if (!w.lc.on) return;
  const int N = w.sh.N, units = (N + 3) / 4;
  for (int r = w.lc.r0; r < kR; r += w.lc.rstep) {
    const int tt = cb + r;
    const float* row = tt >= w.j0 && tt < w.L ? w.src.C(w.grp, w.cs + tt) : nullptr;
    for (int u = w.lc.u0; u < units; u += w.lc.ustep) *reinterpret_cast<float4*>(Cs + r * w.Np + 4 * u) = load4(row, 4 * u, N);
  }
}

// B of chunk cb's rows (zero past N up to 8·Nq).
__device__ __forceinline__ void stage_B(const CellWalk& w, int cb, float* Bs) {
  if (!w.lb.on) return;
  const int N = w.sh.N, units = 2 * w.Nq, rows = w.L - cb < kR ? w.L - cb : kR;
  for (int r = w.lb.r0; r < rows; r += w.lb.rstep) {
    const float* row = w.src.B(w.grp, w.cs + cb + r);
    for (int u = w.lb.u0; u < units; u += w.lb.ustep) *reinterpret_cast<float4*>(Bs + r * w.Np + 4 * u) = load4(row, 4 * u, N);
  }
}

// The coefficients of chunk cb come as pairs e = i·16 + col (output row t = cb + col/4 + 4·(col%4),
// source row i ≤ t); a thread takes e = tid, tid + T, ... The band values of a cell's chunk 0 (at
// most 16 × 16 pairs, kPre per thread) are loaded with the cell's other inputs, before cum exists.
constexpr int kPre = 4;

template <int T>
__device__ __forceinline__ bool pair_of(const CellWalk& w, int cb, int e, int& i, int& tt) {
  i = e / kR;
  const int col = e % kR;
  tt = cb + col / 4 + 4 * (col % 4);
  return tt >= w.j0 && tt < w.L && i <= tt;
}

template <int T>
__device__ __forceinline__ float band_of(const CellWalk& w, int i, int tt) {
  const int row = w.src.row0 + static_cast<int>(w.cs + tt - w.src.start);
  return w.band[band_at(row, w.sh.groups, w.grp, w.g.cell, tt - i)];
}

template <int T>
__device__ __forceinline__ void prefetch_band(const CellWalk& w, int cb, float (&pre)[kPre]) {
  static_assert(kPre * T >= kR * kR, "a first chunk's pairs fit the registers");
  const int imax = cb + kR < w.L ? cb + kR : w.L;
#pragma unroll
  for (int k = 0; k < kPre; ++k) {
    const int e = threadIdx.x + k * T;
    int i, tt;
    pre[k] = e < imax * kR && pair_of<T>(w, cb, e, i, tt) ? band_of<T>(w, i, tt) : 0.0f;
  }
}

template <int T>
__device__ __forceinline__ void stage_coef(const CellWalk& w, int cb, bool use_pre, const float (&pre)[kPre], float* coef,
                                           const float* dts, const float* cum) {
  const int imax = cb + kR < w.L ? cb + kR : w.L;
  if (use_pre) {  // chunk 0: i < 16, so every pair is one of the kPre
#pragma unroll
    for (int k = 0; k < kPre; ++k) {
      const int e = threadIdx.x + k * T;
      int i, tt;
      if (e < imax * kR) coef[e] = pair_of<T>(w, cb, e, i, tt) ? row_weight(cum[tt], cum[i], dts[i]) * pre[k] : 0.0f;
    }
    return;
  }
  for (int e = threadIdx.x; e < imax * kR; e += T) {
    int i, tt;
    coef[e] = pair_of<T>(w, cb, e, i, tt) ? row_weight(cum[tt], cum[i], dts[i]) * band_of<T>(w, i, tt) : 0.0f;
  }
}

// w·x of chunk cb: thread → row xr, columns 4·xq .. 4·xq+3 (T/kR threads per row cover PT).
template <int PT, int T>
__device__ __forceinline__ void stage_xw(const CellWalk& w, int cb, float* xw, const float* xc, const float* dts,
                                         const float* cum) {
  static_assert(4 * (T / kR) == PT, "w·x: one 4-column group per thread");
  const int xr = threadIdx.x % kR, xq = threadIdx.x / kR, rows = w.L - cb < kR ? w.L - cb : kR;
  if (xr >= rows) return;
  const int i = cb + xr;
  const float wi = row_weight(w.total, cum[i], dts[i]);
  const float4 a = *reinterpret_cast<const float4*>(xc + i * PT + 4 * xq);
  *reinterpret_cast<float4*>(xw + xr * PT + 4 * xq) = make_float4(wi * a.x, wi * a.y, wi * a.z, wi * a.w);
}

// The output rows of chunk cb: C·S, the intra-cell sum, y. rt: the thread's index in its role.
template <int PT>
__device__ __forceinline__ void outputs_chunk(const CellWalk& w, int rt, int cb, const float* S, const float* Cs,
                                              const float* coef, const float* xc, const float* cum) {
  constexpr int HALF = PT / 2;
  const int Np = w.Np, N = w.sh.N, N4 = N / 4 * 4, P = w.sh.P;
  const int pg = (rt / 32) * 8 + rt % 8, rg = (rt / 8) % 4;  // rows rg + 4a, columns pg and pg + HALF
  // C·S: 4 rows × 2 columns × 4 quarter sums, n ascending within each quarter.
  float q4[4][2][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int q = 0; q < 4; ++q) q4[a][b][q] = 0.0f;
  const float* S0 = S + pg * Np;
  const float* S1 = S + (pg + HALF) * Np;
  for (int n = 0; n < N4; n += 4) {
    float4 c[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) c[a] = *reinterpret_cast<const float4*>(Cs + (rg + 4 * a) * Np + n);
    const float4 s[2] = {*reinterpret_cast<const float4*>(S0 + n), *reinterpret_cast<const float4*>(S1 + n)};
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        q4[a][b][0] = fmaf(c[a].x, s[b].x, q4[a][b][0]);
        q4[a][b][1] = fmaf(c[a].y, s[b].y, q4[a][b][1]);
        q4[a][b][2] = fmaf(c[a].z, s[b].z, q4[a][b][2]);
        q4[a][b][3] = fmaf(c[a].w, s[b].w, q4[a][b][3]);
      }
  }
  if (N4 < N) {  // n = N4, N4+1, N4+2 belong to quarters 0, 1, 2
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const float* Crow = Cs + (rg + 4 * a) * Np;
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const float* Srow = b == 0 ? S0 : S1;
        q4[a][b][0] = fmaf(Crow[N4], Srow[N4], q4[a][b][0]);
        if (N4 + 1 < N) q4[a][b][1] = fmaf(Crow[N4 + 1], Srow[N4 + 1], q4[a][b][1]);
        if (N4 + 2 < N) q4[a][b][2] = fmaf(Crow[N4 + 2], Srow[N4 + 2], q4[a][b][2]);
      }
    }
  }
  // Σ_{i≤t} coef_{t,i} · x_i, i ascending from the cell's first row.
  float in[4][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};
  const int imax = cb + kR < w.L ? cb + kR : w.L;
  for (int i = 0; i < imax; ++i) {
    const float4 cf = *reinterpret_cast<const float4*>(coef + i * kR + rg * 4);
    const float2 xv = *reinterpret_cast<const float2*>(xc + i * PT + 2 * pg);
    const float cfa[4] = {cf.x, cf.y, cf.z, cf.w};
#pragma unroll
    for (int a = 0; a < 4; ++a)
      if (i <= cb + rg + 4 * a) {
        in[a][0] = fmaf(cfa[a], xv.x, in[a][0]);
        in[a][1] = fmaf(cfa[a], xv.y, in[a][1]);
      }
  }
  const int HP = w.sh.H * P, h = blockIdx.y;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int tt = cb + rg + 4 * a;
    if (tt < w.j0 || tt >= w.L) continue;
    const int row = w.src.row0 + static_cast<int>(w.cs + tt - w.src.start);
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int pp = w.p0 + pg + b * HALF;
      if (pp >= P) continue;
      const float inter = combine_quarters(q4[a][b][0], q4[a][b][1], q4[a][b][2], q4[a][b][3]);
      w.y[static_cast<std::size_t>(row) * HP + static_cast<std::size_t>(h) * P + pp] =
          row_output(cum[tt], inter, in[a][b], w.Dh, xc[tt * PT + 2 * pg + b]);
    }
  }
}

// delta += (w_i · x_i) ⊗ B_i over the staged rows, i ascending: 8 columns (cP..) × 8 n (n0.., n1..).
template <int PT>
__device__ __forceinline__ void accumulate(int rows, const float* xw, const float* Bs, int Np, int cP, int n0, int n1,
                                           float (&acc)[8][8]) {
  for (int i = 0; i < rows; ++i) {
    const float4 xa = *reinterpret_cast<const float4*>(xw + i * PT + cP);
    const float4 xb = *reinterpret_cast<const float4*>(xw + i * PT + cP + 4);
    const float4 ba = *reinterpret_cast<const float4*>(Bs + i * Np + n0);
    const float4 bb = *reinterpret_cast<const float4*>(Bs + i * Np + n1);
    const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    const float bv[8] = {ba.x, ba.y, ba.z, ba.w, bb.x, bb.y, bb.z, bb.w};
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int b = 0; b < 8; ++b) acc[a][b] = fmaf(xv[a], bv[b], acc[a][b]);
  }
}

// fold_element (S ← fmaf(decay, S, delta), rounded for a bf16 state) over a thread's tile.
template <int PT>
__device__ __forceinline__ void fold(float* S, int Np, int N, int cP, int n0, int n1, float decay, bool bf16,
                                     const float (&acc)[8][8]) {
  constexpr int HALF = PT / 2;
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const int c = cP + a;
    float* Srow = S + (c / 2 + (c % 2) * HALF) * Np;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = half == 0 ? n0 : n1;
      const float* d = acc[a] + 4 * half;
      if (n + 4 <= N) {
        const float4 v = *reinterpret_cast<const float4*>(Srow + n);
        *reinterpret_cast<float4*>(Srow + n) =
            make_float4(fold_element(decay, v.x, d[0], bf16), fold_element(decay, v.y, d[1], bf16),
                        fold_element(decay, v.z, d[2], bf16), fold_element(decay, v.w, d[3], bf16));
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (n + j < N) Srow[n + j] = fold_element(decay, Srow[n + j], d[j], bf16);
      }
    }
  }
}

// Blocks per SM the registers must allow: 8 warps an SM at every tile, no register cap below what
// the kernel uses (about 240).
template <int PT>
constexpr int kMinBlocks = PT == 64 ? 1 : PT == 32 ? 2 : 4;

template <int PT>
__global__ void __launch_bounds__(4 * PT, kMinBlocks<PT>)
    walk_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                const float* Dskip, SsdState st, const float* band, float* y) {
  constexpr int T = 4 * PT, TR = 2 * PT;  // threads; threads per role
  static_assert(PT % 16 == 0, "a warp's output tile spans 8 column pairs");
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N;
  const WalkLayout lo = walk_layout(PT, N, g.cell);
  CellWalk w{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), h / sh.heads_per_group(), static_cast<int>(blockIdx.z) * PT,
         lo.Np, lo.Nq, band, y, Dskip[h], lanes_for<T>((N + 3) / 4), lanes_for<T>(2 * lo.Nq), lanes_for<T>(PT / 8),
         0, 0, 0, 0.0f};
  const int Np = lo.Np, p0 = w.p0;
  const std::size_t sbase = (static_cast<std::size_t>(w.src.slot) * sh.H + h) * P * N;
  const bool bf16 = st.state_f32 == nullptr;
  const float Ah = A[h];
  const bool outputs_role = tid < TR;  // whole warps: TR is a multiple of 32
  const int rt = outputs_role ? tid : tid - TR;

  extern __shared__ __align__(16) float smem[];
  float *S = smem + lo.S, *Cs = smem + lo.C, *Bs = smem + lo.B, *xw = smem + lo.xw, *xc = smem + lo.xc;
  float *coef = smem + lo.coef, *dts = smem + lo.dts, *cum = smem + lo.cum;

  for (int e = tid; e < PT * Np; e += T) {
    const int pl = e / Np, n = e % Np, pp = p0 + pl;
    float v = 0.0f;
    if (pp < P && n < N) {
      const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + n;
      v = bf16 ? widen_bf16(st.state_bf16[i]) : st.state_f32[i];
    }
    S[e] = v;
  }

  bool folded = false;
  // The call's first cell from its task; the next ones follow it cell by cell (call_cell's k > 0
  // without its divisions): they start at the previous end, the call's rows from their first.
  CellTask t = cell_task(g, p, t0, h, sh.H);
  for (int k = 0; k < K; ++k) {
    if (k > 0) {
      t.c = {t.c.end, t.c.end + g.cell};
      t.live = t.c.start < t.end;
      t.L = t.live ? static_cast<int>((t.c.end < t.end ? t.c.end : t.end) - t.c.start) : 0;
      t.j0 = 0;
      t.fold = t.live && (g.exact ? t.c.end <= t.end : true);
    }
    if (!t.live) break;  // the head's cells ran out before its tasks
    w.cs = t.c.start;
    w.L = t.L;
    w.j0 = t.j0;
    const int L = t.L;
    // Chunks: from 0 when the cell folds (the delta needs every row), else from the one holding j0.
    const int c0 = t.fold ? 0 : t.j0 / kR * kR;
    const bool outs0 = c0 + kR > t.j0;

    // The cell's inputs in one round trip: dt (cum's products), x (ring rows first where the call
    // starts inside the cell), the first chunk's C and B and band values. (Every reader of these
    // buffers in the previous cell finished before its fold's barrier.)
    for (int i = tid; i < L; i += T) {
      const float d = w.src.dtv(h, w.cs + i);
      dts[i] = d;
      cum[i] = cum_term(d, Ah);
    }
    stage_x<PT>(w, xc);
    if (outs0) stage_C(w, c0, Cs);
    if (t.fold) stage_B(w, c0, Bs);
    float pre[kPre] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (c0 == 0) prefetch_band<T>(w, 0, pre);
    __syncthreads();
    if (tid == 0) cum_scan(cum, L);
    __syncthreads();
    w.total = cum[L - 1];

    // One step of the chunk walk, identical for both roles (the same barriers): stage what chunk cb
    // needs beyond what is already there, then wait for it.
    auto step = [&](int pass, int cb) {
      const bool first = pass == 0 && cb == c0, outs = pass == 0 && cb + kR > t.j0;
      if (!first) {
        __syncthreads();  // the previous chunk's readers are done
        if (outs) stage_C(w, cb, Cs);
        if (t.fold) stage_B(w, cb, Bs);
      }
      if (outs) stage_coef<T>(w, cb, first && c0 == 0, pre, coef, dts, cum);
      if (t.fold) stage_xw<PT, T>(w, cb, xw, xc, dts, cum);
      __syncthreads();
    };
    const int passes = t.fold ? lo.passes : 1;
    if (outputs_role) {
      for (int pass = 0; pass < passes; ++pass) {
        for (int cb = c0; cb < L; cb += kR) {
          step(pass, cb);
          if (pass == 0 && cb + kR > t.j0) outputs_chunk<PT>(w, rt, cb, S, Cs, coef, xc, cum);
        }
        if (t.fold) __syncthreads();  // the delta role's barrier before its fold
      }
    } else {
      const float decay = exp_f(w.total);
      for (int pass = 0; pass < passes; ++pass) {
        const int tau = pass * TR + rt;  // this pass's tile: columns cP..cP+7 × n0..n0+3, n1..n1+3
        const int cP = 8 * ((tau / 8) % (PT / 8)), nt = (tau / PT) * 8 + tau % 8;
        const int n0 = 4 * nt, n1 = 4 * lo.Nq + 4 * nt;
        const bool mine = t.fold && nt < lo.Nq;
        float acc[8][8];
#pragma unroll
        for (int a = 0; a < 8; ++a)
#pragma unroll
          for (int b = 0; b < 8; ++b) acc[a][b] = 0.0f;
        for (int cb = c0; cb < L; cb += kR) {
          step(pass, cb);
          if (mine) accumulate<PT>(L - cb < kR ? L - cb : kR, xw, Bs, Np, cP, n0, n1, acc);
        }
        if (t.fold) {
          __syncthreads();  // every read of S for this cell's outputs is done
          if (mine) fold<PT>(S, Np, N, cP, n0, n1, decay, bf16, acc);
        }
      }
    }
    if (!t.fold) break;  // a cell the call leaves open (exact) is the last it touches
    folded = true;
  }
  if (!folded) return;  // the slot keeps its state
  __syncthreads();
  for (int e = tid; e < PT * N; e += T) {
    const int pl = e / N, n = e % N, pp = p0 + pl;
    if (pp >= P) break;
    const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + n;
    const float v = S[pl * Np + n];
    if (bf16) st.state_bf16[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);  // already bf16-exact
    else st.state_f32[i] = v;
  }
}

int smem_optin() {
  int device = 0, bytes = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  return bytes;
}

std::size_t walk_smem(int PT, const SsdShape& sh, int cell) { return walk_layout(PT, sh.N, cell).total * sizeof(float); }

template <int PT>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s) {
  const std::size_t smem = walk_smem(PT, sh, g.cell);
  if (static_cast<long>(smem) > smem_optin())
    throw Error("CUDA SSD: a state of " + std::to_string(sh.N) + " with cells of " + std::to_string(g.cell) +
                " rows does not fit in shared memory");
  ensure_smem(walk_kernel<PT>, smem, "ssd walk smem");
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>((sh.P + PT - 1) / PT));
  walk_kernel<PT><<<grid, 4 * PT, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, band, y);
  check_launch("ssd walk");
}

// Blocks of walk_kernel<PT> with `smem` bytes an SM holds.
template <int PT>
int resident(std::size_t smem) {
  ensure_smem(walk_kernel<PT>, smem, "ssd walk smem");
  return blocks_per_sm(walk_kernel<PT>, 4 * PT, smem);
}

// How well PT's blocks fill the GPU: the share of the resident-block slots their waves use (0 when
// they do not fill one wave, or the tile does not fit).
template <int PT>
double fill(const SsdShape& sh, int cell, int active_seqs, int sms) {
  const std::size_t smem = walk_smem(PT, sh, cell);
  if (PT > round_up(sh.P, 16) || static_cast<long>(smem) > smem_optin()) return 0.0;  // half a tile idle, or too big
  const long slots = static_cast<long>(resident<PT>(smem)) * sms;
  const long blocks = static_cast<long>(active_seqs) * sh.H * ((sh.P + PT - 1) / PT);
  if (slots <= 0 || blocks < slots) return 0.0;
  const long waves = (blocks + slots - 1) / slots;
  return static_cast<double>(blocks) / static_cast<double>(waves * slots);
}

// The tile whose blocks fill the GPU's slots best (ties: 32, then 64, then 16: fewer blocks stage
// the same rows, but one block an SM leaves its barriers unhidden); 16 when none fills one wave
// (a batch of one or two sequences: the most SMs busy).
int choose_tile(const SsdShape& sh, int cell, int active_seqs) {
  const int sms = sm_count();
  int best = 16;
  double best_fill = 0.0;
  for (int pt : {32, 64, 16}) {
    const double f = pt == 32 ? fill<32>(sh, cell, active_seqs, sms)
                     : pt == 64 ? fill<64>(sh, cell, active_seqs, sms) : fill<16>(sh, cell, active_seqs, sms);
    if (f > best_fill + 1e-9) {
      best = pt;
      best_fill = f;
    }
  }
  return best;
}

}  // namespace

void launch_walk(int tile_p, int active_seqs, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                 const float* xbc, int ld, const float* dt, const float* A, const float* D, const SsdState& st,
                 const float* band, float* y, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  const int pt = tile_p == 0 ? choose_tile(sh, g.cell, active_seqs) : tile_p;
  switch (pt) {
    case 16: launch<16>(sh, g, p, xbc, ld, dt, A, D, st, band, y, s); break;
    case 32: launch<32>(sh, g, p, xbc, ld, dt, A, D, st, band, y, s); break;
    case 64: launch<64>(sh, g, p, xbc, ld, dt, A, D, st, band, y, s); break;
    default: throw Error("CUDA SSD: the walk's tile of p is 16, 32 or 64, got " + std::to_string(pt));
  }
}

}  // namespace parity::cuda::ssd
