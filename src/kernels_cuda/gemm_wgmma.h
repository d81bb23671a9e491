#pragma once
// The many-rows bf16 GEMM on Hopper's warpgroup tensor cores (gemm_wgmma.cu), used by gemm() in
// gemm.cu above a row count; same contract and the same bits as the mma.sync tiles (gemm_mma.h).
#include <cstdint>

#include <cuda_runtime_api.h>

namespace parity::cuda {

// Whether gemm_bf16_wgmma can take these operands: those gemm_mma_fits takes (K in whole 32-deep
// steps, A rows readable as 16-byte vectors, W 16-byte aligned); the tensor maps need no more.
bool gemm_wgmma_fits(const float* A, int K, int lda, const void* W);
// C[M][N] = A · Wᵀ (+ bias) with W bf16 [N][K]. A is rounded to bf16 first (with_bf16_rows,
// gemm_mma.h); the tile is chosen from M and N.
void gemm_bf16_wgmma(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                     cudaStream_t s);

// For tests and benchmarks: the ways gemm_bf16_wgmma may plan a pass with (each a set of tiles:
// 0 = session 9's, the reference; 1 = gemm()'s, storing C through shared memory and the TMA unit),
// the one it takes, a way's name, and the pass planned with way `way`. Every way gives the same bits.
int gemm_wgmma_way_count();
int gemm_wgmma_default_way();
const char* gemm_wgmma_way_name(int way);
void gemm_bf16_wgmma_way(int way, const float* A, int M, int K, int lda, const void* W, int N, const float* bias,
                         float* C, int ldc, cudaStream_t s);

// For tests and benchmarks: the number of tiles, the name of one, and the pass on tile `tile`
// (0 = 128 × 256) whatever M and N.
int gemm_wgmma_tile_count();
const char* gemm_wgmma_tile_name(int tile);
void gemm_bf16_wgmma_tile(int tile, const float* A, int M, int K, int lda, const void* W, int N, const float* bias,
                          float* C, int ldc, cudaStream_t s);

// The MoE's experts (gemm_grouped's contract, ops.h) on the same tiles: group z's rows
// [offsets[z], offsets[z+1]) of A (fp32 [total_rows][lda]) meet the weights at W + z·w_stride
// ([N][K] bf16) into the same rows of C; no bias. Up to gemm_wgmma_max_groups() groups; w_stride a
// multiple of 8. A group's rows get the bits gemm() gives them alone.
int gemm_wgmma_max_groups();
void gemm_grouped_bf16_wgmma(const float* A, int lda, const int32_t* offsets, int groups, int total_rows, int K,
                             const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s);
void gemm_grouped_bf16_wgmma_tile(int tile, const float* A, int lda, const int32_t* offsets, int groups,
                                  int total_rows, int K, const void* W, int64_t w_stride, int N, float* C, int ldc,
                                  cudaStream_t s);

}  // namespace parity::cuda
