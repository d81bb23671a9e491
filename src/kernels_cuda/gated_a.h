#pragma once
// out_proj of a one-row decode pass with the gated RMSNorm before it done by out_proj's own blocks
// (issue 11: the norm's launch leaves a batch-1 step's critical path). Each block of the swap-AB
// mma.sync kernel (gemm_swap_ab_mma.cuh's GNORM) runs the norm's held form over the whole row with
// 256 threads, the gated_rmsnorm kernel's own code (norm_row.cuh: the same thread owns the same
// elements, the same block_sum tree), and keeps the bf16 result, the copy gated_rmsnorm would write
// for out_proj, in shared memory as A's one row; the GEMM's steps are unchanged. So the output has
// the bits of gated_rmsnorm then out_proj (CudaGatedOutProj tests, CudaFusedModel end to end). The
// fp32 norm output is not written: only a probe reads it, and a probe takes the two launches.
#include <cuda_runtime_api.h>

namespace parity::cuda {

struct GatedA {
  const float* y = nullptr;  // [K]: the SSM step's output row
  const float* z = nullptr;  // [K]: the gate (in_proj's z columns of the row, or silu(z): z_activated)
  const float* w = nullptr;  // [K]: the norm's weights
  int group = 0;             // the norm's width: K (one group)
  float eps = 0.0f;
  bool norm_before_gate = false;
  bool z_activated = false;  // z holds silu(z) (conv1d's GateJob), as gated_rmsnorm's z_activated
};

// C[1][N] = gated_rmsnorm(y, z) · Wᵀ (+ bias), W bf16 [N][K]. Returns false, launching nothing, where it
// does not apply (K != group, K above the held form's 6144 or not a multiple of 32, W not 16-byte
// aligned, switched off): the caller then launches gated_rmsnorm and the GEMM.
bool gemm_bf16_gated_row(const GatedA& a, int K, const void* W, int N, const float* bias, float* C, cudaStream_t s);
// Off by default: on the H200 (session 12, BM_CudaDecodeParts gemmfuse 0 against 2, same call) it made a
// batch-1 step slower (plain 2.79 -> 2.86 ms, exact 3.26 -> 3.23 within noise); session 23, from the conv's
// gate factors (gemmfuse 4 against 6), +10 % plain and exact. Tests and benchmarks switch it on to compare
// (a model's graphs record it).
inline constexpr bool kGatedOutProjDefault = false;
bool gated_out_proj();
void set_gated_out_proj(bool on);

}  // namespace parity::cuda
