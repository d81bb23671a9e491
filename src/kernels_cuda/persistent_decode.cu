// persistent_decode.h: a batch-1 decode step as one persistent kernel.
#include "kernels_cuda/persistent_decode.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <map>
#include <vector>

#include "kernels_cuda/conv_row.cuh"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/grid_barrier.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/norm_row.cuh"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/ring_cursor.h"
#include "kernels_cuda/ssd_decode_tile.cuh"
#include "kernels_cuda/ssu_tile.cuh"
#include "kernels_cuda/tensor_map.h"

namespace parity::cuda {
namespace {

using u64 = std::uint64_t;

constexpr int kThreads = norm_row::kRowThreads;  // 256: the norms' block_sum tree
constexpr int kWarps = kThreads / 32;
constexpr int kConsumers = kWarps - 1;  // warps 0..6: one 16-column task each
constexpr int kProducer = kWarps - 1;   // warp 7, lane 0: the weights' bulk copies
constexpr int kSsuThreads = ssd::kStepThreads;  // warps 0..3 run a head's state update
static_assert(kSsuThreads % 32 == 0 && kSsuThreads < kThreads, "the SSU's threads are whole warps, not the block");
// The weights come as TMA boxes of 64 values of K (128 bytes, the 128-byte swizzle) by the block's
// 16·tasks rows: a stage is 2 KiB a task. The ring's stages are as many as fit, up to kMaxStages.
constexpr int kBoxK = 64;
constexpr int kTaskBoxBytes = 16 * kBoxK * 2;
constexpr int kMaxStages = 96;  // out_proj's whole share at one task a block (80 boxes of 2 KiB)
static_assert(kMaxStages <= kThreads, "ring_reset: a thread a stage");
constexpr int kMaxSmem = 227 * 1024;
constexpr int kStaticReserve = 2048;  // the static shared memory: barriers, the norms' scratch
constexpr int kMaxRing = 200 * 1024;

__host__ __device__ constexpr std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }

// The state tile a head's update stages at once: the whole head when it fits (P rows of N; the
// exact decode's thread p forms row p's sums, so at most kStepThreads rows).
__host__ __device__ inline int ssu_rows(const PersistentDecodeShape& s) {
  int fit = ssd::kMaxTileFloats / s.state;
  if (fit > ssd::kStepThreads) fit = ssd::kStepThreads;
  return s.head_dim < fit ? s.head_dim : fit;
}
// Floats of the SSM step's shared memory: the SSU's, or the exact decode's (its replay stages too).
__host__ __device__ inline std::size_t ssm_floats(const PersistentDecodeShape& s) {
  const SsdShape sh{s.heads, s.head_dim, s.state, s.groups};
  return s.exact ? ssd::decode_layout(sh, s.cell, ssu_rows(s), s.bf16_state).total
                 : ssd::ssu_layout(sh, ssu_rows(s), s.bf16_state).total;
}

// Dynamic shared memory (bytes from its 1024-aligned start): A's bf16 row (in_proj's or out_proj's
// input), the residual row, the SSU's tile and vectors, then the ring, as large as the rest leaves.
struct Layout {
  std::size_t arow, resid, ssu, ring, ring_bytes, total;
};
__host__ __device__ inline Layout layout_of(const PersistentDecodeShape& s) {
  Layout l{};
  const int widest = s.hidden > s.inner() ? s.hidden : s.inner();
  l.arow = 0;
  l.resid = round_up(2 * static_cast<std::size_t>(widest), 128);
  l.ssu = l.resid + round_up(4 * static_cast<std::size_t>(s.hidden), 128);
  l.ring = round_up(l.ssu + ssm_floats(s) * sizeof(float), 1024);
  const std::size_t room = kMaxSmem - kStaticReserve - 1024;  // 1024: the start's alignment
  l.ring_bytes = room > l.ring ? (room - l.ring) / 1024 * 1024 : 0;
  if (l.ring_bytes > kMaxRing) l.ring_bytes = kMaxRing;
  l.total = 1024 + l.ring + l.ring_bytes;
  return l;
}

// The blocks split a GEMM's 16-column tasks in contiguous runs: block b owns tasks
// [b·tasks/grid, (b+1)·tasks/grid), `few` or few + 1 of them.
__host__ __device__ inline int tasks_of(int N) { return (N + 15) / 16; }

// A GEMM's share of this block: its tasks' rows n0 .. n0 + 16·nt, streamed box by box (box b: K
// values 64b ..) through the ring's S stages of 2 KiB a task.
struct GemmShare {
  const CUtensorMap* map;
  int N, K, n0, nt, boxes, S, stage_bytes;
};
__device__ inline GemmShare share_of(const CUtensorMap (&maps)[2], int N, int K, std::size_t ring_bytes) {
  const int tasks = tasks_of(N), grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int t0 = b * tasks / grid, t1 = (b + 1) * tasks / grid, few = tasks / grid;
  GemmShare g;
  g.nt = t1 - t0;
  g.map = &maps[g.nt == few ? 0 : 1];
  g.N = N;
  g.K = K;
  g.n0 = 16 * t0;
  g.boxes = (K + kBoxK - 1) / kBoxK;
  g.stage_bytes = kTaskBoxBytes * (g.nt > 0 ? g.nt : 1);
  const int fit = static_cast<int>(ring_bytes) / g.stage_bytes;
  g.S = fit < kMaxStages ? fit : kMaxStages;
  return g;
}

__device__ inline int first_ring(const GemmShare& g) { return g.nt > 0 ? min(g.boxes, g.S) : 0; }

// The ring's barriers, made afresh for each GEMM (thread s < kMaxStages its stage s's pair) while no
// copy or arrival is pending on them (the previous GEMM's boxes all read, a block-wide barrier since):
// full[s] completes when a box has landed, empty[s] when the share's nt warps have read it (lane 0 of
// each). A __syncthreads must follow.
__device__ inline void ring_reset(std::uint64_t* full, std::uint64_t* empty, int nt, bool first) {
  const int s = static_cast<int>(threadIdx.x);
  if (s >= kMaxStages) return;
  if (!first) {
    ptx::mbar_inval(&full[s]);
    ptx::mbar_inval(&empty[s]);
  }
  ptx::mbar_init(&full[s], 1);
  ptx::mbar_init(&empty[s], static_cast<unsigned>(nt > 0 ? nt : 1));
  ptx::mbar_init_fence();
}

// The ring's waits (grid_barrier.cuh's bound: a trap, not a hang).
__device__ inline void wait_or_trap(std::uint64_t* bar, unsigned parity) {
  spin_or_trap([&] { return ptx::mbar_test(bar, parity); });
}

// The producer (one thread): boxes [from, to) of the share, each waiting for its stage's previous box
// to have been read. Called with from = 0 right after ring_reset, it never waits for the first S: the
// weights stream while the block does other work. The maps live in global memory (the layer table).
// The share comes by value, as to every phase below: a share behind a reference lives in local memory,
// and each barrier's "memory" clobber reloads its fields on the loop's path.
__device__ inline void issue_box(unsigned ring, std::uint64_t* full, const GemmShare& g, Cursor c, int b,
                                 bool evict_first, std::uint64_t pol) {
  ptx::mbar_arrive_expect_tx(&full[c.s], static_cast<unsigned>(g.stage_bytes));
  const unsigned dst = ring + static_cast<unsigned>(c.s * g.stage_bytes);
  if (evict_first) ptx::tma_load_3d_hint(dst, g.map, kBoxK * b, g.n0, 0, &full[c.s], pol);
  else ptx::tma_load_3d(dst, g.map, kBoxK * b, g.n0, 0, &full[c.s]);
}
__device__ void produce(unsigned ring, std::uint64_t* full, std::uint64_t* empty, const GemmShare g, int from,
                        int to, bool evict_first) {
  if (from == 0 && to > 0) ptx::fence_tensormap_acquire(g.map);
  const std::uint64_t pol = evict_first ? ptx::l2_evict_first() : 0;
  Cursor c = Cursor::at(from, g.S);
  for (int b = from; b < to; ++b, c.next(g.S)) {
    // Box b - S's release: the previous round's phase.
    if (b >= g.S) wait_or_trap(&empty[c.s], c.phase ^ 1u);
    issue_box(ring, full, g, c, b, evict_first, pol);
  }
}
// The count of grid barriers passed, between thread 0 (which writes it) and the producer's lane (which
// polls it while it asks for copies): shared-memory atomics, so the store and the polls are ordered
// accesses (a plain or volatile pair is a data race by the memory model, and racecheck reports it).
__device__ inline unsigned flag_read(unsigned* f) { return atomicOr(f, 0u); }
__device__ inline void flag_write(unsigned* f, unsigned v) { atomicExch(f, v); }

// The producer while the block waits at a grid barrier (or runs the SSM step, which its warp takes no
// part in): the share's first ring from box 0, until thread 0 has seen barrier `k` pass (`passed` > k)
// or the ring is full. A bulk copy's issue waits while the SM's copy queue is full, so boxes are asked
// for one at a time, looking at the barrier between them. Returns the boxes asked for.
__device__ int produce_until(unsigned ring, std::uint64_t* full, const GemmShare g, bool evict_first,
                             unsigned* passed, unsigned k) {
  const int to = first_ring(g);
  if (to > 0) ptx::fence_tensormap_acquire(g.map);
  const std::uint64_t pol = evict_first ? ptx::l2_evict_first() : 0;
  int b = 0;
  for (Cursor c; b < to && flag_read(passed) <= k; ++b, c.next(g.S)) issue_box(ring, full, g, c, b, evict_first, pol);
  return b;
}

// Asks L2 to keep [p, p + bytes) (trimmed inward to 16-byte ends: a hint, never past the span).
__device__ inline void keep_in_l2(const void* p, std::size_t bytes, std::uint64_t pol) {
  if (!p) return;
  const std::uintptr_t a = (reinterpret_cast<std::uintptr_t>(p) + 15) & ~std::uintptr_t{15};
  const std::uintptr_t e = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~std::uintptr_t{15};
  if (e > a) ptx::bulk_prefetch_l2(reinterpret_cast<const void*>(a), static_cast<unsigned>(e - a), pol);
}
// This block's slice of an array every block reads (any block's request serves all).
__device__ inline void keep_slice_in_l2(const void* p, std::size_t bytes, std::uint64_t pol) {
  const std::size_t per = round_up((bytes + gridDim.x - 1) / gridDim.x, 16), at = per * blockIdx.x;
  if (p && at < bytes) keep_in_l2(static_cast<const char*>(p) + at, bytes - at < per ? bytes - at : per, pol);
}
// kPersistentSmallL2 at a layer's start, before its weights' copies: the block's heads' state (and
// exact mode's replay rows) for the SSM step, a slice of the gated norm's weights, A, D.
__device__ void keep_layer_in_l2(const PersistentDecode& job, const PersistentMambaLayer& L) {
  const PersistentDecodeShape& sh = job.shape;
  const std::uint64_t pol = ptx::l2_evict_last();
  const std::size_t slot = static_cast<std::size_t>(job.ps.slot[0]), pn = static_cast<std::size_t>(sh.head_dim) * sh.state;
  for (int h = static_cast<int>(blockIdx.x); h < sh.heads; h += static_cast<int>(gridDim.x)) {
    const std::size_t at = (slot * sh.heads + h) * pn;
    if (L.ssd.state_f32) keep_in_l2(L.ssd.state_f32 + at, pn * 4, pol);
    else keep_in_l2(L.ssd.state_bf16 + at, pn * 2, pol);
    if (sh.exact) keep_in_l2(L.ssd.ring_x + (slot * sh.heads + h) * sh.cell * sh.head_dim,
                             static_cast<std::size_t>(sh.cell) * sh.head_dim * 4, pol);
  }
  if (sh.exact) {
    keep_slice_in_l2(L.ssd.ring_dt + slot * sh.heads * sh.cell, static_cast<std::size_t>(sh.heads) * sh.cell * 4, pol);
    keep_slice_in_l2(L.ssd.ring_B + slot * sh.groups * sh.cell * sh.state,
                     static_cast<std::size_t>(sh.groups) * sh.cell * sh.state * 4, pol);
  }
  keep_slice_in_l2(L.gate_w, static_cast<std::size_t>(sh.inner()) * 4, pol);
  if (blockIdx.x == 0) {
    keep_in_l2(L.A, static_cast<std::size_t>(sh.heads) * 4, pol);
    keep_in_l2(L.D, static_cast<std::size_t>(sh.heads) * 4, pol);
  }
}

// 16 zero bytes: the rows of the n8 tile's columns 1..7 for the B fragments' ldmatrix (below).
__shared__ alignas(16) unsigned zero_row[4];

// Consumer warp `warp` (< g.nt): its 16 columns over K, k16 steps ascending into one fp32 accumulator
// per output from zero, as every GEMM of gemm() runs them (gemm_swap_ab_mma.cuh reads its fragments
// the same way); A's one row is `arow` (bf16, on chip; the n8 tile's other columns are zero). Lanes
// with q = 0 hold columns n and n + 8 of row 0: out(h, n, value) for those below N, value = the sum
// (+ bias[n]). A 32-deep last box runs its two real steps only (a step on zeros could turn a -0 into +0).
template <class Out>
__device__ void consume(unsigned ring, std::uint64_t* full, std::uint64_t* empty, const GemmShare g,
                        const uint16_t* arow, const float* bias, int warp, int lane, Out out) {
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int gq = lane / 4, q = lane % 4, wr = 16 * warp + lane % 16;
  struct Frag {
    unsigned a[4][4];  // a box's four m16k16 fragments
    unsigned b[2][4];  // its four k16n8 B fragments (A's row), two steps' to an ldmatrix
  };
  // B for steps 2p, 2p + 1 by one ldmatrix.x4: matrix m (lanes 8m..8m+7 give its rows) is step 2p + m / 2's
  // k half m % 2, whose row 0 is A's row there and rows 1..7 zero_row; so lane (g, q) gets A's values
  // 2q, 2q + 1 of that half for g = 0 and zeros else, the B fragment the shared loads gave before.
  const unsigned b_row = lane % 8 == 0 ? ptx::smem_addr(arow) + 2u * (16u * ((lane / 8) / 2) + 8u * ((lane / 8) % 2))
                                       : 0u;
  const unsigned zero = ptx::smem_addr(zero_row);
  // Box b's fragments in three parts, each issued in the shadow of one step of the box before (a step's
  // result takes ~24 cycles to feed the next, and a box's loads issue in ~90 cycles: back to back they
  // doubled a box's time). A (W's rows g, g + 8 at k 2q.., then at 2q + 8..): ldmatrix lanes 0-15 address
  // the warp's 16 rows at chunk 2kk, lanes 16-31 at 2kk + 1, in the 128-byte swizzle.
  Cursor c;  // the next box's stage and phase: the boxes are loaded in order
  unsigned st = 0;
  auto load_a = [&](Frag& f, int kk0) {  // waits for the box's copy first when kk0 = 0
    if (kk0 == 0) {
      wait_or_trap(&full[c.s], c.phase);
      st = ring + static_cast<unsigned>(c.s * g.stage_bytes);
    }
#pragma unroll
    for (int kk = kk0; kk < kk0 + 2; ++kk)
      ptx::ldmatrix_x4(st + wr * 128 + (((2 * kk + lane / 16) ^ (wr & 7)) << 4), f.a[kk]);
  };
  auto load_b = [&](Frag& f, int b) {
    const int k0 = kBoxK * b;
    const bool deep = g.K - k0 >= kBoxK;
    ptx::ldmatrix_x4(b_row ? b_row + 2u * static_cast<unsigned>(k0) : zero, f.b[0]);
    ptx::ldmatrix_x4(b_row && deep ? b_row + 2u * static_cast<unsigned>(k0 + 32) : zero, f.b[1]);
    // The fragments are read: the stage may be refilled (the arrival orders the warp's reads before the
    // next bulk copy, as the GEMMs' consumers release theirs).
    __syncwarp();
    ptx::mbar_arrive_lane0(&empty[c.s], lane);
    c.next(g.S);
  };
  auto step = [&](const Frag& f, int kk) {
    const unsigned bf[2] = {f.b[kk / 2][2 * (kk % 2)], f.b[kk / 2][2 * (kk % 2) + 1]};
    ptx::mma_bf16(acc, f.a[kk], bf);
  };
  // Box b (not the last, so 64 deep) from cur, box b + 1's fragments into nxt between its steps. The two
  // fragment sets take turns (the loop is unrolled by two: no copy, no dynamically indexed registers), and
  // no branch but the copy's wait sits in the loop: a branch's predicate costs ~13 cycles before it.
  auto box = [&](const Frag& cur, Frag& nxt, int b) {
    step(cur, 0);
    load_a(nxt, 0);
    step(cur, 1);
    load_a(nxt, 2);
    step(cur, 2);
    load_b(nxt, b + 1);
    step(cur, 3);
  };
  // The last box: 32 deep runs its two real steps only.
  auto last = [&](const Frag& cur, int b) {
    step(cur, 0);
    step(cur, 1);
    if (g.K - kBoxK * b >= kBoxK) {
      step(cur, 2);
      step(cur, 3);
    }
  };
  Frag f0, f1;
  load_a(f0, 0);
  load_a(f0, 2);
  load_b(f0, 0);
  int b = 0;
  for (; b + 2 < g.boxes; b += 2) {
    box(f0, f1, b);
    box(f1, f0, b + 1);
  }
  if (b + 1 < g.boxes) {
    box(f0, f1, b);
    last(f1, b + 1);
  } else {
    last(f0, b);
  }
  if (q != 0) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = g.n0 + 16 * warp + gq + 8 * h;
    if (n < g.N) out(h, n, bias ? acc[2 * h] + bias[n] : acc[2 * h]);
  }
}

// The kernel's phases, each a function of its own (not inlined): a phase's registers are its own, so
// the largest phase (the held norms' 48-72 values a thread, the GEMM's two fragment sets) sets the
// kernel's count instead of all of them at once, and the GEMM's loop does not spill.

// 1. The residual add (the previous layer's out_proj row, none before layer 0) and the layer's RMSNorm,
// every block the whole row: add_rmsnorm's held form, thread t owning elements t, t + 256, ...; the bf16
// copy is in_proj's input. Every thread of the block.
// Every load is issued before the first store: a store to resid between two loads would hold each
// load (and the reload of the pointer it goes through) until the one before had returned, one L2 round
// trip after another behind the weights' copies.
__device__ __noinline__ void add_norm_phase(const PersistentDecode& job, const PersistentMambaLayer& L, bool add,
                                            float* resid, uint16_t* arow) {
  const int t = static_cast<int>(threadIdx.x), D = job.shape.hidden;
  const float eps = job.shape.eps;
  const float* w = L.norm_w;
  const float* prev = add ? job.out : nullptr;
  float v[norm_row::kHeld], wk[norm_row::kHeld], o[norm_row::kHeld];
#pragma unroll
  for (int k = 0; k < norm_row::kHeld; ++k) {
    const int i = t + k * kThreads;
    wk[k] = i < D ? w[i] : 0.0f;
    v[k] = i < D ? resid[i] : 0.0f;
    o[k] = prev && i < D ? prev[i] : 0.0f;
  }
  if (prev) {
#pragma unroll
    for (int k = 0; k < norm_row::kHeld; ++k) {
      const int i = t + k * kThreads;
      if (i < D) {
        v[k] = v[k] + o[k];  // add_rmsnorm's residual_add(x, y, 1, false)
        resid[i] = v[k];
      }
    }
  }
  norm_row::rms_norm_held(v, wk, D, eps, [&](int i, float x) { arow[i] = norm_row::bf16_bits(x); });
}

// 2. in_proj, consumer warp `warp` of the block's share: the owners of conv channels and dt columns do
// the conv and dt in the epilogue (conv_epilogue.h, conv_row.cuh).
__device__ __noinline__ void in_proj_phase(const PersistentDecode& job, const PersistentMambaLayer& L, unsigned ring,
                                           u64* full, u64* empty, const GemmShare in, const uint16_t* arow, int warp,
                                           int lane) {
  const PersistentDecodeShape sh = job.shape;
  float* zx = job.zx;
  ConvEpilogue ep;
  ep.col0 = sh.inner();
  ep.ch = sh.conv();
  ep.K = sh.conv_kernel;
  ep.w = L.conv_w;
  ep.bias = L.conv_b;
  ep.state = L.conv_state;
  ep.slot = job.ps.slot;
  ep.row_seq = job.ps.row_seq;
  ep.silu = true;
  ep.out = job.xbc;
  ep.dt_col0 = sh.inner() + sh.conv();
  ep.dt = DtJob{nullptr, 0, sh.heads, L.dt_bias, sh.dt_lo, sh.dt_hi, job.dt};
  ConvColumn cc[2];
  if (lane % 4 == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) conv_column_load(ep, 1, 0, in.n0 + 16 * warp + lane / 4 + 8 * h, cc[h]);
  }
  // The z columns keep silu(z), the gated norm's factor (the launches evaluate it in the conv's launch,
  // ops.h's GateJob: the same function of the same float): its exps leave the gated norm's path.
  const int I = sh.inner();
  consume(ring, full, empty, in, arow, L.in_b, warp, lane, [&](int h, int n, float v) {
    zx[n] = n < I ? norm_row::gate_factor(v, false) : v;
    conv_column_store(ep, cc[h], 0, 0, v);
  });
}

// Threads 0..kSsuThreads-1 of the block; the others pass by.
__device__ inline void ssu_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kSsuThreads) : "memory"); }

// 3. The SSM step of this block's heads (h = block, block + grid, ...): exact mode's one-row decode
// (ssd_decode.cu's code: its replay rows, its fold, row t into the ring) or plain mode's SSU (ssd_ssu.cu's).
// Threads 0..kSsuThreads-1. What it reads of the job and the layer table is copied into registers first:
// the tile code's stores to shared memory would otherwise reload each pointer (from the table in global
// memory) between one load and the next, and so serialise the loads.
__device__ __noinline__ void ssm_phase(const PersistentDecode& job, const PersistentMambaLayer& L, float* ssm) {
  const PersistentDecodeShape sh = job.shape;
  const SsdState st = L.ssd;
  const float *A = L.A, *Dskip = L.D, *xbc = job.xbc, *dt = job.dt;
  float* y = job.y;
  const SsdShape ssh{sh.heads, sh.head_dim, sh.state, sh.groups};
  const int TP = ssu_rows(sh), tiles = (sh.head_dim + TP - 1) / TP, conv = sh.conv();
  const int slot = job.ps.slot[0];
  const int64_t start = job.ps.start[0];
  if (sh.exact) {
    const ScanGrid grid = job.grid;
    const int tmod = static_cast<int>(start % sh.cell);
    ssd::NoDecodeHooks none;
    for (int h = static_cast<int>(blockIdx.x); h < sh.heads; h += static_cast<int>(gridDim.x))
      for (int z = 0; z < tiles; ++z) {
        ssd::decode_tile<ssd::kDefaultF32>(ssh, grid, slot, 0, start, tmod, h, z, TP, xbc, conv, dt, A, Dskip, st,
                                           y, ssm, ssu_sync, none);
        ssu_sync();  // the tile's outputs are written before the next one lands on its shared memory
      }
    return;
  }
  const ssd::SsuLayout sl = ssd::ssu_layout(ssh, TP, sh.bf16_state);
  float *S = ssm + sl.S, *Cs = ssm + sl.C, *Bs = ssm + sl.B, *xs = ssm + sl.x;
  uint16_t* raw = reinterpret_cast<uint16_t*>(ssm + sl.S);
  for (int h = static_cast<int>(blockIdx.x); h < sh.heads; h += static_cast<int>(gridDim.x)) {
    const float d = dt[h];
    const float dA = kernels::exp_f(d * A[h]);
    const float Dh = Dskip[h];
    for (int z = 0; z < tiles; ++z) {
      const ssd::Tile tile = ssd::tile_of(ssh, slot, h, TP, z);
      ssd::stage_state(st, tile, S, raw);
      ssd::ssu_stage_inputs(ssh, tile, h, xbc, Cs, Bs, xs);
      ssd::cp_async_commit();
      ssd::cp_async_wait<0>();
      ssu_sync();
      ssd::ssu_tile_step(st, tile, S, raw, Cs, Bs, xs, d, dA, Dh, y + static_cast<std::size_t>(h) * sh.head_dim + tile.p0,
                         ssu_sync);
      ssu_sync();  // the dots have read the tile before the next one lands on it
    }
  }
}

// 4a. The gated norm of the whole row (gated_rmsnorm's held form, group by group; z is silu(z) already)
// into out_proj's bf16 input. Every thread of the block.
__device__ __noinline__ void gated_norm_phase(const PersistentDecode& job, const PersistentMambaLayer& L,
                                              uint16_t* arow) {
  const PersistentDecodeShape sh = job.shape;
  const float *w = L.gate_w, *y = job.y, *zx = job.zx;
  const int group = sh.inner() / sh.groups;
  for (int gi = 0; gi < sh.groups; ++gi) {
    const std::size_t at = static_cast<std::size_t>(gi) * group;
    float wk[norm_row::kHeld];
    norm_row::load_held_weights(w + at, group, wk);
    uint16_t* dst = arow + at;
    norm_row::gated_norm_held(
        y + at, zx + at, group, wk, sh.eps, sh.norm_before_gate, [&](int i, float o) { dst[i] = norm_row::bf16_bits(o); },
        /*activated=*/true);
  }
}

// 4b. out_proj, consumer warp `warp` of the block's share.
__device__ __noinline__ void out_proj_phase(const PersistentDecode& job, const PersistentMambaLayer& L, unsigned ring,
                                            u64* full, u64* empty, const GemmShare out, const uint16_t* arow,
                                            int warp, int lane) {
  float* o = job.out;
  consume(ring, full, empty, out, arow, L.out_b, warp, lane, [&](int, int n, float v) { o[n] = v; });
}

// The producer's part of out_proj's phase: the boxes not asked for during the SSM step, then
// (kPersistentSmallL2) the next layer's norm weights asked of L2, and (kPersistentNextL2) the next
// in_proj's first ring asked of L2 while out_proj's chain runs (its copies into the ring start at the
// grid barrier after it).
__device__ __noinline__ void out_proj_producer(const PersistentDecode& job, int l, unsigned ring, u64* full,
                                               u64* empty, const GemmShare out, int from, std::size_t ring_bytes) {
  produce(ring, full, empty, out, from, out.nt > 0 ? out.boxes : 0, job.weights_evict_first);
  if (job.small_l2 && l + 1 < job.shape.layers)
    keep_slice_in_l2(job.layers[l + 1].norm_w, static_cast<std::size_t>(job.shape.hidden) * 4, ptx::l2_evict_last());
  if (!job.next_l2 || l + 1 >= job.shape.layers) return;
  const GemmShare next = share_of(job.layers[l + 1].in_maps, job.shape.proj(), job.shape.hidden, ring_bytes);
  if (first_ring(next) > 0) ptx::fence_tensormap_acquire(next.map);
  for (int b = 0; b < first_ring(next); ++b) ptx::tma_prefetch_l2_3d(next.map, kBoxK * b, next.n0, 0);
}

// Warps 0..6 (named barrier 2): every warp but the producer's, at the grid barriers the producer spends
// asking for weights.
__device__ inline void others_sync() { asm volatile("bar.sync 2, %0;\n" ::"n"(kThreads - 32) : "memory"); }

__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(const __grid_constant__ PersistentDecode job) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[kMaxStages], empty[kMaxStages];
  __shared__ unsigned passed;  // the grid barriers thread 0 has seen pass: where the producer's asking stops
  const PersistentDecodeShape& sh = job.shape;
  const Layout lo = layout_of(sh);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int t = static_cast<int>(threadIdx.x), D = sh.hidden, I = sh.inner(), proj = sh.proj();
  const bool producer = warp == kProducer && lane == 0;
  // The 128-byte swizzle repeats every 1024 bytes: the regions start on 1024 from here.
  const unsigned base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - ptx::smem_addr(smem_raw));
  uint16_t* arow = reinterpret_cast<uint16_t*>(smem + lo.arow);
  float* resid = reinterpret_cast<float*>(smem + lo.resid);
  float* ssm = reinterpret_cast<float*>(smem + lo.ssu);
  const unsigned ring = base + static_cast<unsigned>(lo.ring);
  for (int i = t; i < D; i += kThreads) resid[i] = job.resid[i];
  if (t == 0) flag_write(&passed, 0);
  if (t < 4) zero_row[t] = 0u;
  unsigned target = 0, k = 0;  // k: the grid barriers passed (thread 0 writes k + 1 to `passed` at each)
  int l = 0, asked = 0;        // asked: the producer's boxes of the ring's GEMM asked for so far
  auto mark = [&](int point) {
    if (job.trace && t == 0)
      job.trace[(static_cast<std::size_t>(l) * kTracePoints + point) * gridDim.x + blockIdx.x] = ptx::global_timer_ns();
  };
  // A grid barrier at which the producer asks for `next`'s first ring until the barrier has passed
  // (after: the whole block) or, at the barrier before the SSM step, until the one after it has
  // (after: the others; the producer's warp takes no part in the SSM step).
  auto barrier_streaming = [&](const GemmShare& next, bool to_the_next_barrier) {
    const unsigned until = to_the_next_barrier ? k + 1 : k;
    if (producer) asked = produce_until(ring, full, next, job.weights_evict_first, &passed, until);
    const unsigned mine = k;
    auto say = [&] { flag_write(&passed, mine + 1); };
    if (to_the_next_barrier) {
      if (warp != kProducer) grid_barrier(job.barrier, target, Nothing{}, others_sync, say);
    } else {
      grid_barrier(job.barrier, target, Nothing{}, WholeBlock{}, say);
    }
    ++k;
  };
  // The first layer's in_proj ring.
  ring_reset(full, empty, share_of(job.layers[0].in_maps, proj, D, lo.ring_bytes).nt, true);
  __syncthreads();

  for (; l < sh.layers; ++l) {
    const PersistentMambaLayer& L = job.layers[l];
    const GemmShare in = share_of(L.in_maps, proj, D, lo.ring_bytes);
    const GemmShare out = share_of(L.out_maps, D, I, lo.ring_bytes);
    mark(0);
    // 1. The norm (the whole block, the producer's lane too), then in_proj: the boxes not yet asked for
    // stream while the consumers read the first.
    if (producer && l == 0 && job.small_l2) keep_layer_in_l2(job, L);
    add_norm_phase(job, L, l > 0, resid, arow);
    __syncthreads();  // A's row on chip before a consumer reads it
    mark(1);
    if (warp == kProducer) {
      if (lane == 0) produce(ring, full, empty, in, asked, in.nt > 0 ? in.boxes : 0, job.weights_evict_first);
    } else if (warp < in.nt) {
      in_proj_phase(job, L, ring, full, empty, in, arow, warp, lane);
    }
    // 2. The block's in_proj boxes all read and asked for: the ring is made afresh for out_proj, whose
    // first ring streams through the grid barrier and the SSM step.
    __syncthreads();
    mark(2);
    ring_reset(full, empty, out.nt, false);
    __syncthreads();
    barrier_streaming(out, true);  // the SSM step reads every channel's conv output and dt
    if (warp != kProducer) {
      mark(3);
      if (t < kSsuThreads) ssm_phase(job, L, ssm);
      if (job.trace) others_sync();
      mark(4);
    }
    // 3. The gated norm reads every head's output: the others' writes gathered, then the whole block.
    grid_barrier(job.barrier, target, [&] { if (warp != kProducer) others_sync(); }, WholeBlock{},
                 [&] { flag_write(&passed, k + 1); });
    ++k;
    mark(5);
    gated_norm_phase(job, L, arow);
    __syncthreads();  // out_proj's A row on chip
    mark(6);
    if (warp == kProducer) {
      if (lane == 0) out_proj_producer(job, l, ring, full, empty, out, asked, lo.ring_bytes);
    } else if (warp < out.nt) {
      out_proj_phase(job, L, ring, full, empty, out, arow, warp, lane);
    }
    // 4. The next layer's norm reads the whole row. Its in_proj ring streams through the barrier.
    __syncthreads();
    mark(7);
    if (l + 1 < sh.layers) {
      const GemmShare next = share_of(job.layers[l + 1].in_maps, proj, D, lo.ring_bytes);
      ring_reset(full, empty, next.nt, false);
      __syncthreads();
      if (producer && job.small_l2) keep_layer_in_l2(job, job.layers[l + 1]);
      barrier_streaming(next, false);
    } else {
      grid_barrier(job.barrier, target, Nothing{}, WholeBlock{});
    }
    mark(8);
  }
  // The last layer's residual add (add_inplace's x + y), for the final norm.
  if (blockIdx.x == 0)
    for (int i = t; i < D; i += kThreads) job.resid[i] = resid[i] + job.out[i];
}

std::atomic<int> persistent_mode{kPersistentDecodeDefault};

// The kernel's shared-memory limit on the current device, raised when a larger layout asks (never
// lowered: a graph captured for a larger model still launches with its size), outside any capture.
void allow_smem(std::size_t bytes) {
  static std::mutex mu;
  static std::map<int, std::size_t> have;
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mu);
  std::size_t& h = have[dev];
  if (h >= bytes) return;
  outside_capture(
      [&] {
        return cudaFuncSetAttribute(persistent_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes));
      },
      "persistent decode: shared memory limit");
  h = bytes;
}

}  // namespace

int persistent_decode() { return persistent_mode.load(); }
void set_persistent_decode(int mode) { persistent_mode.store(mode); }

namespace {
DeviceBuffer<unsigned long long>& trace_store() {
  static DeviceBuffer<unsigned long long> b;
  return b;
}
}  // namespace

unsigned long long* persistent_trace_buffer(int layers) {
  DeviceBuffer<unsigned long long>& b = trace_store();
  const std::size_t n = static_cast<std::size_t>(layers) * kTracePoints * static_cast<std::size_t>(sm_count());
  if (b.size() < n) b = DeviceBuffer<unsigned long long>(n);
  return b.data();
}

PersistentTrace persistent_trace_read(int layers) {
  const int grid = sm_count();
  const std::vector<unsigned long long> v = trace_store().download(trace_store().size());
  PersistentTrace r;
  if (v.size() < static_cast<std::size_t>(layers) * kTracePoints * static_cast<std::size_t>(grid)) return r;
  auto at = [&](int l, int p, int b) { return v[(static_cast<std::size_t>(l) * kTracePoints + p) * grid + b]; };
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p + 1 < kTracePoints; ++p) {
      unsigned long long first = ~0ull, last = 0;
      for (int b = 0; b < grid; ++b) {
        r.mean_us[p] += static_cast<double>(at(l, p + 1, b) - at(l, p, b)) / 1e3 / grid / layers;
        first = std::min(first, at(l, p, b));
        last = std::max(last, at(l, p + 1, b));
      }
      r.slowest_us[p] += static_cast<double>(last - first) / 1e3 / layers;
    }
  return r;
}

std::string persistent_decode_unfit(const PersistentDecodeShape& s) {
  if (s.layers <= 0 || s.hidden <= 0 || s.heads <= 0 || s.head_dim <= 0 || s.state <= 0 || s.groups <= 0)
    return "an empty shape";
  // gemm()'s tensor-core kernels take K in multiples of 32 (a 32-deep last box runs two steps); other K
  // take the WMMA tiles.
  if (s.hidden % 32 != 0 || s.inner() % 32 != 0) return "in_proj's or out_proj's K is not a multiple of 32";
  if (s.hidden > norm_row::kHeldMaxWidth) return "hidden size above the held norm's width";
  if (s.inner() % s.groups != 0 || s.inner() / s.groups > norm_row::kHeldMaxWidth)
    return "a gated-norm group above the held norm's width";
  if (s.heads % s.groups != 0) return "heads not a multiple of the groups";
  if (s.conv_kernel < 2 || s.conv_kernel > kConvEpilogueTaps) return "conv kernel outside 2..4";
  if (s.state % 4 != 0 || s.state > ssd::kMaxTileFloats) return "state size not a multiple of 4";
  if (s.exact && (s.cell < 1 || s.cell > kMaxCell)) return "an exact cell outside 1..256";
  const int sms = sm_count();
  const Layout lo = layout_of(s);
  for (int n : {s.proj(), s.hidden}) {
    const int most = (tasks_of(n) + sms - 1) / sms;
    if (most > kConsumers) return "more 16-column tasks per SM than consumer warps";
    if (lo.ring_bytes < 2 * static_cast<std::size_t>(kTaskBoxBytes) * most) return "no room for two stages of weights";
  }
  const std::size_t smem = lo.total;
  if (smem > static_cast<std::size_t>(kMaxSmem)) return "shared memory above the SM's";
  allow_smem(smem);
  if (blocks_per_sm(persistent_decode_kernel, kThreads, smem) < 1) return "no block fits on an SM";
  return {};
}

void persistent_layer_maps(PersistentMambaLayer& l, const PersistentDecodeShape& s) {
  const int sms = sm_count();
  // Box rows: 16 columns a task, for blocks of `few` and of few + 1 tasks (a box needs one row at least).
  auto maps = [&](const uint16_t* w, int N, int K, CUtensorMap (&m)[2]) {
    const int few = tasks_of(N) / sms;
    for (int i = 0; i < 2; ++i) m[i] = bf16_rows_tensor_map(w, K, N, 1, 0, 16 * std::max(1, few + i));
  };
  maps(l.in_w, s.proj(), s.hidden, l.in_maps);
  maps(l.out_w, s.hidden, s.inner(), l.out_maps);
}

void persistent_decode_step(const PersistentDecode& job, cudaStream_t s) {
  const std::size_t smem = layout_of(job.shape).total;
  allow_smem(smem);
  cuda_check(cudaMemsetAsync(job.barrier, 0, sizeof(unsigned), s), "persistent decode: barrier");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(sm_count()));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident at once: the grid barriers need it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cuda_check(cudaLaunchKernelEx(&cfg, persistent_decode_kernel, job), "persistent decode");
}

}  // namespace parity::cuda
