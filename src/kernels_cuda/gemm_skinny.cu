// The few-rows bf16 GEMM (decode: M <= 16): C = A · Wᵀ (+ bias) at the weights' read bandwidth.
//
// Why this shape of kernel: with a few rows a GEMM reads every weight once and does almost no
// arithmetic per byte, so its time is the time to stream W from HBM, which needs megabytes in flight
// at once. Split-K would give every SM work but changes the order of a column's sum, so the
// parallelism is over the output columns only: the N columns (rows of W) are cut into one
// contiguous range per block, one block per SM, balanced to within one row. A block computes its
// range in passes of up to P 8-column tiles over the whole of K (and of all its rows of A: 16, or up
// to 64 in a variant that holds four m16 tiles). One producer warp streams each
// pass's weights and A's rows, kS of K at a time, into a ring of shared-memory stages (bulk copies
// or cp.async, landing on an mbarrier per stage); eight consumer warps, one 8-column tile each (or
// two), wait for a stage, read their fragments and release it to the producer. With up to 8 stages
// of a few tens of KiB each, 50–150 KiB per SM are in flight.
//
// Bits: every output element is the chain the tiled kernels compute (gemm.cu, gemm_mma.cu): K in
// 16-deep m16n8k16 tensor-core steps ascending (a WMMA 16×16×16 step is two of them, one per 8
// columns), into one fp32 accumulator starting at 0, the bias added once at the end. A is rounded
// to bf16 round-to-nearest-even, as the tiled kernels do; rows of A past M and columns past a
// block's range enter as zeros and are never stored. Which block, pass, stage or warp computes an
// element, and how many rows the pass has, only decide when each step runs, never which steps or in
// what order. tests/cuda/cuda_gemm_skinny_test.cpp compares every variant, M = 1..16 (..64), against
// the WMMA tiles on the models' shapes.
#include "kernels_cuda/gemm_skinny.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/ptx.cuh"

namespace parity::cuda {
namespace {

using bf16 = __nv_bfloat16;
using u64 = std::uint64_t;

constexpr int kWarps = 8;                   // consumer warps; one more warp produces
constexpr int kThreads = 32 * (kWarps + 1);
constexpr int kMaxStages = 8;
constexpr int kRingBytes = 192 * 1024;      // dynamic shared memory for the stages, at most
constexpr int kGroupCols = 64;              // grouped: W rows (output columns) per block
constexpr int kTileRows = 16;               // grouped: rows of a group per block (one m16 tile)

// One kernel configuration. kBulk: bulk copies (the TMA unit) or cp.async by the producer warp;
// kS: K per stage; kTPW: 8-column tiles per consumer warp and pass; kAHalf: A is read as a bf16
// copy a pre-pass made (gemm_mma.h's with_bf16_rows) instead of fp32, halving its traffic; kMT:
// m16 tiles of A per pass (up to 16·kMT rows; the weights are streamed once for all of them).
template <bool Bulk, int S, int TPW, bool AHalf, int MT = 1>
struct Variant {
  static constexpr bool kBulk = Bulk, kAHalf = AHalf;
  static constexpr int kS = S, kTPW = TPW, kMaxTiles = kWarps * TPW, kMT = MT, kMaxRows = 16 * MT;
  using TA = std::conditional_t<AHalf, bf16, float>;
  // A stage: rows × kS of W (bf16), then A's rows × kS. Each row is padded by 8 elements so that
  // the 8 rows an ldmatrix phase reads, and the rows a half-warp's A loads touch, fall in
  // different banks (a row stride of 16 or 32 bytes past a multiple of 128).
  static constexpr int kStride = kS + 8;  // elements per row, W and A
  static constexpr int kWRowBytes = kStride * 2;
  static constexpr int kARowBytes = kStride * static_cast<int>(sizeof(TA));
  __host__ __device__ static int stage_bytes(int w_rows, int a_rows) { return w_rows * kWRowBytes + a_rows * kARowBytes; }
  static_assert(kS % 32 == 0, "a stage holds whole 32-deep double steps");
  static_assert(2 * (8 * kMaxTiles * kWRowBytes + kMaxRows * kARowBytes) <= kRingBytes, "two stages fit");
};

// A block's columns in passes of at most max_tiles 8-column tiles, as even as whole tiles allow.
struct Plan {
  int tiles_per_pass, passes;
};
__host__ __device__ inline Plan plan(int rows, int max_tiles) {
  const int tiles = (rows + 7) / 8, passes = (tiles + max_tiles - 1) / max_tiles;
  return {(tiles + passes - 1) / passes, passes};
}

// What one block computes: rows [0, M) of A against W's rows [lo, hi), into C's columns [lo, hi).
struct Work {
  const void* A;  // fp32 or bf16 (Variant::TA) [M][lda]
  int M, lda;
  const bf16* W;  // [.][K]
  int K, lo, hi;
  const float* bias;
  float* C;
  int ldc;
};

// The ring's geometry, the same in the producer and the consumers.
struct Ring {
  unsigned char* smem;
  int stage_bytes, stages, slices, rows_per_pass, passes;
  u64 *full, *empty;
  __device__ unsigned char* stage(int it) const { return smem + (it % stages) * stage_bytes; }
};

// The producer warp: for every (pass, K slice) in order, waits for the stage to be free, then
// copies the pass's W rows and A's rows for the slice into it.
template <typename V>
__device__ void produce(const Work& w, const Ring& r, int lane) {
  using TA = typename V::TA;
  const TA* A = static_cast<const TA*>(w.A);
  const int iters = r.passes * r.slices;
  for (int it = 0; it < iters; ++it) {
    const int s = it % r.stages, round = it / r.stages;
    if (round > 0) ptx::mbar_wait(&r.empty[s], (round - 1) & 1);
    const int p = it / r.slices, k0 = (it % r.slices) * V::kS, len = min(V::kS, w.K - k0);
    const int n0 = w.lo + p * r.rows_per_pass, rows = min(w.hi - n0, r.rows_per_pass);
    unsigned char* ws = r.stage(it);
    unsigned char* as = ws + r.rows_per_pass * V::kWRowBytes;
    if constexpr (V::kBulk) {
      // One copy per row slice (len·2 or len·4 bytes), spread over the lanes.
      if (lane == 0) ptx::mbar_arrive_expect_tx(&r.full[s], (rows * 2 + w.M * int(sizeof(TA))) * len);
      __syncwarp();
      for (int i = lane; i < rows + w.M; i += 32) {
        if (i < rows)
          ptx::bulk_copy(ws + i * V::kWRowBytes, w.W + static_cast<std::size_t>(n0 + i) * w.K + k0, len * 2, &r.full[s]);
        else
          ptx::bulk_copy(as + (i - rows) * V::kARowBytes, A + static_cast<std::size_t>(i - rows) * w.lda + k0,
                         len * int(sizeof(TA)), &r.full[s]);
      }
    } else {
      // 16-byte chunks, 512 bytes per warp instruction; each lane's arrival (the barrier counts
      // 32) comes when its own copies have landed.
      const int wc = len / 8;
      for (int c = lane; c < rows * wc; c += 32) {
        const int i = c / wc, j = c % wc;
        ptx::cp_async16(ws + i * V::kWRowBytes + j * 16, w.W + static_cast<std::size_t>(n0 + i) * w.K + k0 + j * 8);
      }
      constexpr int kPer = 16 / int(sizeof(TA));
      const int ac = len / kPer;
      for (int c = lane; c < w.M * ac; c += 32) {
        const int m = c / ac, j = c % ac;
        ptx::cp_async16(as + m * V::kARowBytes + j * 16, A + static_cast<std::size_t>(m) * w.lda + k0 + j * kPer);
      }
      ptx::cp_async_arrive(&r.full[s]);
    }
  }
  if constexpr (!V::kBulk) ptx::cp_async_wait<0>();
}

// Two adjacent bf16 of A's row `row` at column `col` of a stage, packed as an mma operand register
// (the lower column in the lower half); zero for rows past M.
template <typename V>
__device__ __forceinline__ unsigned a_pair(const unsigned char* as, int row, int col, int M) {
  if (row >= M) return 0u;
  const typename V::TA* p = reinterpret_cast<const typename V::TA*>(as + row * V::kARowBytes) + col;
  if constexpr (V::kAHalf) {
    return *reinterpret_cast<const unsigned*>(p);
  } else {
    const float2 f = *reinterpret_cast<const float2*>(p);
    const __nv_bfloat162 h = __floats2bfloat162_rn(f.x, f.y);  // round to nearest even, as the tiles do
    return *reinterpret_cast<const unsigned*>(&h);
  }
}

// The operands of one 32-deep double step: A's m16k16 fragments of each m16 tile for both halves,
// and per tile b[0..1] (first 16) and b[2..3] (second 16).
template <int TPW, int MT>
struct Frag {
  unsigned a[MT][2][4];
  unsigned b[TPW][4];
};

// A consumer warp: tiles warp, warp + 8, … of each pass; every warp takes part in every stage's
// wait and release, with or without a tile, so the empty barriers count all 8.
template <typename V>
__device__ void consume(const Work& w, const Ring& r, int warp, int lane) {
  constexpr int kTPW = V::kTPW, kMT = V::kMT, kDS = V::kS / 32;  // kDS: double steps in a full slice
  const int g = lane / 4, q = lane % 4, M = w.M;
  const int dsteps = w.K / 32;
  int it = 0;  // the slice this warp waits for next, over all passes
  for (int p = 0; p < r.passes; ++p) {
    const int n0 = w.lo + p * r.rows_per_pass, rows = min(w.hi - n0, r.rows_per_pass);
    const int tiles = (rows + 7) / 8;
    bool has[kTPW], row_ok[kTPW];
#pragma unroll
    for (int j = 0; j < kTPW; ++j) {
      const int t = warp + kWarps * j;
      has[j] = t < tiles;
      row_ok[j] = 8 * t + g < rows;  // this lane's W row (its B column) belongs to the block
    }
    const bool active = has[0];
    float acc[kTPW][kMT][4];
#pragma unroll
    for (int j = 0; j < kTPW; ++j)
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][i][e] = 0.0f;

    auto load = [&](Frag<kTPW, kMT>& f, const unsigned char* st, int ds) {
      const int k = ds * 32;
      const unsigned char* as = st + r.rows_per_pass * V::kWRowBytes;
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        if (16 * i >= M) break;  // uniform over the warp; the m16 tiles past M are never multiplied
        const int m = 16 * i + g;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = k + 16 * h + 2 * q;
          f.a[i][h][0] = a_pair<V>(as, m, c, M);
          f.a[i][h][1] = a_pair<V>(as, m + 8, c, M);
          f.a[i][h][2] = a_pair<V>(as, m, c + 8, M);
          f.a[i][h][3] = a_pair<V>(as, m + 8, c + 8, M);
        }
      }
      const bf16* ws = reinterpret_cast<const bf16*>(st);
#pragma unroll
      for (int j = 0; j < kTPW; ++j) {
        if (!has[j]) continue;  // uniform over the warp
        // Lane i addresses row i % 8 of the tile at column k + 8·(i / 8): registers 0..3 are
        // b0, b1 of the first 16-deep step and b0, b1 of the second.
        const int t = warp + kWarps * j;
        ptx::ldmatrix_x4(ws + (8 * t + (lane & 7)) * V::kStride + k + 8 * (lane >> 3), f.b[j]);
        if (!row_ok[j]) {
#pragma unroll
          for (int e = 0; e < 4; ++e) f.b[j][e] = 0u;
        }
      }
    };
    auto release = [&](int slice) {
      __syncwarp();  // every lane's reads of the stage are done
      if (lane == 0) ptx::mbar_arrive(&r.empty[slice % r.stages]);
    };
    auto acquire = [&](int slice) { ptx::mbar_wait(&r.full[slice % r.stages], (slice / r.stages) & 1); };

    // The double steps of the pass in K order; the operands of step d + 1 are read while the
    // tensor cores work on step d, across stage boundaries too.
    Frag<kTPW, kMT> cur, nxt;
    acquire(it);
    const unsigned char* st = r.stage(it);
    if (active) load(cur, st, 0);
    for (int d = 0; d < dsteps; ++d) {
      if (d + 1 < dsteps) {
        if ((d + 1) % kDS == 0) {  // step d + 1 opens the next slice
          release(it);
          acquire(++it);
          st = r.stage(it);
        }
        if (active) load(nxt, st, (d + 1) % kDS);
      } else {
        release(it++);
      }
      if (active) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < kMT; ++i) {
            if (16 * i >= M) break;
#pragma unroll
            for (int j = 0; j < kTPW; ++j) {
              if (!has[j]) continue;
              const unsigned b[2] = {cur.b[j][2 * h], cur.b[j][2 * h + 1]};
              ptx::mma_bf16(acc[j][i], cur.a[i][h], b);
            }
          }
      }
      if (active && d + 1 < dsteps) cur = nxt;
    }

    // c0, c1: row g of the m16 tile, columns 2q, 2q+1 of the 8-column tile; c2, c3: row g + 8.
#pragma unroll
    for (int j = 0; j < kTPW; ++j) {
      if (!has[j]) continue;
      const int t = warp + kWarps * j;
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 16 * i + g + 8 * h;
          if (m >= M) continue;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = 8 * t + 2 * q + e;
            if (c >= rows) continue;
            const int n = n0 + c;
            float v = acc[j][i][2 * h + e];
            if (w.bias) v = v + w.bias[n];
            w.C[static_cast<std::size_t>(m) * w.ldc + n] = v;
          }
        }
    }
  }
}

template <typename V>
__device__ __forceinline__ void skinny_block(const Work& w, unsigned char* smem, int smem_bytes, u64* bars) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Plan pl = plan(w.hi - w.lo, V::kMaxTiles);
  Ring r;
  r.smem = smem;
  r.rows_per_pass = 8 * pl.tiles_per_pass;
  r.passes = pl.passes;
  r.stage_bytes = V::stage_bytes(r.rows_per_pass, w.M);
  r.stages = min(kMaxStages, smem_bytes / r.stage_bytes);  // >= 2 (smem_bytes_for)
  r.slices = (w.K + V::kS - 1) / V::kS;
  r.full = bars;
  r.empty = bars + kMaxStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < r.stages; ++s) {
      ptx::mbar_init(&r.full[s], V::kBulk ? 1 : 32);  // the producer's expect_tx, or its 32 lanes' cp.async arrivals
      ptx::mbar_init(&r.empty[s], kWarps);
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();
  if (warp == kWarps) produce<V>(w, r, lane);
  else consume<V>(w, r, warp, lane);
}

// Block b of G computes columns [N·b/G, N·(b+1)/G).
template <typename V>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_kernel(const void* A, int M, int K, int lda, const bf16* W, int N, const float* bias, float* C, int ldc,
                  int smem_bytes) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ u64 bars[2 * kMaxStages];
  const long b = blockIdx.x, G = gridDim.x;
  const int lo = static_cast<int>(N * b / G), hi = static_cast<int>(N * (b + 1) / G);
  if (hi <= lo) return;  // the whole block
  skinny_block<V>(Work{A, M, lda, W, K, lo, hi, bias, C, ldc}, smem, smem_bytes, bars);
}

// Grouped: block (x, z, y) computes group z's rows [16y, 16y + 16) against columns
// [64x, 64x + 64) of the group's weights, exactly as the plain kernel computes those rows alone.
template <typename V>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_grouped_kernel(const float* A, int lda, const int32_t* offsets, int K, const bf16* W, int64_t w_stride, int N,
                          float* C, int ldc, int smem_bytes) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ u64 bars[2 * kMaxStages];
  const int z = blockIdx.y, r0 = offsets[z] + static_cast<int>(blockIdx.z) * kTileRows;
  const int rows = offsets[z + 1] - r0;
  if (rows <= 0) return;  // the whole block: its group has no rows here
  const int lo = static_cast<int>(blockIdx.x) * kGroupCols, hi = min(N, lo + kGroupCols);
  skinny_block<V>(Work{A + static_cast<std::size_t>(r0) * lda, min(rows, kTileRows), lda, W + z * w_stride, K, lo, hi,
                       nullptr, C + static_cast<std::size_t>(r0) * ldc, ldc},
                  smem, smem_bytes, bars);
}

// Shared memory for a launch whose largest pass has `rows` W rows and M rows of A: up to
// kMaxStages of its stages within kRingBytes, and never less than two of the largest possible
// stage (a block with fewer rows may plan a larger pass: whole tiles are shared out evenly).
template <typename V>
int smem_bytes_for(int rows, int M) {
  const Plan pl = plan(rows, V::kMaxTiles);
  const int stage = V::stage_bytes(8 * pl.tiles_per_pass, M);
  const int most = V::stage_bytes(8 * V::kMaxTiles, V::kMaxRows);
  return std::max(std::min(kMaxStages * stage, kRingBytes / stage * stage), 2 * most);
}

template <typename V>
void launch_plain(const void* A, int M, int K, int lda, const bf16* W, int N, const float* bias, float* C, int ldc,
                  cudaStream_t s, int blocks) {
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(skinny_kernel<V>), kRingBytes, opted);
  const int G = blocks > 0 ? std::min(blocks, N) : std::min(sm_count(), (N + 7) / 8);
  const int smem = smem_bytes_for<V>((N + G - 1) / G, M);
  skinny_kernel<V><<<static_cast<unsigned>(G), kThreads, smem, s>>>(A, M, K, lda, W, N, bias, C, ldc, smem);
}

template <typename V>
void run_plain(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
               cudaStream_t s, int blocks) {
  const bf16* w = static_cast<const bf16*>(W);
  if constexpr (V::kAHalf)
    with_bf16_rows(A, M, K, lda, s, [&](const void* a16) { launch_plain<V>(a16, M, K, K, w, N, bias, C, ldc, s, blocks); });
  else
    launch_plain<V>(A, M, K, lda, w, N, bias, C, ldc, s, blocks);
}

template <typename V>
void run_grouped(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K, const void* W,
                 int64_t w_stride, int N, float* C, int ldc, cudaStream_t s) {
  static_assert(!V::kAHalf && V::kMaxRows == kTileRows, "grouped: fp32 A (its rows are not known on the host), 16-row tiles");
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(skinny_grouped_kernel<V>), kRingBytes, opted);
  const int smem = smem_bytes_for<V>(std::min(N, kGroupCols), std::min(max_rows, kTileRows));
  const dim3 grid(static_cast<unsigned>((N + kGroupCols - 1) / kGroupCols), static_cast<unsigned>(groups),
                  static_cast<unsigned>((max_rows + kTileRows - 1) / kTileRows));
  skinny_grouped_kernel<V><<<grid, kThreads, smem, s>>>(A, lda, offsets, K, static_cast<const bf16*>(W), w_stride, N, C,
                                                        ldc, smem);
}

struct Entry {
  const char* name;
  int max_rows;
  void (*plain)(const float*, int, int, int, const void*, int, const float*, float*, int, cudaStream_t, int);
  void (*grouped)(const float*, int, const int32_t*, int, int, int, const void*, int64_t, int, float*, int,
                  cudaStream_t);
};
using VBulk = Variant<true, 256, 1, false>;
using VCpAsync = Variant<false, 256, 1, false>;
using VWide = Variant<true, 128, 2, false>;
using VHalfA = Variant<true, 256, 1, true>;
using VRows64 = Variant<true, 128, 2, true, 4>;
// The variants with fp32 A and 16 rows come first: the grouped path takes those.
const Entry kVariants[] = {
    {"bulk-k256-t8", 16, run_plain<VBulk>, run_grouped<VBulk>},
    {"cpasync-k256-t8", 16, run_plain<VCpAsync>, run_grouped<VCpAsync>},
    {"bulk-k128-t16", 16, run_plain<VWide>, run_grouped<VWide>},
    {"bulk-k256-t8-bf16a", 16, run_plain<VHalfA>, nullptr},
    {"bulk-k128-t16-bf16a-m64", 64, run_plain<VRows64>, nullptr},
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kGroupedVariantCount = 3;
constexpr int kDefault = 0;

}  // namespace

void gemm_bf16_skinny(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                      cudaStream_t s, int variant, int blocks) {
  if (M <= 0 || N <= 0) return;
  if (variant >= kVariantCount) throw Error("gemm_bf16_skinny: no such variant");
  const Entry& e = kVariants[variant < 0 ? kDefault : variant];
  if (M > e.max_rows) throw Error("gemm_bf16_skinny: more rows than the variant takes");
  e.plain(A, M, K, lda, W, N, bias, C, ldc, s, blocks);
  check_launch("gemm_bf16_skinny");
}

void gemm_grouped_bf16_skinny(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K,
                              const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s, int variant) {
  if (groups <= 0 || max_rows <= 0 || N <= 0) return;
  if (max_rows > kSkinnyMaxGroupRows || variant >= kGroupedVariantCount)
    throw Error("gemm_grouped_bf16_skinny: bad rows or variant");
  kVariants[variant < 0 ? kDefault : variant].grouped(A, lda, offsets, groups, max_rows, K, W, w_stride, N, C, ldc, s);
  check_launch("gemm_grouped_bf16_skinny");
}

int gemm_skinny_variants() { return kVariantCount; }
int gemm_skinny_variant_rows(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].max_rows : kSkinnyMaxRows;
}
int gemm_skinny_grouped_variants() { return kGroupedVariantCount; }
const char* gemm_skinny_variant_name(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].name : "?";
}

}  // namespace parity::cuda
