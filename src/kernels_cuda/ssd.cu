// The Mamba2 recurrent core on the GPU, on the grid of ops.h's ScanGrid.
//
// A cell's output row t (rows i of the cell up to t, cum_i = Σ dt·A from the cell's start):
//   y_t = (exp(cum_t) · (C_t · S_start) + Σ_{i≤t} (exp(cum_t − cum_i) · dt_i · (C_t · B_i)) · x_i) + D · x_t
// and at the cell's end   S_end = exp(cum_L) · S_start + Σ_i (exp(cum_L − cum_i) · dt_i · x_i) ⊗ B_i.
// Three kernels compute it, the same ones for a 1-token decode and a 4096-token prefill:
//   cells  one block per (cell, head): the intra-cell sum (rows from the replay ring where they
//          came in an earlier call) and exp(cum_t), written into y and decay;
//   chain  one block per (sequence, head, 16 values of p): walks the call's cells in order,
//          adds the inter-cell term from the state tile it holds on chip and folds each finished
//          cell (plain: every cell, so the state ends after the last row); plain decode is SSU;
//   ring   exact mode: the call's last rows of every head's open cell into the replay ring.
// Every value is one fixed sequence of fp32 operations (dot products over n ascending, sums over
// rows ascending, cum as a left-to-right sum); which call a row came in changes nothing in it.
#include <cuda_bf16.h>

#include "kernels/math.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda {
namespace {

using kernels::exp_f;

struct Cell {
  int64_t start, end;
};

__device__ int head_offset(const ScanGrid& g, int h, int H) {
  return g.exact && g.stagger ? static_cast<int>(static_cast<int64_t>(h) * g.cell / H) % g.cell : 0;
}

// The k-th cell of head h that a call starting at `start` touches.
__device__ Cell call_cell(const ScanGrid& g, int h, int H, int64_t start, int k) {
  int64_t cs, ce;
  if (g.exact) {
    const int o = head_offset(g, h, H);
    cs = start < o ? 0 : start - (start - o) % g.cell;
    ce = (cs == 0 && o > 0) ? o : cs + g.cell;
  } else {
    cs = start;
    ce = start + g.cell;
  }
  if (k > 0) {
    cs = ce + static_cast<int64_t>(k - 1) * g.cell;
    ce = cs + g.cell;
  }
  return {cs, ce};
}

__device__ int ring_x_slot(const ScanGrid& g, int h, int H, int64_t pos) {
  const int64_t r = (pos - head_offset(g, h, H)) % g.cell;
  return static_cast<int>(r < 0 ? r + g.cell : r);
}

// Where position s of sequence `seq` lives: this call's rows, or the replay ring before it.
struct RowSource {
  const float* xbc;
  int ld, I, GN;
  const float* dt;
  SsdState st;
  SsdShape sh;
  ScanGrid g;
  int slot, row0;
  int64_t start;

  __device__ const float* x(int h, int64_t s) const {
    if (s >= start) return xbc + static_cast<std::size_t>(row0 + (s - start)) * ld + static_cast<std::size_t>(h) * sh.P;
    return st.ring_x + ((static_cast<std::size_t>(slot) * sh.H + h) * g.cell + ring_x_slot(g, h, sh.H, s)) * sh.P;
  }
  __device__ float dtv(int h, int64_t s) const {
    if (s >= start) return dt[static_cast<std::size_t>(row0 + (s - start)) * sh.H + h];
    return st.ring_dt[(static_cast<std::size_t>(slot) * sh.H + h) * g.cell + ring_x_slot(g, h, sh.H, s)];
  }
  __device__ const float* B(int grp, int64_t s) const {
    if (s >= start) return xbc + static_cast<std::size_t>(row0 + (s - start)) * ld + I + static_cast<std::size_t>(grp) * sh.N;
    return st.ring_B + ((static_cast<std::size_t>(slot) * sh.groups + grp) * g.cell + s % g.cell) * sh.N;
  }
  __device__ const float* C(int grp, int64_t s) const {
    return xbc + static_cast<std::size_t>(row0 + (s - start)) * ld + I + GN + static_cast<std::size_t>(grp) * sh.N;
  }
};

__device__ RowSource source_of(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, int seq, const float* xbc,
                               int ld, const float* dt, const SsdState& st) {
  RowSource r{xbc, ld, sh.H * sh.P, sh.groups * sh.N, dt, st, sh, g, p.slot[seq], p.row0[seq], p.start[seq]};
  return r;
}

// dt of the cell's first L rows into shared memory, all threads at once (one global read each).
__device__ void stage_dts(const RowSource& src, int h, int64_t cs, int L, float* dts, int nthreads) {
  for (int i = threadIdx.x; i < L; i += nthreads) dts[i] = src.dtv(h, cs + i);
}

// cum_i = Σ_{r≤i} dt_r·A as a left-to-right sum (one thread; the same sequence in every kernel).
__device__ void cell_cum(const float* dts, int L, float A, float* cum) {
  float c = 0.0f;
  for (int i = 0; i < L; ++i) {
    c = c + dts[i] * A;
    cum[i] = c;
  }
}

// ---- cells: the intra-cell part of every output row ------------------------------------------
constexpr int kCellThreads = 128;

__global__ void __launch_bounds__(kCellThreads) ssd_cells_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                                 int ld, const float* dt, const float* A, SsdState st,
                                                                 float* decay, float* y) {
  const int seq = p.cell_task[2 * blockIdx.x], k = p.cell_task[2 * blockIdx.x + 1];
  const int h = blockIdx.y, grp = h / sh.heads_per_group();
  const int64_t start = p.start[seq], end = start + p.n[seq];
  const Cell c = call_cell(g, h, sh.H, start, k);
  const int64_t first = c.start > start ? c.start : start;
  if (first >= end) return;
  const int L = static_cast<int>((c.end < end ? c.end : end) - c.start);  // source rows
  const int j0 = static_cast<int>(first - c.start), R = L - j0;          // output rows j0..L-1
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const int N = sh.N, P = sh.P;

  extern __shared__ float smem[];
  float* Bs = smem;               // [L][N]
  float* Cs = Bs + L * N;         // [R][N]
  float* coef = Cs + R * N;       // [R][L]
  float* dts = coef + R * L;      // [L]
  float* cum = dts + L;           // [L]
  for (int e = threadIdx.x; e < L * N; e += kCellThreads) Bs[e] = src.B(grp, c.start + e / N)[e % N];
  for (int e = threadIdx.x; e < R * N; e += kCellThreads) Cs[e] = src.C(grp, first + e / N)[e % N];
  stage_dts(src, h, c.start, L, dts, kCellThreads);
  __syncthreads();
  if (threadIdx.x == 0) cell_cum(dts, L, A[h], cum);
  __syncthreads();
  for (int e = threadIdx.x; e < R * L; e += kCellThreads) {
    const int jj = e / L, i = e % L, j = j0 + jj;
    float v = 0.0f;
    if (i <= j) {
      float dot = 0.0f;
      for (int n = 0; n < N; ++n) dot = fmaf(Cs[jj * N + n], Bs[i * N + n], dot);
      v = (exp_f(cum[j] - cum[i]) * dts[i]) * dot;
    }
    coef[e] = v;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < R * P; e += kCellThreads) {
    const int jj = e / P, pp = e % P, j = j0 + jj;
    float acc = 0.0f;
    for (int i = 0; i <= j; ++i) acc = fmaf(coef[jj * L + i], src.x(h, c.start + i)[pp], acc);
    const int row = src.row0 + static_cast<int>(first - start) + jj;
    y[static_cast<std::size_t>(row) * sh.H * P + static_cast<std::size_t>(h) * P + pp] = acc;
    if (pp == 0) decay[static_cast<std::size_t>(row) * sh.H + h] = exp_f(cum[j]);
  }
}

// ---- chain: inter-cell term, folds, SSU -----------------------------------------------------
// 256 threads: four row lanes, each of 16 values of p × 4 quarter-sums of n. A row's dot product
// C_t · S[p] is always the same: quarter q sums n ≡ q (mod 4) ascending, then (q0+q1)+(q2+q3).
constexpr int kTileP = 16, kQuads = 4, kRowLanes = 4, kLane = kTileP * kQuads, kChainThreads = kLane * kRowLanes;

__device__ float quad_dot(const float* Crow, const float* Srow, int N, int q) {
  float a = 0.0f;
  for (int n = q; n < N; n += kQuads) a = fmaf(Crow[n], Srow[n], a);
  a = a + __shfl_xor_sync(0xffffffffu, a, 1);
  a = a + __shfl_xor_sync(0xffffffffu, a, 2);
  return a;
}

__device__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__global__ void __launch_bounds__(kChainThreads) ssd_chain_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                                   int ld, const float* dt, const float* A,
                                                                   const float* Dskip, SsdState st,
                                                                   const float* decay, float* y) {
  const int seq = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTileP;
  const int grp = h / sh.heads_per_group();
  const int N = sh.N, P = sh.P, HP = sh.H * sh.P;
  const int lane = threadIdx.x / kLane, within = threadIdx.x % kLane;
  const int pi = within / kQuads, q = within % kQuads, pp = p0 + pi;
  const bool live = pp < P;
  const int64_t start = p.start[seq];
  const int n_rows = p.n[seq];
  const int64_t end = start + n_rows;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const std::size_t sbase = (static_cast<std::size_t>(src.slot) * sh.H + h) * P * N;
  const bool bf16 = st.state_f32 == nullptr;

  extern __shared__ float smem[];
  float* S = smem;                         // [kTileP][N]
  float* Cs = S + kTileP * N;              // [cell][N] the call's rows of the cell
  float* Bs = Cs + g.cell * N;             // [cell][N]
  float* xs = Bs + g.cell * N;             // [cell][kTileP]
  float* w = xs + g.cell * kTileP;         // [cell]
  float* dts = w + g.cell;                 // [cell]
  float* cum = dts + g.cell;               // [cell]
  for (int e = threadIdx.x; e < kTileP * N; e += kChainThreads) {
    const int r = p0 + e / N;
    float v = 0.0f;
    if (r < P) {
      const std::size_t i = sbase + static_cast<std::size_t>(r) * N + e % N;
      v = st.state_f32 ? st.state_f32[i] : __uint_as_float(static_cast<uint32_t>(st.state_bf16[i]) << 16);
    }
    S[e] = v;
  }
  const float* Srow = S + pi * N;

  if (uses_ssu(g, start, n_rows)) {
    const int row = src.row0;
    const float d = dt[static_cast<std::size_t>(row) * sh.H + h];
    const float dA = exp_f(d * A[h]);
    const float* Brow = src.B(grp, start);
    for (int e = threadIdx.x; e < N; e += kChainThreads) Cs[e] = src.C(grp, start)[e];
    for (int e = threadIdx.x; e < kTileP; e += kChainThreads) xs[e] = p0 + e < P ? src.x(h, start)[p0 + e] : 0.0f;
    __syncthreads();
    for (int e = threadIdx.x; e < kTileP * N; e += kChainThreads) {
      const float v = fmaf(dA, S[e], (d * xs[e / N]) * Brow[e % N]);
      S[e] = bf16 ? round_bf16(v) : v;
    }
    __syncthreads();
    if (lane == 0) {
      const float dot = quad_dot(Cs, Srow, N, q);
      if (live && q == 0)
        y[static_cast<std::size_t>(row) * HP + static_cast<std::size_t>(h) * P + pp] = dot + Dskip[h] * xs[pi];
    }
  } else {
    for (int k = 0;; ++k) {
      const Cell c = call_cell(g, h, sh.H, start, k);
      if (c.start >= end) break;
      const int64_t first = c.start > start ? c.start : start;
      const int64_t last = c.end < end ? c.end : end;
      const int R = static_cast<int>(last - first), L = static_cast<int>(last - c.start);
      const bool fold = g.exact ? c.end <= end : true;
      __syncthreads();  // the previous cell's fold is done with the staging buffers
      for (int e = threadIdx.x; e < R * N; e += kChainThreads) Cs[e] = src.C(grp, first + e / N)[e % N];
      if (fold) {
        for (int e = threadIdx.x; e < L * N; e += kChainThreads) Bs[e] = src.B(grp, c.start + e / N)[e % N];
        for (int e = threadIdx.x; e < L * kTileP; e += kChainThreads) {
          const int r = p0 + e % kTileP;
          xs[e] = r < P ? src.x(h, c.start + e / kTileP)[r] : 0.0f;
        }
        stage_dts(src, h, c.start, L, dts, kChainThreads);
      }
      __syncthreads();
      if (fold && threadIdx.x == 0) cell_cum(dts, L, A[h], cum);
      // Inter-cell term of the call's rows in this cell, four rows at a time.
      for (int jj = lane; jj < R; jj += kRowLanes) {
        const float dot = quad_dot(Cs + jj * N, Srow, N, q);
        const int row = src.row0 + static_cast<int>(first - start) + jj;
        if (live && q == 0) {
          float* yp = y + static_cast<std::size_t>(row) * HP + static_cast<std::size_t>(h) * P + pp;
          *yp = (decay[static_cast<std::size_t>(row) * sh.H + h] * dot + *yp) + Dskip[h] * src.x(h, first + jj)[pp];
        }
      }
      if (!fold) break;
      __syncthreads();  // cum ready; every row has read S
      for (int i = threadIdx.x; i < L; i += kChainThreads) w[i] = exp_f(cum[L - 1] - cum[i]) * dts[i];
      __syncthreads();
      const float total = exp_f(cum[L - 1]);
      for (int e = threadIdx.x; e < kTileP * N; e += kChainThreads) {
        const int pr = e / N, n = e % N;
        float acc = 0.0f;
        for (int i = 0; i < L; ++i) acc = fmaf(w[i] * xs[i * kTileP + pr], Bs[i * N + n], acc);
        const float v = fmaf(total, S[e], acc);
        S[e] = bf16 ? round_bf16(v) : v;
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kTileP * N; e += kChainThreads) {
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

std::size_t cells_smem(const SsdShape& sh, int cell) {
  const std::size_t L = cell, R = cell;
  return (L * sh.N + R * sh.N + R * L + 2 * L) * sizeof(float);
}
std::size_t chain_smem(const SsdShape& sh, int cell) {
  return (static_cast<std::size_t>(kTileP) * sh.N + 2 * static_cast<std::size_t>(cell) * sh.N +
          static_cast<std::size_t>(cell) * kTileP + 3 * static_cast<std::size_t>(cell)) *
         sizeof(float);
}

}  // namespace

void ssd_dt(const float* dt_raw, int ld, int T, int H, const float* dt_bias, float lo, float hi, float* dt,
            cudaStream_t s) {
  if (T <= 0) return;
  dt_kernel<<<T, 64, 0, s>>>(dt_raw, ld, H, dt_bias, lo, hi, dt);
  check_launch("ssd_dt");
}

void ssd_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld_xbc, const float* dt,
              const float* A, const float* D, SsdState st, float* decay, float* y, cudaStream_t s) {
  if (p.num_rows <= 0) return;
  if (g.cell < 1 || g.cell > kMaxCell)
    throw Error("CUDA SSD: the cell must be 1.." + std::to_string(kMaxCell) + " rows, got " + std::to_string(g.cell));
  if (sh.H % sh.groups != 0) throw Error("CUDA SSD: heads must divide into groups");
  const std::size_t cs = cells_smem(sh, g.cell), ch = chain_smem(sh, g.cell);
  cuda_check(cudaFuncSetAttribute(ssd_cells_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cs)),
             "ssd cells smem");
  cuda_check(cudaFuncSetAttribute(ssd_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ch)),
             "ssd chain smem");
  if (p.num_cell_tasks > 0) {
    ssd_cells_kernel<<<dim3(p.num_cell_tasks, sh.H), kCellThreads, cs, s>>>(sh, g, p, xbc, ld_xbc, dt, A, st, decay, y);
    check_launch("ssd cells");
  }
  const unsigned ptiles = static_cast<unsigned>((sh.P + kTileP - 1) / kTileP);
  ssd_chain_kernel<<<dim3(p.num_seqs, sh.H, ptiles), kChainThreads, ch, s>>>(sh, g, p, xbc, ld_xbc, dt, A, D, st, decay,
                                                                              y);
  check_launch("ssd chain");
  if (g.exact) {
    ssd_ring_kernel<<<dim3(p.num_seqs, sh.H), 64, 0, s>>>(sh, g, p, xbc, ld_xbc, dt, st);
    check_launch("ssd ring");
  }
}

}  // namespace parity::cuda
