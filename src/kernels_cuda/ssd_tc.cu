// PROTOTYPE: the cell walk with its products on tensor cores (ssd_tc.h says what it computes).
//
// One block per (sequence, head, 16·WP columns of p; P a multiple of 16·WP): WP × KS warps. Warp (pw, ks)
// owns 16 columns of p and 128 / KS values of n of their state, S[16 p][n] as fp32 mma accumulators: lane (g, q) =
// (lane / 4, lane % 4) holds S[g][8j + 2q, +1] and S[g + 8][8j + 2q, +1] of each of its n-tiles j. That
// layout is both the fold's m16n8 accumulator (M = p, N = n, K = the cell's 16 rows) and, packed to
// bf16 pairs, the k16n8 operand of C · Sᵀ (M = the cell's 16 rows, N = p, K = n), so the state never
// moves between registers. A cell, per 16 columns of p:
//   Y_inter[t][p] = (a_0 + a_1) + (a_2 + a_3),  a_m = Σ_{n in quarter m} C[t][n]·S[p][n]: each quarter
//                   two k16 steps into an accumulator from zero, 2 p-tiles: 16 mma in all
//   Y_intra[t][p] = Σ_i coef[t][i]·x[i][p]      2 mma (coef = row_weight·band, zero above the diagonal)
//   delta[p][n]   = Σ_i (w_i·x[i][p])·B[i][n]   16 n-tiles = 16 mma, then S = fold_element(decay, S, delta)
//   y[t][p]       = row_output_scaled(exp(cum_t), Y_inter, Y_intra, D, x[t][p])
// (the split products: three mma each). The quarters are the schedule's unit: KS = 1 keeps all four in
// one warp (four independent chains), KS = 2 or 4 spreads them and the fold's n-tiles over two or four
// warps, whose partial sums reach warp ks = 0 through shared memory and are combined, in the same
// expression, at the next cell's barrier; so every (WP, KS) gives the same bits. The cell's inputs (dt,
// band rows, x, C, B) are copied two cells ahead into three stages; a cell's coefficient table (coef,
// w, exp(cum_t), decay: the fp32 values the other paths form, by the same helpers) is formed by the
// whole block in registers beside the cell before it's products and stored after them, so a cell costs
// one block barrier. C and B stay fp32 in shared
// memory; each warp rounds its fragments as it reads them.
#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_hoisted.h"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

constexpr int kCS = kN + 8;  // a C row (floats): a half-warp's float2 fragment reads fall in 32 distinct banks
constexpr int kBS = kN + 4;  // a B row: the fold's reads B[2q..][8j + g] fall in 32 distinct banks
constexpr int kFS = 24;      // a coefficient row: float2 fragment reads in 32 distinct banks

// One stage (floats): dt [16] | band [16][16] | x [16][XS] | C [16][kCS] | B [16][kBS].
template <int W>
struct Stage {
  static constexpr int XS = 16 * W + 4;  // x row: the fragment reads x[2q..][g] in 32 distinct banks
  static constexpr int kDt = 0, kBand = 16, kX = kBand + kG * kG, kC = kX + kG * XS, kB = kC + kG * kCS;
  static constexpr int kFloats = kB + kG * kBS;
  static_assert(kX % 4 == 0 && kC % 4 == 0 && kB % 4 == 0 && kFloats % 4 == 0, "16-byte aligned rows");
};
// A coefficient table (floats): coef [16][kFS] | w [16] | exp(cum) [16] | decay (+3).
constexpr int kCoef = 0, kW = kG * kFS, kE = kW + kG, kDecay = kE + kG, kTable = kDecay + 4;

template <int WP, int KS>
constexpr int smem_floats() {
  return 3 * Stage<WP>::kFloats + 2 * kTable + kExchange<WP, KS>;
}

using Ctx = WalkCtx;


// Cell c's inputs into stage X: dt of rows < L (zeros after), band rows j0 .. L-1, x rows < L of this
// block's columns (zeros past P and for rows ≥ L), C rows j0 .. L-1 (zeros elsewhere), and when the
// cell folds B rows < L (zeros after). Zeros where a product would otherwise read stale values: a
// stale NaN times a zero weight is still NaN inside an mma.
template <int WP, int T>
__device__ void issue(const Ctx& b, const CellIn& c, float* X) {
  using St = Stage<WP>;
  const int tid = threadIdx.x, L = c.L, j0 = c.j0;
  if (tid < kG) cp4(X + St::kDt + tid, b.src.dtp(b.h, c.cs + (tid < L ? tid : 0)), tid < L);
  for (int u = tid; u < kG * 4; u += T) {
    const int t = u / 4, v = u % 4;
    if (t >= j0 && t < L) {
      const int row = b.src.row0 + static_cast<int>(c.cs + t - b.src.start);
      cp16(X + St::kBand + t * kG + 4 * v, b.band + band_at(row, b.sh.groups, b.grp, kG, 0) + 4 * v);
    }
  }
  const int xend = b.sh.P - b.p0;
  for (int u = tid; u < kG * 4 * WP; u += T) {
    const int i = u / (4 * WP), v = u % (4 * WP);
    float* dst = X + St::kX + i * St::XS + 4 * v;
    if (i < L) copy4(dst, b.src.x(b.h, c.cs + i) + b.p0, 4 * v, xend);
    else zero4(dst);
  }
  for (int u = tid; u < kG * (kN / 4); u += T) {
    const int r = u / (kN / 4), v = u % (kN / 4);
    float* dC = X + St::kC + r * kCS + 4 * v;
    if (r >= j0 && r < L) copy4(dC, b.src.C(b.grp, c.cs + r), 4 * v, kN);
    else zero4(dC);
    if (c.fold) {
      float* dB = X + St::kB + r * kBS + 4 * v;
      if (r < L) copy4(dB, b.src.B(b.grp, c.cs + r), 4 * v, kN);  // ring rows first where the call starts inside
      else zero4(dB);
    }
  }
}

// Cell c's coefficient table, the values ssd_pipe.cu's coefficients form: each warp sums cum left to
// right by shuffles (lane i keeps cum_i); coef[t][i] = row_weight(cum_t, cum_i, dt_i)·band[t][t−i] for
// output rows t and i ≤ t (else 0), w_i = row_weight(cum_{L−1}, cum_i, dt_i) (0 for i ≥ L or a cell
// that does not fold), exp(cum_t), decay = exp(cum_{L−1}). A thread forms its entries in registers
// (form) and stores them later (store), so that their exp chains can run beside the cell before's
// products: no store between the two keeps the compiler from interleaving them.
template <int T>
struct Coefs {
  static constexpr int kPer = (kG * kG + T - 1) / T;  // table entries a thread
  float v[kPer];
  float we;     // the last warp: w (lanes 0..15) or exp(cum) (16..31) of row lane % 16
  float decay;  // warp 0's lane 0
};

template <int WP, int T>
__device__ Coefs<T> form_table(const CellIn& c, const float* X, float Ah) {
  using St = Stage<WP>;
  const int tid = threadIdx.x, lane = tid % 32, L = c.L > 0 ? c.L : 1, j0 = c.j0;
  const float* dts = X + St::kDt;
  const float* bnd = X + St::kBand;
  const float d = lane < L ? cum_term(dts[lane], Ah) : 0.0f;
  float total;
  const float cl = warp_cell_cum<kG>(d, L, lane, &total);
  Coefs<T> k;
#pragma unroll
  for (int a = 0; a < Coefs<T>::kPer; ++a) {
    const int e = a * T + tid, t = (e / kG) % kG, i = e % kG;  // a block of 512 threads: the upper half idle
    const float ct = __shfl_sync(0xffffffffu, cl, t), ci = __shfl_sync(0xffffffffu, cl, i);
    const float w = row_weight(ct, ci, dts[i]) * bnd[t * kG + (t - i)];
    k.v[a] = t >= j0 && t < L && i <= t ? w : 0.0f;
  }
  const int r = lane & 15;
  const float cr = __shfl_sync(0xffffffffu, cl, r);
  // Only the warps that store them form w, exp(cum) and the decay (each exp_f is some 25 instructions, and
  // the barrier waits for the busiest warp): w and exp(cum) the last warp, the decay warp 0.
  k.we = 0.0f;
  k.decay = 0.0f;
  const int warp = tid / 32;
  if (warp == T / 32 - 1) {
    if (lane < 16) {
      if (c.fold && r < L) k.we = row_weight(total, cr, dts[r]);
    } else if (r < L) {
      k.we = exp_f(cr);
    }
  }
  if (warp == 0 && lane == 0) k.decay = exp_f(total);
  return k;
}

template <int T>
__device__ void store_table(const Coefs<T>& k, float* F) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
#pragma unroll
  for (int a = 0; a < Coefs<T>::kPer; ++a) {
    const int e = a * T + tid;
    if (e < kG * kG) F[kCoef + (e / kG) * kFS + e % kG] = k.v[a];
  }
  if (warp == T / 32 - 1) F[(lane < 16 ? kW : kE - 16) + lane] = k.we;
  if (warp == 0 && lane == 0) F[kDecay] = k.decay;
}

template <int WP, int KS, bool kSplit>
__global__ void __launch_bounds__(32 * WP * KS)
    tc_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
              const float* Dskip, SsdState st, const float* band, float* y) {
  using St = Stage<WP>;
  constexpr int T = 32 * WP * KS;
  constexpr int NT = 16 / KS;  // the warp's n-tiles of 8
  constexpr int NQ = 4 / KS;   // the warp's quarters of n (4 n-tiles each)
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int pw = warp % WP, ks = warp / WP;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N;
  const Ctx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), band, h, h / sh.heads_per_group(),
              static_cast<int>(blockIdx.z) * 16 * WP};
  const bool bf16 = st.state_f32 == nullptr;
  const float Ah = A[h], Dh = Dskip[h];
  const int64_t call_end = start + p.n[seq];
  const int gi = lane / 4, q = lane % 4;
  const int wc = 16 * pw;                // the warp's first column in the block
  const int nt0 = ks * NT;               // the warp's first n-tile
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;

  extern __shared__ __align__(16) float smem[];
  auto Xb = [&](int k) { return smem + (k % 3) * St::kFloats; };
  auto Fb = [&](int k) { return smem + 3 * St::kFloats + (k % 2) * kTable; };
  auto Eb = [&](int k) { return smem + 3 * St::kFloats + 2 * kTable + (k % 2) * (kExchange<WP, KS> / 2); };

  CellIn c = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!c.live) return;
  auto after = [&](const CellIn& x, int k, bool& has) {
    const CellIn n = next_cell(x, call_end, g.cell, g.exact);
    has = x.fold && k + 1 < K && n.live;
    return n;
  };
  {
    issue<WP, T>(b, c, Xb(0));
    bool has1 = false;
    const CellIn c1 = after(c, 0, has1);
    if (has1) issue<WP, T>(b, c1, Xb(1));
    commit();
  }

  // S[j][e]: p = p0 + wc + gi + 8·(e / 2), n = 8·(nt0 + j) + 2q + e % 2.
  float S[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int pp = b.p0 + wc + gi + 4 * e;
      float2 v;
      const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + 8 * (nt0 + j) + 2 * q;
      if (bf16) {
        const uint32_t u = *reinterpret_cast<const uint32_t*>(st.state_bf16 + i);
        v = make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
      } else {
        v = *reinterpret_cast<const float2*>(st.state_f32 + i);
      }
      S[j][e] = v.x;
      S[j][e + 1] = v.y;
    }
  wait_all();
  __syncthreads();
  store_table(form_table<WP, T>(c, Xb(0), Ah), Fb(0));

  Pending pd{};
  bool folded = false;
  int k = 0;
  for (;; ++k) {
    bool has1 = false, has2 = false;
    const CellIn c1 = after(c, k, has1);
    CellIn c2 = c1;
    if (has1) c2 = after(c1, k + 1, has2);
    wait_all();
    // Cell k+1's inputs landed, cell k's table and cell k−1's partial sums stored; cell k−1's readers done.
    __syncthreads();
    if constexpr (KS > 1)
      if (k > 0 && ks == 0) finish<WP, KS>(pd, Eb(k - 1), pw, lane, sh, h, b.p0 + wc, Dh, y);
    if (has2) issue<WP, T>(b, c2, Xb(k + 2));
    commit();
    const Coefs<T> next = form_table<WP, T>(c1, Xb(k + 1), Ah);  // stale values where !has1: not stored

    const float* X = Xb(k);
    const float* F = Fb(k);
    const float* xs = X + St::kX;
    const float* Cs = X + St::kC;
    const float* Bs = X + St::kB;
    const int L = c.L, j0 = c.j0;
    // x[i][p] at i = 2q, 2q+1, 2q+8, 2q+9 and p = wc + gi (+8): the intra product's k16n8 operand
    // and, weighed by w_i, the fold's m16k16 operand.
    float xa[4][2];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) xa[a][pt] = xs[(2 * q + (a & 1) + 8 * (a >> 1)) * St::XS + wc + gi + 8 * pt];

    // The warp's quarters a_m of C·Sᵀ (two k16 steps each from zero), then their part of the sum.
    float yq[NQ][2][4] = {};
#pragma unroll
    for (int m = 0; m < NQ; ++m)
#pragma unroll
      for (int s2 = 0; s2 < 2; ++s2) {
        const int jl = 2 * m + s2;  // local k-step: n-tiles 2·jl, 2·jl + 1 of the warp's
        Frag4<kSplit> ca;
        const float* c0 = Cs + gi * kCS + 8 * (nt0 + 2 * jl) + 2 * q;
        const float2 v0 = lds2(c0), v1 = lds2(c0 + 8 * kCS), v2 = lds2(c0 + 8), v3 = lds2(c0 + 8 * kCS + 8);
        ca.set(0, v0.x, v0.y);
        ca.set(1, v1.x, v1.y);
        ca.set(2, v2.x, v2.y);
        ca.set(3, v3.x, v3.y);
#pragma unroll
        for (int pt = 0; pt < 2; ++pt) {
          Frag2<kSplit> sb;
          sb.set(0, S[2 * jl][2 * pt], S[2 * jl][2 * pt + 1]);
          sb.set(1, S[2 * jl + 1][2 * pt], S[2 * jl + 1][2 * pt + 1]);
          product<kSplit>(yq[m][pt], ca, sb, !bf16);  // a bf16 state has no rest
        }
      }
    float part[2][4];
#pragma unroll
    for (int pt = 0; pt < 2; ++pt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (NQ == 4) part[pt][e] = (yq[0][pt][e] + yq[1][pt][e]) + (yq[2][pt][e] + yq[3][pt][e]);
        else if constexpr (NQ == 2) part[pt][e] = yq[0][pt][e] + yq[1][pt][e];
        else part[pt][e] = yq[0][pt][e];
      }
    if (KS > 1 && ks > 0) {
      float* xch = Eb(k);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt)
#pragma unroll
        for (int e = 0; e < 4; ++e) xch[(((ks - 1) * WP + pw) * 8 + pt * 4 + e) * 32 + lane] = part[pt][e];
    } else {
      float ya[2][4] = {};
      Frag4<kSplit> fa;
      const float* f0 = F + kCoef + gi * kFS + 2 * q;
      const float2 v0 = lds2(f0), v1 = lds2(f0 + 8 * kFS), v2 = lds2(f0 + 8), v3 = lds2(f0 + 8 * kFS + 8);
      fa.set(0, v0.x, v0.y);
      fa.set(1, v1.x, v1.y);
      fa.set(2, v2.x, v2.y);
      fa.set(3, v3.x, v3.y);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) {
        Frag2<kSplit> xb;
        xb.set(0, xa[0][pt], xa[1][pt]);
        xb.set(1, xa[2][pt], xa[3][pt]);
        product<kSplit>(ya[pt], fa, xb);
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int t = gi + 8 * hr;
        const bool out = t >= j0 && t < L;
        pd.row[hr] = out ? b.src.row0 + static_cast<int>(c.cs + t - b.src.start) : -1;
        pd.e[hr] = F[kE + t];
#pragma unroll
        for (int pt = 0; pt < 2; ++pt) pd.x[hr][pt] = lds2(xs + t * St::XS + wc + 8 * pt + 2 * q);
      }
#pragma unroll
      for (int pt = 0; pt < 2; ++pt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pd.part[pt][e] = part[pt][e];
          pd.intra[pt][e] = ya[pt][e];
        }
      if constexpr (KS == 1) finish<WP, KS>(pd, nullptr, pw, lane, sh, h, b.p0 + wc, Dh, y);
    }
    {  // the fold, its result kept only where the cell folds (no branch: one basic block with the products)
      const bool fold = c.fold;
      float wv[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) wv[a] = F[kW + 2 * q + (a & 1) + 8 * (a >> 1)];
      Frag4<kSplit> xw;  // (w_i·x[i][p]) at p = gi (+8), i = 2q.. (+8)
      xw.set(0, wv[0] * xa[0][0], wv[1] * xa[1][0]);
      xw.set(1, wv[0] * xa[0][1], wv[1] * xa[1][1]);
      xw.set(2, wv[2] * xa[2][0], wv[3] * xa[3][0]);
      xw.set(3, wv[2] * xa[2][1], wv[3] * xa[3][1]);
      const float decay = F[kDecay];
      const float* b0 = Bs + 2 * q * kBS + 8 * nt0 + gi;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        Frag2<kSplit> bb;
        bb.set(0, b0[8 * j], b0[kBS + 8 * j]);
        bb.set(1, b0[8 * kBS + 8 * j], b0[9 * kBS + 8 * j]);
        float dl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        product<kSplit>(dl, xw, bb);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = fold_element(decay, S[j][e], dl[e], bf16);  // a cell that does not fold: B not copied
          S[j][e] = fold ? v : S[j][e];
        }
      }
    }
    if (has1) store_table(next, Fb(k + 1));
    folded = folded || c.fold;
    if (!has1) break;
    c = c1;
  }
  if constexpr (KS > 1) {
    __syncthreads();  // the last cell's partial sums stored
    if (ks == 0) finish<WP, KS>(pd, Eb(k), pw, lane, sh, h, b.p0 + wc, Dh, y);
  }
  if (!folded) return;  // the slot keeps its state
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int pp = b.p0 + wc + gi + 4 * e;
      const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + 8 * (nt0 + j) + 2 * q;
      if (bf16)  // already bf16-exact
        *reinterpret_cast<uint32_t*>(st.state_bf16 + i) =
            (__float_as_uint(S[j][e]) >> 16) | (__float_as_uint(S[j][e + 1]) & 0xffff0000u);
      else *reinterpret_cast<float2*>(st.state_f32 + i) = make_float2(S[j][e], S[j][e + 1]);
    }
}

// The call's last `cell` rows into the replay ring (what ssd.cu's ring launch writes; a separate
// launch because a group's B rows and a head's dt are read by other blocks of the walk).
__global__ void tc_ring_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt,
                               SsdState st) {
  const int seq = blockIdx.x, h = blockIdx.y;
  if (uses_decode_row(g, p.n[seq])) return;
  const int64_t start = p.start[seq], end = start + p.n[seq];
  const int64_t from = end - g.cell > start ? end - g.cell : start;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const bool writes_B = h % sh.heads_per_group() == 0;
  const int grp = h / sh.heads_per_group();
  for (int64_t t = from; t < end; ++t) {
    const std::size_t xb = (static_cast<std::size_t>(src.slot) * sh.H + h) * g.cell + ring_x_slot(g, h, sh.H, t);
    for (int e = threadIdx.x; e < sh.P; e += blockDim.x) st.ring_x[xb * sh.P + e] = src.x(h, t)[e];
    if (threadIdx.x == 0) st.ring_dt[xb] = src.dtv(h, t);
    if (writes_B) {
      const std::size_t bb = (static_cast<std::size_t>(src.slot) * sh.groups + grp) * g.cell + t % g.cell;
      for (int e = threadIdx.x; e < sh.N; e += blockDim.x) st.ring_B[bb * sh.N + e] = src.B(grp, t)[e];
    }
  }
}

template <int WP, int KS, bool kSplit>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s) {
  constexpr std::size_t smem = static_cast<std::size_t>(smem_floats<WP, KS>()) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H),
                  static_cast<unsigned>((sh.P + 16 * WP - 1) / (16 * WP)));
  ensure_smem(tc_kernel<WP, KS, kSplit>, smem, "ssd tc smem");
  tc_kernel<WP, KS, kSplit><<<grid, 32 * WP * KS, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, band, y);
  check_launch("ssd tc");
}

template <bool kSplit>
void launch_way(int wp, int ks, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                const float* dt, const float* A, const float* D, const SsdState& st, const float* band, float* y,
                cudaStream_t s) {
  by_way(wp, ks, sh, [&](auto wpc, auto ksc) {
    launch<decltype(wpc)::value, decltype(ksc)::value, kSplit>(sh, g, p, xbc, ld, dt, A, D, st, band, y, s);
  });
}

}  // namespace
}  // namespace ssd

namespace {
// The band's floats in the scratch, rounded up to 16 bytes: the hoisted walk's tables follow it.
std::size_t band_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return (ssd_scratch_floats(sh, p, g) + 3) / 4 * 4;
}
}  // namespace

std::size_t ssd_tc_scratch_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return band_floats(sh, p, g) +
         static_cast<std::size_t>(p.num_cell_tasks > 0 ? p.num_cell_tasks : 0) * sh.H * kSsdTcTableWords;
}

bool ssd_tc_supported(const SsdShape& sh, const ScanGrid& g) {
  return g.cell == ssd::kG && sh.N == ssd::kN && sh.P % 16 == 0 && sh.P > 0 && sh.groups > 0 && sh.H % sh.groups == 0;
}

SsdTcWay ssd_tc_default_way(const SsdShape& sh, int seqs) {
  // The best ways measured on an H200 (32 heads × 64, 2048-row sequences, session 12): 2 × 4 warps at one
  // sequence (333 µs; 4 × 4 354, 1 × 4 375), 4 × 1 at 8 and 32 (501 and 1,862 µs; 4 × 2 724 and 2,627).
  // A launch shape only: every way gives the same bits.
  const long heads = static_cast<long>(seqs) * sh.H;
  SsdTcWay w;
  if (heads <= 132) {
    w.warps_p = sh.P % 32 == 0 ? 2 : 1;
    w.warps_n = 4;
  } else {
    w.warps_p = sh.P % 64 == 0 ? 4 : sh.P % 32 == 0 ? 2 : 1;
    w.warps_n = 1;
  }
  return w;
}

void ssd_tc_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
                 const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
                 cudaStream_t s, SsdTcWay way) {
  if (p.num_rows <= 0) return;
  if (!ssd_tc_supported(sh, g))
    throw Error("CUDA SSD tc: needs cell 16, N 128, P a multiple of 16 (cell " + std::to_string(g.cell) + ", N " +
                std::to_string(sh.N) + ", P " + std::to_string(sh.P) + ")");
  if (p.num_ssu_seqs > 0 || p.num_decode_seqs > 0) throw Error("CUDA SSD tc: one-row calls are not handled");
  if (scratch_floats < ssd_tc_scratch_floats(sh, p, g))
    throw Error("CUDA SSD tc: scratch smaller than ssd_tc_scratch_floats()");
  if (p.num_cell_tasks <= 0) return;
  const SsdTcWay d = ssd_tc_default_way(sh, p.num_seqs);
  const int wp = way.warps_p > 0 ? way.warps_p : d.warps_p, ks = way.warps_n > 0 ? way.warps_n : d.warps_n;
  ssd::launch_band(sh, g, p, xbc, ld_xbc, st, scratch, s);
  if (way.hoisted)
    ssd_tc_hoisted_walk(wp, ks, way.products == SsdTcProducts::split, sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch,
                        scratch + band_floats(sh, p, g), y, s);
  else if (way.products == SsdTcProducts::split)
    ssd::launch_way<true>(wp, ks, sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, y, s);
  else ssd::launch_way<false>(wp, ks, sh, g, p, xbc, ld_xbc, dt, A, D, st, scratch, y, s);
  if (g.exact) {
    ssd::tc_ring_kernel<<<dim3(p.num_seqs, sh.H), 64, 0, s>>>(sh, g, p, xbc, ld_xbc, dt, st);
    check_launch("ssd tc ring");
  }
}

}  // namespace parity::cuda
