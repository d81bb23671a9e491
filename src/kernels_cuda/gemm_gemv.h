#pragma once
// The decode-sized bf16 GEMM (gemm_gemv.cu): up to 16 rows of A against the weights at their read
// bandwidth, 8-column mma.sync tiles with the weights as the B operand, spread over every SM, A
// rounded to bf16 inside the kernel (no pre-pass launch). Same contract and bits as the other bf16
// kernels (gemm.cu).
#include <cuda_runtime_api.h>

namespace parity::cuda {

// The most rows of A the kernel takes (one m16 tile); gemm() sends it fewer (gemm_gemv_preferred).
constexpr int kGemvMaxRows = 16;

// Whether gemm_bf16_gemv can take these operands: K a multiple of 32, A's rows 16-byte aligned
// (A 16-byte aligned, lda a multiple of 4: the bulk copies), W 16-byte aligned (the tensor map).
bool gemm_gemv_fits(const float* A, int K, int lda, const void* W);

// Whether gemm_bf16_gemv takes M rows of K: M <= kGemvMaxRows and A's rows in bf16 fit the share of
// shared memory they may take (M · 2K bytes up to ~96 KiB: K = 5120 up to 9 rows, K = 2560 all 16).
bool gemm_gemv_takes(int M, int K);

// Whether gemm() sends these rows here rather than to the swap-AB kernel: only where the H200
// measured it faster (session 10, BM_CudaGemmGemv, µs, M = 1 / 4, warm; cold in brackets):
//   lm_head 50288×2560  65.2 (73.1) / 65.9 (73.5)  against swap-AB 67.6 (74.2) / 68.2 (74.6)
//   in_proj 10576×2560  20.1 (24.5) / 20.1 (24.9)  against swap-AB 20.3 (25.6) / 20.5 (24.7): even
//   out_proj 2560×5120  19.7 (20.9) / 20.8 (22.8)  against swap-AB 17.1 (19.6) / 17.2 (20.7): slower
// and at 8 and 16 rows even or slower on every shape. So: up to 4 rows, and W at least 256 rows per
// SM (its blocks run whole passes of W; at fewer rows per SM the chain of K/16 dependent steps,
// ~70 cycles each on mma.sync, bounds it). A function of M, K, N and the SM count only.
bool gemm_gemv_preferred(int M, int K, int N);

// C[M][N] = A · Wᵀ (+ bias) for gemm_gemv_takes(M, K), W bf16 [N][K] (only rows < N are read).
// variant < 0: the default (pdl while gemm_early_flags() is set, programmatic_launch.cuh; else
// auto); else one of gemm_gemv_variants() (tests and benchmarks compare them; all
// give the same bits). blocks > 0 forces how many blocks the columns are split over (tests: the
// split and the passes it needs change no bit); 0: the variant's blocks per SM on every SM.
void gemm_bf16_gemv(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C, int ldc,
                    cudaStream_t s, int variant = -1, int blocks = 0);

// C = C + (A · Wᵀ (+ bias)): the pass above with the residual add of the result folded into its
// store, the bits of gemm_bf16_gemv into a scratch y followed by add_inplace(C, y) (ops.h), without
// the scratch or the second launch. C must not overlap A.
void gemm_bf16_gemv_add(const float* A, int M, int K, int lda, const void* W, int N, const float* bias, float* C,
                        int ldc, cudaStream_t s, int variant = -1);

// Benchmarks only: the same launch (no bias) with one side of the pipeline alone. probe 1: W and A
// stream through the ring, the consumers only wait for and release each stage (C untouched); probe
// 2: nothing is copied, the consumers read fragments and multiply whatever the ring holds (C is not
// the product). What bounds the kernel is the side whose probe time is near the full pass's.
void gemm_bf16_gemv_probe(int probe, const float* A, int M, int K, int lda, const void* W, int N, float* C, int ldc,
                          cudaStream_t s, int variant = -1);

int gemm_gemv_variants();
const char* gemm_gemv_variant_name(int variant);

}  // namespace parity::cuda
