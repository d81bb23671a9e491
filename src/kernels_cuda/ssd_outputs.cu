// Phase 3 of the scan: every output row, side by side over (cell task, head, 16-row tile):
//   y_t[p] = (exp(cum_t) · dot(C_t, S_start[p]) + Σ_{i≤t} coef_{t,i} · x_i[p]) + D · x_t[p]
//   coef_{t,i} = (exp(cum_t − cum_i) · dt_i) · Σ_n C_t[n]·B_i[n]   (n ascending, one fmaf chain)
//   dot(C, S[p]) = (a_0 + a_1) + (a_2 + a_3),  a_q = Σ_{n ≡ q mod 4, ascending} C[n]·S[p][n]
// and the intra-cell sum runs over i ascending, rows of an earlier call read from the replay ring.
// A row's value depends only on its cell's start state and the cell's rows up to it: the same
// operations whether the call holds the whole cell, part of it, or only this row.
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

// 256 threads (three blocks per SM); rows in tiles of 16, the intra-cell sum's source rows
// staged 16 at a time.
// Rows of S, C and B are padded by 4 floats: a warp's float4 reads of 8 consecutive rows then fall
// in distinct banks.
constexpr int kThreads = 256, kRows = 16, kSrc = 16, kPad = 4;
// Outputs per thread: kRows·P / kThreads, at most kOut (P ≤ 128).
constexpr int kOut = 8;

struct Layout {
  int Np;  // padded row of S, C, B
  std::size_t S, C, B, x, coef, dts, cum, total;  // offsets in floats
};
__host__ __device__ inline Layout layout(const SsdShape& sh, int cell) {
  Layout l{};
  l.Np = (sh.N + 3) / 4 * 4 + kPad;
  l.S = 0;
  l.C = l.S + static_cast<std::size_t>(sh.P) * l.Np;
  l.B = l.C + static_cast<std::size_t>(kRows) * l.Np;
  l.x = l.B + static_cast<std::size_t>(kSrc) * l.Np;
  l.coef = l.x + static_cast<std::size_t>(kSrc) * sh.P;
  l.dts = l.coef + static_cast<std::size_t>(kRows) * kSrc;
  l.cum = l.dts + cell;
  l.total = l.cum + cell;
  return l;
}

__global__ void __launch_bounds__(kThreads, 3) outputs_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld,
                                                           const float* dt, const float* A, const float* Dskip,
                                                           SsdState st, Scratch sc, float* y) {
  const int task = blockIdx.x, h = blockIdx.y;
  const CellTask t = cell_task(g, p, task, h, sh.H);
  const int jt = t.j0 + blockIdx.z * kRows;  // the tile's first row (cell index)
  if (!t.live || jt >= t.L) return;
  const int R = t.L - jt < kRows ? t.L - jt : kRows;
  const int jmax = jt + R;  // rows jt .. jmax-1; their sums read source rows 0 .. jmax-1
  const int grp = h / sh.heads_per_group(), P = sh.P, N = sh.N, HP = sh.H * sh.P;
  const RowSource src = source_of(sh, g, p, t.seq, xbc, ld, dt, st);
  const Layout lo = layout(sh, g.cell);
  const int Np = lo.Np;

  extern __shared__ float smem[];
  float *S = smem + lo.S, *Cs = smem + lo.C, *Bs = smem + lo.B, *xs = smem + lo.x, *coef = smem + lo.coef;
  float *dts = smem + lo.dts, *cum = smem + lo.cum;

  // The cell's start state: scratch (the chain's copy) or the slot, which the chain left as is.
  if (start_state_in_scratch(t)) {
    const float* s0 = sc.state(sh, task, h);
    for (int e = threadIdx.x; e < P * N; e += kThreads) S[(e / N) * Np + e % N] = s0[e];
  } else {
    const std::size_t base = (static_cast<std::size_t>(src.slot) * sh.H + h) * P * N;
    for (int e = threadIdx.x; e < P * N; e += kThreads)
      S[(e / N) * Np + e % N] = st.state_f32 ? st.state_f32[base + e] : widen_bf16(st.state_bf16[base + e]);
  }
  for (int e = threadIdx.x; e < P * (Np - N); e += kThreads) S[(e / (Np - N)) * Np + N + e % (Np - N)] = 0.0f;
  for (int e = threadIdx.x; e < kRows * Np; e += kThreads) {
    const int r = e / Np, n = e % Np;
    Cs[e] = r < R && n < N ? src.C(grp, t.c.start + jt + r)[n] : 0.0f;
  }
  cell_cum(src, h, t.c.start, jmax, A[h], dts, cum, kThreads);  // ends with a barrier

  // This thread's outputs: (row r, column pp) for o = threadIdx.x + m·kThreads < kRows·P.
  float inter[kOut], intra[kOut];
  const int outs = (kRows * P + kThreads - 1) / kThreads;
#pragma unroll
  for (int m = 0; m < kOut; ++m) {
    inter[m] = 0.0f;
    intra[m] = 0.0f;
    const int o = threadIdx.x + m * kThreads, r = o / P, pp = o % P;
    if (m >= outs || r >= R) continue;
    inter[m] = quarter_dot(Cs + r * Np, S + pp * Np, N);
  }

  // Intra-cell sum: source rows in stages of kSrc, each row's sum continuing across stages.
  for (int i0 = 0; i0 < jmax; i0 += kSrc) {
    const int rows = jmax - i0 < kSrc ? jmax - i0 : kSrc;
    __syncthreads();  // the previous stage is consumed
    for (int e = threadIdx.x; e < rows * Np; e += kThreads) {
      const int i = e / Np, n = e % Np;
      Bs[e] = n < N ? src.B(grp, t.c.start + i0 + i)[n] : 0.0f;
    }
    for (int e = threadIdx.x; e < rows * P; e += kThreads) xs[e] = src.x(h, t.c.start + i0 + e / P)[e % P];
    __syncthreads();
    for (int e = threadIdx.x; e < kRows * kSrc; e += kThreads) {
      const int r = e / kSrc, ii = e % kSrc, j = jt + r, i = i0 + ii;
      float v = 0.0f;
      if (r < R && ii < rows && i <= j) {
        v = row_weight(cum[j], cum[i], dts[i]) * cb_dot(Cs + r * Np, Bs + ii * Np, N);
      }
      coef[e] = v;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kOut; ++m) {
      const int o = threadIdx.x + m * kThreads, r = o / P, pp = o % P;
      if (m >= outs || r >= R) continue;
      const int iend = jt + r - i0 + 1 < rows ? jt + r - i0 + 1 : rows;  // i ≤ j
      for (int ii = 0; ii < iend; ++ii) intra[m] = fmaf(coef[r * kSrc + ii], xs[ii * P + pp], intra[m]);
    }
  }

  const float Dh = Dskip[h];
#pragma unroll
  for (int m = 0; m < kOut; ++m) {
    const int o = threadIdx.x + m * kThreads, r = o / P, pp = o % P;
    if (m >= outs || r >= R) continue;
    const int j = jt + r;
    const int64_t pos = t.c.start + j;
    const int row = src.row0 + static_cast<int>(pos - t.start);
    y[static_cast<std::size_t>(row) * HP + static_cast<std::size_t>(h) * P + pp] =
        row_output(cum[j], inter[m], intra[m], Dh, src.x(h, pos)[pp]);
  }
}

}  // namespace

void launch_outputs(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                    const float* dt, const float* A, const float* D, const SsdState& st, Scratch sc, float* y,
                    cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  if (sh.P > kThreads * kOut / kRows) throw Error("CUDA SSD: head_dim above " + std::to_string(kThreads * kOut / kRows));
  const std::size_t smem = layout(sh, g.cell).total * sizeof(float);
  ensure_smem(outputs_kernel, smem, "ssd outputs smem");
  const unsigned tiles = static_cast<unsigned>((g.cell + kRows - 1) / kRows);
  outputs_kernel<<<dim3(p.num_cell_tasks, sh.H, tiles), kThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, sc, y);
  check_launch("ssd outputs");
}

}  // namespace parity::cuda::ssd
