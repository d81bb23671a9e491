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
// A dependent wgmma step still costs ~100 cycles (H200: out_proj's 320-step chains took ~16 µs at
// one row, wherever the blocks ran), so for long K and few columns the "mma" variants run the same
// ring with mma.sync, the weights as its m16 side (gemm_swap_ab_mma.cuh): 16 columns per warp,
// four times the blocks, and shorter dependent steps.
//
// Bits: every output element is the chain the other bf16 kernels compute (gemm.cu) — K in 16-deep
// steps ascending into one fp32 accumulator that starts at +0, the bias added once at the end.
// CudaWgmmaBits (tests/cuda/cuda_wgmma_bits_test.cpp) shows on the device that wgmma's k16 step
// with the operands' roles swapped accumulates with mma.sync's bits, Dᵀ for D; the accumulators
// start at +0 in registers and every step adds onto them (wgmma.cuh says why). A is rounded to
// bf16 round-to-nearest-even, by the same pre-pass the mma tiles use (with_bf16_rows) or, fused,
// by the consumers from A's fp32 boxes with the same conversion (__floats2bfloat162_rn). Rows of A
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
#include "kernels_cuda/gemm_swap_ab_mma.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/tensor_map.h"

namespace parity::cuda {
namespace {

using namespace swap_ab;

struct Args {
  const float* A;
  int M, K, lda;
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

template <int CWG, int NT, int BPS, AFrom AF>
void launch_with(const Args& a, const CUtensorMap& xmap) {
  using Cfg = Config<CWG, NT, BPS, AF>;
  auto* kernel = swap_ab_kernel<CWG, NT, BPS, AF>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, opted, true);
  const CUtensorMap wmap = bf16_rows_tensor_map_cached(a.W, a.K, a.N, Cfg::kCols);
  const dim3 grid(static_cast<unsigned>((a.N + Cfg::kCols - 1) / Cfg::kCols), static_cast<unsigned>((a.M + NT - 1) / NT));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, a.s>>>(wmap, xmap, a.M, a.K, a.N, a.bias, a.C, a.ldc);
}

template <int CWG, int NT, int BPS, AFrom AF>
void launch(const Args& a) {
  // 256 rows keep 128 accumulators a thread: one block per SM has the registers.
  constexpr int kBPS = NT == 256 ? 1 : BPS;
  // Fused rounding needs A's fp32 boxes in the ring: with many rows (or two warpgroups and two
  // blocks per SM) fewer than three stages would fit, and the pre-pass takes A instead.
  constexpr bool kFused = AF == AFrom::Fused && Config<CWG, NT, kBPS, AFrom::Fused>::kFits;
  if constexpr (kFused) {
    launch_with<CWG, NT, kBPS, AFrom::Fused>(a, f32_rows_tensor_map_cached(a.A, a.K, a.M, a.lda, NT));
  } else {
    with_bf16_rows(a.A, a.M, a.K, a.lda, a.s, [&](const void* a16) {
      launch_with<CWG, NT, kBPS, AFrom::Prepass>(a, bf16_rows_tensor_map_cached(a16, a.K, a.M, NT));
    });
  }
}

// The mma.sync kernel (gemm_swap_ab_mma.cuh) for up to 32 rows; more rows take the wgmma kernel's
// c64-2blk (the mma.sync kernel keeps a whole box's fragments of every n8 tile in registers).
template <int CW, int NT, int BPS>
void launch_mma(const Args& a) {
  if constexpr (NT > 32) {
    launch<1, NT, 2, AFrom::Prepass>(a);
  } else {
    using Cfg = MmaConfig<CW, NT, BPS>;
    auto* kernel = swap_ab_mma_kernel<CW, NT, BPS>;
    static std::atomic<std::uint64_t> opted{0};
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, opted, true);
    const CUtensorMap wmap = bf16_rows_tensor_map_cached(a.W, a.K, a.N, Cfg::kCols);
    with_bf16_rows(a.A, a.M, a.K, a.lda, a.s, [&](const void* a16) {
      const CUtensorMap xmap = bf16_rows_tensor_map_cached(a16, a.K, a.M, NT);
      const dim3 grid(static_cast<unsigned>((a.N + Cfg::kCols - 1) / Cfg::kCols),
                      static_cast<unsigned>((a.M + NT - 1) / NT));
      kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, a.s>>>(wmap, xmap, a.M, a.K, a.N, a.bias, a.C, a.ldc);
    });
  }
}

using LaunchFn = void (*)(const Args&);
struct Variant {
  const char* name;
  LaunchFn by_rows[kRowTileCount];  // by row_tile_index
};
template <int CWG, int BPS, AFrom AF>
constexpr Variant variant(const char* name) {
  return {name,
          {launch<CWG, 8, BPS, AF>, launch<CWG, 16, BPS, AF>, launch<CWG, 32, BPS, AF>, launch<CWG, 64, BPS, AF>,
           launch<CWG, 128, BPS, AF>, launch<CWG, 256, BPS, AF>}};
}

template <int CW, int BPS>
constexpr Variant mma_variant(const char* name) {
  return {name,
          {launch_mma<CW, 8, BPS>, launch_mma<CW, 16, BPS>, launch_mma<CW, 32, BPS>, launch_mma<CW, 64, BPS>,
           launch_mma<CW, 128, BPS>, launch_mma<CW, 256, BPS>}};
}

// Columns per block (64: one consumer warpgroup; 128: two, sharing A's boxes), blocks per SM (two:
// one block's ring fills while the other's drains; out_proj's 2560 columns make only 40 blocks of
// 64, so the SM count is not what limits it), and where A is rounded to bf16 (a pre-pass, or
// fused: "-fx").
const Variant kVariants[] = {
    variant<1, 1, AFrom::Prepass>("c64"),        variant<1, 2, AFrom::Prepass>("c64-2blk"),
    variant<2, 1, AFrom::Prepass>("c128"),       variant<2, 2, AFrom::Prepass>("c128-2blk"),
    variant<1, 1, AFrom::Fused>("c64-fx"),       variant<1, 2, AFrom::Fused>("c64-2blk-fx"),
    variant<2, 1, AFrom::Fused>("c128-fx"),      variant<2, 2, AFrom::Fused>("c128-2blk-fx"),
    // mma.sync, 16 columns a warp: 16, 32 or 64 columns a block.
    mma_variant<1, 8>("mma-c16-8blk"),           mma_variant<2, 4>("mma-c32-4blk"),
    mma_variant<4, 2>("mma-c64-2blk"),
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kC64TwoBlocks = 1, kC128 = 2;

// The default variant, from the shapes alone (H200, BM_CudaGemmSwapAb, device time, mamba2-2.7b's
// in_proj / out_proj / lm_head): up to 64 rows c64-2blk was the fastest or within 12 % of it on
// every shape; at 256 rows c128 (two warpgroups share A's boxes) won by 17-20 % where its blocks
// still cover half the SMs (in_proj, lm_head) and lost by 58 % where they do not (out_proj: 20).
int default_variant(int M, int N) {
  if (M <= 64) return kC64TwoBlocks;
  return (N + 127) / 128 >= sm_count() / 2 ? kC128 : kC64TwoBlocks;
}

}  // namespace

bool gemm_swap_ab_fits(const float* A, int K, int lda, const void* W) { return gemm_mma_fits(A, K, lda, W); }

void gemm_bf16_swap_ab(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                       cudaStream_t s, int variant) {
  if (M <= 0 || N <= 0) return;
  if (variant >= kVariantCount) throw Error("gemm_bf16_swap_ab: no such variant");
  if (!gemm_swap_ab_fits(A, K, lda, W)) throw Error("gemm_bf16_swap_ab: unsupported operands");
  const Variant& v = kVariants[variant < 0 ? default_variant(M, N) : variant];
  v.by_rows[row_tile_index(M)](Args{A, M, K, lda, W, N, bias, C, ldc, s});
  check_launch("gemm_bf16_swap_ab");
}

int gemm_swap_ab_variants() { return kVariantCount; }
const char* gemm_swap_ab_variant_name(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].name : "?";
}

}  // namespace parity::cuda
