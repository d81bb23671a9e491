// The pipelined lane walk: the lane walk (ssd_lanes.cu) with its per-cell latency cut. Same lanes and
// the same register state (lane (two columns, quarter q) owns S[p][n] for its two columns and the n of
// quarter q, n ≡ q mod 4), the same fp32 operations in the same order for every value; what changes is
// when each is done, so that a warp has long runs of independent work instead of short dependent ones:
//   - one block barrier a cell instead of two: a cell's coefficients (cum, coef_{t,i}, w_i, the decay,
//     exp(cum_t)) are formed during the cell before it, from its dt and band rows, which arrive two
//     cells ahead (three x buffers); its C and B rows arrive one cell ahead (two buffers);
//   - C and B land by quarter straight from global memory (4-byte cp.async: element n of row t at
//     [t][n % 4][n / 4]), so no pass rearranges them after they land;
//   - the outputs' quarter sums and the delta/fold run in one loop over n, four values of n at a
//     time: each of the four a step is read by 16 rows' quarter sums (C·S of the cell's start state)
//     and then folded (its 16-row delta, S ← fold_element): 32 independent quarter-sum chains and 8
//     delta chains in one basic block, instead of 8 chains of 4 rows at a time with the exchange,
//     intra sum and output between them;
//   - then one exchange of all 16 rows' quarters (shared memory, inside the warp), and every lane
//     finishes four rows (t = q, 4 + q, 8 + q, 12 + q): eight independent intra-sum chains, the
//     outputs with exp(cum_t) read from the coefficients.
// Every value is the same function of the same inputs as in the lane walk, the walk, the span walk and
// the three-phase kernels (ssd_device.cuh's helpers where a value is formed; each quarter sum one fmaf
// chain over its n ascending, each delta one chain over i ascending from 0, each intra sum one chain over
// i ascending from 0): CudaSsdTiling holds it to them bit for bit. One block per (sequence, head, 64
// columns of p), 128 threads; shapes (SsdPrefill's pipe values) 564: three blocks an SM (168 registers),
// 664: two (up to 255). Supported: N a multiple of 4 up to 128, cells of at most 16 rows (lanes_supported).
//
// 674 is 664 with the coefficients out of the walk: a table pass before it (one warp a cell task and head,
// coef_table_kernel) forms every cell's coefficient block, laid out as the walk's coefficient buffer, and
// the walk copies the next cell's block with its C and B rows instead of forming it between them. The cum's
// shuffle chain and the exps then leave the walk's per-cell path (the probe: 2.4-2.6k of a cell's
// 14-17k cycles at 664), for one more 1.4 KB copy a cell. The same helpers on the same floats, so the same
// bits (CudaSsdTiling). 684 (automatic's) is 674 with every row's C and B laid out by quarter beforehand
// (quarter_rows_kernel), so a whole cell's C and B are two contiguous blocks of 16-byte copies instead of
// 32 4-byte copies a thread (the probe: the copies' issue 3.2k → 1.5k cycles a cell).
#include <atomic>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kG = 16;          // most rows of a cell
constexpr int kNQ = 32;         // most n of a quarter (N ≤ 128)
constexpr int kQS = kNQ + 4;    // a quarter's stride in Cq and Bq: the four quarters start 4 banks apart
constexpr int kRowQ = 4 * kQS;  // one row of Cq or Bq
constexpr int kPT = 64;         // columns of p a block, two a lane
constexpr int kThreads = 128;   // (32 column pairs) × (4 quarters); also the most N (one element a thread)
constexpr int kWc = 16;         // columns of a warp
constexpr int kCS = 20;         // a row of coef: a multiple of 4 (16-byte reads); the 4 rows a warp reads sit in distinct banks
constexpr int kProbeSteps = 5;  // the probe's steps

// Shared memory, in floats (all sizes fixed: N ≤ 128).
//   x buffers ×3: dts [kG] | band [kG][kG] | x [kG][kPT]   (a cell's rows; two cells ahead)
//   C/B buffers ×2: Cq [kG][4][kQS] | Bq [kG][4][kQS]       (by quarter; one cell ahead)
//   coefficient buffers ×2: coef [kG][kCS] | w [kG] | exp(cum) [kG] | decay [4] (| xw [kG][kPT])
//   exchange: [warps][rows][kQxR]
// kXs (three blocks an SM, 168 registers): the fold's w_i·x_i[p] is formed once a block with the
// coefficients and read from shared memory (in registers it spills), and the exchange takes 8 rows at
// a time (so that three blocks fit: 72.5 KB each).
constexpr int kDts = 0, kBand = kDts + kG, kX = kBand + kG * kG, kXbuf = kX + kG * kPT;
constexpr int kBq = kG * kRowQ, kCbuf = 2 * kG * kRowQ;
constexpr int kCoef = 0, kWts = kCoef + kG * kCS, kE = kWts + kG, kDecay = kE + kG, kXw = kDecay + 4;
constexpr int kXbufs = 0, kCbufs = kXbufs + 3 * kXbuf, kFbufs = kCbufs + 2 * kCbuf;
template <bool kXs>
constexpr int kFbuf = kXw + (kXs ? kG * kPT : 0);
template <bool kXs>
constexpr int kQx = kFbufs + 2 * kFbuf<kXs>;
template <bool kXs>
constexpr int kRowsX = kXs ? 8 : kG;  // rows exchanged at a time
// The exchange's row: 4 quarters of 16 columns, quarter q at q·kQxQ. 24 and 104 put both the float2
// writes (a row's 4 quarters) and the reads (4 rows' quarter qq) of each half-warp in 32 distinct banks;
// kXs keeps 16 and 72 (conflict-free reads, 2-way writes) so that three blocks fit an SM.
template <bool kXs>
constexpr int kQxQ = kXs ? 16 : 24;
template <bool kXs>
constexpr int kQxR = kXs ? 72 : 104;
template <bool kXs>
constexpr int kSmemFloats = kQx<kXs> + (kThreads / 32) * kRowsX<kXs> * kQxR<kXs>;
static_assert(kXbuf % 4 == 0 && kCbufs % 4 == 0 && kFbufs % 4 == 0 && kXw % 4 == 0 && kQx<true> % 4 == 0 &&
                  kQx<false> % 4 == 0,
              "16-byte aligned regions");
// Three (kXs) or two blocks in an H200 SM's 228 KB, each with its 1 KB the system reserves.
static_assert(3 * (kSmemFloats<true> * 4 + 1024) <= 228 * 1024 && 2 * (kSmemFloats<false> * 4 + 1024) <= 228 * 1024,
              "blocks an SM");

// A cell every block takes whole: G = 16 rows, all the call's, folded (no ring rows: a cell the call
// starts inside has j0 > 0). Its loops have no run-time bounds.
__device__ __forceinline__ bool whole(const CellIn& c) { return c.L == kG && c.j0 == 0 && c.fold; }

using Ctx = WalkCtx;

// Cell c's C rows (output rows j0 .. L-1) and, when it folds, its B rows (0 .. L-1) into Q by quarter.
// Each thread copies one element n of every row (zeros past N); nothing else of Q is written. Lane l of
// warp w takes n = 4m + q with q = l % 4 and m = 4w + (l / 4) % 4 + 16·(l / 16): the warp's 32 writes
// of a row, at 4q + m (mod 32) banks, fall in 32 distinct banks.
// kQRows (way 684): a whole cell from quarter_rows_kernel's rows, two contiguous blocks.
template <bool kQRows>
__device__ void issue_cb(const Ctx& b, const CellIn& c, float* Q, const float* qrows, int num_rows) {
  if (kQRows && whole(c)) {
    const int row = b.src.row0 + static_cast<int>(c.cs - b.src.start);
    const float* sC = qrows + (static_cast<std::size_t>(b.grp) * num_rows + row) * kRowQ;
    const float* sB = qrows + (static_cast<std::size_t>(b.sh.groups + b.grp) * num_rows + row) * kRowQ;
    for (int u = threadIdx.x; u < kG * kRowQ / 4; u += kThreads) {
      cp16(Q + 4 * u, sC + 4 * u);
      cp16(Q + kBq + 4 * u, sB + 4 * u);
    }
    return;
  }
  const int l = threadIdx.x % 32, m = 4 * (threadIdx.x / 32) + (l / 4) % 4 + 16 * (l / 16), n = 4 * m + l % 4;
  const bool valid = n < b.sh.N;
  float* dC = Q + (n % 4) * kQS + n / 4;
  float* dB = dC + kBq;
  if (whole(c)) {  // rows of this call, ld apart
    const int ld = b.src.ld;
    const float* sC = b.src.C(b.grp, c.cs) + (valid ? n : 0);
    const float* sB = b.src.B(b.grp, c.cs) + (valid ? n : 0);
#pragma unroll
    for (int t = 0; t < kG; ++t) cp4(dC + t * kRowQ, sC + static_cast<std::ptrdiff_t>(t) * ld, valid);
#pragma unroll
    for (int t = 0; t < kG; ++t) cp4(dB + t * kRowQ, sB + static_cast<std::ptrdiff_t>(t) * ld, valid);
    return;
  }
  for (int t = c.j0; t < c.L; ++t) {
    const float* r = b.src.C(b.grp, c.cs + t);
    cp4(dC + t * kRowQ, valid ? r + n : r, valid);
  }
  if (c.fold)
    for (int i = 0; i < c.L; ++i) {
      const float* r = b.src.B(b.grp, c.cs + i);  // ring rows first where the call starts inside the cell
      cp4(dB + i * kRowQ, valid ? r + n : r, valid);
    }
}

// Cell c's dt and x of every source row and band rows of its output rows into x buffer X (as the lane
// walk copies them: x rows in units of 4 columns, zeros past P; band row t up to distance t). kTable: the
// x rows alone (the coefficients, the only readers of dt and the band, come from the table).
template <bool kTable>
__device__ void issue_x(const Ctx& b, const CellIn& c, float* X) {
  const int tid = threadIdx.x, G = b.g.cell;
  if (!kTable && tid < c.L) cp4(X + kDts + tid, b.src.dtp(b.h, c.cs + tid), true);
  const int u = tid % (kPT / 4), xend = b.sh.P - b.p0;
  for (int i = tid / (kPT / 4); i < c.L; i += kThreads / (kPT / 4))
    copy4(X + kX + i * kPT + 4 * u, b.src.x(b.h, c.cs + i) + b.p0, 4 * u, xend);
  if (!kTable && tid < kG * 4) {
    const int t = tid / 4, v = tid % 4;
    if (t >= c.j0 && t < c.L && 4 * v <= t) {
      const int row = b.src.row0 + static_cast<int>(c.cs + t - b.src.start);
      copy4(X + kBand + t * kG + 4 * v, b.band + band_at(row, b.sh.groups, b.grp, G, 0), 4 * v, t + 1);
    }
  }
}

// Cell c's coefficients from x buffer X into F: every warp runs the left-to-right cum of cum_scan by
// shuffles (lane i keeps cum_i); coef_{t,i} = row_weight(cum_t, cum_i, dt_i)·band[t][t−i] for the output
// rows, w_i = row_weight(cum_{L−1}, cum_i, dt_i), exp(cum_t) (row_output's factor) and exp(cum_{L−1}),
// the last three on different warps; kXs: also xw[i][p] = w_i·x_i[p] (thread: row i = tid / 8, 8
// columns; its w_i formed again, the same value).
template <bool kXs>
__device__ void coefficients(const CellIn& c, const float* X, float* F, float Ah) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, L = c.L, j0 = c.j0;
  const float* dts = X + kDts;
  const float* bnd = X + kBand;
  const float d = lane < L ? cum_term(dts[lane], Ah) : 0.0f;
  float total;
  const float cl = warp_cell_cum<kG>(d, L, lane, &total);
#pragma unroll
  for (int e0 = 0; e0 < kG * kG; e0 += kThreads) {
    const int e = e0 + tid, t = e / kG, i = e % kG;
    const float ct = __shfl_sync(0xffffffffu, cl, t), ci = __shfl_sync(0xffffffffu, cl, i);
    if (t >= j0 && t < L && i <= t) F[kCoef + t * kCS + i] = row_weight(ct, ci, dts[i]) * bnd[t * kG + (t - i)];
  }
  if (warp == 1 && lane < L) F[kWts + lane] = row_weight(total, cl, dts[lane]);
  if (warp == 2 && lane < L) F[kE + lane] = exp_f(cl);
  if (warp == 3 && lane == 0) F[kDecay] = exp_f(total);
  if constexpr (kXs) {
    const int i = tid / 8, c0 = 8 * (tid % 8);
    const float ci = __shfl_sync(0xffffffffu, cl, i);
    if (c.fold && i < L) {
      const float wi = row_weight(total, ci, dts[i]);
      const float* xr = X + kX + i * kPT + c0;
      float* dst = F + kXw + i * kPT + c0;
#pragma unroll
      for (int h = 0; h < 8; h += 4) {
        const float4 v = *reinterpret_cast<const float4*>(xr + h);
        *reinterpret_cast<float4*>(dst + h) = make_float4(wi * v.x, wi * v.y, wi * v.z, wi * v.w);
      }
    }
  }
}

// A cell's coefficient block as `coefficients<false>` leaves it in F (kFbuf<false> floats), for the table.
constexpr int kTableBlock = kFbuf<false>;
static_assert(kTableBlock % 4 == 0 && kRowQ % 4 == 0, "16-byte copies of a table block and of quarter rows");

// The table pass of way 674: for cell task `blockIdx.x` and head 4·blockIdx.y + warp, the coefficient
// block of that cell, computed by one warp with coefficients()'s expressions on the same floats (dt from
// the row source, the band from scratch). Entries coefficients() leaves unwritten are zero here.
__global__ void __launch_bounds__(kThreads) coef_table_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                             int ld, const float* dt, const float* A, SsdState st,
                                                             const float* band, float* table) {
  const int task = blockIdx.x, lane = threadIdx.x % 32, h = 4 * static_cast<int>(blockIdx.y) + threadIdx.x / 32;
  if (h >= sh.H) return;
  float* F = table + (static_cast<std::size_t>(task) * sh.H + h) * kTableBlock;
  const CellTask ct = cell_task(g, p, task, h, sh.H);
  const CellIn c = first_cell(ct);
  if (!c.live) {  // a cell the walk never reaches
    for (int e = lane; e < kTableBlock; e += 32) F[e] = 0.0f;
    return;
  }
  const RowSource src = source_of(sh, g, p, ct.seq, xbc, ld, dt, st);
  const int L = c.L, j0 = c.j0, grp = h / sh.heads_per_group();
  const float Ah = A[h];
  const float dl = lane < L ? src.dtv(h, c.cs + lane) : 0.0f;
  float total;
  const float cl = warp_cell_cum<kG>(lane < L ? cum_term(dl, Ah) : 0.0f, L, lane, &total);
#pragma unroll
  for (int e0 = 0; e0 < kG * kCS; e0 += 32) {
    const int e = e0 + lane, t = e / kCS, i = e % kCS, i16 = i % kG;
    const float cum_t = __shfl_sync(0xffffffffu, cl, t), cum_i = __shfl_sync(0xffffffffu, cl, i16),
                dt_i = __shfl_sync(0xffffffffu, dl, i16);
    float v = 0.0f;
    if (i < kG && t >= j0 && t < L && i <= t) {
      const int row = src.row0 + static_cast<int>(c.cs + t - src.start);
      v = row_weight(cum_t, cum_i, dt_i) * band[band_at(row, sh.groups, grp, g.cell, t - i)];
    }
    F[kCoef + e] = v;
  }
  if (lane < kG) {
    F[kWts + lane] = lane < L ? row_weight(total, cl, dl) : 0.0f;
    F[kE + lane] = lane < L ? exp_f(cl) : 0.0f;
  }
  if (lane < 4) F[kDecay + lane] = lane == 0 ? exp_f(total) : 0.0f;
}

// Way 684's pass over the call's rows: C and B of every row and group laid out as issue_cb lays a row
// in shared memory (element n at [n % 4][n / 4], kQS a quarter, zeros past N and in the pads), at
// qrows[((k · groups + grp) · rows + row) · kRowQ] for k = 0 (C) and 1 (B). A whole cell's 16 rows are
// then one contiguous block, which the walk copies by 16-byte copies instead of 4-byte ones. Copies only:
// no value changes.
__global__ void __launch_bounds__(kThreads) quarter_rows_kernel(SsdShape sh, PassSeqs p, const float* xbc, int ld,
                                                               float* qrows) {
  const int row = blockIdx.x, grp = blockIdx.y, I = sh.H * sh.P, GN = sh.groups * sh.N;
  const float* src = xbc + static_cast<std::size_t>(row) * ld + I + static_cast<std::size_t>(grp) * sh.N;
  for (int e = threadIdx.x; e < 2 * kRowQ; e += kThreads) {
    const int k = e / kRowQ, r = e % kRowQ, q = r / kQS, m = r % kQS, n = 4 * m + q;
    const float v = m < kNQ && n < sh.N ? src[(k == 0 ? GN : 0) + n] : 0.0f;
    qrows[((static_cast<std::size_t>(k) * sh.groups + grp) * p.num_rows + row) * kRowQ + r] = v;
  }
}

// Cell task `task`'s coefficient block from the table into F (kTableBlock / 4 16-byte copies).
__device__ __forceinline__ void issue_table(const float* table, int task, int h, int H, float* F) {
  const float* src = table + (static_cast<std::size_t>(task) * H + h) * kTableBlock;
  for (int u = threadIdx.x; u < kTableBlock / 4; u += kThreads) cp16(F + 4 * u, src + 4 * u);
}

__device__ __forceinline__ float2 lds2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// Keeps the compiler from hoisting later steps' shared-memory loads above this point (it would hoist
// all of them and spill); kTight: the shape's registers are capped at 168.
template <bool kTight>
__device__ __forceinline__ void hoist_fence() {
  if constexpr (kTight) asm volatile("" ::: "memory");
}

// kPre: 0 (564, 664) the walk forms its coefficients and copies C and B itself; 1 (674) the coefficient
// blocks from the table pass; 2 (684) also whole cells' C and B from quarter_rows_kernel's rows.
template <int MB, bool kProbe, int kPre>
__global__ void __launch_bounds__(kThreads, MB)
    pipe_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                const float* Dskip, SsdState st, const float* band, const float* table, const float* qrows, float* y,
                long long* probe) {
  constexpr bool kTight = kThreads * MB > 256;
  constexpr bool kXs = kTight;  // xw in shared memory, the exchange in two halves
  constexpr bool kTable = kPre >= 1, kQRows = kPre == 2;
  static_assert(!(kTable && kXs), "the table holds coefficients()'s block without xw");
  // Shared-memory loads of the quarter sums and the delta are kept in runs of this many rows (the
  // compiler would hoist a whole step's 32 float4 loads, 128 registers, and spill).
  constexpr int kFenceRows = kTight ? 4 : 8;
  // The quarter sums and the fold in one loop over n (two blocks an SM), or the sums and outputs of 8
  // rows at a time and then the fold (three: in one loop they need more than 168 registers and spill).
  constexpr bool kFused = !kTight;
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N, nq = N / 4;
  const Ctx b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), band, h, h / sh.heads_per_group(),
              static_cast<int>(blockIdx.z) * kPT};
  const bool bf16 = st.state_f32 == nullptr;
  [[maybe_unused]] const float Ah = A[h];  // the coefficients' (not the table's walk)
  const float Dh = Dskip[h];
  const int64_t call_end = start + p.n[seq];

  extern __shared__ __align__(16) float smem[];
  float* qw = smem + kQx<kXs> + warp * kRowsX<kXs> * kQxR<kXs>;  // this warp's exchange
  auto Xb = [&](int k) { return smem + kXbufs + (k % 3) * kXbuf; };
  auto Qb = [&](int k) { return smem + kCbufs + (k % 2) * kCbuf; };
  auto Fb = [&](int k) { return smem + kFbufs + (k % 2) * kFbuf<kXs>; };

  // This lane's columns (block-local pl, pl + 1; warp-local wc) and quarter.
  const int q = lane & 3, wc = 2 * (lane >> 2), pl = kWc * warp + wc;
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;

  CellProbe<kProbe, kProbeSteps> probed(probe, tid);  // benchmarks only
  auto mark = [&](int i) { probed.mark(i); };

  CellIn c = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!c.live) return;
  auto after = [&](const CellIn& x, int k, bool& has) { return cell_after(x, k, K, call_end, g, has); };
  {
    issue_cb<kQRows>(b, c, Qb(0), qrows, p.num_rows);
    issue_x<kTable>(b, c, Xb(0));
    if constexpr (kTable) issue_table(table, t0, h, sh.H, Fb(0));
    bool has1 = false;
    const CellIn c1 = after(c, 0, has1);
    if (has1) issue_x<kTable>(b, c1, Xb(1));
    commit();
  }

  // The state: S[a][j] = state[p0 + pl + a][4j + q] (zeros for columns past P).
  float S[2][kNQ];
#pragma unroll
  for (int a = 0; a < 2; ++a) {
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
  if constexpr (!kTable) {
    wait_all();
    __syncthreads();
    coefficients<kXs>(c, Xb(0), Fb(0), Ah);
  }

  bool folded = false;
  for (int k = 0;; ++k) {
    bool has1 = false, has2 = false;
    const CellIn c1 = after(c, k, has1);
    CellIn c2 = c1;
    if (has1) c2 = after(c1, k + 1, has2);
    wait_all();
    // Cell k's C and B (and, kTable, coefficients) and cell k+1's x landed, cell k's coefficients formed (or
    // copied); cell k−1's readers done.
    __syncthreads();
    mark(0);
    probed.cell();
    if (has1) issue_cb<kQRows>(b, c1, Qb(k + 1), qrows, p.num_rows);
    if (has2) issue_x<kTable>(b, c2, Xb(k + 2));
    if constexpr (kTable)
      if (has1) issue_table(table, t0 + k + 1, h, sh.H, Fb(k + 1));  // Fb(k + 1)'s last readers: cell k − 1's math
    commit();
    mark(1);
    if constexpr (!kTable)
      if (has1) coefficients<kXs>(c1, Xb(k + 1), Fb(k + 1), Ah);
    mark(2);

    const float* Q = Qb(k);
    const float* X = Xb(k);
    const float* F = Fb(k);
    const float* x = X + kX;
    const int L = c.L, j0 = c.j0;
    const bool fold = c.fold;

    // The cell's math. kWhole: a whole cell at N = 128, loops without run-time bounds.
    const bool w = whole(c) && nq == kNQ;
    auto cell_math = [&](auto whole_t) {
      constexpr bool kWhole = decltype(whole_t)::value;
      float o[kG][2];  // the 16 rows' quarter sums a_q, this lane's two columns
      [[maybe_unused]] float xw[kXs ? 1 : kG][2];  // w_i·x_i[p] (kXs: read from F at each use)
      if constexpr (!kXs) {
#pragma unroll
        for (int i = 0; i < kG; ++i) {
          xw[i][0] = xw[i][1] = 0.0f;  // never read past L
          if (kWhole || (fold && i < L)) {
            const float2 xv = lds2(x + i * kPT + pl);
            const float wi = F[kWts + i];
            xw[i][0] = wi * xv.x;
            xw[i][1] = wi * xv.y;
          }
        }
      }
      const float decay = F[kDecay];
      const float* Cq = Q + q * kQS;
      const float* Bq = Q + kBq + q * kQS;
      // Rows r0 .. r1-1's quarter sums over n = 4·j4 + q .. 4·(j4 + 3) + q (one fmaf chain a row,
      // n ascending, started at zero by the caller).
      auto sums_at = [&](int j4, int r0, int r1) {
#pragma unroll
        for (int r = r0; r < r1; ++r) {
          const float4 cv = lds4(Cq + r * kRowQ + j4);
          const float cr[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (kWhole || j4 + u < nq) {
              o[r][0] = fmaf(cr[u], S[0][j4 + u], o[r][0]);
              o[r][1] = fmaf(cr[u], S[1][j4 + u], o[r][1]);
            }
          if (r % kFenceRows == kFenceRows - 1) hoist_fence<true>();
        }
      };
      // The delta of the same n (one chain over i ascending from 0 each) and the fold.
      auto fold_at = [&](int j4) {
        float acc[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int u = 0; u < 4; ++u) acc[a][u] = 0.0f;
#pragma unroll
        for (int i = 0; i < kG; ++i)
          if (kWhole || i < L) {
            const float4 bv = lds4(Bq + i * kRowQ + j4);
            const float bb[4] = {bv.x, bv.y, bv.z, bv.w};
            float xwi[2];
            if constexpr (kXs) {
              const float2 v = lds2(F + kXw + i * kPT + pl);
              xwi[0] = v.x;
              xwi[1] = v.y;
            } else {
              xwi[0] = xw[i][0];
              xwi[1] = xw[i][1];
            }
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
              for (int u = 0; u < 4; ++u) acc[a][u] = fmaf(xwi[a], bb[u], acc[a][u]);
            if (i % kFenceRows == kFenceRows - 1) hoist_fence<true>();
          }
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (kWhole || j4 + u < nq) S[a][j4 + u] = fold_element(decay, S[a][j4 + u], acc[a][u], bf16);
      };
      // Rows 4·g0 .. 4·g1 − 1 (their sums in o): lane q finishes rows t = 4g + q: the intra sums (i
      // ascending from 0 to t, independent chains), the exchange (qw[r][q][wc + a] = this lane's a_q of
      // row r, column wc + a) and the outputs.
      auto finish = [&](int g0, int g1) {
        float in[4][2];
#pragma unroll
        for (int gg = g0; gg < g1; ++gg) in[gg][0] = in[gg][1] = 0.0f;
#pragma unroll
        for (int i4 = 0; i4 < 4 * g1; i4 += 4) {
          float4 cf[4];
#pragma unroll
          for (int gg = i4 / 4 > g0 ? i4 / 4 : g0; gg < g1; ++gg) cf[gg] = lds4(F + kCoef + (4 * gg + q) * kCS + i4);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int i = i4 + u;
            const float2 xv = lds2(x + i * kPT + pl);
#pragma unroll
            for (int gg = i4 / 4 > g0 ? i4 / 4 : g0; gg < g1; ++gg) {
              const float cr[4] = {cf[gg].x, cf[gg].y, cf[gg].z, cf[gg].w};
              const bool on = gg > i4 / 4 || i <= 4 * gg + q;  // i ≤ t
              in[gg][0] = on ? fmaf(cr[u], xv.x, in[gg][0]) : in[gg][0];
              in[gg][1] = on ? fmaf(cr[u], xv.y, in[gg][1]) : in[gg][1];
            }
          }
        }
        const int h0 = 4 * g0;
#pragma unroll
        for (int r = h0; r < 4 * g1; ++r)
          *reinterpret_cast<float2*>(qw + (r - h0) * kQxR<kXs> + q * kQxQ<kXs> + wc) = make_float2(o[r][0], o[r][1]);
        __syncwarp();
#pragma unroll
        for (int gg = g0; gg < g1; ++gg) {
          const int t = 4 * gg + q;
          if (kWhole || (t >= j0 && t < L)) {
            float2 aq[4];
#pragma unroll
            for (int qq = 0; qq < 4; ++qq) aq[qq] = lds2(qw + (t - h0) * kQxR<kXs> + qq * kQxQ<kXs> + wc);
            const float2 xt = lds2(x + t * kPT + pl);
            const float e = F[kE + t];
            const int row = b.src.row0 + static_cast<int>(c.cs + t - b.src.start);
            float* yr = y + static_cast<std::size_t>(row) * sh.H * P + static_cast<std::size_t>(h) * P + b.p0 + pl;
            if (b.p0 + pl < P)
              yr[0] = row_output_scaled(e, combine_quarters(aq[0].x, aq[1].x, aq[2].x, aq[3].x), in[gg][0], Dh, xt.x);
            if (b.p0 + pl + 1 < P)
              yr[1] = row_output_scaled(e, combine_quarters(aq[0].y, aq[1].y, aq[2].y, aq[3].y), in[gg][1], Dh, xt.y);
          }
        }
        __syncwarp();  // the exchange is read before the next rows (or the next cell) overwrite it
      };
      if constexpr (kFused) {  // one loop: each step's S read by the 16 rows' sums, then folded
#pragma unroll
        for (int r = 0; r < kG; ++r) o[r][0] = o[r][1] = 0.0f;
#pragma unroll
        for (int j4 = 0; j4 < kNQ; j4 += 4) {
          if (kWhole || j4 < nq) {
            sums_at(j4, 0, kG);
            if (kWhole || fold) fold_at(j4);
          }
          hoist_fence<kTight>();
        }
        mark(3);
        finish(0, 4);
      } else {  // 8 rows' sums and outputs at a time, then the fold (fewer values live at once)
#pragma unroll
        for (int r0 = 0; r0 < kG; r0 += 8) {
#pragma unroll
          for (int r = r0; r < r0 + 8; ++r) o[r][0] = o[r][1] = 0.0f;
#pragma unroll
          for (int j4 = 0; j4 < kNQ; j4 += 4) {
            if (kWhole || j4 < nq) sums_at(j4, r0, r0 + 8);
            hoist_fence<kTight>();
          }
          finish(r0 / 4, r0 / 4 + 2);
        }
        mark(3);
        if (kWhole || fold)
#pragma unroll
          for (int j4 = 0; j4 < kNQ; j4 += 4) {
            if (kWhole || j4 < nq) fold_at(j4);
            hoist_fence<kTight>();
          }
      }
    };
    if (w) cell_math(std::true_type{});
    else cell_math(std::false_type{});
    folded = folded || fold;
    mark(4);
    if (!has1) break;
    c = c1;
  }
  probed.write(probe);
  if (!folded) return;  // the slot keeps its state
#pragma unroll
  for (int a = 0; a < 2; ++a) {
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

template <int MB, int kPre>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* table, float* qrows, float* y,
            cudaStream_t s) {
  constexpr std::size_t smem = static_cast<std::size_t>(kSmemFloats<(MB > 2)>) * sizeof(float);
  if constexpr (kPre >= 1) {
    coef_table_kernel<<<dim3(static_cast<unsigned>(p.num_cell_tasks), static_cast<unsigned>((sh.H + 3) / 4)), kThreads,
                        0, s>>>(sh, g, p, xbc, ld, dt, A, st, band, table);
    check_launch("ssd pipe table");
  }
  if constexpr (kPre == 2) {
    quarter_rows_kernel<<<dim3(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(sh.groups)), kThreads, 0, s>>>(
        sh, p, xbc, ld, qrows);
    check_launch("ssd pipe quarter rows");
  }
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>((sh.P + kPT - 1) / kPT));
  long long* probe = probe_buffer.load();
  auto run = [&](auto kernel) {
    ensure_smem(kernel, smem, "ssd pipe smem");
    kernel<<<grid, kThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, band, table, qrows, y, probe);
  };
  if (probe != nullptr) run(pipe_kernel<MB, true, kPre>);
  else run(pipe_kernel<MB, false, kPre>);
  check_launch("ssd pipe");
}

// The pipelined ways, the one list every question about a way reads: blocks an SM and kPre.
struct PipeShape {
  int way, blocks, pre;
};
constexpr PipeShape kPipeShapes[] = {{564, 3, 0}, {664, 2, 0}, {674, 2, 1}, {684, 2, 2}};

// f(blocks an SM, kPre) for a way.
template <class F>
void by_way(int way, F f) {
  const bool found = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return ((way == kPipeShapes[I].way
                 ? (f(std::integral_constant<int, kPipeShapes[I].blocks>{},
                      std::integral_constant<int, kPipeShapes[I].pre>{}),
                    true)
                 : false) ||
            ...);
  }(std::make_index_sequence<std::size(kPipeShapes)>{});
  if (!found) throw Error("CUDA SSD: no pipelined lane walk of shape " + std::to_string(way));
}

}  // namespace

void pipe_probe(long long* device_buffer) { probe_buffer.store(device_buffer); }

int pipe_pre(int way) {
  for (const PipeShape& shape : kPipeShapes)
    if (shape.way == way) return shape.pre;
  return -1;
}

std::size_t pipe_table_floats(const SsdShape& sh, const PassSeqs& p) {
  return static_cast<std::size_t>(p.num_cell_tasks) * sh.H * kTableBlock;
}

std::size_t pipe_quarter_rows_floats(const SsdShape& sh, const PassSeqs& p) {
  return static_cast<std::size_t>(2) * sh.groups * p.num_rows * kRowQ;
}

int pipe_resident(int way) {
  int per_sm = 0;
  by_way(way, [&](auto mb, auto pre) {
    constexpr int MB = decltype(mb)::value;
    constexpr std::size_t smem = static_cast<std::size_t>(kSmemFloats<(MB > 2)>) * sizeof(float);
    const auto kernel = pipe_kernel<MB, false, decltype(pre)::value>;
    ensure_smem(kernel, smem, "ssd pipe smem");
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  });
  return per_sm;
}

void launch_pipe(int way, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                 const float* dt, const float* A, const float* D, const SsdState& st, const float* band, float* table,
                 float* qrows, float* y, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  if (!lanes_supported(sh, g))
    throw Error("CUDA SSD: the pipelined lane walk needs N a multiple of 4 up to 128 and cells of at most 16 rows (N " +
                std::to_string(sh.N) + ", cell " + std::to_string(g.cell) + ")");
  const int pre = pipe_pre(way);
  if ((pre >= 1 && table == nullptr) || (pre == 2 && qrows == nullptr))
    throw Error("CUDA SSD: way " + std::to_string(way) + " needs its scratch (the coefficient table, quarter rows)");
  by_way(way, [&](auto mb, auto kpre) {
    launch<decltype(mb)::value, decltype(kpre)::value>(sh, g, p, xbc, ld, dt, A, D, st, band, table, qrows, y, s);
  });
}

}  // namespace parity::cuda::ssd
