#pragma once
// The many-rows bf16 GEMM kernel (gemm_mma.cu), used by gemm() in gemm.cu; same contract and bits.
#include <cstdint>
#include <functional>

#include <cuda_runtime_api.h>

namespace parity::cuda {

// Whether gemm_bf16_mma can take these operands: K in whole 32-deep steps, A rows readable as
// 16-byte vectors, W 16-byte aligned.
bool gemm_mma_fits(const float* A, int K, int lda, const void* W);
// C[M][N] = A · Wᵀ (+ bias) with W bf16 [w_rows][K]; rows of W up to w_rows (>= N) may be read.
// A is first rounded to bf16 into a scratch buffer the module keeps per device and stream (grown,
// never freed); the tile is chosen from M and N.
void gemm_bf16_mma(const float* A, int M, int K, int lda, const void* W, int w_rows, int N, const float* bias, float* C,
                   int ldc, cudaStream_t s);

// The MoE's experts (gemm_grouped's contract, ops.h) on these tiles: rows [0, total_rows) of A are
// rounded once, then group z's rows [offsets[z], offsets[z+1]) meet the weights at W + z·w_stride.
void gemm_grouped_bf16_mma(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int total_rows,
                           int K, const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s);

// Rounds A [M][lda] (K % 8 == 0, 16-byte aligned rows) to a bf16 [M][K] copy on stream s and calls
// enqueue with it: the GEMM that reads it must be enqueued there, on s. The copy lives in a scratch
// buffer the module keeps per device and stream; a lock held meanwhile keeps two host threads that
// share a stream from interleaving their passes.
void with_bf16_rows(const float* A, int M, int K, int lda, cudaStream_t s,
                    const std::function<void(const void* a16)>& enqueue);
// gemm_rounded's way in (ops.h): while `enqueue` runs on this thread, with_bf16_rows for this A, M and K
// hands its enqueue a16 (the caller's bf16 copy of A, [M][K]) instead of rounding A into scratch. The
// GEMM kernels need not know: those that take a pre-rounded A get the caller's, with no pre-pass.
void with_rounded_rows(const float* A, int M, int K, const void* a16, const std::function<void()>& enqueue);

// For tests: the number of tiles gemm_bf16_mma chooses from, and the same pass on tile `tile`
// (0 = largest) whatever M and N.
int gemm_mma_tile_count();
void gemm_bf16_mma_tile(int tile, const float* A, int M, int K, int lda, const void* W, int w_rows, int N,
                        const float* bias, float* C, int ldc, cudaStream_t s);

}  // namespace parity::cuda
