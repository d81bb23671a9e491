// The span walk: the fused scan's walk for few sequences. The walk (ssd_walk.cu) has one block per
// (sequence, head, tile of p) and takes a call's cells one at a time, so a batch of one sequence
// runs 128 blocks of 64 threads through 128 cells in series, each cell waiting on its loads and four
// barriers. Here a block takes a span of K = 64 / G consecutive cells at a time, with 256 threads,
// and the next span's inputs are already on their way (into the other of two buffers: whole rows by
// the TMA unit where every row is 16-byte aligned, else cp.async):
//   1. cum of each cell (every lane of the cell's warp runs cum_term and the left-to-right sum of
//      cum_scan, keeping its rows' prefixes);
//   2. coef_{t,i} = row_weight(cum_t, cum_i, dt_i) · band[t][t−i] for every pair of every cell, and
//      w_i = row_weight(cum_{L−1}, cum_i, dt_i) for the rows of folded cells;
//   3. every folded cell's delta = Σ_i (w_i·x_i[p])·B_i[n] (w_i·x_i[p] rounded, as the walk stages
//      it; one fmaf chain over the cell's rows ascending), the K cells side by side (T/K threads
//      each); then the state, which lives in
//      registers (a thread owns 2 columns of p × 4 of n), through the cells in order: each cell's
//      start state is written out for the outputs (over its delta), S ← fold_element(exp(cum_{L−1}),
//      S, delta);
//   4. every output row of the span from its cell's start state:
//      y_t[p] = row_output(cum_t, combine_quarters(a_0..a_3), Σ_{i≤t} coef_{t,i}·x_i[p], D, x_t[p]),
//      a_q = Σ_{n ≡ q mod 4, ascending} C_t[n]·S[p][n], the intra sum over i ascending from 0; the
//      four quarter sums of a 4 × 4 tile by four lanes, combined by two shuffles (out_lanes).
// Measured (H200, 32 heads × 64, N 128, 2048 tokens): 1 sequence 458 µs at G = 16 (the walk 1,397,
// the three-phase kernels 632), 3 sequences 1,310 (walk 1,510), 4 sequences 1,729 (walk 1,556): one
// block an SM, so the time grows by waves. Per 64-row span about 25k cycles (BM_CudaSsdSpanProbe):
// 40 % issuing the next span's copies (likely every thread's expect_tx and arrival serialising on the
// one mbarrier: one arrival with the span's byte count would do), 24 % outputs, 20 % deltas.
// Only the state's fold is serial; the cells of a span share each step's barrier. Every value is
// the fp32 sequence of the walk and the three-phase kernels (ssd_device.cuh's helpers, the same
// fmaf chains in the same order), so the bits do not depend on which of them ran.
// Supported: N a multiple of 4 and at most 128 (one 2×4 tile of the state per thread), G = 16, 32 or
// 64 (cells of whole 16-row blocks; K = 4, 2, 1). Other shapes take the walk.
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kPT = 16;        // columns of p per block
constexpr int kThreads = 256;  // threads per block
constexpr int kRows = 64;      // rows of a span: K cells of G rows
constexpr int kMaxCells = 4;   // K at G = 16

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

struct SpanLayout {
  int Nc, Ns, Gc;              // row strides: C and B; the start states (and deltas); the coefficients
  std::size_t buf;             // one input buffer (two of them, from 0)
  std::size_t dts, x, C, B, band;  // offsets inside a buffer
  std::size_t cum, w, decay, coef, S, total;
};
__host__ __device__ inline SpanLayout span_layout(int N, int G) {
  SpanLayout l{};
  // Ns/4 odd: 8 consecutive rows' float4 reads fall in distinct banks; Nc too, for rows two apart.
  l.Nc = round_up(N, 8) + 4;
  l.Ns = round_up(N, 8) + 4;
  l.Gc = G + 1;               // odd: rows two apart start in different banks
  const int K = kRows / G;
  l.dts = 0;                                              // [kRows]
  l.x = l.dts + kRows;                                    // [kRows][kPT]
  l.C = l.x + static_cast<std::size_t>(kRows) * kPT;      // [kRows][Nc]
  l.B = l.C + static_cast<std::size_t>(kRows) * l.Nc;     // [kRows][Nc]
  l.band = l.B + static_cast<std::size_t>(kRows) * l.Nc;  // [kRows][G]: band[t][d]
  l.buf = l.band + static_cast<std::size_t>(kRows) * G;   // a multiple of 4: both buffers 16-byte aligned
  l.cum = 2 * l.buf;                                      // [kRows]
  l.w = l.cum + kRows;                                    // [kRows] w_i of the folded cells' rows
  l.decay = l.w + kRows;                                  // [kMaxCells] exp(cum_{L−1}) of each cell
  l.S = l.decay + kMaxCells;                              // [K][kPT][Ns]: deltas, then start states
  l.coef = l.S + static_cast<std::size_t>(K) * kPT * l.Ns;  // [kRows][Gc]
  l.total = l.coef + static_cast<std::size_t>(kRows) * l.Gc;
  return l;
}

// cp.async helpers (saddr, cp16, cp4, commit, copy4): ssd_copy_lanes.cuh.
__device__ __forceinline__ void wait_all_but_latest() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// ---- bulk copies (the TMA unit, one row each) completing on an mbarrier --------------------------
// A phase of the barrier takes one arrival per thread; each copy first adds its bytes to the
// phase's expected count, so the phase completes when every thread has issued and every byte landed.
__device__ __forceinline__ void bar_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(saddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void bar_expect(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(saddr(bar)) : "memory");
}
__device__ __forceinline__ void bar_wait(std::uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(saddr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// `bytes` (a multiple of 16; both ends 16-byte aligned) from global to shared memory.
__device__ __forceinline__ void bulk_row(float* dst, const float* src, unsigned bytes, std::uint64_t* bar) {
  bar_expect(bar, bytes);
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   saddr(dst)),
               "l"(src), "r"(bytes), "r"(saddr(bar))
               : "memory");
}

// ---- the cells of a span ---------------------------------------------------------------------
struct Span {
  int n;  // cells in it (0: the walk is over)
  int64_t cs[kMaxCells];
  int L[kMaxCells], j0[kMaxCells];
  bool fold[kMaxCells];
};

// a[k] for a k known only at run time, without indexing the array (which would put it in local
// memory): the loops over a span's cells are unrolled, so every other index is a constant.
template <class V>
__device__ __forceinline__ V pick(const V (&a)[kMaxCells], int k) {
  V v = a[0];
#pragma unroll
  for (int i = 1; i < kMaxCells; ++i)
    if (k == i) v = a[i];
  return v;
}

// The call's cells in order, as the walk takes them: the first from its task, the next ones from
// the previous end; the walk stops after a cell the call leaves open (exact) or when cells run out.
struct Cells {
  CellTask t;
  int k, K;
  bool done;
  __device__ Span next(int per, int cell_rows, bool exact) {
    Span s{};
    s.n = 0;
#pragma unroll
    for (int c = 0; c < kMaxCells; ++c) {  // unrolled: the span's arrays stay in registers
      if (c >= per || done) break;
      if (k >= K) {
        done = true;
        break;
      }
      if (k > 0) {
        t.c = {t.c.end, t.c.end + cell_rows};
        t.live = t.c.start < t.end;
        t.L = t.live ? static_cast<int>((t.c.end < t.end ? t.c.end : t.end) - t.c.start) : 0;
        t.j0 = 0;
        t.fold = t.live && (exact ? t.c.end <= t.end : true);
      }
      if (!t.live) {
        done = true;
        break;
      }
      s.cs[c] = t.c.start;
      s.L[c] = t.L;
      s.j0[c] = t.j0;
      s.fold[c] = t.fold;
      s.n = c + 1;
      ++k;
      if (!t.fold) done = true;
    }
    return s;
  }
};

// The copies of a span's inputs into one of the two buffers. Cell k's rows land at k·G: dt and x
// of every row (ring rows first where the call starts inside the cell), C and band rows of the
// output rows, B of the folded cells' rows. C is read up to N, B up to N rounded to 8 (the deltas'
// second run of n; zeros past N); a row's band values only up to its own distance.
template <int T>
struct Stager {
  RowSource src;
  const float* band;
  SpanLayout lo;
  int G, groups, grp, h, p0, P, N, cu, bu, gu;
  Lanes lx, lc, lb, lg;

  __device__ void issue(const Span& s, float* buf) const {
    float *dts = buf + lo.dts, *xs = buf + lo.x, *Cs = buf + lo.C, *Bs = buf + lo.B, *bs = buf + lo.band;
#pragma unroll
    for (int k = 0; k < kMaxCells; ++k) {
      if (k >= s.n) break;
      const int base = k * G, L = s.L[k], j0 = s.j0[k];
      const int64_t cs = s.cs[k];
      for (int i = threadIdx.x; i < L; i += T) cp4(dts + base + i, src.dtp(h, cs + i), true);
      if (lx.on)
        for (int i = lx.r0; i < L; i += lx.rstep) {
          const float* row = src.x(h, cs + i);
          for (int u = lx.u0; u < kPT / 4; u += lx.ustep) copy4(xs + (base + i) * kPT + 4 * u, row, p0 + 4 * u, P);
        }
      if (lc.on)
        for (int i = j0 + lc.r0; i < L; i += lc.rstep) {
          const float* row = src.C(grp, cs + i);
          for (int u = lc.u0; u < cu; u += lc.ustep) copy4(Cs + (base + i) * lo.Nc + 4 * u, row, 4 * u, N);
        }
      if (lg.on)
        for (int i = j0 + lg.r0; i < L; i += lg.rstep) {
          const float* row = band + band_at(src.row0 + static_cast<int>(cs + i - src.start), groups, grp, G, 0);
          for (int u = lg.u0; u < gu && 4 * u <= i; u += lg.ustep) cp16(bs + (base + i) * G + 4 * u, row + 4 * u);
        }
      if (s.fold[k] && lb.on)
        for (int i = lb.r0; i < L; i += lb.rstep) {
          const float* row = src.B(grp, cs + i);
          for (int u = lb.u0; u < bu; u += lb.ustep) copy4(Bs + (base + i) * lo.Nc + 4 * u, row, 4 * u, N);
        }
    }
    commit();
  }

  // The same copies as whole rows by the TMA unit (every row 16-byte aligned: see bulk_ok), one
  // thread per row, dt by cp.async. Columns of x past P and values of B past N are left as they
  // were: they only ever meet their own columns and values of n, which are never stored.
  __device__ void issue_bulk(const Span& s, float* buf, std::uint64_t* bar) const {
    float *dts = buf + lo.dts, *xs = buf + lo.x, *Cs = buf + lo.C, *Bs = buf + lo.B, *bs = buf + lo.band;
    const int tid = threadIdx.x;
    const unsigned xbytes = static_cast<unsigned>((P - p0 < kPT ? P - p0 : kPT) * 4), nbytes = static_cast<unsigned>(N * 4);
    int e0 = 0;  // jobs handed out so far: thread tid takes jobs e ≡ tid (mod T)
    auto first = [&](int m) {
      const int f = ((tid - e0) % T + T) % T;
      e0 += m;
      return f;
    };
#pragma unroll
    for (int k = 0; k < kMaxCells; ++k) {
      if (k >= s.n) break;
      const int base = k * G, L = s.L[k], j0 = s.j0[k], outs = L - j0;
      const int64_t cs = s.cs[k];
      for (int i = threadIdx.x; i < L; i += T) cp4(dts + base + i, src.dtp(h, cs + i), true);
      for (int i = first(L); i < L; i += T) bulk_row(xs + (base + i) * kPT, src.x(h, cs + i) + p0, xbytes, bar);
      for (int e = first(outs); e < outs; e += T) {
        const int i = j0 + e;
        bulk_row(Cs + (base + i) * lo.Nc, src.C(grp, cs + i), nbytes, bar);
      }
      for (int e = first(outs); e < outs; e += T) {
        const int i = j0 + e;
        const float* row = band + band_at(src.row0 + static_cast<int>(cs + i - src.start), groups, grp, G, 0);
        bulk_row(bs + (base + i) * G, row, static_cast<unsigned>(16 * (i / 4 + 1)), bar);
      }
      if (s.fold[k])
        for (int i = first(L); i < L; i += T) bulk_row(Bs + (base + i) * lo.Nc, src.B(grp, cs + i), nbytes, bar);
    }
    commit();
    bar_arrive(bar);
  }
};

// A cell's delta in one thread's registers: TC columns of p × TN values of n (two runs of 4 when
// TN = 8), accumulated over the cell's rows i ascending.
template <int TC, int TN>
__device__ __forceinline__ void cell_delta(int L, const float* w, const float* xs, const float* Bs, int Nc, int c0,
                                           int n0, int n1, float (&acc)[TC][TN]) {
#pragma unroll
  for (int a = 0; a < TC; ++a)
#pragma unroll
    for (int b = 0; b < TN; ++b) acc[a][b] = 0.0f;
  for (int i = 0; i < L; ++i) {
    float xa[TC], ba[TN];  // xa = w_i · x_i[p], the product the walk stages
    const float wi = w[i];
    if constexpr (TC == 4) {
      const float4 v = *reinterpret_cast<const float4*>(xs + i * kPT + c0);
      xa[0] = wi * v.x, xa[1] = wi * v.y, xa[2] = wi * v.z, xa[3] = wi * v.w;
    } else if constexpr (TC == 2) {
      const float2 v = *reinterpret_cast<const float2*>(xs + i * kPT + c0);
      xa[0] = wi * v.x, xa[1] = wi * v.y;
    } else {
      xa[0] = wi * xs[i * kPT + c0];
    }
    const float4 b0 = *reinterpret_cast<const float4*>(Bs + i * Nc + n0);
    ba[0] = b0.x, ba[1] = b0.y, ba[2] = b0.z, ba[3] = b0.w;
    if constexpr (TN == 8) {
      const float4 b1 = *reinterpret_cast<const float4*>(Bs + i * Nc + n1);
      ba[4] = b1.x, ba[5] = b1.y, ba[6] = b1.z, ba[7] = b1.w;
    }
#pragma unroll
    for (int a = 0; a < TC; ++a)
#pragma unroll
      for (int b = 0; b < TN; ++b) acc[a][b] = fmaf(xa[a], ba[b], acc[a][b]);
  }
}

// The outputs of a span with the quarter sums across lanes (256 threads). Lane l of warp w: quarter
// q = l % 4 of rows 4·rg .. 4·rg+3 (rg = 2w + l / 16) × columns cg, cg+4, cg+8, cg+12 (cg = (l / 4) % 4).
// Every thread runs its quarter's chain (n = q, q+4, ... ascending) for 16 outputs; the two
// shuffles form combine_quarters' (a_0 + a_1) + (a_2 + a_3) in every lane of the four (additions
// commute exactly); lane q then finishes row 4·rg + q.
template <int G>
__device__ __forceinline__ void out_lanes(const Span& cur, const int* meta, const float* Cs, const float* Sb,
                                          const float* xs, const float* coef, const float* cum, const SpanLayout& lo,
                                          int N, int P, int p0, int h, int HP, float Dh, const RowSource& src, float* y) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q = lane % 4, cg = (lane / 4) % 4, rg = 2 * warp + lane / 16, r0 = 4 * rg;
  const int k = r0 / G, t = r0 % G;  // rows r0 .. r0+3 are rows t .. t+3 of cell k
  const float* Sk = Sb + static_cast<std::size_t>(k) * kPT * lo.Ns;
  const float* C0 = Cs + r0 * lo.Nc + q;
  const float* S0 = Sk + cg * lo.Ns + q;
  float acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) acc[a][b] = 0.0f;
  for (int n = 0; n < N; n += 4) {  // every lane, whatever its rows: the shuffles need the whole warp
    float cv[4], sv[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) cv[a] = C0[a * lo.Nc + n];
#pragma unroll
    for (int b = 0; b < 4; ++b) sv[b] = S0[4 * b * lo.Ns + n];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) acc[a][b] = fmaf(cv[a], sv[b], acc[a][b]);
  }
  float inter[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // row r0 + q
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      float v = acc[a][b];
      v = v + __shfl_xor_sync(0xffffffffu, v, 1);
      v = v + __shfl_xor_sync(0xffffffffu, v, 2);
      if (a == q) inter[b] = v;
    }
  if (k >= cur.n) return;
  const int tt = t + q, j0k = meta[2 * k], Lk = meta[2 * k + 1];
  if (tt < j0k || tt >= Lk) return;
  // Σ_{i≤t} coef_{t,i} · x_i, i ascending from the cell's first row.
  const int base = k * G, r = r0 + q;
  float in[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i <= tt; ++i) {
    const float cf = coef[r * lo.Gc + i];
#pragma unroll
    for (int b = 0; b < 4; ++b) in[b] = fmaf(cf, xs[(base + i) * kPT + cg + 4 * b], in[b]);
  }
  const int row = src.row0 + static_cast<int>(pick(cur.cs, k) + tt - src.start);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int col = cg + 4 * b, pp = p0 + col;
    if (pp >= P) continue;
    y[static_cast<std::size_t>(row) * HP + static_cast<std::size_t>(h) * P + pp] =
        row_output(cum[r], inter[b], in[b], Dh, xs[r * kPT + col]);
  }
}

template <int G, int T, bool kBulk>
__global__ void __launch_bounds__(T, 1)
    span_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                const float* Dskip, SsdState st, const float* band, float* y, long long* probe) {
  constexpr int K = kRows / G;                 // cells per span
  constexpr int TPC = T / K;                   // threads per cell for the deltas
  constexpr int DT = kPT * 128 / TPC;          // their tile (at N = 128): TC columns × TN values of n
  constexpr int TN = DT >= 32 ? 8 : 4;
  constexpr int TC = DT / TN;
  constexpr int SC = kPT * 128 / 4 / T;        // the state's tile: SC columns × 4 values of n
  static_assert(TC * TN * TPC == kPT * 128 && TC >= 1 && TC <= 4, "the deltas' tiles cover 16 columns × 128 of n");
  static_assert(SC >= 1 && SC <= 2 && T == 256, "the outputs' lanes are laid out for 256 threads");
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], ntasks = p.task0[seq + 1] - t0;
  if (ntasks <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N, HP = sh.H * sh.P;
  const SpanLayout lo = span_layout(N, G);
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const int grp = h / sh.heads_per_group(), p0 = static_cast<int>(blockIdx.z) * kPT;
  const bool bf16 = st.state_f32 == nullptr;
  const float Ah = A[h], Dh = Dskip[h];
  const std::size_t sbase = (static_cast<std::size_t>(src.slot) * sh.H + h) * P * N;

  // Benchmarks only (probe set): thread 0 of the first block sums clock cycles per step.
  // Each warp's lane 0 also sums its own outputs step (the end barrier waits for the slowest).
  const bool block0 = probe != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
  const bool timing = block0 && tid == 0, wtiming = block0 && tid % 32 == 0;
  long long steps[7] = {0, 0, 0, 0, 0, 0, 0}, tick = timing ? clock64() : 0, spans = 0, wout = 0, w0 = 0;
  auto mark = [&](int i) {
    if (!timing) return;
    const long long now = clock64();
    steps[i] += now - tick;
    tick = now;
  };
  extern __shared__ __align__(16) float smem[];
  __shared__ std::uint64_t bars[2];  // the bulk copies of each buffer
  __shared__ int meta[2 * kMaxCells];  // each cell's j0 and L, for loops that index cells by row
  if constexpr (kBulk) {
    if (tid == 0) {
      bar_init(&bars[0], T);
      bar_init(&bars[1], T);
      bar_init_fence();
    }
    __syncthreads();
  }
  float *cum = smem + lo.cum, *wr = smem + lo.w, *decay = smem + lo.decay, *Sb = smem + lo.S, *coef = smem + lo.coef;

  // The state tile of this thread: columns sc .. sc+SC-1 (of the block's kPT) × n = sn .. sn+3.
  const int NQ = N / 4;
  const bool owner = tid < (kPT / SC) * NQ;
  const int sc = owner ? SC * (tid / NQ) : 0, sn = owner ? 4 * (tid % NQ) : 0;
  float S[SC][4];
#pragma unroll
  for (int a = 0; a < SC; ++a) {
    const int pp = p0 + sc + a;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      float v = 0.0f;
      if (owner && pp < P) {
        const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + sn + b;
        v = bf16 ? widen_bf16(st.state_bf16[i]) : st.state_f32[i];
      }
      S[a][b] = v;
    }
  }
  // The delta tile: cell dk, columns dc .. dc+TC-1 × n = dn0 .. dn0+3 (and dn1 .. dn1+3 when TN = 8).
  // With TN = 8 the runs are 4·dg and 4·NG + 4·dg (N rounded up to 8: B's rows are zero there).
  const int NG = (N + TN - 1) / TN;  // groups of n of a tile
  const int dk = tid / TPC, dl = tid % TPC;
  const bool dmine = dl < NG * (kPT / TC);
  const int dc = dmine ? TC * (dl / NG) : 0, dg = dmine ? dl % NG : 0;
  const int dn0 = 4 * dg, dn1 = TN == 8 ? 4 * NG + 4 * dg : dn0;


  const int cu = (N + 3) / 4, bu = 2 * ((N + 7) / 8), gu = G / 4;
  const Stager<T> stage{src, band, lo, G, sh.groups, grp, h, p0, P, N, cu, bu, gu,
                        lanes_for<T>(kPT / 4), lanes_for<T>(cu), lanes_for<T>(bu), lanes_for<T>(gu)};
  Cells cells{cell_task(g, p, t0, h, sh.H), 0, ntasks, false};
  Span cur = cells.next(K, G, g.exact);
  // Span j goes to buffer j % 2; with bulk copies it is that buffer's (j / 2)-th phase.
  auto issue = [&](const Span& sp, int b) {
    if constexpr (kBulk) stage.issue_bulk(sp, smem + b * lo.buf, &bars[b]);
    else stage.issue(sp, smem + b * lo.buf);
  };
  issue(cur, 0);
  Span nxt = cells.next(K, G, g.exact);
  if (nxt.n > 0) issue(nxt, 1);
  else commit();
  bool folded = false;
  for (int j = 0; cur.n > 0; ++j) {
    const float* bf = smem + (j % 2) * lo.buf;
    const float *dts = bf + lo.dts, *xs = bf + lo.x, *Cs = bf + lo.C, *Bs = bf + lo.B, *bs = bf + lo.band;
    wait_all_but_latest();  // this span's copies (the next span's may still be in flight)
    if constexpr (kBulk) bar_wait(&bars[j % 2], static_cast<unsigned>((j / 2) & 1));
    __syncthreads();
    mark(0);
    ++spans;

    // 1. cum, w and exp(cum_{L−1}) of each cell, one warp per cell: every lane runs the cell's sum
    // (cum_term, then the left-to-right sum of cum_scan, from the cell's first row) and keeps the
    // prefixes of its rows i = lane, lane + 32.
    {
      constexpr int RPL = (G + 31) / 32;  // rows per lane
      const int warp = tid / 32, lane = tid % 32;
      if (warp < cur.n) {  // whole warps
        const int k = warp, base = k * G, L = pick(cur.L, k);
        const bool fold_k = pick(cur.fold, k);
        float c[RPL], run = 0.0f;
#pragma unroll
        for (int q = 0; q < RPL; ++q) c[q] = 0.0f;
        for (int m = 0; m < L; ++m) {
          run = run + cum_term(dts[base + m], Ah);
#pragma unroll
          for (int q = 0; q < RPL; ++q)
            if (m == lane + 32 * q) c[q] = run;
        }
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
          const int i = lane + 32 * q;
          if (i >= L) continue;
          cum[base + i] = c[q];
          if (fold_k) wr[base + i] = row_weight(run, c[q], dts[base + i]);
        }
        if (lane == 0) {
          decay[k] = exp_f(run);
          meta[2 * k] = pick(cur.j0, k);
          meta[2 * k + 1] = L;
        }
      }
    }
    __syncthreads();
    mark(1);

    // 2. The coefficients of every output row's pairs, every thread a few (independent exps in
    // flight); the barrier after the deltas publishes them.
#pragma unroll 4
    for (int e = tid; e < kRows * G; e += T) {
      const int r = e / G, i = e % G, k = r / G, t = r % G;
      if (k >= cur.n || t < meta[2 * k] || t >= meta[2 * k + 1] || i > t) continue;
      const int src_r = k * G + i;
      coef[r * lo.Gc + i] = row_weight(cum[r], cum[src_r], dts[src_r]) * bs[r * G + (t - i)];
    }

    // 3a. The folded cells' deltas, side by side, into the start states' places.
    if (dk < cur.n && pick(cur.fold, dk) && dmine) {
      float acc[TC][TN];
      cell_delta<TC, TN>(meta[2 * dk + 1], wr + dk * G, xs + dk * G * kPT, Bs + dk * G * lo.Nc, lo.Nc, dc, dn0, dn1, acc);
      float* D = Sb + static_cast<std::size_t>(dk) * kPT * lo.Ns;
#pragma unroll
      for (int a = 0; a < TC; ++a) {
        *reinterpret_cast<float4*>(D + (dc + a) * lo.Ns + dn0) = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
        if constexpr (TN == 8)
          *reinterpret_cast<float4*>(D + (dc + a) * lo.Ns + dn1) = make_float4(acc[a][4], acc[a][5], acc[a][6], acc[a][7]);
      }
    }
    __syncthreads();
    mark(2);

    // 3b. The state through the span's cells in order: the cell's start state replaces its delta.
#pragma unroll
    for (int k = 0; k < kMaxCells; ++k) {
      if (k >= cur.n) break;
      if (!cur.fold[k]) {  // the last cell the call touches (exact: left open)
        if (owner) {
          float* Sk = Sb + static_cast<std::size_t>(k) * kPT * lo.Ns;
#pragma unroll
          for (int a = 0; a < SC; ++a)
            *reinterpret_cast<float4*>(Sk + (sc + a) * lo.Ns + sn) = make_float4(S[a][0], S[a][1], S[a][2], S[a][3]);
        }
        break;
      }
      folded = true;
      if (!owner) continue;
      float* Sk = Sb + static_cast<std::size_t>(k) * kPT * lo.Ns;
      const float cell_decay = decay[k];
#pragma unroll
      for (int a = 0; a < SC; ++a) {
        float4* e = reinterpret_cast<float4*>(Sk + (sc + a) * lo.Ns + sn);
        const float4 d = *e;
        *e = make_float4(S[a][0], S[a][1], S[a][2], S[a][3]);
        S[a][0] = fold_element(cell_decay, S[a][0], d.x, bf16);
        S[a][1] = fold_element(cell_decay, S[a][1], d.y, bf16);
        S[a][2] = fold_element(cell_decay, S[a][2], d.z, bf16);
        S[a][3] = fold_element(cell_decay, S[a][3], d.w, bf16);
      }
    }
    __syncthreads();
    mark(3);
    if (wtiming) w0 = clock64();

    // 4. The span's output rows.
    out_lanes<G>(cur, meta, Cs, Sb, xs, coef, cum, lo, N, P, p0, h, HP, Dh, src, y);
    mark(4);
    if (wtiming) wout += clock64() - w0;
    __syncthreads();  // every reader of this buffer, the start states, cum and the coefficients is done
    mark(5);

    cur = nxt;
    nxt = cells.next(K, G, g.exact);
    if (nxt.n > 0) issue(nxt, j % 2);
    else commit();  // an empty group keeps the wait's count
    mark(6);
  }
  if (timing) {  // benchmarks: the first block's cycles per step, summed over its spans
#pragma unroll
    for (int i = 0; i < 7; ++i) probe[i] = steps[i];
    probe[7] = spans;
  }
  if (wtiming && tid / 32 < 16) probe[8 + tid / 32] = wout;
  if (!folded || !owner) return;  // the slot keeps its state
#pragma unroll
  for (int a = 0; a < SC; ++a) {
    const int pp = p0 + sc + a;
    if (pp >= P) break;
    const std::size_t i = sbase + static_cast<std::size_t>(pp) * N + sn;
    if (bf16) {
#pragma unroll
      for (int b = 0; b < 4; ++b) st.state_bf16[i + b] = static_cast<uint16_t>(__float_as_uint(S[a][b]) >> 16);  // bf16-exact
    } else {
      *reinterpret_cast<float4*>(st.state_f32 + i) = make_float4(S[a][0], S[a][1], S[a][2], S[a][3]);
    }
  }
}

int smem_optin() {
  int device = 0, bytes = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  return bytes;
}

}  // namespace

bool span_supported(const SsdShape& sh, const ScanGrid& g) {
  if (sh.N % 4 != 0 || sh.N > 128 || !(g.cell == 16 || g.cell == 32 || g.cell == 64)) return false;
  return static_cast<long>(span_layout(sh.N, g.cell).total * sizeof(float)) <= smem_optin();
}

// One block an SM (its shared memory), so the span walk's time grows with its waves of blocks; the
// walk's smaller blocks share SMs and win from about four waves on (H200, 32 heads × 64, N 128:
// span 437 / 832 µs at 1 / 2 sequences against the walk's 1,388 / 1,424; at 8 sequences 3,168
// against 2,459).
long span_waves(const SsdShape& sh, int active_seqs) {
  static std::atomic<int> sms{0};
  if (sms.load() == 0) {
    int device = 0, n = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    cuda_check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    sms.store(n);
  }
  const long blocks = static_cast<long>(active_seqs) * sh.H * ((sh.P + kPT - 1) / kPT);
  return (blocks + sms.load() - 1) / sms.load();
}

bool span_preferred(const SsdShape& sh, const ScanGrid& g, int active_seqs) {
  return span_waves(sh, active_seqs) <= 3 && span_supported(sh, g);
}

// Whether every row the span walk copies starts 16-byte aligned and is a whole number of 16 bytes
// (the TMA unit's rule): x, B and C rows of the call and of the replay ring, 16 columns of x.
std::atomic<long long*> probe_buffer{nullptr};

void span_probe(long long* device_buffer) { probe_buffer.store(device_buffer); }

bool bulk_ok(const SsdShape& sh, int ld, const float* xbc, const SsdState& st) {
  auto aligned = [](const void* q) { return q == nullptr || (reinterpret_cast<std::uintptr_t>(q) & 15) == 0; };
  return aligned(xbc) && aligned(st.ring_x) && aligned(st.ring_B) && ld % 4 == 0 && sh.P % 4 == 0 && sh.N % 4 == 0;
}

void launch_span(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                 const float* dt, const float* A, const float* D, const SsdState& st, const float* band, float* y,
                 cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  if (!span_supported(sh, g))
    throw Error("CUDA SSD: the span walk needs N a multiple of 4 up to 128 and cells of 16, 32 or 64 rows (N " +
                std::to_string(sh.N) + ", cell " + std::to_string(g.cell) + ")");
  const std::size_t smem = span_layout(sh.N, g.cell).total * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>((sh.P + kPT - 1) / kPT));
  auto run = [&](auto kernel) {
    ensure_smem(kernel, smem, "ssd span smem");
    kernel<<<grid, kThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, band, y, probe_buffer.load());
  };
  // Rows by the TMA unit where every row is 16-byte aligned (the models' layouts), else by cp.async.
  const bool bulk = bulk_ok(sh, ld, xbc, st);
  auto by_cell = [&](auto cell) {
    constexpr int G = decltype(cell)::value;
    if (bulk) run(span_kernel<G, kThreads, true>);
    else run(span_kernel<G, kThreads, false>);
  };
  if (g.cell == 16) by_cell(std::integral_constant<int, 16>{});
  else if (g.cell == 32) by_cell(std::integral_constant<int, 32>{});
  else by_cell(std::integral_constant<int, 64>{});
  check_launch("ssd span");
}

}  // namespace parity::cuda::ssd
