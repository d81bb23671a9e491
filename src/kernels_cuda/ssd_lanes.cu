// The lane walk: the fused scan's walk for batches that fill the GPU. The walk (ssd_walk.cu) keeps a
// tile's state in shared memory and re-reads it for every group of FMAs, and its four barriers a
// cell, the serial cum on one thread and the synchronous loads of each cell's inputs leave its SMs
// at about 10 % of the fp32 peak from 8 × 2048 on. Here the state lives in registers, split so that
// no value of it ever moves: lane (columns, q) of a block owns S[p][n] for its PP columns p (one or
// two) and the n of quarter q (n ≡ q mod 4), which is exactly what the quarter sum a_q of
// dot(C_t, S[p]) runs over and what the fold of those elements needs. Per cell of at most 16 rows:
//   1. (after the cell's copies landed) C and B rows are rearranged by quarter (C_t[4j + q] at
//      Cq[t][q][j]), every warp runs the left-to-right cum of cum_scan across its lanes (lane i keeps
//      cum_i, by shuffles), and the block forms coef_{t,i} = row_weight(cum_t, cum_i, dt_i)·band[t][t−i],
//      w_i = row_weight(cum_{L−1}, cum_i, dt_i) and exp(cum_{L−1}); one barrier; the next cell's
//      copies are issued (cp.async: they land while this cell computes);
//   2. outputs, four rows at a time: each lane its quarter sums a_q for 4 rows × PP columns (one
//      fmaf chain over its n ascending), exchanged inside the warp so that lane q holds row r0 + q's
//      four quarters: y_t[p] = row_output(cum_t, combine_quarters(a_0..a_3),
//      Σ_{i≤t} coef_{t,i}·x_i[p] (i ascending from 0), D, x_t[p]);
//   3. delta[p][n] = Σ_i (w_i·x_i[p])·B_i[n] (w_i·x_i[p] rounded, one fmaf chain over i ascending
//      from 0) for the lane's elements, 4 values of n at a time, each folded as soon as it is
//      complete: S ← fold_element(exp(cum_{L−1}), S, delta) (rounded to bf16 for a bf16 state).
// Only the outputs' quarters cross lanes (shared memory inside a warp); the state never does, so a
// cell costs two block barriers and no wait on its own inputs. Whole cells at N = 128 run loops of
// compile-time length (run-time bounds checked per value made every group a branch of its own and
// left each load's latency exposed: 26k cycles a cell in session 10's first run). Every value is the
// fp32 sequence of the walk, the span walk and the three-phase kernels (ssd_device.cuh's helpers
// where a value is formed, the same fmaf chains in the same order where it is summed): the bits do
// not depend on which ran. Blocks: one per (sequence, head, PT columns of p), 4·PT/PP threads;
// shapes (SsdPrefill's lanes values) 264 / 464: 64 × 2 at three / two blocks an SM; 232: 32 × 2;
// 332: 32 × 1; 316: 16 × 1. Supported: N a multiple of 4 up to 128, cells of at most 16 rows.
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_cell_walk.cuh"
#include "kernels_cuda/ssd_copy_lanes.cuh"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kG = 16;             // most rows of a cell
constexpr int kNQ = 32;            // most n of a quarter (N ≤ 128)
constexpr int kQS = kNQ + 4;       // a quarter's stride in Cq and Bq: the four quarters start 4 banks apart
constexpr int kRowQ = 4 * kQS;     // one row of Cq or Bq
constexpr int kCoef = kG + 1;      // a row of coef (odd: the four rows a warp reads fall in distinct banks)
constexpr int kProbeSteps = 5;     // the probe's steps (ssd_lanes_probe)

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// PT columns of p per block, PP (1 or 2) of them a lane, a lane per (PP columns, quarter): 4·PT/PP
// threads; a warp covers 8·PP columns.
template <int PT, int PP>
constexpr int kThreadsOf = 4 * PT / PP;

// Shared memory, in floats. Everything but the raw C and B rows has a size known at compile time,
// so its offsets are constants (no registers); the raw rows (N rounded to 4 a row) come last.
struct LaneLayout {
  int Nr;                                    // a raw C or B row (N rounded to 4)
  static constexpr int dts = 0;              // [kG]            inside an x buffer
  static constexpr int band = dts + kG;      // [kG][kG]        band[t][d], inside an x buffer
  static constexpr int x = band + kG * kG;   // [kG][PT]        inside an x buffer
  int xbuf;                                  // one of the two per-cell buffers of dt, band and x
  int Cq, Bq, cum, w, decay, coef, qx, C, B, total;
};
__host__ __device__ inline LaneLayout lane_layout(int N, int PT) {
  LaneLayout l{};
  l.Nr = round_up(N, 4);
  l.xbuf = LaneLayout::x + kG * PT;          // a multiple of 4
  l.Cq = 2 * l.xbuf;                          // [kG][4][kQS] C by quarter
  l.Bq = l.Cq + kG * kRowQ;                   // [kG][4][kQS] B by quarter
  l.cum = l.Bq + kG * kRowQ;                  // [kG]
  l.w = l.cum + kG;                           // [kG]
  l.decay = l.w + kG;                         // [4]: exp(cum_{L−1}) at 0
  l.coef = l.decay + 4;                       // [kG][kCoef]
  l.qx = l.coef + round_up(kG * kCoef, 4);    // [warps][4 rows][4 quarters][8·PP columns]
  l.C = l.qx + 16 * PT;                       // (4·PT/PP/32 warps × 128·PP floats) [kG][Nr] raw C
  l.B = l.C + kG * l.Nr;                      // [kG][Nr] raw B
  l.total = l.B + kG * l.Nr;
  return l;
}

// cp.async helpers (saddr, cp16, cp4, commit, copy4): ssd_copy_lanes.cuh; CellIn, first_cell, next_cell,
// wait_all: ssd_cell_walk.cuh.

struct Block {
  SsdShape sh;
  ScanGrid g;
  RowSource src;
  const float* band;
  LaneLayout lo;
  int h, grp, p0;
  Lanes ln, lx, lg;  // the copies of C and B rows (Nr/4 units), x rows (PT/4), band rows (kG/4)
};

// The copies of cell c's inputs: dt and x of every source row, C and band rows of the output rows,
// B of every source row when the cell folds. x, dt and band go to buffer xb, C and B to the raw rows.
// Each thread's rows and units come from its Lanes (no division per copy).
template <int PT, int PP>
__device__ void issue(const Block& b, const CellIn& c, float* xb, float* Craw, float* Braw) {
  constexpr int kThreads = kThreadsOf<PT, PP>;
  const int tid = threadIdx.x, N = b.sh.N, Nr = b.lo.Nr, G = b.g.cell;
  for (int i = tid; i < c.L; i += kThreads) cp4(xb + b.lo.dts + i, b.src.dtp(b.h, c.cs + i), true);
  if (b.lx.on) {
    const int xend = b.sh.P - b.p0;
    for (int i = b.lx.r0; i < c.L; i += b.lx.rstep)
      copy4(xb + b.lo.x + i * PT + 4 * b.lx.u0, b.src.x(b.h, c.cs + i) + b.p0, 4 * b.lx.u0, xend);
  }
  if (b.ln.on) {
    for (int t = b.ln.r0; t < c.L; t += b.ln.rstep)
      if (t >= c.j0) copy4(Craw + t * Nr + 4 * b.ln.u0, b.src.C(b.grp, c.cs + t), 4 * b.ln.u0, N);
    if (c.fold)
      for (int i = b.ln.r0; i < c.L; i += b.ln.rstep)
        copy4(Braw + i * Nr + 4 * b.ln.u0, b.src.B(b.grp, c.cs + i), 4 * b.ln.u0, N);
  }
  if (b.lg.on)
    for (int t = b.lg.r0; t < c.L; t += b.lg.rstep) {
      const int u = b.lg.u0;
      if (t < c.j0 || 4 * u > t) continue;  // output rows, distances up to t only
      const int row = b.src.row0 + static_cast<int>(c.cs + t - b.src.start);
      copy4(xb + b.lo.band + t * kG + 4 * u, b.band + band_at(row, b.sh.groups, b.grp, G, 0), 4 * u, t + 1);
    }
  commit();
}

// raw[t][4j + q] → qd[t][q][j] for rows lo .. hi-1 (one 16-byte read, four 4-byte writes).
__device__ __forceinline__ void by_quarter(const Lanes& ln, const float* raw, int Nr, float* qd, int lo, int hi) {
  if (!ln.on) return;
  for (int t = ln.r0; t < hi; t += ln.rstep) {
    if (t < lo) continue;
    const float4 v = *reinterpret_cast<const float4*>(raw + t * Nr + 4 * ln.u0);
    float* d = qd + t * kRowQ + ln.u0;
    d[0] = v.x;
    d[kQS] = v.y;
    d[2 * kQS] = v.z;
    d[3 * kQS] = v.w;
  }
}

// PP columns of p from shared memory as floats (a float2 for two: the columns are even).
template <int PP>
__device__ __forceinline__ void load_cols(const float* src, float (&v)[PP]) {
  if constexpr (PP == 2) {
    const float2 t = *reinterpret_cast<const float2*>(src);
    v[0] = t.x;
    v[1] = t.y;
  } else {
    v[0] = src[0];
  }
}
template <int PP>
__device__ __forceinline__ void store_cols(float* dst, const float (&v)[PP]) {
  if constexpr (PP == 2) *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
  else dst[0] = v[0];
}

// Keeps the compiler from hoisting the shared-memory loads of later groups of n above this point:
// it would, for as many groups as the loops have, and then spill (two columns a lane: 60 bytes at
// 168 registers without it, 4 with it every second group; one column: 200+ at 128 registers, about 50).
// kTight: the shape's registers are capped at 168 or fewer; 464 (up to 255) hoists freely and
// still does not spill (212 registers).
template <bool kTight>
__device__ __forceinline__ void hoist_fence() {
  if constexpr (kTight) asm volatile("" ::: "memory");
}

// Blocks an SM: two columns a lane, 12 warps (168 registers a thread); one column a lane, 16 warps
// (128). kProbe: the benchmarks' instance that times its steps (its
// clocks take registers the others keep).
template <int PT, int PP>
constexpr int kMinBlocks = (PP == 2 ? 384 : 512) / kThreadsOf<PT, PP>;

// MB: the blocks an SM must hold (kMinBlocks, or fewer to give each thread more registers).
template <int PT, int PP, int MB, bool kProbe>
__global__ void __launch_bounds__(kThreadsOf<PT, PP>, MB)
    lanes_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, const float* A,
                 const float* Dskip, SsdState st, const float* band, float* y, long long* probe) {
  constexpr int kThreads = kThreadsOf<PT, PP>, kWc = 8 * PP;  // threads; columns of a warp
  constexpr bool kTight = kThreads * MB > 256;                 // at most 168 registers a thread
  const int seq = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t start = p.start[seq];
  const int t0 = p.task0[seq], K = p.task0[seq + 1] - t0;
  if (K <= 0 || uses_ssu(g, start, p.n[seq])) return;
  const int P = sh.P, N = sh.N, nq = N / 4;
  const LaneLayout lay = lane_layout(N, PT);
  const Block b{sh, g, source_of(sh, g, p, seq, xbc, ld, dt, st), band, lay, h, h / sh.heads_per_group(),
                static_cast<int>(blockIdx.z) * PT, lanes_for<kThreads>(lay.Nr / 4), lanes_for<kThreads>(PT / 4),
                lanes_for<kThreads>(kG / 4)};
  const LaneLayout& lo = b.lo;
  const bool bf16 = st.state_f32 == nullptr;
  const float Ah = A[h], Dh = Dskip[h];
  const int64_t call_end = start + p.n[seq];

  extern __shared__ __align__(16) float smem[];
  float *Craw = smem + lo.C, *Braw = smem + lo.B, *Cq = smem + lo.Cq, *Bq = smem + lo.Bq;
  float *cum = smem + lo.cum, *wts = smem + lo.w, *coef = smem + lo.coef, *qx = smem + lo.qx + warp * 16 * kWc;

  // This lane's columns (block-local pl .. pl+PP-1; warp-local wc ..) and quarter.
  const int q = lane & 3, wc = PP * (lane >> 2), pl = kWc * warp + wc;
  const std::size_t sbase = (static_cast<std::size_t>(b.src.slot) * sh.H + h) * P * N;

  CellProbe<kProbe, kProbeSteps> probed(probe, tid);  // benchmarks only
  auto mark = [&](int i) { probed.mark(i); };

  CellIn c = first_cell(cell_task(g, p, t0, h, sh.H));
  if (!c.live) return;
  issue<PT, PP>(b, c, smem, Craw, Braw);

  // The state: S[a][j] = state[p0 + pl + a][4j + q] (zeros for columns past P).
  float S[PP][kNQ];
#pragma unroll
  for (int a = 0; a < PP; ++a) {
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

  bool folded = false;
  for (int k = 0; k < K; ++k) {
    const float* xb = smem + (k % 2) * lo.xbuf;
    const float *dts = xb + lo.dts, *bnd = xb + lo.band, *x = xb + lo.x;
    const int L = c.L, j0 = c.j0;
    wait_all();
    __syncthreads();  // the cell's copies landed; every reader of the previous cell is done
    mark(0);
    probed.cell();

    // 1. C and B by quarter; cum (every warp: lane i keeps cum_i, the left-to-right sum of cum_scan);
    //    the coefficients, w and the decay.
    by_quarter(b.ln, Craw, lo.Nr, Cq, j0, L);
    if (c.fold) by_quarter(b.ln, Braw, lo.Nr, Bq, 0, L);
    const float d = lane < L ? cum_term(dts[lane], Ah) : 0.0f;
    float total;
    const float cl = warp_cell_cum<kG>(d, L, lane, &total);
#pragma unroll
    for (int e0 = 0; e0 < kG * kG; e0 += kThreads) {  // kThreads divides kG·kG
      const int e = e0 + tid, t = e / kG, i = e % kG;
      const float ct = __shfl_sync(0xffffffffu, cl, t % 32), ci = __shfl_sync(0xffffffffu, cl, i);
      if (t >= j0 && t < L && i <= t) coef[t * kCoef + i] = row_weight(ct, ci, dts[i]) * bnd[t * kG + (t - i)];
    }
    if (warp == 0 && lane < L) {
      cum[lane] = cl;
      wts[lane] = row_weight(total, cl, dts[lane]);
    }
    if (tid == 0) smem[lo.decay] = exp_f(total);
    __syncthreads();
    mark(1);

    // The next cell's copies (into the other x buffer and the raw rows, both free now).
    const bool more = c.fold && k + 1 < K;
    CellIn nxt = c;
    if (more) {
      nxt = next_cell(c, call_end, g.cell, g.exact);
      if (nxt.live) issue<PT, PP>(b, nxt, smem + ((k + 1) % 2) * lo.xbuf, Craw, Braw);
    }
    mark(2);

    // 2. Outputs, four rows at a time: r0 + r for r = 0..3, lane q finishing row r0 + q. kN: N is
    //    kNQ·4 (the models' 128), so the loops over n have no run-time bound and the compiler can
    //    schedule the loads ahead of the FMAs (a bound checked per value made every group of n a
    //    branch of its own and left each load's latency exposed: 10k cycles a cell at 1.3k FMAs).
    auto outputs = [&](auto n_full) {
      constexpr bool kN = decltype(n_full)::value;
      for (int r0 = j0 / 4 * 4; r0 < L; r0 += 4) {
        float a4[4][PP];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int a = 0; a < PP; ++a) a4[r][a] = 0.0f;
        const float* crow = Cq + r0 * kRowQ + q * kQS;
#pragma unroll
        for (int j4 = 0; j4 < kNQ; j4 += 4) {
          if (kN || j4 < nq) {
            float4 cv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) cv[r] = *reinterpret_cast<const float4*>(crow + r * kRowQ + j4);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const float cr[4] = {cv[r].x, cv[r].y, cv[r].z, cv[r].w};
#pragma unroll
              for (int u = 0; u < 4; ++u)
                if (kN || j4 + u < nq) {
#pragma unroll
                  for (int a = 0; a < PP; ++a) a4[r][a] = fmaf(cr[u], S[a][j4 + u], a4[r][a]);
                }
            }
          }
          if (j4 % 8 == 4) hoist_fence<kTight>();  // loads may run one group ahead, not more
        }
        // Exchange: qx[r][q][wc + a] = this lane's a_q of row r0 + r, column wc + a.
#pragma unroll
        for (int r = 0; r < 4; ++r) store_cols<PP>(qx + (r * 4 + q) * kWc + wc, a4[r]);
        // The intra-cell sum of row t = r0 + q: i ascending from 0 to t, every lane of the warp
        // stepping through the same i (up to the group's last row) so the loads run ahead.
        const int t = r0 + q, iend = r0 + 4 < L ? r0 + 4 : L;
        float in[PP];
#pragma unroll
        for (int a = 0; a < PP; ++a) in[a] = 0.0f;
        const float* crow_t = coef + t * kCoef;
#pragma unroll 4
        for (int i = 0; i < iend; ++i) {
          const float cf = crow_t[i];
          float xv[PP];
          load_cols<PP>(x + i * PT + pl, xv);
#pragma unroll
          for (int a = 0; a < PP; ++a) in[a] = i <= t ? fmaf(cf, xv[a], in[a]) : in[a];
        }
        __syncwarp();
        if (t >= j0 && t < L) {
          float aq[4][PP], xt[PP];
#pragma unroll
          for (int qq = 0; qq < 4; ++qq) load_cols<PP>(qx + (q * 4 + qq) * kWc + wc, aq[qq]);
          load_cols<PP>(x + t * PT + pl, xt);
          const int row = b.src.row0 + static_cast<int>(c.cs + t - b.src.start);
          float* yr = y + static_cast<std::size_t>(row) * sh.H * P + static_cast<std::size_t>(h) * P + b.p0 + pl;
          const float cumt = cum[t];
#pragma unroll
          for (int a = 0; a < PP; ++a)
            if (b.p0 + pl + a < P)
              yr[a] = row_output(cumt, combine_quarters(aq[0][a], aq[1][a], aq[2][a], aq[3][a]), in[a], Dh, xt[a]);
        }
        __syncwarp();  // the exchange is read before the next rows overwrite it
      }
    };
    if (nq == kNQ) outputs(std::true_type{});
    else outputs(std::false_type{});
    mark(3);

    // 3. The delta and the fold, 4 values of n (one float4 of Bq) × the lane's columns at a time.
    //    kF: a whole cell (L = kG) and N = 4·kNQ: no run-time bound in the loops (as the outputs).
    auto delta_fold = [&](auto full) {
      constexpr bool kF = decltype(full)::value;
      float xw[kG][PP];
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        if (kF || i < L) {
          float xv[PP];
          load_cols<PP>(x + i * PT + pl, xv);
          const float wi = wts[i];
#pragma unroll
          for (int a = 0; a < PP; ++a) xw[i][a] = wi * xv[a];
        } else {
#pragma unroll
          for (int a = 0; a < PP; ++a) xw[i][a] = 0.0f;  // never read
        }
      }
      const float decay = smem[lo.decay];
      const float* bcol = Bq + q * kQS;
#pragma unroll
      for (int j4 = 0; j4 < kNQ; j4 += 4) {
        if (kF || j4 < nq) {
          float acc[PP][4];
#pragma unroll
          for (int a = 0; a < PP; ++a)
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[a][u] = 0.0f;
#pragma unroll
          for (int i = 0; i < kG; ++i) {
            if (kF || i < L) {
              const float4 bv = *reinterpret_cast<const float4*>(bcol + i * kRowQ + j4);
              const float bb[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
              for (int a = 0; a < PP; ++a)
#pragma unroll
                for (int u = 0; u < 4; ++u) acc[a][u] = fmaf(xw[i][a], bb[u], acc[a][u]);
            }
          }
#pragma unroll
          for (int a = 0; a < PP; ++a)
#pragma unroll
            for (int u = 0; u < 4; ++u)
              if (kF || j4 + u < nq) S[a][j4 + u] = fold_element(decay, S[a][j4 + u], acc[a][u], bf16);
        }
        if (j4 % 8 == 4) hoist_fence<kTight>();
      }
    };
    if (c.fold) {
      if (L == kG && nq == kNQ) delta_fold(std::true_type{});
      else delta_fold(std::false_type{});
      folded = true;
    }
    mark(4);
    if (!more || !nxt.live) break;  // a cell the call leaves open (exact) is the last it touches
    c = nxt;
  }
  probed.write(probe);
  if (!folded) return;  // the slot keeps its state
#pragma unroll
  for (int a = 0; a < PP; ++a) {
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

int smem_optin() {
  int device = 0, bytes = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  return bytes;
}

std::atomic<long long*> probe_buffer{nullptr};

template <int PT, int PP, int MB>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s) {
  const std::size_t smem = static_cast<std::size_t>(lane_layout(sh.N, PT).total) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H), static_cast<unsigned>((sh.P + PT - 1) / PT));
  long long* probe = probe_buffer.load();
  auto run = [&](auto kernel) {
    ensure_smem(kernel, smem, "ssd lanes smem");
    kernel<<<grid, kThreadsOf<PT, PP>, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, band, y, probe);
  };
  if (probe != nullptr) run(lanes_kernel<PT, PP, MB, true>);
  else run(lanes_kernel<PT, PP, MB, false>);
  check_launch("ssd lanes");
}

// The shapes (SsdPrefill's lanes values): 264 = 64 columns a block, two a lane, three blocks an SM
// (168 registers); 464 = the same, two blocks an SM (up to 255); 232 = 32 columns, two a lane; 332 =
// 32 columns, one a lane; 316 = 16 columns, one a lane.
template <int V>
using I = std::integral_constant<int, V>;

template <class F>
void by_way(int way, F f) {
  switch (way) {
    case 264: f(I<64>{}, I<2>{}, I<kMinBlocks<64, 2>>{}); break;
    case 464: f(I<64>{}, I<2>{}, I<2>{}); break;
    case 232: f(I<32>{}, I<2>{}, I<kMinBlocks<32, 2>>{}); break;
    case 332: f(I<32>{}, I<1>{}, I<kMinBlocks<32, 1>>{}); break;
    case 316: f(I<16>{}, I<1>{}, I<kMinBlocks<16, 1>>{}); break;
    default: throw Error("CUDA SSD: no lane walk of shape " + std::to_string(way));
  }
}

}  // namespace

void lanes_probe(long long* device_buffer) { probe_buffer.store(device_buffer); }

int lanes_resident(int way, const SsdShape& sh) {
  int per_sm = 0;
  by_way(way, [&](auto pt, auto pp, auto mb) {
    constexpr int PT = decltype(pt)::value, PP = decltype(pp)::value, MB = decltype(mb)::value;
    const std::size_t smem = static_cast<std::size_t>(lane_layout(sh.N, PT).total) * sizeof(float);
    ensure_smem(lanes_kernel<PT, PP, MB, false>, smem, "ssd lanes smem");
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, lanes_kernel<PT, PP, MB, false>, kThreadsOf<PT, PP>, smem),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  });
  return per_sm;
}

// Automatic takes the lane walk only where it was measured: N = 128, cells of 16 rows (the CUDA
// default grid), whole blocks of 64 columns of p. Other shapes it runs when named (the tests do).
bool lanes_preferred(const SsdShape& sh, const ScanGrid& g) {
  return sh.N == 128 && g.cell == 16 && sh.P % 64 == 0 && lanes_supported(sh, g);
}

bool lanes_supported(const SsdShape& sh, const ScanGrid& g) {
  return sh.N % 4 == 0 && sh.N > 0 && sh.N <= 4 * kNQ && g.cell >= 1 && g.cell <= kG &&
         static_cast<long>(lane_layout(sh.N, 64).total) * static_cast<long>(sizeof(float)) <= smem_optin();
}

// What automatic runs: 264 (64 columns a block, two a lane, three blocks an SM), the fastest shape
// measured (H200, 32 heads × 64, N 128, G 16, session 10's second run, device µs at 1 / 4 / 8 / 32
// sequences: 264 1,063 / 1,092 / 1,302 / 4,776; 232 1,381 / 1,422 / 1,637 / 6,467; 332 slower in the
// probe at 8 and 32; 464 not timed on its own). The others stay selectable by name.
int lanes_way(const SsdShape&, int) { return 264; }

void launch_lanes(int way, int active_seqs, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                  const float* xbc, int ld, const float* dt, const float* A, const float* D, const SsdState& st,
                  const float* band, float* y, cudaStream_t s) {
  if (p.num_cell_tasks <= 0) return;
  if (!lanes_supported(sh, g))
    throw Error("CUDA SSD: the lane walk needs N a multiple of 4 up to 128 and cells of at most 16 rows (N " +
                std::to_string(sh.N) + ", cell " + std::to_string(g.cell) + ")");
  by_way(way == 0 ? lanes_way(sh, active_seqs) : way, [&](auto pt, auto pp, auto mb) {
    launch<decltype(pt)::value, decltype(pp)::value, decltype(mb)::value>(sh, g, p, xbc, ld, dt, A, D, st, band, y, s);
  });
}

}  // namespace parity::cuda::ssd
