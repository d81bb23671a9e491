// Exact mode's one-row decode, every such sequence of a pass in one launch over (sequence, p-tile,
// head). Row t of head h sits at index j of its cell (rows 0..j-1 in the replay ring, row j in
// this call); with the cell's start state S (the slot: a one-row call folds nothing before it):
//   y_t[p] = row_output(cum_j, dot(C_t, S[p]), Σ_{i≤j} coef_i · x_i[p], D, x_t[p])
//   coef_i = row_weight(cum_j, cum_i, dt_i) · cb_dot(C_t, B_i)
// and, when t is the cell's last row (j = L−1; heads are staggered, so in one step only some heads
// fold), the fold S ← fold_element(exp(cum_j), S, Σ_i (w_i · x_i[p]) · B_i[n]) with w_i the same
// row_weight. Every value is the same sequence of operations as in the prefill phases
// (ssd_outputs.cu for y, ssd_deltas.cu + ssd_chain.cu for the fold; the shared pieces are the
// functions of ssd_device.cuh), so a row decoded here has the bits a prefill gives it.
// Row t also goes into the replay ring (x, dt; B by the group's first head).
//
// Schedule of a block. The replay rows (what the serial part needs) are requested first, the
// state tile right after them in a second group: the cum sum, the coefficient dots, the row's
// intra-cell sum run while the state is still in flight, and after it arrives only the dots
// C·S (and, for a folding head, the fold) remain. Only the state is large; everything that does
// not need it is done before it is waited for.
//
// Launch order: blocks start roughly in index order, so heads are numbered from the ones that fold
// at this row (the most work: the fold's delta and a state write) through those late in their
// cells (more rows to replay) to the lightest: the last blocks to start are short ones and the
// step does not end on a folding block (heavy_first_head; launch order only, no bits depend on it).
#include <atomic>
#include <map>
#include <mutex>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kStageRows = 32;  // replay rows staged at a time (a whole cell for G ≤ 32)

struct DecodeLayout {
  int R, XP;                                                     // rows per stage; row stride of the x stage
  std::size_t S, B, x, C, dts, cum, wf, coef, inter, dacc, total;  // floats
};
// overlap: decode_kernel<true>'s schedule (no `inter`: its outputs are written as the dots come).
__host__ __device__ inline DecodeLayout decode_layout(const SsdShape& sh, int cell, int tp, bool bf16, bool overlap) {
  DecodeLayout l{};
  l.R = cell < kStageRows ? cell : kStageRows;
  l.XP = (tp + 3) / 4 * 4;
  Carve c;
  l.S = c.take(tile_floats(tp, sh.N, bf16));
  l.B = c.take(static_cast<std::size_t>(l.R) * padded_row(sh.N));
  l.x = c.take(static_cast<std::size_t>(l.R) * l.XP);
  l.C = c.take(sh.N);
  l.dts = c.take(cell);
  l.cum = c.take(cell);
  l.wf = c.take(l.R);
  l.coef = c.take(l.R);
  l.inter = c.take(overlap ? 0 : tp);
  // A cell longer than one stage: the fold's partial sums between stages (each element's chain
  // continues from the value kept here, so it is still one chain).
  l.dacc = c.take(cell > l.R ? static_cast<std::size_t>(tp) * sh.N : 0);
  l.total = c.at;
  return l;
}

// Asks L2 for a head's x ring rows (cell rows of P floats, contiguous; a hint: skipped unless
// 16-byte aligned and sized).
__device__ inline void prefetch_ring_l2(const float* rows, int floats) {
  const unsigned bytes = static_cast<unsigned>(floats) * 4u;
  if (bytes == 0 || bytes % 16 != 0 || !aligned16(rows)) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(rows), "r"(bytes) : "memory");
}

// The fold's delta over one stage's rows for the four elements (r, n..n+3) of the tile: each
// element's chain Σ_i (w_i · x_i[p]) · B_i[n] continued over the stage's rows in ascending order
// (ssd_deltas.cu's operations: xw = w_i · x_i[p], then fmaf(xw, B_i[n], acc)).
__device__ inline void delta4(float a[4], const float* Bs, int Np, const float* xs, int XP, const float* wf, int rc,
                              int r, int n) {
  for (int ii = 0; ii < rc; ++ii) {
    const float xw = wf[ii] * xs[ii * XP + r];
    const float4 b = *reinterpret_cast<const float4*>(Bs + ii * Np + n);
    a[0] = fmaf(xw, b.x, a[0]);
    a[1] = fmaf(xw, b.y, a[1]);
    a[2] = fmaf(xw, b.z, a[2]);
    a[3] = fmaf(xw, b.w, a[3]);
  }
}

// Grid: x = sequence · tiles + p-tile, y = launch slot of the head (heavy_first_head). At most 64
// registers (8 blocks of 128 threads an SM; unbounded, ptxas took 80, which allows 6): at the
// default tile shared memory allows 7 fp32 or 10 bf16 blocks an SM.
//
// kOverlap (session 10, measured on the H200 with a fp32 state: batch 64 43.5 -> 41.5 us, 256 148 -> 144;
// with a bf16 state the same schedule was slower, 30.7 -> 32.5 and 105 -> 110, so bf16 keeps the
// schedule before it): the state tile in two copy groups, the first 32 rows' dots and outputs done while
// the rest arrives; the outputs written by the lanes that finish the dots, each keeping its rows' intra
// sums (no exchange, no last barrier); the cum by every thread in registers; row t into the ring after
// the first wait, from the staged rows. Without it: one state group, the cum scanned by thread 0, the
// intra sums by thread p, the outputs after a barrier, the ring written from global memory before the
// wait. The same operations on the same values either way (the bits do not depend on it).
template <bool kOverlap>
__global__ void __launch_bounds__(kStepThreads, 8) decode_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                              int ld, const float* dt, const float* A,
                                                              const float* Dskip, SsdState st, int TP, int tiles,
                                                              int ahead, float* y) {
  const int seq = static_cast<int>(blockIdx.x) / tiles, z = static_cast<int>(blockIdx.x) - seq * tiles;
  const int tid = threadIdx.x;
  // The sequence's metadata in one round trip, then the test.
  const int n_rows = p.n[seq], slot = p.slot[seq], row0 = p.row0[seq];
  const int64_t start = p.start[seq];
  if (!uses_decode_row(g, n_rows)) return;
  const int H = sh.H, P = sh.P, N = sh.N, cell = g.cell;
  const int tmod = static_cast<int>(start % cell);  // the block's one 64-bit division (row_in_cell)
  const int h = heavy_first_head(g, H, tmod, blockIdx.y);
  const Tile t = tile_of(sh, slot, h, TP, z);
  const int grp = h / sh.heads_per_group(), Np = t.Np, tp = t.tp;
  const bool bf16 = st.state_f32 == nullptr;
  const DecodeLayout lo = decode_layout(sh, cell, TP, bf16, kOverlap);
  const RowInCell ric = row_in_cell(g, h, H, start, tmod);
  const int j = ric.j;         // the row's index in its cell
  const int rows = j + 1;      // source rows 0..j
  const bool fold = ric.fold;  // the row completes the cell

  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float *S = smem + lo.S, *Bs = smem + lo.B, *xs = smem + lo.x, *Cs = smem + lo.C;
  float *dts = smem + lo.dts, *cum = smem + lo.cum, *wf = smem + lo.wf, *coef = smem + lo.coef;
  float *inter = smem + lo.inter, *dacc = smem + lo.dacc;
  uint16_t* raw = reinterpret_cast<uint16_t*>(smem + lo.S);
  const int R = lo.R, XP = lo.XP;

  // Where source row i (0..j) of the cell lives: row j is this call's, rows before it are in the
  // replay ring, in consecutive slots (mod cell) from the cell's first row's.
  const float* cur = xbc + static_cast<std::size_t>(row0) * ld;
  const int I = H * P;
  const std::size_t xbase = (static_cast<std::size_t>(slot) * H + h) * cell;           // ring_x / ring_dt rows
  const std::size_t bbase = (static_cast<std::size_t>(slot) * sh.groups + grp) * cell;  // ring_B rows
  const int xs0 = ric.xs0, bs0 = tmod - j < 0 ? tmod - j + cell : tmod - j;  // slots of the cell's first row
  auto wrap = [cell](int s) { return s >= cell ? s - cell : s; };
  auto x_row = [&](int i) -> const float* {
    return i == j ? cur + static_cast<std::size_t>(h) * P : st.ring_x + (xbase + wrap(xs0 + i)) * P;
  };
  auto B_row = [&](int i) -> const float* {
    return i == j ? cur + I + static_cast<std::size_t>(grp) * N : st.ring_B + (bbase + wrap(bs0 + i)) * N;
  };
  auto dt_of = [&](int i) -> const float* {
    return i == j ? dt + static_cast<std::size_t>(row0) * H + h : st.ring_dt + xbase + wrap(xs0 + i);
  };
  auto stage = [&](int i0, int rc) {
    stage_rows(Bs, Np, rc, N, [&](int i) { return B_row(i0 + i); });
    stage_rows(xs, XP, rc, tp, [&](int i) { return x_row(i0 + i) + t.p0; });
  };

  const float Ah = A[h], Dh = Dskip[h];  // in flight with the copies

  // Group 1: dt of rows 0..j, C_t, the first stage of rows. Groups 2 and 3: the state tile's first
  // 32 rows and the rest (empty for a tile of at most 32): the dots of the first 32 rows, one pass
  // of tile_dots, run while the rest is still arriving.
  for (int i = tid; i < rows; i += kStepThreads) cp_async4(dts + i, dt_of(i));
  stage_vec(Cs, cur + I + static_cast<std::size_t>(sh.groups) * N + static_cast<std::size_t>(grp) * N, N);
  stage(0, rows < R ? rows : R);
  cp_async_commit();
  const int head_rows = !kOverlap || tp < 32 ? tp : 32;
  Tile t1 = t, t2 = t;  // rows [0, head_rows) and [head_rows, tp) of the tile
  t1.tp = head_rows;
  t2.p0 += head_rows;
  t2.tp -= head_rows;
  t2.base += static_cast<std::size_t>(head_rows) * N;
  float* S2 = S + head_rows * t.Np;
  uint16_t* raw2 = raw + head_rows * t.Nb;
  stage_state(st, t1, S, raw);
  cp_async_commit();
  if constexpr (kOverlap) {
    stage_state(st, t2, S2, raw2);
    cp_async_commit();
  }

  // The state tile (and, once per head, the x ring) of the block `ahead` launch slots later: the
  // same sequence and p-tile, so its head is known here. The step's bytes in flight are otherwise
  // bounded by the tiles resident blocks hold in shared memory (4 fp32 or 7 bf16 whole-head tiles an
  // SM); a later block then finds its state in L2.
  if (ahead > 0 && tid == 0 && static_cast<int>(blockIdx.y) + ahead < H) {
    const int hn = heavy_first_head(g, H, tmod, static_cast<int>(blockIdx.y) + ahead);
    prefetch_state_l2(st, tile_of(sh, slot, hn, TP, z));
    if (z == 0) prefetch_ring_l2(st.ring_x + (static_cast<std::size_t>(slot) * H + hn) * cell * P, cell * P);
  }

  // Row t into the replay ring. No block of this launch reads these slots: the rows replayed here
  // are the ones before t in t's cell, which sit in other slots of the x/dt ring (one per cell row)
  // and of the B ring (position mod cell). kOverlap writes it after the wait, from the first stage
  // where row t is there (j < R); else from this call's rows in global memory.
  auto ring_row_t = [&](bool staged) {
    const std::size_t xb = xbase + wrap(xs0 + j);
    const float* xt = staged && j < R ? xs + j * XP : cur + static_cast<std::size_t>(h) * P + t.p0;
    for (int r = tid; r < tp; r += kStepThreads) st.ring_x[xb * P + t.p0 + r] = xt[r];
    if (z == 0) {
      if (tid == 0) st.ring_dt[xb] = staged ? dts[j] : *dt_of(j);
      if (h % sh.heads_per_group() == 0) {
        const std::size_t bb = bbase + wrap(bs0 + j);
        const float* Bt = staged && j < R ? Bs + j * Np : B_row(j);
        for (int n = tid; n < N; n += kStepThreads) st.ring_B[bb * N + n] = Bt[n];
      }
    }
  };
  if constexpr (!kOverlap) ring_row_t(false);
  cp_async_wait<kOverlap ? 2 : 1>();  // group 1
  __syncthreads();
  if constexpr (kOverlap) ring_row_t(true);

  float cj = 0.0f;
  if constexpr (kOverlap) {
    // cum: every thread runs the one left-to-right sum itself (cum_term, then c = c + term from 0:
    // cum_scan's operations, so the same bits), thread i % 128 keeping cum_i.
    for (int i = 0; i < rows; ++i) {
      cj = cj + cum_term(dts[i], Ah);
      if ((i & (kStepThreads - 1)) == tid) cum[i] = cj;
    }
    __syncthreads();
  } else {
    for (int i = tid; i < rows; i += kStepThreads) cum[i] = cum_term(dts[i], Ah);
    __syncthreads();
    if (tid == 0) cum_scan(cum, rows);
    __syncthreads();
    cj = cum[j];
  }

  // Stages of source rows: the coefficients, the intra-cell sums, and, for a folding head in a cell
  // longer than a stage, the fold's partial sums of every stage but the last. The intra-cell sum of
  // row p is formed by the thread that will output row p: tile_dots gives row p = 32m + tid/4 to
  // thread tid = 4·(p mod 32) (its quarter 0), so thread tid % 4 == 0 keeps the sums of rows
  // tid/4 + 32m, m < 4 (tp ≤ 128), and writes those rows' outputs as their dots come.
  float intra[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const bool outputs = (tid & 3) == 0;
  int i0 = 0;
  for (;;) {
    const int rc = rows - i0 < R ? rows - i0 : R;
    for (int ii = tid; ii < rc; ii += kStepThreads) {
      const float w = row_weight(cj, cum[i0 + ii], dts[i0 + ii]);
      wf[ii] = w;
      coef[ii] = w * cb_dot(Cs, Bs + ii * Np, N);
    }
    __syncthreads();
    if constexpr (kOverlap) {
      if (outputs) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int r = 32 * m + (tid >> 2);
          if (r < tp)
            for (int ii = 0; ii < rc; ++ii) intra[m] = fmaf(coef[ii], xs[ii * XP + r], intra[m]);
        }
      }
    } else if (tid < tp) {
      for (int ii = 0; ii < rc; ++ii) intra[0] = fmaf(coef[ii], xs[ii * XP + tid], intra[0]);
    }
    if (i0 + R >= rows) break;  // the last stage stays on chip for the fold
    if (fold) {
      for (Walk w(N / 4); w.r < tp; w.next()) {
        const int e = w.r * N + 4 * w.c;
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (i0 > 0)
          for (int k = 0; k < 4; ++k) a[k] = dacc[e + k];
        delta4(a, Bs, Np, xs, XP, wf, rc, w.r, 4 * w.c);
        for (int k = 0; k < 4; ++k) dacc[e + k] = a[k];
      }
    }
    __syncthreads();  // the stage is consumed
    i0 += R;
    stage(i0, rows - i0 < R ? rows - i0 : R);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }

  // The outputs, a part of the tile as it arrives: y = row_output(cum_j, dot, intra, D, x_t), x_t
  // from row j of the last stage.
  float* yrow = y + static_cast<std::size_t>(row0) * I + static_cast<std::size_t>(h) * P + t.p0;
  const float* xt = xs + (j - i0) * XP;
  if constexpr (kOverlap) {
    auto out = [&](int r, float dot) {
      const int m = r >> 5;
      const float a = m == 0 ? intra[0] : m == 1 ? intra[1] : m == 2 ? intra[2] : intra[3];
      yrow[r] = row_output(cj, dot, a, Dh, xt[r]);
    };
    cp_async_wait<1>();  // the tile's first 32 rows
    __syncthreads();
    tile_dots(Cs, t1, S, raw, bf16, out);
    cp_async_wait<0>();  // the rest
    __syncthreads();
    if (t2.tp > 0) tile_dots(Cs, t2, S2, raw2, bf16, [&](int r, float dot) { out(head_rows + r, dot); });
  } else {
    cp_async_wait<0>();  // the state tile
    __syncthreads();
    tile_dots(Cs, t, S, raw, bf16, [&](int r, float dot) { inter[r] = dot; });
  }
  if (fold) {
    const float decay = exp_f(cj);  // ssd_deltas.cu's cell_decay: exp(cum_{L-1})
    const int rc = rows - i0;
    for (Walk w(N / 4); w.r < tp; w.next()) {
      const int n = 4 * w.c, e = w.r * N + n;
      float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (i0 > 0)
        for (int k = 0; k < 4; ++k) a[k] = dacc[e + k];
      delta4(a, Bs, Np, xs, XP, wf, rc, w.r, n);
      const float4 s = tile_load4(t, S, raw, bf16, w.r, n);
      const float v[4] = {fold_element(decay, s.x, a[0], bf16), fold_element(decay, s.y, a[1], bf16),
                          fold_element(decay, s.z, a[2], bf16), fold_element(decay, s.w, a[3], bf16)};
      store4(st, t, e, v);
    }
  }
  if constexpr (!kOverlap) {
    __syncthreads();  // inter
    if (tid < tp) yrow[tid] = row_output(cj, inter[tid], intra[0], Dh, xt[tid]);
  }
}

std::atomic<int> forced_ahead{0};

// Blocks of decode_kernel<kOverlap> with `smem` bytes the whole device holds at once (asked once per
// device and size).
template <bool kOverlap>
int resident_blocks(std::size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<int, std::size_t>, int> known;
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find({device, smem});
  if (it != known.end()) return it->second;
  int per_sm = 0;
  outside_capture(
      [&] {
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel<kOverlap>, kStepThreads, smem);
      },
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return known[{device, smem}] = per_sm * sm_count();
}

template <bool kOverlap>
void launch(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, int tp, float* y, cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  const std::size_t smem = decode_layout(sh, g.cell, tp, bf16, kOverlap).total * sizeof(float);
  ensure_smem(decode_kernel<kOverlap>, smem, "ssd decode smem");
  const int tiles = (sh.P + tp - 1) / tp;
  const int columns = p.num_seqs * tiles;  // blocks per head slot; launch order runs across them first
  const int forced = forced_ahead.load();
  int ahead = forced > 0 ? forced : forced < 0 ? (resident_blocks<kOverlap>(smem) + columns - 1) / columns : 0;
  if (ahead >= sh.H) ahead = 0;  // every block resident at once (or nothing that far)
  decode_kernel<kOverlap><<<dim3(static_cast<unsigned>(columns), static_cast<unsigned>(sh.H)), kStepThreads, smem, s>>>(
      sh, g, p, xbc, ld, dt, A, D, st, tp, tiles, ahead, y);
  check_launch("ssd decode");
}

}  // namespace

void launch_decode(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, const SsdState& st, int tp, float* y,
                   cudaStream_t s) {
  // The schedule each state dtype measured faster with (decode_kernel's comment).
  if (st.state_f32 != nullptr) launch<true>(sh, g, p, xbc, ld, dt, A, D, st, tp, y, s);
  else launch<false>(sh, g, p, xbc, ld, dt, A, D, st, tp, y, s);
}

}  // namespace parity::cuda::ssd

namespace parity::cuda {
void ssd_force_step_prefetch(int ahead) { ssd::forced_ahead.store(ahead); }
}  // namespace parity::cuda
