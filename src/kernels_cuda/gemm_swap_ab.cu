// The decode-sized bf16 GEMM (M up to a few hundred rows) at the weights' read bandwidth: Hopper's
// wgmma with the operands swapped, Cᵀ = W · Aᵀ.
//
// Why: with few rows a GEMM's time is the time to stream W. The few-rows kernel (gemm_skinny.cu)
// feeds mma.sync, and each output column there is a chain of K/16 dependent m16n8k16 steps whose
// round trips (~450 cycles each, ncu) the warps cannot overlap: out_proj (K = 5120) runs 320 such
// steps per chain and has only 320 n8 chains. wgmma pipelines a run of steps on one accumulator
// inside the tensor core, so a chain costs about the time its operands take to arrive. Its A
// operand is 64 rows: the weights take that side (64 output columns per warpgroup), and the rows of
// A (the activations) become its N side, rounded up to 8..256, so one row costs no more than
// eight. Both come from shared memory through descriptors, written there by the TMA unit as 64-deep
// boxes in the 128-byte swizzle (tensor_map.h), kStages boxes ahead of the tensor cores.
//
// Bits: every output element is the chain the other bf16 kernels compute (gemm.cu) — K in 16-deep
// steps ascending into one fp32 accumulator that starts at +0, the bias added once at the end.
// CudaWgmmaBits (tests/cuda/cuda_wgmma_bits_test.cpp) shows on the device that wgmma's k16 step
// with the operands' roles swapped accumulates with mma.sync's bits, Dᵀ for D; the accumulators
// start at +0 in registers and every step adds onto them (wgmma.cuh says why). A is rounded to
// bf16 round-to-nearest-even by the same pre-pass the mma tiles use (with_bf16_rows). Rows of A
// past M, W rows past N and K past the matrix arrive as zeros; the zero rows feed only outputs that
// are never stored, and a 32-deep last box runs only its two real steps. The block's column range,
// its rows' pass, the variant (columns per block, blocks per SM, stage count) and NT (the rows a
// pass computes) decide when each step runs, never which steps or in what order.
// tests/cuda/cuda_gemm_swap_ab_test.cpp compares every variant against the mma tiles.
#include "kernels_cuda/gemm_swap_ab.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "common/error.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_swap_ab_kernel.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/tensor_map.h"

namespace parity::cuda {
namespace {

using namespace swap_ab;

struct Args {
  const void* a16;  // bf16 [M][K]
  int M, K;
  const void* W;
  int N;
  const float* bias;
  float* C;
  int ldc;
  cudaStream_t s;
};

// The rows of A a pass computes: wgmma's N for M rows, up to 256 (more rows: several passes).
constexpr int kRowTiles[] = {8, 16, 32, 64, 128, 256};
constexpr int kRowTileCount = sizeof(kRowTiles) / sizeof(kRowTiles[0]);
int row_tile_index(int M) {
  int i = 0;
  while (i + 1 < kRowTileCount && kRowTiles[i] < M) ++i;
  return i;
}

template <int CWG, int NT, int BPS>
void launch(const Args& a) {
  // 256 rows keep 128 accumulators a thread: one block per SM has the registers.
  constexpr int kBPS = NT == 256 ? 1 : BPS;
  using Cfg = Config<CWG, NT, kBPS>;
  auto* kernel = swap_ab_kernel<CWG, NT, kBPS>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, opted, true);
  const CUtensorMap wmap = bf16_rows_tensor_map_cached(a.W, a.K, a.N, Cfg::kCols);
  const CUtensorMap xmap = bf16_rows_tensor_map_cached(a.a16, a.K, a.M, NT);
  const dim3 grid(static_cast<unsigned>((a.N + Cfg::kCols - 1) / Cfg::kCols), static_cast<unsigned>((a.M + NT - 1) / NT));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, a.s>>>(wmap, xmap, a.M, a.K, a.N, a.bias, a.C, a.ldc);
}

using LaunchFn = void (*)(const Args&);
struct Variant {
  const char* name;
  LaunchFn by_rows[kRowTileCount];  // by row_tile_index
};
template <int CWG, int BPS>
constexpr Variant variant(const char* name) {
  return {name,
          {launch<CWG, 8, BPS>, launch<CWG, 16, BPS>, launch<CWG, 32, BPS>, launch<CWG, 64, BPS>, launch<CWG, 128, BPS>,
           launch<CWG, 256, BPS>}};
}

// Columns per block (64: one consumer warpgroup; 128: two, sharing A's boxes) and blocks per SM
// (two: one block's ring fills while the other's drains; out_proj's 2560 columns make only 40
// blocks of 64, so the SM count is not what limits it).
const Variant kVariants[] = {
    variant<1, 1>("c64"),
    variant<1, 2>("c64-2blk"),
    variant<2, 1>("c128"),
    variant<2, 2>("c128-2blk"),
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kDefault = 1;

}  // namespace

bool gemm_swap_ab_fits(const float* A, int K, int lda, const void* W) { return gemm_mma_fits(A, K, lda, W); }

void gemm_bf16_swap_ab(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                       cudaStream_t s, int variant) {
  if (M <= 0 || N <= 0) return;
  if (variant >= kVariantCount) throw Error("gemm_bf16_swap_ab: no such variant");
  if (!gemm_swap_ab_fits(A, K, lda, W)) throw Error("gemm_bf16_swap_ab: unsupported operands");
  const Variant& v = kVariants[variant < 0 ? kDefault : variant];
  with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
    v.by_rows[row_tile_index(M)](Args{a16, M, K, W, N, bias, C, ldc, s});
  });
  check_launch("gemm_bf16_swap_ab");
}

int gemm_swap_ab_variants() { return kVariantCount; }
const char* gemm_swap_ab_variant_name(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].name : "?";
}

}  // namespace parity::cuda
