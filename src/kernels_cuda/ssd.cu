// The Mamba2 recurrent core on the GPU, on the grid of ops.h's ScanGrid.
//
// A cell's output row t (rows i of the cell up to t, cum_i = Σ dt·A from the cell's start):
//   y_t = (exp(cum_t) · (C_t · S_start) + Σ_{i≤t} (exp(cum_t − cum_i) · dt_i · (C_t · B_i)) · x_i) + D · x_t
// and at the cell's end   S_end = exp(cum_L) · S_start + Σ_i (exp(cum_L − cum_i) · dt_i · x_i) ⊗ B_i.
// The same kernels serve a 1-token exact decode and a 4096-token prefill, in three phases:
//   deltas   (ssd_deltas.cu)  per (cell, head), in parallel: the sum of every cell the call folds;
//   chain    (ssd_chain.cu)   per (sequence, head), elementwise over the state: walks the cells in
//            order, keeps each cell's start state in scratch and folds (plain: every cell, so the
//            state ends after the last row; exact: the cells the call completes);
//   outputs  (ssd_outputs.cu) per (cell, head, rows), in parallel: every output row;
// then (exact) ring: the call's last rows of every head's open cell into the replay ring. Plain
// mode's one-token decode is the SSU update below. Every value is one fixed sequence of fp32
// operations (dot products over n ascending, sums over rows ascending, cum as a left-to-right
// sum); which call or pass a row came in changes nothing in it. The long sums run in the parallel
// phases; the sequential walk does one fmaf per state element and cell.
#include <cuda_bf16.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda {
namespace {

using kernels::exp_f;
using ssd::RowSource;
using ssd::source_of;
using ssd::ring_x_slot;
using ssd::round_bf16;
using ssd::widen_bf16;

// ---- SSU: plain mode's one-token decode ------------------------------------------------------
// 256 threads: four row lanes (one used), each of 16 values of p × 4 quarter-sums of n. The dot
// product C · S[p]: quarter q sums n ≡ q (mod 4) ascending, then (q0+q1)+(q2+q3).
constexpr int kTileP = 16, kQuads = 4, kRowLanes = 4, kLane = kTileP * kQuads, kSsuThreads = kLane * kRowLanes;

__device__ float quad_dot(const float* Crow, const float* Srow, int N, int q) {
  float a = 0.0f;
  for (int n = q; n < N; n += kQuads) a = fmaf(Crow[n], Srow[n], a);
  a = a + __shfl_xor_sync(0xffffffffu, a, 1);
  a = a + __shfl_xor_sync(0xffffffffu, a, 2);
  return a;
}

__global__ void __launch_bounds__(kSsuThreads) ssu_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld,
                                                          const float* dt, const float* A, const float* Dskip,
                                                          SsdState st, float* y) {
  const int seq = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTileP;
  const int64_t start = p.start[seq];
  if (!uses_ssu(g, start, p.n[seq])) return;
  const int grp = h / sh.heads_per_group();
  const int N = sh.N, P = sh.P, HP = sh.H * sh.P;
  const int lane = threadIdx.x / kLane, within = threadIdx.x % kLane;
  const int pi = within / kQuads, q = within % kQuads, pp = p0 + pi;
  const bool live = pp < P;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const std::size_t sbase = (static_cast<std::size_t>(src.slot) * sh.H + h) * P * N;
  const bool bf16 = st.state_f32 == nullptr;

  extern __shared__ float smem[];
  float* S = smem;                 // [kTileP][N]
  float* Cs = S + kTileP * N;      // [N]
  float* xs = Cs + N;              // [kTileP]
  for (int e = threadIdx.x; e < kTileP * N; e += kSsuThreads) {
    const int r = p0 + e / N;
    float v = 0.0f;
    if (r < P) {
      const std::size_t i = sbase + static_cast<std::size_t>(r) * N + e % N;
      v = st.state_f32 ? st.state_f32[i] : widen_bf16(st.state_bf16[i]);
    }
    S[e] = v;
  }
  const float* Srow = S + pi * N;
  const int row = src.row0;
  const float d = dt[static_cast<std::size_t>(row) * sh.H + h];
  const float dA = exp_f(d * A[h]);
  const float* Brow = src.B(grp, start);
  for (int e = threadIdx.x; e < N; e += kSsuThreads) Cs[e] = src.C(grp, start)[e];
  for (int e = threadIdx.x; e < kTileP; e += kSsuThreads) xs[e] = p0 + e < P ? src.x(h, start)[p0 + e] : 0.0f;
  __syncthreads();
  for (int e = threadIdx.x; e < kTileP * N; e += kSsuThreads) {
    const float v = fmaf(dA, S[e], (d * xs[e / N]) * Brow[e % N]);
    S[e] = bf16 ? round_bf16(v) : v;
  }
  __syncthreads();
  if (lane == 0) {
    const float dot = quad_dot(Cs, Srow, N, q);
    if (live && q == 0)
      y[static_cast<std::size_t>(row) * HP + static_cast<std::size_t>(h) * P + pp] = dot + Dskip[h] * xs[pi];
  }
  for (int e = threadIdx.x; e < kTileP * N; e += kSsuThreads) {
    const int r = p0 + e / N;
    if (r >= P) continue;
    const std::size_t i = sbase + static_cast<std::size_t>(r) * N + e % N;
    if (st.state_f32) st.state_f32[i] = S[e];
    else st.state_bf16[i] = static_cast<uint16_t>(__float_as_uint(S[e]) >> 16);  // already bf16-exact
  }
}

// ---- ring: the open cell's rows, for the next call -------------------------------------------
__global__ void ssd_ring_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt,
                                SsdState st) {
  const int seq = blockIdx.x, h = blockIdx.y;
  const int64_t start = p.start[seq], end = start + p.n[seq];
  const int64_t from = end - g.cell > start ? end - g.cell : start;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const int slot = src.slot, P = sh.P, N = sh.N;
  const bool writes_B = h % sh.heads_per_group() == 0;
  const int grp = h / sh.heads_per_group();
  for (int64_t t = from; t < end; ++t) {
    const int xs = ring_x_slot(g, h, sh.H, t);
    const std::size_t xb = (static_cast<std::size_t>(slot) * sh.H + h) * g.cell + xs;
    for (int e = threadIdx.x; e < P; e += blockDim.x) st.ring_x[xb * P + e] = src.x(h, t)[e];
    if (threadIdx.x == 0) st.ring_dt[xb] = src.dtv(h, t);
    if (writes_B) {
      const std::size_t bb = (static_cast<std::size_t>(slot) * sh.groups + grp) * g.cell + t % g.cell;
      for (int e = threadIdx.x; e < N; e += blockDim.x) st.ring_B[bb * N + e] = src.B(grp, t)[e];
    }
  }
}

__global__ void dt_kernel(const float* dt_raw, int ld, int H, const float* bias, float lo, float hi, float* dt) {
  const int t = blockIdx.x;
  for (int h = threadIdx.x; h < H; h += blockDim.x) {
    const float v = kernels::softplus_f(dt_raw[static_cast<std::size_t>(t) * ld + h] + bias[h]);
    dt[static_cast<std::size_t>(t) * H + h] = fminf(fmaxf(v, lo), hi);
  }
}

}  // namespace

void ssd_dt(const float* dt_raw, int ld, int T, int H, const float* dt_bias, float lo, float hi, float* dt,
            cudaStream_t s) {
  if (T <= 0) return;
  dt_kernel<<<T, 64, 0, s>>>(dt_raw, ld, H, dt_bias, lo, hi, dt);
  check_launch("ssd_dt");
}

std::size_t ssd_scratch_floats(const SsdShape& sh, const PassSeqs& p) {
  return static_cast<std::size_t>(p.num_cell_tasks) * sh.H * (static_cast<std::size_t>(sh.P) * sh.N + 1);
}

void ssd_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
              const float* A, const float* D, SsdState st, float* scratch, std::size_t scratch_floats, float* y,
              cudaStream_t s) {
  if (p.num_rows <= 0) return;
  if (g.cell < 1 || g.cell > kMaxCell)
    throw Error("CUDA SSD: the cell must be 1.." + std::to_string(kMaxCell) + " rows, got " + std::to_string(g.cell));
  if (sh.H % sh.groups != 0) throw Error("CUDA SSD: heads must divide into groups");
  if (scratch_floats < ssd_scratch_floats(sh, p)) throw Error("CUDA SSD: scratch smaller than ssd_scratch_floats()");
  const ssd::Scratch sc{scratch, scratch + static_cast<std::size_t>(p.num_cell_tasks) * sh.H * sh.P * sh.N};
  ssd::launch_deltas(sh, g, p, xbc, ld_xbc, dt, A, st, sc, s);
  ssd::launch_chain(sh, g, p, st, sc, s);
  ssd::launch_outputs(sh, g, p, xbc, ld_xbc, dt, A, D, st, sc, y, s);
  if (p.num_ssu_seqs > 0) {
    const std::size_t smem = (static_cast<std::size_t>(kTileP) * sh.N + sh.N + kTileP) * sizeof(float);
    cuda_check(cudaFuncSetAttribute(ssu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "ssd ssu smem");
    const unsigned ptiles = static_cast<unsigned>((sh.P + kTileP - 1) / kTileP);
    ssu_kernel<<<dim3(p.num_seqs, sh.H, ptiles), kSsuThreads, smem, s>>>(sh, g, p, xbc, ld_xbc, dt, A, D, st, y);
    check_launch("ssd ssu");
  }
  if (g.exact) {
    ssd_ring_kernel<<<dim3(p.num_seqs, sh.H), 64, 0, s>>>(sh, g, p, xbc, ld_xbc, dt, st);
    check_launch("ssd ring");
  }
}

}  // namespace parity::cuda
