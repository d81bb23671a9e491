// Exact mode's one-row decode on the tensor-core walk's steps (ssd_tc.h), so that a row decoded here
// has the bits ssd_tc_scan's walk gives it in a prefill. One block a (sequence, head, 16·WP columns of p), every
// one-row sequence of a pass in one launch. Row t sits at index j of its cell (rows 0..j−1 in the replay ring):
// - the cell's rows 0..j in shared memory (x of the block's columns, B), zeros after j; C_t as row j of a C
//   tile whose other rows are zero: an mma output row depends only on its own row of A (CudaSsdTc's
//   AnMmaRowDependsOnlyOnThatRowAndColumn), so row j comes out as it does among the walk's 16;
// - cum, coef[t][·], w, exp(cum_t) and the decay by the table pass's helpers (the fp32 values every path forms);
// - the state in the walk's register layout, C·Sᵀ's quarters, the intra product and, where the row completes
//   the cell, the fold, by ssd_tc_products.cuh: the walk's own steps.
// Row t also goes into the replay ring (x, dt; B by the group's first head), as ssd_decode.cu writes it.
//
// Schedule (session 45). Everything earlier passes wrote is asked for before the wait for the kernel before this
// one (the conv, which writes row t's x, B, C and dt; the wait is a no-op on an ordinary launch): the state into
// the walk's registers, rows 0..j−1 from the ring into shared memory by asynchronous copies. Only row t is
// copied after it. Every latency then overlaps the others, the conv's tail (launched programmatically) and the
// setup; session 44's kernel loaded a value a loop iteration and asked for the state only after the table
// pass. The same values land in the same places: no bit changes.
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc.h"
#include "kernels_cuda/ssd_tc_cells.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"
#include "kernels_cuda/ssd_tc_products.cuh"
#include "kernels_cuda/ssd_tc_steps.cuh"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda {
namespace ssd {
namespace {

template <int WP, bool kSplit>
__global__ void __launch_bounds__(32 * WP, 16 / WP)
    tc_decode_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                     const float* Dskip, SsdState st, bool release_first, float* y) {
  constexpr int T = 32 * WP, NT = 16, XS = 16 * WP + 4;
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, pw = tid / 32;
  if (!uses_decode_row(g, p.n[seq])) return;
  const int slot = p.slot[seq], row0 = p.row0[seq], cell = g.cell;
  const int64_t start = p.start[seq];
  const int tmod = cell_mod(start, cell);
  const int H = sh.H, P = sh.P, N = sh.N, I = H * P;
  const int grp = h / sh.heads_per_group();
  const int p0 = static_cast<int>(blockIdx.z) * 16 * WP;
  const RowInCell ric = row_in_cell(g, h, H, start, tmod);
  const int j = ric.j, rows = j + 1;
  const bool fold = ric.fold, bf16 = st.state_f32 == nullptr;

  // Where source row i (0..j) lives: row j is this pass's, rows before it are in the replay ring (ssd_decode_tile.cuh).
  const float* cur = xbc + static_cast<std::size_t>(row0) * ld;
  const std::size_t xbase = (static_cast<std::size_t>(slot) * H + h) * cell;
  const std::size_t bbase = (static_cast<std::size_t>(slot) * sh.groups + grp) * cell;
  const int xs0 = ric.xs0, bs0 = tmod - j < 0 ? tmod - j + cell : tmod - j;
  auto wrap = [cell](int s) { return s >= cell ? s - cell : s; };
  auto x_row = [&](int i) -> const float* {
    return i == j ? cur + static_cast<std::size_t>(h) * P : st.ring_x + (xbase + wrap(xs0 + i)) * P;
  };
  auto B_row = [&](int i) -> const float* {
    return i == j ? cur + I + static_cast<std::size_t>(grp) * N : st.ring_B + (bbase + wrap(bs0 + i)) * N;
  };
  auto dt_of = [&](int i) -> float {
    return i == j ? dt[static_cast<std::size_t>(row0) * H + h] : st.ring_dt[xbase + wrap(xs0 + i)];
  };

  __shared__ float dts[kG], coefr[kG], wr[kG], scal[2];  // scal: exp(cum_t), the decay
  __shared__ __align__(16) float CB[kCBFloats];
  __shared__ __align__(16) uint16_t V[kParts<kSplit> * kTile];
  __shared__ __align__(16) float xs[kG * XS];

  const int gi = lane / 4, q = lane % 4, wc = 16 * pw;
  const std::size_t sbase = (static_cast<std::size_t>(slot) * H + h) * P * N;
  float S[NT][4];  // the walk's layout (ssd_tc_products.cuh's load_state)
  load_state<NT>(st, sbase, p0 + wc + gi, N, 0, q, S);
  // The replayed rows (before j) by asynchronous copies, and the zeros (after it); row j's slots after the wait.
  // (Loads into registers, one a loop iteration, waited for each before its store: ~24 round trips a block.)
  if (tid < kG && tid != j) dts[tid] = tid < j ? dt_of(tid) : 0.0f;
  for (int u = tid; u < kG * (kN / 4); u += T) {
    const int r = u / (kN / 4), v = u % (kN / 4);
    if (r == j) continue;
    zero4(CB + kC + r * kRow + 4 * v);
    float* dB = CB + kB + r * kRow + 4 * v;
    if (r < j) copy4(dB, B_row(r), 4 * v, kN);
    else zero4(dB);
  }
  for (int u = tid; u < kG * 4 * WP; u += T) {
    const int r = u / (4 * WP), v = u % (4 * WP);
    if (r == j) continue;
    float* dx = xs + r * XS + 4 * v;
    if (r < j) copy4(dx, x_row(r) + p0, 4 * v, 16 * WP);
    else zero4(dx);
  }
  commit();
  // The kernel before this one (the conv) writes row t; it writes no state and no ring.
  wait_and_release(release_first);
  if (tid == 0) dts[j] = dt_of(j);
  const float* Ct = cur + I + static_cast<std::size_t>(sh.groups + grp) * N;
  const float* Bt = B_row(j);
  const float* xt = x_row(j) + p0;
  for (int u = tid; u < kN / 2 + 4 * WP; u += T) {
    if (u < kN / 4) copy4(CB + kC + j * kRow + 4 * u, Ct, 4 * u, kN);
    else if (u < kN / 2) copy4(CB + kB + j * kRow + 4 * (u - kN / 4), Bt, 4 * (u - kN / 4), kN);
    else copy4(xs + j * XS + 4 * (u - kN / 2), xt, 4 * (u - kN / 2), 16 * WP);
  }
  commit();
  cp_async_wait<0>();
  __syncthreads();
  // Row t into the replay ring: no block of this launch reads its slots (the rows replayed are j's predecessors).
  {
    const std::size_t xb = xbase + wrap(xs0 + j);
    for (int c = tid; c < 16 * WP && p0 + c < P; c += T) st.ring_x[xb * P + p0 + c] = xs[j * XS + c];
    if (blockIdx.z == 0) {
      if (tid == 0) st.ring_dt[xb] = dts[j];
      if (h % sh.heads_per_group() == 0) {
        const std::size_t bb = bbase + wrap(bs0 + j);
        for (int n = tid; n < N; n += T) st.ring_B[bb * N + n] = CB[kB + j * kRow + n];
      }
    }
  }
  if (tid < 32) {  // the table pass's values for row j (ssd_tc_tables.cu), lanes as its rows
    const float d = lane < rows ? cum_term(dts[lane], A[h]) : 0.0f;
    float total;
    const float cl = warp_cell_cum<kG>(d, rows, lane, &total);
    const float cj = __shfl_sync(0xffffffffu, cl, j);
    if (lane < kG) {
      coefr[lane] = lane <= j ? row_weight(cj, cl, dts[lane]) * cb_dot(CB + kC + j * kRow, CB + kB + lane * kRow, kN)
                              : 0.0f;
      wr[lane] = fold && lane < rows ? row_weight(total, cl, dts[lane]) : 0.0f;
    }
    if (lane == 0) {
      scal[0] = exp_f(cj);
      scal[1] = exp_f(total);
    }
  }
  convert<T, kSplit>(CB, fold, V, tid);
  __syncthreads();

  float xa[4][2];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int pt = 0; pt < 2; ++pt) xa[a][pt] = xs[(2 * q + (a & 1) + 8 * (a >> 1)) * XS + wc + gi + 8 * pt];

  const int crow = (lane & 7) + 8 * ((lane >> 3) & 1), ccol = 8 * (lane >> 4);
  float part[2][4];
  inter_part<NT, kSplit>(V, crow, ccol, 0, S, bf16, part);
  Frag4<kSplit> fa;  // row j of the coef fragment (the table's word order: rows g (+8), columns 2q (+8))
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = gi + 8 * (r & 1), col = 2 * q + 8 * (r >> 1);
    fa.set(r, row == j ? coefr[col] : 0.0f, row == j ? coefr[col + 1] : 0.0f);
  }
  float ya[2][4];
  intra_product<kSplit>(fa, xa, ya);
  if (gi == j % 8) {
    const int hr = j / 8;
    float* yr = y + static_cast<std::size_t>(row0) * I + static_cast<std::size_t>(h) * P + p0 + wc;
    const float e = scal[0], Dh = Dskip[h];
#pragma unroll
    for (int pt = 0; pt < 2; ++pt) {
      const float2 xt = *reinterpret_cast<const float2*>(xs + j * XS + wc + 8 * pt + 2 * q);
      float2 o;
      o.x = row_output_scaled(e, part[pt][2 * hr], ya[pt][2 * hr], Dh, xt.x);
      o.y = row_output_scaled(e, part[pt][2 * hr + 1], ya[pt][2 * hr + 1], Dh, xt.y);
      *reinterpret_cast<float2*>(yr + 8 * pt + 2 * q) = o;
    }
  }
  if (!fold) return;  // the slot keeps its state
  float wv[4];
#pragma unroll
  for (int a = 0; a < 4; ++a) wv[a] = wr[2 * q + (a & 1) + 8 * (a >> 1)];
  const int brow = crow, bcol = 8 * (lane >> 4);
  fold_state<NT, kSplit>(V + kTile, brow, bcol, 0, xa, wv, scal[1], bf16, S);
  store_state<NT>(st, sbase, p0 + wc + gi, N, 0, q, S);
}

template <int WP, bool kSplit>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, bool programmatic, bool release_first, float* y,
            cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>(sh.P / (16 * WP)));
  launch_programmatic_if(programmatic, tc_decode_kernel<WP, kSplit>, grid, dim3(32 * WP), 0, s, "ssd tc decode", sh, g,
                         p, xbc, ld, dt, A, D, st, release_first, y);
}

}  // namespace
}  // namespace ssd

void ssd_tc_decode(bool split, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, SsdState st, float* y, cudaStream_t s) {
  const int wp = sh.P % 64 == 0 ? 4 : sh.P % 32 == 0 ? 2 : 1;  // a launch shape only: the bits are the walk's
  // Programmatic when ssd_decode.cu's launch would be (ops.h's modes; its L2 requests have no part here).
  const bool programmatic = exact_decode_launch_mode(p.num_seqs) != 0;
  const bool release_first = programmatic && (gemm_early_flags() & kGemmEarlySsmFirst) != 0;
  auto go = [&](auto wpc) {
    constexpr int W = decltype(wpc)::value;
    if (split) ssd::launch<W, true>(sh, g, p, xbc, ld, dt, A, D, st, programmatic, release_first, y, s);
    else ssd::launch<W, false>(sh, g, p, xbc, ld, dt, A, D, st, programmatic, release_first, y, s);
  };
  if (wp == 4) go(std::integral_constant<int, 4>{});
  else if (wp == 2) go(std::integral_constant<int, 2>{});
  else go(std::integral_constant<int, 1>{});
}

}  // namespace parity::cuda
