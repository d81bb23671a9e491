#pragma once
// The decode-sized bf16 GEMM on Hopper's wgmma with the operands swapped (gemm_swap_ab.cu):
// C[M][N] = A · Wᵀ (+ bias) computed as Cᵀ = W · Aᵀ, the weights as wgmma's 64-row A operand and
// up to 256 rows of A as its B operand. Same contract and bits as the other bf16 kernels (gemm.cu).
#include <cuda_runtime_api.h>

namespace parity::cuda {

// gemm() takes this kernel up to this many rows of A, the mma tiles (gemm_mma.h) above: at 256
// rows it still took 0.66× (in_proj, out_proj) and 0.54× (lm_head) the tiles' time on an H200.
constexpr int kSwapAbMaxRows = 256;

// A decode GEMM flag beside ops.h's GemmEarly (the same set_gemm_early word; graphs record it): up to 16
// rows gemm() takes the swap-AB mma.sync kernel with session 12's consumer (mma-c32-4blk: a barrier test
// or wait and a release every box) instead of the grouped one (gemm_swap_ab_group.cuh: one barrier pair
// a group of boxes). The same bits either way; benchmarks compare them (gemm:1059 = 35 + 1024).
inline constexpr unsigned kGemmMmaBoxByBox = 1024u;
// Session 35: out_proj's share of the bytes in flight. Up to 16 rows, where the blocks are no more than the
// SMs (out_proj at mamba2-2.7b: 80 blocks of 32 columns, 80 KiB of weights in flight each), gemm() takes
// mma-c32-1blk-g4s (one block an SM, a 40-stage ring: 160 KiB each) with kGemmMmaOutProjRing, or
// mma-c16-2blk-g4s (16 columns a block: 160 blocks, 72 KiB each) with kGemmMmaOutProjNarrow. Off: within 1 %
// of the default at batch 1 (session 35), and 2-4 % slower exact with out_proj scheduled during the SSM step
// (session 36, early_start.h's kGemmEarlySsmFirst and kGemmEarlyGatedNormFirst).
inline constexpr unsigned kGemmMmaOutProjRing = 4096u, kGemmMmaOutProjNarrow = 8192u;
// Session 38: from 17 rows on, gemm() splits every pass's rows into smaller row tiles while its grid has
// fewer blocks than the SMs (gemm_swap_ab.cu's row_tile_for; by default only the mma.sync variants' passes
// of up to 32 rows split). Off: out_proj alone gained 10-20 % at 128 and 256 rows, a decode step at 64 and
// 256 sequences nothing, and exact mode at 64 lost 3 % (docs/performance.md, "Session 38").
inline constexpr unsigned kGemmRowTileSplit = 1u << 24;
// Session 38: from 17 to 32 rows, where 32-column blocks are no more than the SMs (out_proj), gemm() takes
// mma-c32-2blk-g4s in row tiles of 16 (160 blocks at mamba2-2.7b's out_proj, the grouped consumer) instead
// of c64-2blk (40 blocks). On the H100, in one tile of 32 rows (80 blocks): out_proj's share of a decode
// step 19.8 -> 17.3 µs a layer at 32 sequences, the step 1.3-2.2 % shorter at 24 and 32; two tiles of 16
// took the step at 32 a further 2.1 % (plain) and 3.3 % (exact). This flag takes c64-2blk there, as before,
// to measure against.
inline constexpr unsigned kGemmWgmmaFrom17Rows = 1u << 25;
// Session 38: from 33 to 64 rows too, in two row tiles of 32 side by side (160 blocks at out_proj). Off: a
// decode step at 48 and 64 sequences 0.4-0.6 % shorter plain, 2-2.7 % longer exact (H100) than c64-2blk.
inline constexpr unsigned kGemmMmaTo64Rows = 1u << 26;
// Session 39: from 33 to 64 rows on mma-c32-2blk-g4s in row tiles of 16 (the 17-32-row default's tile: 240
// and 320 blocks at out_proj, the grouped consumer; the blocks of one column range side by side, the later
// ones reading the weights from L2). One launch with A pre-rounded and L2 flushed, out_proj at 48 and 64
// rows took 26.7 and 27.3 µs on c64-2blk and 27.4 in two tiles of 32 beside cuBLAS's 19.7 and 18.7 (H100);
// in row tiles of 16, 20.6 and 33.6 (320 blocks: two waves). Off: a decode step at 48 and 64 sequences
// 5-6 % longer than c64-2blk, plain and exact (H100).
inline constexpr unsigned kGemmMmaTo64RowsIn16 = 1u << 27;
// Session 39: from 33 to 64 rows, where 32-column blocks are no more than the SMs (out_proj), gemm() takes
// mma-c32-2blk-g4s-rw2: row tiles of 32, each computed by two row warps of 16 a column warp that read the
// same W boxes (160 blocks at mamba2-2.7b's out_proj, half the L2 reads of tiles of 16). On the H100, one
// launch, A pre-rounded, L2 flushed: out_proj 26.6 / 27.2 -> 21.9 / 22.0 µs at 48 / 64 rows (cuBLAS 19.4-19.7
// / 18.4-18.7); a decode step at 48 / 64 sequences 3.4 / 4.1 % shorter plain, 2.3 / 2.9 % exact. This flag
// takes c64-2blk there, as before; kGemmWgmmaFrom17Rows takes it from 17 to 64 rows.
inline constexpr unsigned kGemmWgmmaFrom33Rows = 1u << 28;
// Session 39: from 65 to 128 rows on the row warps too (out_proj: 240-320 blocks of 32-row tiles, where
// c64-2blk has 40). Off: alone 35.4 -> 22.6 µs at 96 rows, 36.3 -> 37.0 at 128, but a decode step at 96 and
// 128 sequences 1 % longer plain and 2-3 % exact (H100).
inline constexpr unsigned kGemmRowWarpsTo128Rows = 1u << 29;
// The flags above that only choose a variant or a row tile: gemm_bf16_swap_ab takes them off the word the
// kernels get (a new choice flag belongs here, not in the kernels' early-start bits).
inline constexpr unsigned kGemmChoiceFlags = kGemmMmaBoxByBox | kGemmRowTileSplit | kGemmWgmmaFrom17Rows |
                                             kGemmMmaTo64Rows | kGemmMmaTo64RowsIn16 | kGemmWgmmaFrom33Rows |
                                             kGemmRowWarpsTo128Rows;

// Whether gemm_bf16_swap_ab can take these operands: gemm_mma_fits's (K a multiple of 32, A rows
// 16-byte vectors, W 16-byte aligned) and the tensor maps' (K a multiple of 8: implied).
bool gemm_swap_ab_fits(const float* A, int K, int lda, const void* W);

// C[M][N] = A · Wᵀ (+ bias), W bf16 [N][K]. Any M (passes of up to 256 rows); meant for M up to a
// few hundred, where the weights' read is the cost. A is rounded to bf16 into the module's scratch
// (with_bf16_rows, gemm_mma.h). variant < 0: the default; else one of gemm_swap_ab_variants()
// (tests and benchmarks compare them; all give the same bits). early: ops.h's GemmEarly flags, not 0
// launching it programmatically after the kernel before it (< 0: gemm_early() while
// programmatic_launch() is on, else 0). row_tile: the rows a block computes (8, 16, ..., 256; more than
// M's own tile takes M's); 0 the default (row_tile_for: M's own tile but where a pass splits). Neither
// changes a bit.
void gemm_bf16_swap_ab(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                       cudaStream_t s, int variant = -1, int early = -1, int row_tile = 0);

// Benchmarks (BM_CudaGemmSwapAbProbe): the mma.sync kernel (two warps of 16 columns a block) at 1..8 rows,
// ordinary launch, no bias, each consumer warp's clock counts into probe (gemm_swap_ab_mma.cuh's PROBE:
// start to first box, start to the end of the steps, cycles waiting on stages, boxes; 4 per warp, warps of
// block 0 first); gemm_bf16_swap_ab_probe_warps(N) consumer warps in all. schedule: the consumer and the
// blocks an SM (gemm_bf16_swap_ab_probe_name): 0 mma-c32-4blk box by box (session 12's), 1 its -lag
// schedule, 2 mma-c32-4blk-g2, 3 mma-c32-2blk-g4, 4 mma-c32-1blk-g4 (the grouped consumer,
// gemm_swap_ab_group.cuh), 5 box by box at one block an SM (the 40-stage ring), 6 grouped by two at two
// blocks an SM, 7 mma-c32-4blk-g2s, 8 mma-c32-2blk-g4s, 9 mma-c32-1blk-g4s (one barrier pair a group).
constexpr int kSwapAbProbeSchedules = 10;
void gemm_bf16_swap_ab_probe(const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc,
                             cudaStream_t s, int schedule, long long* probe);
const char* gemm_bf16_swap_ab_probe_name(int schedule);
int gemm_bf16_swap_ab_probe_warps(int N);

int gemm_swap_ab_variants();
const char* gemm_swap_ab_variant_name(int variant);

}  // namespace parity::cuda
