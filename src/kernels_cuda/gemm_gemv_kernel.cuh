#pragma once
// The decode GEMM's device code (gemm_gemv.cu has the why, the bits and the launch): one block per
// SM owns a contiguous range of W's rows (output columns). At the start the consumer warps round A's
// M fp32 rows to bf16 into shared memory, where they stay for the whole pass (each block reads A
// once, in whole rows); one producer warp streams 64-deep boxes of the block's rows of W (one TMA
// instruction each, 128-byte swizzle) into a ring of stages. Each consumer warp owns TPW 8-column
// tiles and runs one m16n8k16 chain per tile, A's rows as the A (m16) operand and W's rows as the B
// (n8) operand: the mma tiles' own orientation (gemm_mma.cu). The hot loop holds no branch that
// depends on the warp or the lane: A rows past M and tiles past the pass are clamped onto real
// ones (their outputs are never stored), so every lane and warp runs the same instructions.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/ring_cursor.h"

namespace parity::cuda::gemv {

using u64 = std::uint64_t;

constexpr int kConsumerWarps = 16;
constexpr int kThreads = 32 * kConsumerWarps + 32;  // the producer warp last
constexpr int kMaxStages = 32;
// Shared memory for A's rows and the ring, one block per SM: 227 KiB, less 1 KiB the system keeps
// per block, 1 KiB to align and the static barriers.
constexpr int kSmemBudget = 200 * 1024;
// A's rows may take at most this much of it (the rest is the ring): gemm_gemv_takes.
constexpr int kABudget = 96 * 1024;

// The most W rows a pass of TPW tiles per warp computes.
template <int TPW>
constexpr int max_pass_rows() {
  return 8 * kConsumerWarps * TPW;
}

// Benchmark probes that time one side alone (their outputs are not the GEMM's). LoadsOnly: the ring
// streams, the consumers only wait for and release each stage. ComputeOnly: nothing is copied or
// waited for, the consumers read fragments and multiply whatever the ring holds.
enum class Probe { None = 0, LoadsOnly = 1, ComputeOnly = 2 };

// One launch's geometry, the same for every block (gemm_gemv.cu's geometry()).
struct Geo {
  int pass_rows;  // W rows a pass computes and a box holds (even, <= max_pass_rows<TPW>())
  int w_slot;     // bytes of a stage's W box: pass_rows rounded up to 8, times 128 (1024-byte multiple)
  int stages;
  int units;      // 2-row units of N: block b of G owns units [units·b/G, units·(b+1)/G)
  int a_stride;   // bytes from one bf16 row of A to the next in shared memory: 2K + 16
  int a_bytes;    // A's region, a 1024-byte multiple; the ring follows it
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

// The producer (lane 0 of the last warp): for each pass and 64-deep box of K in order, waits until
// the consumers released the stage's previous round, then copies the pass's W box (pass_rows rows
// from r0: rows past the block's range, the neighbour's or zeros past N, come along and are never
// stored; K past the matrix lands as zeros; all of it counts as bytes).
template <Probe P>
__device__ __forceinline__ void produce(const CUtensorMap* wmap, int K, int lo, int hi, const Geo& g, unsigned wring,
                                        u64* full, u64* empty) {
  if constexpr (P == Probe::ComputeOnly) return;
  const int kboxes = (K + 63) / 64;
  ptx::prefetch_tensor_map(wmap);
  // Programmatic launch (PDL): the producer reads nothing but the weights, which no kernel of the
  // pass writes, so it does not wait for the kernel before: the first ring of W boxes lands in
  // shared memory while that kernel finishes. Only the consumers, which read A, wait.
  Cursor c;
  int it = 0;
  for (int r0 = lo; r0 < hi; r0 += g.pass_rows)
    for (int b = 0; b < kboxes; ++b, ++it, c.next(g.stages)) {
      if (it >= g.stages) ptx::mbar_wait(&empty[c.s], c.phase ^ 1u);
      ptx::mbar_arrive_expect_tx(&full[c.s], static_cast<unsigned>(g.pass_rows * 128));
      ptx::tma_load_3d(wring + c.s * g.w_slot, wmap, 64 * b, r0, 0, &full[c.s]);
    }
}

// A's M fp32 rows [M][lda] rounded to bf16 round-to-nearest-even (the pre-pass's rounding,
// with_bf16_rows in gemm_mma.cu) into shared memory at `abase`, row stride a_stride; `threads`
// threads from `tid`, 8 elements (two float4 in, one 16-byte store) a chunk. A thread issues the
// loads of up to kU chunks before it converts any: one L2 round trip per kU chunks, not per chunk
// (A's rows are read by every block at once, so each load waits long).
__device__ __forceinline__ void round_a(const float* A, int M, int K, int lda, unsigned char* abase, int a_stride,
                                        int tid, int threads) {
  constexpr int kU = 8;
  const int per_row = K / 8, total = M * per_row;
  for (int e0 = tid; e0 < total; e0 += threads * kU) {
    float4 x[kU][2];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int e = e0 + u * threads;
      if (e < total) {
        const float4* src =
            reinterpret_cast<const float4*>(A + static_cast<std::size_t>(e / per_row) * lda + (e % per_row) * 8);
        x[u][0] = src[0];
        x[u][1] = src[1];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int e = e0 + u * threads;
      if (e < total) {
        const __nv_bfloat162 p[4] = {__floats2bfloat162_rn(x[u][0].x, x[u][0].y), __floats2bfloat162_rn(x[u][0].z, x[u][0].w),
                                     __floats2bfloat162_rn(x[u][1].x, x[u][1].y), __floats2bfloat162_rn(x[u][1].z, x[u][1].w)};
        *reinterpret_cast<uint4*>(abase + (e / per_row) * a_stride + (e % per_row) * 16) = *reinterpret_cast<const uint4*>(p);
      }
    }
  }
}

// A box's operands: a[kk] the m16k16 fragment of A's rows for step kk, b[j][kk] the k16n8 fragment
// of the warp's tile slot j; the stage they were read from.
template <int TPW>
struct Frag {
  unsigned a[4][4];
  unsigned b[TPW][4][2];
  int stage;
};

// A consumer warp of `consumers`: tile slots warp, warp + consumers, … of each pass (8 W rows each).
template <int TPW, Probe P>
__device__ __forceinline__ void consume(int M, int K, int lo, int hi, int consumers, const Out& o, const Geo& g,
                                        unsigned aregion, unsigned wring, u64* full, u64* empty, int warp, int lane) {
  constexpr bool kWait = P != Probe::ComputeOnly, kCompute = P != Probe::LoadsOnly;
  using F = Frag<TPW>;
  const int gr = lane / 4, q = lane % 4;
  const int kboxes = (K + 63) / 64, whole = K / 64;  // K is a multiple of 32
  // A (ldmatrix x4): lanes 0-15 address rows 0-15 at the step's first 16-byte chunk, lanes 16-31 the
  // same rows at its second: registers a0..a3. Rows past M read row M - 1 (never stored).
  const unsigned alane = aregion + static_cast<unsigned>(min(lane % 16, M - 1) * g.a_stride + (lane / 16) * 16);
  // W (ldmatrix x4): lane addresses row 8t + lane % 8 of the box at 16-byte chunk 4p + lane / 8
  // (swizzled: chunk c of row r sits at c ^ (r % 8)); registers r0..r3 are b0, b1 of step 2p, then
  // of 2p + 1.
  const unsigned chunk0 = ((0 + lane / 8) ^ (lane % 8)) << 4, chunk1 = ((4 + lane / 8) ^ (lane % 8)) << 4;
  Cursor c;

  for (int r0 = lo; r0 < hi; r0 += g.pass_rows) {
    const int rows = min(hi - r0, g.pass_rows), tiles = (rows + 7) / 8;
    // Slot j's tile, clamped onto the pass's last tile where the pass has fewer (never stored).
    unsigned wrow[TPW];
#pragma unroll
    for (int j = 0; j < TPW; ++j)
      wrow[j] = static_cast<unsigned>(8 * min(warp + consumers * j, tiles - 1) + lane % 8) * 128;

    // Waits for box b's stage (unless `ready` says it has landed) and reads its fragments into f
    // (release(f) hands the stage back).
    auto load = [&](F& f, int b, bool ready = false) {
      if constexpr (kWait) {
        if (!ready) ptx::mbar_wait(&full[c.s], c.phase);
      }
      if constexpr (kCompute) {
        const unsigned ws = wring + c.s * g.w_slot, as = alane + b * 128;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) ptx::ldmatrix_x4(as + 32 * kk, f.a[kk]);
#pragma unroll
        for (int j = 0; j < TPW; ++j) {
          unsigned r[4];
          ptx::ldmatrix_x4(ws + wrow[j] + chunk0, r);
          f.b[j][0][0] = r[0];
          f.b[j][0][1] = r[1];
          f.b[j][1][0] = r[2];
          f.b[j][1][1] = r[3];
          ptx::ldmatrix_x4(ws + wrow[j] + chunk1, r);
          f.b[j][2][0] = r[0];
          f.b[j][2][1] = r[1];
          f.b[j][3][0] = r[2];
          f.b[j][3][1] = r[3];
        }
      } else if constexpr (kWait) {
        __syncwarp();
        ptx::mbar_arrive_lane0(&empty[c.s], lane);
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
        ptx::mbar_arrive_lane0(&empty[f.stage], lane);
      }
    };

    float acc[TPW][4];
#pragma unroll
    for (int j = 0; j < TPW; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    auto step = [&](const F& f, int kk) {
      if constexpr (kCompute) {
#pragma unroll
        for (int j = 0; j < TPW; ++j) ptx::mma_bf16(acc[j], f.a[kk], f.b[j][kk]);
      }
    };
    // Box b from cur: its step 0, the release of its stage and a first test of box b + 1's (its
    // answer is not needed before step 1 has been issued: nothing waits on it between two dependent
    // steps), step 1, then box b + 1's fragments into nxt (in flight while steps 1..3 run), steps 2
    // and 3; a 32-deep last box runs its two real steps only (a step on the zero half could turn a
    // -0 accumulator into +0).
    auto box = [&](F& cur, F& nxt, int b) {
      step(cur, 0);
      release(cur);
      const bool more = b + 1 < kboxes;
      bool ready = false;
      if constexpr (kWait) {
        if (more) ready = ptx::mbar_test(&full[c.s], c.phase);
      }
      step(cur, 1);
      if (more) load(nxt, b + 1, ready);
      if (b < whole) {
        step(cur, 2);
        step(cur, 3);
      }
    };
    F f0, f1;  // alternate as cur and nxt: no copy between boxes
    load(f0, 0);
    for (int b = 0; b < kboxes; b += 2) {
      box(f0, f1, b);
      if (b + 1 < kboxes) box(f1, f0, b + 1);
    }

    // acc[j][2h + e]: row gr + 8h of A, column 2q + e of slot j's tile.
#pragma unroll
    for (int j = 0; j < TPW; ++j) {
      const int t = warp + consumers * j;
      if (!kCompute || t >= tiles) continue;
      const int n = r0 + 8 * t + 2 * q;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = gr + 8 * h;
        if (m < M && n < r0 + rows) store_pair(o, m, n, r0 + rows, acc[j][2 * h], acc[j][2 * h + 1]);
      }
    }
  }
}

// Block b owns W rows [lo, hi): 2-row units [units·b/G, units·(b+1)/G) (every start even, so the
// pair stores stay 8-byte aligned), computed in passes of up to pass_rows.
template <int TPW, bool PDL, Probe P = Probe::None>
__global__ void __launch_bounds__(kThreads, 1)
    gemv_kernel(const __grid_constant__ CUtensorMap wmap, const float* __restrict__ A, int M, int K, int lda, int N,
                Out o, Geo g) {
  extern __shared__ unsigned char smem_raw[];
  static_assert(kThreads >= kMaxStages, "a thread per stage initialises its barriers");
  __shared__ u64 full[kMaxStages], empty[kMaxStages];
  // 1024-byte aligned: the 128-byte swizzle repeats every 8 rows of 128 bytes from such an address.
  const unsigned raw = ptx::smem_addr(smem_raw);
  const unsigned aregion = (raw + 1023u) & ~1023u, wring = aregion + g.a_bytes;
  const long G = gridDim.x, b = blockIdx.x;
  const int lo = min(N, static_cast<int>(2 * (g.units * b / G))), hi = min(N, static_cast<int>(2 * (g.units * (b + 1) / G)));
  if (hi <= lo) return;  // the whole block
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Consumer warps with a tile slot in the first (largest) pass.
  const int first_tiles = (min(hi - lo, g.pass_rows) + 7) / 8;
  const int consumers = min(kConsumerWarps, (first_tiles + TPW - 1) / TPW);
  if (threadIdx.x < g.stages) {  // one thread per stage
    ptx::mbar_init(&full[threadIdx.x], 1);           // the producer's expect_tx arrival
    ptx::mbar_init(&empty[threadIdx.x], consumers);  // one arrival per working consumer warp
    ptx::mbar_init_fence();
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (lane == 0) produce<P>(&wmap, K, lo, hi, g, wring, full, empty);
    return;
  }
  // Programmatic launch: A is read only after the kernel before has completed (and every later
  // access of these threads, the stores included, comes after that too).
  // Then the next kernel may be scheduled (it waits for this one's completion before reading C).
  if constexpr (PDL) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  }
  round_a(A, M, K, lda, smem_raw + (aregion - raw), g.a_stride, threadIdx.x, 32 * kConsumerWarps);
  asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumerWarps) : "memory");  // A is in place for every consumer
  if (warp < consumers) consume<TPW, P>(M, K, lo, hi, consumers, o, g, aregion, wring, full, empty, warp, lane);
}

}  // namespace parity::cuda::gemv
