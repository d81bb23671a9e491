// Phase 1 of the scan: every folded cell's delta, side by side over (cell task, head):
//   delta[p][n] = Σ_i (w_i · x_i[p]) · B_i[n],   w_i = exp(cum_{L-1} − cum_i) · dt_i,
// the sum one fmaf chain over the cell's rows i ascending (rows of an earlier call from the replay
// ring), and cell_decay = exp(cum_{L-1}). These are exactly the operations the fold performed when
// it ran inside the chain, so a cell's delta has the same bits whichever call completes it.
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

// 256 threads, each owning a 4 (p) × 8 (n) block of the delta in registers: one pass covers
// 8192 elements (P 64 × N 128); larger states take more passes (grid z). Rows are staged 32 at a
// time; a thread's accumulators carry across the stages, so each element's sum stays one chain.
constexpr int kThreads = 256, kTP = 4, kTN = 8, kRows = 32;

struct Dims {
  int PT, NT, Pp, Np;  // micro-tiles along p and n; P and N padded to whole micro-tiles
};
__host__ __device__ inline Dims dims(const SsdShape& sh) {
  const int PT = (sh.P + kTP - 1) / kTP, NT = (sh.N + kTN - 1) / kTN;
  return {PT, NT, PT * kTP, NT * kTN};
}

__host__ __device__ inline int header_floats(int cell) { return (3 * cell + 3) / 4 * 4; }

__global__ void __launch_bounds__(kThreads, 3) deltas_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld,
                                                          const float* dt, const float* A, SsdState st, Scratch sc) {
  const int task = blockIdx.x, h = blockIdx.y;
  const CellTask t = cell_task(g, p, task, h, sh.H);
  if (!t.fold) return;
  const int grp = h / sh.heads_per_group(), L = t.L, P = sh.P, N = sh.N;
  const Dims d = dims(sh);
  const RowSource src = source_of(sh, g, p, t.seq, xbc, ld, dt, st);

  extern __shared__ float smem[];
  float* dts = smem;           // [cell]
  float* cum = dts + g.cell;   // [cell]
  float* w = cum + g.cell;     // [cell]
  float* xw = smem + header_floats(g.cell);  // [kRows][Pp]  w_i · x_i[p]; 16-byte aligned
  float* Bs = xw + kRows * d.Pp;  // [kRows][Np]
  cell_cum(src, h, t.c.start, L, A[h], dts, cum, kThreads);
  for (int i = threadIdx.x; i < L; i += kThreads) w[i] = row_weight(cum[L - 1], cum[i], dts[i]);
  if (threadIdx.x == 0 && blockIdx.z == 0) sc.cell_decay[static_cast<std::size_t>(task) * sh.H + h] = exp_f(cum[L - 1]);

  const int mt = blockIdx.z * kThreads + threadIdx.x;
  const bool mine = mt < d.PT * d.NT;
  const int pb = (mt / d.NT) * kTP, nb = (mt % d.NT) * kTN;
  float acc[kTP][kTN];
#pragma unroll
  for (int a = 0; a < kTP; ++a)
#pragma unroll
    for (int b = 0; b < kTN; ++b) acc[a][b] = 0.0f;

  for (int i0 = 0; i0 < L; i0 += kRows) {
    const int rows = L - i0 < kRows ? L - i0 : kRows;
    __syncthreads();  // w ready; the previous stage is consumed
    for (int e = threadIdx.x; e < rows * d.Pp; e += kThreads) {
      const int i = e / d.Pp, pp = e % d.Pp;
      xw[e] = pp < P ? w[i0 + i] * src.x(h, t.c.start + i0 + i)[pp] : 0.0f;
    }
    for (int e = threadIdx.x; e < rows * d.Np; e += kThreads) {
      const int i = e / d.Np, n = e % d.Np;
      Bs[e] = n < N ? src.B(grp, t.c.start + i0 + i)[n] : 0.0f;
    }
    __syncthreads();
    if (mine) {
      for (int i = 0; i < rows; ++i) {
        const float4 xv = *reinterpret_cast<const float4*>(xw + i * d.Pp + pb);
        const float4 b0 = *reinterpret_cast<const float4*>(Bs + i * d.Np + nb);
        const float4 b1 = *reinterpret_cast<const float4*>(Bs + i * d.Np + nb + 4);
        const float xa[kTP] = {xv.x, xv.y, xv.z, xv.w};
        const float ba[kTN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int a = 0; a < kTP; ++a)
#pragma unroll
          for (int b = 0; b < kTN; ++b) acc[a][b] = fmaf(xa[a], ba[b], acc[a][b]);
      }
    }
  }
  if (!mine) return;
  float* out = sc.state(sh, task, h);
#pragma unroll
  for (int a = 0; a < kTP; ++a) {
    const int pp = pb + a;
    if (pp >= P) break;
    if (nb + kTN <= N && N % 4 == 0) {
      float4* o = reinterpret_cast<float4*>(out + static_cast<std::size_t>(pp) * N + nb);
      o[0] = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
      o[1] = make_float4(acc[a][4], acc[a][5], acc[a][6], acc[a][7]);
    } else {
#pragma unroll
      for (int b = 0; b < kTN; ++b)
        if (nb + b < N) out[static_cast<std::size_t>(pp) * N + nb + b] = acc[a][b];
    }
  }
}

}  // namespace

void launch_deltas(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const SsdState& st, Scratch sc, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  const Dims d = dims(sh);
  const std::size_t smem = (static_cast<std::size_t>(header_floats(g.cell)) + kRows * static_cast<std::size_t>(d.Pp + d.Np)) * sizeof(float);
  ensure_smem(deltas_kernel, smem, "ssd deltas smem");
  const unsigned passes = static_cast<unsigned>((d.PT * d.NT + kThreads - 1) / kThreads);
  deltas_kernel<<<dim3(p.num_cell_tasks, sh.H, passes), kThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, st, sc);
  check_launch("ssd deltas");
}

}  // namespace parity::cuda::ssd
