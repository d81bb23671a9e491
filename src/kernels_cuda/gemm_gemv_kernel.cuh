#pragma once
// The decode GEMM's device code (gemm_gemv.cu has the why, the bits and the launch): one block per
// SM owns a contiguous range of W's rows (output columns). One producer warp streams 64-deep boxes of
// the block's rows of W (one TMA instruction, 128-byte swizzle) and of A's M fp32 rows (one bulk copy
// per row) into a ring of stages; each consumer warp owns up to TPW 8-column tiles and runs
// one m16n8k16 chain per tile, the weights as the B (n8) operand and A's rows as the A (m16) operand,
// exactly the orientation of the mma tiles (gemm_mma.cu). A is rounded to bf16 in registers.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels_cuda/ptx.cuh"

namespace parity::cuda::gemv {

using u64 = std::uint64_t;

// CW consumer warps of up to TPW 8-column tiles each; BPS blocks per SM. PDL: launched with
// programmatic serialization (gemm_gemv.cu): the block's set-up and an L2 prefetch of its first
// stages of W overlap the end of the kernel before. L2AHEAD: with each box copied into the ring,
// the box one ring further on is prefetched into L2 (twice the ring's bytes in flight).
template <int CW, int TPW, int BPS, bool PDL = false, bool L2AHEAD = false>
struct Shape {
  static constexpr int kConsumerWarps = CW, kTilesPerWarp = TPW, kBlocksPerSm = BPS;
  static constexpr bool kPdl = PDL, kL2Ahead = L2AHEAD;
  static constexpr int kMaxPassRows = 8 * CW * TPW;  // W rows a pass may compute
  static constexpr int kThreads = 32 * CW + 32;      // the producer warp last
  // 227 KiB of shared memory per SM, less 1 KiB the system keeps per block and 1 KiB to align.
  static constexpr int kRing = BPS == 1 ? 200 * 1024 : 100 * 1024;
  static_assert(kMaxPassRows <= 256, "a pass is one TMA box");
};
constexpr int kMaxStages = 32;
constexpr int kMaxRows = 16;  // one m16 tile of A's rows
// A row of a stage: 64 fp32 and 32 bytes of padding. Lane (g, q) of a warp reads 8 bytes of row g
// at byte 8q (+64·step, +32): with rows 72 words apart, a half-warp's rows g = 0..3 cover the 32
// banks once (8g + 2q + {0, 1}), so the A loads are conflict-free.
constexpr int kARowBytes = 288;

// Benchmark probes that time one side alone (their outputs are not the GEMM's). LoadsOnly: the ring
// streams, the consumers only wait for and release each stage. ComputeOnly: nothing is copied or
// waited for, the consumers read fragments and multiply whatever the ring holds.
enum class Probe { None = 0, LoadsOnly = 1, ComputeOnly = 2 };

// One launch's geometry, the same for every block (gemm_gemv.cu's geometry()).
struct Geo {
  int pass_rows;  // W rows a pass computes and a box holds (even, <= Shape::kMaxPassRows)
  int w_slot;     // bytes of a stage's W box: pass_rows rounded up to 8, times 128 (1024-byte multiple)
  int a_slot;     // bytes of a stage's A rows: M · kARowBytes
  int stages;
  int units;      // 2-row units of N: block b of G owns units [units·b/G, units·(b+1)/G)
};

// Where the product goes: C (row stride ldc) = A · Wᵀ (+ bias), or with add C = C + (A · Wᵀ (+ bias)),
// the sum a separate add_inplace(C, product) would compute (one fp32 add of the same two values).
// pair_store: ldc even and C 8-byte aligned, so a thread's two adjacent columns go out as one float2.
struct Out {
  float* C;
  int ldc;
  const float* bias;
  bool add, pair_store;
};

// Columns n and n + 1 (n even) of one row of C from a thread's two accumulators; columns at or past
// `end` are not the block's. The bias is added once to each (its one rounding after the K chain).
__device__ __forceinline__ void store_pair(const Out& o, int m, int n, int end, float v0, float v1) {
  float* crow = o.C + static_cast<std::size_t>(m) * o.ldc;
  const bool has1 = n + 1 < end;
  if (o.bias) {
    v0 = v0 + o.bias[n];
    if (has1) v1 = v1 + o.bias[n + 1];
  }
  if (o.pair_store && has1) {
    float2* p = reinterpret_cast<float2*>(crow + n);
    if (o.add) {
      const float2 x = *p;
      v0 = x.x + v0;
      v1 = x.y + v1;
    }
    *p = make_float2(v0, v1);
  } else {
    crow[n] = o.add ? crow[n] + v0 : v0;
    if (has1) crow[n + 1] = o.add ? crow[n + 1] + v1 : v1;
  }
}

// Two adjacent fp32 of A at a shared address, rounded to bf16 round-to-nearest-even (the pre-pass's
// rounding, with_bf16_rows in gemm_mma.cu) and packed as an mma operand register, the lower column
// in the lower half.
__device__ __forceinline__ unsigned a_pair(unsigned addr) {
  const float2 f = ptx::ld_shared_f2(addr);
  const __nv_bfloat162 h = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const unsigned*>(&h);
}

// The ring's stage cursor: stage s of `stages`, and the parity of the round it is in.
struct Cursor {
  int s = 0;
  unsigned phase = 0;
  __device__ __forceinline__ void next(int stages) {
    if (++s == stages) {
      s = 0;
      phase ^= 1u;
    }
  }
};

// The producer warp: for each pass and 64-deep box of K in order, waits until the consumers
// released the stage's previous round, then copies the pass's W box (pass_rows rows from r0: rows
// past the block's range, the neighbour's or zeros past N, come along and are never stored; K past
// the matrix lands as zeros; all of it counts as bytes) and the box's slice of A's M rows (only
// the real K: a 32-deep last box copies 128 bytes a row).
// An L2 prefetch of W's 64-deep box at (k, row) through the tensor map: no shared memory, no barrier.
__device__ __forceinline__ void prefetch_box_l2(const CUtensorMap* wmap, int k, int row) {
  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(wmap), "r"(k), "r"(row),
               "r"(0)
               : "memory");
}

template <Probe P, bool PDL, bool L2AHEAD>
__device__ __forceinline__ void produce(const CUtensorMap* wmap, const float* A, int M, int K, int lda, int lo, int hi,
                                        const Geo& g, unsigned wring, unsigned aring, u64* full, u64* empty,
                                        int lane) {
  if constexpr (P == Probe::ComputeOnly) return;
  const int kboxes = (K + 63) / 64;
  if (lane == 0) {
    ptx::prefetch_tensor_map(wmap);
    if constexpr (PDL) {
      // The weights are no output of the kernel before, and a prefetch into L2 (the device's point of
      // coherence) cannot bring a stale copy, so the first ring's worth of W may start now. Nothing
      // lands in shared memory and nothing of A is read before griddepcontrol.wait.
      for (int b = 0; b < min(kboxes, g.stages); ++b) prefetch_box_l2(wmap, 64 * b, lo);
    }
  }
  if constexpr (PDL) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  Cursor c;
  int it = 0;
  for (int r0 = lo; r0 < hi; r0 += g.pass_rows)
    for (int b = 0; b < kboxes; ++b, ++it, c.next(g.stages)) {
      if (it >= g.stages) ptx::mbar_wait(&empty[c.s], c.phase ^ 1u);
      const int kd = min(64, K - 64 * b);
      if (lane == 0) {
        ptx::mbar_arrive_expect_tx(&full[c.s], static_cast<unsigned>(g.pass_rows * 128 + M * kd * 4));
        ptx::tma_load_3d(wring + c.s * g.w_slot, wmap, 64 * b, r0, 0, &full[c.s]);
        if constexpr (L2AHEAD) {
          if (b + g.stages < kboxes) prefetch_box_l2(wmap, 64 * (b + g.stages), r0);
        }
      }
      __syncwarp();
      if (lane < M) {
        const unsigned dst = aring + c.s * g.a_slot + lane * kARowBytes;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
            "l"(A + static_cast<std::size_t>(lane) * lda + 64 * b), "r"(kd * 4), "r"(ptx::smem_addr(&full[c.s]))
            : "memory");
      }
    }
}

// A box's operands: a[kk] the m16k16 fragment of A's rows for step kk (rows g + 8 only when M > 8,
// else zeros), b[j][kk] the k16n8 fragment of the warp's tile j; the stage they were read from.
template <int TPW>
struct Frag {
  unsigned a[4][4];
  unsigned b[TPW][4][2];
  int stage;
};

// A consumer warp: tiles warp, warp + CW, … of each pass (8 W rows each).
template <typename Sh, bool M16, Probe P>
__device__ __forceinline__ void consume(int M, int K, int lo, int hi, const Out& o, const Geo& g, unsigned wring, unsigned aring, u64* full,
                                        u64* empty, int warp, int lane) {
  constexpr int kCW = Sh::kConsumerWarps, kTPW = Sh::kTilesPerWarp;
  constexpr bool kWait = P != Probe::ComputeOnly, kCompute = P != Probe::LoadsOnly;
  using F = Frag<kTPW>;
  const int gr = lane / 4, q = lane % 4;
  const int kboxes = (K + 63) / 64, whole = K / 64;  // K is a multiple of 32
  // ldmatrix: lane addresses row 8t + lane % 8 of the box at 16-byte chunk 4p + lane / 8 (swizzled:
  // chunk c of row r sits at c ^ (r % 8)); registers r0..r3 are b0, b1 of step 2p, then of 2p + 1.
  const unsigned wlane = static_cast<unsigned>(8 * warp + lane % 8) * 128;
  const unsigned chunk0 = ((0 + lane / 8) ^ (lane % 8)) << 4, chunk1 = ((4 + lane / 8) ^ (lane % 8)) << 4;
  // A: lane (gr, q) reads rows gr and gr + 8 at columns 16·kk + 2q (+8).
  const unsigned alane = gr * kARowBytes + q * 8;
  const bool row_lo = gr < M, row_hi = M16 && gr + 8 < M;
  Cursor c;

  for (int r0 = lo; r0 < hi; r0 += g.pass_rows) {
    const int rows = min(hi - r0, g.pass_rows), tiles = (rows + 7) / 8;
    bool has[kTPW];
#pragma unroll
    for (int j = 0; j < kTPW; ++j) has[j] = warp + kCW * j < tiles;

    // Waits for the next box's stage and reads its fragments into f (release(f) hands the stage back).
    auto load = [&](F& f) {
      if constexpr (kWait) ptx::mbar_wait(&full[c.s], c.phase);
      if constexpr (!kCompute) {
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(&empty[c.s]);
        c.next(g.stages);
        return;
      }
      const unsigned ws = wring + c.s * g.w_slot, as = aring + c.s * g.a_slot + alane;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const unsigned a = as + kk * 64;
        f.a[kk][0] = row_lo ? a_pair(a) : 0u;
        f.a[kk][2] = row_lo ? a_pair(a + 32) : 0u;
        f.a[kk][1] = row_hi ? a_pair(a + 8 * kARowBytes) : 0u;
        f.a[kk][3] = row_hi ? a_pair(a + 8 * kARowBytes + 32) : 0u;
      }
#pragma unroll
      for (int j = 0; j < kTPW; ++j)
        if (has[j]) {  // uniform over the warp
          const unsigned base = ws + wlane + j * (8 * kCW * 128);
          unsigned r[4];
          ptx::ldmatrix_x4(base + chunk0, r);
          f.b[j][0][0] = r[0];
          f.b[j][0][1] = r[1];
          f.b[j][1][0] = r[2];
          f.b[j][1][1] = r[3];
          ptx::ldmatrix_x4(base + chunk1, r);
          f.b[j][2][0] = r[0];
          f.b[j][2][1] = r[1];
          f.b[j][3][0] = r[2];
          f.b[j][3][1] = r[3];
        }
      f.stage = c.s;
      c.next(g.stages);
    };
    // The stage f was read from may be refilled: the arrival orders every lane's reads of it before
    // the producer's next copy. Called a box after the reads were issued, when they have long
    // landed, so the arrival does not hold the warp until its shared-memory loads return.
    auto release = [&](const F& f) {
      if constexpr (kWait && kCompute) {
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(&empty[f.stage]);
      }
    };

    float acc[kTPW][4];
#pragma unroll
    for (int j = 0; j < kTPW; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    auto step = [&](const F& f, int kk) {
#pragma unroll
      for (int j = 0; j < kTPW; ++j)
        if (kCompute && has[j]) ptx::mma_bf16(acc[j], f.a[kk], f.b[j][kk]);
    };
    // Box b from cur: its step 0, the release of its stage, then box b + 1's stage into nxt (read
    // while step 0 is in flight: step 1 depends on it), then steps 1..3; a 32-deep last box runs its
    // two real steps only (a step on the zero half could turn a -0 accumulator into +0).
    auto box = [&](F& cur, F& nxt, int b) {
      step(cur, 0);
      release(cur);
      if (b + 1 < kboxes) load(nxt);
      step(cur, 1);
      if (b < whole) {
        step(cur, 2);
        step(cur, 3);
      }
    };
    F f0, f1;  // alternate as cur and nxt: no copy between boxes
    load(f0);
    for (int b = 0; b < kboxes; b += 2) {
      box(f0, f1, b);
      if (b + 1 < kboxes) box(f1, f0, b + 1);
    }

    // acc[j][2h + e]: row gr + 8h of A, column 2q + e of tile j.
#pragma unroll
    for (int j = 0; j < kTPW; ++j) {
      if (!kCompute || !has[j]) continue;
      const int n = r0 + 8 * (warp + kCW * j) + 2 * q;
#pragma unroll
      for (int h = 0; h < (M16 ? 2 : 1); ++h) {
        const int m = gr + 8 * h;
        if (m < M && n < r0 + rows) store_pair(o, m, n, r0 + rows, acc[j][2 * h], acc[j][2 * h + 1]);
      }
    }
  }
}

// Block b owns W rows [lo, hi): 2-row units [units·b/G, units·(b+1)/G) (every start even, so the
// pair stores stay 8-byte aligned), computed in passes of up to pass_rows.
template <typename Sh, bool M16, Probe P = Probe::None>
__global__ void __launch_bounds__(Sh::kThreads, Sh::kBlocksPerSm)
    gemv_kernel(const __grid_constant__ CUtensorMap wmap, const float* __restrict__ A, int M, int K, int lda, int N,
                Out o, Geo g) {
  extern __shared__ unsigned char smem_raw[];
  static_assert(Sh::kThreads >= kMaxStages, "a thread per stage initialises its barriers");
  __shared__ u64 full[kMaxStages], empty[kMaxStages];
  // 1024-byte aligned: the 128-byte swizzle repeats every 8 rows of 128 bytes from such an address.
  const unsigned wring = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned aring = wring + g.stages * g.w_slot;
  const long G = gridDim.x, b = blockIdx.x;
  const int lo = min(N, static_cast<int>(2 * (g.units * b / G))), hi = min(N, static_cast<int>(2 * (g.units * (b + 1) / G)));
  if (hi <= lo) return;  // the whole block
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Consumer warps with a tile in the first (largest) pass; the others leave at once.
  const int first_tiles = (min(hi - lo, g.pass_rows) + 7) / 8;
  const int consumers = min(Sh::kConsumerWarps, first_tiles);
  if (threadIdx.x < g.stages) {  // one thread per stage
    ptx::mbar_init(&full[threadIdx.x], 1);           // the producer's expect_tx arrival
    ptx::mbar_init(&empty[threadIdx.x], consumers);  // one arrival per working consumer warp
    ptx::mbar_init_fence();
  }
  __syncthreads();
  if (warp == Sh::kConsumerWarps) {
    produce<P, Sh::kPdl, Sh::kL2Ahead>(&wmap, A, M, K, lda, lo, hi, g, wring, aring, full, empty, lane);
  } else if (warp < consumers) {
    // Programmatic launch: no read of A or C and no store before the kernel before has completed
    // (the producer's A copies already wait; this keeps every thread's own accesses after it too).
    if constexpr (Sh::kPdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    consume<Sh, M16, P>(M, K, lo, hi, o, g, wring, aring, full, empty, warp, lane);
  }
}

}  // namespace parity::cuda::gemv
