// The decode-sized bf16 GEMM (M = 1..16): C = A · Wᵀ (+ bias) as near the weights' read bandwidth as
// the one-chain-per-output contract allows.
//
// Why this shape. With a few rows a GEMM reads every weight once, so its time is W's bytes over the
// bandwidth, unless something else bounds it first. Two things did in the swap-AB kernel
// (gemm_swap_ab.cu, 16-column warps): (1) blocks of 32 or 64 columns leave SMs idle where N is small
// (out_proj's 2560 columns: 80 blocks for 132 SMs), and each busy SM must then stream 327 KB through
// a chain of K/16 dependent steps; (2) the bf16 pre-pass is a launch of its own before the GEMM. Here
// the tensor cores' n8 side is the weights (8 output columns a tile, the mma tiles' own
// orientation), so the columns split finely: block b of G (one per SM) owns an even range of about
// N/G rows of W, all of them in one pass where they fit (out_proj: 20 rows, three 8-column tiles per
// SM, each its own warp's chain; in_proj: 82 rows, 11 tiles; lm_head: two passes of 192).
//
// A: the block's consumer warps round A's M fp32 rows to bf16 once, into shared memory, where they
// stay for the pass (gemm_gemv_takes: while they fit 96 KiB), and read their fragments with
// ldmatrix as the mma tiles do. The first version streamed A's fp32 rows through the ring beside W
// and rounded them in the step loop; on the H200 that lost to swap-AB everywhere (out_proj M=1 34 us
// against 17): each register's load-then-convert stalled the chain (the tensor cores alone took ~150
// cycles a step), and all 132 blocks fetched A's current 256 bytes from one L2 slice in lockstep,
// box after box (the loads alone took 22 us at M=1, 56 at M=16). W: one producer warp streams the
// block's rows as 64-deep TMA boxes into a ring as deep as the rest of shared memory allows (up to
// 32 stages). A consumer reads a box's fragments into registers a box ahead, releases a stage a box
// after reading it, tests the next stage's barrier before its second step and reads the answer
// after, and has no branch on its lane or warp in the step loop (A rows past M and tile slots past
// the pass are clamped onto real ones), so what waits between two dependent steps is the tensor
// core's own latency, or the data when W's stream is the bound.
//
// Bits: every output element is the chain the other bf16 kernels compute (gemm.cu) — K in 16-deep
// m16n8k16 steps ascending into one fp32 accumulator from +0, the bias added once at the end — with
// the operands in the mma tiles' roles (A's rows as the m16 side, W's rows as the n8 side). A is
// rounded to bf16 round-to-nearest-even, as the pre-pass rounds it (with_bf16_rows). Rows of the
// m16 tile past M (copies of row M - 1), W rows past a block's range (the neighbour's, or zeros past
// N), clamped tile slots and stale stage rows feed only outputs that are never stored (an mma's
// output element depends on its own A row and B column alone), and a 32-deep last box runs only its
// two real steps. The block, pass, warp, tile slot, stage and variant decide when each step runs,
// never which steps or in what order. tests/cuda/cuda_gemm_gemv_test.cpp compares every variant and
// block split against the mma tiles.
#include "kernels_cuda/gemm_gemv.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_gemv_kernel.cuh"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/tensor_map.h"

namespace parity::cuda {
namespace {

using namespace gemv;

// A's rows in shared memory: 2K bytes each, 16 more so that the 8 rows an ldmatrix phase reads fall
// on 8 different 16-byte bank groups ((2K + 16) / 16 is odd), and slack for a 32-deep last box's
// unused half (read, never multiplied).
int a_region_bytes(int M, int K) { return (M * (2 * K + 16) + 128 + 1023) / 1024 * 1024; }

// The geometry for G blocks over N rows of W, M rows of A and TPW tile slots a warp: a block's rows
// in as few passes as the slots allow, balanced; as many stages as the rest of shared memory holds.
template <int TPW>
Geo geometry(int M, int K, int N, int G) {
  Geo g{};
  g.units = (N + 1) / 2;
  const int rows = 2 * ((g.units + G - 1) / G);  // the most rows a block owns
  const int passes = (rows + max_pass_rows<TPW>() - 1) / max_pass_rows<TPW>();
  g.pass_rows = std::min(max_pass_rows<TPW>(), ((rows + passes - 1) / passes + 1) / 2 * 2);
  g.w_slot = (g.pass_rows + 7) / 8 * 8 * 128;
  g.a_stride = 2 * K + 16;
  g.a_bytes = a_region_bytes(M, K);
  g.stages = std::min(kMaxStages, (kSmemBudget - g.a_bytes) / g.w_slot);
  return g;
}

template <int TPW, bool PDL, Probe P>
void launch(const void* W, const float* A, int M, int K, int lda, int N, const Out& o, int G, cudaStream_t s) {
  const Geo g = geometry<TPW>(M, K, N, G);
  if (g.stages < 3) throw Error("gemm_bf16_gemv: the ring holds fewer than three stages");
  const CUtensorMap wmap = bf16_rows_tensor_map_cached(W, K, N, g.pass_rows);
  auto* kernel = gemv_kernel<TPW, PDL, P>;
  static std::atomic<std::uint64_t> opted{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBudget + 1024, opted, true);
  // The whole budget whatever A and the stages use: one block per SM (a second block on one SM
  // would leave another idle, and halve both blocks' bandwidth).
  launch_programmatic_if(PDL, kernel, dim3(static_cast<unsigned>(G)), dim3(kThreads),
                         static_cast<std::size_t>(kSmemBudget + 1024), s, "gemm_bf16_gemv", wmap, A, M, K, lda, N, o, g);
}

// tpw 0: one tile slot a warp where a block's rows fit one pass of 128 (out_proj's 20, in_proj's
// 82 rows: a warp per tile), else two (lm_head: two passes of 192 rows, 12 warps of two).
template <bool PDL, int TPW, Probe P = Probe::None>
void run(const float* A, int M, int K, int lda, const void* W, int N, const Out& o, cudaStream_t s, int blocks) {
  // Blocks of at least 16 rows where N is small (two tiles: a block's fixed costs over more bytes).
  const int G = blocks > 0 ? std::min(blocks, (N + 1) / 2) : std::min(sm_count(), std::max(1, (N + 15) / 16));
  const int rows = 2 * (((N + 1) / 2 + G - 1) / G);
  if (TPW == 2 || (TPW == 0 && rows > max_pass_rows<1>())) launch<2, PDL, P>(W, A, M, K, lda, N, o, G, s);
  else launch<1, PDL, P>(W, A, M, K, lda, N, o, G, s);
}

using RunFn = void (*)(const float*, int, int, int, const void*, int, const Out&, cudaStream_t, int);
struct Variant {
  const char* name;
  RunFn run[3];  // by Probe
};
template <bool PDL, int TPW>
constexpr Variant variant(const char* name) {
  return {name, {run<PDL, TPW, Probe::None>, run<PDL, TPW, Probe::LoadsOnly>, run<PDL, TPW, Probe::ComputeOnly>}};
}
// auto: one or two tile slots a warp by the rows a block owns (run above); t2: always two (half the
// warps, two chains each); pdl: auto launched with programmatic serialization (its set-up and the
// first ring of W boxes overlap the kernel before; the default while gemm_early_flags() is set).
const Variant kVariants[] = {
    variant<false, 0>("auto"),
    variant<false, 2>("t2"),
    variant<true, 0>("pdl"),
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kAuto = 0, kPdl = 2;
// The default: pdl where the decode GEMMs start early (ops.h's GemmEarly), else auto.
int default_variant() { return gemm_early_flags() != 0 ? kPdl : kAuto; }

Out out(float* C, int ldc, const float* bias, bool add) {
  return Out{C, ldc, bias, add, ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0};
}

void check(int M, int K, int lda, const void* W, const float* A, int variant, const char* what) {
  if (!gemm_gemv_takes(M, K) || variant >= kVariantCount || !gemm_gemv_fits(A, K, lda, W))
    throw Error(std::string(what) + ": rows past what it takes, no such variant, or unsupported operands");
}

}  // namespace

bool gemm_gemv_fits(const float* A, int K, int lda, const void* W) { return gemm_mma_fits(A, K, lda, W); }

bool gemm_gemv_preferred(int M, int K, int N) {
  return M <= 4 && gemm_gemv_takes(M, K) && static_cast<long>(N) >= 256L * sm_count();
}

bool gemm_gemv_takes(int M, int K) { return M >= 1 && M <= kGemvMaxRows && K > 0 && a_region_bytes(M, K) <= kABudget; }

void gemm_bf16_gemv(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                    cudaStream_t s, int variant, int blocks) {
  if (M <= 0 || N <= 0) return;
  check(M, K, lda, W, A, variant, "gemm_bf16_gemv");
  kVariants[variant < 0 ? default_variant() : variant].run[0](A, M, K, lda, W, N, out(C, ldc, bias, false), s, blocks);
  check_launch("gemm_bf16_gemv");
}

void gemm_bf16_gemv_add(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C,
                        int ldc, cudaStream_t s, int variant) {
  if (M <= 0 || N <= 0) return;
  check(M, K, lda, W, A, variant, "gemm_bf16_gemv_add");
  kVariants[variant < 0 ? default_variant() : variant].run[0](A, M, K, lda, W, N, out(C, ldc, bias, true), s, 0);
  check_launch("gemm_bf16_gemv_add");
}

void gemm_bf16_gemv_probe(int probe, const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc,
                          cudaStream_t s, int variant) {
  if (M <= 0 || N <= 0) return;
  if (probe < 1 || probe > 2) throw Error("gemm_bf16_gemv_probe: no such probe");
  check(M, K, lda, W, A, variant, "gemm_bf16_gemv_probe");
  kVariants[variant < 0 ? default_variant() : variant].run[probe](A, M, K, lda, W, N, out(C, ldc, nullptr, false), s, 0);
  check_launch("gemm_bf16_gemv_probe");
}

int gemm_gemv_variants() { return kVariantCount; }
const char* gemm_gemv_variant_name(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].name : "?";
}

}  // namespace parity::cuda
