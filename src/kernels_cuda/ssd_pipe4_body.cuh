// The pipelined lane walk with more columns of p a lane, one body for its shapes: each .cu that
// includes it defines P4_COLS (columns a lane), P4_WARPS (warps a block), P4_WAY_Q / P4_WAY_N (the
// way numbers of C and B by quarter / as in the row; 0 = not built) and P4_NS (the namespace of its
// entry points: ssd_device.cuh declares each).
//
// Why: the pipelined walk (ssd_pipe.cu, 564 / 664) is capped by shared memory's bandwidth: the SM hands
// out 128 lane-bytes a cycle whether a load is a broadcast or not, and with two columns a lane every
// float a lane loads (C_t[n] in the quarter sums, B_i[n] in the delta) feeds two FMAs, so its loop cannot
// pass half the FMA peak. With four columns a lane (lane (column group, quarter q) owns S[p][n] for its
// columns and the n ≡ q mod 4) every C float feeds four FMAs, one a column, where the SM's FMA rate and
// its shared-memory rate balance; every B float of the delta four, with w_i·x_i[p] read once for eight n.
// The price is registers (the state alone is 128 a lane), so:
//   - the quarter sums run 8 rows at a time (32 chains), and those rows are finished (exchange, intra
//     sums, outputs) before the next 8; then the delta and the fold, eight n at a time;
//   - cells the call starts or ends inside (and N below 128) run out of line on a copy of the state.
// The one-warp shapes (16 or 32 columns of p a block) give one sequence more blocks (the span walk's 128
// at 32 heads × 64 with 16 columns) for the same per-lane work.
// Every value keeps its operations and their order (ssd_device.cuh's helpers; each quarter sum one fmaf
// chain over its n ascending, each delta one chain over i ascending from 0, each intra sum one chain over
// i ascending from 0, combine_quarters, row_output_scaled, fold_element), so CudaSsdTiling holds every
// way to the three-phase kernels bit for bit. How C and B reach shared memory and are read from it:
//   by quarter, as 664 (element n of row t at [t][n % 4][n / 4], a 4-byte cp.async per element, one
//   16-byte load gives a lane four n of its quarter);
//   as in the row (a 16-byte cp.async per four n; a lane reads its four n with four 4-byte loads,
//   whose 32 lanes read four distinct words, one wavefront each: the same shared-memory cycles as the
//   16-byte load, a quarter of the copy instructions).
// Supported: N a multiple of 4 up to 128, cells of at most 16 rows (lanes_supported).
#pragma once
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_lane_shapes.h"

namespace parity::cuda::ssd {
namespace {

constexpr int kG = 16;          // most rows of a cell
constexpr int kNQ = 32;         // most n of a quarter (N ≤ 128)
constexpr int kCols = P4_COLS;             // columns of p a lane (4, or 2 for the one-warp shape)
constexpr int kWarps = P4_WARPS;           // warps a block
constexpr int kThreads = 32 * kWarps;      // (column groups) × (4 quarters)
constexpr int kWc = 8 * kCols;             // columns of a warp
constexpr int kPT = kWarps * kWc;          // columns of p a block
// Rows whose quarter sums are formed at a time: 4 at four columns a lane (the exchange then lets four
// blocks of two warps share an SM, and 16 sums chains are enough), 8 at two (the exchange must hold w·x).
constexpr int kR = kCols == 4 ? 4 : kCols == 2 ? 8 : 16;
constexpr int kCS = 20;         // a row of coef (16-byte reads; 4 rows a warp reads in distinct banks)
constexpr int kProbeSteps = 5;  // the probe's steps
// Shared-memory loads kept in runs of this many rows (the delta's, the quarter sums'), and n a step of
// the delta (its accumulators: kCols · kJF registers).
constexpr int kFoldFence = 2, kSumFence = 4, kJF = kCols == 1 ? 32 : 8;
// C and B rows: by quarter (quarter q at q·kQS, 4 banks apart) or as in the row.
constexpr int kQS = kNQ + 4;
template <bool kNat>
constexpr int kRowC = kNat ? 4 * kNQ : 4 * kQS;

// Shared memory, in floats:
//   x buffers ×3: dts [kG] | band [kG][kG] | x [kG][kPT]   (two cells ahead)
//   C/B buffers ×2: C [kG][row] | B [kG][row]              (one cell ahead)
//   coefficient buffers ×2: coef [kG][kCS] | w [kG] | exp(cum) [kG] | decay [4]
//   exchange: [warps][kR][kQxR]
constexpr int kDts = 0, kBand = kDts + kG, kX = kBand + kG * kG, kXbuf = kX + kG * kPT;
constexpr int kCoef = 0, kWts = kCoef + kG * kCS, kE = kWts + kG, kDecay = kE + kG, kFbuf = kDecay + 4;
template <bool kNat>
constexpr int kBq = kG * kRowC<kNat>;
template <bool kNat>
constexpr int kCbuf = 2 * kG * kRowC<kNat>;
constexpr int kXbufs = 0, kCbufs = kXbufs + 3 * kXbuf;
template <bool kNat>
constexpr int kFbufs = kCbufs + 2 * kCbuf<kNat>;
template <bool kNat>
constexpr int kQx = kFbufs<kNat> + 2 * kFbuf;
// The exchange's row: 4 quarters of 32 columns, quarter q at q·kQxQ. 40 and 168 put the 16-byte
// writes (a lane's four columns of one row, its quarter) and reads (four rows' quarter qq) of every
// 8-lane phase in 32 distinct banks.
// (Two columns: 24 and 104 for the 8-byte accesses of each 16-lane phase; one: 8 and 40 for the warp's
// 4-byte accesses.)
constexpr int kQxQ = kCols == 4 ? 40 : kCols == 2 ? 24 : 8, kQxR = kCols == 4 ? 168 : kCols == 2 ? 104 : 40;
// w_i·x_i[p] of a warp's 32 columns in its exchange during the fold: row i at i·kXwR (the 16-byte writes
// of lanes q = 0..3, rows 4m + q, fall in distinct banks).
constexpr int kXwR = 40;
static_assert(kG * kXwR <= kR * kQxR, "w·x fits the exchange");
template <bool kNat>
constexpr int kSmemFloats = kQx<kNat> + (kThreads / 32) * kR * kQxR;
static_assert(kXbuf % 4 == 0 && kCbufs % 4 == 0 && kFbufs<true> % 4 == 0 && kFbufs<false> % 4 == 0 &&
                  kFbuf % 4 == 0 && kQx<true> % 4 == 0 && kQx<false> % 4 == 0,
              "16-byte aligned regions");
// Three blocks by quarter, four as in the row, in an H200 SM's 228 KB (each with its 1 KB the system reserves).
static_assert(3 * (kSmemFloats<false> * 4 + 1024) <= 228 * 1024 && 4 * (kSmemFloats<true> * 4 + 1024) <= 228 * 1024,
              "blocks an SM");

// A cell every block takes whole: G = 16 rows, all the call's, folded. Its loops have no run-time bounds.
__device__ __forceinline__ bool whole(const CellIn& c) { return c.L == kG && c.j0 == 0 && c.fold; }

struct Ctx {
  SsdShape sh;
  ScanGrid g;
  RowSource src;
  const float* band;
  int h, grp, p0;
};

// Cell c's C rows (output rows j0 .. L-1) and, when it folds, its B rows (0 .. L-1) into Q.
// By quarter (as ssd_pipe.cu's issue_cb, each thread two n of every row: those of threads tid and
// tid + 64 there, so the writes of a warp's row still fall in 32 distinct banks), or as in the row
// (16-byte copies of four n, zeros past N).
template <bool kNat>
__device__ void issue_cb(const Ctx& b, const CellIn& c, float* Q) {
  constexpr int kRow = kRowC<kNat>;
  float* QB = Q + kBq<kNat>;
  if constexpr (kNat) {
    const int N = b.sh.N, units = N / 4;
    // (N = 128: a row is 32 units, no division.)
    auto rows = [&](float* dst, auto src_row, int r0, int r1) {
      if (units == kNQ) {
        for (int e = threadIdx.x; e < (r1 - r0) * kNQ; e += kThreads) {
          const int t = r0 + e / kNQ, u = e % kNQ;
          copy4(dst + t * kRow + 4 * u, src_row(t), 4 * u, N);
        }
        return;
      }
      for (int e = threadIdx.x; e < (r1 - r0) * units; e += kThreads) {
        const int t = r0 + e / units, u = e % units;
        copy4(dst + t * kRow + 4 * u, src_row(t), 4 * u, N);
      }
    };
    rows(Q, [&](int t) { return b.src.C(b.grp, c.cs + t); }, c.j0, c.L);
    if (c.fold) rows(QB, [&](int i) { return b.src.B(b.grp, c.cs + i); }, 0, c.L);
  } else {
#pragma unroll
    for (int half = 0; half < 128 / kThreads; ++half) {
      const int v = threadIdx.x + half * kThreads, l = v % 32;
      const int m = 4 * (v / 32) + (l / 4) % 4 + 16 * (l / 16), n = 4 * m + l % 4;
      const bool valid = n < b.sh.N;
      float* dC = Q + (n % 4) * kQS + n / 4;
      float* dB = dC + kBq<kNat>;
      if (whole(c)) {  // rows of this call, ld apart
        // ld through an opaque move, each row's address from the one before: the compiler would
        // otherwise keep the 16 offsets t·ld in registers for the whole walk (they do not change).
        int ld = b.src.ld;
        asm volatile("mov.b32 %0, %0;" : "+r"(ld));
        const float* sC = b.src.C(b.grp, c.cs) + (valid ? n : 0);
        const float* sB = b.src.B(b.grp, c.cs) + (valid ? n : 0);
#pragma unroll
        for (int t = 0; t < kG; ++t, sC += ld) cp4(dC + t * kRow, sC, valid);
#pragma unroll
        for (int t = 0; t < kG; ++t, sB += ld) cp4(dB + t * kRow, sB, valid);
        continue;
      }
      for (int t = c.j0; t < c.L; ++t) {
        const float* r = b.src.C(b.grp, c.cs + t);
        cp4(dC + t * kRow, valid ? r + n : r, valid);
      }
      if (c.fold)
        for (int i = 0; i < c.L; ++i) {
          const float* r = b.src.B(b.grp, c.cs + i);  // ring rows first where the call starts inside the cell
          cp4(dB + i * kRow, valid ? r + n : r, valid);
        }
    }
  }
}

// Cell c's dt and x of every source row and band rows of its output rows into x buffer X (x rows in
// units of 4 columns, zeros past P; band row t up to distance t).
__device__ void issue_x(const Ctx& b, const CellIn& c, float* X) {
  const int tid = threadIdx.x, G = b.g.cell;
  if (tid < c.L) cp4(X + kDts + tid, b.src.dtp(b.h, c.cs + tid), true);
  const int u = tid % (kPT / 4), xend = b.sh.P - b.p0;
  for (int i = tid / (kPT / 4); i < c.L; i += kThreads / (kPT / 4))
    copy4(X + kX + i * kPT + 4 * u, b.src.x(b.h, c.cs + i) + b.p0, 4 * u, xend);
  for (int e = tid; e < kG * 4; e += kThreads) {
    const int t = e / 4, v = e % 4;
    if (t >= c.j0 && t < c.L && 4 * v <= t) {
      const int row = b.src.row0 + static_cast<int>(c.cs + t - b.src.start);
      copy4(X + kBand + t * kG + 4 * v, b.band + band_at(row, b.sh.groups, b.grp, G, 0), 4 * v, t + 1);
    }
  }
}

// Cell c's coefficients from x buffer X into F (as ssd_pipe.cu's: both warps run the left-to-right
// cum of cum_scan by shuffles, lane i keeping cum_i; coef_{t,i} = row_weight(cum_t, cum_i, dt_i)·
// band[t][t−i] for the output rows, w_i = row_weight(cum_{L−1}, cum_i, dt_i), exp(cum_t), exp(cum_{L−1})).
__device__ void coefficients(const CellIn& c, const float* X, float* F, float Ah) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, L = c.L, j0 = c.j0;
  const float* dts = X + kDts;
  const float* bnd = X + kBand;
  const float d = lane < L ? cum_term(dts[lane], Ah) : 0.0f;
  float cl = 0.0f;
#pragma unroll
  for (int i = 0; i < kG; ++i) {
    const float v = __shfl_sync(0xffffffffu, d, i);
    if (i < L && i <= lane) cl = cl + v;
  }
  const float total = __shfl_sync(0xffffffffu, cl, L - 1);
#pragma unroll
  for (int e0 = 0; e0 < kG * kG; e0 += kThreads) {
    const int e = e0 + tid, t = e / kG, i = e % kG;
    const float ct = __shfl_sync(0xffffffffu, cl, t), ci = __shfl_sync(0xffffffffu, cl, i);
    if (t >= j0 && t < L && i <= t) F[kCoef + t * kCS + i] = row_weight(ct, ci, dts[i]) * bnd[t * kG + (t - i)];
  }
  constexpr int kW1 = kWarps > 1 ? 1 : 0;
  if (warp == 0 && lane < L) F[kE + lane] = exp_f(cl);
  if (warp == kW1 && lane < L) F[kWts + lane] = row_weight(total, cl, dts[lane]);
  if (warp == kW1 && lane == 31) F[kDecay] = exp_f(total);
}

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }
// A 16-byte shared-memory load that ptxas neither merges with an earlier load of the same address
// nor hoists: x_i[p] is read in both halves' intra sums and again for w_i·x_i, and w_i·x_i once per
// eight n; kept from the first read on, those values (up to 64 registers beside the state's 128) spill.
// kCols floats at p (16- or 8-byte aligned), read as lds4v does / written.
__device__ __forceinline__ void ldsc(const float* p, float* v);
__device__ __forceinline__ void stsc(float* p, const float* v) {
  if constexpr (kCols == 4) *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  else if constexpr (kCols == 2) *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  else *p = v[0];
}
__device__ __forceinline__ float4 lds4v(const float* p) {
  float4 v;
  asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(saddr(p)));
  return v;
}
__device__ __forceinline__ void ldsc(const float* p, float* v) {
  if constexpr (kCols == 4) {
    const float4 t = lds4v(p);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else if constexpr (kCols == 2) {
    asm volatile("ld.volatile.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v[0]), "=f"(v[1]) : "r"(saddr(p)));
  } else {
    asm volatile("ld.volatile.shared.f32 %0, [%1];\n" : "=f"(v[0]) : "r"(saddr(p)));
  }
}

// Keeps the compiler from hoisting later steps' shared-memory loads above this point (it would hoist
// whole loops' loads and spill).
__device__ __forceinline__ void hoist_fence() { asm volatile("" ::: "memory"); }


// What a cell's math reads besides the state: its buffers, where its outputs go and its bounds.
struct CellArgs {
  const float* Q;  // C [kG][row] | B [kG][row]
  const float* X;  // dts | band | x
  const float* F;  // coef | w | exp(cum) | decay
  float* qw;       // this warp's exchange
  float* y;        // output row 0's first column of this lane (y + h·P + p0 + pl); rows ystride apart
  std::size_t ystride;
  int row_t0;      // the pass row of the cell's row 0
  int L, j0, nq, q, wc, pl;
  int cols;        // columns of this lane inside P (four or fewer)
  float Dh;
  bool fold, bf16;
};

// Four n of quarter q (4·(j4 + u) + q, u = 0..3) of C row r or B row r.
template <bool kNat>
__device__ __forceinline__ void four(const float* base, int r, int j4, int q, float* v) {
  if constexpr (kNat) {
    const float* row = base + r * kRowC<kNat> + 4 * j4 + q;
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = row[4 * u];
  } else {
    const float4 t = lds4(base + r * kRowC<kNat> + q * kQS + j4);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  }
}

// Rows r0 .. r0 + kR − 1 at a time: the quarter sums a_q of this lane's four columns (one fmaf chain a
// row and column, n ascending from zero), then lane q finishes rows t = r0 + 4·gg + q: the intra sums
// (i ascending from 0 to t), the exchange of the quarters and the outputs. kWhole: a whole cell at
// N = 128 (no bounds).
template <bool kNat, bool kWhole>
__device__ __forceinline__ void cell_sums(const CellArgs& ca, const float (&S)[kCols][kNQ]) {
  const int L = ca.L, j0 = ca.j0, nq = ca.nq, q = ca.q, wc = ca.wc, pl = ca.pl;
  const float* Cb = ca.Q;
  const float* F = ca.F;
  const float* x = ca.X + kX;
  float* qw = ca.qw;
#pragma unroll
  for (int r0 = 0; r0 < kG; r0 += kR) {
    float o[kR][kCols];
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int a = 0; a < kCols; ++a) o[r][a] = 0.0f;
#pragma unroll
    for (int j4 = 0; j4 < kNQ; j4 += 4) {
      if (kWhole || j4 < nq) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          float cr[4];
          four<kNat>(Cb, r0 + r, j4, q, cr);
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (kWhole || j4 + u < nq)
#pragma unroll
              for (int a = 0; a < kCols; ++a) o[r][a] = fmaf(cr[u], S[a][j4 + u], o[r][a]);
          if (r % kSumFence == kSumFence - 1) hoist_fence();
        }
      }
      hoist_fence();
    }
    constexpr int kGr = kR / 4;
    const int g0 = r0 / 4;
    float in[kGr][kCols];
#pragma unroll
    for (int gg = 0; gg < kGr; ++gg)
#pragma unroll
      for (int a = 0; a < kCols; ++a) in[gg][a] = 0.0f;
#pragma unroll
    for (int i4 = 0; i4 < r0 + kR; i4 += 4) {
      const int gi = i4 / 4;  // the group of rows i4 .. i4 + 3
      float4 cf[kGr];
#pragma unroll
      for (int gg = 0; gg < kGr; ++gg)
        if (g0 + gg >= gi) cf[gg] = lds4(F + kCoef + (4 * (g0 + gg) + q) * kCS + i4);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i4 + u;
        float xa[kCols];
        ldsc(x + i * kPT + pl, xa);
#pragma unroll
        for (int gg = 0; gg < kGr; ++gg)
          if (g0 + gg >= gi) {
            const float cr[4] = {cf[gg].x, cf[gg].y, cf[gg].z, cf[gg].w};
            const bool on = g0 + gg > gi || i <= 4 * (g0 + gg) + q;  // i ≤ t
#pragma unroll
            for (int a = 0; a < kCols; ++a) in[gg][a] = on ? fmaf(cr[u], xa[a], in[gg][a]) : in[gg][a];
          }
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r)
      stsc(qw + r * kQxR + q * kQxQ + wc, o[r]);
    __syncwarp();
#pragma unroll
    for (int gg = 0; gg < kGr; ++gg) {
      const int tr = 4 * gg + q, t = r0 + tr;
      if (kWhole || (t >= j0 && t < L)) {
        float aq[4][kCols], xs[kCols];
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) ldsc(qw + tr * kQxR + qq * kQxQ + wc, aq[qq]);
        ldsc(x + t * kPT + pl, xs);
        const float e = F[kE + t];
        float* yr = ca.y + static_cast<std::size_t>(ca.row_t0 + t) * ca.ystride;
#pragma unroll
        for (int a = 0; a < kCols; ++a)
          if (a < ca.cols)
            yr[a] = row_output_scaled(e, combine_quarters(aq[0][a], aq[1][a], aq[2][a], aq[3][a]), in[gg][a], ca.Dh, xs[a]);
      }
    }
    __syncwarp();  // the exchange is read before the next rows (or the next cell) overwrite it
  }
}

// The delta of each element (one fmaf chain over i ascending from 0 of w_i·x_i[p]·B_i[n]) and the
// fold, kJF n at a time. w_i·x_i[p] of the warp's columns goes through shared memory (the exchange's
// space, free by now): in registers, 64 of them beside the state's 128 spill. Lane q forms rows
// i = q, 4 + q, 8 + q, 12 + q of its four columns.
template <bool kNat, bool kWhole>
__device__ __forceinline__ void cell_fold(const CellArgs& ca, float (&S)[kCols][kNQ]) {
  if (!(kWhole || ca.fold)) return;
  const int L = ca.L, nq = ca.nq, q = ca.q, wc = ca.wc, pl = ca.pl;
  const float* Bb = ca.Q + kBq<kNat>;
  const float* F = ca.F;
  const float* x = ca.X + kX;
  float* qw = ca.qw;
  const float decay = F[kDecay];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int i = 4 * m + q;
    if (kWhole || i < L) {
      float xv[kCols];
      ldsc(x + i * kPT + pl, xv);
      const float wi = F[kWts + i];
#pragma unroll
      for (int a = 0; a < kCols; ++a) xv[a] = wi * xv[a];
      stsc(qw + i * kXwR + wc, xv);
    }
  }
  __syncwarp();
#pragma unroll
  for (int j8 = 0; j8 < kNQ; j8 += kJF) {
    if (kWhole || j8 < nq) {
      float acc[kCols][kJF];
#pragma unroll
      for (int a = 0; a < kCols; ++a)
#pragma unroll
        for (int u = 0; u < kJF; ++u) acc[a][u] = 0.0f;
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        if (kWhole || i < L) {
          float xwi[kCols];
          ldsc(qw + i * kXwR + wc, xwi);
          float bb[kJF];
#pragma unroll
          for (int h4 = 0; h4 < kJF; h4 += 4) four<kNat>(Bb, i, j8 + h4, q, bb + h4);
#pragma unroll
          for (int a = 0; a < kCols; ++a)
#pragma unroll
            for (int u = 0; u < kJF; ++u) acc[a][u] = fmaf(xwi[a], bb[u], acc[a][u]);
        }
        if (i % kFoldFence == kFoldFence - 1) hoist_fence();
      }
#pragma unroll
      for (int a = 0; a < kCols; ++a)
#pragma unroll
        for (int u = 0; u < kJF; ++u)
          if (kWhole || j8 + u < nq) S[a][j8 + u] = fold_element(decay, S[a][j8 + u], acc[a][u], ca.bf16);
    }
  }
  __syncwarp();  // w_i·x_i is read before the next cell's exchange overwrites it
}

// A cell with bounds, out of line; Sp: the state [kCols][kNQ], in and out.
template <bool kNat>
__device__ __noinline__ void cell_part(const CellArgs ca, float* Sp) {
  float S[kCols][kNQ];
#pragma unroll
  for (int a = 0; a < kCols; ++a)
#pragma unroll
    for (int j = 0; j < kNQ; ++j) S[a][j] = Sp[a * kNQ + j];
  cell_sums<kNat, false>(ca, S);
  cell_fold<kNat, false>(ca, S);
#pragma unroll
  for (int a = 0; a < kCols; ++a)
#pragma unroll
    for (int j = 0; j < kNQ; ++j) Sp[a * kNQ + j] = S[a][j];
}

template <bool kNat, bool kProbe>
__global__ void __launch_bounds__(kThreads)
    pipe4_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                 const float* Dskip, SsdState st, const float* band, float* y, long long* probe) {
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N, nq = N / 4;
  const Ctx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), band, h, h / sh.heads_per_group(),
              static_cast<int>(blockIdx.z) * kPT};
  const bool bf16 = st.state_f32 == nullptr;
  const float Ah = A[h], Dh = Dskip[h];
  const int64_t call_end = start + p.n[seq];

  extern __shared__ __align__(16) float smem[];
  float* qw = smem + kQx<kNat> + warp * kR * kQxR;  // this warp's exchange
  auto Xb = [&](int k) { return smem + kXbufs + (k % 3) * kXbuf; };
  auto Qb = [&](int k) { return smem + kCbufs + (k % 2) * kCbuf<kNat>; };
  auto Fb = [&](int k) { return smem + kFbufs<kNat> + (k % 2) * kFbuf; };

  // This lane's columns (block-local pl .. pl + 3; warp-local wc) and quarter.
  const int q = lane & 3, wc = kCols * (lane >> 2), pl = kWc * warp + wc;
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;

  // Benchmarks only (probe set): thread 0 of the first block sums its clock cycles per step.
  const bool timing = kProbe && probe != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && tid == 0;
  long long steps[kProbeSteps] = {0, 0, 0, 0, 0}, tick = timing ? clock64() : 0, cells = 0;
  auto mark = [&](int i) {
    if (!timing) return;
    const long long now = clock64();
    steps[i] += now - tick;
    tick = now;
  };

  CellIn c = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!c.live) return;
  auto after = [&](const CellIn& x, int k, bool& has) {
    const CellIn n = next_cell(x, call_end, g.cell, g.exact);
    has = x.fold && k + 1 < K && n.live;
    return n;
  };
  {
    issue_cb<kNat>(b, c, Qb(0));
    issue_x(b, c, Xb(0));
    bool has1 = false;
    const CellIn c1 = after(c, 0, has1);
    if (has1) issue_x(b, c1, Xb(1));
    commit();
  }

  // The state: S[a][j] = state[p0 + pl + a][4j + q] (zeros for columns past P).
  float S[kCols][kNQ];
#pragma unroll
  for (int a = 0; a < kCols; ++a) {
    const int pp = b.p0 + pl + a;
#pragma unroll
    for (int j = 0; j < kNQ; ++j) {
      float v = 0.0f;
      if (j < nq && pp < P) {
        const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + 4 * j + q;
        v = bf16 ? widen_bf16(st.state_bf16[i]) : st.state_f32[i];
      }
      S[a][j] = v;
    }
  }
  wait_all();
  __syncthreads();
  coefficients(c, Xb(0), Fb(0), Ah);

  bool folded = false;
  for (int k = 0;; ++k) {
    bool has1 = false, has2 = false;
    const CellIn c1 = after(c, k, has1);
    CellIn c2 = c1;
    if (has1) c2 = after(c1, k + 1, has2);
    wait_all();
    __syncthreads();  // cell k's C and B and cell k+1's x landed, cell k's coefficients formed; cell k−1's readers done
    mark(0);
    ++cells;
    if (has1) issue_cb<kNat>(b, c1, Qb(k + 1));
    if (has2) issue_x(b, c2, Xb(k + 2));
    commit();
    mark(1);
    if (has1) coefficients(c1, Xb(k + 1), Fb(k + 1), Ah);
    mark(2);

    CellArgs ca;
    ca.Q = Qb(k);
    ca.X = Xb(k);
    ca.F = Fb(k);
    ca.qw = qw;
    ca.y = y + static_cast<std::size_t>(h) * P + b.p0 + pl;
    ca.ystride = static_cast<std::size_t>(sh.H) * P;
    ca.row_t0 = b.src.row0 + static_cast<int>(c.cs - b.src.start);
    ca.L = c.L;
    ca.j0 = c.j0;
    ca.nq = nq;
    ca.q = q;
    ca.wc = wc;
    ca.pl = pl;
    ca.cols = P - b.p0 - pl;
    ca.Dh = Dh;
    ca.fold = c.fold;
    ca.bf16 = bf16;
    const bool fold = c.fold;
    if (whole(c) && nq == kNQ) {
      cell_sums<kNat, true>(ca, S);
      mark(3);
      cell_fold<kNat, true>(ca, S);
    } else {
      // Cells the call starts or ends inside (and N below 128): out of line, on a copy of the state
      // in local memory, so that their bounds checks do not add to the whole cells' registers.
      float T[kCols][kNQ];
#pragma unroll
      for (int a = 0; a < kCols; ++a)
#pragma unroll
        for (int j = 0; j < kNQ; ++j) T[a][j] = S[a][j];
      cell_part<kNat>(ca, &T[0][0]);
#pragma unroll
      for (int a = 0; a < kCols; ++a)
#pragma unroll
        for (int j = 0; j < kNQ; ++j) S[a][j] = T[a][j];
      mark(3);
    }
    folded = folded || fold;
    mark(4);
    if (!has1) break;
    c = c1;
  }
  if (kProbe && timing) {
#pragma unroll
    for (int i = 0; i < kProbeSteps; ++i) probe[i] = steps[i];
    probe[kProbeSteps] = cells;
  }
  if (!folded) return;  // the slot keeps its state
#pragma unroll
  for (int a = 0; a < kCols; ++a) {
    const int pp = b.p0 + pl + a;
    if (pp >= P) break;
#pragma unroll
    for (int j = 0; j < kNQ; ++j) {
      if (j >= nq) break;
      const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + 4 * j + q;
      if (bf16) st.state_bf16[i] = static_cast<uint16_t>(__float_as_uint(S[a][j]) >> 16);  // already bf16-exact
      else st.state_f32[i] = S[a][j];
    }
  }
}

std::atomic<long long*> probe_buffer{nullptr};

template <bool kNat>
constexpr std::size_t smem_bytes() {
  return static_cast<std::size_t>(kSmemFloats<kNat>) * sizeof(float);
}

template <bool kNat>
void launch_shape(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>((sh.P + kPT - 1) / kPT));
  long long* probe = probe_buffer.load();
  auto run = [&](auto kernel) {
    ensure_smem(kernel, smem_bytes<kNat>(), "ssd lane walk smem");
    kernel<<<grid, kThreads, smem_bytes<kNat>(), s>>>(sh, g, p, xbc, ld, dt, A, D, st, band, y, probe);
  };
  if (probe != nullptr) run(pipe4_kernel<kNat, true>);
  else run(pipe4_kernel<kNat, false>);
  check_launch("ssd lane walk");
}

// P4_WAY_Q / P4_WAY_N: this shape's way with C and B by quarter / as in the row (0: not built).
template <class F>
void by_way(int way, F f) {
  if constexpr (P4_WAY_Q != 0)
    if (way == P4_WAY_Q) return f(std::false_type{});
  if constexpr (P4_WAY_N != 0)
    if (way == P4_WAY_N) return f(std::true_type{});
  throw Error("CUDA SSD: no lane walk of " + std::to_string(kCols) + " columns a lane and shape " + std::to_string(way));
}

}  // namespace

namespace P4_NS {

void probe(long long* device_buffer) { probe_buffer.store(device_buffer); }

bool way(int w) { return w != 0 && (w == P4_WAY_Q || w == P4_WAY_N); }

int resident(int w) {
  int per_sm = 0;
  by_way(w, [&](auto nat) {
    constexpr bool kNat = decltype(nat)::value;
    ensure_smem(pipe4_kernel<kNat, false>, smem_bytes<kNat>(), "ssd lane walk smem");
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pipe4_kernel<kNat, false>, kThreads, smem_bytes<kNat>()),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  });
  return per_sm;
}

void launch(int w, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  if (!lanes_supported(sh, g))
    throw Error("CUDA SSD: the lane walk needs N a multiple of 4 up to 128 and cells of at most 16 rows (N " +
                std::to_string(sh.N) + ", cell " + std::to_string(g.cell) + ")");
  by_way(w, [&](auto nat) { launch_shape<decltype(nat)::value>(sh, g, p, xbc, ld, dt, A, D, st, band, y, s); });
}

}  // namespace P4_NS
}  // namespace parity::cuda::ssd
