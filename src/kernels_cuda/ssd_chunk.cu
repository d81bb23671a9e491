// Plain mode's chunk scan: vLLM's three phases at its 256-row chunks (chunk_size), with every product a
// register-tiled outer product on the GPU's fp32 FMA units. Per chunk (cell task) of a call:
//   cb      per (chunk, group):  CB[t][i] = Σ_n C_t[n]·B_i[n] for the chunk's rows, i ≤ t (its lower tiles);
//   states  per (chunk, head):   delta[p][n] = Σ_i (w_i·x_i[p])·B_i[n],  w_i = exp(cum_{L−1} − cum_i)·dt_i,
//                                and decay = exp(cum_{L−1}) (ssd_chain.cu then walks the chunks: each chunk's
//                                start state into scratch, S ← fold(decay, S, delta), the slot's state at the end);
//   outputs per (chunk, head):   y_t[p] = (exp(cum_t)·Σ_n C_t[n]·S_start[p][n]
//                                          + Σ_{i≤t} exp(cum_t − cum_i)·dt_i·CB[t][i]·x_i[p]) + D·x_t[p],
//                                one accumulator a value: the inter sum, scaled, then the intra terms added to it.
// The walks (ssd_walk.cu, ...) compute a 256-row cell one row at a time, O(cell) work a row on a serial
// path; here every chunk and head is independent and each product runs at the FMA rate.
//
// Plain mode promises no bits across schedules, so these sums have their own order (n or i ascending in
// 32-deep stages, cum by a warp scan), not the walks'. What holds is rule 1: a row's value is a function
// of its chunk's rows and start state only, never of the other sequences in the pass or where its rows
// sit in it (CudaSsdTiling.PlainChunkScan* pins both).
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

// A block: 256 threads as 16 × 16, each owning TM × TN outputs of a (16·TM) × (16·TN) tile; operands
// staged 32 deep in shared memory, the next stage read into registers while this one's products run.
constexpr int kThreads = 256, kDepth = 32, kWarps = kThreads / 32, kSide = 16;

template <int RT, int CT>  // tile rows and columns
struct Stage {
  float a[kDepth][RT + 4];  // [k][row of the tile]; rows padded, 16-byte aligned
  float b[kDepth][CT + 4];  // [k][column of the tile]
};

// The tile column of a thread's c-th column: groups of four, 64 columns apart (b_col), so that a warp's
// 16-byte reads of a row of b are consecutive (TN = 8 side by side would put two threads on each bank).
template <int TN>
__device__ __forceinline__ int b_col(int tx, int c) {
  return 4 * tx + kSide * 4 * (c / 4) + c % 4;
}

// acc[r][c] += a[k][TM·ty + r] · b[k][b_col(tx, c)] over the stage, k ascending.
template <int TM, int TN>
__device__ __forceinline__ void accumulate(const Stage<kSide * TM, kSide * TN>& s, int ty, int tx, float acc[TM][TN]) {
#pragma unroll 4
  for (int k = 0; k < kDepth; ++k) {
    float av[TM], bv[TN];
#pragma unroll
    for (int q = 0; q < TM / 4; ++q) {
      const float4 a = *reinterpret_cast<const float4*>(&s.a[k][TM * ty + 4 * q]);
      av[4 * q] = a.x, av[4 * q + 1] = a.y, av[4 * q + 2] = a.z, av[4 * q + 3] = a.w;
    }
#pragma unroll
    for (int q = 0; q < TN / 4; ++q) {
      const float4 b = *reinterpret_cast<const float4*>(&s.b[k][b_col<TN>(tx, 4 * q)]);
      bv[4 * q] = b.x, bv[4 * q + 1] = b.y, bv[4 * q + 2] = b.z, bv[4 * q + 3] = b.w;
    }
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
  }
}

// An operand of EXT tile rows (or columns) that are rows of memory, k running along them (C_t[n],
// B_i[n], S[p][n]): lane = k (coalesced), tile row = warp + 8m. Rows ≥ rows and k ≥ len read as zeros.
template <int EXT>
struct AlongRows {
  static constexpr int kPer = EXT / kWarps;
  const float* base;
  std::size_t ld;
  int rows, len;
  __device__ void load(int stage, float v[kPer]) const {
    const int k = stage * kDepth + threadIdx.x % 32, w = threadIdx.x / 32;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      const int r = w + kWarps * m;
      v[m] = r < rows && k < len ? base[r * ld + k] : 0.0f;
    }
  }
  __device__ static void store(float (*s)[EXT + 4], const float v[kPer]) {
    const int k = threadIdx.x % 32, w = threadIdx.x / 32;
#pragma unroll
    for (int m = 0; m < kPer; ++m) s[k][w + kWarps * m] = v[m];
  }
};

// An operand whose k are rows of memory, EXT tile columns running along them (x_i[p], B_i[n]): column =
// thread % EXT (coalesced), k = thread / EXT + (256 / EXT)·m. k < rows, columns < cols; scale[k] multiplies.
template <int EXT>
struct DownRows {
  static constexpr int kPer = kDepth * EXT / kThreads, kStep = kThreads / EXT;
  const float* base;
  std::size_t ld;
  int rows, cols;
  const float* scale;  // shared memory, or null
  __device__ void load(int stage, float v[kPer]) const {
    const int c = threadIdx.x % EXT;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      const int k = stage * kDepth + threadIdx.x / EXT + kStep * m;
      float x = 0.0f;
      if (k < rows && c < cols) x = base[k * ld + c];
      v[m] = scale != nullptr && k < rows ? scale[k] * x : x;
    }
  }
  __device__ static void store(float (*s)[EXT + 4], const float v[kPer]) {
    const int c = threadIdx.x % EXT;
#pragma unroll
    for (int m = 0; m < kPer; ++m) s[threadIdx.x / EXT + kStep * m][c] = v[m];
  }
};

// The intra sum's coefficients for EXT tile rows j = j0 + r (r < rows) and source rows i ≤ j (else 0):
//   exp(cum_j − cum_i)·dt_i·CB[j][i] = ((to_b[stage][r] · from_b[i]) · dt_i) · CB[j][i],
// the decay split at b, the first row of i's 32-row stage: to_b = exp(cum_j − cum_b) (j ≥ b, exponent ≤ 0)
// and from_b = exp(cum_b − cum_i) (at most 31 rows of decay), so a stage forms 32 + EXT exps instead of
// 32·EXT. Where from_b's exponent exceeds kSplitMax (it would overflow with to_b underflowing) from_b is
// marked negative and that row's pairs take row_weight's single exp. Both factors depend only on rows
// ≤ j, so a row's coefficient does not depend on the rows after it.
constexpr float kSplitMax = 80.0f;
template <int EXT>
struct Coefficients {
  static constexpr int kPer = EXT / kWarps;
  const float* cb;  // CB row j0
  int cell, j0, rows;
  const float *cum, *dts, *from_b;
  const float (*to_b)[EXT];
  __device__ void load(int stage, float v[kPer]) const {
    const int i = stage * kDepth + threadIdx.x % 32, w = threadIdx.x / 32;
    const float f = from_b[i], d = dts[i];
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      const int r = w + kWarps * m, j = j0 + r;
      float c = 0.0f;
      if (r < rows && i <= j) c = (f >= 0.0f ? (to_b[stage][r] * f) * d : row_weight(cum[j], cum[i], d)) * cb[r * cell + i];
      v[m] = c;
    }
  }
  __device__ static void store(float (*s)[EXT + 4], const float v[kPer]) { AlongRows<EXT>::store(s, v); }
};

// acc += A·B over stages [first, last): the next stage's values are read into registers while this
// one's products run, so the global reads' latency hides behind the FMAs. live(stage): whether this
// thread's warp has a non-zero product in the stage (all its rows above the stage's k: the intra
// sum's upper triangle); a skipped stage adds only zeros, so skipping changes no value.
template <int TM, int TN, class OpA, class OpB, class Live>
__device__ void multiply(int first, int last, const OpA& a, const OpB& b, Stage<kSide * TM, kSide * TN>& s, int ty,
                         int tx, float acc[TM][TN], Live live) {
  float va[OpA::kPer], vb[OpB::kPer];
  if (first < last) {
    a.load(first, va);
    b.load(first, vb);
  }
  for (int st = first; st < last; ++st) {
    __syncthreads();  // the last stage's products are done with s
    OpA::store(s.a, va);
    OpB::store(s.b, vb);
    __syncthreads();
    if (st + 1 < last) {
      a.load(st + 1, va);
      b.load(st + 1, vb);
    }
    if (live(st)) accumulate<TM, TN>(s, ty, tx, acc);
  }
}
struct Always {
  __device__ bool operator()(int) const { return true; }
};

__device__ inline int ty_of() { return threadIdx.x / kSide; }
__device__ inline int tx_of() { return threadIdx.x % kSide; }
__device__ inline int stages_of(int k) { return (k + kDepth - 1) / kDepth; }

// cum over rows 0..L-1 (L ≤ 256 = 8 warps × 32; ends with a barrier): each warp scans its 32 rows by
// shuffles, then each row adds the totals of the warps before its own, in warp order.
__device__ void chunk_cum(const RowSource& src, int h, int64_t cs, int L, float A, float* dts, float* cum) {
  __shared__ float totals[kWarps];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, i = threadIdx.x;
  const float d = i < L ? src.dtv(h, cs + i) : 0.0f;
  float v = i < L ? cum_term(d, A) : 0.0f;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = u + v;
  }
  if (lane == 31) totals[w] = v;
  __syncthreads();
  float before = 0.0f;
  for (int k = 0; k < w; ++k) before = before + totals[k];
  if (i < L) {
    dts[i] = d;
    cum[i] = before + v;
  }
  __syncthreads();
}

template <class F>  // float or const float
__device__ inline F* cb_of(F* cb, const ScanGrid& g, int groups, int task, int grp) {
  return cb + (static_cast<std::size_t>(task) * groups + grp) * g.cell * g.cell;
}

// Tiles: CB 64 × 64 (4 × 4 a thread), a chunk's delta 64 (p) × 128 (n) (4 × 8), its outputs 128 rows ×
// 64 columns of p (8 × 4): 32 FMAs a thread for every three 16-byte shared-memory reads of a stage's step.
constexpr int kCbTM = 4, kCbTN = 4, kStTM = 4, kStTN = 8, kOutTM = 8, kOutTN = 4;

// CB of one chunk and group, tile (tt, it) of its lower triangle.
__global__ void __launch_bounds__(kThreads, 2)
    chunk_cb_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, SsdState st, float* cb) {
  constexpr int RT = kSide * kCbTM, CT = kSide * kCbTN;
  const int task = blockIdx.x, grp = blockIdx.y;
  int tt = 0, it = static_cast<int>(blockIdx.z);
  while (it > tt) it -= ++tt;  // z = tt·(tt+1)/2 + it, it ≤ tt
  const CellTask t = cell_task(g, p, task, 0, sh.H);  // plain cells do not depend on the head
  const int t0 = tt * RT, i0 = it * CT;
  if (!t.live || t0 >= t.L) return;
  const RowSource src = source_of(sh, g, p, t.seq, xbc, ld, nullptr, st);
  const AlongRows<RT> a{src.C(grp, t.c.start + t0), static_cast<std::size_t>(ld), t.L - t0, sh.N};
  const AlongRows<CT> b{src.B(grp, t.c.start + i0), static_cast<std::size_t>(ld), t.L - i0, sh.N};
  __shared__ __align__(16) Stage<RT, CT> s;
  const int ty = ty_of(), tx = tx_of();
  float acc[kCbTM][kCbTN] = {};
  multiply<kCbTM, kCbTN>(0, stages_of(sh.N), a, b, s, ty, tx, acc, Always{});
  float* out = cb_of(cb, g, sh.groups, task, grp);
#pragma unroll
  for (int r = 0; r < kCbTM; ++r) {
    const int tr = t0 + kCbTM * ty + r;
    if (tr >= t.L) break;
#pragma unroll
    for (int c = 0; c < kCbTN; ++c) {
      const int ic = i0 + b_col<kCbTN>(tx, c);
      if (ic < t.L) out[static_cast<std::size_t>(tr) * g.cell + ic] = acc[r][c];
    }
  }
}

// delta of one chunk and head, one tile of (p, n); the decay from the first tile.
__global__ void __launch_bounds__(kThreads, 2)
    chunk_states_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                        SsdState st, Scratch sc) {
  constexpr int RT = kSide * kStTM, CT = kSide * kStTN;
  const int task = blockIdx.x, h = blockIdx.y, P = sh.P, N = sh.N;
  const int n_tiles = (N + CT - 1) / CT;
  const int p0 = static_cast<int>(blockIdx.z) / n_tiles * RT, n0 = static_cast<int>(blockIdx.z) % n_tiles * CT;
  const CellTask t = cell_task(g, p, task, h, sh.H);
  if (!t.fold) return;
  const int L = t.L, grp = h / sh.heads_per_group();
  const RowSource src = source_of(sh, g, p, t.seq, xbc, ld, dt, st);
  __shared__ float dts[kMaxCell], cum[kMaxCell], w[kMaxCell];
  __shared__ __align__(16) Stage<RT, CT> s;
  chunk_cum(src, h, t.c.start, L, A[h], dts, cum);
  if (static_cast<int>(threadIdx.x) < L) w[threadIdx.x] = row_weight(cum[L - 1], cum[threadIdx.x], dts[threadIdx.x]);
  if (threadIdx.x == 0 && blockIdx.z == 0) sc.cell_decay[static_cast<std::size_t>(task) * sh.H + h] = exp_f(cum[L - 1]);
  __syncthreads();
  const DownRows<RT> a{src.x(h, t.c.start) + p0, static_cast<std::size_t>(ld), L, P - p0, w};
  const DownRows<CT> b{src.B(grp, t.c.start) + n0, static_cast<std::size_t>(ld), L, N - n0, nullptr};
  const int ty = ty_of(), tx = tx_of();
  float acc[kStTM][kStTN] = {};
  multiply<kStTM, kStTN>(0, stages_of(L), a, b, s, ty, tx, acc, Always{});
  float* out = sc.state(sh, task, h);
#pragma unroll
  for (int r = 0; r < kStTM; ++r) {
    const int pp = p0 + kStTM * ty + r;
    if (pp >= P) break;
#pragma unroll
    for (int c = 0; c < kStTN; ++c) {
      const int n = n0 + b_col<kStTN>(tx, c);
      if (n < N) out[static_cast<std::size_t>(pp) * N + n] = acc[r][c];
    }
  }
}

// Output rows jt .. jt+127 of one chunk and head, columns p0 .. p0+63. One accumulator a value: the inter
// sum over n, scaled by exp(cum_j), then the intra sum's terms over i ascending, then D·x_j.
__global__ void __launch_bounds__(kThreads, 2)
    chunk_outputs_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                         const float* Dskip, SsdState st, Scratch sc, const float* cb, float* y) {
  constexpr int RT = kSide * kOutTM, CT = kSide * kOutTN;
  const int task = blockIdx.x, h = blockIdx.y, P = sh.P, N = sh.N;
  const int p_tiles = (P + CT - 1) / CT;
  const int jt = static_cast<int>(blockIdx.z) / p_tiles * RT, p0 = static_cast<int>(blockIdx.z) % p_tiles * CT;
  const CellTask t = cell_task(g, p, task, h, sh.H);
  if (!t.live || jt >= t.L) return;
  const int R = t.L - jt < RT ? t.L - jt : RT, jmax = jt + R;
  const int grp = h / sh.heads_per_group();
  const RowSource src = source_of(sh, g, p, t.seq, xbc, ld, dt, st);
  __shared__ float dts[kMaxCell], cum[kMaxCell];
  __shared__ __align__(16) Stage<RT, CT> s;
  chunk_cum(src, h, t.c.start, jmax, A[h], dts, cum);
  const int ty = ty_of(), tx = tx_of();

  float acc[kOutTM][kOutTN] = {};
  const AlongRows<RT> c_rows{src.C(grp, t.c.start + jt), static_cast<std::size_t>(ld), R, N};
  const AlongRows<CT> s_rows{sc.state(sh, task, h) + static_cast<std::size_t>(p0) * N, static_cast<std::size_t>(N), P - p0, N};
  multiply<kOutTM, kOutTN>(0, stages_of(N), c_rows, s_rows, s, ty, tx, acc, Always{});
#pragma unroll
  for (int r = 0; r < kOutTM; ++r) {
    const float e = exp_f(cum[jt + kOutTM * ty + r < jmax ? jt + kOutTM * ty + r : jmax - 1]);
#pragma unroll
    for (int c = 0; c < kOutTN; ++c) acc[r][c] = e * acc[r][c];
  }
  // The coefficients' split decays: from_b for every source row, to_b for the tile's rows and each stage.
  __shared__ float from_b[kMaxCell], to_b[kMaxCell / kDepth][RT];
  for (int i = threadIdx.x; i < jmax; i += kThreads) {
    const float e = cum[i / kDepth * kDepth] - cum[i];
    from_b[i] = e <= kSplitMax ? exp_f(e) : -1.0f;
  }
  const int stages = stages_of(jmax);
  for (int q = threadIdx.x; q < stages * RT; q += kThreads) {
    const int st = q / RT, j = jt + q % RT;
    to_b[st][q % RT] = j < jmax && j >= st * kDepth ? exp_f(cum[j] - cum[st * kDepth]) : 0.0f;
  }
  __syncthreads();
  const Coefficients<RT> coef{cb_of(cb, g, sh.groups, task, grp) + static_cast<std::size_t>(jt) * g.cell,
                              g.cell, jt, R, cum, dts, from_b, to_b};
  const DownRows<CT> x{src.x(h, t.c.start) + p0, static_cast<std::size_t>(ld), jmax, P - p0, nullptr};
  const int warp_last_row = jt + kOutTM * kSide / kWarps * (static_cast<int>(threadIdx.x) / 32 + 1) - 1;
  multiply<kOutTM, kOutTN>(0, stages, coef, x, s, ty, tx, acc,
                           [warp_last_row](int stage) { return warp_last_row >= stage * kDepth; });

  const float Dh = Dskip[h];
  const std::size_t HP = static_cast<std::size_t>(sh.H) * P;
  const int row_c = src.row0 + static_cast<int>(t.c.start - t.start);  // the chunk's first packed row
#pragma unroll
  for (int r = 0; r < kOutTM; ++r) {
    const int j = jt + kOutTM * ty + r;
    if (j >= jmax) break;
    const float* xj = src.x(h, t.c.start + j);
    float* yj = y + static_cast<std::size_t>(row_c + j) * HP + static_cast<std::size_t>(h) * P;
#pragma unroll
    for (int c = 0; c < kOutTN; ++c) {
      const int pp = p0 + b_col<kOutTN>(tx, c);
      if (pp < P) yj[pp] = acc[r][c] + Dh * xj[pp];
    }
  }
}

int tiles(int n, int tile) { return (n + tile - 1) / tile; }

}  // namespace

std::size_t chunk_cb_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g) {
  return static_cast<std::size_t>(p.num_cell_tasks) * sh.groups * g.cell * g.cell;
}

void launch_chunk_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                       const float* dt, const float* A, const float* D, const SsdState& st, Scratch sc, float* cb,
                       float* y, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  const unsigned T = static_cast<unsigned>(p.num_cell_tasks), H = static_cast<unsigned>(sh.H);
  const int ct = tiles(g.cell, kSide * kCbTM);
  chunk_cb_kernel<<<dim3(T, static_cast<unsigned>(sh.groups), static_cast<unsigned>(ct * (ct + 1) / 2)), kThreads, 0,
                    s>>>(sh, g, p, xbc, ld, st, cb);
  check_launch("ssd chunk cb");
  const unsigned st_tiles = static_cast<unsigned>(tiles(sh.P, kSide * kStTM) * tiles(sh.N, kSide * kStTN));
  chunk_states_kernel<<<dim3(T, H, st_tiles), kThreads, 0, s>>>(sh, g, p, xbc, ld, dt, A, st, sc);
  check_launch("ssd chunk states");
  launch_chain(sh, g, p, st, sc, s);
  const unsigned out_tiles = static_cast<unsigned>(tiles(g.cell, kSide * kOutTM) * tiles(sh.P, kSide * kOutTN));
  chunk_outputs_kernel<<<dim3(T, H, out_tiles), kThreads, 0, s>>>(sh, g, p, xbc, ld, dt, A, D, st, sc, cb, y);
  check_launch("ssd chunk outputs");
}

}  // namespace parity::cuda::ssd
