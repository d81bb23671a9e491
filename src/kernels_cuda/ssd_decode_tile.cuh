#pragma once
// Exact mode's one-row decode of one p-tile of one head, as device code the decode kernel
// (ssd_decode.cu: its why, its schedule and its bits) and the persistent decode step
// (persistent_decode.cu) both run: one copy, one set of bits. kStepThreads threads (threadIdx.x <
// kStepThreads) call it; `sync` orders them (the kernel's __syncthreads, a named barrier where the block
// has more threads). Hooks: what only the kernel does around it (its programmatic launch's L2 requests and
// wait, the L2 request for a later block's tile, the benchmark probe's timestamps); none changes a value.
#include "kernels_cuda/ssd_decode_parts.cuh"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {

constexpr int kStageRows = 32;  // replay rows staged at a time (a whole cell for G ≤ 32)

// decode_kernel's schedule, as flags (ssd_force_decode_way names a set as 100 + flags). None of them
// changes an operation or its order: they move work between lanes and in time, so the bits do not
// depend on them (CudaSsdStep.ExactDecodeEveryWay). Session 11 measured ten flags in 41 sets side by
// side (docs/performance.md); session 12 kept the default's three and the probe and removed the rest,
// which lost: kSplit 1 (the state in two copy groups), kLean 2 (cum in registers, intra sums kept by the
// output lanes), kFoldRows 4 (the fold's B values loaded once for four rows of p: kFoldQuad's forerunner),
// kBGlobal 32 (no B stage: b64 / b256 fp32 42.2 / 143 µs, bf16 30.3 / 95.7, against the default's 35.2 /
// 122 and 26.1 / 86.3), kEarly 64 (the C·B dots before the cum), and the timing-only kSkipFold 128 and
// kSkipReplay 256 (a part of the step left out, wrong values).
constexpr int kDots2 = 8;     // C·S with two lanes a row (two quarter chains each): 64 rows a pass
constexpr int kProbe = 16;    // benchmarks: per-block timestamps (decode_probe)
constexpr int kFoldQuad = 512;  // the fold: four consecutive rows of p a thread (their x values one 16-byte
                                // load), a source row's B values loaded once for them
constexpr int kRingLate = 1024;  // row t into the ring after the first wait, from the staged rows
constexpr int kWayBase = 100;
// The default for both state dtypes, from session 11's second H200 call (BM_CudaDecodeSsmWay, every way in
// one run, batch 64 / 256, µs): kRingLate | kFoldQuad | kDots2 fp32 35.2 / 122, bf16 26.1 / 86.3 (main's
// before: fp32 kSplit | kLean 42.4 / 146, bf16 none 29.4 / 99.8; plain's SSU 41.9 / 148 and 25.5 / 89.2).
constexpr int kDefaultF32 = kRingLate | kFoldQuad | kDots2, kDefaultBf16 = kDefaultF32;

struct DecodeLayout {
  int R, XP;                                                     // rows per stage; row stride of the x stage
  std::size_t S, B, x, C, dts, cum, wf, coef, inter, dacc, total;  // floats
};
__host__ __device__ inline DecodeLayout decode_layout(const SsdShape& sh, int cell, int tp, bool bf16) {
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
  l.inter = c.take(tp);
  // A cell longer than one stage: the fold's partial sums between stages (each element's chain
  // continues from the value kept here, so it is still one chain).
  l.dacc = c.take(cell > l.R ? static_cast<std::size_t>(tp) * sh.N : 0);
  l.total = c.at;
  return l;
}

// What a caller without a launch of its own to manage passes as hooks.
struct NoDecodeHooks {
  __device__ void before_copies(const SsdState&, const Tile&, std::size_t, std::size_t) {}
  __device__ void after_copies() {}
  __device__ void mark(int) {}
  __device__ void finish(bool, int, int) {}
};

// The row of the sequence in slot `slot` at position `start` (packed row row0 of the pass: its x, B, C
// at xbc + row0·ld, its dt at dt + row0·H), for head h's rows p0.. of tile z (TP rows a tile), whose
// cell position follows from tmod = start mod cell; smem holds decode_layout(sh, cell, TP, bf16).
template <int kF, class Sync, class Hooks>
__device__ inline void decode_tile(const SsdShape& sh, const ScanGrid& g, int slot, int row0, int64_t start, int tmod,
                                   int h, int z, int TP, const float* xbc, int ld, const float* dt, const float* A,
                                   const float* Dskip, const SsdState& st, float* y, float* smem, Sync sync,
                                   Hooks& hooks) {
  constexpr bool kFQ = (kF & kFoldQuad) != 0, kRL = (kF & kRingLate) != 0;
  constexpr bool kD2 = (kF & kDots2) != 0;
  const int tid = threadIdx.x;
  const int H = sh.H, P = sh.P, N = sh.N, cell = g.cell;
  const Tile t = tile_of(sh, slot, h, TP, z);
  const int grp = h / sh.heads_per_group(), Np = t.Np, tp = t.tp;
  const bool bf16 = st.state_f32 == nullptr;
  const DecodeLayout lo = decode_layout(sh, cell, TP, bf16);
  const RowInCell ric = row_in_cell(g, h, H, start, tmod);
  const int j = ric.j;         // the row's index in its cell
  const int rows = j + 1;      // source rows 0..j
  const bool fold = ric.fold;  // the row completes the cell
  hooks.mark(0);

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

  // The kernel's programmatic launch: L2 requests for what earlier passes wrote, then its wait.
  hooks.before_copies(st, t, xbase, bbase);

  const float Ah = A[h], Dh = Dskip[h];  // in flight with the copies

  // Group 1: dt of rows 0..j, C_t, the first stage of rows. Group 2: the state tile.
  for (int i = tid; i < rows; i += kStepThreads) cp_async4(dts + i, dt_of(i));
  stage_vec(Cs, cur + I + static_cast<std::size_t>(sh.groups) * N + static_cast<std::size_t>(grp) * N, N);
  stage(0, rows < R ? rows : R);
  cp_async_commit();
  stage_state(st, t, S, raw);
  cp_async_commit();

  hooks.after_copies();  // the kernel: the tile `ahead` launch slots later asked of L2

  // Row t into the replay ring. No block of this launch reads these slots: the rows replayed here
  // are the ones before t in t's cell, which sit in other slots of the x/dt ring (one per cell row)
  // and of the B ring (position mod cell). kRingLate writes it after the wait, from the first stage
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
  if constexpr (!kRL) ring_row_t(false);
  cp_async_wait<1>();  // group 1
  sync();
  hooks.mark(1);
  if constexpr (kRL) ring_row_t(true);

  for (int i = tid; i < rows; i += kStepThreads) cum[i] = cum_term(dts[i], Ah);
  sync();
  if (tid == 0) cum_scan(cum, rows);
  sync();
  const float cj = cum[j];

  // Stages of source rows: the coefficients, the intra-cell sums (row p's by thread p), and, for a
  // folding head in a cell longer than a stage, the fold's partial sums of every stage but the last.
  float intra = 0.0f;
  int i0 = 0;
  for (;;) {
    const int rc = rows - i0 < R ? rows - i0 : R;
    for (int ii = tid; ii < rc; ii += kStepThreads) {
      const float w = row_weight(cj, cum[i0 + ii], dts[i0 + ii]);
      wf[ii] = w;
      coef[ii] = w * cb_dot(Cs, Bs + ii * Np, N);
    }
    sync();
    if (tid < tp)
      for (int ii = 0; ii < rc; ++ii) intra = fmaf(coef[ii], xs[ii * XP + tid], intra);
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
    sync();  // the stage is consumed
    i0 += R;
    stage(i0, rows - i0 < R ? rows - i0 : R);
    cp_async_commit();
    cp_async_wait<0>();
    sync();
  }
  hooks.mark(2);

  // The outputs: y = row_output(cum_j, dot, intra, D, x_t), x_t from row j of the last stage; the
  // dots C·S into `inter` once the state has arrived, row p written by thread p after the fold.
  float* yrow = y + static_cast<std::size_t>(row0) * I + static_cast<std::size_t>(h) * P + t.p0;
  const float* xt = xs + (j - i0) * XP;
  cp_async_wait<0>();  // the state tile
  sync();
  hooks.mark(3);
  auto dot_into = [&](int r, float dot) { inter[r] = dot; };
  if constexpr (kD2) tile_dots_pairs(Cs, t, S, raw, bf16, 0, tp, dot_into);
  else tile_dots(Cs, t, S, raw, bf16, dot_into);
  hooks.mark(4);
  if (fold) {
    const float decay = exp_f(cj);  // ssd_deltas.cu's cell_decay: exp(cum_{L-1})
    const int rc = rows - i0;
    if (kFQ && kStepThreads % (N / 4) == 0) {
      fold_quad(st, t, S, raw, bf16, Bs, Np, xs, XP, wf, rc, dacc, i0 > 0, decay);
    } else {
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
  }
  sync();  // inter
  if (tid < tp) yrow[tid] = row_output(cj, inter[tid], intra, Dh, xt[tid]);
  hooks.finish(fold, j, tp);
}

}  // namespace parity::cuda::ssd
