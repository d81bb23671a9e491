// Batch-invariant GEMM: C[M][N] = A[M][K] · W[N][K]ᵀ (+ bias).
//
// Every output element accumulates over K in one order: 32-wide K tiles ascending, and within a
// tile two 16-deep tensor-core steps (bf16) or 32 FMAs (fp32) ascending, into one fp32
// accumulator; the bias is added once at the end. The tile an element lands in, M, and the
// element's place in the tile change nothing in that sequence, so a row's bits are the same for
// M = 1 and M = 4096 (DESIGN.md rule 3; tests/cuda/cuda_gemm_test.cpp checks M = 1..4096). gemm()
// picks among kernels that all compute that sequence: the 8-column decode kernel for a few rows
// against a wide W (gemm_gemv.cu: every SM streams its share of W, A rounded in the kernel), the
// swap-AB kernel for decode-sized M (gemm_swap_ab.cu: the weights as the tensor cores' 64- or
// 16-row side, up to kSwapAbMaxRows), the
// wgmma/TMA tiles above that (gemm_wgmma.cu), the mma.sync tiles (gemm_mma.cu) for what neither
// takes, and the WMMA tiles here for operands those cannot take (K not a multiple of 32, A or W not
// 16-byte aligned). The few-rows mma.sync kernel (gemm_skinny.cu) stays reachable directly (tests,
// benchmarks) and serves gemm_grouped's few-rows case.
#include <mma.h>

#include <atomic>
#include <cstdint>

#include <cuda_bf16.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_gemv.h"
#include "kernels_cuda/gemm_mma.h"
#include "kernels_cuda/gemm_skinny.h"
#include "kernels_cuda/gemm_swap_ab.h"
#include "kernels_cuda/gemm_wgmma.h"
#include "kernels_cuda/ops.h"

namespace parity::cuda {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
constexpr int kPad = 8;  // bf16 row padding: ldm stays a multiple of 8 and banks spread
// From this many rows on the wgmma tiles (128-row blocks) take a pass the swap-AB kernel does not
// (above kSwapAbMaxRows); below, the mma.sync tiles' 32- and 64-row blocks waste less. Speed alone
// decides: all give the same bits.
constexpr int kWgmmaMinRows = 128;

// One 64×64 output tile at (m0, n0); the plain and the grouped kernels below run exactly this.
__device__ __forceinline__ void gemm_bf16_tile(const float* A, int M, int K, int lda, const __nv_bfloat16* W, int N,
                                               const float* bias, float* C, int ldc, int m0, int n0) {
  using namespace nvcuda;
  __shared__ __align__(32) __nv_bfloat16 As[kBM][kBK + kPad];
  __shared__ __align__(32) __nv_bfloat16 Ws[kBN][kBK + kPad];
  __shared__ __align__(32) float Cs[kBM][kBN + 4];
  const int warp = threadIdx.x / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // each warp: a 32×32 quarter
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int k0 = 0; k0 < K; k0 += kBK) {
    // 64×32 elements of each operand, 16 per thread; zero outside the matrices.
    for (int e = threadIdx.x; e < kBM * kBK; e += kThreads) {
      const int r = e / kBK, c = e % kBK;
      const int gm = m0 + r, gk = k0 + c;
      As[r][c] = __float2bfloat16_rn(gm < M && gk < K ? A[static_cast<std::size_t>(gm) * lda + gk] : 0.0f);
      const int gn = n0 + r;
      Ws[r][c] = gn < N && gk < K ? W[static_cast<std::size_t>(gn) * K + gk] : __float2bfloat16_rn(0.0f);
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[wm + 16 * i][kk], kBK + kPad);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Ws[wn + 16 * j][kk], kBK + kPad);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&Cs[wm + 16 * i][wn + 16 * j], acc[i][j], kBN + 4, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
    const int r = e / kBN, c = e % kBN;
    const int gm = m0 + r, gn = n0 + c;
    if (gm < M && gn < N) C[static_cast<std::size_t>(gm) * ldc + gn] = bias ? Cs[r][c] + bias[gn] : Cs[r][c];
  }
}

__global__ void __launch_bounds__(kThreads) gemm_bf16_kernel(const float* A, int M, int K, int lda,
                                                             const __nv_bfloat16* W, int N, const float* bias,
                                                             float* C, int ldc) {
  gemm_bf16_tile(A, M, K, lda, W, N, bias, C, ldc, blockIdx.y * kBM, blockIdx.x * kBN);
}

// The fp32 path for accuracy work: each thread owns a 4×4 block of outputs, one fmaf chain per
// element over k ascending.
__device__ __forceinline__ void gemm_f32_tile(const float* A, int M, int K, int lda, const float* W, int N,
                                              const float* bias, float* C, int ldc, int m0, int n0) {
  __shared__ float As[kBK][kBM + 1];
  __shared__ float Ws[kBK][kBN + 1];
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;  // 16×16 threads, 4×4 outputs each
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int e = threadIdx.x; e < kBM * kBK; e += 256) {
      const int r = e / kBK, c = e % kBK;
      const int gm = m0 + r, gn = n0 + r, gk = k0 + c;
      As[c][r] = gm < M && gk < K ? A[static_cast<std::size_t>(gm) * lda + gk] : 0.0f;
      Ws[c][r] = gn < N && gk < K ? W[static_cast<std::size_t>(gn) * K + gk] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kBK; ++k)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(As[k][tr * 4 + i], Ws[k][tc * 4 + j], acc[i][j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int gm = m0 + tr * 4 + i, gn = n0 + tc * 4 + j;
      if (gm < M && gn < N) C[static_cast<std::size_t>(gm) * ldc + gn] = bias ? acc[i][j] + bias[gn] : acc[i][j];
    }
}

__global__ void __launch_bounds__(256) gemm_f32_kernel(const float* A, int M, int K, int lda, const float* W, int N,
                                                       const float* bias, float* C, int ldc) {
  gemm_f32_tile(A, M, K, lda, W, N, bias, C, ldc, blockIdx.y * kBM, blockIdx.x * kBN);
}

// Grouped: group z owns rows [offsets[z], offsets[z+1]) of A and C and the weights at W + z·w_stride;
// grid.y covers the largest group, and tiles past a group's rows return at once. A group's rows are
// computed by the tile functions above exactly as gemm() would compute them alone.
template <typename Tw, int kT>
__global__ void __launch_bounds__(kT) gemm_grouped_kernel(const float* A, int lda, const int32_t* offsets, int K,
                                                          const Tw* W, int64_t w_stride, int N, float* C, int ldc) {
  const int z = blockIdx.z, r0 = offsets[z], rows = offsets[z + 1] - r0, m0 = blockIdx.y * kBM;
  if (m0 >= rows) return;
  const float* a = A + static_cast<std::size_t>(r0) * lda;
  float* c = C + static_cast<std::size_t>(r0) * ldc;
  if constexpr (kT == kThreads) gemm_bf16_tile(a, rows, K, lda, W + z * w_stride, N, nullptr, c, ldc, m0, blockIdx.x * kBN);
  else gemm_f32_tile(a, rows, K, lda, W + z * w_stride, N, nullptr, c, ldc, m0, blockIdx.x * kBN);
}

}  // namespace

void gemm_grouped(const float* A, int lda, const int32_t* offsets, int groups, int max_rows, int K, const void* W,
                  WeightType wt, int64_t w_stride, int N, float* C, int ldc, cudaStream_t s, int total_rows) {
  if (groups <= 0 || max_rows <= 0 || N <= 0) return;
  // Few rows in all (fewer than one per group on average: a decode step of a few tokens): 16-row tiles of
  // each group stream their expert's weights (gemm_skinny.cu). Without it every active expert streamed its
  // weights through 64×64 WMMA tiles holding one or two rows (300 µs for one token over 64 experts, top-6,
  // on an H200). From one row per group on, the mma tiles below win: 64 tokens over granite-h-tiny's 64
  // experts (384 rows) take 59 + 35 µs on them against 174 + 116 µs on the few-rows kernel's grouped
  // default (BM_CudaMoeGroupedGemm). Every path gives the same bits, so the choice is speed alone.
  const bool few_in_all = total_rows <= 0 || total_rows < groups;
  if (wt == WeightType::BF16 && few_in_all && max_rows <= kSkinnyMaxGroupRows && gemm_mma_fits(A, K, lda, W) &&
      w_stride % 8 == 0) {
    gemm_grouped_bf16_skinny(A, lda, offsets, groups, max_rows, K, W, w_stride, N, C, ldc, s);
    return;
  }
  // Prefill-sized groups (kWgmmaMinRows per group on average and more): the wgmma tiles, as gemm()
  // takes them for as many rows (the same bits).
  if (wt == WeightType::BF16 && total_rows > 0 && total_rows >= kWgmmaMinRows * groups &&
      groups <= gemm_wgmma_max_groups() && gemm_wgmma_fits(A, K, lda, W) && w_stride % 8 == 0) {
    gemm_grouped_bf16_wgmma(A, lda, offsets, groups, total_rows, K, W, w_stride, N, C, ldc, s);
    return;
  }
  // Prefill-sized groups: the pipelined mma tiles (the same bits; every expert's weights 16-byte aligned).
  if (wt == WeightType::BF16 && total_rows > 0 && gemm_mma_fits(A, K, lda, W) && (w_stride * 2) % 16 == 0) {
    gemm_grouped_bf16_mma(A, lda, offsets, groups, max_rows, total_rows, K, W, w_stride, N, C, ldc, s);
    return;
  }
  const dim3 grid((N + kBN - 1) / kBN, (max_rows + kBM - 1) / kBM, groups);
  if (wt == WeightType::BF16)
    gemm_grouped_kernel<__nv_bfloat16, kThreads><<<grid, kThreads, 0, s>>>(
        A, lda, offsets, K, static_cast<const __nv_bfloat16*>(W), w_stride, N, C, ldc);
  else
    gemm_grouped_kernel<float, 256><<<grid, 256, 0, s>>>(A, lda, offsets, K, static_cast<const float*>(W), w_stride, N,
                                                         C, ldc);
  check_launch("gemm_grouped");
}

namespace {

// gemm()'s kernel for these operands: one choice, which gemm_rounded_reads_copy_only asks too.
enum class GemmPath { Gemv, SwapAb, Wgmma, Mma, Bf16Tiles, F32Tiles };

GemmPath choose_path(const float* A, int M, int K, int lda, const void* W, WeightType wt, int N) {
  if (wt != WeightType::BF16) return GemmPath::F32Tiles;
  // Decode rows against a wide W (lm_head): 8-column tiles over every SM, no pre-pass launch, where
  // they measured faster than swap-AB (gemm_gemv_preferred).
  if (gemm_gemv_preferred(M, K, N) && gemm_gemv_fits(A, K, lda, W)) return GemmPath::Gemv;
  // Decode-sized passes: the weights' read bandwidth (wgmma with the weights as its 64-row operand).
  if (M <= kSwapAbMaxRows && gemm_swap_ab_fits(A, K, lda, W)) return GemmPath::SwapAb;
  if (M >= kWgmmaMinRows && gemm_wgmma_fits(A, K, lda, W)) return GemmPath::Wgmma;
  if (gemm_mma_fits(A, K, lda, W)) return GemmPath::Mma;
  return GemmPath::Bf16Tiles;
}

std::atomic<bool> copy_only_norms_on{true};

}  // namespace

void gemm(const float* A, int M, int K, int lda, const void* W, WeightType wt, int N, const float* bias, float* C,
          int ldc, cudaStream_t s, int w_rows) {
  if (M <= 0 || N <= 0) return;
  const dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
  switch (choose_path(A, M, K, lda, W, wt, N)) {
    case GemmPath::Gemv: gemm_bf16_gemv(A, M, K, lda, W, N, bias, C, ldc, s); return;
    case GemmPath::SwapAb: gemm_bf16_swap_ab(A, M, K, lda, W, N, bias, C, ldc, s); return;
    case GemmPath::Wgmma: gemm_bf16_wgmma(A, M, K, lda, W, N, bias, C, ldc, s); break;
    case GemmPath::Mma: gemm_bf16_mma(A, M, K, lda, W, w_rows > N ? w_rows : N, N, bias, C, ldc, s); break;
    case GemmPath::Bf16Tiles:
      gemm_bf16_kernel<<<grid, kThreads, 0, s>>>(A, M, K, lda, static_cast<const __nv_bfloat16*>(W), N, bias, C, ldc);
      break;
    case GemmPath::F32Tiles:
      gemm_f32_kernel<<<grid, 256, 0, s>>>(A, M, K, lda, static_cast<const float*>(W), N, bias, C, ldc);
      break;
  }
  check_launch("gemm");
}

bool copy_only_norms() { return copy_only_norms_on.load(); }
void set_copy_only_norms(bool on) { copy_only_norms_on.store(on); }

bool gemm_rounded_reads_copy_only(const float* A, const uint16_t* a16, int M, int K, int lda, const void* W,
                                  WeightType wt, int N) {
  if (!copy_only_norms() || M <= 0 || N <= 0) return false;
  if (a16 == nullptr || reinterpret_cast<std::uintptr_t>(a16) % 16 != 0) return false;  // gemm_rounded's own test
  // Only the many-rows tiles are vouched for: every launch of theirs goes through with_bf16_rows, which
  // takes the lent copy; the other kernels may read A's fp32 values.
  return choose_path(A, M, K, lda, W, wt, N) == GemmPath::Wgmma;
}

void gemm_rounded(const float* A, const uint16_t* a16, int M, int K, int lda, const void* W, WeightType wt, int N,
                  const float* bias, float* C, int ldc, cudaStream_t s, int w_rows) {
  // A copy the tensor maps cannot take (or none) leaves the GEMM to round A itself: the same bits.
  if (a16 == nullptr || reinterpret_cast<std::uintptr_t>(a16) % 16 != 0 || wt != WeightType::BF16) {
    gemm(A, M, K, lda, W, wt, N, bias, C, ldc, s, w_rows);
    return;
  }
  with_rounded_rows(A, M, K, a16, [&] { gemm(A, M, K, lda, W, wt, N, bias, C, ldc, s, w_rows); });
}

}  // namespace parity::cuda
