// The few-rows bf16 GEMM (decode: M <= 16): C = A · Wᵀ (+ bias) at the weights' read bandwidth.
//
// Why this shape of kernel: with a few rows a GEMM reads every weight once and does almost no
// arithmetic per byte, so its time is the time to stream W from HBM. Split-K would give every SM
// work but changes the order of a column's sum, so the parallelism is over the output columns only:
// the N columns (rows of W) are cut into one contiguous range per block, kBPS blocks per SM,
// balanced to within one row. One producer warp per block streams the weights and A's rows, kS of
// K at a time, into a ring of shared-memory stages (gemm_skinny_kernel.cuh); consumer warps take
// 8-column m16n8k16 tiles from each stage.
//
// What bounds it (round 2; round 1 measured 1.0–1.6 TB/s on an H200). Each output column is a chain
// of K/16 dependent tensor-core steps. Round 1 gave each consumer warp one 8-column tile per pass
// and a block up to 64 columns per pass, so a block ran passes × K/16 dependent steps one after the
// other (in_proj 2 passes, lm_head 6), and its times fit ~160 ns per dependent step on all three
// shapes (53.8 µs = 2·160 steps, 163 µs = 6·160, 49.2 µs = 1·320). Here a warp holds up to kTPW
// tiles at once and a block takes all its columns in one pass (up to kCW·kTPW tiles): a block runs
// K/16 dependent steps once, its warps' tiles interleaving theirs; the A operand is read once per
// warp and step for all its tiles. The slice depth kS is chosen per launch so that a stage is about
// a quarter of the ring (in_proj: 88 rows × 256, lm_head: 384 rows × 64, out_proj: 24 rows × 960),
// which keeps three or more stages (100–150 KiB per SM) in flight. The weights come through tensor
// maps by default: one TMA instruction per 64-deep box of up to 256 rows (swizzled for ldmatrix),
// where round 1 issued one bulk copy per row and slice (80–400 per stage). The variants keep the
// per-row bulk copies and cp.async, two and four blocks per SM, and slices of at least 256 (each W
// row read in 512-byte runs, where a single pass gives lm_head 128-byte runs, at the cost of 4
// passes), so that one device run can time them side by side; the benchmark's probes time the
// loads alone and the tensor cores alone.
//
// Bits: every output element is the chain the tiled kernels compute (gemm.cu, gemm_mma.cu): K in
// 16-deep m16n8k16 tensor-core steps ascending (a WMMA 16×16×16 step is two of them, one per 8
// columns), into one fp32 accumulator starting at 0, the bias added once at the end. A is rounded
// to bf16 round-to-nearest-even, as the tiled kernels do; rows of A past M enter as zeros and are
// never stored, W rows past a block's range (a tensor box may bring the neighbour's rows, or zeros
// past N) only feed columns that are never stored. Which block, pass, stage, warp or tile slot
// computes an element, and how many rows the pass has, only decide when each step runs, never which
// steps or in what order. tests/cuda/cuda_gemm_skinny_test.cpp compares every variant, M = 1..16
// (..64), against the WMMA tiles on the models' shapes.
#include "kernels_cuda/gemm_skinny.h"

#include <algorithm>
#include <atomic>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_skinny_kernel.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/tensor_map.h"

namespace parity::cuda {
namespace {

using namespace skinny;
using bf16 = __nv_bfloat16;

constexpr int kGroupCols = 64;  // grouped: W rows (output columns) per block

// A stage's layout for `rows_alloc` W rows, slices of kS and M rows of A.
template <typename V>
void size_stage(Geo& g, int M) {
  // A rows 32 bytes past a multiple of 128 apart: the 8 rows a warp's A loads touch spread over banks.
  g.a_stride = (g.kS + 8) * 4;
  if constexpr (V::kSwizzled) {
    g.w_stride = 128;  // within a 64-deep box; the boxes follow one another
    g.w_bytes = g.rows_alloc * g.kS * 2;
  } else {
    g.w_stride = (g.kS + 8) * 2;  // 16 bytes past a multiple of 128: an ldmatrix phase's 8 rows in other banks
    g.w_bytes = g.rows_alloc * g.w_stride;
  }
  const int align = V::kSwizzled ? 1024 : 128;  // a swizzled box starts on 1024 bytes
  g.stage_bytes = (g.w_bytes + M * g.a_stride + align - 1) / align * align;
}

// The rows a pass of `tiles` 8-column tiles allocates: swizzled, boxes of at most 256 rows (a
// multiple of 8, the swizzle's period) covering them.
template <typename V>
void size_rows(Geo& g, int tiles) {
  const int rows = 8 * tiles;
  g.nrb = V::kSwizzled ? (rows + 255) / 256 : 1;
  g.box_rows = ((rows + g.nrb - 1) / g.nrb + 7) / 8 * 8;
  g.rows_alloc = g.nrb * g.box_rows;
}

// The ring for blocks of at most rows_max columns and M rows of A.
template <typename V>
Geo geometry(int rows_max, int M, int K) {
  Geo g{};
  const int k_max = std::min(1024, (K + 63) / 64 * 64), k_min = std::min(V::kMinS, k_max);
  // The most tiles a pass may hold: the variant's, two stages of 64-deep slices must fit, and (for
  // a deeper least slice) four stages of the least slice.
  int cap = V::kMaxTiles;
  for (;; --cap) {
    size_rows<V>(g, cap);
    g.kS = 64;
    size_stage<V>(g, M);
    const int two = 2 * g.stage_bytes;
    g.kS = k_min;
    size_stage<V>(g, M);
    if (cap == 1 || (two <= V::kRing && (k_min == 64 || 4 * g.stage_bytes <= V::kRing))) break;
  }
  const int tiles = (rows_max + 7) / 8, passes = (tiles + cap - 1) / cap;
  g.tpp = (tiles + passes - 1) / passes;
  size_rows<V>(g, g.tpp);
  // The deepest slice (a multiple of 64, at most 1024, no deeper than K) whose stage is at most a
  // quarter of the ring: three stages or more in flight while the consumers read one.
  int best = k_min;
  for (int k = k_min + 64; k <= k_max; k += 64) {
    g.kS = k;
    size_stage<V>(g, M);
    if (4 * g.stage_bytes <= V::kRing) best = k;
  }
  g.kS = best;
  size_stage<V>(g, M);
  g.stages = std::min(kMaxStages, V::kRing / g.stage_bytes);
  return g;
}

template <typename V>
CUtensorMap weights_map(const bf16* W, int K, int N, int groups, int64_t w_stride, const Geo& g) {
  if constexpr (V::kLoad == Load::Tensor) return bf16_rows_tensor_map(W, K, N, groups, w_stride, g.box_rows);
  return CUtensorMap{};
}

template <typename V, Probe P>
void run_plain(const float* A, int M, int K, int lda, const void* Wv, int N, const float* bias, float* C, int ldc,
               cudaStream_t s, int blocks) {
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(skinny_kernel<V, P>), V::kRing + 1024, opted, true);
  const bf16* W = static_cast<const bf16*>(Wv);
  const int G = blocks > 0 ? std::min(blocks, N) : std::min(V::kBPS * sm_count(), (N + 7) / 8);
  const Geo g = geometry<V>((N + G - 1) / G, M, K);
  const CUtensorMap map = weights_map<V>(W, K, N, 1, 0, g);
  skinny_kernel<V, P><<<static_cast<unsigned>(G), V::kThreads, g.stages * g.stage_bytes + 1024, s>>>(
      map, A, M, K, lda, W, N, bias, C, ldc, g);
}

template <typename V>
void run_grouped(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K, const void* Wv,
                 int64_t w_stride, int N, float* C, int ldc, cudaStream_t s) {
  static_assert(V::kMaxRows == 16, "grouped: 16-row tiles");
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(skinny_grouped_kernel<V>), V::kRing + 1024, opted, true);
  const bf16* W = static_cast<const bf16*>(Wv);
  const Geo g = geometry<V>(std::min(N, kGroupCols), std::min(max_rows, 16), K);
  const CUtensorMap map = weights_map<V>(W, K, N, groups, w_stride, g);
  const dim3 grid(static_cast<unsigned>((N + kGroupCols - 1) / kGroupCols), static_cast<unsigned>(groups),
                  static_cast<unsigned>((max_rows + 15) / 16));
  skinny_grouped_kernel<V><<<grid, V::kThreads, g.stages * g.stage_bytes + 1024, s>>>(
      map, A, lda, offsets, K, W, w_stride, N, C, ldc, kGroupCols, g);
}

using PlainFn = void (*)(const float*, int, int, int, const void*, int, const float*, float*, int, cudaStream_t, int);
using GroupedFn = void (*)(const float*, int, const int32_t*, int, int, int, const void*, int64_t, int, float*, int,
                           cudaStream_t);
struct Entry {
  const char* name;
  int max_rows;
  PlainFn plain[3];  // by Probe
  GroupedFn grouped;
};
template <typename V>
constexpr Entry entry(const char* name, GroupedFn grouped) {
  return {name,
          V::kMaxRows,
          {run_plain<V, Probe::None>, run_plain<V, Probe::NoCompute>, run_plain<V, Probe::NoLoad>},
          grouped};
}

//                              load           warps tiles/warp blocks/SM m16 tiles
using VTensor = Variant<Load::Tensor, 8, 6, 1>;
using VBulk = Variant<Load::Bulk, 8, 6, 1>;
using VCpAsync = Variant<Load::CpAsync, 8, 6, 1>;
using VTensor2 = Variant<Load::Tensor, 8, 3, 2>;
using VTensor4 = Variant<Load::Tensor, 4, 4, 4>;
using VTensor64 = Variant<Load::Tensor, 8, 2, 1, 4>;
using VTensorRuns = Variant<Load::Tensor, 8, 6, 1, 1, 256>;  // 512-byte runs: lm_head in 4 passes of 96 rows
// The variants that take 16 rows come first: the grouped path takes those.
const Entry kVariants[] = {
    entry<VTensor>("tma-w8x6", run_grouped<VTensor>),
    entry<VBulk>("bulk-w8x6", run_grouped<VBulk>),
    entry<VCpAsync>("cpasync-w8x6", run_grouped<VCpAsync>),
    entry<VTensor2>("tma-2blk-w8x3", run_grouped<VTensor2>),
    entry<VTensor4>("tma-4blk-w4x4", run_grouped<VTensor4>),
    entry<VTensorRuns>("tma-w8x6-k256", run_grouped<VTensorRuns>),
    entry<VTensor64>("tma-w8x2-m64", nullptr),
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kGroupedVariantCount = 6;
// gemm()'s: the tensor-map loads (one instruction per box). The MoE's grouped path keeps the
// per-row bulk copies, which need no tensor map per launch.
constexpr int kDefault = 0, kGroupedDefault = 1;

const Entry& pick(int variant, int M) {
  if (variant >= kVariantCount) throw Error("gemm_bf16_skinny: no such variant");
  const Entry& e = kVariants[variant < 0 ? kDefault : variant];
  if (M > e.max_rows) throw Error("gemm_bf16_skinny: more rows than the variant takes");
  return e;
}

}  // namespace

void gemm_bf16_skinny(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                      cudaStream_t s, int variant, int blocks) {
  if (M <= 0 || N <= 0) return;
  pick(variant, M).plain[0](A, M, K, lda, W, N, bias, C, ldc, s, blocks);
  check_launch("gemm_bf16_skinny");
}

void gemm_bf16_skinny_probe(int probe, const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc,
                            cudaStream_t s, int variant) {
  if (M <= 0 || N <= 0) return;
  if (probe < 0 || probe > 2) throw Error("gemm_bf16_skinny_probe: no such probe");
  pick(variant, M).plain[probe](A, M, K, lda, W, N, nullptr, C, ldc, s, 0);
  check_launch("gemm_bf16_skinny_probe");
}

void gemm_grouped_bf16_skinny(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K,
                              const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s, int variant) {
  if (groups <= 0 || max_rows <= 0 || N <= 0) return;
  if (max_rows > kSkinnyMaxGroupRows || variant >= kGroupedVariantCount)
    throw Error("gemm_grouped_bf16_skinny: bad rows or variant");
  kVariants[variant < 0 ? kGroupedDefault : variant].grouped(A, lda, offsets, groups, max_rows, K, W, w_stride, N, C,
                                                             ldc, s);
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
