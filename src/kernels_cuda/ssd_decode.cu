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
#include <string>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/smem_limit.h"
#include "kernels_cuda/ssd_decode_parts.cuh"
#include "kernels_cuda/ssd_prefill.h"
#include "kernels_cuda/ssd_tile.cuh"

namespace parity::cuda::ssd {
namespace {

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

// Benchmarks only (decode_probe): per block, 10 values: globaltimer at its start and end (ns), then
// clock64 cycles from its start to: the metadata, the replay rows' arrival, the replay work done (cum,
// coefficients, intra sums), the state's arrival (its first group), the dots done, the end; then
// smid | fold << 16 | j << 20 and the tile rows.
constexpr int kProbeValues = 10;
__device__ inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ inline unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %smid;" : "=r"(r));
  return r;
}

// Grid: x = sequence · tiles + p-tile, y = launch slot of the head (heavy_first_head). At most 64
// registers (8 blocks of 128 threads an SM; unbounded, ptxas took 80, which allows 6): at the
// default tile shared memory allows 7 fp32 or 10 bf16 blocks an SM.
//
// kF: the schedule's flags (above; the default kRingLate | kFoldQuad | kDots2, measured against every
// other set in one run). The cum is scanned by thread 0, the intra sums formed by thread p, the outputs
// written after a barrier; row t goes into the ring after the first wait from the staged rows
// (kRingLate), else from global memory before it. The same operations on the same values every way (the
// bits do not depend on kF).
//
// Launched programmatically (launch_after_prior, when programmatic_exact_decode()): before the wait
// for the kernel before it (the conv, which writes this row's x, B, C and dt) a block only reads the
// pass's metadata and asks L2 for what earlier passes wrote (its state tile, its head's x ring, its
// group's B ring); every copy is issued after the wait.
template <int kF>
__global__ void __launch_bounds__(kStepThreads, 8) decode_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc,
                                                              int ld, const float* dt, const float* A,
                                                              const float* Dskip, SsdState st, int TP, int tiles,
                                                              int ahead, int pdl, unsigned long long* probe,
                                                              float* y) {
  constexpr bool kFQ = (kF & kFoldQuad) != 0, kRL = (kF & kRingLate) != 0;
  constexpr bool kD2 = (kF & kDots2) != 0, kP = (kF & kProbe) != 0;
  long long c0 = 0, ck[6] = {0, 0, 0, 0, 0, 0};
  unsigned long long g0 = 0;
  if constexpr (kP) {
    g0 = global_ns();
    c0 = clock64();
  }
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
  const DecodeLayout lo = decode_layout(sh, cell, TP, bf16);
  const RowInCell ric = row_in_cell(g, h, H, start, tmod);
  const int j = ric.j;         // the row's index in its cell
  const int rows = j + 1;      // source rows 0..j
  const bool fold = ric.fold;  // the row completes the cell
  if constexpr (kP) ck[0] = clock64();

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

  // Programmatic launch: what earlier passes wrote is asked of L2 while the kernel before finishes
  // (hints: no value depends on them), then the wait (a no-op when launched the ordinary way).
  if (pdl == 1) {
    if (tid == 0) prefetch_state_l2(st, t);
    if (tid == 32 && z == 0) prefetch_ring_l2(st.ring_x + xbase * P, cell * P);
    if (tid == 64 && z == 0) prefetch_ring_l2(st.ring_B + bbase * N, cell * N);
  }
  wait_for_prior_kernel();
  release_next_kernel();

  const float Ah = A[h], Dh = Dskip[h];  // in flight with the copies

  // Group 1: dt of rows 0..j, C_t, the first stage of rows. Group 2: the state tile.
  for (int i = tid; i < rows; i += kStepThreads) cp_async4(dts + i, dt_of(i));
  stage_vec(Cs, cur + I + static_cast<std::size_t>(sh.groups) * N + static_cast<std::size_t>(grp) * N, N);
  stage(0, rows < R ? rows : R);
  cp_async_commit();
  stage_state(st, t, S, raw);
  cp_async_commit();

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
  __syncthreads();
  if constexpr (kP) ck[1] = clock64();
  if constexpr (kRL) ring_row_t(true);

  for (int i = tid; i < rows; i += kStepThreads) cum[i] = cum_term(dts[i], Ah);
  __syncthreads();
  if (tid == 0) cum_scan(cum, rows);
  __syncthreads();
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
    __syncthreads();
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
    __syncthreads();  // the stage is consumed
    i0 += R;
    stage(i0, rows - i0 < R ? rows - i0 : R);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }
  if constexpr (kP) ck[2] = clock64();

  // The outputs: y = row_output(cum_j, dot, intra, D, x_t), x_t from row j of the last stage; the
  // dots C·S into `inter` once the state has arrived, row p written by thread p after the fold.
  float* yrow = y + static_cast<std::size_t>(row0) * I + static_cast<std::size_t>(h) * P + t.p0;
  const float* xt = xs + (j - i0) * XP;
  cp_async_wait<0>();  // the state tile
  __syncthreads();
  if constexpr (kP) ck[3] = clock64();
  auto dot_into = [&](int r, float dot) { inter[r] = dot; };
  if constexpr (kD2) tile_dots_pairs(Cs, t, S, raw, bf16, 0, tp, dot_into);
  else tile_dots(Cs, t, S, raw, bf16, dot_into);
  if constexpr (kP) ck[4] = clock64();
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
  __syncthreads();  // inter
  if (tid < tp) yrow[tid] = row_output(cj, inter[tid], intra, Dh, xt[tid]);
  if constexpr (kP) {
    ck[5] = clock64();
    if (tid == 0 && probe != nullptr) {
      unsigned long long* o = probe + (static_cast<std::size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kProbeValues;
      o[0] = g0;
      o[1] = global_ns();
      for (int k = 0; k < 6; ++k) o[2 + k] = static_cast<unsigned long long>(ck[k] - c0);
      o[8] = smid() | (fold ? 1u << 16 : 0u) | (static_cast<unsigned>(j) << 20);
      o[9] = static_cast<unsigned long long>(tp);
    }
  }
}

using DecodeKernel = void (*)(SsdShape, ScanGrid, PassSeqs, const float*, int, const float*, const float*,
                              const float*, SsdState, int, int, int, int, unsigned long long*, float*);

// The kernel of each set of flags in kFlags; nullptr for another set.
template <int... kFlags>
DecodeKernel built(int flags) {
  DecodeKernel k = nullptr;
  ((k = flags == kFlags ? decode_kernel<kFlags> : k), ...);
  return k;
}

// The schedules built: session 9's (no flags, the baseline BM_CudaDecodeSsmWay measures against) and the
// default, each also with the probe (BM_CudaDecodeSsmProbe).
DecodeKernel kernel_of(int flags) {
  return built<0, kDefaultF32, kProbe | 0, kProbe | kDefaultF32>(flags);
}

std::atomic<int> forced_ahead{0}, forced_way{0}, forced_pad{0};
std::atomic<unsigned long long*> probe_buffer{nullptr};
// ops.h's modes: 0 ordinary launch, 1 programmatic with L2 requests, 2 without, 3 (the default) 1 for
// passes of up to kProgrammaticDecodeSeqs sequences, else 0.
std::atomic<int> programmatic_decode{kProgrammaticDecodeAuto};
// Session 23 (H200, mamba2-2.7b, BM_CudaModelDecode pdl:1 vs pdl:2, two calls): batch 1 −2.6 % and
// −3.2 % a step; batch 64 ±0 and +0.8 %, batch 256 ±0 (session 11: +3-5 % at 64).
constexpr int kProgrammaticDecodeSeqs = 16;

// Blocks of `kernel` with `smem` bytes the whole device holds at once.
int resident_blocks(DecodeKernel kernel, std::size_t smem) { return blocks_per_sm(kernel, kStepThreads, smem) * sm_count(); }

// The schedule a launch takes: the benchmark's or test's forced way where it is built, else the
// default for the state dtype.
int decode_flags(bool bf16) {
  const int way = forced_way.load();
  if (way >= kWayBase && kernel_of(way - kWayBase) != nullptr) return way - kWayBase;
  return bf16 ? kDefaultBf16 : kDefaultF32;
}

}  // namespace

void launch_decode(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                   const float* dt, const float* A, const float* D, const SsdState& st, int tp, float* y,
                   cudaStream_t s) {
  const bool bf16 = st.state_f32 == nullptr;
  int flags = decode_flags(bf16);
  unsigned long long* probe = probe_buffer.load();
  if (probe != nullptr && kernel_of(flags | kProbe) != nullptr) flags |= kProbe;
  const DecodeKernel kernel = kernel_of(flags);
  const std::size_t smem = decode_layout(sh, g.cell, tp, bf16).total * sizeof(float) +
                           static_cast<std::size_t>(forced_pad.load());
  ensure_smem(kernel, smem, "ssd decode smem");
  const int tiles = (sh.P + tp - 1) / tp;
  const int columns = p.num_seqs * tiles;  // blocks per head slot; launch order runs across them first
  const int forced = forced_ahead.load();
  int ahead = forced > 0 ? forced : forced < 0 ? (resident_blocks(kernel, smem) + columns - 1) / columns : 0;
  if (ahead >= sh.H) ahead = 0;  // every block resident at once (or nothing that far)
  const dim3 grid(static_cast<unsigned>(columns), static_cast<unsigned>(sh.H));
  int pdl = programmatic_launch() ? programmatic_decode.load() : 0;
  if (pdl == kProgrammaticDecodeAuto) pdl = p.num_seqs <= kProgrammaticDecodeSeqs ? 1 : 0;
  if (pdl != 0) {
    launch_after_prior(kernel, grid, dim3(kStepThreads), smem, s, "ssd decode", sh, g, p, xbc, ld, dt, A, D, st, tp,
                       tiles, ahead, pdl, probe, y);
  } else {
    kernel<<<grid, kStepThreads, smem, s>>>(sh, g, p, xbc, ld, dt, A, D, st, tp, tiles, ahead, 0, probe, y);
    check_launch("ssd decode");
  }
}

}  // namespace parity::cuda::ssd

namespace parity::cuda {
void ssd_force_step_prefetch(int ahead) { ssd::forced_ahead.store(ahead); }
void ssd_force_decode_way(int way) { ssd::forced_way.store(way); }
void ssd_force_decode_smem_pad(int bytes) { ssd::forced_pad.store(bytes); }
void ssd_decode_probe(unsigned long long* device_buffer) { ssd::probe_buffer.store(device_buffer); }
bool programmatic_exact_decode() { return ssd::programmatic_decode.load() != 0; }
void set_programmatic_exact_decode(bool on, bool l2_requests) {
  ssd::programmatic_decode.store(on ? (l2_requests ? 1 : 2) : 0);
}
void set_programmatic_exact_decode_mode(int mode) {
  if (mode < 0 || mode > kProgrammaticDecodeAuto)
    throw Error("set_programmatic_exact_decode_mode: mode " + std::to_string(mode) + " is not 0..3");
  ssd::programmatic_decode.store(mode);
}
int programmatic_exact_decode_mode() { return ssd::programmatic_decode.load(); }
}  // namespace parity::cuda
