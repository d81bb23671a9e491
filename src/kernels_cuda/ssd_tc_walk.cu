// The cell walk with its products on tensor cores (ssd_tc.h says what it computes).
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
// expression, at the next cell's barrier; so every (WP, KS) gives the same bits.
//
// Only the fold and C·Sᵀ depend on the state, so the rest is kept off the walk's serial chain (session 21:
// the walk that formed these inside it took 1.9× / 1.1× / 1.2× as long at 1 / 8 / 32 × 2048 rows):
// - A table pass (ssd_tc_tables.cu) forms every cell's coefficient table before the walk; the walk copies a
//   cell's table (1,168 bytes) with its inputs: no shuffle chain and no exp inside the walk.
// - C and B come as bf16 tiles (head, and rest for split products), copied from the rows the band's launch
//   converted once for every head (ssd_band.cu; session 48: each block had copied the fp32 rows and converted
//   them itself, twice the bytes through L2 and a block-wide conversion a cell); each warp reads its
//   fragments by ldmatrix (C as the m16k16 operand of C·Sᵀ, B transposed as the k16n8 operand of the fold's
//   delta).
// - Whole cells of the call's own rows copy table and x without a branch or a row lookup a copy
//   (issue_table_x_rows, ssd_tc_cells.cuh); the call's first and last cells take the general copies.
// - The fold runs only where the cell folds, with the state's dtype a constant of its loop.
// A cell costs one block barrier; its copies run a cell ahead (two ahead measured the same).
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_products.cuh"
#include "kernels_cuda/ssd_tc_steps.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

template <int WP, int KS, bool kSplit>
constexpr int smem_floats() {
  return 3 * Stage<WP>::kFloats + 3 * kParts<kSplit> * kTile / 2 + kExchange<WP, KS>;  // tiles: 3 stages of u16
}

using Ctx = WalkCtx;

// Blocks an SM the registers must allow: twelve warps where a block is small (4 × 1: three blocks, which
// its shared memory also allows).
template <int WP, int KS>
constexpr int kMinBlocks = 12 / (WP * KS) > 1 ? 12 / (WP * KS) : 1;

template <int WP, int KS, bool kSplit>
__global__ void __launch_bounds__(32 * WP * KS, kMinBlocks<WP, KS>)
    walk_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* Dskip,
                SsdState st, const float* tables, const uint16_t* rows16, float* y) {
  using St = Stage<WP>;
  constexpr int T = 32 * WP * KS;
  constexpr int NT = 16 / KS;  // the warp's n-tiles of 8
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int pw = warp % WP, ks = warp / WP;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N;
  const Ctx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), nullptr, h, h / sh.heads_per_group(),
              static_cast<int>(blockIdx.z) * 16 * WP};
  const bool bf16 = st.state_f32 == nullptr;
  const float Dh = Dskip[h];
  const int64_t call_end = start + p.n[seq];
  const int gi = lane / 4, q = lane % 4;
  const int wc = 16 * pw;   // the warp's first column in the block
  const int nt0 = ks * NT;  // the warp's first n-tile
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;
  auto table = [&](int k) { return tables + (static_cast<std::size_t>(t0 + k) * sh.H + h) * kTabWords; };

  extern __shared__ __align__(16) float smem[];
  auto Xb = [&](int k) { return smem + (k % 3) * St::kFloats; };
  uint16_t* const vbase = reinterpret_cast<uint16_t*>(smem + 3 * St::kFloats);
  auto Vb = [&](int k) { return vbase + (k % 3) * kParts<kSplit> * kTile; };
  float* const xbase = smem + 3 * St::kFloats + 3 * kParts<kSplit> * kTile / 2;
  auto Eb = [&](int k) { return xbase + (k % 2) * (kExchange<WP, KS> / 2); };

  CellIn c = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!c.live) return;
  auto after = [&](const CellIn& x, int k, bool& has) { return cell_after(x, k, K, call_end, g, has); };
  // Whole cells of the call's own rows take the branch-free copies of table and x; the call's first and last
  // cells and rows that are not 16-byte aligned take the general ones.
  const bool aligned = (reinterpret_cast<std::uintptr_t>(xbc) & 15) == 0 && ld % 4 == 0;
  const int xoff = h * P + b.p0, ring_slot = p.num_rows + kSsdTcRingRows * seq;
  auto issue_cell = [&](const CellIn& x, int kx) {
    if (aligned && x.j0 == 0 && x.L == kG && x.cs >= start) {
      const float* rowp = xbc + static_cast<std::size_t>(b.src.row0 + static_cast<int>(x.cs - start)) * ld;
      issue_table_x_rows<WP, T>(rowp, ld, xoff, table(kx), Xb(kx), tid);
    } else {
      issue_table_x<WP, T>(b, x, table(kx), Xb(kx), tid);
    }
    issue_tiles<T, kSplit>(rows16, sh.groups, b.grp, start, b.src.row0, ring_slot, x, Vb(kx), tid);
  };
  // The copies run a cell ahead of the products (two ahead measured the same): `last` is the latest cell
  // issued, `ki` its index.
  CellIn last = c;
  int ki = 0;
  bool more = true;
  auto issue_next = [&] {
    if (!more) return;
    bool has = false;
    const CellIn n = after(last, ki, has);
    if (!has) {
      more = false;
      return;
    }
    ++ki;
    last = n;
    issue_cell(n, ki);
  };
  issue_cell(c, 0);
  commit();
  issue_next();
  commit();

  // S[j][e]: p = p0 + wc + gi + 8·(e / 2), n = 8·(nt0 + j) + 2q + e % 2.
  float S[NT][4];
  load_state<NT>(st, sbase, b.p0 + wc + gi, N, nt0, q, S);
  ptx::cp_async_wait<1>();  // cell 0
  __syncthreads();

  // Lane addresses of ldmatrix: C's m16k16 operand (matrices rows 0-7 / 8-15 × columns +0 / +8) and B's
  // transposed k16n8 operands of two n-tiles (rows 0-7 / 8-15 of tile j, then of tile j + 1).
  const int crow = (lane & 7) + 8 * ((lane >> 3) & 1), ccol = 8 * (lane >> 4);
  const int brow = crow, bcol = 8 * (lane >> 4);

  Pending pd{};
  bool folded = false;
  int k = 0;
  for (;; ++k) {
    bool has1 = false;
    const CellIn c1 = after(c, k, has1);
    ptx::cp_async_wait<0>();  // cell k+1
    // Cell k+1's inputs landed and cell k−1's partial sums stored; cell k−1's readers done.
    __syncthreads();
    if constexpr (KS > 1)
      if (k > 0 && ks == 0) finish<WP, KS>(pd, Eb(k - 1), pw, lane, sh, h, b.p0 + wc, Dh, y);
    issue_next();  // cell k+2, over cell k−1's stage
    commit();

    const float* X = Xb(k);
    const float* F = X + St::kTab;
    const float* xs = X + St::kX;
    const uint16_t* V = Vb(k);
    const int L = c.L, j0 = c.j0;
    // x[i][p] at i = 2q, 2q+1, 2q+8, 2q+9 and p = wc + gi (+8): the intra product's k16n8 operand
    // and, weighed by w_i, the fold's m16k16 operand.
    float xa[4][2];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int pt = 0; pt < 2; ++pt) xa[a][pt] = xs[(2 * q + (a & 1) + 8 * (a >> 1)) * St::XS + wc + gi + 8 * pt];

    // The warp's quarters of C·Sᵀ and their part of the sum (ssd_tc_products.cuh).
    float part[2][4];
    inter_part<NT, kSplit>(V, crow, ccol, nt0, S, bf16, part);
    if (KS > 1 && ks > 0) {
      float* xch = Eb(k);
#pragma unroll
      for (int pt = 0; pt < 2; ++pt)
#pragma unroll
        for (int e = 0; e < 4; ++e) xch[(((ks - 1) * WP + pw) * 8 + pt * 4 + e) * 32 + lane] = part[pt][e];
    } else {
      float ya[2][4];
      const Frag4<kSplit> fa = coef_fragment<kSplit>(F, lane);
      intra_product<kSplit>(fa, xa, ya);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int t = gi + 8 * hr;
        const bool out = t >= j0 && t < L;
        pd.row[hr] = out ? b.src.row0 + static_cast<int>(c.cs + t - b.src.start) : -1;
        pd.e[hr] = F[kTabE + t];
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
    if (c.fold) {  // the fold (a cell the call does not complete keeps the state: its B was not copied)
      float wv[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) wv[a] = F[kTabW + 2 * q + (a & 1) + 8 * (a >> 1)];
      fold_state<NT, kSplit>(V + kTile, brow, bcol, nt0, xa, wv, F[kTabDecay], bf16, S);
    }
    folded = folded || c.fold;
    if (!has1) break;
    c = c1;
  }
  if constexpr (KS > 1) {
    __syncthreads();  // the last cell's partial sums stored
    if (ks == 0) finish<WP, KS>(pd, Eb(k), pw, lane, sh, h, b.p0 + wc, Dh, y);
  }
  if (!folded) return;  // the slot keeps its state
  store_state<NT>(st, sbase, b.p0 + wc + gi, N, nt0, q, S);
}

template <int WP, int KS, bool kSplit>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* D, const SsdState& st, const float* tables, const uint16_t* rows16, float* y,
            cudaStream_t s) {
  constexpr std::size_t smem = static_cast<std::size_t>(smem_floats<WP, KS, kSplit>()) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H),
                  static_cast<unsigned>((sh.P + 16 * WP - 1) / (16 * WP)));
  ensure_smem(walk_kernel<WP, KS, kSplit>, smem, "ssd tc walk smem");
  walk_kernel<WP, KS, kSplit><<<grid, 32 * WP * KS, smem, s>>>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y);
  check_launch("ssd tc walk");
}

}  // namespace
}  // namespace ssd

void ssd_tc_walk(int wp, int ks, bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc,
                 int ld, const float* dt, const float* D, SsdState st, const float* tables, const uint16_t* rows16,
                 float* y, cudaStream_t s) {
  ssd::by_way(wp, ks, sh, [&](auto wpc, auto ksc) {
    constexpr int W = decltype(wpc)::value, K = decltype(ksc)::value;
    if (split) ssd::launch<W, K, true>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s);
    else ssd::launch<W, K, false>(sh, g, p, xbc, ld, dt, D, st, tables, rows16, y, s);
  });
}

}  // namespace parity::cuda
