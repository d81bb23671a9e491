#pragma once
// The swap-AB GEMM on mma.sync (gemm_swap_ab.cu has the why and the bits): the same producer and
// ring as the wgmma kernel (gemm_swap_ab_kernel.cuh), but each consumer warp owns 16 output columns
// (16 rows of W, mma.sync's m16 side) and takes A's rows as n8 tiles. For long K with few columns
// (out_proj: K = 5120, 2560 columns) the chain of K/16 dependent steps per output bounds the pass,
// and a dependent mma.sync step is several times shorter than a dependent wgmma step; 16 columns
// per warp also make 4× more blocks than 64 per warpgroup. The fragments of box b + 1 are read
// (and its stage released) while the tensor cores run box b's steps.
#include "kernels_cuda/conv_row.cuh"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/norm_row.cuh"
#include "kernels_cuda/gemm_swap_ab_group.cuh"
#include "kernels_cuda/gemm_swap_ab_kernel.cuh"

namespace parity::cuda::swap_ab {

constexpr int kMmaMaxStages = 48;

// CW consumer warps (16 output columns each) for each of RW row warps, NT rows of A a warp (8, 16 or 32:
// n8 tiles whose fragments for a whole box stay in registers), BPS blocks per SM. A block computes RW · NT
// rows: its row warps read the same W box (one stream of weights for RW times the rows) and each its own
// NT rows of A's box.
template <int CW, int NT, int BPS, int RW = 1>
struct MmaConfig {
  static constexpr int kCols = 16 * CW;
  static constexpr int kRows = NT * RW;               // a block's rows
  static constexpr int kWarps = CW * RW;              // consumer warps
  static constexpr int kThreads = 32 * kWarps + 32;  // the producer warp last
  static constexpr int kWBytes = kCols * 128;         // a 64-deep box of the block's W rows: 2 KiB a column warp
  static constexpr int kXBytes = kRows * 128;         // a 64-deep box of the block's rows of A in bf16
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kRing = BPS == 1 ? 200 * 1024 : BPS == 2 ? 108 * 1024 : BPS == 4 ? 52 * 1024 : 24 * 1024;
  // Up to kMmaMaxStages: a block alone on its SM (out_proj's 80 or 160 blocks) keeps its whole ring of
  // small boxes in flight.
  static constexpr int kStages = kRing / kStageBytes < kMmaMaxStages ? kRing / kStageBytes : kMmaMaxStages;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;
  static_assert(NT == 8 || NT == 16 || NT == 32, "n8 tiles held for a whole box");
  static_assert(kStageBytes % 1024 == 0, "every box swizzle-aligned");
  static_assert(kStages >= 3, "one stage being read, one in flight, one filling");
};

// LAG: the consumer schedule of the 8-column decode kernel (gemm_gemv_kernel.cuh) instead: box b's
// stage is released after box b's first step (its fragments were read a box earlier and have landed),
// not right after the reads (an arrival holds the warp until its shared-memory loads return, and here
// that sat between two dependent steps), and box b + 1's barrier is tested before step 1 and its answer
// used after it. The same steps in the same order: only when the waits happen changes.
//
// CONV (NT = 8): in_proj's conv epilogue (conv_epilogue.h) for the columns in ep's ranges; each lane
// reads what its columns need before the chain, so the epilogue adds no memory round trip.
//
// PROBE (benchmarks: BM_CudaGemmSwapAbProbe): lane 0 of each consumer warp writes kProbeFields clock
// counts to probe[(block · CW + warp) · kProbeFields]: from its start to its first box's fragments, to
// the end of its step loop, the cycles spent in the loop waiting on a stage's barrier, and the boxes.
// Loop less wait is what the chain itself took.
constexpr int kProbeFields = 4;
//
// GNORM (NT = 8, M = 1; gated_a.h): A's one row is the gated RMSNorm of ga, computed by the block
// itself: 256 threads (norm_row.cuh's block), the consumer warps first, the producer warp last, the
// warps between exit once the row is on chip. The row sits after the ring, box b's 64 values at bytes
// 128 b, no swizzle (row 0 of a box has none), and the n8 tile's other seven rows read a zero row, as
// the TMA unit's zero fill would give them; the producer streams W's boxes alone.
constexpr int kGatedThreads = norm_row::kRowThreads;
// A's row after the ring: K values, a box's slack (a 32-deep last box's unused half), a zero row.
__host__ __device__ constexpr int gated_row_bytes(int K) { return (2 * K + 127) / 128 * 128 + 128; }
__host__ __device__ constexpr int gated_region_bytes(int K) { return gated_row_bytes(K) + 128; }

// GNORM's producer, W's boxes only: the ring's first before the wait (returns how many), the rest
// after the row is on chip.
template <int S, int kStageBytes, int kWBytes>
__device__ __forceinline__ int produce_w_first(unsigned ring, u64* full, const CUtensorMap* wmap, int kboxes, int n0) {
  ptx::prefetch_tensor_map(wmap);
  const int first = kboxes < S ? kboxes : S;
  for (int b = 0; b < first; ++b) {
    ptx::mbar_arrive_expect_tx(&full[b], kWBytes);
    ptx::tma_load_3d(ring + b * kStageBytes, wmap, 64 * b, n0, 0, &full[b]);
  }
  return first;
}
template <int S, int kStageBytes, int kWBytes>
__device__ __forceinline__ void produce_w_rest(unsigned ring, u64* full, u64* empty, const CUtensorMap* wmap,
                                               int kboxes, int n0, int first) {
  for (int b = first; b < kboxes; ++b) {
    const int s = b % S;
    if (b >= S) ptx::mbar_wait(&empty[s], ((b / S) - 1) & 1);
    ptx::mbar_arrive_expect_tx(&full[s], kWBytes);
    ptx::tma_load_3d(ring + s * kStageBytes, wmap, 64 * b, n0, 0, &full[s]);
  }
}

// GROUP > 0 (gemm_swap_ab_group.cuh): the grouped consumer, GROUP boxes a barrier round, a group's
// fragments read a group ahead (NT = 8 or 16; LAG must be false); BAR = GROUP: one barrier pair a group's
// stages (the ring then uses a multiple of GROUP stages).
//
// RW > 1 (session 39): RW row warps a column warp, warp w = rw · CW + cw; the ring's stages are released
// once every consumer warp has read them. Each warp runs the RW = 1 chain on its own rows.
template <int CW, int NT, int BPS, bool LAG = false, bool CONV = false, bool PROBE = false, bool GNORM = false,
          int GROUP = 0, int BAR = 1, int RW = 1>
__global__ void __launch_bounds__(GNORM ? kGatedThreads : MmaConfig<CW, NT, BPS, RW>::kThreads, GNORM ? 1 : BPS)
    swap_ab_mma_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, int M,
                       int K, int N, const float* __restrict__ bias, float* __restrict__ C, int ldc, unsigned early,
                       NextL2 next, const __grid_constant__ ConvEpilogue ep, long long* __restrict__ probe,
                       const __grid_constant__ GatedA ga) {
  static_assert(!CONV || NT == 8, "the conv epilogue's lanes hold two rows of one n8 tile");
  static_assert(!GNORM || (NT == 8 && !CONV && !PROBE && CW <= 7), "the norm's row is one n8 tile's row 0");
  static_assert(GROUP == 0 || (!LAG && NT <= 16), "the grouped consumer holds two groups of fragments");
  static_assert(BAR == 1 || (BAR == GROUP && !GNORM), "a barrier pair a group: the grouped consumer, W and A streamed");
  static_assert(RW == 1 || (!CONV && !PROBE && !GNORM), "row warps: the GEMM alone");
  using Cfg = MmaConfig<CW, NT, BPS, RW>;
  constexpr int S = Cfg::kStages / BAR * BAR, T = NT / 8;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[S], empty[S];
  const unsigned ring = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This warp's 16 columns (cw) and NT rows (rw) of the block's; the block's rows from mb.
  const int cw = warp % CW, rw = warp / CW;
  const int n0 = column_block() * Cfg::kCols, mb = row_tile() * Cfg::kRows, m0 = mb + rw * NT;
  const int kboxes = (K + 63) / 64, whole = K / 64;  // K is a multiple of 32

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      ptx::mbar_init(&full[s], 1);    // the producer's expect_tx arrival
      ptx::mbar_init(&empty[s], Cfg::kWarps);  // one arrival per consumer warp
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();
  // GNORM: A's row (and the zero row) after the ring.
  const unsigned arow = ring + S * Cfg::kStageBytes, zrow = arow + gated_row_bytes(K);
  if constexpr (GNORM) {
    constexpr int kProducer = kGatedThreads / 32 - 1;
    float wk[norm_row::kHeld];
    norm_row::load_held_weights(ga.w, ga.group, wk);  // before the wait: no kernel writes them
    int first = 0;
    if (warp == kProducer && lane == 0) first = produce_w_first<S, Cfg::kStageBytes, Cfg::kWBytes>(ring, full, &wmap, kboxes, n0);
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (early & kEarlyRelease) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    unsigned char* base = smem_raw + (arow - ptx::smem_addr(smem_raw));
    uint16_t* row16 = reinterpret_cast<uint16_t*>(base);
    for (int i = 2 * K + static_cast<int>(threadIdx.x) * 4; i < gated_region_bytes(K); i += kGatedThreads * 4)
      *reinterpret_cast<unsigned*>(base + i) = 0u;  // the slack and the zero row (2K is a multiple of 64)
    norm_row::gated_norm_held(
        ga.y, ga.z, ga.group, wk, ga.eps, ga.norm_before_gate, [&](int i, float v) { row16[i] = norm_row::bf16_bits(v); },
        ga.z_activated);
    __syncthreads();  // the row is on chip before any consumer reads it
    if (warp == kProducer) {
      if (lane == 0) produce_w_rest<S, Cfg::kStageBytes, Cfg::kWBytes>(ring, full, empty, &wmap, kboxes, n0, first);
      return;
    }
    if (warp >= CW) return;
  } else if (warp == Cfg::kWarps) {
    if (lane == 0) {
      if constexpr (BAR > 1)
        produce_units<S, BAR, Cfg::kStageBytes, Cfg::kWBytes>(ring, full, empty, &wmap, &xmap, kboxes, n0, mb, early, next);
      else
        produce<S, Cfg::kStageBytes, Cfg::kWBytes>(ring, full, empty, &wmap, &xmap, kboxes, n0, mb, early, next);
    }
    return;
  }

  // Parked until the kernel before has completed (its ring cannot fill before: A's boxes come after the
  // producer's wait).
  if (early & kEarlyPark) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // A box's operands. a[kk]: m16n8k16's A fragment of step kk (this warp's 16 W rows); b[kk][j]: the
  // B fragment of step kk for n8 tile j (A's rows 8j..8j+7).
  struct Frag {
    unsigned a[4][4];
    unsigned b[4][T][2];
  };
  // ldmatrix addresses in the 128-byte swizzle (chunk c of box row r at chunk c ^ (r % 8)). W: lanes
  // 0-15 rows 0-15 of the warp's tile at chunk 2kk, lanes 16-31 the same rows at chunk 2kk + 1
  // (registers a0..a3). A's rows: lanes address row 8j + lane % 8 at chunk 4p + lane / 8 (registers:
  // b0, b1 of step 2p, then of step 2p + 1).
  const int wr = 16 * cw + lane % 16, xr = lane % 8, xw = rw * NT;  // xw: this warp's first row in A's box
  // Box b's fragments from its stage s = b % S (landed). The grouped consumer's steady state passes s
  // from a running count (no division in its loop).
  auto read_at = [&](Frag& f, int b, int s) {
    const unsigned st = ring + s * Cfg::kStageBytes, xs = st + Cfg::kWBytes;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) ptx::ldmatrix_x4(st + wr * 128 + (((2 * kk + lane / 16) ^ (wr & 7)) << 4), f.a[kk]);
#pragma unroll
    for (int j = 0; j < T; ++j)
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        unsigned r[4];
        if constexpr (GNORM) ptx::ldmatrix_x4((xr == 0 ? arow + b * 128 : zrow) + ((4 * p + lane / 8) << 4), r);
        else ptx::ldmatrix_x4(xs + (xw + 8 * j + xr) * 128 + (((4 * p + lane / 8) ^ xr) << 4), r);
        f.b[2 * p][j][0] = r[0];
        f.b[2 * p][j][1] = r[1];
        f.b[2 * p + 1][j][0] = r[2];
        f.b[2 * p + 1][j][1] = r[3];
      }
  };
  auto read = [&](Frag& f, int b) { read_at(f, b, b % S); };
  long long t_start = 0, t_first = 0, t_wait = 0;
  if constexpr (PROBE) t_start = clock64();
  auto wait_full = [&](int b) { ptx::mbar_wait_timed<PROBE>(&full[b % S], (b / S) & 1, t_wait); };
  auto load = [&](Frag& f, int b) {
    const int s = b % S;
    wait_full(b);
    read(f, b);
    // The fragments are read: the stage may be refilled (the arrival orders the reads before it).
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(&empty[s]);
  };

  // acc[0][2h + e] below: column n0 + 16 warp + g + 8h, row m0 + 2q + e (g = lane / 4, q = lane % 4).
  ConvColumn conv[2];
  if constexpr (CONV) {
#pragma unroll
    for (int h = 0; h < 2; ++h) conv_column_load(ep, M, m0 + 2 * (lane % 4), n0 + 16 * cw + lane / 4 + 8 * h, conv[h]);
  }
  float acc[T][4];
#pragma unroll
  for (int j = 0; j < T; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  auto step = [&](const Frag& f, int kk) {
#pragma unroll
    for (int j = 0; j < T; ++j) ptx::mma_bf16(acc[j], f.a[kk], f.b[kk][j]);
  };
  if constexpr (GROUP > 0) {
    group_consumer<GROUP, BAR, S, PROBE, Frag>(read_at, step, full, empty, lane, kboxes, whole, t_first, t_wait);
  } else if constexpr (LAG) {
    // Box b from cur: step 0, the release of its stage and a test of box b + 1's barrier, step 1, box
    // b + 1's fragments into nxt (waiting first only if the test said no), steps 2 and 3 (a 32-deep
    // last box runs its two real steps only).
    auto box = [&](Frag& cur, Frag& nxt, int b) {
      step(cur, 0);
      __syncwarp();
      ptx::mbar_arrive_lane0(&empty[b % S], lane);
      const int b1 = b + 1;
      const bool more = b1 < kboxes;
      bool ready = false;
      if (more) ready = ptx::mbar_test(&full[b1 % S], (b1 / S) & 1);
      step(cur, 1);
      if (more) {
        if (!ready) wait_full(b1);
        read(nxt, b1);
      }
      if (b < whole) {
        step(cur, 2);
        step(cur, 3);
      }
    };
    Frag f0, f1;  // alternate as cur and nxt: no copy between boxes
    ptx::mbar_wait(&full[0], 0);
    read(f0, 0);
    if constexpr (PROBE) t_first = clock64();
    for (int b = 0; b < kboxes; b += 2) {
      box(f0, f1, b);
      if (b + 1 < kboxes) box(f1, f0, b + 1);
    }
  } else {
    Frag cur, nxt;
    load(cur, 0);
    if constexpr (PROBE) {
      t_first = clock64();
      t_wait = 0;
    }
    for (int b = 0; b < kboxes; ++b) {
      // Step 0 of box b, then box b + 1's loads (issued while step 0's result is pending: the next
      // step depends on it), then steps 1..3. A 32-deep last box runs its two real steps only (a step
      // on zeros could turn a -0 accumulator into +0).
#pragma unroll
      for (int j = 0; j < T; ++j) ptx::mma_bf16(acc[j], cur.a[0], cur.b[0][j]);
      if (b + 1 < kboxes) load(nxt, b + 1);
      const bool four = b < whole;
#pragma unroll
      for (int kk = 1; kk < 4; ++kk)
        if (kk < 2 || four)
#pragma unroll
          for (int j = 0; j < T; ++j) ptx::mma_bf16(acc[j], cur.a[kk], cur.b[kk][j]);
      cur = nxt;
    }
  }

  if constexpr (PROBE) {
    // The last step's results first: the loop's end is when the chain is done, not when it was issued.
    float last = 0.0f;
#pragma unroll
    for (int j = 0; j < T; ++j) last += acc[j][0] + acc[j][3];
    unsigned u;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(u) : "r"(__float_as_uint(last)));
    long long t_end;
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t_end) : "r"(u));
    if (lane == 0) {
      const std::size_t block = static_cast<std::size_t>(row_tile()) * gridDim.y + column_block();
      long long* o = probe + (block * CW + warp) * kProbeFields;
      o[0] = t_first - t_start;
      o[1] = t_end - t_start;
      o[2] = t_wait;
      o[3] = kboxes;
    }
  }
  // acc[j][2h + e]: tile row g + 8h (output column n), tile column 2q + e of n8 tile j (row m of A).
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = n0 + 16 * cw + g + 8 * h;
    if (n >= N) continue;
    const float bn = bias ? bias[n] : 0.0f;
#pragma unroll
    for (int j = 0; j < T; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = m0 + 8 * j + 2 * q + e;
        if (m >= M) continue;
        const float v = bias ? acc[j][2 * h + e] + bn : acc[j][2 * h + e];
        C[static_cast<std::size_t>(m) * ldc + n] = v;
        if constexpr (CONV) conv_column_store(ep, conv[h], e, m, v);
      }
  }
}

}  // namespace parity::cuda::swap_ab
