#pragma once
// The few-rows bf16 GEMM kernel (gemm_skinny.cu): decode-sized passes, up to 16 rows of A, at the
// weights' read bandwidth. Used by gemm() and gemm_grouped() in gemm.cu; same contract and bits as
// the tiled kernels (gemm_mma.h): it takes the operands gemm_mma_fits accepts.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace parity::cuda {

// gemm() takes this kernel up to this many rows; gemm_grouped() while no group has more than
// kSkinnyMaxGroupRows (a group's rows then run as 16-row tiles, each streaming the expert's weights).
constexpr int kSkinnyMaxRows = 16;
constexpr int kSkinnyMaxGroupRows = 64;

// C[M][N] = A · Wᵀ (+ bias) for M <= 16, W bf16 [N][K] (only rows < N are read). variant < 0: the
// default; else one of gemm_skinny_variants() (tests and benchmarks compare them; all give the same
// bits), which takes up to gemm_skinny_variant_rows(variant) rows. blocks > 0 forces the number of
// blocks the N columns are split over (tests: the split changes no bit); 0: one per SM.
void gemm_bf16_skinny(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                      cudaStream_t s, int variant = -1, int blocks = 0);

// Benchmarks only: the same launch (blocks = 0, no bias) with one side of the pipeline alone.
// probe 1: the weights stream through the ring, the consumers only wait for and release each stage;
// probe 2: nothing is copied, the consumers compute on whatever the ring holds. C is not the product
// (probe 1 writes nothing). What limits the kernel is the side whose probe time is near the full time.
void gemm_bf16_skinny_probe(int probe, const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc,
                            cudaStream_t s, int variant);

// gemm_grouped's few-rows path (max_rows <= kSkinnyMaxGroupRows; w_stride a multiple of 8): group
// z's rows of A in 16-row tiles against the weights at W + z·w_stride. variant < 0: the default;
// else one of gemm_skinny_grouped_variants() (the first variants of the plain list). Its default is
// the per-row bulk copies (no tensor map to encode per launch); gemm_bf16_skinny's the tensor maps.
void gemm_grouped_bf16_skinny(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K,
                              const void* W, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s,
                              int variant = -1);

int gemm_skinny_variants();
int gemm_skinny_variant_rows(int variant);
int gemm_skinny_grouped_variants();
const char* gemm_skinny_variant_name(int variant);

}  // namespace parity::cuda
