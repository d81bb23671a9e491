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
// one row, wherever the blocks ran), so for long K and few columns the "mma" variant runs the same
// ring with mma.sync, the weights as its m16 side (gemm_swap_ab_mma.cuh): 16 columns per warp,
// more blocks, and shorter dependent steps (out_proj 20.5 -> 17.1 µs at one row).
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
#include <functional>

#include "common/error.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_swap_ab_kernel.cuh"
#include "kernels_cuda/gemm_swap_ab_mma.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/programmatic_launch.cuh"
#include "kernels_cuda/tensor_map.h"

namespace parity::cuda {
namespace {

using namespace swap_ab;

// with_conv_epilogue's job on this thread (null: none), and whether a launch took it.
thread_local const ConvEpilogue* t_conv = nullptr;
thread_local bool t_conv_taken = false;
std::atomic<bool> conv_epilogue_on{kConvEpilogueDefault};
std::atomic<bool> gate_in_epilogue_on{kGateInEpilogueDefault};
std::atomic<bool> conv_grouped_on{false};
std::atomic<bool> gated_out_on{kGatedOutProjDefault};

struct Args {
  const float* A;
  int M, K, lda;
  const void* W;
  int N;
  const float* bias;
  float* C;
  int ldc;
  cudaStream_t s;
  unsigned early;  // ops.h's GemmEarly flags; not 0: launched programmatically
  NextL2 next;     // with kGemmEarlyNextL2 inside with_l2_prefetch: the weights to ask L2 for
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
  with_bf16_rows(a.A, a.M, a.K, a.lda, a.s, [&](const void* a16) {
    const CUtensorMap xmap = bf16_rows_tensor_map_cached(a16, a.K, a.M, NT);
    const dim3 grid = block_grid(a.M, NT, a.N, Cfg::kCols);
    launch_programmatic_if(a.early != 0, kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, a.s, "gemm_bf16_swap_ab",
                           wmap, xmap, a.M, a.K, a.N, a.bias, a.C, a.ldc, a.early, a.next);
  });
}

// The mma.sync kernel (gemm_swap_ab_mma.cuh) for up to 32 rows; more rows take the wgmma kernel's
// c64-2blk (the mma.sync kernel keeps a whole box's fragments of every n8 tile in registers).
// With a conv epilogue job on this thread (with_conv_epilogue) and NT = 8, the instantiation that does it.
// GROUP: the grouped consumer (gemm_swap_ab_group.cuh) with that many boxes a group at 8 rows, at most 2
// at 16 (two groups of fragments in registers), box by box at 32; the conv epilogue's kernel is box by box.
template <int NT, int GROUP>
constexpr int group_for_rows() {
  return NT == 8 ? GROUP : NT == 16 ? (GROUP < 2 ? GROUP : 2) : 0;
}
// BAR: one barrier pair per group (the "-s" variants) where the rows keep a group (the group's size).
template <int NT, int GROUP, bool SHARED>
constexpr int bar_for_rows() {
  return SHARED && group_for_rows<NT, GROUP>() > 0 ? group_for_rows<NT, GROUP>() : 1;
}

// RW: row warps (gemm_swap_ab_mma.cuh), each of NT rows: a block computes NT · RW rows.
template <int CW, int NT, int BPS, bool LAG, int GROUP = 0, bool SHARED = false, int RW = 1>
void launch_mma(const Args& a) {
  if constexpr (NT * RW > 32) {
    launch<1, NT * RW, 2>(a);
  } else {
    using Cfg = MmaConfig<CW, NT, BPS, RW>;
    const bool conv = NT == 8 && RW == 1 && t_conv != nullptr;
    auto* kernel = swap_ab_mma_kernel<CW, NT, BPS, LAG, false, false, false, group_for_rows<NT, GROUP>(),
                                      bar_for_rows<NT, GROUP, SHARED>(), RW>;
    // The conv epilogue's kernel: box by box (session 12's consumer), or the grouped consumer the GEMM
    // takes without it (conv_epilogue_grouped()). Each has its own shared-memory opt-in record.
    const bool grouped = conv && conv_grouped_on.load();
    if constexpr (NT == 8 && RW == 1)
      if (conv)
        kernel = grouped ? swap_ab_mma_kernel<CW, NT, BPS, LAG, true, false, false, group_for_rows<NT, GROUP>(),
                                              bar_for_rows<NT, GROUP, SHARED>()>
                         : swap_ab_mma_kernel<CW, NT, BPS, LAG, true>;
    const ConvEpilogue ep = conv ? *t_conv : ConvEpilogue{};
    t_conv_taken = t_conv_taken || conv;
    // No L2 prefetch of the next ring here: this ring already holds 10+ boxes, and at one row (session 11,
    // mamba2-2.7b) the step was 1-2 % slower with it; the wgmma kernel's 6-box ring at 64 rows gained 3 %.
    const unsigned early = a.early & ~kEarlyL2;
    // One opt-in record per kernel (the attribute is the kernel's; the two share this launcher).
    static std::atomic<std::uint64_t> opted{0}, opted_conv{0}, opted_conv_grouped{0};
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes,
                       grouped ? opted_conv_grouped : conv ? opted_conv : opted, true);
    const CUtensorMap wmap = bf16_rows_tensor_map_cached(a.W, a.K, a.N, Cfg::kCols);
    with_bf16_rows(a.A, a.M, a.K, a.lda, a.s, [&](const void* a16) {
      const CUtensorMap xmap = bf16_rows_tensor_map_cached(a16, a.K, a.M, Cfg::kRows);
      const dim3 grid = block_grid(a.M, Cfg::kRows, a.N, Cfg::kCols);
      launch_programmatic_if(a.early != 0, kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, a.s,
                             "gemm_bf16_swap_ab", wmap, xmap, a.M, a.K, a.N, a.bias, a.C, a.ldc, early, a.next, ep,
                             static_cast<long long*>(nullptr), GatedA{});
    });
  }
}

using LaunchFn = void (*)(const Args&);
struct Variant {
  const char* name;
  LaunchFn by_rows[kRowTileCount];  // by row_tile_index
  int cols;                         // a block's columns (the mma.sync ones' above 32 rows: c64-2blk's 64)
  int columns_at(int tile_index) const { return cols < 64 && kRowTiles[tile_index] > 32 ? 64 : cols; }
};
template <int CWG, int BPS>
constexpr Variant variant(const char* name) {
  return {name,
          {launch<CWG, 8, BPS>, launch<CWG, 16, BPS>, launch<CWG, 32, BPS>, launch<CWG, 64, BPS>, launch<CWG, 128, BPS>,
           launch<CWG, 256, BPS>},
          64 * CWG};
}

template <int CW, int BPS, bool LAG = false, int GROUP = 0, bool SHARED = false>
constexpr Variant mma_variant(const char* name) {
  return {name,
          {launch_mma<CW, 8, BPS, LAG, GROUP, SHARED>, launch_mma<CW, 16, BPS, LAG, GROUP, SHARED>,
           launch_mma<CW, 32, BPS, LAG, GROUP, SHARED>, launch_mma<CW, 64, BPS, LAG, GROUP, SHARED>,
           launch_mma<CW, 128, BPS, LAG, GROUP, SHARED>, launch_mma<CW, 256, BPS, LAG, GROUP, SHARED>},
          16 * CW};
}
// Session 39: 32-row tiles as two row warps of 16 (the grouped consumer's rows) sharing each W box; 8 and
// 16 rows as mma_variant's.
template <int CW, int BPS, int GROUP, bool SHARED>
constexpr Variant mma_row_warps_variant(const char* name) {
  return {name,
          {launch_mma<CW, 8, BPS, false, GROUP, SHARED>, launch_mma<CW, 16, BPS, false, GROUP, SHARED>,
           launch_mma<CW, 16, BPS, false, GROUP, SHARED, 2>, launch_mma<CW, 64, BPS, false, GROUP, SHARED>,
           launch_mma<CW, 128, BPS, false, GROUP, SHARED>, launch_mma<CW, 256, BPS, false, GROUP, SHARED>},
          16 * CW};
}

// Columns per block (64: one consumer warpgroup; 128: two, sharing A's boxes) and blocks per SM
// (two: one block's ring fills while the other's drains); mma-c32-4blk: the mma.sync kernel, two
// warps of 16 columns a block, four blocks per SM. Measured on an H200 (BM_CudaGemmSwapAb, device
// time, µs, M = 1 / 16 / 64 / 256; in_proj 10576×2560, out_proj 2560×5120, lm_head 50288×2560):
//                 in_proj                 out_proj                lm_head
//   c64           25.9 26.5 29.9 44.6     20.7 21.4 24.8 35.9     73.3  74.8  82.7 140
//   c64-2blk      22.4 22.3 22.4 44.7     20.5 21.3 23.0 35.9     67.7  70.0  74.9 139
//   c128          22.1 23.0 22.9 37.0     24.9 26.4 30.6 57.0     68.3  70.8  76.6 112
//   c128-2blk     19.9 20.7 25.7 37.1     20.6 21.5 30.5 57.0     69.7  72.7  78.1 112
//   mma-c32-4blk  20.5 20.8   —    —      17.1 18.8   —    —      67.7  69.3   —    —
// (mma-c32-4blk takes c64-2blk above 32 rows.) Dropped after that run: the same ring with A rounded
// to bf16 by the consumers from fp32 boxes (no pre-pass launch; within 3 % at best, up to 74 %
// slower: the rounding sits on the consumers' path), and mma.sync with 16 or 64 columns a block
// (lm_head 126 µs; out_proj 17.4-17.7).
//
// Session 11 (device time, µs, M = 1, L2 flushed; BM_CudaGemmSwapAb/1/shape/variant/1): out_proj is not
// short of bytes in flight or of SMs: mma-c32-4blk 17.9, one warp of 16 columns a block (160 blocks)
// 20.5, a ring of up to 48 stages (one block an SM) 20.3; in_proj 23.1 / 38.3 / 37.8. Both dropped.
// mma-c32-4blk-lag: mma-c32-4blk with the decode kernel's consumer schedule (gemm_swap_ab_mma.cuh's
// LAG: no arrival and no blocking barrier wait between two dependent steps), for out_proj's chain of
// 320 dependent steps per output (~440 cycles a 64-deep box at 17.9 µs).
//
// Session 13: the grouped consumer (gemm_swap_ab_group.cuh: the ring's barriers met once per group of
// boxes, a group's fragments read a group ahead), up to 16 rows: mma-c32-4blk-g2 (two boxes a group, four
// blocks an SM: in_proj's 331 blocks stay resident), mma-c32-2blk-g4 (four boxes a group: the two
// register sets take more than a quarter of an SM's registers; a 21-stage ring), mma-c32-1blk-g4 (one
// block an SM, a 40-stage ring: out_proj's 80 blocks); the "-s" ones with one barrier pair a group's
// stages (produce_units). 32 rows: box by box at the variant's ring. Measured on the H200 (checkpoint
// call, 2026-12-02; BM_CudaGemmSwapAb/M/shape/variant/1, µs, L2 flushed, the pre-pass included, M = 1 / 8 / 16):
//                      in_proj 10576×2560    out_proj 2560×5120
//   mma-c32-4blk       23.4 23.8 23.8        20.0 19.6 20.5
//   mma-c32-4blk-g2    23.6 24.0 24.2        20.3 19.9 22.5
//   mma-c32-2blk-g4    30.9 31.8 31.6        21.1 20.4 23.0
//   mma-c32-1blk-g4    40.6 41.3 43.3        22.4 21.6 24.8
//   mma-c32-4blk-g2s   23.6 24.1 24.0        19.8 19.2 20.7
//   mma-c32-2blk-g4s   26.9 27.4 29.1        17.2 16.6 20.3
// Grouping the barrier instructions without reducing them gained nothing; one barrier pair for four
// boxes took out_proj's loop from ~290 to ~205 cycles a box (BM_CudaGemmSwapAbProbe). in_proj waits on
// its data (~470 of ~690 cycles a box), not on its loop: no variant helps it.
const Variant kVariants[] = {
    variant<1, 1>("c64"),
    variant<1, 2>("c64-2blk"),
    variant<2, 1>("c128"),
    variant<2, 2>("c128-2blk"),
    mma_variant<2, 4>("mma-c32-4blk"),
    mma_variant<2, 4, true>("mma-c32-4blk-lag"),
    mma_variant<2, 4, false, 2>("mma-c32-4blk-g2"),
    mma_variant<2, 2, false, 4>("mma-c32-2blk-g4"),
    mma_variant<2, 1, false, 4>("mma-c32-1blk-g4"),
    mma_variant<2, 4, false, 2, true>("mma-c32-4blk-g2s"),
    mma_variant<2, 2, false, 4, true>("mma-c32-2blk-g4s"),
    mma_variant<2, 1, false, 4, true>("mma-c32-1blk-g4s"),
    mma_variant<1, 2, false, 4, true>("mma-c16-2blk-g4s"),
    mma_row_warps_variant<2, 2, 4, true>("mma-c32-2blk-g4s-rw2"),  // session 39: 32-row tiles as two row warps
};
constexpr int kVariantCount = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kC64TwoBlocks = 1, kC128 = 2, kMmaC32 = 4, kMmaC32Lag = 5, kMmaC32G2Shared = 9,
              kMmaC32G4TwoBlocksShared = 10, kMmaC32G4OneBlockShared = 11, kMmaC16G4TwoBlocksShared = 12,
              kMmaC32G4RowWarps = 13;

// The default variant, from the shapes alone (the table above): up to 16 rows mma-c32-4blk (the
// fastest on out_proj and lm_head, within 4 % of c128-2blk on in_proj); up to 64 c64-2blk (the
// fastest or tied on every shape); above, c128 where its blocks still cover half the SMs (in_proj,
// lm_head: 17-20 % faster) and c64-2blk where they do not (out_proj's 20 blocks: 58 % slower).
// kGemmMmaLag (ops.h) takes mma-c32-4blk-lag for mma-c32-4blk's rows.
// Session 13: up to 16 rows the grouped consumer with one barrier pair a group, mma-c32-2blk-g4s where
// the blocks (32 columns each) are no more than the SMs (out_proj: one block an SM whatever the variant
// allows; 14 % faster alone, the step 9.6 % at batch 1), mma-c32-4blk-g2s where they are more (in_proj's
// 331 blocks stay resident at four an SM; even with mma-c32-4blk); kGemmMmaBoxByBox takes mma-c32-4blk.
// Session 38: up to 32 rows mma-c32-2blk-g4s where its blocks are no more than the SMs, in row tiles of 16
// (row_tile_for): out_proj's 160 blocks against c64-2blk's 40 (gemm_swap_ab.h's kGemmWgmmaFrom17Rows says
// what it gained). Session 39: from 33 to 64 rows there mma-c32-2blk-g4s-rw2, row tiles of 32 as two row warps
// of 16 sharing each W box (kGemmWgmmaFrom33Rows says what it gained; tiles of 16, 240-320 blocks, lost).
int default_variant(int M, int N, unsigned flags) {
  if (M <= 16) {
    if (flags & kGemmMmaLag) return kMmaC32Lag;
    if (flags & kGemmMmaBoxByBox) return kMmaC32;
    if ((N + 31) / 32 <= sm_count()) {
      if (flags & kGemmMmaOutProjRing) return kMmaC32G4OneBlockShared;
      if (flags & kGemmMmaOutProjNarrow) return kMmaC16G4TwoBlocksShared;
      return kMmaC32G4TwoBlocksShared;
    }
    return kMmaC32G2Shared;
  }
  const bool mma_fits = (N + 31) / 32 <= sm_count() && (flags & kGemmWgmmaFrom17Rows) == 0;
  if (mma_fits && (M <= 32 || (M <= 64 && (flags & (kGemmMmaTo64Rows | kGemmMmaTo64RowsIn16)) != 0)))
    return kMmaC32G4TwoBlocksShared;
  if (mma_fits && M <= 64 && (flags & kGemmWgmmaFrom33Rows) == 0) return kMmaC32G4RowWarps;
  if (mma_fits && M <= 128 && (flags & kGemmRowWarpsTo128Rows) != 0) return kMmaC32G4RowWarps;
  if (M <= 64) return kC64TwoBlocks;
  return (N + 127) / 128 >= sm_count() / 2 ? kC128 : kC64TwoBlocks;
}

// The rows a pass computes (an index into kRowTiles): one row tile over M, so a GEMM with few columns has
// as few blocks at 256 rows as at one (out_proj, 2560 columns: 40 blocks of c64-2blk on 132 SMs; in a
// decode step 2-2.5× its weights' read time at 64 rows, session 36). Split (session 38): from 17 rows on
// the tile is halved (not below kMinSplitRows) while the grid has fewer blocks than the SMs; the blocks of
// one column range, launched side by side (block_grid), read the same weights, the later ones from L2.
// By default only the mma.sync variants' passes of 17-32 rows split (out_proj: two row tiles of 16 on the
// grouped consumer, 160 blocks; a decode step at 32 sequences 2.1 % shorter plain, 3.3 % exact than one
// tile of 32, H100); kGemmRowTileSplit splits every pass: out_proj alone 10-20 % faster at 128 and 256
// rows, no faster at 64, in_proj slower; a decode step at 32, 64 and 256 sequences even, exact at 64 3 %
// slower. The row tile decides which rows a block's chain runs on, never a chain's steps: the same bits
// (CudaGemmSwapAb's row tile test).
constexpr int kMinSplitRows = 16;
int row_tile_for(int M, int N, const Variant& v, unsigned flags) {
  int ti = row_tile_index(M);
  if ((flags & kGemmMmaTo64RowsIn16) != 0 && v.cols < 64 && M > 32 && M <= 64) return row_tile_index(16);
  // The row warps' variant takes 33-128 rows as row tiles of 32 (its 64- and 128-row launches are c64-2blk's).
  if (&v == &kVariants[kMmaC32G4RowWarps] && M > 32 && M <= 128) return row_tile_index(32);
  if ((flags & kGemmMmaTo64Rows) != 0 && v.cols < 64 && M > 32 && M <= 64) return row_tile_index(32);
  const bool mma_to_32 = v.cols < 64 && M <= 32;  // the default since session 38 (above)
  if (M <= kMinSplitRows || ((flags & kGemmRowTileSplit) == 0 && !mma_to_32)) return ti;
  auto blocks = [&](int i) {
    return static_cast<long>((N + v.columns_at(i) - 1) / v.columns_at(i)) * ((M + kRowTiles[i] - 1) / kRowTiles[i]);
  };
  while (ti > 0 && kRowTiles[ti] > kMinSplitRows && blocks(ti) < sm_count()) --ti;
  return ti;
}

// The weights with_l2_prefetch names on this thread (null: none).
thread_local NextL2 t_next{nullptr, 0};

}  // namespace

void with_l2_prefetch(const void* next, std::size_t bytes, const std::function<void()>& enqueue) {
  struct Restore {
    NextL2 prev;
    ~Restore() { t_next = prev; }
  } restore{t_next};
  t_next = NextL2{static_cast<const unsigned char*>(next), bytes / 16 * 16};
  enqueue();
}

bool with_conv_epilogue(const ConvEpilogue& job, const std::function<void()>& enqueue) {
  struct Restore {
    const ConvEpilogue* prev;
    bool taken;
    ~Restore() {
      t_conv = prev;
      t_conv_taken = taken;
    }
  } restore{t_conv, t_conv_taken};
  const bool usable = conv_epilogue_on.load() && job.K >= 2 && job.K <= kConvEpilogueTaps;
  t_conv = usable ? &job : nullptr;
  t_conv_taken = false;
  enqueue();
  return t_conv_taken;
}

bool gemm_bf16_gated_row(const GatedA& a, int K, const void* W, int N, const float* bias, float* C, cudaStream_t s) {
  using Cfg = MmaConfig<2, 8, 4>;
  if (!gated_out_on.load() || N <= 0 || a.group != K || K > norm_row::kHeldMaxWidth || K % 32 != 0 ||
      reinterpret_cast<std::uintptr_t>(W) % 16 != 0)
    return false;
  const unsigned flags = gemm_early_flags();
  const bool lag = (flags & kGemmMmaLag) != 0;
  auto* kernel = lag ? swap_ab_mma_kernel<2, 8, 4, true, false, false, true>
                     : swap_ab_mma_kernel<2, 8, 4, false, false, false, true>;
  // Each kernel opted in once (its own record) for the widest row the held form takes.
  constexpr int kMaxSmem = Cfg::kSmemBytes + gated_region_bytes(norm_row::kHeldMaxWidth);
  static std::atomic<std::uint64_t> opted{0}, opted_lag{0};
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kMaxSmem, lag ? opted_lag : opted, true);
  const CUtensorMap wmap = bf16_rows_tensor_map_cached(W, K, N, Cfg::kCols);
  const dim3 grid = block_grid(1, 8, N, Cfg::kCols);
  // The producer requests its ring before the wait whatever the flags (the weights are no kernel's
  // output); the L2 hints are the ring kernel's and stay off.
  launch_programmatic_if(flags != 0, kernel, grid, dim3(kGatedThreads), Cfg::kSmemBytes + gated_region_bytes(K), s,
                         "gemm_bf16_gated_row", wmap, wmap, 1, K, N, bias, C, N, flags & (kEarlyRelease), NextL2{nullptr, 0},
                         ConvEpilogue{}, static_cast<long long*>(nullptr), a);
  check_launch("gemm_bf16_gated_row");
  return true;
}

bool gated_out_proj() { return gated_out_on.load(); }
void set_gated_out_proj(bool on) { gated_out_on.store(on); }

bool conv_epilogue() { return conv_epilogue_on.load(); }
bool gate_in_epilogue() { return gate_in_epilogue_on.load(); }
void set_gate_in_epilogue(bool on) { gate_in_epilogue_on.store(on); }
bool conv_epilogue_grouped() { return conv_grouped_on.load(); }
void set_conv_epilogue_grouped(bool on) { conv_grouped_on.store(on); }
void set_conv_epilogue(bool on) { conv_epilogue_on.store(on); }

bool gemm_swap_ab_fits(const float* A, int K, int lda, const void* W) { return gemm_mma_fits(A, K, lda, W); }

void gemm_bf16_swap_ab(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                       cudaStream_t s, int variant, int early, int row_tile) {
  if (M <= 0 || N <= 0) return;
  if (variant >= kVariantCount) throw Error("gemm_bf16_swap_ab: no such variant");
  if (!gemm_swap_ab_fits(A, K, lda, W)) throw Error("gemm_bf16_swap_ab: unsupported operands");
  const unsigned flags = early < 0 ? gemm_early_flags() : static_cast<unsigned>(early);
  const Variant& v = kVariants[variant < 0 ? default_variant(M, N, flags) : variant];
  int ti = row_tile_for(M, N, v, flags);
  if (row_tile > 0) {
    const int forced = row_tile_index(row_tile);
    if (kRowTiles[forced] != row_tile) throw Error("gemm_bf16_swap_ab: a row tile is 8, 16, 32, 64, 128 or 256 rows");
    ti = std::min(forced, row_tile_index(M));
  }
  const NextL2 next = flags & kGemmEarlyNextL2 ? t_next : NextL2{nullptr, 0};
  v.by_rows[ti](Args{A, M, K, lda, W, N, bias, C, ldc, s, flags & ~kGemmChoiceFlags, next});
  check_launch("gemm_bf16_swap_ab");
}

namespace {
template <int BPS, bool LAG, int GROUP, int BAR = 1>
void launch_probe(const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc, cudaStream_t s,
                  long long* probe) {
  using Cfg = MmaConfig<2, 8, BPS>;
  auto* kernel = swap_ab_mma_kernel<2, 8, BPS, LAG, false, true, false, GROUP, BAR>;
  static std::atomic<std::uint64_t> opted{0};  // one record per kernel
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, opted, true);
  const CUtensorMap wmap = bf16_rows_tensor_map_cached(W, K, N, Cfg::kCols);
  with_bf16_rows(A, M, K, lda, s, [&](const void* a16) {
    const CUtensorMap xmap = bf16_rows_tensor_map_cached(a16, K, M, 8);
    const dim3 grid = block_grid(M, 8, N, Cfg::kCols);
    launch_programmatic_if(false, kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, s, "gemm_bf16_swap_ab_probe", wmap,
                           xmap, M, K, N, static_cast<const float*>(nullptr), C, ldc, 0u, NextL2{nullptr, 0},
                           ConvEpilogue{}, probe, GatedA{});
  });
}
}  // namespace

void gemm_bf16_swap_ab_probe(const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc,
                             cudaStream_t s, int schedule, long long* probe) {
  if (M <= 0 || M > 8 || N <= 0) throw Error("gemm_bf16_swap_ab_probe: 1..8 rows");
  if (!gemm_swap_ab_fits(A, K, lda, W)) throw Error("gemm_bf16_swap_ab_probe: unsupported operands");
  using Fn = void (*)(const float*, int, int, int, const void*, int, float*, int, cudaStream_t, long long*);
  static constexpr Fn kSchedules[kSwapAbProbeSchedules] = {
      launch_probe<4, false, 0>, launch_probe<4, true, 0>, launch_probe<4, false, 2>, launch_probe<2, false, 4>,
      launch_probe<1, false, 4>, launch_probe<1, false, 0>, launch_probe<2, false, 2>, launch_probe<4, false, 2, 2>,
      launch_probe<2, false, 4, 4>, launch_probe<1, false, 4, 4>};
  if (schedule < 0 || schedule >= kSwapAbProbeSchedules) throw Error("gemm_bf16_swap_ab_probe: no such schedule");
  kSchedules[schedule](A, M, K, lda, W, N, C, ldc, s, probe);
  check_launch("gemm_bf16_swap_ab_probe");
}

const char* gemm_bf16_swap_ab_probe_name(int schedule) {
  static const char* const kNames[kSwapAbProbeSchedules] = {
      "mma-c32-4blk box by box", "mma-c32-4blk-lag", "mma-c32-4blk-g2", "mma-c32-2blk-g4",
      "mma-c32-1blk-g4", "mma-c32-1blk box by box", "mma-c32-2blk-g2", "mma-c32-4blk-g2s", "mma-c32-2blk-g4s",
      "mma-c32-1blk-g4s"};
  return schedule >= 0 && schedule < kSwapAbProbeSchedules ? kNames[schedule] : "?";
}

int gemm_bf16_swap_ab_probe_warps(int N) { return 2 * ((N + MmaConfig<2, 8, 4>::kCols - 1) / MmaConfig<2, 8, 4>::kCols); }

int gemm_swap_ab_variants() { return kVariantCount; }
const char* gemm_swap_ab_variant_name(int variant) {
  return variant >= 0 && variant < kVariantCount ? kVariants[variant].name : "?";
}

}  // namespace parity::cuda
