#pragma once
// What the SSD kernels (ssd.cu; the fused scan ssd_band.cu, ssd_walk.cu; the three-phase scan
// ssd_deltas.cu, ssd_chain.cu, ssd_outputs.cu; the one-row decode) share: where a cell lies on a
// call's grid, where its rows live, its cumulative decay, the per-value arithmetic and the scratch
// layouts. Every kernel that needs a cell's cum sums it with cum_scan, so it has the same bits in all.
#include <cuda_bf16.h>

#include "kernels/math.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda::ssd {

using kernels::exp_f;

struct Cell {
  int64_t start, end;
};

// v mod cell, in [0, cell): a mask where the cell is a power of two (every grid the engine runs), the remainder
// otherwise. Index arithmetic only; a 64-bit remainder is a long routine on the GPU (session 48: the table pass,
// 1,100 instructions a warp, took two).
PARITY_HD __forceinline__ int cell_mod(int64_t v, int cell) {
  if ((cell & (cell - 1)) == 0) return static_cast<int>(v & (cell - 1));
  const int64_t r = v % cell;
  return static_cast<int>(r < 0 ? r + cell : r);
}

// Head h's stagger offset: kernels/exact_grid.h's ExactGrid::offset, a rank's heads numbered as in
// the whole mixer. 32-bit arithmetic (heads · cell is far below 2^31; a 64-bit division is a long
// serial routine on the GPU).
PARITY_HD inline int head_offset(const ScanGrid& g, int h, int H) {
  const int all = g.model_heads > 0 ? g.model_heads : H;
  return g.exact && g.stagger ? cell_mod((g.first_head + h) * g.cell / all, g.cell) : 0;
}

// The k-th cell of head h that a call starting at `start` touches.
PARITY_HD inline Cell call_cell(const ScanGrid& g, int h, int H, int64_t start, int k) {
  int64_t cs, ce;
  if (g.exact) {
    const int o = head_offset(g, h, H);
    cs = start < o ? 0 : start - cell_mod(start - o, g.cell);
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

__device__ inline int ring_x_slot(const ScanGrid& g, int h, int H, int64_t pos) {
  return cell_mod(pos - head_offset(g, h, H), g.cell);
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
  __device__ const float* dtp(int h, int64_t s) const {
    if (s >= start) return dt + static_cast<std::size_t>(row0 + (s - start)) * sh.H + h;
    return st.ring_dt + (static_cast<std::size_t>(slot) * sh.H + h) * g.cell + ring_x_slot(g, h, sh.H, s);
  }
  __device__ float dtv(int h, int64_t s) const { return *dtp(h, s); }
  __device__ const float* B(int grp, int64_t s) const {
    if (s >= start) return xbc + static_cast<std::size_t>(row0 + (s - start)) * ld + I + static_cast<std::size_t>(grp) * sh.N;
    return st.ring_B + ((static_cast<std::size_t>(slot) * sh.groups + grp) * g.cell + cell_mod(s, g.cell)) * sh.N;
  }
  __device__ const float* C(int grp, int64_t s) const {
    return xbc + static_cast<std::size_t>(row0 + (s - start)) * ld + I + GN + static_cast<std::size_t>(grp) * sh.N;
  }
};

__device__ inline RowSource source_of(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, int seq,
                                      const float* xbc, int ld, const float* dt, const SsdState& st) {
  RowSource r{xbc, ld, sh.H * sh.P, sh.groups * sh.N, dt, st, sh, g, p.slot[seq], p.row0[seq], p.start[seq]};
  return r;
}

// One cell task (sequence, k-th cell of its call) of one head: the cell, the call's rows in it,
// and whether the call folds it (exact: the call completes it; plain: every cell). Host too, with
// call_cell: tests run it over PassPlan::host_view().
struct CellTask {
  int seq, k;
  Cell c;
  int64_t start, end, first;
  int L;   // source rows c.start .. c.start+L-1 (ring rows first, where the call starts inside)
  int j0;  // the call's first row in the cell; its output rows are j0 .. L-1
  bool live, fold;
};

PARITY_HD inline CellTask cell_task(const ScanGrid& g, const PassSeqs& p, int task, int h, int H) {
  CellTask t;
  t.seq = p.cell_task[2 * task];
  t.k = p.cell_task[2 * task + 1];
  t.start = p.start[t.seq];
  t.end = t.start + p.n[t.seq];
  t.c = call_cell(g, h, H, t.start, t.k);
  t.first = t.c.start > t.start ? t.c.start : t.start;
  t.live = t.first < t.end;
  const int64_t last = t.c.end < t.end ? t.c.end : t.end;
  t.L = t.live ? static_cast<int>(last - t.c.start) : 0;
  t.j0 = static_cast<int>(t.first - t.c.start);
  t.fold = t.live && (g.exact ? t.c.end <= t.end : true);
  return t;
}

// ---- the per-value arithmetic of the scan, one definition for every kernel ------------------
// The prefill phases (deltas, chain, outputs) and the one-row exact decode (ssd_decode.cu) call
// these, so a value has the same operations, hence the same bits, whichever kernel computes it.
// (nvcc runs with --fmad=false: every FMA below is the written fmaf, no other is contracted.)

// cum_i = Σ_{r≤i} dt_r·A: the products dt_r·A rounded, then one left-to-right sum from 0.
__device__ inline float cum_term(float dt, float A) { return dt * A; }
__device__ inline void cum_scan(float* cum, int L) {
  float c = 0.0f;
  for (int i = 0; i < L; ++i) {
    c = c + cum[i];
    cum[i] = c;
  }
}
// Source row i's weight seen from row j of the same cell: exp(cum_j − cum_i)·dt_i. The outputs'
// coefficient is row_weight·dot(C_j, B_i); the fold's w_i is row_weight with j = L−1.
__device__ inline float row_weight(float cum_j, float cum_i, float dt_i) { return exp_f(cum_j - cum_i) * dt_i; }
// dot(C, B) over n ascending, one fmaf chain (16-byte aligned rows when N % 4 == 0).
__device__ inline float cb_dot(const float* C, const float* B, int N) {
  float dot = 0.0f;
  int n = 0;
  if (N % 4 == 0) {
    for (; n + 4 <= N; n += 4) {
      const float4 c = *reinterpret_cast<const float4*>(C + n);
      const float4 b = *reinterpret_cast<const float4*>(B + n);
      dot = fmaf(c.x, b.x, dot);
      dot = fmaf(c.y, b.y, dot);
      dot = fmaf(c.z, b.z, dot);
      dot = fmaf(c.w, b.w, dot);
    }
  }
  for (; n < N; ++n) dot = fmaf(C[n], B[n], dot);
  return dot;
}
// dot(C, S[p]) = (a_0 + a_1) + (a_2 + a_3), a_q = Σ_{n ≡ q mod 4, ascending} C[n]·S[p][n].
// quarter_dot forms the four chains side by side (16-byte aligned rows when N % 4 == 0);
// quarter_sum forms one of them (a thread per chain, combined across lanes): each a_q is the same
// fmaf chain either way, and combine_quarters the one final expression. quarter_sum's row is
// anything indexable as floats (a fp32 row, or a bf16 row widened exactly as it is read).
__device__ inline float combine_quarters(float a0, float a1, float a2, float a3) { return (a0 + a1) + (a2 + a3); }
template <class Row>
__device__ inline float quarter_sum(const float* C, const Row& S, int N, int q) {
  float a = 0.0f;
  for (int n = q; n < N; n += 4) a = fmaf(C[n], S[n], a);
  return a;
}
__device__ inline float quarter_dot(const float* C, const float* S, int N) {
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  int n = 0;
  if (N % 4 == 0) {
    for (; n + 4 <= N; n += 4) {
      const float4 c = *reinterpret_cast<const float4*>(C + n);
      const float4 s = *reinterpret_cast<const float4*>(S + n);
      a0 = fmaf(c.x, s.x, a0);
      a1 = fmaf(c.y, s.y, a1);
      a2 = fmaf(c.z, s.z, a2);
      a3 = fmaf(c.w, s.w, a3);
    }
  } else {
    for (; n + 4 <= N; n += 4) {
      a0 = fmaf(C[n], S[n], a0);
      a1 = fmaf(C[n + 1], S[n + 1], a1);
      a2 = fmaf(C[n + 2], S[n + 2], a2);
      a3 = fmaf(C[n + 3], S[n + 3], a3);
    }
    if (n < N) a0 = fmaf(C[n], S[n], a0);
    if (n + 1 < N) a1 = fmaf(C[n + 1], S[n + 1], a1);
    if (n + 2 < N) a2 = fmaf(C[n + 2], S[n + 2], a2);
  }
  return combine_quarters(a0, a1, a2, a3);
}
// Output row j of a cell: (exp(cum_j)·inter + intra) + D·x_j. row_output_scaled takes exp(cum_j)
// formed beforehand (the pipelined lane walk forms it once a row for the whole block): the same operations.
__device__ inline float row_output_scaled(float exp_cum_j, float inter, float intra, float D, float x) {
  return (exp_cum_j * inter + intra) + D * x;
}
__device__ inline float row_output(float cum_j, float inter, float intra, float D, float x) {
  return row_output_scaled(exp_f(cum_j), inter, intra, D, x);
}
__device__ inline float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ inline float widen_bf16(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
// The fold of one state element: decay·S + delta as one fmaf (delta = Σ_i (w_i·x_i[p])·B_i[n], one
// fmaf chain over i ascending from 0), rounded to bf16 for a bf16 state.
__device__ inline float fold_element(float decay, float s, float delta, bool bf16) {
  const float v = fmaf(decay, s, delta);
  return bf16 ? round_bf16(v) : v;
}

// cum over a cell's rows 0..L-1 (cum_term side by side, cum_scan by one thread): the same bits
// in every kernel that calls this.
__device__ inline void cell_cum(const RowSource& src, int h, int64_t cs, int L, float A, float* dts, float* cum,
                                int nthreads) {
  for (int i = threadIdx.x; i < L; i += nthreads) {
    dts[i] = src.dtv(h, cs + i);
    cum[i] = cum_term(dts[i], A);
  }
  __syncthreads();
  if (threadIdx.x == 0) cum_scan(cum, L);
  __syncthreads();
}

// What a one-head cell walk block knows of its layer and head (the pipelined lane walk, the tensor-core walk):
// shapes, grid, the row source, the head's band, its head, group and first p column.
struct WalkCtx {
  SsdShape sh;
  ScanGrid g;
  RowSource src;
  const float* band;
  int h, grp, p0;
};

// A cell's cum inside one warp (the lane walks and the tensor-core walk): lane i < L holds
// cum_term(dt_i, A) in d; each lane gets the left-to-right sum of rows 0..lane (cum_scan's order, one
// add a row; rows past L add nothing) and *total the whole cell's. The same bits as cell_cum.
template <int G>
__device__ inline float warp_cell_cum(float d, int L, int lane, float* total) {
  float cl = 0.0f;
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const float v = __shfl_sync(0xffffffffu, d, i);
    if (i < L && i <= lane) cl = cl + v;
  }
  *total = __shfl_sync(0xffffffffu, cl, L - 1);
  return cl;
}

// Scratch: states [tasks][H][P][N] (a folded cell's delta, which the chain replaces by the cell's
// start state), then cell_decay [tasks][H] = exp(cum_{L-1}) of every folded cell.
struct Scratch {
  float* states;
  float* cell_decay;
  __device__ float* state(const SsdShape& sh, int task, int h) const {
    return states + (static_cast<std::size_t>(task) * sh.H + h) * sh.P * sh.N;
  }
};

// Whether the outputs read a cell's start state from scratch (the chain wrote it there) or from
// the slot (the call's first cell, when the call does not fold it: the chain leaves the slot as is).
__device__ inline bool start_state_in_scratch(const CellTask& t) { return t.k > 0 || t.fold; }

// The band of C·B dot products (ssd_band.cu): for every row s of the call and d = 0..cell-1,
// cb_dot(C_s, B_{s-d}) at band[(row·groups + grp)·cell + d]. Every pair (t, i ≤ t) of any head's
// cell is in it, whatever the head's stagger.
__host__ __device__ inline std::size_t band_at(int row, int groups, int grp, int cell, int d) {
  return (static_cast<std::size_t>(row) * groups + grp) * cell + d;
}

// Launchers of the phases (one file each).
void launch_deltas(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const SsdState& st, Scratch sc, cudaStream_t s);
void launch_chain(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const SsdState& st, Scratch sc,
                  cudaStream_t s);
void launch_outputs(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                    const float* dt, const float* A, const float* D, const SsdState& st, Scratch sc, float* y,
                    cudaStream_t s);

// Plain mode's chunk scan (ssd_chunk.cu): per chunk, CB (cb: chunk_cb_floats, [task][group][cell][cell]),
// the deltas and decays into sc, launch_chain, then the outputs; every product register-tiled.
std::size_t chunk_cb_floats(const SsdShape& sh, const PassSeqs& p, const ScanGrid& g);
void launch_chunk_scan(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                       const float* dt, const float* A, const float* D, const SsdState& st, Scratch sc, float* cb,
                       float* y, cudaStream_t s);

// The fused scan (ssd_band.cu, ssd_walk.cu): the band, then one walk per (sequence, head, tile of
// tile_p columns of p) that keeps the state on chip. tile_p is 16, 32 or 64 (0: chosen by size).
// rows16: also every scanned row's C and B as the tensor-core walk's bf16 rows (ssd_tc_row16_offset; N 128 and
// cell 16 only), split: with their rests. programmatic (with rows16; ssd_tc.h's SsdTcWay::programmatic): 1 each
// block lets the next launch (the table pass, which waits before it reads the band) be scheduled at its start; 2 the
// band itself is launched programmatically, waiting for the kernel before it first.
void launch_band(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                 const SsdState& st, float* band, cudaStream_t s, uint16_t* rows16 = nullptr, bool split = false,
                 int programmatic = 0);
// The replay ring (ssd_ring.cu): every multi-row exact call's last rows of each head's open cell.
void launch_ring(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                 const SsdState& st, cudaStream_t s);
// The span walk (ssd_span.cu): the walk with K = 64 / G cells per step, 256 threads and the next
// span's inputs prefetched, for batches too small to fill the GPU with the walk's blocks.
bool span_supported(const SsdShape& sh, const ScanGrid& g);
// Whether automatic takes the span walk: supported, and its blocks (one an SM) take at most 3 waves.
bool span_preferred(const SsdShape& sh, const ScanGrid& g, int active_seqs);
// The waves of blocks (one an SM) the span walk takes for this many sequences.
long span_waves(const SsdShape& sh, int active_seqs);
// Benchmarks only: where the span walk's first block writes the clock cycles of its steps (24 values:
// wait, cum and coefficients, deltas, fold, outputs, end barrier, next copies; the span count; each
// warp's own outputs step), or nullptr.
void span_probe(long long* device_buffer);
void launch_span(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                 const float* dt, const float* A, const float* D, const SsdState& st, const float* band, float* y,
                 cudaStream_t s);
// The lane walk (ssd_lanes.cu): the state in registers, a lane per (two columns of p, quarter of n),
// one block per (sequence, head, tile of p); way: SsdPrefill's lanes shapes (232, 264, 464, 316, 332; 0:
// automatic's, 264).
bool lanes_supported(const SsdShape& sh, const ScanGrid& g);
// Whether automatic takes it (the shapes it was measured faster on: N = 128, G = 16, P % 64 == 0).
bool lanes_preferred(const SsdShape& sh, const ScanGrid& g);
// Benchmarks only: where the lane walk's first block writes thread 0's clock cycles summed over its
// cells (6 values: wait for the cell's copies, quarters/cum/coefficients, next copies issued, outputs,
// delta and fold; the cell count), or nullptr; and how many of its blocks an SM holds.
void lanes_probe(long long* device_buffer);
int lanes_resident(int way, const SsdShape& sh);
void launch_lanes(int way, int active_seqs, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                  const float* xbc, int ld, const float* dt, const float* A, const float* D, const SsdState& st,
                  const float* band, float* y, cudaStream_t s);
// The pipelined lane walk (ssd_pipe.cu): the lane walk with one barrier a cell, the coefficients a cell
// ahead, C and B copied by quarter, the quarter sums and the fold in one loop. way: 564 (three blocks an
// SM), 664 (two), 674 (664 with every cell's coefficients formed by a pass before the walk into `table`,
// pipe_table_floats of it, which the walk copies with the cell's rows) or 684 (674 with C and B of every
// row laid out by quarter by a pass before the walk into `qrows`, pipe_quarter_rows_floats of it, so a
// whole cell's are two contiguous copies). pipe_pre: what passes before the walk prepare for a way (0 nothing,
// 1 the table, 2 the table and the quarter rows), −1 for a way that is not a pipelined one. Probe: as
// lanes_probe (wait, next copies issued, next cell's coefficients, quarter sums and fold, exchange and
// outputs; the cell count).
int pipe_pre(int way);
inline bool pipe_way(int way) { return pipe_pre(way) >= 0; }
std::size_t pipe_table_floats(const SsdShape& sh, const PassSeqs& p);
std::size_t pipe_quarter_rows_floats(const SsdShape& sh, const PassSeqs& p);
void pipe_probe(long long* device_buffer);
int pipe_resident(int way);
void launch_pipe(int way, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                 const float* dt, const float* A, const float* D, const SsdState& st, const float* band, float* table,
                 float* qrows, float* y, cudaStream_t s);
void launch_walk(int tile_p, int active_seqs, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p,
                 const float* xbc, int ld, const float* dt, const float* A, const float* D, const SsdState& st,
                 const float* band, float* y, cudaStream_t s);

}  // namespace parity::cuda::ssd
